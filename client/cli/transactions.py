"""``transactions list|describe|abort|describe-producers|find-hanging`` (kafka-transactions.sh,
with its option names), through ``client.Admin``.

    minibroker transactions list --state Ongoing
    minibroker transactions describe --transactional-id my-transactional-id
    minibroker transactions abort --transactional-id my-transactional-id
    minibroker transactions abort --topic orders --partition 0 --start-offset 42
    minibroker transactions find-hanging
"""

from __future__ import annotations

import re
import time

import click

from client.admin import Admin
from client.cli.common import (
    CONTEXT,
    echo_json,
    echo_table,
    for_admin,
    name_argument,
    tool,
    with_defaults,
)
from client.errors import TransactionalIdNotFoundError, TransactionCoordinatorFencedError
from client.producer import Producer
from client.structs import TransactionDescription

HEADERS = ("TRANSACTIONAL ID", "STATE", "PRODUCER ID", "EPOCH", "PARTITIONS", "AGE", "TIMEOUT")
IN_PROGRESS = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
          "Dead", "PrepareEpochFence")


def format_duration(ms: int) -> str:
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _age_ms(t: TransactionDescription, now_ms: int) -> int | None:
    if t.state in IN_PROGRESS and t.start_time_ms >= 0:
        return max(now_ms - t.start_time_ms, 0)
    return None


