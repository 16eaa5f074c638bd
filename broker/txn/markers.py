"""Transaction markers: COMMIT / ABORT control batches written to the partitions of a transaction.

One path for both writers: the coordinator completing a transaction (EndTxn, timeouts, recovery)
and the WriteTxnMarkers v0 handler (the broker-internal API a Kafka coordinator would send to the
partition leaders). For each partition ``Partition.append_marker`` appends the control batch with
the transaction's producer id and epoch and the coordinator epoch, which ends the producer's open
transaction there (the LSO moves once the marker is durable) and indexes an ABORT. A marker for
``__consumer_offsets`` also tells the group coordinator (``broker.groups.on_txn_marker``) to
materialise or drop the pending transactional offsets, once the marker is durable.

``write_markers`` is synchronous (the appends, in the caller's order); ``write_markers_durably``
then awaits the group-commit fsync of every partition written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import trio

from protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from broker.core import Broker

log = logging.getLogger("minibroker.txn")

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
# This broker leads every partition of __transaction_state from start to stop: one coordinator
# epoch (Kafka's is the leader epoch of the transaction-log partition).
COORDINATOR_EPOCH = 0

TopicPartition = tuple[str, int]


class MarkerWrite:
    """The outcome of appending the markers of one transaction."""

    __slots__ = ("errors", "flushes", "offsets_partitions")

    def __init__(self) -> None:
        self.errors: dict[TopicPartition, ErrorCode] = {}
        self.flushes: list[trio.Event] = []
        self.offsets_partitions: list[int] = []  # __consumer_offsets partitions written

    @property
    def ok(self) -> bool:
        return all(code == ErrorCode.NONE for code in self.errors.values())


def write_markers(
    broker: Broker,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    partitions: Iterable[TopicPartition],
    now_ms: int,
) -> MarkerWrite:
    """Append the marker to every partition (not yet durable); errors per partition."""
    out = MarkerWrite()
    for tp in sorted(partitions):
        try:
            partition = broker.partition(*tp)
            partition.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        except KafkaError as exc:
            out.errors[tp] = exc.code
            log.warning("%s marker for producer %d epoch %d on %s-%d failed: %s",
                        "COMMIT" if commit else "ABORT", producer_id, producer_epoch, tp[0], tp[1],
                        exc)
            continue
        out.errors[tp] = ErrorCode.NONE
        # Markers are always durable before anyone is told (even with --flush never).
        out.flushes.append(broker.flusher.mark(partition))
        if tp[0] == CONSUMER_OFFSETS_TOPIC:
            out.offsets_partitions.append(tp[1])
    return out


def notify_groups(broker: Broker, written: MarkerWrite, producer_id: int, commit: bool) -> None:
    """Pending transactional offsets become committed (COMMIT) or vanish (ABORT)."""
    groups = getattr(broker, "groups", None)
    if groups is None:
        return
    for index in written.offsets_partitions:
        groups.on_txn_marker(index, producer_id, commit)


async def write_markers_durably(
    broker: Broker,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    partitions: Iterable[TopicPartition],
    now_ms: int,
) -> dict[TopicPartition, ErrorCode]:
    """Append the markers, wait until they are on disk, then tell the group coordinator."""
    written = write_markers(broker, producer_id, producer_epoch, commit, coordinator_epoch,
                            partitions, now_ms)
    for event in written.flushes:
        await event.wait()
    notify_groups(broker, written, producer_id, commit)
    return written.errors


def write_markers_now(
    broker: Broker,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    partitions: Iterable[TopicPartition],
    now_ms: int,
) -> dict[TopicPartition, ErrorCode]:
    """The same without the trio loop (recovery at start): flush inline."""
    written = write_markers(broker, producer_id, producer_epoch, commit, COORDINATOR_EPOCH,
                            partitions, now_ms)
    broker.flusher.flush_now()
    notify_groups(broker, written, producer_id, commit)
    return written.errors
