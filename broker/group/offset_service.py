"""The offsets part of the group service: OffsetCommit, TxnOffsetCommit, OffsetFetch and
OffsetDelete, kept in ``__consumer_offsets`` and answered once durable. ``GroupOffsets`` is the
base class of ``GroupService`` (``service.py``), which owns the coordinators, the storage and the
log these methods use (declared here for the type checker)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from broker.group.offsets import (
    MAX_METADATA_BYTES,
    OffsetAndMetadata,
    build_offset_batch,
    build_offset_tombstones,
)
from broker.group.state import GroupState
from broker.log.partition import Partition
from broker.reply import Deferred, after
from broker.storage import Commit
from protocol.errors import ErrorCode, KafkaError
from protocol.records import INT32_MAX

if TYPE_CHECKING:
    from broker.group.consumer_group import ConsumerGroupCoordinator
    from broker.group.coordinator import GroupCoordinator
    from broker.log.manager import LogManager
    from broker.storage import Storage

INT64_MAX = (1 << 63) - 1  # a "high watermark" that shows values not yet durable too

T = TypeVar("T")


class OffsetToCommit(NamedTuple):
    """One partition's offset in an OffsetCommit or TxnOffsetCommit."""

    topic: str
    partition: int
    offset: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class TxnProducer:
    """The transactional producer a TxnOffsetCommit's offsets belong to."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


class FetchedOffset(NamedTuple):
    """One partition of an OffsetFetch answer (offset -1 and metadata "" when none)."""

    topic: str
    partition: int
    offset: int
    metadata: str
    error: ErrorCode


# OffsetDelete: (group error, (topic, partition) -> error)
OffsetDeleteResult = tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]

# Append errors as OffsetCommit reports them (Kafka's GroupMetadataManager mapping).
APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}

# (partition, batches, transactional id): raises KafkaError unless the batches' producer has an
# Ongoing transaction holding the partition (the KIP-890 check of transactional Produce).
VerifyTxnProduce = Callable[[Partition, Any, str | None], None]


class RecordReplay(Protocol):
    """Another protocol's records of ``__consumer_offsets`` (the Streams groups':
    ``streams_records.StreamsGroupReplay``), fed in the group service's one pass at start."""

    def apply_untrusted(self, key: bytes | None, value: bytes | None) -> bool:
        """Take one record; False if it is not of this kind. Raises CorruptFrameError."""
        ...


class EpochGroups(Protocol):
    """Another protocol's groups, whose offsets are kept here (``StreamsGroupService``)."""

    def has_group(self, group_id: str) -> bool: ...

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int,
                               api_version: int, partitions: list[tuple[str, int]],
                               transactional: bool, now_ms: int) -> list[ErrorCode]: ...

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int,
                              now_ms: int) -> ErrorCode: ...

    def delete_groups(self, group_ids: list[str], now_ms: int
                      ) -> tuple[dict[str, ErrorCode], list[Commit]]: ...


