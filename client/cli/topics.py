"""``topics create|list|describe|delete`` and ``get-offsets`` (kafka-topics.sh,
kafka-get-offsets.sh)."""

from __future__ import annotations

import click

from client.admin import Admin
from client.aio.admin import raise_first
from client.cli.common import (
    CONTEXT,
    client_options,
    echo_json,
    existing_partitions,
    for_admin,
    format_option,
    friendly_errors,
    key_value,
    parse_datetime,
)
from client.errors import TopicAlreadyExistsError
from client.structs import NewTopic


@click.group(context_settings=CONTEXT)
def topics() -> None:
    """Create, list, describe and delete topics."""


@topics.command("create")
@click.argument("name")
@click.option("-p", "--partitions", type=click.IntRange(min=1), default=None,
              help="Partition count.  [default: the broker's num.partitions]")
@click.option("--replication-factor", type=click.IntRange(min=1), default=None,
              help="Accepted for Kafka compatibility; must be 1 on a single broker.")
@click.option("--topic-config", "--config-entry", "topic_config", multiple=True,
              metavar="KEY=VALUE", help="Topic setting, repeatable (e.g. retention.ms=60000).")
@click.option("--if-not-exists", is_flag=True, help="No error if the topic exists.")
@client_options
@friendly_errors
def topics_create(name, partitions, replication_factor, topic_config, if_not_exists,
                  conf) -> None:
    """Create topic NAME."""
    configs = dict(key_value(item, "--topic-config") for item in topic_config)
    with Admin(for_admin(conf)) as admin:
        results = admin.create_topics(
            [NewTopic(name, partitions or -1, replication_factor or -1, configs)]
        )
        try:
            raise_first(results)
        except TopicAlreadyExistsError:
            if not if_not_exists:
                raise
            click.echo(f"Topic {name} already exists.")
            return
    click.echo(f"Created topic {name}.")


@topics.command("list")
@click.option("--internal", is_flag=True, help="Include internal topics.")
@format_option
@client_options
@friendly_errors
def topics_list(internal, fmt, conf) -> None:
    """List topic names."""
    with Admin(for_admin(conf)) as admin:
        names = admin.list_topics(include_internal=internal)
    if fmt == "json":
        echo_json(names)
    else:
        for name in names:
            click.echo(name)


@topics.command("describe")
@click.argument("names", nargs=-1)
@format_option
@client_options
@friendly_errors
def topics_describe(names, fmt, conf) -> None:
    """Show partitions, leaders and replicas (all topics without NAMES)."""
    with Admin(for_admin(conf)) as admin:
        described = admin.describe_topics(names or None)
    if fmt == "json":
        echo_json([
            {
                "topic": t.name,
                "internal": t.is_internal,
                "partitions": [
                    {"partition": p.partition, "leader": p.leader, "replicas": list(p.replicas),
                     "isr": list(p.isr)}
                    for p in t.partitions
                ],
            }
            for t in described
        ])
        return
    for topic in described:
        internal = "\tInternal: true" if topic.is_internal else ""
        click.echo(f"Topic: {topic.name}\tPartitionCount: {len(topic.partitions)}{internal}")
        for p in topic.partitions:
            replicas = ",".join(map(str, p.replicas))
            isr = ",".join(map(str, p.isr))
            click.echo(
                f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: {p.leader}"
                f"\tReplicas: {replicas}\tIsr: {isr}"
            )


@topics.command("delete")
@click.argument("names", nargs=-1, required=True)
@client_options
@friendly_errors
def topics_delete(names, conf) -> None:
    """Delete topics NAMES."""
    with Admin(for_admin(conf)) as admin:
        results = admin.delete_topics(names)
    failed = {name: err for name, err in results.items() if err is not None}
    for name in names:
        if name not in failed:
            click.echo(f"Deleted topic {name}.")
    if failed:
        name, err = next(iter(failed.items()))
        raise click.ClickException(f"cannot delete {name}: {type(err).__name__}: {err}")


def parse_time_spec(text: str) -> int:
    """kafka-get-offsets.sh's ``--time``: -1/latest, -2/earliest, or a time (epoch ms, ISO)."""
    named = {"latest": -1, "earliest": -2}
    if text.lower() in named:
        return named[text.lower()]
    value = parse_datetime(text)
    if value < -2:
        raise click.BadParameter(f"{text!r}: use -1 (latest), -2 (earliest) or a time")
    return value


@click.command("get-offsets", context_settings=CONTEXT)
@click.argument("topic")
@click.option("-p", "--partitions", "partitions", default=None, metavar="LIST",
              help="Comma-separated partitions.  [default: all]")
@click.option("--time", "time_spec", default="latest", show_default=True,
              help="latest (-1), earliest (-2), or a time: epoch ms or ISO-8601 (UTC if no zone).")
@click.option("--isolation-level", type=click.Choice(["read_committed", "read_uncommitted"]),
              default="read_uncommitted", show_default=True,
              help="latest is the high watermark, or the last stable offset for read_committed.")
@format_option
@client_options
@friendly_errors
def get_offsets(topic, partitions, time_spec, isolation_level, fmt, conf) -> None:
    """Offsets of TOPIC's partitions at a time (kafka-get-offsets.sh): TOPIC:PARTITION:OFFSET."""
    spec = parse_time_spec(time_spec)
    wanted = _int_list(partitions, "--partitions")
    with Admin(for_admin(conf)) as admin:
        chosen = existing_partitions(admin, topic, wanted)
        found = admin.list_offsets({(topic, p): spec for p in chosen},
                                   read_committed=isolation_level == "read_committed")
    rows = sorted(found.items())
    if fmt == "json":
        echo_json([{"topic": tp.topic, "partition": tp.partition, "offset": offset,
                    "timestamp": ts} for tp, (offset, ts) in rows])
    else:
        for tp, (offset, _) in rows:
            click.echo(f"{tp.topic}:{tp.partition}:{offset if offset >= 0 else ''}")


def _int_list(text: str | None, hint: str) -> list[int]:
    if not text:
        return []
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of numbers",
                                 param_hint=hint) from None
