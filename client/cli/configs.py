"""``configs describe|alter`` (kafka-configs.sh), ``log-dirs`` (kafka-log-dirs.sh) and
``delete-records`` (kafka-delete-records.sh).

    minibroker configs describe --topic events
    minibroker configs describe --entity-type topics --entity-name events
    minibroker configs alter --topic events --add-config retention.ms=60000,cleanup.policy=compact
    minibroker log-dirs --topic-list events
    minibroker delete-records --topic events --partition 0 --offset 100
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from client.admin import Admin
from client.cli.common import (
    CONTEXT,
    client_options,
    echo_json,
    echo_table,
    for_admin,
    format_option,
    friendly_errors,
    key_value,
    tool,
)
from client.structs import AlterConfigOp, ConfigResource

# -- configs ----------------------------------------------------------------------------------------

ENTITY_TYPES = {"topics": "topic", "topic": "topic", "brokers": "broker", "broker": "broker"}


@click.group(context_settings=CONTEXT)
def configs() -> None:
    """Describe and alter topic and broker configs (kafka-configs.sh; its --describe and
    --alter work as well)."""


def _resource(topic: str | None, broker: str | None, entity_type: str | None,
              entity_name: str | None) -> ConfigResource:
    if entity_type is not None or entity_name is not None:
        if topic is not None or broker is not None:
            raise click.UsageError("give --topic/--broker or --entity-type/--entity-name")
        if entity_type is None or entity_name is None:
            raise click.UsageError("--entity-type and --entity-name go together")
        kind = ENTITY_TYPES.get(entity_type.lower())
        if kind is None:
            raise click.UsageError(f"entity type {entity_type!r}: this broker has topics and "
                                   "brokers (users: `minibroker users`, ACLs: `minibroker acls`)")
        return ConfigResource(kind, entity_name)
    if (topic is None) == (broker is None):
        raise click.UsageError("give --topic NAME or --broker ID (or --entity-type and "
                               "--entity-name)")
    return ConfigResource("topic", topic) if topic is not None else ConfigResource("broker", broker)


def entity_options(fn):
    for option in reversed([
        click.option("--topic", default=None, help="A topic's configs."),
        click.option("--broker", default=None, metavar="ID", help="A broker's configs (its id)."),
        click.option("--entity-type", default=None, metavar="topics|brokers",
                     help="kafka-configs.sh's form, with --entity-name."),
        click.option("--entity-name", default=None, metavar="NAME"),
    ]):
        fn = option(fn)
    return fn


@tool(configs, "describe")
@entity_options
@click.option("--all", "show_all", is_flag=True,
              help="Every config, defaults included (default: only the dynamic ones, as "
                   "kafka-configs.sh; this broker's are a topic's overrides).")
@click.option("--entity-default", is_flag=True,
              help="kafka-configs.sh's cluster-wide broker defaults (none here: dynamic broker "
                   "configs are not kept).")
@click.option("--format", "fmt", type=click.Choice(["text", "table", "json"]), default="text",
              show_default=True,
              help="text: kafka-configs.sh's lines with synonyms; table: every effective config "
                   "with its source; json.")
def configs_describe(topic, broker, entity_type, entity_name, show_all, entity_default, fmt,
                     conf) -> None:
    """Configs of a topic or broker with their source and synonyms (kafka-configs.sh
    --describe): DYNAMIC_TOPIC_CONFIG for a topic's override, STATIC_BROKER_CONFIG for
    server.properties, DEFAULT_CONFIG."""
    if entity_default:
        if entity_name is not None or topic is not None:
            raise click.UsageError("--entity-default goes with --entity-type brokers, without "
                                   "a name")
        if (entity_type or "brokers").lower() not in ("brokers", "broker"):
            raise click.UsageError("--entity-default: this broker keeps no dynamic defaults "
                                   "for users, clients or IPs")
        entity_type, entity_name = "brokers", ""
    resource = _resource(topic, broker, entity_type, entity_name)
    with Admin(for_admin(conf)) as admin:
        entries = admin.describe_configs([resource], include_synonyms=True)[resource]
    if fmt == "text":
        _echo_kafka_configs(resource, entries, show_all)
        return
    everything = show_all or resource.type == "topic"
    shown = sorted((e for e in entries.values() if everything or not e.is_default),
                   key=lambda e: (e.source != "DYNAMIC_TOPIC_CONFIG", e.name))
    if fmt == "json":
        echo_json([{"name": e.name, "value": None if e.is_sensitive else e.value,
                    "source": e.source, "read_only": e.read_only, "sensitive": e.is_sensitive,
                    "synonyms": [{"name": s.name, "value": s.value, "source": s.source}
                                 for s in e.synonyms]}
                   for e in shown])
        return
    echo_table(["NAME", "VALUE", "SOURCE"],
               [(e.name, "(sensitive)" if e.is_sensitive else e.value, e.source) for e in shown])


DYNAMIC_SOURCE = {"topic": "DYNAMIC_TOPIC_CONFIG", "broker": "DYNAMIC_BROKER_CONFIG"}


def _echo_kafka_configs(resource: ConfigResource, entries: dict, show_all: bool) -> None:
    """kafka-configs.sh --describe's lines: a heading, then ``  name=value sensitive=false
    synonyms={SOURCE:name=value, ...}`` for each config (the dynamic ones unless --all), by
    name."""
    if resource.type == "broker" and resource.name == "":
        click.echo("Default configs for brokers in the cluster are:")
        wanted = "DYNAMIC_DEFAULT_BROKER_CONFIG"
    else:
        click.echo(f"{'All' if show_all else 'Dynamic'} configs for {resource.type} "
                   f"{resource.name} are:")
        wanted = DYNAMIC_SOURCE[resource.type]
    for entry in sorted(entries.values(), key=lambda e: e.name):
        if not show_all and entry.source != wanted:
            continue
        synonyms = ", ".join(f"{s.source}:{s.name}={_java(s.value)}" for s in entry.synonyms)
        click.echo(f"  {entry.name}={_java(entry.value)} "
                   f"sensitive={str(entry.is_sensitive).lower()} synonyms={{{synonyms}}}")


def _java(value: str | None) -> str:
    return "null" if value is None else value


def _split_configs(items: tuple[str, ...]) -> list[str]:
    from client.cli.topics import _split_pairs

    return [part for item in items for part in _split_pairs(item)]


@tool(configs, "alter")
@entity_options
@click.option("--add-config", "add", multiple=True, metavar="K=V[,K=V]",
              help="Set these configs (comma-separated or repeated).")
@click.option("--delete-config", "delete", multiple=True, metavar="K[,K]",
              help="Return these configs to their default.")
def configs_alter(topic, broker, entity_type, entity_name, add, delete, conf) -> None:
    """Set or delete configs of a topic or broker (IncrementalAlterConfigs: the others stay)."""
    resource = _resource(topic, broker, entity_type, entity_name)
    ops = [AlterConfigOp(k.strip(), "set", v) for k, v in
           (key_value(item, "--add-config") for item in _split_configs(add))]
    ops += [AlterConfigOp(name.strip(), "delete")
            for item in delete for name in item.split(",") if name.strip()]
    if not ops:
        raise click.UsageError("give --add-config and/or --delete-config")
    with Admin(for_admin(conf)) as admin:
        error = admin.incremental_alter_configs({resource: ops})[resource]
    if error is not None:
        raise error
    click.echo(f"Completed updating config for {resource.type} {resource.name}.")


# -- log-dirs ---------------------------------------------------------------------------------------


@click.command("log-dirs", context_settings=CONTEXT)
@click.option("--topic-list", default=None, metavar="T1,T2",
              help="Only these topics.  [default: all]")
@click.option("--broker-list", default=None, metavar="ID,ID",
              help="Accepted for kafka-log-dirs.sh (one broker here).")
@format_option
@client_options
@friendly_errors
def log_dirs(topic_list, broker_list, fmt, conf) -> None:
    """The broker's log directory and the size of each partition in it (kafka-log-dirs.sh
    --describe: DescribeLogDirs)."""
    del broker_list
    topics = [t.strip() for t in topic_list.split(",") if t.strip()] if topic_list else None
    with Admin(for_admin(conf)) as admin:
        wanted = None
        if topics is not None:
            wanted = {t.name: [p.partition for p in t.partitions]
                      for t in admin.describe_topics(topics)}
        found = admin.describe_log_dirs(wanted)
    result = [{"broker": node, "logDirs": [
        {"logDir": d.path, "error": None if not d.error_code else d.error_code,
         "totalBytes": d.total_bytes, "usableBytes": d.usable_bytes,
         "partitions": [{"partition": f"{tp.topic}-{tp.partition}", "size": size,
                         "offsetLag": 0, "isFuture": False}
                        for tp, size in sorted(d.partitions.items())]}
        for d in dirs]} for node, dirs in sorted(found.items())]
    if fmt == "json":
        echo_json({"version": 1, "brokers": result})
        return
    echo_table(["BROKER", "LOG-DIR", "PARTITION", "SIZE"],
               [(b["broker"], d["logDir"], p["partition"], p["size"])
                for b in result for d in b["logDirs"] for p in d["partitions"]])


# -- delete-records ---------------------------------------------------------------------------------


@click.command("delete-records", context_settings=CONTEXT)
@click.option("--offset-json-file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              default=None,
              help='kafka-delete-records.sh\'s file: {"partitions": [{"topic": "t", '
                   '"partition": 0, "offset": 10}]} (offset -1: the high watermark).')
@click.option("--topic", default=None, help="Instead of the file: this topic ...")
@click.option("--partition", type=click.IntRange(min=0), default=None, help="... partition ...")
@click.option("--offset", type=click.IntRange(min=-1), default=None,
              help="... and offset (-1: the high watermark).")
@format_option
@client_options
@friendly_errors
def delete_records(offset_json_file, topic, partition, offset, fmt, conf) -> None:
    """Delete the records before an offset: the partition's log start moves there
    (DeleteRecords)."""
    wanted: dict[tuple[str, int], int] = {}
    if offset_json_file is not None:
        try:
            plan = json.loads(offset_json_file.read_text(encoding="utf-8"))
            for item in plan["partitions"]:
                wanted[(str(item["topic"]), int(item["partition"]))] = int(item["offset"])
        except (ValueError, KeyError, TypeError) as exc:
            raise click.BadParameter(f"{offset_json_file}: not a kafka-delete-records.sh offset "
                                     f"file ({exc})", param_hint="--offset-json-file") from None
    if topic is not None or partition is not None or offset is not None:
        if None in (topic, partition, offset):
            raise click.UsageError("--topic, --partition and --offset go together")
        wanted[(topic, partition)] = offset
    if not wanted:
        raise click.UsageError("give --offset-json-file, or --topic, --partition and --offset")
    with Admin(for_admin(conf)) as admin:
        low = admin.delete_records(wanted)
    rows = sorted((tp.topic, tp.partition, start) for tp, start in low.items())
    if fmt == "json":
        echo_json([{"topic": t, "partition": p, "low_watermark": w} for t, p, w in rows])
        return
    click.echo("Records delete operation completed:")
    for t, p, w in rows:
        click.echo(f"partition: {t}-{p}\tlow_watermark: {w}")
