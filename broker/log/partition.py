"""One partition's log: append (validation, idempotence, offsets), read, durability, retention.

Directory ``data_dir/<topic>-<partition>/``: segments (``segment.py``), their indexes
(``index.py``), producer-state snapshots (``producer_state.py``) and the aborted-transaction index
(``txn_index.py``). Loading and crash recovery are in ``recovery.py``.

Offsets: ``log_start_offset`` (first offset kept; the base of the first segment, moved forward by
retention), ``log_end_offset`` (LEO, the next offset to assign), ``high_watermark`` (HW, the next
offset among durable data: with ``flush="always"`` only ``flush()`` moves it, after fdatasync; with
``flush="never"`` it follows the LEO at once, Kafka's page-cache behaviour), ``last_stable_offset``
(LSO, what read_committed consumers may read: the HW, lowered to the first offset of the oldest
transaction not yet decided; see "Transactions" below).

Durability: an append is one ``pwrite`` of the request's bytes into the active segment (page
cache). ``flush()`` fdatasyncs what was written since the last flush (and what segment rolls left,
and the directory if a segment was created), so whatever was below the HW it returns survives
kill -9 and power loss.
The server group-commits: many appends, then one ``flush()``, then the answers.

Segment roll (before an append that would overflow ``segment_bytes``, or once the active segment is
``segment_ms`` old), with no fsync: it runs on the event loop, inside an append, and the small
segments of the internal topics roll every hundred-odd transactions. It trims the old segment's
preallocated tail, writes its index (page cache), serializes the producer state at the new base
offset (the recovery point) into memory, creates the new segment and calls ``on_roll`` (the
storage puts the partition into a flush round: the next one, or a background one within half a
second). The next flush ticket then takes, in this order: the aborted-transaction index, the
rolled segments' data, the active segment's writes (``flush="always"``), the rolled segments'
indexes, the snapshots (written to a temporary file, fsync'd, renamed), and one directory fsync
for the new segment's entry and the renames; the old snapshots beyond ``SNAPSHOTS_RETAINED`` go
last. With ``flush="always"`` the high watermark moves only once that ticket is synced, so it never
covers data in a rolled segment that is not durable, nor in a segment whose directory entry is not.
With ``"never"`` a round takes only what rolls left (Kafka flushes a rolled segment in the
background too), the active segment waits for ``flush()`` or ``close()``. The snapshot is taken
at roll time (it is the state AT the roll offset; the appends that follow change it) and written
only after the data below it is durable: a snapshot in place therefore means that every segment
before its offset is durable, which is what recovery trusts (``recovery.py``: those segments are
opened from their index without a CRC scan). A power cut before the round leaves the previous
snapshot as the newest (recovery replays from there), and an index that comes back empty, short
or torn is rejected by ``OffsetIndex.load`` and rebuilt by a scan.

Reads are ``partition_read.py``'s, retention and DeleteRecords ``retention.py``'s, a flush round's
files ``flush_ticket.py``'s, the clean point and close ``partition_close.py``'s.

Transactions (the partition side; the coordinator is ``broker/txn/``): a transactional batch opens a
transaction of its producer here (``ProducerStateManager`` remembers its first offset) unless one
is open. ``append_marker`` writes the COMMIT/ABORT control batch the coordinator decided, ends the
producer's open transaction and, for an ABORT, adds ``(producer_id, first_offset, marker_offset)``
to the aborted-transaction index. As in Kafka, a transaction stays *undecided* for the LSO until
its marker is below the HW (durable), so a read_committed consumer never sees data whose outcome a
crash could still change: ``LSO = min(HW, first offsets of open transactions, first offsets of
ended transactions whose marker is not yet below the HW)``. After a restart the open transactions
come back from the producer-state snapshot and the replay of the log after it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from broker.log.clean_points import CleanPoint, CleanState
from broker.log.flush_ticket import SNAPSHOTS_RETAINED, FlushTicket
from broker.log.partition_close import PartitionClose
from broker.log.partition_read import PartitionReads
from broker.log.producer_state import ProducerStateManager
from broker.log.recovery import LoadedLog, RecoveryReport, load_log
from broker.log.retention import (
    LOG_START_CHECKPOINT,
    PartitionRetention,
    read_log_start_checkpoint,
)
from broker.log.segment import Segment
from broker.log.topic_config import LogConfig
from broker.log.topics import INTERNAL_TOPICS
from broker.log.txn_index import FILE_NAME as TXN_INDEX_FILE
from broker.log.txn_index import AbortedTxn, TxnIndex
from protocol.errors import CorruptFrameError, ErrorCode, KafkaError
from protocol.records import (
    CONTROL_BIT,
    INT32_MAX,
    LOG_OVERHEAD,
    BatchHeader,
    batch_crc_ok,
    build_control_batch,
    decode_records_untrusted,
    parse_header_untrusted,
    stamp_log_append_time,
    validate_records_untrusted,
)
from protocol.trusted import trusted

_MAGIC_POS = 16
_BASE_OFFSET = struct.Struct(">q")  # a batch's first field


class InflateLater(Exception):
    """``append_untrusted`` with ``inline_inflate``: the batches inflate beyond it; nothing was
    appended (check them with ``check_untrusted`` off the event loop, then append them with
    ``records_checked=True``)."""


class AppendResult(NamedTuple):
    base_offset: int  # first offset of the append (the ORIGINAL one for a duplicate)
    last_offset: int
    duplicate: bool  # True: idempotent retry of batches already in the log; nothing appended
    log_append_time: int = -1  # the broker time stamped on a LogAppendTime topic; else -1


_new_append_result = trusted(AppendResult)


class Partition(PartitionReads, PartitionRetention, PartitionClose):
    """The log of one topic partition. Not thread-safe: the trio loop calls it."""

    def __init__(
        self,
        topic: str,
        index: int,
        directory: Path,
        config: LogConfig,
        now_ms: int,
        clean: CleanPoint | None = None,
        clean_shutdown: bool = False,
        sync: bool = True,
    ) -> None:
        """Open (creating if needed) and load or recover the partition in ``directory``.

        ``clean`` is this partition's clean point, if any (``clean_points.py``): from the points
        file of a clean shutdown (``clean_shutdown``) or a recovery point. The outcome is in
        ``self.recovery``. ``sync=False``: what a recovery rewrites is left for the caller to
        sync (``recovery.load_log``).
        """
        self.topic = topic
        self.index = index
        self.dir = directory
        self.config = config  # (the setter below derives what every append reads)
        created = not directory.exists()
        if created:
            directory.mkdir(exist_ok=True)
        if created:
            # A new partition: one empty segment. Its directory entry is made durable by the
            # first flush (the creator's), so that a topic's partitions are synced together.
            loaded = LoadedLog([Segment.create(directory, 0)], ProducerStateManager(), 0, True)
        else:
            loaded = load_log(directory, config.index_interval_bytes, now_ms, clean,
                              clean_shutdown, sync)
        self.segments: list[Segment] = loaded.segments
        self._bases: list[int] = [s.base_offset for s in self.segments]
        self.producers: ProducerStateManager = loaded.producers
        self.log_end_offset = self.segments[-1].next_offset
        # DeleteRecords moves the log start inside the first segment; the file keeps it (and a
        # clean point of a clean shutdown: nothing can have moved it since).
        start = (clean.log_start_offset if clean_shutdown and loaded.clean and clean is not None
                 and clean.log_start_offset is not None else None)
        if start is None and loaded.names is not None and LOG_START_CHECKPOINT not in loaded.names:
            start = 0
        self.log_start_offset = max(
            self.segments[0].base_offset,
            min(read_log_start_checkpoint(directory) if start is None else start,
                self.log_end_offset),
        )
        self.high_watermark = self.log_end_offset
        self._dirty = False  # bytes written since the last fdatasync
        self.unsynced_bytes = 0  # how many (the flusher syncs small rounds inline)
        self._dir_dirty = created  # directory entries not yet fsync'd
        # What segment rolls left for the next flush (module docstring): the rolled segments,
        # whose data and index are not yet fdatasync'd, and the producer-state snapshots taken
        # at their ends, not yet written.
        self._unsynced: list[Segment] = []
        self._snapshots: list[tuple[int, bytes]] = []
        # Called after each roll (the storage puts the partition in a flush round).
        self.on_roll: Callable[[Partition], None] | None = None
        self._closed = False
        self.cleaning = False  # the log cleaner is rewriting closed segments (cleaner.py)
        self.txn_index = TxnIndex(directory, self.log_start_offset, self.log_end_offset,
                                  loaded.names is None or TXN_INDEX_FILE in loaded.names)
        if loaded.aborted:  # a crash between an ABORT marker and its entry (recovery.py)
            self.txn_index.restore([e for e in loaded.aborted
                                    if e.last_offset >= self.log_start_offset])
        # (first_offset, marker_offset) of transactions ended by a marker not yet below the HW.
        self._unstable: list[tuple[int, int]] = []
        self.recovery = RecoveryReport(
            topic, index, self.log_start_offset, self.log_end_offset,
            loaded.truncated_bytes, loaded.clean,
        )
        # The clean point on disk (clean_points.py): loaded from the points file, the data and
        # every index it needs are durable. While ``clean_state`` still equals it (nothing was
        # appended, no segment rolled), ``close`` has nothing to write for this partition.
        self.checkpoint: CleanState | None = (
            clean.state if clean is not None and loaded.clean and not created
            and self.clean_state == clean.state else None
        )
        # (After a crash the tail may sit in the page cache only, writes answered before their
        # fsync or never answered: the scan synced what it read, or left it to the caller with
        # ``sync=False``, before the high watermark, already at the log end, lets anyone read it.)

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.index}, start={self.log_start_offset}, "
            f"hw={self.high_watermark}, leo={self.log_end_offset})"
        )

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """The topic's settings (AlterConfigs replaces them), and what the append path reads of
        them, computed once here instead of on every append."""
        self._config = config
        # max.message.bytes is a limit for clients; only the broker's own services write into
        # the internal topics (every client path refuses them), and nothing may stop them.
        self._max_batch_size = (
            INT32_MAX if self.topic in INTERNAL_TOPICS else config.max_message_bytes
        )
        self._compact = config.compact
        self._log_append_time = config.log_append_time
        self._segment_bytes = config.segment_bytes
        self._roll_ms = config.roll_ms
        self._index_interval = config.index_interval_bytes
        # Only fdatasync profits from preallocated blocks (see segment.PREALLOCATE_METHOD).
        self._reserve = config.preallocate and config.flush == "always"
        self._hw_follows_leo = config.flush == "never"

    @property
    def last_stable_offset(self) -> int:
        hw = self.high_watermark
        lso = hw
        first = self.producers.first_open_offset()
        if first is not None and first < lso:
            lso = first
        if self._unstable:
            for first_offset, _ in self._prune_unstable():
                if first_offset < lso:
                    lso = first_offset
        return lso

    def _prune_unstable(self) -> list[tuple[int, int]]:
        """Forget ended transactions whose marker is durable now (below the HW)."""
        unstable, hw = self._unstable, self.high_watermark
        while unstable and unstable[0][1] < hw:
            del unstable[0]
        return unstable

    @property
    def dirty(self) -> bool:
        return self._dirty or self.needs_directory_sync

    @property
    def needs_directory_sync(self) -> bool:
        """A new segment or what a roll left (rolled segments, their indexes, a snapshot) is
        part of the next flush (a slow one)."""
        return self._dir_dirty or bool(self._unsynced) or bool(self._snapshots)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- append ------------------------------------------------------------------------------

    def append_untrusted(self, buf: bytearray | memoryview, now_ms: int,
                         inline_inflate: int | None = None,
                         records_checked: bool = False) -> AppendResult:
        """Validate and append the batches of a Produce request, patching base offsets in place.

        All or nothing: every batch is checked (header, size, CRC, record framing, not a control
        batch, producer id/epoch/sequence) before anything is written. A retry of batches already in the log
        returns their original offsets with ``duplicate=True`` and writes nothing.
        Raises ``KafkaError``: CORRUPT_MESSAGE, UNSUPPORTED_FOR_MESSAGE_FORMAT, MESSAGE_TOO_LARGE,
        INVALID_RECORD, UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER,
        KAFKA_STORAGE_ERROR.

        ``inline_inflate``: at most this many bytes of compressed records are inflated here (on
        the event loop); beyond it ``InflateLater`` is raised, nothing appended: the caller runs
        ``check_untrusted`` where time does not matter (a worker thread) and then calls again
        with ``records_checked=True``, which skips the records' check (framing, keys) and keeps
        every other one (sizes, CRC, idempotence).
        """
        mv = buf if isinstance(buf, memoryview) else memoryview(buf)
        if mv.readonly:
            mv = memoryview(bytearray(mv))  # offsets are patched in place
        elif mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        batches = self._checked_batches(mv, inline_inflate, records_checked)
        if self._compact and not records_checked:
            self._check_keys(mv, batches)
        producers = self.producers
        if len(batches) == 1:
            header = batches[0][1]
            dup = producers.check(header, now_ms) if header.producer_id >= 0 else None
        else:
            dup = producers.check_all([h for _, h in batches], now_ms)
        if dup is not None:
            return AppendResult(dup.base_offset, dup.last_offset, True)
        log_append_time = -1
        if self._log_append_time:
            log_append_time = now_ms
            batches = [(pos, stamp_log_append_time(mv, pos, header, now_ms))
                       for pos, header in batches]
        if len(batches) == 1:  # validated above: written as a built batch is
            header = batches[0][1]
            base_offset = self.append_built_batch(mv, header, now_ms)
            last_offset = base_offset + header.last_offset_delta
        else:
            base_offset = self.log_end_offset
            last_offset = self._write(mv, batches, now_ms)
        return _new_append_result((base_offset, last_offset, False, log_append_time))

    def check_untrusted(self, buf: bytearray | memoryview,
                        inline_inflate: int | None = None) -> None:
        """``append_untrusted``'s checks of ``buf`` that do not depend on the log's state (sizes,
        CRC, record framing, keys of a compacted topic), changing nothing: what a worker thread
        runs for a request whose batches inflate beyond what the event loop may take (then
        ``append_untrusted(records_checked=True)``). Raises KafkaError as ``append_untrusted``,
        and ``InflateLater`` beyond ``inline_inflate``."""
        mv = buf if isinstance(buf, memoryview) else memoryview(buf)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        batches = self._checked_batches(mv, inline_inflate, False)
        if self._compact:
            self._check_keys(mv, batches)

    def _checked_batches(self, mv: memoryview, inline_inflate: int | None,
                         records_checked: bool) -> list[tuple[int, BatchHeader]]:
        """``(position, header)`` of each batch in ``mv``, validated (``append_untrusted``)."""
        n = mv.nbytes
        if n == 0:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "no record batches")
        max_size = self._max_batch_size
        batches: list[tuple[int, BatchHeader]] = []
        pos = 0
        while pos < n:
            if n - pos > _MAGIC_POS and mv[pos + _MAGIC_POS] != 2:
                magic = mv[pos + _MAGIC_POS]
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
                    if magic in (0, 1)
                    else ErrorCode.CORRUPT_MESSAGE,
                    f"record batch magic {magic}, only 2 is supported",
                )
            try:
                header = parse_header_untrusted(mv, pos)
            except CorruptFrameError as exc:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
            size = header.length + LOG_OVERHEAD
            if pos + size > n:
                raise KafkaError(
                    ErrorCode.CORRUPT_MESSAGE,
                    f"record batch at {pos} is truncated: {size} bytes declared, {n - pos} present",
                )
            if size > max_size:
                raise KafkaError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"record batch of {size} bytes exceeds max.message.bytes {max_size}",
                )
            if header.attributes & CONTROL_BIT:
                raise KafkaError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
            if header.records_count != header.last_offset_delta + 1:
                raise KafkaError(
                    ErrorCode.INVALID_RECORD,
                    f"records count {header.records_count} does not match last offset delta "
                    f"{header.last_offset_delta}",
                )
            if not batch_crc_ok(mv, pos, header):
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"CRC mismatch in record batch at {pos}")
            if not records_checked:
                try:
                    # A valid CRC over malformed records is a poison pill for consumers: refuse
                    # it.
                    if inline_inflate is None:
                        validate_records_untrusted(mv, pos, header)
                    else:
                        inflated = validate_records_untrusted(mv, pos, header,
                                                              inline_limit=inline_inflate)
                        if inflated < 0:  # records.INFLATE_LATER
                            raise InflateLater(f"record batch at {pos} inflates beyond "
                                               f"{inline_inflate} bytes")
                        inline_inflate -= inflated
                except CorruptFrameError as exc:
                    raise KafkaError(ErrorCode.INVALID_RECORD, str(exc)) from None
            batches.append((pos, header))
            pos += size
        return batches

    def _check_keys(self, mv: memoryview, batches: list[tuple[int, BatchHeader]]) -> None:
        """A compacted topic keeps the latest record per key: a record without one is refused
        (Kafka's LogValidator: INVALID_RECORD)."""
        for pos, header in batches:
            try:
                records = decode_records_untrusted(mv, pos, header)
            except CorruptFrameError as exc:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
            if any(r.key is None for r in records):
                raise KafkaError(
                    ErrorCode.INVALID_RECORD,
                    f"Compacted topic cannot accept message without key in topic partition "
                    f"{self.topic}-{self.index}.",
                )

    def append_control_batch(self, batch: bytes | bytearray, now_ms: int) -> int:
        """Append one broker-made batch (a transaction marker, a coordinator record); no
        idempotence checks, but the producer state sees it. Returns its base offset."""
        buf = bytearray(batch)
        try:
            header = parse_header_untrusted(buf, 0)
        except CorruptFrameError as exc:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
        if header.length + LOG_OVERHEAD != len(buf):
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "expected exactly one whole batch")
        return self.append_built_batch(buf, header, now_ms)

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int,
    ) -> int:
        """Append a COMMIT or ABORT marker for the producer's transaction; returns its offset.

        Ends the producer's open transaction here (if any: a repeated marker, e.g. rewritten by
        recovery, ends nothing) and indexes an aborted one. Not durable until ``flush()``; the
        transaction counts as undecided for the LSO until then. Raises INVALID_PRODUCER_EPOCH for
        an epoch older than the producer's current one here, KAFKA_STORAGE_ERROR if the write
        fails.
        """
        entry = self.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.producer_epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"marker epoch {producer_epoch} is older than producer {producer_id}'s epoch "
                f"{entry.producer_epoch} in {self.topic}-{self.index}",
            )
        buf, header = build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                          now_ms)
        offset = self.append_built_batch(buf, header, now_ms)
        marked = self.producers.get(producer_id)
        if marked is not None:
            marked.coordinator_epoch = coordinator_epoch
        first = self.producers.complete_txn(producer_id)
        if first is not None:
            if offset >= self.high_watermark:
                # Bounded: pruned here too, not only when someone asks for the LSO.
                self._prune_unstable().append((first, offset))
            if not commit:
                undecided = self.producers.first_open_offset()
                entry_lso = offset + 1 if undecided is None else undecided
                try:
                    self.txn_index.append(AbortedTxn(producer_id, first, offset, entry_lso))
                except OSError as exc:
                    raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc
        return offset

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of the aborted transactions overlapping
        ``[fetch_offset, upper_bound)``: the list a read_committed Fetch returns."""
        return self.txn_index.collect(fetch_offset, upper_bound)

    def _write(self, buf: bytearray | memoryview, batches: list[tuple[int, BatchHeader]],
               now_ms: int) -> int:
        """Assign offsets, patch them in, write ``buf`` (bytes, a flat memoryview) with one
        pwrite, index, update producers. Returns the last offset written.
        (``append_built_batch`` writes a single batch.)"""
        n = len(buf)
        seg = self.segments[-1]
        size = seg.size
        if (size and (size + n > self._segment_bytes or now_ms - seg.roll_base_ms >= self._roll_ms)
                or self._reserve and size + n > seg.allocated):
            seg = self._make_room(n, now_ms)
        offset = self.log_end_offset
        for pos, header in batches:
            _BASE_OFFSET.pack_into(buf, pos, offset)  # records.patch_base_offset
            offset += header.last_offset_delta + 1
        position = seg.size
        try:
            seg.write(buf)
        except OSError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc
        if seg.roll_base_ms < 0:
            seg.roll_base_ms = now_ms
        interval = self._index_interval
        producers = self.producers
        offset = self.log_end_offset
        for pos, header in batches:
            seg.add_batch(position + pos, offset, header.length + LOG_OVERHEAD,
                          header.max_timestamp, interval)
            if header.producer_id >= 0:
                producers.update(header, offset, now_ms)
            offset += header.last_offset_delta + 1
        self._appended(seg, offset, n)
        return offset - 1

    def append_built_batch(self, buf: bytearray | memoryview, header: BatchHeader,
                           now_ms: int) -> int:
        """Append one batch the broker built itself with its header as built
        (``records.build_batch`` / ``build_control_batch``): nothing to copy or parse back. Its
        base offset is patched into ``buf``; returns it. Otherwise as ``append_control_batch``.

        Also what ``append_untrusted`` writes a single validated batch with: ``_write``'s steps
        for one batch, without the loops, the segment's write and index entry in one call."""
        n = len(buf)
        seg = self.segments[-1]
        size = seg.size
        if (size and (size + n > self._segment_bytes or now_ms - seg.roll_base_ms >= self._roll_ms)
                or self._reserve and size + n > seg.allocated):
            seg = self._make_room(n, now_ms)
        offset = base_offset = self.log_end_offset
        _BASE_OFFSET.pack_into(buf, 0, offset)  # records.patch_base_offset
        try:
            seg.write_batch(buf, offset, header.max_timestamp, self._index_interval)
        except OSError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc
        if seg.roll_base_ms < 0:
            seg.roll_base_ms = now_ms
        if header.producer_id >= 0:
            self.producers.update(header, offset, now_ms)
        self._appended(seg, offset + header.last_offset_delta + 1, n)
        return base_offset

    def _appended(self, seg: Segment, next_offset: int, nbytes: int) -> None:
        """What every append moves once its ``nbytes`` are written to ``seg``: the log end
        offset, the unsynced bytes, the high watermark where it follows the log end."""
        seg.next_offset = next_offset
        self.log_end_offset = next_offset
        self._dirty = True
        self.unsynced_bytes += nbytes
        if self._hw_follows_leo:
            self.high_watermark = next_offset

    def _make_room(self, nbytes: int, now_ms: int) -> Segment:
        """The segment a write of ``nbytes`` goes to when the active one is full or old (a
        roll) or not preallocated far enough (``_write``'s test)."""
        seg = self.segments[-1]
        if seg.size and (
            seg.size + nbytes > self._segment_bytes or now_ms - seg.roll_base_ms >= self._roll_ms
        ):
            try:
                seg = self._roll()
            except OSError as exc:  # disk full, out of descriptors: nothing appended
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"segment roll: {exc}") from exc
        if self._reserve and seg.size + nbytes > seg.allocated:
            try:
                seg.reserve(nbytes, self._segment_bytes)
            except OSError:
                # No room to preallocate ahead (a nearly full disk): a write that fits must
                # still succeed, so go on without; the write itself says whether it fits.
                pass
        return seg

    def roll_if_idle(self, now_ms: int) -> bool:
        """Roll a non-empty active segment older than ``config.roll_ms`` although nothing is being
        appended (appends roll by age themselves): on a compacted topic this bounds how long a
        record escapes the cleaner (max.compaction.lag.ms) when writes stop. True if rolled.
        Raises OSError as a roll does."""
        active = self.segments[-1]
        if not active.size or active.roll_base_ms < 0 or self.cleaning:
            return False
        if now_ms - active.roll_base_ms < self._roll_ms:
            return False
        self._roll()
        return True

    def _roll(self) -> Segment:
        """Close the active segment and start a new one at the log end offset, with no fsync:
        the rolled segment's data and index, the producer-state snapshot taken here and the new
        directory entry are made durable by the next flush (module docstring)."""
        old = self.segments[-1]
        old.trim()
        old.save_index(fsync=False)  # small; synced by the next flush, then trusted at start
        base = self.log_end_offset
        # The state at the roll offset, taken now; written (after the data below it is
        # durable) by the next flush. Only the newest SNAPSHOTS_RETAINED are ever kept.
        self._snapshots.append((base, self.producers.snapshot_bytes(base)))
        del self._snapshots[:-SNAPSHOTS_RETAINED]
        seg = Segment.create(self.dir, base)
        self._unsynced.append(old)
        self._dirty = False  # the active segment is new and empty
        self.segments.append(seg)
        self._bases.append(base)
        self._dir_dirty = True
        if self.on_roll is not None:
            self.on_roll(self)
        return seg

    # -- durability --------------------------------------------------------------------------

    def flush(self, fsync: bool = True) -> int:
        """fdatasync what was written since the last flush (and what rolls left); then
        HW = LEO. Returns the HW. ``fsync=False``: write what rolls left, sync nothing (only
        ``close(fsync=False)``, whose caller syncs the file system)."""
        ticket = self.begin_flush(shared=False, active=True)
        if ticket is not None:
            ticket.sync(fsync)
            if not self.complete_flush(ticket):
                assert ticket.error is not None
                raise ticket.error
        return self.high_watermark

    def begin_flush(self, shared: bool = True, active: bool | None = None) -> FlushTicket | None:
        """Split flush, first part (event-loop thread): take what the next fdatasync must cover.

        ``ticket.sync()`` may then run in a worker thread while appends go on; the files are
        duplicated descriptors, so a segment deleted or closed meanwhile is still synced safely.
        ``shared=False``: the caller syncs before the event loop runs anything else (an inline
        sync), so the partition's own descriptors serve, without two system calls per file.
        ``active``: take the active segment's writes too (None: with ``flush="always"``; with
        ``"never"`` a round takes only what segment rolls left, as Kafka flushes a rolled
        segment in the background, and ``flush()`` at close takes everything).
        ``complete_flush(ticket)`` (event-loop thread again) moves the high watermark. None:
        nothing to sync.
        """
        if active is None:
            active = self.config.flush == "always"
        take_active = active and self._dirty
        if not take_active and not self.needs_directory_sync:
            if not self._dirty:
                self.high_watermark = self.log_end_offset
            return None
        segments = list(self._unsynced)
        if take_active:
            segments.append(self.segments[-1])
        # Out of descriptors (EMFILE) raises OSError here with nothing taken: the partition stays
        # dirty and the next round tries again.
        fds: list[int] = []
        try:
            for seg in segments:
                fds.append(os.dup(seg.fd) if shared else seg.fd)
            # The aborted-transaction index first: a durable ABORT marker must have a durable
            # entry.
            index_fd = self.txn_index.take_sync_fd(shared)
        except BaseException:
            if shared:
                for fd in fds:
                    os.close(fd)
            raise
        ticket = FlushTicket(
            fds=([] if index_fd is None else [index_fd]) + fds,
            directory=self.dir if self._dir_dirty or self._snapshots else None,
            log_end_offset=self.log_end_offset,
            owned=shared,
            rolled=list(self._unsynced),
            snapshots=self._snapshots,
            active=take_active,
            covers_log=active,
            entries=self._dir_dirty,
            txn_index=index_fd is not None,
        )
        self._unsynced.clear()
        self._snapshots = []
        self._dir_dirty = False
        if take_active:
            self._dirty = False
            self.unsynced_bytes = 0
        return ticket

    def complete_flush(self, ticket: FlushTicket) -> bool:
        """Split flush, last part: move the high watermark. False if the sync failed: then the
        high watermark stays and the next flush covers everything again."""
        if ticket.error is not None:
            if self._closed:
                return False  # deleted meanwhile: nothing left to retry
            if ticket.active:
                self._dirty = True
            if ticket.entries:
                self._dir_dirty = True
            if ticket.txn_index:
                self.txn_index.sync_failed()
            # What the rolls left goes back, older than anything rolled since; segments that
            # retention or the cleaner removed meanwhile (closed) need nothing any more.
            self._unsynced[:0] = [s for s in ticket.rolled if s.fd >= 0]
            self._snapshots[:0] = ticket.snapshots
            del self._snapshots[:-SNAPSHOTS_RETAINED]
            return False
        if ticket.covers_log and ticket.log_end_offset > self.high_watermark:
            self.high_watermark = ticket.log_end_offset
        return True

    # -- retention (retention.py) and expiry --------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        return self.producers.expire(now_ms, expiration_ms)
