"""Loading a partition directory at start: the clean path and crash recovery.

Clean path (the LogManager found a clean point for this partition that matches its files,
``clean_points.py``): every segment's index is trusted (the active segment's from the clean point
while it is small), only the batch headers after each segment's last index entry are walked (a
few reads) to find the segment's end (the active segment's: up to the size its clean point
recorded; the zeros of preallocation after it are kept, and after a crash must still be zeros),
and the producer state comes from the clean point (or, written by earlier versions, the snapshot
at the log end offset). No CRC is computed.

Crash path (no marker, or anything above does not line up):

1. Pick the newest producer-state snapshot; its offset is the recovery point. Segments wholly
   before the segment holding it were fsync'd with their index before that snapshot was put in
   place (the flush round after their roll does it in that order, ``partition.py``): they are
   opened as on the clean path (index + tail walk; falling back to a scan if that fails: an
   index that is missing, empty, torn or inconsistent).
2. From the segment holding the recovery point on, every batch is read back and checked: a
   readable magic-2 header, the whole batch present, ``baseOffset`` equal to the previous batch's
   last offset + 1, and the CRC-32C. Each good batch goes into a fresh index and, at or after the
   recovery point, is replayed into the producer state loaded from the snapshot.
3. The first bad batch ends the log (Kafka does the same): the segment is truncated there and every
   later segment deleted. Zeros after the data (preallocation, or pages never written before a
   kill -9) are not reported as truncated; anything else cut is (``truncated_bytes``).
4. If the log now ends before the snapshot's offset (data lost beneath it, e.g. power loss), that
   snapshot is deleted and the procedure restarts from the next older one (or from the log start
   with an empty state when none is left).
5. Scanned segments are fdatasync'd and their rebuilt indexes written (but the active
   segment's, left to its roll or the clean close), so what recovery exposes (the high watermark
   starts at the log end) is durable.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from broker.log.clean_points import CleanPoint
from broker.log.index import OffsetIndex
from broker.log.producer_state import ProducerStateManager, list_snapshots, snapshot_path
from broker.log.segment import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    CorruptLogError,
    Segment,
    complete_swap,
    fsync_dir,
)
from broker.log.txn_index import AbortedTxn
from protocol.errors import CorruptFrameError
from protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    ControlType,
    batch_crc_ok,
    decode_batches_untrusted,
    parse_control_record,
    parse_header_untrusted,
)

_SCAN_CHUNK = 4 << 20
# Bytes past a clean point's data looked at after a clean shutdown (``_load_clean``).
_CLEAN_TAIL_CHECK = 4096


@dataclass(frozen=True)
class RecoveryReport:
    """What loading one partition found (the server prints these at start)."""

    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    # Bytes of torn or corrupt data cut from the log, up to the last non-zero one: zeros after the
    # data are taken for preallocation (or pages never written before a kill -9).
    truncated_bytes: int
    clean: bool  # True: the clean-shutdown path (no scan)


class LoadedLog(NamedTuple):
    segments: list[Segment]
    producers: ProducerStateManager
    truncated_bytes: int
    clean: bool
    # The aborted transactions whose ABORT marker the scan replayed, in marker order: the
    # partition puts back those its aborted-transaction index lacks (``TxnIndex.restore``).
    aborted: tuple[AbortedTxn, ...] = ()
    # The directory's files as loading found them (None: not listed), so that the partition
    # does not try to open files that are not there (the aborted-transaction index).
    names: frozenset[str] | None = None


def list_segments(directory: Path, names: list[str] | None = None) -> list[int]:
    """Base offsets of the segments in ``directory`` (``names``: its listing, if at hand)."""
    # (os.listdir rather than pathlib's glob, here and in _remove_leftovers: several times
    # cheaper, and a start with many partitions does this for each; issue 36)
    bases = []
    for name in os.listdir(directory) if names is None else names:
        if name.endswith(".log") and name[:-4].isdigit():
            bases.append(int(name[:-4]))
    return sorted(bases)


def _remove_leftovers(directory: Path) -> list[str]:
    """Temporary files of interrupted atomic writes and cleanings, indexes whose segment is gone;
    a cleaning that reached its commit point (a ``.swap`` file) is completed. Returns the
    directory's listing (what it left; one listdir serves the loader)."""
    names = os.listdir(directory)
    for name in names:
        if name.endswith((".tmp", CLEANED_SUFFIX)):
            # (a cleaning interrupted before its commit point: never used)
            (directory / name).unlink(missing_ok=True)
    swaps = sorted(directory / n for n in names if n.endswith(f".log{SWAP_SUFFIX}"))
    for swap in swaps:
        complete_swap(directory, swap)
    if swaps:
        fsync_dir(directory)
        names = os.listdir(directory)
    present = set(names)
    kept = []
    for name in names:
        if name.endswith(".index") and name[:-6] + ".log" not in present:
            (directory / name).unlink(missing_ok=True)
        elif not name.endswith((".tmp", CLEANED_SUFFIX)):
            kept.append(name)
    return kept


