"""Log compaction: keep the latest record per key, transaction-aware, in a background thread.

Theory of operation (Kafka's LogCleaner, KIP-58 lags, KIP-354, KIP-98 transactions):

- **What may be cleaned.** Only whole closed segments below the *first uncleanable offset*:
  ``min(last stable offset, high watermark, base of the active segment)``, and not past the first
  segment holding a record newer than ``min.compaction.lag.ms``. So nothing undecided (an open
  transaction, data not yet durable) is ever touched. The *clean* part of the log is what an earlier
  cleaning produced (up to the offset in ``cleaner.checkpoint``); the rest of the cleanable
  segments is *dirty*. A partition is cleaned when dirty / cleanable bytes reaches
  ``min.cleanable.dirty.ratio``, or when its oldest dirty segment is older than
  ``max.compaction.lag.ms``; the dirtiest partition goes first.
- **Offset map.** One pass over the dirty segments builds ``key -> last offset``, skipping control
  batches and the batches of aborted transactions (their records never count as a newer value).
- **Cleaning pass.** Every cleanable segment, from the log start, is rewritten in groups of at most
  ``segment.bytes`` into one new segment per group. Per batch:
  - a data batch of an aborted transaction (from the aborted-transaction index) loses all records;
  - otherwise a record stays if it is the latest of its key (its offset is at least the map's), has
    a key, and is not a tombstone (null value) older than ``delete.retention.ms`` that has already
    been through one cleaning;
  - a transaction marker stays while data of its transaction is still in the log before it (the
    replay at recovery must see the transaction end) and, once its data is gone, until it is older
    than ``delete.retention.ms`` in the clean part; dropped ABORT markers leave the index;
  - a batch whose records all went still stays, as an empty batch (recordsCount 0, same offsets and
    sequence range), when it is the last batch of a producer the partition knows (so the
    producer's sequence numbers survive a rebuild of the producer state) or the last batch of its
    group (so every segment still ends where the next begins);
  - kept batches keep their base offset, lastOffsetDelta, producer fields and timestamps.
- **Atomic swap, crash-safe.** A group is written to ``<base>.log.cleaned`` and fsync'd, renamed to
  ``<base>.log.swap`` and the directory fsync'd (the commit point). Then the old indexes and the
  other old segment files are deleted, the directory fsync'd, the swap renamed to ``<base>.log``,
  the new index written. After kill -9, start-up deletes ``.cleaned`` files (nothing happened) and
  completes every ``.swap`` (``segment.complete_swap``): any crash point leaves either the old
  segments or the cleaned one, never a mix, never a loss.
- **Never blocks the event loop.** The event loop only takes a snapshot of what to clean
  (``make_job``: segment descriptors duplicated, the aborted transactions, the producers' last
  offsets) and, at the end, swaps the segment objects in memory (``apply_result``). ``clean``, all
  the reading, writing and fsyncs, runs in a worker thread, throttled to
  ``log.cleaner.io.max.bytes.per.second``; ``broker/storage/cleaner_service.py`` is that trio side.
  Readers keep reading the old files through their open descriptors until the swap; retention and
  DeleteRecords leave a partition's segments alone while it is cleaned.

Consumers that were reading a segment that got cleaned simply see offset gaps: a Fetch at an
offset that no longer exists returns the next batch after it (``Segment.find_batch``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from broker.log.index import OffsetIndex
from broker.log.segment import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    Segment,
    atomic_write,
    complete_swap,
    fsync_dir,
    log_path,
)
from broker.log.txn_index import AbortedTxn
from protocol.errors import CorruptFrameError
from protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    ControlType,
    decode_records_untrusted,
    parse_control_record,
    parse_header_untrusted,
    rebuild_batch,
    record_spans_untrusted,
    records_section_untrusted,
)

if TYPE_CHECKING:
    from broker.log.partition import Partition

log = logging.getLogger("minibroker.cleaner")

CHECKPOINT_FILE = "cleaner.checkpoint"
# delete.retention.ms of __transaction_state and __consumer_offsets (set when they are created;
# alterable like any topic config). Their only reader is the broker, once, at start, so tombstones
# and finished transaction markers need not wait Kafka's default day: with it, a broker committing
# hundreds of transactions a second would keep a day of markers in __consumer_offsets.
INTERNAL_DELETE_RETENTION_MS = 5_000
# max.compaction.lag.ms of the same topics: an active segment idle that long is rolled and cleaned,
# so once writes stop their size comes down to the live state alone.
INTERNAL_MAX_COMPACTION_LAG_MS = 5_000


def internal_topic_config(segment_bytes: int) -> dict[str, str]:
    """Overrides of ``__transaction_state`` and ``__consumer_offsets`` at their creation."""
    return {
        "cleanup.policy": "compact",
        "segment.bytes": str(segment_bytes),
        "delete.retention.ms": str(INTERNAL_DELETE_RETENTION_MS),
        "max.compaction.lag.ms": str(INTERNAL_MAX_COMPACTION_LAG_MS),
    }
_READ_CHUNK = 4 << 20
_WRITE_CHUNK = 1 << 20
# Estimated memory of one offset-map entry (a dict slot, a bytes key, an int): bounds the map
# from log.cleaner.dedupe.buffer.size.
MAP_ENTRY_BYTES = 128

# Where a test may stop the process (CrashHook): each step of cleaning one group.
CRASH_POINTS = (
    "cleaned_written",  # .cleaned complete and fsync'd, not yet renamed
    "swap_renamed",  # .swap in place (the commit point), old segments untouched
    "old_deleted",  # old indexes and segments but the first deleted, swap not yet renamed
    "swap_completed",  # swap renamed over the first old segment, index not written
    "index_written",  # the group is done
    "checkpoint_written",  # the whole cleaning is done
)
CrashHook = Callable[[str], None]


class CleaningAborted(Exception):
    """The partition went away (deleted, shutting down) while it was being cleaned."""


# -- checkpoint ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """What the cleaner remembers of a partition (``cleaner.checkpoint``, JSON, atomically
    replaced): where the dirty part begins, and when each range of offsets was cleaned for the
    first time. The delete horizon of a tombstone or a finished marker runs from that first
    cleaning (KIP-534's rule, kept beside the log instead of in the batch header), so it goes
    ``delete.retention.ms`` after the cleaner first saw it, however often its segment is
    rewritten later."""

    first_dirty_offset: int = 0
    # (end_offset, cleaned_at_ms), ascending: the offsets below end_offset (and at or above the
    # previous entry's end_offset) were first cleaned at cleaned_at_ms.
    cleaned: tuple[tuple[int, int], ...] = ()

    def first_cleaned_ms(self, offset: int) -> int | None:
        """When ``offset`` was first cleaned; None if it is still dirty."""
        i = bisect_right([end for end, _ in self.cleaned], offset)
        return self.cleaned[i][1] if i < len(self.cleaned) else None

    def after_cleaning(self, end: int, now_ms: int, delete_retention_ms: int) -> Checkpoint:
        """The checkpoint once everything below ``end`` is clean. Ranges whose horizon passed
        are merged into one, so the list stays as short as the cleanings within
        ``delete.retention.ms``."""
        cleaned = list(self.cleaned)
        if end > self.first_dirty_offset:
            cleaned.append((end, now_ms))
        horizon = now_ms - delete_retention_ms
        old = [entry for entry in cleaned if entry[1] <= horizon]
        if len(old) > 1:
            cleaned = [old[-1]] + cleaned[len(old):]
        return Checkpoint(max(end, self.first_dirty_offset), tuple(cleaned))


def read_checkpoint(directory: Path) -> Checkpoint:
    """The partition's checkpoint (empty if none or unreadable: everything is dirty)."""
    try:
        doc = json.loads((directory / CHECKPOINT_FILE).read_bytes())
        return Checkpoint(
            int(doc["first_dirty_offset"]),
            tuple((int(end), int(at)) for end, at in doc["cleaned"]),
        )
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return Checkpoint()


def valid_checkpoint(checkpoint: Checkpoint, partition: Partition) -> Checkpoint:
    """``checkpoint``, or an empty one if it lies beyond the log (recovery cut the log since:
    offsets past the cut will be given to new data, which is dirty)."""
    if checkpoint.first_dirty_offset > partition.log_end_offset:
        return Checkpoint()
    return checkpoint


def write_checkpoint(directory: Path, checkpoint: Checkpoint) -> None:
    body = json.dumps({
        "version": 1, "first_dirty_offset": checkpoint.first_dirty_offset,
        "cleaned": [list(entry) for entry in checkpoint.cleaned],
    }).encode()
    atomic_write(directory / CHECKPOINT_FILE, body)


# -- planning (event loop) -----------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentView:
    """What the worker needs of one segment: a private descriptor and the facts in memory."""

    base_offset: int
    fd: int  # a duplicate, closed by the worker
    size: int
    next_offset: int


@dataclass
class CleanJob:
    """A snapshot of one partition, taken on the event loop, for the worker thread."""

    topic: str
    partition: int
    directory: Path
    segments: list[SegmentView]  # the cleanable segments, from the log start
    checkpoint: Checkpoint
    aborted: list[AbortedTxn]
    producer_last_offsets: dict[int, int]  # producer id -> last offset of its last data batch
    delete_retention_ms: int
    now_ms: int
    segment_bytes: int
    index_interval_bytes: int
    max_map_entries: int


@dataclass
class Replacement:
    old_bases: list[int]
    new: Segment


@dataclass
class CleanResult:
    replacements: list[Replacement] = field(default_factory=list)
    dropped_abort_markers: list[int] = field(default_factory=list)
    checkpoint: Checkpoint = Checkpoint()
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    seconds: float = 0.0  # set by the host (the worker has no clock)
    # Set when cleaning stopped early; the replacements done before it still must be applied.
    error: BaseException | None = None


@dataclass(frozen=True)
class Cleanability:
    segments: list[Segment]  # cleanable, from the log start
    dirty_bytes: int
    total_bytes: int
    first_dirty: int
    due: bool  # dirty ratio reached or max.compaction.lag.ms passed


def cleanability(partition: Partition, checkpoint: Checkpoint, now_ms: int
                 ) -> Cleanability | None:
    """Which segments of a compacted partition may be cleaned now, and whether they should be:
    the dirty ratio is reached, the oldest dirty segment is older than max.compaction.lag.ms, or
    a range cleaned earlier has just passed its delete horizon (its tombstones and finished
    markers can go; without this they would wait for the next write)."""
    first_dirty = checkpoint.first_dirty_offset
    config = partition.config
    if not config.compact:
        return None
    segments = partition.segments
    uncleanable = min(partition.last_stable_offset, partition.high_watermark,
                      segments[-1].base_offset)
    lag_limit = now_ms - config.min_compaction_lag_ms
    cleanable: list[Segment] = []
    for seg in segments[:-1]:
        if seg.next_offset > uncleanable:
            break
        if config.min_compaction_lag_ms > 0 and seg.max_timestamp > lag_limit:
            break
        cleanable.append(seg)
    if not cleanable:
        return None
    first_dirty = max(first_dirty, cleanable[0].base_offset)
    dirty = [s for s in cleanable if s.base_offset >= first_dirty]
    # The first range cleaned after the merged old one has passed its horizon.
    cleaned = checkpoint.cleaned
    deletes_due = len(cleaned) > 1 and cleaned[1][1] <= now_ms - config.delete_retention_ms
    if not dirty and not deletes_due:
        return None
    dirty_bytes = sum(s.size for s in dirty)
    total = sum(s.size for s in cleanable)
    ratio_due = bool(dirty) and dirty_bytes / total >= config.min_cleanable_dirty_ratio
    oldest = dirty[0].max_timestamp if dirty else -1
    lag_due = oldest >= 0 and now_ms - oldest > config.max_compaction_lag_ms
    return Cleanability(cleanable, dirty_bytes, total, first_dirty,
                        ratio_due or lag_due or deletes_due)


def make_job(partition: Partition, plan: Cleanability, checkpoint: Checkpoint, now_ms: int,
             max_map_entries: int) -> CleanJob:
    """Snapshot ``partition`` for the worker (event loop; cheap: no reads)."""
    views: list[SegmentView] = []
    try:
        for seg in plan.segments:
            views.append(SegmentView(seg.base_offset, os.dup(seg.fd), seg.size, seg.next_offset))
    except OSError:
        for view in views:
            os.close(view.fd)
        raise
    last_offsets = {
        pid: entry.batches[-1].last_offset
        for pid, entry in partition.producers.producers.items()
        if entry.batches
    }
    config = partition.config
    return CleanJob(
        topic=partition.topic,
        partition=partition.index,
        directory=partition.dir,
        segments=views,
        checkpoint=dataclasses.replace(checkpoint, first_dirty_offset=plan.first_dirty),
        aborted=partition.txn_index.entries,
        producer_last_offsets=last_offsets,
        delete_retention_ms=config.delete_retention_ms,
        now_ms=now_ms,
        segment_bytes=config.segment_bytes,
        index_interval_bytes=config.index_interval_bytes,
        max_map_entries=max_map_entries,
    )


# -- the worker ----------------------------------------------------------------------------------


# The worker's hooks into its host: ``io(nbytes)`` after each read or write (the service throttles
# there), ``stop()`` polled between chunks (True: abandon the cleaning, nothing half done).
IoHook = Callable[[int], None]
StopHook = Callable[[], bool]


def _no_io(nbytes: int) -> None:
    pass


def _never() -> bool:
    return False


class _AbortedRanges:
    """``producer_id -> [(first_offset, marker_offset)]`` of aborted transactions."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._ranges: dict[int, tuple[list[int], list[int]]] = {}
        for txn in sorted(aborted, key=lambda t: t.first_offset):
            firsts, lasts = self._ranges.setdefault(txn.producer_id, ([], []))
            firsts.append(txn.first_offset)
            lasts.append(txn.last_offset)

    def contains(self, producer_id: int, offset: int) -> bool:
        ranges = self._ranges.get(producer_id)
        if ranges is None:
            return False
        i = bisect_right(ranges[0], offset) - 1
        return i >= 0 and offset < ranges[1][i]


def _iter_batches(view: SegmentView, io: IoHook, stop: StopHook
                  ) -> Iterator[tuple[bytes, int, BatchHeader]]:
    """``(buffer, position in buffer, header)`` of each batch of the segment, read in chunks."""
    pos = 0
    while pos < view.size:
        if stop():
            raise CleaningAborted()
        chunk = os.pread(view.fd, min(_READ_CHUNK, view.size - pos), pos)
        io(len(chunk))
        rel = 0
        n = len(chunk)
        while rel + HEADER_SIZE <= n:
            header = parse_header_untrusted(chunk, rel)
            size = header.length + LOG_OVERHEAD
            if rel + size > n:
                break
            yield chunk, rel, header
            rel += size
        if rel == 0:
            # One batch larger than the chunk: read it whole.
            header = parse_header_untrusted(os.pread(view.fd, HEADER_SIZE, pos), 0)
            size = header.length + LOG_OVERHEAD
            if pos + size > view.size:
                raise CorruptFrameError(f"batch at {pos} runs past the segment")
            whole = os.pread(view.fd, size, pos)
            io(len(whole))
            yield whole, 0, header
            rel = size
        pos += rel


def build_offset_map(job: CleanJob, aborted: _AbortedRanges, io: IoHook,
                     stop: StopHook) -> tuple[dict[bytes, int], int]:
    """``(key -> last offset, end)`` over the dirty segments; ``end`` is the offset after the
    last segment mapped (fewer than all when the map is full)."""
    offsets: dict[bytes, int] = {}
    first_dirty = job.checkpoint.first_dirty_offset
    end = first_dirty
    for view in job.segments:
        if view.base_offset < first_dirty:
            continue
        for buf, pos, header in _iter_batches(view, io, stop):
            if header.is_control:
                continue
            if header.is_transactional and aborted.contains(header.producer_id, header.base_offset):
                continue
            for record in decode_records_untrusted(buf, pos, header):
                if record.key is not None:
                    offsets[record.key] = record.offset
        end = view.next_offset
        if len(offsets) >= job.max_map_entries:
            break
    return offsets, end


class _Output:
    """The ``.cleaned`` file of one group being written, and its index."""

    def __init__(self, directory: Path, base_offset: int, index_interval: int,
                 io: IoHook) -> None:
        self.path = directory / (log_path(directory, base_offset).name + CLEANED_SUFFIX)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.base_offset = base_offset
        self.index = OffsetIndex()
        self.index_interval = index_interval
        self.size = 0
        self.max_timestamp = -1
        self.next_offset = base_offset
        self.bytes_since_index = 0
        self._pending = bytearray()
        self._io = io

    def add(self, batch: bytes | memoryview, header: BatchHeader) -> None:
        n = len(batch)
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
        if self.size == 0 or self.bytes_since_index >= self.index_interval:
            self.index.append(header.base_offset, self.size, self.max_timestamp)
            self.bytes_since_index = 0
        self.bytes_since_index += n
        self.size += n
        self.next_offset = header.base_offset + header.last_offset_delta + 1
        self._pending += batch
        if len(self._pending) >= _WRITE_CHUNK:
            self._flush()

    def _flush(self) -> None:
        view = memoryview(self._pending)
        while view:
            view = view[os.write(self.fd, view):]
        self._io(len(self._pending))
        self._pending = bytearray()

    def finish(self) -> None:
        self._flush()
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.path.unlink(missing_ok=True)


def _groups(views: list[SegmentView], end: int, max_bytes: int) -> list[list[SegmentView]]:
    """Consecutive segments below ``end`` in groups of at most ``max_bytes`` (at least one)."""
    groups: list[list[SegmentView]] = []
    current: list[SegmentView] = []
    size = 0
    for view in views:
        if view.next_offset > end:
            break
        if current and size + view.size > max_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(view)
        size += view.size
    if current:
        groups.append(current)
    return groups


def clean(job: CleanJob, io: IoHook = _no_io, stop: StopHook = _never,
          crash_hook: CrashHook | None = None) -> CleanResult:
    """Clean the job's segments (worker thread; see the module docstring). Closes the job's
    descriptors. Raises ``CleaningAborted``, ``CorruptFrameError`` or ``OSError``; a failure before
    a group's commit point leaves that group untouched, after it the group is swapped."""
    hook = crash_hook or (lambda point: None)
    result = CleanResult(checkpoint=job.checkpoint)
    try:
        aborted = _AbortedRanges(job.aborted)
        offset_map, end = build_offset_map(job, aborted, io, stop)
        open_retained: set[int] = set()  # producers with kept transactional data, no marker yet
        for group in _groups(job.segments, end, job.segment_bytes):
            _clean_group(job, group, offset_map, aborted, open_retained, io, stop, hook, result)
        checkpoint = job.checkpoint.after_cleaning(end, job.now_ms, job.delete_retention_ms)
        write_checkpoint(job.directory, checkpoint)
        result.checkpoint = checkpoint
        hook("checkpoint_written")
    except (CleaningAborted, CorruptFrameError, OSError, ValueError) as exc:
        result.error = exc
    finally:
        for view in job.segments:
            os.close(view.fd)
    return result


def _clean_group(job: CleanJob, group: list[SegmentView], offset_map: dict[bytes, int],
                 aborted: _AbortedRanges, open_retained: set[int], io: IoHook,
                 stop: StopHook, hook: CrashHook, result: CleanResult) -> None:
    out = _Output(job.directory, group[0].base_offset, job.index_interval_bytes, io)
    last_offsets = job.producer_last_offsets
    checkpoint = job.checkpoint
    horizon = job.now_ms - job.delete_retention_ms
    try:
        for i, view in enumerate(group):
            last_in_group = i == len(group) - 1
            for buf, pos, header in _iter_batches(view, io, stop):
                result.bytes_read += header.length + LOG_OVERHEAD
                is_last = last_in_group and header.last_offset + 1 == view.next_offset
                # Tombstones and finished markers go only once delete.retention.ms passed since
                # the cleaning that first saw them (consumers had that long to read them).
                cleaned_at = checkpoint.first_cleaned_ms(header.base_offset)
                retain_deletes = cleaned_at is None or cleaned_at > horizon
                batch = _clean_batch(buf, pos, header, offset_map, aborted, retain_deletes,
                                     open_retained, last_offsets, is_last, result)
                if batch is not None:
                    out.add(batch, header)
        out.finish()
    except BaseException:
        out.discard()
        raise
    result.bytes_written += out.size
    hook("cleaned_written")
    directory = job.directory
    swap = directory / (log_path(directory, out.base_offset).name + SWAP_SUFFIX)
    os.replace(out.path, swap)
    fsync_dir(directory)
    hook("swap_renamed")
    _swap(directory, swap, hook)
    fd = os.open(log_path(directory, out.base_offset), os.O_RDWR)
    segment = Segment(directory, out.base_offset, fd, out.size)
    segment.index = out.index
    segment.next_offset = out.next_offset
    segment.max_timestamp = out.max_timestamp
    segment.bytes_since_index = out.bytes_since_index
    segment.save_index(fsync=True)
    hook("index_written")
    result.replacements.append(Replacement([v.base_offset for v in group], segment))


def _swap(directory: Path, swap: Path, hook: CrashHook) -> None:
    """``complete_swap`` with the crash points of the tests between its steps."""
    complete_swap(directory, swap, before_rename=lambda: hook("old_deleted"))
    hook("swap_completed")
    fsync_dir(directory)


def _placeholder(header: BatchHeader) -> bytes:
    """An empty plain batch over the offsets of ``header``'s batch: keeps a segment ending where
    the next one begins when its last batch goes (no producer, not transactional)."""
    plain = header._replace(attributes=header.attributes & TIMESTAMP_TYPE_BIT, producer_id=-1,
                            producer_epoch=-1, base_sequence=-1)
    return rebuild_batch(plain, b"", [])


def _clean_batch(buf: bytes, pos: int, header: BatchHeader, offset_map: dict[bytes, int],
                 aborted: _AbortedRanges, retain_deletes: bool, open_retained: set[int],
                 last_offsets: dict[int, int], is_last: bool, result: CleanResult
                 ) -> bytes | memoryview | None:
    """The batch as it stays in the log (itself, rebuilt with fewer records, or empty), or None."""
    size = header.length + LOG_OVERHEAD
    pid = header.producer_id
    if header.is_control:
        keep = pid in open_retained or retain_deletes
        open_retained.discard(pid)
        if keep:
            return memoryview(buf)[pos:pos + size]
        result.records_removed += header.records_count
        for record in decode_records_untrusted(buf, pos, header):
            if parse_control_record(record)[0] is ControlType.ABORT:
                result.dropped_abort_markers.append(header.base_offset)
        return _placeholder(header) if is_last else None
    records = decode_records_untrusted(buf, pos, header)
    if header.is_transactional and aborted.contains(pid, header.base_offset):
        kept: list[int] = []
    else:
        kept = [
            i for i, r in enumerate(records)
            if r.key is not None
            and offset_map.get(r.key, -1) <= r.offset
            and (r.value is not None or retain_deletes)
        ]
    result.records_removed += len(records) - len(kept)
    if len(kept) == len(records) and records:
        batch: bytes | memoryview | None = memoryview(buf)[pos:pos + size]
    elif kept:
        section = records_section_untrusted(buf, pos, header)
        spans = record_spans_untrusted(section, header.records_count)
        batch = rebuild_batch(header, section, [spans[i] for i in kept])
    elif pid >= 0 and last_offsets.get(pid) == header.last_offset:
        batch = rebuild_batch(header, b"", [])
    elif is_last:
        return _placeholder(header)
    else:
        batch = None
    if batch is not None and header.is_transactional:
        open_retained.add(pid)
    return batch


def apply_result(partition: Partition, result: CleanResult) -> bool:
    """Swap the cleaned segments in (event loop). Groups swapped on disk are swapped in memory
    even if a later one failed. False if the partition was closed or deleted meanwhile."""
    if partition.closed:
        for r in result.replacements:
            r.new.close()
        return False
    for r in result.replacements:
        partition.replace_segments(r.old_bases, r.new)
    if result.error is None:
        partition.txn_index.remove(result.dropped_abort_markers)
    return True


def clean_now(partition: Partition, now_ms: int, *, force: bool = True,
              max_map_entries: int = 1 << 20, crash_hook: CrashHook | None = None
              ) -> CleanResult | None:
    """Clean ``partition`` synchronously in the calling thread (tools and tests); ``force``
    ignores the dirty ratio. None if there is nothing cleanable."""
    checkpoint = valid_checkpoint(read_checkpoint(partition.dir), partition)
    plan = cleanability(partition, checkpoint, now_ms)
    if plan is None or not (plan.due or force):
        return None
    job = make_job(partition, plan, checkpoint, now_ms, max_map_entries)
    result = clean(job, crash_hook=crash_hook)
    apply_result(partition, result)
    if result.error is not None:
        raise result.error
    return result