def echo_kafka_table(headers: tuple[str, ...] | list[str], rows: list[tuple]) -> None:
    """kafka-transactions.sh's tables: every cell padded to its column's width and followed by
    a TAB; a missing value is ``None``."""
    cells = [list(headers), *[["None" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("".join(c.ljust(w) + "\t" for c, w in zip(row, widths, strict=True)))


def _coordinator(admin: Admin) -> int | str:
    """The coordinator column: this broker's id on a single broker ("-" on several, where each
    id has its own coordinator and our listing does not carry it)."""
    brokers = admin.describe_cluster()["brokers"]
    return brokers[0][0] if len(brokers) == 1 else "-"


KAFKA_DESCRIBE = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                  "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                  "TransactionDurationMs", "TopicPartitions")


def _echo(described: list[TransactionDescription], fmt: str,
          coordinator: int | str = "-") -> None:
    now = time.time_ns() // 1_000_000
    if fmt == "text":  # kafka-transactions.sh describe's
        rows = []
        for t in described:
            started = t.start_time_ms if t.start_time_ms >= 0 else None
            rows.append((coordinator, t.transactional_id, t.producer_id, t.producer_epoch,
                         t.state, t.timeout_ms, started,
                         None if started is None else max(now - started, 0),
                         ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(t.partitions))))
        echo_kafka_table(KAFKA_DESCRIBE, rows)
        return
    if fmt == "json":
        echo_json([
            {"transactional_id": t.transactional_id, "state": t.state,
             "producer_id": t.producer_id, "producer_epoch": t.producer_epoch,
             "partitions": [[tp.topic, tp.partition] for tp in t.partitions],
             "age_ms": _age_ms(t, now), "timeout_ms": t.timeout_ms}
            for t in described
        ])
        return
    rows = []
    for t in described:
        age = _age_ms(t, now)
        rows.append((
            t.transactional_id, t.state, t.producer_id, t.producer_epoch,
            ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(t.partitions)) or None,
            None if age is None else format_duration(age), format_duration(t.timeout_ms),
        ))
    echo_table(HEADERS, rows)


@click.group("transactions", context_settings=CONTEXT)
def transactions() -> None:
    """Inspect and abort transactions on a running broker."""


@tool(transactions, "list", formats=True)
@click.option("--state", "states", multiple=True, metavar="STATE",
              help="Only these states (Empty, Ongoing, PrepareCommit, ...), repeatable.")
@click.option("--producer-id", "producer_ids", type=int, multiple=True,
              help="Only these producer ids, repeatable.")
@click.option("--duration-filter", type=click.IntRange(min=0), default=None, metavar="MS",
              help="Only transactions open longer than this (kafka-transactions.sh's).")
@click.option("--transactional-id-pattern", default=None, metavar="REGEX",
              help="Only ids matching this regular expression (kafka-transactions.sh's).")
def list_transactions(states, producer_ids, duration_filter, transactional_id_pattern, fmt,
                      conf) -> None:
    """Every transactional id the coordinator knows, with its current transaction."""
    unknown = [s for s in states if s not in STATES]
    if unknown:
        raise click.ClickException(f"unknown transaction state(s): {', '.join(unknown)} "
                                   f"(states: {', '.join(STATES)})")
    with Admin(for_admin(conf)) as admin:
        listed = admin.list_transactions(states, producer_ids, duration_filter)
        if transactional_id_pattern is not None:
            try:
                pattern = re.compile(transactional_id_pattern)
            except re.error as exc:
                raise click.BadParameter(str(exc), param_hint="--transactional-id-pattern") \
                    from None
            listed = [t for t in listed if pattern.fullmatch(t.transactional_id)]
        if fmt == "text":  # kafka-transactions.sh list's columns
            coordinator = _coordinator(admin)
            echo_kafka_table(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"),
                             [(t.transactional_id, coordinator, t.producer_id, t.state)
                              for t in listed])
            return
        described = admin.describe_transactions([t.transactional_id for t in listed])
    _echo(described, fmt)


@tool(transactions, "describe", formats=True)
@name_argument("transactional_id", "--transactional-id", metavar="TRANSACTIONAL_ID")
def describe_transaction(transactional_id, fmt, conf) -> None:
    """One transactional id: state, producer id, epoch, partitions, age, timeout."""
    with Admin(for_admin(conf)) as admin:
        try:
            described = admin.describe_transactions([transactional_id])
        except TransactionalIdNotFoundError:
            raise click.ClickException(
                f"transactional id {transactional_id!r} not found"
            ) from None
        coordinator = _coordinator(admin) if fmt == "text" else "-"
    _echo(described, fmt, coordinator)


@tool(transactions, "abort", formats=True)
@name_argument("transactional_id", "--transactional-id", required=False,
               metavar="TRANSACTIONAL_ID",
               help="Abort this id's open transaction (its producer is fenced).")
@click.option("--topic", help="With --partition: abort a hanging transaction on this partition.")
@click.option("--partition", type=click.IntRange(min=0))
@click.option("--start-offset", type=click.IntRange(min=0),
              help="The hanging transaction's first offset (find-hanging, describe-producers).")
@click.option("--producer-id", type=click.IntRange(min=0),
              help="Instead of --start-offset: the producer id ...")
@click.option("--producer-epoch", type=click.IntRange(min=0, max=32767),
              help="... its epoch ...")
@click.option("--coordinator-epoch", type=click.IntRange(min=0), help="... and coordinator epoch.")
def abort_transaction(transactional_id, topic, partition, start_offset, producer_id,
                      producer_epoch, coordinator_epoch, fmt, conf) -> None:
    """Abort an open transaction, in one of two forms:

    \b
      [--transactional-id] ID    as a new producer instance of that id would: InitProducerId
                                 bumps the epoch, which fences the old producer and aborts its
                                 transaction (ABORT markers, then CompleteAbort);
      --topic T --partition P --start-offset O
                                 (or --producer-id/--producer-epoch/--coordinator-epoch): a
                                 hanging transaction that no coordinator runs any more, as
                                 kafka-transactions.sh does: an ABORT marker on that partition.
    """
    by_partition = (topic, partition, start_offset, producer_id, producer_epoch,
                    coordinator_epoch)
    if transactional_id is not None:
        if any(v is not None for v in by_partition):
            raise click.UsageError("--transactional-id cannot be combined with the partition "
                                   "options (--topic, --partition, ...)")
        _abort_by_id(transactional_id, fmt, conf)
        return
    if topic is None or partition is None:
        raise click.UsageError("give --transactional-id, or --topic and --partition")
    explicit = (producer_id, producer_epoch, coordinator_epoch)
    if (start_offset is None) == all(v is None for v in explicit):
        raise click.UsageError("give --start-offset, or --producer-id, --producer-epoch and "
                               "--coordinator-epoch")
    if start_offset is None and any(v is None for v in explicit):
        raise click.UsageError("--producer-id, --producer-epoch and --coordinator-epoch go "
                               "together")
    with Admin(for_admin(conf)) as admin:
        if start_offset is not None:
            states = admin.describe_producers([(topic, partition)])
            found = [s for ss in states.values() for s in ss
                     if s.current_txn_start_offset == start_offset]
            if not found:
                raise click.ClickException(
                    f"no open transaction starts at offset {start_offset} of {topic}-{partition}"
                )
            producer_id, producer_epoch, coordinator_epoch = (
                found[0].producer_id, found[0].producer_epoch, found[0].coordinator_epoch)
        try:
            admin.abort_transaction((topic, partition), producer_id, producer_epoch,
                                    coordinator_epoch)
        except TransactionCoordinatorFencedError as exc:
            running = [t.transactional_id for t in admin.list_transactions(
                producer_ids=[producer_id])]
            how = (f"transactions abort --transactional-id {running[0]}" if running
                   else "transactions abort --transactional-id ID")
            raise click.ClickException(
                f"{type(exc).__name__}: its coordinator still runs the transaction of producer "
                f"{producer_id} on {topic}-{partition} (not hanging); end it with `{how}`"
            ) from None
    result = {"topic": topic, "partition": partition, "producer_id": producer_id,
              "producer_epoch": producer_epoch, "coordinator_epoch": coordinator_epoch}
    if fmt == "json":
        echo_json([result])
    else:
        click.echo(f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}) "
                   f"on {topic}-{partition}.")


