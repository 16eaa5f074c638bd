"""``topics create|list|describe|alter|delete`` and ``get-offsets`` (kafka-topics.sh,
kafka-get-offsets.sh), with kafka-topics.sh's option names: ``--topic``, ``--config`` (a topic
config; ``--topic-config`` is the older name), ``--partitions``, ``--exclude-internal``."""

from __future__ import annotations

import click

from client.admin import Admin
from client.aio.admin import raise_first
from client.cli.common import (
    CONTEXT,
    client_options,
    echo_deleted,
    echo_json,
    existing_partitions,
    for_admin,
    format_option,
    friendly_errors,
    key_value,
    name_argument,
    parse_datetime,
    tool,
)
from client.errors import KafkaClientError, TopicAlreadyExistsError
from client.structs import ConfigResource, NewTopic


@click.group(context_settings=CONTEXT)
def topics() -> None:
    """Create, list, describe, alter and delete topics (kafka-topics.sh; its --create, --list,
    ... work as well)."""


def topic_configs(items: tuple[str, ...]) -> dict[str, str]:
    """``--config k=v`` (repeatable, or comma-separated as kafka-configs.sh takes them)."""
    return dict(key_value(part.strip(), "--config") for item in items
                for part in _split_pairs(item))


def _split_pairs(item: str) -> list[str]:
    """``a=1,b=x,y`` -> ``["a=1", "b=x,y"]``: a comma starts a new pair only before ``key=``
    (cleanup.policy=compact,delete keeps its comma)."""
    parts: list[str] = []
    for piece in item.split(","):
        if parts and "=" not in piece:
            parts[-1] += "," + piece
        else:
            parts.append(piece)
    return [p for p in parts if p.strip()]


@tool(topics, "create")
@name_argument("name", "--topic", metavar="TOPIC")
@click.option("-p", "--partitions", type=click.IntRange(min=1), default=None,
              help="Partition count.  [default: the broker's num.partitions]")
@click.option("--replication-factor", type=click.IntRange(min=1), default=None,
              help="Accepted for Kafka compatibility; must be 1 on a single broker.")
@click.option("--config", "--topic-config", "--config-entry", "topic_config", multiple=True,
              metavar="KEY=VALUE",
              help="Topic config, repeatable (e.g. --config retention.ms=60000), as "
                   "kafka-topics.sh; client settings are -X.")
@click.option("--if-not-exists", is_flag=True, help="No error if the topic exists.")
def topics_create(name, partitions, replication_factor, topic_config, if_not_exists,
                  conf) -> None:
    """Create topic TOPIC."""
    configs = topic_configs(topic_config)
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


@tool(topics, "list", formats=True)
@click.option("--internal/--exclude-internal", default=True,
              help="Include internal topics (__consumer_offsets, __transaction_state) or not; "
                   "as kafka-topics.sh, they are listed unless --exclude-internal.")
def topics_list(internal, fmt, conf) -> None:
    """List topic names."""
    with Admin(for_admin(conf)) as admin:
        names = admin.list_topics(include_internal=internal)
    if fmt == "json":
        echo_json(names)
    else:
        for name in names:
            click.echo(name)


@tool(topics, "describe", formats=True)
@name_argument("names", "--topic", multiple=True, required=False, metavar="TOPIC")
@click.option("--exclude-internal", is_flag=True, help="Without TOPIC: leave internal topics out.")
def topics_describe(names, exclude_internal, fmt, conf) -> None:
    """Show partitions, leaders and replicas (all topics without TOPIC)."""
    with Admin(for_admin(conf)) as admin:
        described = admin.describe_topics(names or None)
        if exclude_internal:
            described = [t for t in described if not t.is_internal]
        if fmt == "text":
            _describe_text(admin, described)
            return
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


def _describe_text(admin: Admin, described: list) -> None:
    """kafka-topics.sh --describe's lines."""
    for topic in described:
        configs = _set_configs(admin, topic.name)
        factor = len(topic.partitions[0].replicas) if topic.partitions else 0
        click.echo(f"Topic: {topic.name}\tPartitionCount: {len(topic.partitions)}"
                   f"\tReplicationFactor: {factor}\tConfigs: {configs}")
        for p in topic.partitions:
            replicas = ",".join(map(str, p.replicas))
            isr = ",".join(map(str, p.isr))
            # Elr, LastKnownElr: N/A, as Kafka's tool prints them for a broker without
            # DescribeTopicPartitions (eligible leader replicas need replication anyway).
            click.echo(
                f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: {p.leader}"
                f"\tReplicas: {replicas}\tIsr: {isr}\tElr: N/A\tLastKnownElr: N/A"
            )


def _set_configs(admin: Admin, topic: str) -> str:
    """kafka-topics.sh --describe's ``Configs:``: every config not at its default (the topic's
    overrides and the values server.properties set), ``k=v`` comma-separated."""
    resource = ConfigResource("topic", topic)
    try:
        entries = admin.describe_configs([resource])[resource]
    except KafkaClientError:
        return ""
    return ",".join(f"{e.name}={e.value}" for e in sorted(entries.values(), key=lambda e: e.name)
                    if not e.is_default)


@tool(topics, "alter")
@name_argument("name", "--topic", metavar="TOPIC")
@click.option("-p", "--partitions", type=click.IntRange(min=1), required=True,
              help="The new partition count (it can only grow).")
def topics_alter(name, partitions, conf) -> None:
    """Add partitions to TOPIC (kafka-topics.sh --alter --partitions; configs are changed with
    `configs alter`)."""
    with Admin(for_admin(conf)) as admin:
        (described,) = admin.describe_topics([name])
        if len(described.partitions) == partitions:
            click.echo(f"Topic {name} already has {partitions} partition(s).")
            return
        error = admin.create_partitions({name: partitions})[name]
    if error is not None:
        raise error
    click.echo(f"Topic {name} now has {partitions} partitions.")


@tool(topics, "delete")
@name_argument("names", "--topic", multiple=True, metavar="TOPIC")
def topics_delete(names, conf) -> None:
    """Delete topics TOPIC..."""
    with Admin(for_admin(conf)) as admin:
        results = admin.delete_topics(names)
    echo_deleted(names, results, "Deleted topic {}.", "cannot delete {}")


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
@name_argument("topic", "--topic", metavar="TOPIC")
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
