"""One log segment: a file of raw magic-2 batches plus its sparse index; small file helpers.

Files in a partition directory, named by the segment's base offset (the offset of its first
batch)::

    00000000000000000000.log     batches exactly as served to consumers, back to back; baseOffset
                                 patched by the broker, nothing else changed (CRC still valid)
    00000000000000000000.index   sparse offset -> position index (format in index.py)

Only the active (last) segment is written to. With ``preallocate`` (and ``flush="always"``) its file
is grown ahead of small writes in chunks that follow its use: the file doubles, from 32 KiB, by at
most 4 MiB at a time, never past ``segment_bytes`` unless one append is larger. So the file is
usually longer than the data (``size`` is the data, ``allocated`` the file), but a partition that
got one small batch holds 32 KiB, not a megabyte, and one step stalls the event loop for a few
milliseconds at most.
A roll truncates the file to ``size``. A clean close keeps the tail (its clean point records the
data's size, ``recovery._load_clean``); after a crash recovery finds the real end by scanning and
keeps a tail of zeros as preallocated room, truncating only a torn or corrupt one.

Reads use ``os.pread`` on the segment's descriptor; the caller is single-threaded (the trio loop),
so nothing else moves ``size`` during a call.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from broker.log.index import OffsetIndex
from protocol.errors import CorruptFrameError
from protocol.records import HEADER_PREFIX, HEADER_SIZE, LOG_OVERHEAD, decode_batches_untrusted

_WALK_HEADER = HEADER_PREFIX
_WALK_SIZE = _WALK_HEADER.size
_WALK_CHUNK = 16 * 1024

# The first step of a new (or freshly loaded, trimmed) segment, then the file doubles. A fixed 1 MiB
# step made every partition's first write cost a megabyte of zeros written on the event loop (300
# partitions with one tiny batch each: 300 MiB on disk and 0.37 s of stall; issue 36).
_PREALLOCATE_MIN_STEP = 32 << 10
# Bounds the stall of one zero-fill on the event loop (4 MiB: a few ms here; 16 MiB took 15-50).
_PREALLOCATE_MAX_STEP = 4 << 20
_ZEROS = bytes(1 << 20)

# How preallocation reserves space. "zeros" writes zero pages ahead of the data: the blocks are then
# allocated *and initialised*, so overwriting them and fdatasync-ing needs no file-system metadata
# update (no journal commit). posix_fallocate leaves "unwritten" extents whose conversion on first
# write costs a journal commit at every fdatasync: on this VM's ext4 that made fdatasync *slower*
# than plain appending. Measured through Partition (append + flush per call, medians of 3):
#   4 KB batches:   no prealloc 254-342 us, zeros 140-172 us, fallocate ~290 us
#   300 KB batches: no prealloc 490-960 us, zeros 470-700 us, fallocate ~690 us
# Without fdatasync (flush="never") zero-filling only doubles page-cache writes, so the partition
# preallocates only in flush="always" mode.
PREALLOCATE_METHOD = "zeros"
# Only small writes are worth it. A large one costs about as much to fdatasync either way, and
# zero-filling ahead of it doubles the bytes written, stalls the event loop for the fill and makes
# the next fdatasync write the zeros too: librdkafka's default 1 MB batches of 100-byte records,
# durable, 1.13-1.16M records/s (broker CPU 0.42-0.48 s per million) with zero-filling and
# 1.61-1.84M (0.16-0.23 s) without, runs alternating (bench/produce.py, case (e)).
_PREALLOCATE_WRITES_BELOW = 64 * 1024


# Files of a cleaning (cleaner.py), named after the first segment replaced:
# ``<base>.log.cleaned`` while being written (deleted at start if found: the cleaning never
# happened), renamed to ``<base>.log.swap`` once complete and fsync'd (the commit point: found at
# start, the swap is completed by ``complete_swap``).
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


def _walk_end_offset(path: Path) -> int | None:
    """Offset after the last batch of a complete segment file (None if it has no batch)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        end = None
        pos = 0
        while pos + _WALK_SIZE <= size:
            base, length, _, magic, _, _, last_delta, _, _ = _WALK_HEADER.unpack(
                os.pread(fd, _WALK_SIZE, pos)
            )
            if magic != 2 or length + LOG_OVERHEAD < HEADER_SIZE:
                break
            end = base + last_delta + 1
            pos += length + LOG_OVERHEAD
        return end
    finally:
        os.close(fd)


