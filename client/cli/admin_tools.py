"""``configs describe|alter`` (kafka-configs.sh), ``groups delete`` (kafka-consumer-groups.sh
--delete), ``transactions describe-producers|find-hanging`` (kafka-transactions.sh).

    minibroker configs describe --topic events
    minibroker configs alter --topic events --add-config retention.ms=60000,cleanup.policy=compact
    minibroker transactions find-hanging
"""

from __future__ import annotations

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
)
from client.cli.groups import groups
from client.cli.transactions import format_duration, transactions
from client.structs import AlterConfigOp, ConfigResource

# -- configs ----------------------------------------------------------------------------------------


@click.group(context_settings=CONTEXT)
def configs() -> None:
    """Describe and alter topic and broker configs."""


def _resource(topic: str | None, broker: str | None) -> ConfigResource:
    if (topic is None) == (broker is None):
        raise click.UsageError("give --topic NAME or --broker ID")
    return ConfigResource("topic", topic) if topic is not None else ConfigResource("broker", broker)


@configs.command("describe")
@click.option("--topic", default=None, help="A topic's configs.")
@click.option("--broker", default=None, metavar="ID", help="A broker's configs (its node id).")
@click.option("--all", "show_all", is_flag=True,
              help="Every config, defaults included (default: only those set).")
@format_option
@client_options
@friendly_errors
def configs_describe(topic, broker, show_all, fmt, conf) -> None:
    """Configs of a topic or broker with their source (DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG,
    DEFAULT_CONFIG ...)."""
    resource = _resource(topic, broker)
    with Admin(for_admin(conf)) as admin:
        entries = admin.describe_configs([resource])[resource]
    shown = sorted(e for e in entries.values() if show_all or not e.is_default)
    if fmt == "json":
        echo_json([{"name": e.name, "value": None if e.is_sensitive else e.value,
                    "source": e.source, "read_only": e.read_only, "sensitive": e.is_sensitive}
                   for e in shown])
        return
    echo_table(["NAME", "VALUE", "SOURCE"],
               [(e.name, "(sensitive)" if e.is_sensitive else e.value, e.source) for e in shown])


def _split_configs(items: tuple[str, ...]) -> list[str]:
    return [part for item in items for part in item.split(",") if part.strip()]


@configs.command("alter")
@click.option("--topic", default=None)
@click.option("--broker", default=None, metavar="ID")
@click.option("--add-config", "add", multiple=True, metavar="K=V[,K=V]",
              help="Set these configs (comma-separated or repeated).")
@click.option("--delete-config", "delete", multiple=True, metavar="K[,K]",
              help="Return these configs to their default.")
@client_options
@friendly_errors
def configs_alter(topic, broker, add, delete, conf) -> None:
    """Set or delete configs of a topic or broker (IncrementalAlterConfigs: the others stay)."""
    resource = _resource(topic, broker)
    ops = [AlterConfigOp(k, "set", v) for k, v in
           (key_value(item, "--add-config") for item in _split_configs(add))]
    ops += [AlterConfigOp(name.strip(), "delete") for name in _split_configs(delete)]
    if not ops:
        raise click.UsageError("give --add-config and/or --delete-config")
    with Admin(for_admin(conf)) as admin:
        error = admin.incremental_alter_configs({resource: ops})[resource]
    if error is not None:
        raise error
    click.echo(f"Completed updating config for {resource.type} {resource.name}.")


# -- groups delete ----------------------------------------------------------------------------------


@groups.command("delete")
@click.option("-g", "--group", "group_ids", multiple=True, required=True,
              help="Group to delete (no members), repeatable.")
@client_options
@friendly_errors
def groups_delete(group_ids, conf) -> None:
    """Delete groups and their committed offsets (they must have no active member)."""
    with Admin(for_admin(conf)) as admin:
        results = admin.delete_groups(group_ids)
    failed = {g: e for g, e in results.items() if e is not None}
    for group_id in group_ids:
        if group_id not in failed:
            click.echo(f"Deleted consumer group '{group_id}'.")
    if failed:
        group_id, error = next(iter(failed.items()))
        raise click.ClickException(
            f"cannot delete group {group_id!r}: {type(error).__name__}: {error}"
        )


# -- transactions describe-producers / find-hanging ---------------------------------------------


@transactions.command("describe-producers")
@click.option("--topic", required=True)
@click.option("--partition", type=int, required=True)
@format_option
@client_options
@friendly_errors
def describe_producers(topic, partition, fmt, conf) -> None:
    """The active producers of a partition: epoch, last sequence and timestamp, and the start
    offset of the transaction each has open there."""
    with Admin(for_admin(conf)) as admin:
        producers = admin.describe_producers([(topic, partition)])
    rows = [p for states in producers.values() for p in states]
    if fmt == "json":
        echo_json([p._asdict() for p in rows])
        return
    echo_table(
        ["PRODUCER ID", "EPOCH", "COORDINATOR EPOCH", "LAST SEQUENCE", "LAST TIMESTAMP",
         "CURRENT TXN START OFFSET"],
        [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
          p.last_timestamp, None if p.current_txn_start_offset < 0 else p.current_txn_start_offset)
         for p in rows],
    )


@transactions.command("find-hanging")
@click.option("--topic", "topics", multiple=True, help="Only these topics, repeatable.")
@click.option("--max-transaction-timeout", type=click.IntRange(min=1), default=900_000,
              show_default=True, help="ms; longer-running transactions count as hanging.")
@format_option
@client_options
@friendly_errors
def find_hanging(topics, max_transaction_timeout, fmt, conf) -> None:
    """Transactions open on a partition that no coordinator is running (or running longer than
    the longest timeout): they hold back the last stable offset until aborted."""
    with Admin(for_admin(conf)) as admin:
        hanging = admin.find_hanging_transactions(list(topics) or None, max_transaction_timeout)
    if fmt == "json":
        echo_json([{"topic": h.partition.topic, "partition": h.partition.partition,
                    "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
                    "coordinator_epoch": h.coordinator_epoch, "start_offset": h.start_offset,
                    "transactional_id": h.transactional_id, "age_ms": h.age_ms}
                   for h in hanging])
        return
    echo_table(
        ["TOPIC", "PARTITION", "PRODUCER ID", "EPOCH", "START OFFSET", "TRANSACTIONAL ID", "AGE"],
        [(h.partition.topic, h.partition.partition, h.producer_id, h.producer_epoch,
          h.start_offset, h.transactional_id, None if h.age_ms < 0 else format_duration(h.age_ms))
         for h in hanging],
    )