def open_trusted(segment: Segment, end: int | None = None,
                 inline: list[int] | None = None) -> None:
    """Load the segment's index (``inline``: its entries from a clean point instead of its
    file) and walk the headers after its last entry to find the end.

    Raises ``CorruptLogError`` if the index is missing or inconsistent or the batches after it do
    not end exactly at the end of the file (zeros of preallocation or a torn tail included), or
    at ``end`` if given (the data's size a clean point recorded: the file may be longer, its
    preallocated tail kept; ``segment.allocated`` stays the file's length).
    """
    file_size = segment.allocated if end is None else end
    if inline is not None:
        index = OffsetIndex.from_flat(inline, segment.base_offset, file_size)
    else:
        index = OffsetIndex.load(segment.index_path, segment.base_offset, file_size)
    if index is None:
        raise CorruptLogError(f"{segment.index_path}: missing or inconsistent")
    segment.index = index
    segment.size = file_size
    if not len(index):
        segment.next_offset = segment.base_offset
        segment.max_timestamp = -1
        segment.bytes_since_index = 0
        return
    start = index.positions[-1]
    expected = index.offsets[-1]
    max_ts = index.max_timestamps[-1]
    for _, base, _, last_delta, batch_max_ts in segment.walk(start, file_size):
        if base < expected:
            # Offsets only increase; a cleaned segment has gaps between batches.
            raise CorruptLogError(f"{segment.log_path}: offset {base} where {expected} was expected")
        expected = base + last_delta + 1
        if batch_max_ts > max_ts:
            max_ts = batch_max_ts
    segment.next_offset = expected
    segment.max_timestamp = max_ts
    segment.bytes_since_index = file_size - start


def _nonzero_extent(fd: int, start: int, end: int) -> int:
    """Bytes from ``start`` to the last non-zero byte before ``end`` (0 if all zeros)."""
    last = start
    pos = start
    while pos < end:
        chunk = os.pread(fd, min(_SCAN_CHUNK, end - pos), pos)
        if not chunk:
            break
        # (all zeros, the usual tail: one memcmp; rstrip costs ~10 ns a byte)
        if chunk != bytes(len(chunk)):
            last = pos + len(chunk.rstrip(b"\0"))
        pos += len(chunk)
    return last - start


def scan_segment(
    segment: Segment,
    index_interval: int,
    producers: ProducerStateManager,
    replay_from: int,
    now_ms: int,
    aborted: list[AbortedTxn] | None = None,
) -> tuple[int, bool]:
    """CRC-check the segment from its start, rebuild its index, replay batches at or after
    ``replay_from`` into ``producers``, and truncate the file after the last good batch.
    ``aborted`` collects each replayed ABORT marker that ends an open transaction, as the
    aborted-transaction index holds it (the marker can be on disk without its entry: it is
    written first, and a power cut can keep the log's page and lose the index's, or a kill -9
    fall between the two writes).

    Returns ``(truncated_bytes, intact)``: non-zero bytes cut, and whether the file held only
    good batches (if not, the log ends in this segment).
    """
    fd = segment.fd
    file_size = os.fstat(fd).st_size
    segment.index = OffsetIndex()
    segment.size = 0
    segment.max_timestamp = -1
    segment.bytes_since_index = 0
    expected = segment.base_offset
    pos = 0
    buf = b""
    buf_start = 0
    while pos < file_size:
        rel = pos - buf_start
        if len(buf) - rel < HEADER_SIZE:
            buf = os.pread(fd, min(_SCAN_CHUNK, file_size - pos), pos)
            buf_start = pos
            rel = 0
            if len(buf) < HEADER_SIZE:
                break
        try:
            header = parse_header_untrusted(buf, rel)
        except CorruptFrameError:
            break
        size = header.length + LOG_OVERHEAD
        if rel + size > len(buf):
            if pos + size > file_size:
                break
            buf = os.pread(fd, max(_SCAN_CHUNK, size), pos)
            buf_start = pos
            rel = 0
            if len(buf) < size:
                break
        # Offsets increase from batch to batch; a cleaned segment (cleaner.py) has gaps, so only
        # going backwards ends the log.
        if header.base_offset < expected or not batch_crc_ok(buf, rel, header):
            break
        expected = header.base_offset
        segment.add_batch(pos, expected, size, header.max_timestamp, index_interval)
        if expected >= replay_from:
            first = None
            if aborted is not None and header.is_control and header.producer_id >= 0:
                entry = producers.get(header.producer_id)
                first = None if entry is None else entry.current_txn_first_offset
            producers.replay(header, now_ms)
            if first is not None and _is_abort(buf[rel:rel + size]):
                undecided = producers.first_open_offset()
                assert aborted is not None
                aborted.append(AbortedTxn(header.producer_id, first, expected,
                                          expected + 1 if undecided is None else undecided))
        expected += header.last_offset_delta + 1
        pos += size
    segment.size = pos
    segment.next_offset = expected
    truncated = _nonzero_extent(fd, pos, file_size)
    if truncated:
        os.ftruncate(fd, pos)
        segment.allocated = pos
    else:
        # Only zeros after the data (preallocation, or pages a kill -9 never got to write):
        # kept as preallocated room, as a roll or a clean close leaves it. Truncating cost a
        # journal operation per partition (2-3 ms, serialized), most of an unclean start's
        # time with thousands of changed partitions.
        segment.allocated = file_size
    return truncated, pos == file_size