def complete_swap(directory: Path, swap: Path,
                  before_rename: Callable[[], None] | None = None) -> None:
    """Finish replacing segments by the cleaned segment ``swap`` (``<base>.log.swap``): delete
    every segment whose base offset lies in the swap's offset range (its own base included) with
    its index, then rename the swap to ``<base>.log``. Idempotent: a crash in the middle leaves a
    state on which it can run again. The caller fsyncs the directory."""
    base = int(swap.name.split(".")[0])
    end = _walk_end_offset(swap)
    end = base + 1 if end is None else end
    for p in directory.glob("*.log"):
        if p.stem.isdigit() and base <= int(p.stem) < end:
            index_path(directory, int(p.stem)).unlink(missing_ok=True)
            if int(p.stem) != base:
                p.unlink(missing_ok=True)
    index_path(directory, base).unlink(missing_ok=True)
    # The old index must be gone for good before the new data takes its name: a stale index
    # beside a cleaned segment could pass the consistency checks and be trusted.
    fsync_dir(directory)
    if before_rename is not None:
        before_rename()  # the crash-point tests stop here
    os.replace(swap, log_path(directory, base))


class CorruptLogError(Exception):
    """Stored bytes that do not form the batches our in-memory state expects."""


def log_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}.log"


def index_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}.index"


def fsync_dir(directory: Path) -> None:
    """Make creations, renames and deletions of directory entries durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fdatasync_path(path: Path) -> None:
    """fdatasync the file at ``path`` if it still exists (a segment's index written at its roll:
    retention or the cleaner may have deleted it since, and then nothing is left to sync)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int = 0o644, sync_dir: bool = True,
                 fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file.

    Write a temporary file, fsync it, rename it over the target, fsync the directory
    (``sync_dir=False``: the caller does, once for several files). A failed write or fsync
    removes the temporary file and leaves the old one. If the directory fsync fails the caller
    gets the OSError; the new file may then already be the one a restart reads.
    ``fsync=False``: no fsync at all (neither the file nor the directory): the caller makes the
    whole file system durable afterwards (a clean close: ``broker/storage/syncfs.py``); until
    then a power cut may leave the old file, the new one, or an empty one under the name.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    if sync_dir and fsync:
        fsync_dir(path.parent)


