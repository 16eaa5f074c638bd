"""Per-partition producer state: the idempotence checks of the Produce path.

Rules (docs/protocol.md 7.8; seed 001 "broker-side produce checks"; Kafka's ProducerStateManager).
For each producer id that wrote to the partition we keep its epoch, the metadata of its last 5
batches ``(first_seq, last_seq, first_offset, last_offset)``, the broker time of its last append and
the first offset of its open transaction, if any. A batch from producer ``pid`` with ``epoch`` and
sequences ``[first_seq, last_seq]`` is checked against that entry:

1. ``pid == -1``: not idempotent, no checks.
2. Unknown pid: ``first_seq`` must be 0, else UNKNOWN_PRODUCER_ID (its state expired or its data
   was deleted while the producer kept counting).
3. ``epoch`` below the known epoch: INVALID_PRODUCER_EPOCH (a fenced, older producer instance).
4. ``epoch`` above the known epoch: ``first_seq`` must be 0, else OUT_OF_ORDER_SEQUENCE_NUMBER; the
   new epoch starts a fresh batch cache.
5. Same epoch: a batch equal to one of the cached last 5 (same first and last sequence) is a retry
   of a batch already written: the caller answers NONE with the *original* offsets and appends
   nothing. Otherwise ``first_seq`` must follow the last sequence (``last_seq + 1``, wrapping from
   INT32_MAX to 0), else OUT_OF_ORDER_SEQUENCE_NUMBER (a gap, or an old batch no longer cached:
   Kafka answers 45 for both). An entry with no cached batch (e.g. made by a marker) accepts only 0.

Several batches in one append are checked cumulatively: the second against the state the first
would leave. Checking never mutates; ``update`` applies a batch after it was written.

Producers idle longer than ``producer.id.expiration.ms`` are forgotten, except those with an open
transaction. Idleness is measured in broker time (the ``now_ms`` of their last append), not with
the client-chosen batch timestamps Kafka uses, so a producer with a skewed clock is not dropped
early. State rebuilt by replaying the log at recovery takes the load time as its last append time.

Snapshot file ``<offset:020d>.snapshot`` (the state after every batch below ``offset``)::

    crc32c   uint32 big-endian, CRC-32C of the JSON text that follows
    json     {"version": 1, "offset": N, "producers": [[producer_id, producer_epoch,
              last_timestamp, current_txn_first_offset or null,
              [[first_seq, last_seq, first_offset, last_offset], ...]], ...]}

Written atomically (temp file, fsync, rename, directory fsync); a snapshot that fails its CRC or
does not parse is ignored and recovery replays more of the log instead. A segment roll takes the
snapshot's bytes at once (``snapshot_bytes``, in memory) and leaves the writing to the partition's
next flush round (``broker/log/partition.py``).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import crc32c

from broker.log.segment import atomic_write
from protocol.errors import ErrorCode, KafkaError
from protocol.records import CONTROL_BIT, INT32_MAX, TRANSACTIONAL_BIT, BatchHeader
from protocol.trusted import trusted

# Kafka's ProducerStateEntry.NumBatchesToRetain; clients keep max.in.flight <= 5 for this reason.
BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
_CRC = struct.Struct(">I")


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


_new_batch_metadata = trusted(BatchMetadata)


class Duplicate(NamedTuple):
    """The append is a retry of batches already in the log at these offsets."""

    base_offset: int
    last_offset: int


class ProducerStateEntry:
    __slots__ = ("producer_epoch", "batches", "last_timestamp", "current_txn_first_offset",
                 "coordinator_epoch")

    def __init__(
        self,
        producer_epoch: int,
        batches: list[BatchMetadata] | None = None,
        last_timestamp: int = -1,
        current_txn_first_offset: int | None = None,
    ) -> None:
        self.producer_epoch = producer_epoch
        self.batches: list[BatchMetadata] = batches if batches is not None else []
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        # Of the last transaction marker appended here (DescribeProducers; kept in snapshots,
        # so after a crash a marker replayed past the snapshot is not counted); -1 if none.
        self.coordinator_epoch = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def copy(self) -> ProducerStateEntry:
        entry = ProducerStateEntry(
            self.producer_epoch, list(self.batches), self.last_timestamp,
            self.current_txn_first_offset,
        )
        entry.coordinator_epoch = self.coordinator_epoch
        return entry

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(epoch={self.producer_epoch}, batches={self.batches}, "
            f"last_timestamp={self.last_timestamp}, txn_first={self.current_txn_first_offset})"
        )


def _next_seq(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


def _check_entry(entry: ProducerStateEntry | None, header: BatchHeader) -> Duplicate | None:
    """One batch against one producer's entry. Raises KafkaError; never mutates."""
    first_seq = header.base_sequence
    pid = header.producer_id
    if entry is None:
        if first_seq != 0:
            raise KafkaError(
                ErrorCode.UNKNOWN_PRODUCER_ID,
                f"producer {pid} unknown here and its first sequence is {first_seq}, not 0",
            )
        return None
    epoch = header.producer_epoch
    known = entry.producer_epoch
    if epoch < known:
        raise KafkaError(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"producer {pid} epoch {epoch} is older than the current epoch {known}",
        )
    if epoch > known:
        if first_seq != 0:
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {pid} new epoch {epoch} must start at sequence 0, not {first_seq}",
            )
        return None
    batches = entry.batches
    if batches:
        expected = _next_seq(batches[-1][1])  # after the newest batch
        if first_seq == expected:
            # The usual case, and never a retry: the cached batches end before it (they would
            # have to span all 2**31 sequences to wrap around to it).
            return None
        last_seq = header.last_sequence
        for cached_first, cached_last, first_offset, last_offset in batches:
            if cached_first == first_seq and cached_last == last_seq:
                return Duplicate(first_offset, last_offset)
    else:
        expected = 0
    if first_seq != expected:
        raise KafkaError(
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"producer {pid} epoch {epoch}: expected sequence {expected}, got {first_seq}",
        )
    return None


