"""Transaction markers: COMMIT / ABORT control batches written to the partitions of a transaction.

One path for both writers: the coordinator completing a transaction (EndTxn, timeouts, recovery)
and the WriteTxnMarkers v0 handler (the broker-internal API a Kafka coordinator would send to the
partition leaders). For each partition ``Partition.append_marker`` appends the control batch with
the transaction's producer id and epoch and the coordinator epoch, which ends the producer's open
transaction there (the LSO moves once the marker is durable) and indexes an ABORT.

Once the markers are durable, ``on_durable(partitions, producer_id, commit)`` is called with the
partitions written: the composition root passes the step that materialises or drops pending
transactional offsets in ``__consumer_offsets`` (this package never sees the group coordinator).

``write`` is synchronous (the appends, in the caller's order); ``write_durably`` then awaits the
group-commit fsync of every partition written; ``write_now`` flushes inline (recovery at start).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import trio

from broker.core import Storage
from broker.topics import TRANSACTION_STATE_TOPIC, TopicPartition
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("minibroker.txn")

# This broker leads every partition of __transaction_state from start to stop: one coordinator
# epoch (Kafka's is the leader epoch of the transaction-log partition).
COORDINATOR_EPOCH = 0

# (partitions written, producer id, commit) once the markers there are durable.
MarkersDurable = Callable[[list[TopicPartition], int, bool], None]


class MarkerWrite:
    """The outcome of appending the markers of one transaction."""

    __slots__ = ("errors", "flushes", "written")

    def __init__(self) -> None:
        self.errors: dict[TopicPartition, ErrorCode] = {}
        self.flushes: list[trio.Event] = []
        self.written: list[TopicPartition] = []  # partitions the marker was appended to

    @property
    def ok(self) -> bool:
        return all(code == ErrorCode.NONE for code in self.errors.values())


class MarkerWriter:
    def __init__(self, storage: Storage, on_durable: MarkersDurable) -> None:
        self._storage = storage
        self._on_durable = on_durable

    def write(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
        wake: bool = True,
    ) -> MarkerWrite:
        """Append the marker to every partition (not yet durable); errors per partition.
        ``wake=False``: the caller flushes them inline (``Storage.flush_now``)."""
        out = MarkerWrite()
        for tp in sorted(partitions):
            if tp[0] == TRANSACTION_STATE_TOPIC:
                # Never a marker in the transaction log (its replay reads coordinator records
                # only); no request path puts it in a transaction, this is the last guard.
                out.errors[tp] = ErrorCode.INVALID_TOPIC_EXCEPTION
                log.error("refused a %s marker for producer %d into %s-%d",
                          "COMMIT" if commit else "ABORT", producer_id, tp[0], tp[1])
                continue
            try:
                partition = self._storage.partition(*tp)
                partition.append_marker(
                    producer_id, producer_epoch, commit, coordinator_epoch, now_ms
                )
            except KafkaError as exc:
                out.errors[tp] = exc.code
                log.warning("%s marker for producer %d epoch %d on %s-%d failed: %s",
                            "COMMIT" if commit else "ABORT", producer_id, producer_epoch, tp[0],
                            tp[1], exc)
                continue
            out.errors[tp] = ErrorCode.NONE
            # Markers are always durable before anyone is told (even with --flush never).
            out.flushes.append(self._storage.mark_dirty(partition, wake))
            out.written.append(tp)
        return out

    def durable(self, written: MarkerWrite, producer_id: int, commit: bool) -> None:
        """Call once ``written``'s flushes are done: tells the partitions' other owners."""
        if written.written:
            self._on_durable(written.written, producer_id, commit)

    async def write_durably(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> dict[TopicPartition, ErrorCode]:
        """Append the markers, wait until they are on disk, then call ``on_durable``."""
        written = self.write(producer_id, producer_epoch, commit, coordinator_epoch, partitions,
                             now_ms)
        for event in written.flushes:
            await event.wait()
        self.durable(written, producer_id, commit)
        return written.errors

    def write_now(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> dict[TopicPartition, ErrorCode]:
        """The same without the trio loop (recovery at start): flush inline."""
        written = self.write(producer_id, producer_epoch, commit, COORDINATOR_EPOCH, partitions,
                             now_ms)
        self._storage.flush_now()
        self.durable(written, producer_id, commit)
        return written.errors
