"""The clean points of every partition in one file, and the clean-shutdown marker that names it.

A partition's clean point is what loading it without a scan needs: where its log ends, its
active segment and that segment's data size, its log start offset, its producer state at the log
end, and its active segment's index (inline while it is small). A clean close writes them for all
partitions at once into ``recovery-point-offset-checkpoint`` (Kafka's file name) instead of a
producer-state snapshot and an index file per partition: with 10,000 partitions that was 10,000
file creations (about 0.5 ms of kernel time each here), most of a clean close, and 20,000 small
files read back by the next start. A start whose recovery is complete writes the same file
(``LogManager.prepare_recovery_points``).

Format 2 (written)::

    magic      4 bytes  b"MBCP"
    crc32c     uint32 big-endian, CRC-32C of the body
    body       JSON {"version": 2, "partitions": {"<topic>-<p>": [log_end_offset,
                active_base_offset, active_size, log_start_offset, producers, index]}}

``producers`` is the producer-state snapshot's list (``producer_state.py``); ``index`` the active
segment's index entries flattened ``[offset, position, max_timestamp, ...]``, or null when it has
more than ``INLINE_INDEX_ENTRIES`` (its ``.index`` file then holds them, durable with the point).

Format 1 (read only, written by earlier versions): JSON ``{"version": 1, "partitions":
{"<topic>-<p>": [log_end_offset, active_base_offset, active_size]}}``; the producer state is then
the snapshot file at the log end offset and the index the ``.index`` file.

``.clean_shutdown`` (the marker, written last by a clean close, deleted by the next start): format
2 is ``{"version": 2, "clean_points": <the CRC of the points file it closes>}``; format 1 held the
points themselves. A marker whose CRC is not the points file's (a stale or torn points file) is
not a clean shutdown for loading: the points then count only as recovery points (each checked
against the partition's files as after a crash), and a points file that does not decode counts as
none (every partition scanned).

Writing is atomic (temporary file, fsync, rename, directory fsync). An entry claims only what is
durable: its partition's data (and a non-inline index) are synced before the file is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c

from broker.log.segment import atomic_write, fdatasync_path, fsync_dir

MAGIC = b"MBCP"
_CRC = struct.Struct(">I")
_HEADER = len(MAGIC) + _CRC.size
# Active-segment index entries kept in the points file (beyond that, the ``.index`` file): 32
# entries cover 128 KiB of data at the default index interval.
INLINE_INDEX_ENTRIES = 32


@dataclass(frozen=True)
class CleanState:
    """Where a partition's files ended at its clean point (what is compared with them)."""

    log_end_offset: int
    active_base_offset: int
    active_size: int


@dataclass(frozen=True)
class CleanPoint:
    """One partition's clean point. ``producers``/``index``/``log_start_offset`` are None for a
    format-1 entry (then the snapshot and index files serve, and the log-start checkpoint)."""

    state: CleanState
    log_start_offset: int | None = None
    producers: list[Any] | None = None
    index: list[int] | None = None


def encode(points: dict[str, CleanPoint]) -> bytes:
    """The points file's bytes (format 2)."""
    body = json.dumps(
        {"version": 2, "partitions": {
            name: [p.state.log_end_offset, p.state.active_base_offset, p.state.active_size,
                   p.log_start_offset, p.producers, p.index]
            for name, p in points.items()}},
        separators=(",", ":")).encode()
    return MAGIC + _CRC.pack(crc32c.crc32c(body)) + body


def decode(data: bytes) -> tuple[dict[str, CleanPoint], int | None] | None:
    """``(points, crc)`` of a points file of either format (crc None for format 1); None if it
    is torn, corrupt or of an unknown format."""
    try:
        if data[:len(MAGIC)] == MAGIC:
            if len(data) < _HEADER:
                return None
            crc = _CRC.unpack_from(data, len(MAGIC))[0]
            body = data[_HEADER:]
            if crc32c.crc32c(body) != crc:
                return None
            doc = json.loads(body)
            if doc.get("version") != 2:
                return None
            return {
                name: CleanPoint(CleanState(int(leo), int(base), int(size)), int(start),
                                 list(producers), None if index is None else list(index))
                for name, (leo, base, size, start, producers, index)
                in doc["partitions"].items()}, crc
        doc = json.loads(data)
        if doc.get("version") != 1:
            return None
        return {name: CleanPoint(CleanState(int(leo), int(base), int(size)))
                for name, (leo, base, size) in doc["partitions"].items()}, None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def read(path: Path) -> tuple[dict[str, CleanPoint], int | None] | None:
    """``decode`` of the file at ``path``; None if it is missing or does not decode."""
    try:
        return decode(path.read_bytes())
    except OSError:
        return None


def write(path: Path, points: dict[str, CleanPoint], sync_dir: bool = True) -> int:
    """Replace the points file atomically and durably; returns its CRC (for the marker).
    ``sync_dir=False``: its directory entry is left to the caller's next directory fsync (the
    marker's at a clean close: a power cut that keeps the marker and not this rename leaves a
    marker naming another file, which counts as no clean shutdown)."""
    data = encode(points)
    atomic_write(path, data, sync_dir=sync_dir)
    return _CRC.unpack_from(data, len(MAGIC))[0]


def marker_bytes(crc: int) -> bytes:
    return json.dumps({"version": 2, "clean_points": crc}).encode()


def read_marker(path: Path) -> tuple[bool, int | dict[str, CleanPoint] | None]:
    """``(present, what it names)``: format 2, the CRC of the points file it closes; format 1,
    the points it holds; None if it is missing, unreadable or of an unknown format."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return False, None
    except OSError:
        return True, None
    try:
        doc = json.loads(data)
        if doc.get("version") == 2:
            return True, int(doc["clean_points"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return True, None
    decoded = decode(data)
    return True, None if decoded is None else decoded[0]


class PendingWrite:
    """A points file written off the event loop (a start's recovery points): ``write`` in a
    worker thread syncs the non-inline indexes the points claim and writes the file beside its
    place, synced; ``commit`` on the event loop puts it in place (rename, directory fsync)
    unless ``still_valid()`` says otherwise (a topic deleted meanwhile: its entries must not
    come back), then calls ``committed(points)``. Not committed, the old file stays (true)."""

    def __init__(self, path: Path, points: dict[str, CleanPoint], indexes: list[Path],
                 still_valid: Callable[[], bool],
                 committed: Callable[[dict[str, CleanPoint]], None]) -> None:
        self.path = path
        self.points = points
        self.indexes = indexes
        self.still_valid = still_valid
        self.committed = committed
        self._tmp = path.with_name(path.name + ".tmp")
        self._written = False

    def write(self) -> None:
        for index in self.indexes:
            fdatasync_path(index)
        data = encode(self.points)
        fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        self._written = True

    def commit(self) -> bool:
        if not self._written or not self.still_valid():
            with contextlib.suppress(OSError):
                self._tmp.unlink(missing_ok=True)
            return False
        os.replace(self._tmp, self.path)
        fsync_dir(self.path.parent)
        self.committed(self.points)
        return True