class GroupOffsets:
    """The offsets' requests (see the module's docstring)."""

    coordinator: GroupCoordinator
    consumer: ConsumerGroupCoordinator
    _storage: Storage
    _logs: LogManager
    _verify_txn_produce: VerifyTxnProduce

    if TYPE_CHECKING:
        def offsets_partition(self, group_id: str, now_ms: int) -> Partition: ...
        def _high_watermark(self, group_id: str) -> int: ...
        def _epoch_groups_of(self, group_id: str) -> EpochGroups | None: ...
        def _reply(self, outcome: Any, now_ms: int | None = None) -> Any: ...
        def run_timers(self, now_ms: int) -> None: ...

    def _tombstone_offsets(
        self, group_id: str, partitions: list[tuple[str, int]], now_ms: int
    ) -> list[Commit]:
        partition = self.offsets_partition(group_id, now_ms)
        batch = build_offset_tombstones(group_id, partitions, now_ms)
        result, flushed = self._storage.append(partition, batch, now_ms)
        hw = partition.high_watermark
        for i, tp in enumerate(partitions):
            self.coordinator.offsets.put(group_id, tp, result.base_offset + i, None, hw)
        return [] if flushed is None else [flushed]

    def delete_offsets(
        self, group_id: str, requested: list[tuple[str, int]], now_ms: int
    ) -> OffsetDeleteResult | Deferred[OffsetDeleteResult]:
        """OffsetDelete: ``(group error, (topic, partition) -> error)``.

        GROUP_ID_NOT_FOUND for an unknown group; a group with members may lose only the offsets
        of topics none of them subscribes to (GROUP_SUBSCRIBED_TO_TOPIC for the others; a group
        of another protocol type than "consumer" with members: NON_EMPTY_GROUP). Partitions
        without a committed offset are answered NONE, as Kafka does."""
        self.run_timers(now_ms)
        group = self.coordinator.groups.get(group_id)
        subscribed: set[str] = set()
        if group_id in self.consumer.groups:
            subscribed = self.consumer.subscribed_topics(group_id)
        elif group is None or group.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        elif group.members:
            if group.protocol_type != "consumer":
                return ErrorCode.NON_EMPTY_GROUP, {}
            subscribed = self.coordinator.subscribed_topics(group_id)
        errors: dict[tuple[str, int], ErrorCode] = {}
        committed = self.coordinator.offsets.committed(group_id, INT64_MAX)
        delete = []
        for tp in requested:
            if tp[0] in subscribed:
                errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                errors[tp] = ErrorCode.NONE
                if tp in committed:
                    delete.append(tp)
        flushes: list[Commit] = []
        if delete:
            try:
                flushes = self._tombstone_offsets(group_id, sorted(set(delete)), now_ms)
            except KafkaError as exc:
                return APPEND_ERRORS.get(exc.code, exc.code), {}
        return after_all(flushes, (ErrorCode.NONE, errors))

    # -- commits and fetches -----------------------------------------------------------------------------

    def _check_partition(self, topic: str, partition: int, metadata: str | None) -> ErrorCode:
        count = self._logs.partition_count(topic)
        if count is None or not 0 <= partition < count:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if metadata is not None and len(metadata.encode("utf-8")) > MAX_METADATA_BYTES:
            return ErrorCode.OFFSET_METADATA_TOO_LARGE
        return ErrorCode.NONE

    def _store(
        self,
        group_id: str,
        offsets: Sequence[OffsetToCommit],
        error: ErrorCode | Sequence[ErrorCode],
        now_ms: int,
        txn: TxnProducer | None = None,
    ) -> tuple[list[ErrorCode], Commit | None]:
        """Validate and append ``offsets``: ``(one code per offset, in order; event set once
        the batch is durable)``. ``error``: the group's verdict, for all or one per offset."""
        codes: list[ErrorCode] = []
        accepted: list[tuple[str, int, OffsetAndMetadata]] = []
        slots: list[int] = []
        for i, entry in enumerate(offsets):
            code = error if isinstance(error, ErrorCode) else error[i]
            if code is ErrorCode.NONE:
                code = self._check_partition(entry.topic, entry.partition, entry.metadata)
            if code is ErrorCode.NONE:
                value = OffsetAndMetadata(entry.offset, entry.metadata or "", now_ms)
                accepted.append((entry.topic, entry.partition, value))
                slots.append(i)
            codes.append(code)
        flushed = None
        if accepted:
            try:
                flushed = self._append(group_id, accepted, now_ms, txn)
            except KafkaError as exc:
                failed = APPEND_ERRORS.get(exc.code, exc.code)
                for i in slots:
                    codes[i] = failed
        return codes, flushed

    def _append(
        self,
        group_id: str,
        offsets: list[tuple[str, int, OffsetAndMetadata]],
        now_ms: int,
        txn: TxnProducer | None,
    ) -> Commit | None:
        partition = self.offsets_partition(group_id, now_ms)
        store = self.coordinator.offsets
        if txn is None:
            batch = build_offset_batch(group_id, offsets, now_ms)
            result, flushed = self._storage.append(partition, batch, now_ms)
            hw = partition.high_watermark
            for i, (topic, index, value) in enumerate(offsets):
                store.put(group_id, (topic, index), result.base_offset + i, value, hw)
            return flushed
        batch = build_offset_batch(
            group_id, offsets, now_ms,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            base_sequence=_next_sequence(partition, txn.producer_id, txn.producer_epoch),
            transactional=True,
        )
        # The Produce path's KIP-890 check: the producer's ongoing transaction must hold this
        # partition (AddOffsetsToTxn added it), else INVALID_TXN_STATE.
        self._verify_txn_produce(partition, batch, txn.transactional_id)
        result, flushed = self._storage.append(partition, batch, now_ms,
                                                 transactional=True)
        for i, (topic, index, value) in enumerate(offsets):
            store.add_pending(
                partition.index, txn.producer_id, group_id, (topic, index),
                result.base_offset + i, value,
            )
        return flushed

    def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        offsets: Sequence[OffsetToCommit],
        now_ms: int,
        group_instance_id: str | None = None,
        api_version: int = 9,
    ) -> list[ErrorCode] | Deferred[list[ErrorCode]]:
        """OffsetCommit: one code per offset, in order, now or once the batch is durable.
        For a consumer-protocol group ``generation_id`` is the member epoch (v9+)."""
        if group_id in self.consumer.groups:
            self.run_timers(now_ms)
        error: ErrorCode | list[ErrorCode]
        other = self._epoch_groups_of(group_id)
        if other is not None:
            error = other.validate_offset_commit(
                group_id, member_id, generation_id, api_version,
                [(o.topic, o.partition) for o in offsets], False, now_ms)
        elif group_id in self.consumer.groups:
            error = self.consumer.validate_offset_commit(
                group_id, member_id, generation_id, api_version,
                [(o.topic, o.partition) for o in offsets])
        else:
            outcome = self.coordinator.validate_offset_commit(
                group_id, generation_id, member_id, now_ms, group_instance_id,
            )
            error = self._reply(outcome, now_ms)
        codes, flushed = self._store(group_id, offsets, error, now_ms)
        return _after(flushed, codes)

    def txn_commit_offsets(
        self,
        group_id: str,
        producer: TxnProducer,
        offsets: Sequence[OffsetToCommit],
        now_ms: int,
        generation_id: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
    ) -> list[ErrorCode] | Deferred[list[ErrorCode]]:
        """TxnOffsetCommit: append the offsets as a transactional batch of the producer; they
        stay pending until ``on_txn_marker``. One code per offset, as ``commit_offsets``."""
        error: ErrorCode | list[ErrorCode]
        other = self._epoch_groups_of(group_id)
        if other is not None:
            error = other.validate_offset_commit(
                group_id, member_id, generation_id, 5,
                [(o.topic, o.partition) for o in offsets], True, now_ms)
        elif group_id in self.consumer.groups:
            # KIP-447 with member epochs: the generation is the consumer's member epoch.
            error = self.consumer.validate_offset_commit(
                group_id, member_id, generation_id, 5,
                [(o.topic, o.partition) for o in offsets], transactional=True)
        else:
            error = self.coordinator.validate_txn_offset_commit(
                group_id, generation_id, member_id, group_instance_id,
            )
        if producer.producer_id < 0 or producer.producer_epoch < 0:
            # No producer, so no transaction these offsets could belong to (Kafka answers the same
            # for a producer id its transaction coordinator does not map to the transactional id).
            if isinstance(error, ErrorCode):
                if error == ErrorCode.NONE:
                    error = ErrorCode.INVALID_PRODUCER_ID_MAPPING
            else:
                error = [ErrorCode.INVALID_PRODUCER_ID_MAPPING if c == ErrorCode.NONE else c
                         for c in error]
        codes, flushed = self._store(group_id, offsets, error, now_ms, producer)
        return _after(flushed, codes)

    def fetch_offsets(
        self,
        group_id: str,
        topics: Sequence[tuple[str, Sequence[int]]] | None,
        now_ms: int,
        require_stable: bool = False,
    ) -> list[FetchedOffset]:
        """OffsetFetch: ``topics`` is ``(topic, partitions)`` pairs, answered in that order, or
        None for every committed partition of the group (sorted). Pending transactional offsets
        are not shown; with ``require_stable`` (v7+, KIP-447) a partition that has some answers
        UNSTABLE_OFFSET_COMMIT instead (the client retries), otherwise the last committed
        offset is the answer."""
        store = self.coordinator.offsets
        hw = self._high_watermark(group_id)
        unstable: set = set()
        if require_stable:
            for by_partition in store.pending(group_id).values():
                unstable.update(by_partition)
        found: list[tuple[str, int, OffsetAndMetadata | None]]
        if topics is None:
            found = [(topic, index, value)
                     for (topic, index), value in sorted(store.committed(group_id, hw).items())]
        else:
            found = [(topic, i, store.get(group_id, (topic, i), hw))
                     for topic, indexes in topics for i in indexes]
        return [
            FetchedOffset(topic, index, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
            if (topic, index) in unstable else
            FetchedOffset(topic, index, value.offset, value.metadata, ErrorCode.NONE)
            if value is not None else
            FetchedOffset(topic, index, -1, "", ErrorCode.NONE)
            for topic, index, value in found
        ]

    def groups_with_offsets(self) -> list[str]:
        """The ids of the groups that have committed offsets, sorted (for the metrics)."""
        return sorted(self.coordinator.offsets.group_ids())

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int,
                              now_ms: int) -> ErrorCode:
        """OffsetFetch v9+ naming a member of a consumer-protocol group: UNKNOWN_MEMBER_ID or
        STALE_MEMBER_EPOCH when it is not the member's current epoch (classic groups: NONE)."""
        other = self._epoch_groups_of(group_id)
        if other is not None:
            return other.validate_offset_fetch(group_id, member_id, member_epoch, now_ms)
        if group_id not in self.consumer.groups:
            return ErrorCode.NONE
        self.run_timers(now_ms)
        if group_id not in self.consumer.groups:
            return ErrorCode.NONE
        return self.consumer.validate_offset_fetch(group_id, member_id, member_epoch)

    def on_txn_marker(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """Call after writing a COMMIT/ABORT marker for ``producer_id`` to ``__consumer_offsets``
        partition ``offsets_partition``: materialises or drops its pending offsets there."""
        self.coordinator.on_txn_marker(offsets_partition, producer_id, commit)



def _next_sequence(partition: Partition, producer_id: int, producer_epoch: int) -> int:
    """The base sequence the partition's producer state expects next from this producer.

    Kafka appends offset commits without sequence checks (they come from the coordinator, not the
    client). Here they go through the normal append path, so they carry the sequence the producer
    state would accept: the producer's sequences on its ``__consumer_offsets`` partition are then
    simply a count of its offset records, separate from its data partitions. The epoch check still
    applies: a fenced (older) epoch gets INVALID_PRODUCER_EPOCH.
    """
    entry = partition.producers.get(producer_id)
    if entry is None or entry.producer_epoch != producer_epoch or not entry.batches:
        return 0
    last = entry.last_seq
    return 0 if last == INT32_MAX else last + 1


def after_all(flushes: list[Commit], response: T) -> T | Deferred[T]:
    return after(flushes, response) if flushes else response


def _after(flushed: Commit | None, response: T) -> T | Deferred[T]:
    return response if flushed is None else after([flushed], response)
