"""Committed consumer offsets and pending transactional offsets; their records in
``__consumer_offsets``. Pure: no I/O, no clock.

Record format (inside ordinary RecordBatch v2 batches; big-endian; ``str`` = int16 length + UTF-8).
The layouts are those of Kafka's OffsetCommitKey v1 and OffsetCommitValue v0::

    key   = version    int16   1 (an offset commit; other versions are skipped at replay)
            group      str
            topic      str
            partition  int32
    value = version    int16   0
            offset     int64
            metadata   str     (a commit with null metadata stores "", as Kafka does)
            commit_ts  int64   broker time of the commit (ms)
    value = null               tombstone: the committed offset is deleted

One batch per OffsetCommit request (all its partitions of one group), appended to partition
``partition_for(group_id, partitions)`` of ``__consumer_offsets``. A TxnOffsetCommit writes the same
records in a *transactional* batch with the producer's id and epoch: they stay pending until a
COMMIT control batch of that producer follows in the same partition (then they are committed
offsets, ordered by their position in the log) or an ABORT drops them.

Visibility: every stored value keeps the log offset of its record, and a read passes the
partition's high watermark: only values whose record is below it (durable) are returned, the
newest such wins. So a commit is visible once its fsync completed, and never before, without any
callback from the flusher; a transactional commit that materialises behind a newer plain commit
(lower log offset) does not override it, as in Kafka.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeGuard

from broker.log.topics import TopicPartition
from protocol.errors import CorruptFrameError
from protocol.records import BatchHeader, ControlType, Record, encode_batch, parse_control_record

OFFSET_KEY_VERSION = 1
OFFSET_VALUE_VERSION = 0
# offset.metadata.max.bytes: longer metadata is refused with OFFSET_METADATA_TOO_LARGE
MAX_METADATA_BYTES = 4096

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str
    commit_timestamp: int


class _Stored(NamedTuple):
    log_offset: int  # where the record is in the group's __consumer_offsets partition
    value: OffsetAndMetadata | None  # None: tombstone


# -- codec ------------------------------------------------------------------------------------


def _pack_str(s: str) -> bytes:
    data = s.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    return _INT16.pack(len(data)) + data


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = _INT16.unpack_from(buf, pos)
    pos += 2
    if n < 0 or pos + n > len(buf):
        raise CorruptFrameError(f"bad string length {n}")
    return buf[pos : pos + n].decode("utf-8"), pos + n


# A group id is a STRING in the keys of __consumer_offsets (and __share_group_state): at most
# 32,767 bytes of UTF-8. Longer ones (flexible requests carry longer strings) are INVALID_GROUP_ID
# before anything is stored, so a record never fails to encode and no answer that lists groups
# can hold a name its 2-byte length cannot carry.
MAX_GROUP_ID_BYTES = 32_767


def valid_group_id(group_id: str | None) -> TypeGuard[str]:
    """Not empty, and short enough for the internal topics' keys."""
    return group_id is not None and 0 < len(group_id.encode("utf-8", "surrogatepass")) <= MAX_GROUP_ID_BYTES


def encode_offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return (
        _INT16.pack(OFFSET_KEY_VERSION) + _pack_str(group_id) + _pack_str(topic)
        + _INT32.pack(partition)
    )


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    return (
        _INT16.pack(OFFSET_VALUE_VERSION) + _INT64.pack(value.offset)
        + _pack_str(value.metadata) + _INT64.pack(value.commit_timestamp)
    )


def decode_offset_key_untrusted(key: bytes | None) -> tuple[str, str, int] | None:
    """``(group_id, topic, partition)``; None for a record of another kind (unknown version).
    Raises CorruptFrameError."""
    if key is None or len(key) < 2:
        raise CorruptFrameError("offset record without a key")
    try:
        (version,) = _INT16.unpack_from(key, 0)
        if version not in (0, OFFSET_KEY_VERSION):  # 0 has the same layout (Kafka's v0)
            return None
        group_id, pos = _read_str(key, 2)
        topic, pos = _read_str(key, pos)
        (partition,) = _INT32.unpack_from(key, pos)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptFrameError(f"bad offset record key: {exc}") from None
    return group_id, topic, partition