class Segment:
    """A segment file, its in-memory index and the facts about its batches the log needs."""

    __slots__ = (
        "directory",
        "base_offset",
        "fd",
        "size",
        "allocated",
        "next_offset",
        "max_timestamp",
        "index",
        "bytes_since_index",
        "roll_base_ms",
    )

    def __init__(self, directory: Path, base_offset: int, fd: int, file_size: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.fd = fd
        self.size = file_size  # bytes of valid batches; set properly by the loader
        self.allocated = file_size  # length of the file
        self.next_offset = base_offset  # offset after the last batch
        self.max_timestamp = -1  # largest batch maxTimestamp, -1 when empty
        self.index = OffsetIndex()
        self.bytes_since_index = 0
        self.roll_base_ms = -1  # segment.ms clock: first append (or load) time; -1 = not started

    @classmethod
    def create(cls, directory: Path, base_offset: int) -> Segment:
        """A new empty segment (an existing file of that name is stale and is emptied)."""
        fd = os.open(log_path(directory, base_offset), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            index_path(directory, base_offset).unlink(missing_ok=True)
        except BaseException:
            os.close(fd)
            raise
        return cls(directory, base_offset, fd, 0)

    @classmethod
    def open_existing(cls, directory: Path, base_offset: int) -> Segment:
        fd = os.open(log_path(directory, base_offset), os.O_RDWR)
        return cls(directory, base_offset, fd, os.fstat(fd).st_size)

    @property
    def log_path(self) -> Path:
        return log_path(self.directory, self.base_offset)

    @property
    def index_path(self) -> Path:
        return index_path(self.directory, self.base_offset)

    # -- writing -----------------------------------------------------------------------------

    def reserve(self, nbytes: int, segment_bytes: int) -> None:
        """Preallocate so that ``nbytes`` more fit in the file (called only with preallocate on),
        when ``nbytes`` is a small write (see ``_PREALLOCATE_WRITES_BELOW``)."""
        end = self.size + nbytes
        if end <= self.allocated or nbytes >= _PREALLOCATE_WRITES_BELOW:
            return
        step = min(max(self.allocated, _PREALLOCATE_MIN_STEP), _PREALLOCATE_MAX_STEP)
        target = max(end, min(self.allocated + step, segment_bytes))
        start = self.allocated
        if PREALLOCATE_METHOD == "zeros":
            # Zero only what lies past the current file end (never over data).
            pos = start
            while pos < target:
                n = os.pwrite(self.fd, memoryview(_ZEROS)[: min(len(_ZEROS), target - pos)], pos)
                pos += n
        else:
            os.posix_fallocate(self.fd, start, target - start)
        self.allocated = target

    def write(self, data: memoryview | bytes | bytearray) -> None:
        """Write ``data`` at the end of the valid data (one pwrite; no fsync)."""
        n = len(data)
        written = os.pwrite(self.fd, data, self.size)
        if written != n:
            # A short write to a regular file means the disk is full: leave size unchanged so the
            # partial bytes are overwritten by the next append (and cut by recovery).
            raise OSError(f"short write to {self.log_path}: {written} of {n} bytes")
        self.size += n
        if self.size > self.allocated:
            self.allocated = self.size

    def write_batch(self, batch: memoryview | bytes | bytearray, base_offset: int,
                    max_timestamp: int, index_interval: int) -> None:
        """``write(batch)`` then ``add_batch`` for it, when ``batch`` is one whole batch (the
        usual append: one call)."""
        n = len(batch)
        position = self.size
        written = os.pwrite(self.fd, batch, position)
        if written != n:
            raise OSError(f"short write to {self.log_path}: {written} of {n} bytes")  # (write)
        self.size = position + n
        if self.size > self.allocated:
            self.allocated = self.size
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
        if position == 0 or self.bytes_since_index >= index_interval:
            self.index.append(base_offset, position, self.max_timestamp)
            self.bytes_since_index = 0
        self.bytes_since_index += n

    def add_batch(self, position: int, base_offset: int, size: int, max_timestamp: int,
                  index_interval: int) -> None:
        """Account for a batch just written at ``position``: index entry and timestamps."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
        if position == 0 or self.bytes_since_index >= index_interval:
            self.index.append(base_offset, position, self.max_timestamp)
            self.bytes_since_index = 0
        self.bytes_since_index += size

    def trim(self) -> None:
        """Cut preallocated space after the data (at roll and clean close)."""
        if self.allocated != self.size:
            os.ftruncate(self.fd, self.size)
            self.allocated = self.size

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def save_index(self, fsync: bool) -> None:
        self.index.save(self.index_path, fsync)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.index_path.unlink(missing_ok=True)

    # -- reading -----------------------------------------------------------------------------

    def walk(self, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
        """Yield ``(position, base_offset, size, last_offset_delta, max_timestamp)`` of each batch
        in ``[start, end)`` of data already validated (reads headers in 16 KB chunks).

        Raises ``CorruptLogError`` if the bytes do not line up as batches up to ``end``.
        """
        fd = self.fd
        unpack = _WALK_HEADER.unpack_from
        buf = b""
        buf_start = start
        pos = start
        while pos < end:
            rel = pos - buf_start
            if rel + _WALK_SIZE > len(buf):
                buf = os.pread(fd, max(min(_WALK_CHUNK, end - pos), _WALK_SIZE), pos)
                buf_start = pos
                rel = 0
                if len(buf) < _WALK_SIZE:
                    raise CorruptLogError(f"{self.log_path}: batch header at {pos} runs past the file")
            base, length, _, magic, _, _, last_delta, _, max_ts = unpack(buf, rel)
            size = length + LOG_OVERHEAD
            if magic != 2 or size < HEADER_SIZE or pos + size > end:
                raise CorruptLogError(f"{self.log_path}: no valid batch at position {pos}")
            yield pos, base, size, last_delta, max_ts
            pos += size

    def find_batch(self, offset: int) -> tuple[int, int, int]:
        """``(position, base_offset, size)`` of the batch holding ``offset`` (which must be in
        ``[base_offset, next_offset)``)."""
        index = self.index
        # max(.., 0): an offset in a gap before the first batch of a cleaned segment.
        start = index.positions[max(index.floor_entry(offset), 0)]
        for pos, base, size, last_delta, _ in self.walk(start, self.size):
            if base + last_delta >= offset:
                return pos, base, size
        raise CorruptLogError(f"{self.log_path}: offset {offset} not found")

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int) -> bytes:
        """Whole batches from the one holding ``fetch_offset``, below ``max_offset``; at least one
        batch, then as many as fit in ``max_bytes``; never past this segment."""
        pos, end = self.locate(fetch_offset, max_bytes, max_offset)
        if end == pos:
            return b""
        data = os.pread(self.fd, end - pos, pos)
        if len(data) != end - pos:
            raise CorruptLogError(f"{self.log_path}: short read at {pos}")
        return data

    def locate(self, fetch_offset: int, max_bytes: int, max_offset: int) -> tuple[int, int]:
        """``(start, end)``: the file range ``read`` returns (``start == end``: nothing), for a
        caller that sends it from the file itself."""
        pos, base, size = self.find_batch(fetch_offset)
        if base >= max_offset:
            return pos, pos
        first_end = pos + size
        limit = pos + max(max_bytes, 0)
        if max_offset >= self.next_offset and self.size <= limit:
            end = self.size  # the common tailing case: everything to the end qualifies
        elif first_end >= limit:
            end = first_end
        else:
            index = self.index
            # The last indexed batch that certainly qualifies, then walk at most one interval.
            end = max(index.positions[index.entry_limited(limit, max_offset)], first_end)
            for bpos, bbase, bsize, _, _ in self.walk(end, self.size):
                if bbase >= max_offset or bpos + bsize > limit:
                    break
                end = bpos + bsize
        return pos, end

    def find_timestamp(self, timestamp: int, min_offset: int = 0) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the first record at or above ``min_offset`` (the log start
        offset) whose timestamp is >= ``timestamp`` (Kafka's ListOffsets by time, which skips
        what DeleteRecords removed: LogSegment.findOffsetByTimestamp's startingOffset), or None.
        The batch is found from the index and the batch headers' maxTimestamp; its records are
        then read to find the record itself."""
        if self.max_timestamp < timestamp or not len(self.index):
            return None
        k = self.index.first_reaching(timestamp)
        start = self.index.positions[k - 1] if k > 0 else 0
        for pos, base, size, last_delta, max_ts in self.walk(start, self.size):
            if max_ts >= timestamp and base + last_delta >= min_offset:
                found = self._first_record_reaching(pos, size, timestamp, min_offset)
                if found is not None:
                    return found
                if base >= min_offset:
                    return max_ts, base
        return None

    def _first_record_reaching(
        self, pos: int, size: int, timestamp: int, min_offset: int = 0
    ) -> tuple[int, int] | None:
        """In the batch at ``pos``: ``(timestamp, offset)`` of its first record at or above
        ``min_offset`` and at or after ``timestamp`` (with LogAppendTime every record carries the
        batch's maxTimestamp)."""
        try:
            for header, records in decode_batches_untrusted(os.pread(self.fd, size, pos)):
                for record in records:
                    stamp = header.max_timestamp if header.timestamp_type else record.timestamp
                    if stamp >= timestamp and record.offset >= min_offset:
                        return stamp, record.offset
        except CorruptFrameError as exc:
            raise CorruptLogError(f"{self.log_path}: batch at position {pos}: {exc}") from exc
        return None