def _segment_bytes(directory: Path, base: int) -> int:
    """Non-zero bytes of a segment file about to be deleted (for the truncation report)."""
    path = directory / f"{base:020d}.log"
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        return _nonzero_extent(fd, 0, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _delete_segment_files(directory: Path, base: int) -> None:
    (directory / f"{base:020d}.log").unlink(missing_ok=True)
    (directory / f"{base:020d}.index").unlink(missing_ok=True)


def _load_clean(directory: Path, bases: list[int], point: CleanPoint,
                clean_shutdown: bool) -> LoadedLog | None:
    """The partition as its clean point says, or None (then it is scanned). ``clean_shutdown``:
    ``point`` comes from the points file a clean-shutdown marker names (nothing was written
    since); else it is a recovery point after a crash, and the active segment's bytes after the
    recorded size must still be zeros (the clean close keeps its preallocated tail, which later
    appends fill without changing the file's length). The producer state and the active index
    come from the point itself (format 2) or from the snapshot at the log end offset and the
    index file (format 1, ``clean_points.py``)."""
    clean = point.state
    if not bases or bases[-1] != clean.active_base_offset:
        return None
    if point.producers is not None:
        try:
            producers = ProducerStateManager.from_entries(point.producers)
        except (ValueError, TypeError, KeyError):
            return None
    else:
        snap = ProducerStateManager.read_snapshot(snapshot_path(directory, clean.log_end_offset))
        if snap is None or snap[0] != clean.log_end_offset:
            return None
        producers = snap[1]
    segments: list[Segment] = []
    try:
        for base in bases:
            seg = Segment.open_existing(directory, base)
            segments.append(seg)
            active = base == clean.active_base_offset
            if active and clean.active_size > seg.allocated:
                raise CorruptLogError(f"{seg.log_path}: shorter than its clean point")
            if active:
                open_trusted(seg, clean.active_size, point.index)
            else:
                open_trusted(seg)
            if len(segments) > 1 and segments[-2].next_offset != base:
                raise CorruptLogError(f"{seg.log_path}: does not continue the previous segment")
        active_seg = segments[-1]
        if (active_seg.size != clean.active_size
                or active_seg.next_offset != clean.log_end_offset):
            raise CorruptLogError(f"{active_seg.log_path}: does not match the clean-shutdown marker")
        if active_seg.allocated > clean.active_size:
            # After a clean shutdown nothing was written since: the first bytes past the data
            # are looked at only to catch a file appended to meanwhile (one read); after a
            # crash the whole tail must still be zeros.
            end = active_seg.allocated
            if clean_shutdown:
                end = min(end, clean.active_size + _CLEAN_TAIL_CHECK)
            if _nonzero_extent(active_seg.fd, clean.active_size, end):
                raise CorruptLogError(f"{active_seg.log_path}: written after its clean point")
    except CorruptLogError:
        for seg in segments:
            seg.close()
        return None
    return LoadedLog(segments, producers, 0, True)


def _is_abort(batch: bytes) -> bool:
    """Whether a control batch (CRC checked) is an ABORT marker."""
    try:
        for _, records in decode_batches_untrusted(bytes(batch)):
            return bool(records) and parse_control_record(records[0])[0] == ControlType.ABORT
    except (CorruptFrameError, ValueError):
        return False
    return False


def load_log(
    directory: Path, index_interval: int, now_ms: int, clean: CleanPoint | None,
    clean_shutdown: bool = False, sync: bool = True,
) -> LoadedLog:
    """Open every segment of a partition directory, recovering after a crash (module docstring).

    ``clean``: the partition's clean point, from the points file of a clean shutdown
    (``clean_shutdown``) or a recovery point. Creates an empty segment at offset 0 if the
    directory has none. ``sync=False``: what a scan rewrites is not synced here (step 5); the
    caller syncs it (``LogManager``: one syncfs for many scanned partitions) before anything
    relies on it.
    """
    names = _remove_leftovers(directory)
    bases = list_segments(directory, names)
    if not bases:
        for offset in list_snapshots(directory):
            snapshot_path(directory, offset).unlink(missing_ok=True)
        seg = Segment.create(directory, 0)
        fsync_dir(directory)
        return LoadedLog([seg], ProducerStateManager(), 0, True)
    if clean is not None:
        loaded = _load_clean(directory, bases, clean, clean_shutdown)
        if loaded is not None:
            _finish(loaded.segments, now_ms)
            return loaded._replace(names=frozenset(names))

    snapshots = list_snapshots(directory)
    truncated = 0
    while True:
        recovery_point = -1
        producers = ProducerStateManager()
        if snapshots:
            snap = ProducerStateManager.read_snapshot(snapshot_path(directory, snapshots[-1]))
            if snap is None or snap[0] != snapshots[-1]:
                snapshot_path(directory, snapshots.pop()).unlink(missing_ok=True)
                continue
            recovery_point, producers = snap
        bases = list_segments(directory)
        first_scanned = max(bisect_right(bases, recovery_point) - 1, 0)
        segments: list[Segment] = []
        scanned: list[Segment] = []
        aborted: list[AbortedTxn] = []
        for i, base in enumerate(bases):
            if segments and segments[-1].next_offset != base:
                # A gap or overlap: the log cannot continue here.
                for later in bases[i:]:
                    truncated += _segment_bytes(directory, later)
                    _delete_segment_files(directory, later)
                break
            seg = Segment.open_existing(directory, base)
            segments.append(seg)
            if i < first_scanned:
                try:
                    open_trusted(seg)
                    continue
                except CorruptLogError:
                    first_scanned = i
            cut, intact = scan_segment(seg, index_interval, producers, recovery_point, now_ms,
                                       aborted)
            truncated += cut
            scanned.append(seg)
            if not intact:
                for later in bases[i + 1 :]:
                    truncated += _segment_bytes(directory, later)
                    _delete_segment_files(directory, later)
                break
        log_end_offset = segments[-1].next_offset
        if recovery_point > log_end_offset:
            # The snapshot describes data that is no longer there: use an older one.
            for seg in segments:
                seg.close()
            snapshot_path(directory, snapshots.pop()).unlink(missing_ok=True)
            continue
        break

    for offset in snapshots:
        if offset > log_end_offset:
            snapshot_path(directory, offset).unlink(missing_ok=True)
    for seg in scanned:
        if sync:
            seg.sync()
        if seg is not segments[-1]:
            # Not the active segment's: a roll or a clean close writes it, and until then a
            # crash scans that segment anyway (with many partitions, one fsync less each).
            seg.save_index(fsync=sync)
    if sync:
        fsync_dir(directory)
    _finish(segments, now_ms)
    return LoadedLog(segments, producers, truncated, False, tuple(aborted))


def _finish(segments: list[Segment], now_ms: int) -> None:
    # The segment.ms clock of a loaded, non-empty active segment restarts at load time (the
    # creation time is not stored).
    active = segments[-1]
    if active.size:
        active.roll_base_ms = now_ms


def truncate_before(directory: Path, offset: int) -> int:
    """Offline repair: cut the partition in ``directory`` so that its log ends before the batch
    holding ``offset`` (that batch and everything after it go). The broker must not be running.

    Later segments are deleted, the segment holding the offset is truncated at that batch, its
    index and any producer-state snapshot beyond the cut are removed, so the next start rebuilds
    them by a scan. Returns the new log end offset.
    """
    bases = list_segments(directory)
    new_end = offset
    for i, base in reversed(list(enumerate(bases))):
        if base >= offset and i > 0:
            _delete_segment_files(directory, base)
            continue
        path = directory / f"{base:020d}.log"
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            pos, new_end = 0, base
            while pos + LOG_OVERHEAD <= size:
                head = os.pread(fd, LOG_OVERHEAD, pos)
                batch_base = int.from_bytes(head[:8], "big", signed=True)
                length = int.from_bytes(head[8:12], "big", signed=True)
                if batch_base >= offset or length < HEADER_SIZE - LOG_OVERHEAD or (
                    batch_base == 0 and length == 0
                ):
                    break
                header = os.pread(fd, HEADER_SIZE, pos)
                if len(header) < HEADER_SIZE:
                    break
                last = batch_base + int.from_bytes(header[23:27], "big", signed=True)
                if last >= offset:
                    break
                pos += length + LOG_OVERHEAD
                new_end = last + 1
            os.ftruncate(fd, pos)
            os.fsync(fd)
        finally:
            os.close(fd)
        (directory / f"{base:020d}.index").unlink(missing_ok=True)
        break
    for snapshot in list_snapshots(directory):
        if snapshot > new_end:
            snapshot_path(directory, snapshot).unlink(missing_ok=True)
    fsync_dir(directory)
    return new_end