def _abort_by_id(transactional_id: str, fmt: str, conf) -> None:
    with Admin(for_admin(conf)) as admin:
        try:
            (before,) = admin.describe_transactions([transactional_id])
        except TransactionalIdNotFoundError:
            raise click.ClickException(
                f"transactional id {transactional_id!r} not found"
            ) from None
        if before.state not in IN_PROGRESS:
            click.echo(f"Transactional id {transactional_id} has no open transaction "
                       f"(state {before.state}).", err=True)
        else:
            # The id keeps its timeout: InitProducerId records the one it is given.
            producer_conf = with_defaults(conf, transactional_id=transactional_id,
                                          transaction_timeout_ms=before.timeout_ms,
                                          client_id="minibroker-transactions-abort")
            with Producer(producer_conf) as producer:
                producer.init_transactions()
            click.echo(f"Aborted the transaction of {transactional_id} "
                       f"(producer id {before.producer_id}, epoch {before.producer_epoch}).",
                       err=True)
        described = admin.describe_transactions([transactional_id])
    _echo(described, fmt)


@tool(transactions, "describe-producers", formats=True)
@click.option("--topic", required=True)
@click.option("--partition", type=int, required=True)
@click.option("--broker-id", type=int, default=None,
              help="Ask this broker (kafka-transactions.sh's; the partition's leader here).")
def describe_producers(topic, partition, broker_id, fmt, conf) -> None:
    """The active producers of a partition: epoch, last sequence and timestamp, and the start
    offset of the transaction each has open there."""
    with Admin(for_admin(conf)) as admin:
        check_broker_id(admin, broker_id)
        producers = admin.describe_producers([(topic, partition)])
    rows = [p for states in producers.values() for p in states]
    if fmt == "json":
        echo_json([p._asdict() for p in rows])
        return
    if fmt == "table":
        echo_table(
            ["PRODUCER ID", "EPOCH", "COORDINATOR EPOCH", "LAST SEQUENCE", "LAST TIMESTAMP",
             "CURRENT TXN START OFFSET"],
            [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
              p.last_timestamp,
              None if p.current_txn_start_offset < 0 else p.current_txn_start_offset)
             for p in rows],
        )
        return
    echo_kafka_table(
        ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
         "LastTimestamp", "CurrentTransactionStartOffset"],
        [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
          p.last_timestamp, None if p.current_txn_start_offset < 0 else p.current_txn_start_offset)
         for p in rows],
    )


def check_broker_id(admin: Admin, broker_id: int | None) -> None:
    """kafka-transactions.sh's --broker-id: this broker's (the only one) or an error."""
    if broker_id is None:
        return
    ids = [b[0] for b in admin.describe_cluster()["brokers"]]
    if broker_id not in ids:
        raise click.ClickException(f"no broker {broker_id} (brokers: "
                                   f"{', '.join(map(str, ids))})")


@tool(transactions, "find-hanging", formats=True)
@click.option("--topic", "topics", multiple=True, help="Only these topics, repeatable.")
@click.option("--partition", type=click.IntRange(min=0), default=None,
              help="With --topic: only this partition.")
@click.option("--broker-id", type=int, default=None,
              help="The partitions led by this broker (kafka-transactions.sh's; here: all).")
@click.option("--max-transaction-timeout", type=click.IntRange(min=1), default=900_000,
              show_default=True,
              help="ms; only a transaction whose producer last wrote longer ago can be hanging.")
def find_hanging(topics, partition, broker_id, max_transaction_timeout, fmt, conf) -> None:
    """Transactions open on a partition for longer than the longest timeout that no coordinator
    runs there: they hold back the last stable offset until aborted.

    A transaction its coordinator still runs (in progress, same producer, with that partition) is
    never listed, however old: its coordinator ends it at its timeout, and
    `abort --transactional-id` ends it now."""
    if partition is not None and len(topics) != 1:
        raise click.UsageError("--partition goes with one --topic")
    with Admin(for_admin(conf)) as admin:
        check_broker_id(admin, broker_id)
        hanging = admin.find_hanging_transactions(list(topics) or None, max_transaction_timeout)
    if partition is not None:
        hanging = [h for h in hanging if h.partition.partition == partition]
    if fmt == "json":
        echo_json([{"topic": h.partition.topic, "partition": h.partition.partition,
                    "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
                    "coordinator_epoch": h.coordinator_epoch, "start_offset": h.start_offset,
                    "transactional_id": h.transactional_id, "age_ms": h.age_ms}
                   for h in hanging])
        return
    if fmt == "text":  # kafka-transactions.sh find-hanging's columns
        now = time.time_ns() // 1_000_000
        echo_kafka_table(
            ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
             "StartOffset", "LastTimestamp", "Duration(min)"],
            [(h.partition.topic, h.partition.partition, h.producer_id, h.producer_epoch,
              h.coordinator_epoch, h.start_offset, now - h.age_ms, h.age_ms // 60_000)
             for h in hanging])
        return
    echo_table(
        ["TOPIC", "PARTITION", "PRODUCER ID", "EPOCH", "START OFFSET", "TRANSACTIONAL ID", "AGE"],
        [(h.partition.topic, h.partition.partition, h.producer_id, h.producer_epoch,
          h.start_offset, h.transactional_id, format_duration(h.age_ms))
         for h in hanging],
    )

