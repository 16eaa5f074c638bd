"""Client commands of the ``minibroker`` CLI: topics, produce, consume, groups.

``COMMANDS`` is what ``broker/cli.py`` adds to its click group. Every command takes
``--bootstrap-server`` (default localhost:9092) and ``-X key=value`` for any other client setting
(Kafka keys, validated like the client's config). Errors print one line and exit with status 1.

    minibroker topics create events --partitions 6
    printf 'k1:hello\\nk2:world\\n' | minibroker produce events --key-separator :
    minibroker consume events --from-beginning --max-messages 2 --format json
"""

from __future__ import annotations

import base64
import functools
import json
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import click

from client.admin import Admin
from client.consumer import Consumer
from client.errors import KafkaClientError
from client.producer import Producer
from client.structs import ConsumerRecord

DEFAULT_BOOTSTRAP = "localhost:9092"


def _client_options(fn: Callable) -> Callable:
    fn = click.option(
        "-X",
        "--config",
        "extra_config",
        multiple=True,
        metavar="KEY=VALUE",
        help="Extra client setting (Kafka key), repeatable.",
    )(fn)
    fn = click.option(
        "--bootstrap-server",
        "bootstrap",
        default=DEFAULT_BOOTSTRAP,
        show_default=True,
        envvar="MINIBROKER_BOOTSTRAP_SERVER",
        help="host:port of a broker.",
    )(fn)
    return fn


def _config(bootstrap: str, extra: Iterable[str], **settings: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap}
    config.update({k: v for k, v in settings.items() if v is not None})
    for item in extra:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="-X")
        config[key.strip()] = value
    return config


