"""``topics create|list|describe|alter|delete`` and ``get-offsets`` (kafka-topics.sh,
kafka-get-offsets.sh), with kafka-topics.sh's option names: ``--topic``, ``--config`` (a topic
config; ``--topic-config`` is the older name), ``--partitions``, ``--exclude-internal``."""

from __future__ import annotations

import base64
import re
import uuid

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
from protocol.api_keys import ApiKey


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


PARTITION_FILTERS = ("under_replicated", "unavailable", "under_min_isr", "at_min_isr")


@tool(topics, "describe", formats=True)
@name_argument("names", "--topic", multiple=True, required=False, metavar="TOPIC")
@click.option("--exclude-internal", is_flag=True, help="Without TOPIC: leave internal topics out.")
@click.option("--under-replicated-partitions", "under_replicated", is_flag=True,
              help="Only partitions with fewer in-sync replicas than replicas (none: one copy).")
@click.option("--unavailable-partitions", "unavailable", is_flag=True,
              help="Only partitions without a leader (none while the broker answers).")
@click.option("--under-min-isr-partitions", "under_min_isr", is_flag=True,
              help="Only partitions with fewer in-sync replicas than min.insync.replicas.")
@click.option("--at-min-isr-partitions", "at_min_isr", is_flag=True,
              help="Only partitions whose in-sync replicas are exactly min.insync.replicas "
                   "(1: every partition here).")
@click.option("--topics-with-overrides", is_flag=True,
              help="Only topics with config overrides (their first line only).")
@click.option("--partition-size-limit-per-response", type=click.IntRange(min=1), default=None,
              help="Accepted for kafka-topics.sh (a paging size of DescribeTopicPartitions).")
def topics_describe(names, exclude_internal, under_replicated, unavailable, under_min_isr,
                    at_min_isr, topics_with_overrides, partition_size_limit_per_response, fmt,
                    conf) -> None:
    """Show partitions, leaders and replicas (all topics without TOPIC)."""
    del partition_size_limit_per_response
    with Admin(for_admin(conf)) as admin:
        described = admin.describe_topics(names or None)
        if exclude_internal:
            described = [t for t in described if not t.is_internal]
        if fmt == "text":
            filters = {"under_replicated": under_replicated, "unavailable": unavailable,
                       "under_min_isr": under_min_isr, "at_min_isr": at_min_isr}
            _describe_text(admin, described, {k for k, v in filters.items() if v},
                           topics_with_overrides)
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


def _describe_text(admin: Admin, described: list, filters: set[str] = frozenset(),
                   with_overrides: bool = False) -> None:
    """kafka-topics.sh --describe's lines: a topic's line and its partitions' (with a partition
    filter, only the partitions that match; with --topics-with-overrides, only the topic lines
    of topics with overrides)."""
    # Kafka's tool reads partitions with DescribeTopicPartitions where the broker serves it and
    # prints the eligible leader replicas it answers (none on one broker: empty); else "N/A".
    elr = "" if any(key == ApiKey.DESCRIBE_TOPIC_PARTITIONS for answer in admin.api_versions()
                    for key, _, _ in answer["api_keys"]) else "N/A"
    for topic in described:
        if not filters:
            overrides = _set_configs(admin, topic.name, dynamic_only=True)
            if with_overrides and not overrides:
                continue
            configs = _set_configs(admin, topic.name)
            factor = len(topic.partitions[0].replicas) if topic.partitions else 0
            shown_id = f"\tTopicId: {kafka_uuid(topic.topic_id)}" if topic.topic_id else ""
            click.echo(f"Topic: {topic.name}{shown_id}\tPartitionCount: {len(topic.partitions)}"
                       f"\tReplicationFactor: {factor}\tConfigs: {configs}")
            if with_overrides:
                continue
        min_isr = 1  # min.insync.replicas: one copy
        for p in topic.partitions:
            matches = {"under_replicated": len(p.isr) < len(p.replicas),
                       "unavailable": p.leader < 0,
                       "under_min_isr": len(p.isr) < min_isr,
                       "at_min_isr": len(p.isr) == min_isr}
            if filters and not any(matches[f] for f in filters):
                continue
            replicas = ",".join(map(str, p.replicas))
            isr = ",".join(map(str, p.isr))
            click.echo(
                f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: {p.leader}"
                f"\tReplicas: {replicas}\tIsr: {isr}\tElr: {elr}\tLastKnownElr: {elr}"
            )