def _apply(entry: ProducerStateEntry | None, header: BatchHeader, first_offset: int,
           now_ms: int) -> ProducerStateEntry:
    """Entry after appending ``header``'s batch at ``first_offset`` (mutates ``entry``)."""
    epoch = header.producer_epoch
    if entry is None:
        entry = ProducerStateEntry(epoch)
    elif epoch > entry.producer_epoch:
        entry.producer_epoch = epoch
        entry.batches = []
    entry.last_timestamp = now_ms
    attributes = header.attributes  # (the bits, not the properties: no call per test)
    if attributes & CONTROL_BIT:
        # A marker carries no sequence; a marker with a newer epoch (an abort after an epoch bump)
        # fences the older epoch and empties the cache, as the epoch change above did.
        return entry
    batches = entry.batches
    batches.append(_new_batch_metadata((
        header.base_sequence, header.last_sequence, first_offset,
        first_offset + header.last_offset_delta)))
    if len(batches) > BATCHES_TO_RETAIN:
        del batches[0]
    if attributes & TRANSACTIONAL_BIT and entry.current_txn_first_offset is None:
        entry.current_txn_first_offset = first_offset
    return entry


class ProducerStateManager:
    """``producer_id -> ProducerStateEntry`` of one partition. No I/O but the snapshot functions."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}
        # producer_id -> first offset of its open transaction: the LSO is asked for on every
        # read_committed Fetch, so it must not walk every producer.
        self._ongoing: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def get(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    # -- the Produce path --------------------------------------------------------------------

    def check(self, header: BatchHeader, now_ms: int) -> Duplicate | None:
        """Validate one batch against the current state (see the module rules).

        Returns ``Duplicate`` for a retry of a cached batch, None if the batch may be appended;
        raises ``KafkaError`` (UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH,
        OUT_OF_ORDER_SEQUENCE_NUMBER) otherwise. Does not change the state.
        """
        if header.producer_id < 0:
            return None
        return _check_entry(self.producers.get(header.producer_id), header)

    def check_all(self, headers: Sequence[BatchHeader], now_ms: int) -> Duplicate | None:
        """Validate the batches of one append cumulatively (each against the state the previous
        ones would leave). All duplicates -> ``Duplicate`` spanning them; a mix of duplicates and
        new batches -> OUT_OF_ORDER_SEQUENCE_NUMBER (only a malformed request does that)."""
        if len(headers) == 1:
            return self.check(headers[0], now_ms)
        pending: dict[int, ProducerStateEntry] = {}
        results: list[Duplicate | None] = []
        for header in headers:
            pid = header.producer_id
            if pid < 0:
                results.append(None)
                continue
            entry = pending.get(pid)
            if entry is None:
                entry = self.producers.get(pid)
            dup = _check_entry(entry, header)
            if dup is None:
                # Offsets are not assigned yet; -1 marks a batch of this very request.
                pending[pid] = _apply(entry.copy() if entry is not None else None, header, -1,
                                      now_ms)
            results.append(dup)
        if all(r is not None for r in results):
            return Duplicate(results[0].base_offset, results[-1].last_offset)  # type: ignore[union-attr]
        if any(r is not None for r in results):
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                "an append mixes batches already written with new ones",
            )
        return None

    def update(self, header: BatchHeader, first_offset: int, now_ms: int) -> None:
        """Record a batch just appended at ``first_offset`` (after ``check`` passed).

        Control batches (markers) update the epoch and last-append time but leave
        ``current_txn_first_offset`` alone: the transaction code calls ``complete_txn``.
        """
        pid = header.producer_id
        if pid < 0:
            return
        producers = self.producers
        entry = producers[pid] = _apply(producers.get(pid), header, first_offset, now_ms)
        if entry.current_txn_first_offset is not None and pid not in self._ongoing:
            self._ongoing[pid] = entry.current_txn_first_offset

    def replay(self, header: BatchHeader, now_ms: int) -> None:
        """Rebuild state from a batch read back from the log at recovery (no checks): like
        ``update``, and a marker also completes the producer's open transaction."""
        self.update(header, header.base_offset, now_ms)
        if header.is_control and header.producer_id >= 0:
            self.complete_txn(header.producer_id)

    def complete_txn(self, producer_id: int) -> int | None:
        """End the producer's open transaction here; return its first offset (None if none)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = None
        self._ongoing.pop(producer_id, None)
        return first

    def open_transactions(self) -> dict[int, int]:
        """``producer_id -> first offset`` of every open transaction on the partition."""
        return dict(self._ongoing)

    def first_open_offset(self) -> int | None:
        """The first offset of the oldest open transaction (what bounds the LSO), or None."""
        ongoing = self._ongoing
        return min(ongoing.values()) if ongoing else None

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` or more, except those with an open
        transaction. Returns how many were removed."""
        stale = [
            pid
            for pid, e in self.producers.items()
            if e.current_txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in stale:
            del self.producers[pid]
        return len(stale)

    # -- snapshots ---------------------------------------------------------------------------

    def entries(self) -> list[list]:
        """The snapshot's "producers" list (also a clean point's, ``clean_points.py``)."""
        return [
            [pid, e.producer_epoch, e.last_timestamp, e.current_txn_first_offset,
             [list(b) for b in e.batches], e.coordinator_epoch]
            for pid, e in self.producers.items()
        ]

    @classmethod
    def from_entries(cls, producers: list) -> ProducerStateManager:
        """The state ``entries()`` gave. Raises ValueError, TypeError or KeyError on anything
        else."""
        state = cls()
        # The sixth element (coordinator epoch of the last marker) is optional: snapshots
        # written before it existed have five.
        for pid, epoch, last_ts, txn_first, batches, *more in producers:
            entry = state.producers[int(pid)] = ProducerStateEntry(
                int(epoch),
                [BatchMetadata(*(int(x) for x in b)) for b in batches],
                int(last_ts),
                None if txn_first is None else int(txn_first),
            )
            if more:
                entry.coordinator_epoch = int(more[0])
            if txn_first is not None:
                state._ongoing[int(pid)] = int(txn_first)
        return state

    def to_json(self, offset: int) -> bytes:
        return json.dumps(
            {"version": 1, "offset": offset, "producers": self.entries()}, separators=(",", ":")
        ).encode()

    def snapshot_bytes(self, offset: int) -> bytes:
        """The snapshot file's contents for the state as of ``offset`` (all batches below it
        applied): what a segment roll takes at once, in memory, and writes later."""
        body = self.to_json(offset)
        return _CRC.pack(crc32c.crc32c(body)) + body

    def write_snapshot(self, path: Path, offset: int, fsync: bool = True) -> None:
        """Atomically write the state as of ``offset`` (all batches below it applied);
        ``fsync=False``: not made durable (``atomic_write``)."""
        atomic_write(path, self.snapshot_bytes(offset), fsync=fsync)

    @classmethod
    def read_snapshot(cls, path: Path) -> tuple[int, ProducerStateManager] | None:
        """``(offset, state)`` from a snapshot file; None if missing, torn or corrupt."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(data) < _CRC.size:
            return None
        body = data[_CRC.size:]
        if _CRC.unpack_from(data)[0] != crc32c.crc32c(body):
            return None
        try:
            doc = json.loads(body)
            if doc["version"] != 1:
                return None
            return int(doc["offset"]), cls.from_entries(doc["producers"])
        except (ValueError, KeyError, TypeError):
            return None


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    offsets = []
    # (one listdir: a start with many partitions calls this for each; pathlib's glob costs
    # several times more)
    for name in os.listdir(directory):
        if name.endswith(SNAPSHOT_SUFFIX):
            stem = name[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit():
                offsets.append(int(stem))
    return sorted(offsets)