def _friendly_errors(fn: Callable) -> Callable:
    """Turn client errors into one readable line and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KafkaClientError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
        except OSError as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper


# -- topics ---------------------------------------------------------------------------------------


@click.group()
def topics() -> None:
    """Create, list, describe and delete topics."""


@topics.command("create")
@click.argument("name")
@click.option(
    "-p",
    "--partitions",
    type=int,
    default=-1,
    help="Partition count (default: the broker's num.partitions).",
)
@click.option(
    "--topic-config",
    multiple=True,
    metavar="KEY=VALUE",
    help="Topic setting, repeatable (e.g. retention.ms=60000).",
)
@click.option("--if-not-exists", is_flag=True, help="No error if the topic exists.")
@_client_options
@_friendly_errors
def topics_create(name, partitions, topic_config, if_not_exists, bootstrap, extra_config) -> None:
    """Create topic NAME."""
    configs = {}
    for item in topic_config:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--topic-config")
        configs[key] = value
    with Admin(_config(bootstrap, extra_config)) as admin:
        admin.create_topic(name, partitions, configs=configs, exist_ok=if_not_exists)
    click.echo(f"Created topic {name}.")


@topics.command("list")
@click.option("--internal", is_flag=True, help="Include internal topics.")
@_client_options
@_friendly_errors
def topics_list(internal, bootstrap, extra_config) -> None:
    """List topic names."""
    with Admin(_config(bootstrap, extra_config)) as admin:
        for name in admin.list_topics(include_internal=internal):
            click.echo(name)


@topics.command("describe")
@click.argument("names", nargs=-1)
@_client_options
@_friendly_errors
def topics_describe(names, bootstrap, extra_config) -> None:
    """Show partitions, leaders and replicas (all topics without NAMES)."""
    with Admin(_config(bootstrap, extra_config)) as admin:
        described = admin.describe_topics(names or None)
    for topic in described:
        internal = "  internal" if topic.is_internal else ""
        click.echo(f"Topic: {topic.name}\tPartitionCount: {len(topic.partitions)}{internal}")
        for p in topic.partitions:
            replicas = ",".join(map(str, p.replicas))
            isr = ",".join(map(str, p.isr))
            click.echo(
                f"\tPartition: {p.partition}\tLeader: {p.leader}\tReplicas: {replicas}\tIsr: {isr}"
            )


@topics.command("delete")
@click.argument("names", nargs=-1, required=True)
@_client_options
@_friendly_errors
def topics_delete(names, bootstrap, extra_config) -> None:
    """Delete topics NAMES."""
    with Admin(_config(bootstrap, extra_config)) as admin:
        results = admin.delete_topics(names)
    failed = {name: err for name, err in results.items() if err is not None}
    for name in names:
        if name not in failed:
            click.echo(f"Deleted topic {name}.")
    if failed:
        name, err = next(iter(failed.items()))
        raise click.ClickException(f"cannot delete {name}: {err}")


# -- produce --------------------------------------------------------------------------------------


@click.command()
@click.argument("topic")
@click.option(
    "-f",
    "--file",
    "source",
    type=click.File("r", encoding="utf-8"),
    default="-",
    help="Read lines from this file (default: stdin).",
)
@click.option(
    "-K",
    "--key-separator",
    default=None,
    help="Split each line at the first SEP into key and value.",
)
@click.option(
    "--transactional-id", default=None, help="Send all lines in one transaction with this id."
)
@click.option(
    "--acks",
    type=click.Choice(["all", "-1", "0", "1"]),
    default=None,
    help="Acknowledgements to wait for.  [default: all]",
)
@click.option(
    "-p", "--partition", type=int, default=None, help="Send every record to this partition."
)
@click.option(
    "-H",
    "--header",
    "headers",
    multiple=True,
    metavar="KEY=VALUE",
    help="Header added to every record, repeatable.",
)
@_client_options
@_friendly_errors
def produce(
    topic,
    source: TextIO,
    key_separator,
    transactional_id,
    acks,
    partition,
    headers,
    bootstrap,
    extra_config,
) -> None:
    """Send each line of input to TOPIC as one record."""
    record_headers = []
    for item in headers:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--header")
        record_headers.append((key, value.encode()))
    settings: dict[str, Any] = {"transactional.id": transactional_id}
    if acks is not None:
        settings["acks"] = acks
        if acks in ("0", "1"):
            settings["enable.idempotence"] = False
    config = _config(bootstrap, extra_config, **settings)
    count = 0
    errors: list[BaseException] = []

    def delivered(err: BaseException | None, _metadata: Any) -> None:
        if err is not None:
            errors.append(err)

    with Producer(config) as producer:
        if transactional_id:
            producer.init_transactions()
            producer.begin_transaction()
        for line in source:
            line = line.rstrip("\r\n")
            key = None
            if key_separator is not None:
                key, sep, value = line.partition(key_separator)
                if not sep:
                    key, value = None, line
            else:
                value = line
            producer.send(
                topic,
                value,
                key=key,
                partition=partition,
                headers=record_headers or None,
                on_delivery=delivered,
            )
            count += 1
        if transactional_id:
            producer.commit_transaction()
        else:
            producer.flush()
    if errors:
        raise click.ClickException(f"{len(errors)} of {count} records failed: {errors[0]}")
    click.echo(f"Produced {count} record(s) to {topic}.", err=True)


# -- consume --------------------------------------------------------------------------------------


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def _json_value(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _format(record: ConsumerRecord, fmt: str, print_key: bool) -> str:
    if fmt == "json":
        return json.dumps(
            {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "timestamp": record.timestamp,
                "key": _json_value(record.key),
                "value": _json_value(record.value),
                "headers": [[k, _json_value(v)] for k, v in record.headers],
            },
            ensure_ascii=False,
        )
    value = _text(record.value) or ""
    if print_key:
        return f"{_text(record.key) or ''}\t{value}"
    return value


@click.command()
@click.argument("topic")
@click.option(
    "--from-beginning", is_flag=True, help="Start at the earliest offset when none is committed."
)
@click.option(
    "-g", "--group", default=None, help="Consume as a member of this group (commits offsets)."
)
@click.option(
    "--isolation-level",
    type=click.Choice(["read_committed", "read_uncommitted"]),
    default="read_committed",
    show_default=True,
)
@click.option("-n", "--max-messages", type=int, default=None, help="Exit after this many records.")
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option("--print-key", is_flag=True, help="Text format: print key<TAB>value.")
@click.option(
    "--timeout",
    "idle_timeout",
    type=float,
    default=None,
    help="Exit after this many seconds without a record.",
)
@_client_options
@_friendly_errors
def consume(
    topic,
    from_beginning,
    group,
    isolation_level,
    max_messages,
    fmt,
    print_key,
    idle_timeout,
    bootstrap,
    extra_config,
) -> None:
    """Print records of TOPIC, one per line."""
    settings = {
        "group.id": group,
        "isolation.level": isolation_level,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
    }
    if group:
        # Commit what was printed, after printing it (not the positions of a whole poll).
        settings["enable.auto.commit"] = False
    config = _config(bootstrap, extra_config, **settings)
    printed = 0
    out = click.get_text_stream("stdout")
    with Consumer(config) as consumer:
        if group:
            consumer.subscribe([topic])
        else:
            consumer.assign(consumer.partitions_for(topic))
        last_record = time.monotonic()
        try:
            while max_messages is None or printed < max_messages:
                records = consumer.poll(0.5)
                if not records:
                    if idle_timeout is not None and time.monotonic() - last_record >= idle_timeout:
                        break
                    continue
                last_record = time.monotonic()
                if max_messages is not None:
                    records = records[: max_messages - printed]
                for record in records:
                    out.write(_format(record, fmt, print_key) + "\n")
                out.flush()
                printed += len(records)
                if group:
                    consumer.commit({(r.topic, r.partition): r.offset + 1 for r in records})
        except KeyboardInterrupt:
            pass
    if printed and max_messages is None:
        click.echo(f"Processed {printed} record(s).", err=True)


# -- groups ---------------------------------------------------------------------------------------


@click.group()
def groups() -> None:
    """List and describe consumer groups."""


@groups.command("list")
@_client_options
@_friendly_errors
def groups_list(bootstrap, extra_config) -> None:
    """List group ids."""
    with Admin(_config(bootstrap, extra_config)) as admin:
        for group in admin.list_groups():
            click.echo(group.group_id)


@groups.command("describe")
@click.argument("group_ids", nargs=-1, required=True)
@_client_options
@_friendly_errors
def groups_describe(group_ids, bootstrap, extra_config) -> None:
    """Show state, members, assignments, committed offsets and lag of groups.

    Lag is the partition's last stable offset (what a read_committed consumer can reach) minus
    the committed offset.
    """
    config = _config(bootstrap, extra_config)
    with Admin(config) as admin:
        descriptions = admin.describe_groups(group_ids)
        offsets = {g: admin.list_group_offsets(g) for g in group_ids}
    committed_partitions = {tp for per_group in offsets.values() for tp in per_group}
    end_offsets: dict = {}
    if committed_partitions:
        with Consumer(config) as consumer:
            end_offsets = consumer.end_offsets(committed_partitions)
    for group in descriptions:
        click.echo(
            f"Group: {group.group_id}\tState: {group.state}\tProtocol: {group.protocol_type}/{group.protocol}"
        )
        for member in group.members:
            assigned = ",".join(f"{tp.topic}-{tp.partition}" for tp in member.assignment)
            click.echo(
                f"\tMember: {member.member_id}\tClient: {member.client_id}@{member.client_host}\tAssigned: {assigned}"
            )
        for tp, offset in sorted(offsets.get(group.group_id, {}).items()):
            end = end_offsets.get(tp)
            lag = "?" if end is None else max(end - offset.offset, 0)
            click.echo(f"\tOffset: {tp.topic}-{tp.partition}\t{offset.offset}\tLag: {lag}")


COMMANDS: list[click.Command] = [topics, produce, consume, groups]


@click.group()
def main() -> None:
    """Client tools (the same commands as ``minibroker``)."""


for _command in COMMANDS:
    main.add_command(_command)


if __name__ == "__main__":
    main(prog_name=sys.argv[0])