def decode_offset_value_untrusted(value: bytes | None) -> OffsetAndMetadata | None:
    """The committed offset; None for a tombstone. Raises CorruptFrameError."""
    if value is None:
        return None
    try:
        (version,) = _INT16.unpack_from(value, 0)
        if version != OFFSET_VALUE_VERSION:
            raise CorruptFrameError(f"unknown offset record value version {version}")
        (offset,) = _INT64.unpack_from(value, 2)
        metadata, pos = _read_str(value, 10)
        (commit_ts,) = _INT64.unpack_from(value, pos)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptFrameError(f"bad offset record value: {exc}") from None
    return OffsetAndMetadata(offset, metadata, commit_ts)


def build_offset_batch(
    group_id: str,
    offsets: Sequence[tuple[str, int, OffsetAndMetadata]],
    now_ms: int,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytearray:
    """One batch holding a record per ``(topic, partition, value)``, in order (record ``i`` gets
    log offset ``base_offset + i``)."""
    records = [
        (encode_offset_key(group_id, topic, partition), encode_offset_value(value), (), now_ms)
        for topic, partition, value in offsets
    ]
    return bytearray(
        encode_batch(
            records,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            transactional=transactional,
        )
    )


def build_offset_tombstones(
    group_id: str, partitions: Sequence[tuple[str, int]], now_ms: int
) -> bytearray:
    """One batch deleting the committed offset of each ``(topic, partition)`` (null values;
    record ``i`` gets log offset ``base_offset + i``)."""
    return bytearray(
        encode_batch([
            (encode_offset_key(group_id, topic, partition), None, (), now_ms)
            for topic, partition in partitions
        ])
    )


# -- the table ----------------------------------------------------------------------------------


class OffsetStore:
    """Committed offsets per group, and pending transactional ones per (offsets partition,
    producer id). Values carry their log offset; reads take the partition's high watermark."""

    def __init__(self) -> None:
        # group -> (topic, partition) -> stored values ascending by log offset; only the last
        # durable one and newer ones are kept
        self._committed: dict[str, dict[TopicPartition, list[_Stored]]] = {}
        # offsets partition -> producer id -> group -> (topic, partition) -> value
        self._pending: dict[int, dict[int, dict[str, dict[TopicPartition, _Stored]]]] = {}

    # -- committed ---------------------------------------------------------------------------

    def put(
        self,
        group_id: str,
        tp: TopicPartition,
        log_offset: int,
        value: OffsetAndMetadata | None,
        high_watermark: int | None = None,
    ) -> None:
        """Record a committed offset (or tombstone, ``value=None``) written at ``log_offset``.

        With ``high_watermark``, values made obsolete by a newer durable one are dropped, which
        keeps the history of a partition that is committed often but never read short.
        """
        history = self._committed.setdefault(group_id, {}).setdefault(tp, [])
        entry = _Stored(log_offset, value)
        if not history or history[-1].log_offset < log_offset:
            history.append(entry)
        else:
            bisect.insort(history, entry, key=lambda e: e.log_offset)
        if high_watermark is not None:
            self._visible(group_id, tp, history, high_watermark)

    def _visible(
        self, group_id: str, tp: TopicPartition, history: list[_Stored], high_watermark: int
    ) -> OffsetAndMetadata | None:
        """The newest value below ``high_watermark``; drops the older ones (and a durable
        tombstone with nothing newer: the partition is forgotten)."""
        i = bisect.bisect_left(history, high_watermark, key=lambda e: e.log_offset)
        if i == 0:
            return None
        if i > 1:
            del history[: i - 1]  # older than the newest durable value: never read again
        value = history[0].value
        if value is None and len(history) == 1:
            # A durable tombstone with nothing newer: forget the partition.
            groups = self._committed[group_id]
            del groups[tp]
            if not groups:
                del self._committed[group_id]
        return value

    def get(self, group_id: str, tp: TopicPartition, high_watermark: int) -> OffsetAndMetadata | None:
        """The committed offset of ``tp`` whose record lies below ``high_watermark``."""
        history = self._committed.get(group_id, {}).get(tp)
        if not history:
            return None
        return self._visible(group_id, tp, history, high_watermark)

    def committed(self, group_id: str, high_watermark: int) -> dict[TopicPartition, OffsetAndMetadata]:
        """Every committed offset of the group (below ``high_watermark``)."""
        result: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, history in list(self._committed.get(group_id, {}).items()):
            value = self._visible(group_id, tp, history, high_watermark)
            if value is not None:
                result[tp] = value
        return result

    # -- pending transactional offsets -------------------------------------------------------

    def add_pending(
        self,
        offsets_partition: int,
        producer_id: int,
        group_id: str,
        tp: TopicPartition,
        log_offset: int,
        value: OffsetAndMetadata,
    ) -> None:
        """A TxnOffsetCommit record written at ``log_offset``; invisible until its marker."""
        by_group = self._pending.setdefault(offsets_partition, {}).setdefault(producer_id, {})
        by_group.setdefault(group_id, {})[tp] = _Stored(log_offset, value)

    def complete_txn(self, offsets_partition: int, producer_id: int, commit: bool) -> list[str]:
        """The producer's transaction ended in ``offsets_partition``: its pending offsets become
        committed (``commit``) or vanish. Returns the groups that had pending offsets."""
        by_producer = self._pending.get(offsets_partition)
        if not by_producer or producer_id not in by_producer:
            return []
        by_group = by_producer.pop(producer_id)
        if not by_producer:
            del self._pending[offsets_partition]
        if commit:
            for group_id, offsets in by_group.items():
                for tp, stored in offsets.items():
                    self.put(group_id, tp, stored.log_offset, stored.value)
        return list(by_group)

    def pending(self, group_id: str) -> dict[int, dict[TopicPartition, OffsetAndMetadata]]:
        """``producer_id -> offsets`` of the group's open transactional commits."""
        result: dict[int, dict[TopicPartition, OffsetAndMetadata]] = {}
        for by_producer in self._pending.values():
            for producer_id, by_group in by_producer.items():
                offsets = by_group.get(group_id)
                if offsets:
                    result.setdefault(producer_id, {}).update(
                        {tp: s.value for tp, s in offsets.items() if s.value is not None}
                    )
        return result

    def pending_producers(self, offsets_partition: int) -> list[int]:
        return list(self._pending.get(offsets_partition, {}))

    # -- groups --------------------------------------------------------------------------------

    def has_group(self, group_id: str) -> bool:
        """True if the group has committed offsets (durable or not) or pending ones."""
        if self._committed.get(group_id):
            return True
        return any(
            group_id in by_group
            for by_producer in self._pending.values()
            for by_group in by_producer.values()
        )

    def group_ids(self) -> set[str]:
        ids = set(self._committed)
        for by_producer in self._pending.values():
            for by_group in by_producer.values():
                ids.update(by_group)
        return ids

    # -- replay --------------------------------------------------------------------------------

    def replay_batch(
        self,
        offsets_partition: int,
        header: BatchHeader,
        records: Iterable[Record],
        high_watermark: int | None = None,
        skip: Callable[[int, str], None] | None = None,
    ) -> None:
        """Apply one batch read back from ``__consumer_offsets`` partition ``offsets_partition``
        (at broker start; ``high_watermark`` is the partition's): plain records are committed
        offsets, transactional ones pending, a control record ends the producer's transaction.
        A record that does not decode is left out and reported to ``skip(offset, reason)``; the
        others are applied (without ``skip`` the first one raises CorruptFrameError)."""
        def bad(record: Record, exc: CorruptFrameError) -> None:
            if skip is None:
                raise exc
            skip(record.offset, str(exc))

        if header.is_control:
            for record in records:
                try:
                    control_type, _ = parse_control_record(record)
                except CorruptFrameError as exc:
                    bad(record, exc)
                    continue
                self.complete_txn(
                    offsets_partition, header.producer_id, control_type is ControlType.COMMIT
                )
            return
        for record in records:
            try:
                key = decode_offset_key_untrusted(record.key)
                if key is None:
                    continue
                value = decode_offset_value_untrusted(record.value)
            except CorruptFrameError as exc:
                bad(record, exc)
                continue
            group_id, topic, partition = key
            if header.is_transactional:
                if value is not None:
                    self.add_pending(
                        offsets_partition, header.producer_id, group_id, (topic, partition),
                        record.offset, value,
                    )
            else:
                self.put(group_id, (topic, partition), record.offset, value, high_watermark)
