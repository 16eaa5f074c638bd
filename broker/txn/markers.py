"""Transaction markers: COMMIT / ABORT control batches written to the partitions of a transaction.

One write for every writer: the coordinator completing a transaction (EndTxn, timeouts,
recovery) and the WriteTxnMarkers v0 handler (the broker-internal API a Kafka coordinator would
send to the partition leaders). ``write`` appends, for each partition, the control batch with the
transaction's producer id and epoch and the coordinator epoch (``Partition.append_marker``: it
ends the producer's open transaction there, the LSO moving once the marker is durable, and
indexes an ABORT), then commits them all through ``Storage.commit`` (inline or in a group-commit
round: storage decides). Once they are durable, ``on_durable(partitions, producer_id, commit)``
is called with the partitions written (the composition root passes the step that materialises or
drops pending transactional offsets in ``__consumer_offsets``: this package never sees the group
coordinator), then the caller's own ``then(ok)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from broker.log.topics import TRANSACTION_STATE_TOPIC, TopicPartition
from broker.storage import Commit, Storage
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("minibroker.txn")

# This broker leads every partition of __transaction_state from start to stop: one coordinator
# epoch (Kafka's is the leader epoch of the transaction-log partition).
COORDINATOR_EPOCH = 0

# (partitions written, producer id, commit) once the markers there are durable.
MarkersDurable = Callable[[list[TopicPartition], int, bool], None]


class MarkerWrite:
    """The outcome of writing the markers of one transaction: an error per partition (NONE
    once appended; KAFKA_STORAGE_ERROR if their fsync failed) and the commit that makes them
    durable."""

    __slots__ = ("commit", "errors", "written")

    def __init__(self) -> None:
        self.errors: dict[TopicPartition, ErrorCode] = {}
        self.written: list[TopicPartition] = []  # partitions the marker was appended to
        self.commit: Commit | None = None


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
        then: Callable[[MarkerWrite], None] | None = None,
        answered: bool = False,
    ) -> MarkerWrite:
        """Append the marker to every partition and commit them; ``then(written)`` runs once
        the commit is decided (``written.errors`` final). ``answered``: see
        ``FlushScheduler.commit``."""
        out = MarkerWrite()
        partitions_written = []
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
            out.written.append(tp)
            partitions_written.append(partition)

        def durable(ok: bool) -> None:
            if not ok:
                for tp in out.written:
                    out.errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
            elif out.written:
                self._on_durable(out.written, producer_id, commit)
            if then is not None:
                then(out)

        # Markers are always durable before anyone is told (with flush="always").
        out.commit = self._storage.commit(partitions_written, durable, answered)
        return out