def kafka_uuid(value: uuid.UUID) -> str:
    """A UUID as Kafka's tools print it (``Uuid.toString``: URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def _set_configs(admin: Admin, topic: str, dynamic_only: bool = False) -> str:
    """kafka-topics.sh --describe's ``Configs:``: every config not at its default (the topic's
    overrides and the values server.properties set; ``dynamic_only``: the overrides),
    ``k=v`` comma-separated."""
    resource = ConfigResource("topic", topic)
    try:
        entries = admin.describe_configs([resource])[resource]
    except KafkaClientError:
        return ""
    return ",".join(f"{e.name}={e.value}" for e in sorted(entries.values(), key=lambda e: e.name)
                    if not e.is_default
                    and (not dynamic_only or e.source == "DYNAMIC_TOPIC_CONFIG"))


@tool(topics, "alter")
@name_argument("name", "--topic", metavar="TOPIC")
@click.option("-p", "--partitions", type=click.IntRange(min=1), required=True,
              help="The new partition count (it can only grow).")
@click.option("--if-exists", is_flag=True, help="Nothing to do (no error) if TOPIC does not exist.")
def topics_alter(name, partitions, if_exists, conf) -> None:
    """Add partitions to TOPIC (kafka-topics.sh --alter --partitions; configs are changed with
    `configs alter`)."""
    with Admin(for_admin(conf)) as admin:
        if if_exists and name not in admin.list_topics(include_internal=True):
            return
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
@click.option("--if-exists", is_flag=True, help="No error for a topic that does not exist.")
def topics_delete(names, if_exists, conf) -> None:
    """Delete topics TOPIC..."""
    with Admin(for_admin(conf)) as admin:
        if if_exists:
            existing = set(admin.list_topics(include_internal=True))
            names = tuple(n for n in names if n in existing)
            if not names:
                return
        results = admin.delete_topics(names)
    echo_deleted(names, results, "Deleted topic {}.", "cannot delete {}")


TIME_NAMES = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4}


def parse_time_spec(text: str) -> int:
    """kafka-get-offsets.sh's ``--time``: -1/latest, -2/earliest, -3/max-timestamp (the offset
    of the largest timestamp), -4/earliest-local, or a time (epoch ms, ISO-8601)."""
    lowered = text.strip().lower()
    if lowered in TIME_NAMES:
        return TIME_NAMES[lowered]
    if lowered in ("-5", "latest-tiered"):
        raise click.BadParameter(f"{text!r}: latest-tiered needs tiered storage, which this "
                                 "broker does not have", param_hint="--time")
    value = parse_datetime(text)
    if value < -4:
        raise click.BadParameter(f"{text!r}: use -1 (latest), -2 (earliest), -3 "
                                 "(max-timestamp), -4 (earliest-local) or a time")
    return value


def _topic_partitions(text: str) -> list[tuple[str, set[int] | None]]:
    """kafka-get-offsets.sh's ``--topic-partitions``: ``T``, ``T:0``, ``T:1-3``, ``T:4-``,
    comma-separated (T a regular expression) -> [(pattern, partitions or None for all)]."""
    result: list[tuple[str, set[int] | None]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        pattern, sep, spec = item.rpartition(":") if ":" in item else (item, "", "")
        if not sep:
            result.append((item, None))
            continue
        low, dash, high = spec.partition("-")
        try:
            if not dash:
                chosen: set[int] | None = {int(low)}
            elif not high:
                chosen = set(range(int(low), 1 << 16))
            else:
                chosen = set(range(int(low or 0), int(high)))
        except ValueError:
            raise click.BadParameter(f"{item!r} is not TOPIC[:PARTITION|:FROM-TO]",
                                     param_hint="--topic-partitions") from None
        result.append((pattern, chosen))
    return result


def _matching(names: list[str], pattern: str) -> list[str]:
    if pattern in names:
        return [pattern]
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise click.BadParameter(f"{pattern!r}: {exc}", param_hint="--topic") from None
    return [n for n in names if compiled.fullmatch(n)]


@click.command("get-offsets", context_settings=CONTEXT)
@name_argument("topic", "--topic", required=False, metavar="TOPIC",
               help="A topic, or a regular expression of topics (default: every topic).")
@click.option("-p", "--partitions", "partitions", default=None, metavar="LIST",
              help="Comma-separated partitions.  [default: all]")
@click.option("--topic-partitions", default=None, metavar="T:P,T:FROM-TO,T",
              help="kafka-get-offsets.sh's topic-partition patterns (not with --topic).")
@click.option("--exclude-internal-topics", is_flag=True,
              help="Leave out the internal topics a pattern matches.")
@click.option("--time", "time_spec", default="latest", show_default=True,
              help="latest (-1), earliest (-2), max-timestamp (-3), earliest-local (-4), or a "
                   "time: epoch ms or ISO-8601 (UTC if no zone).")
@click.option("--isolation-level", type=click.Choice(["read_committed", "read_uncommitted"]),
              default="read_uncommitted", show_default=True,
              help="latest is the high watermark, or the last stable offset for read_committed.")
@format_option
@client_options
@friendly_errors
def get_offsets(topic, partitions, topic_partitions, exclude_internal_topics, time_spec,
                isolation_level, fmt, conf) -> None:
    """Offsets of partitions at a time (kafka-get-offsets.sh): TOPIC:PARTITION:OFFSET, for
    TOPIC (a name or a regular expression), --topic-partitions, or every topic."""
    spec = parse_time_spec(time_spec)
    wanted = _int_list(partitions, "--partitions")
    if topic_partitions is not None and (topic is not None or wanted):
        raise click.UsageError("--topic-partitions cannot be used with --topic or --partitions")
    with Admin(for_admin(conf)) as admin:
        names = admin.list_topics(include_internal=not exclude_internal_topics)
        if topic_partitions is not None:
            patterns = _topic_partitions(topic_partitions)
        else:
            patterns = [(topic if topic is not None else ".*", set(wanted) if wanted else None)]
        chosen: dict[tuple[str, int], int] = {}
        exact = topic is not None and topic in names and wanted
        for pattern, parts in patterns:
            for name in _matching(names, pattern):
                if exact:
                    numbers = existing_partitions(admin, name, wanted)
                else:
                    numbers = [p for p in existing_partitions(admin, name)
                               if parts is None or p in parts]
                chosen.update({(name, p): spec for p in numbers})
        if topic is not None and not chosen and re.escape(topic) == topic:  # (a name)
            raise click.ClickException(f"topic {topic!r} does not exist")
        found = admin.list_offsets(chosen, read_committed=isolation_level == "read_committed") \
            if chosen else {}
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
