"""Sparse offset index of one segment, kept in memory and saved beside the segment.

File ``<base_offset:020d>.index``: a flat array of 24-byte entries, big-endian::

    IndexEntry =>
      offset         int64   base offset of a batch (absolute, not relative: no 2^31 limit)
      position       int64   byte position of that batch in the ``.log`` file
      max_timestamp  int64   largest maxTimestamp of all batches of the segment up to and
                             including this one (a running maximum, so it never decreases)

The first batch of a segment always has an entry (position 0); after that a batch gets one when at
least ``index_interval_bytes`` were appended since the previous entry (Kafka's
``log.index.interval.bytes``). So a lookup lands on a batch start at most one interval (plus one
batch) before the batch wanted, and the caller walks the batch headers from there.

The running maximum doubles as the time index: the first entry whose running maximum reaches a
timestamp bounds where the first batch with ``maxTimestamp >= ts`` can be (between the previous
entry and that one), so ListOffsets by time needs no separate ``.timeindex`` file.

In memory the three columns are ``array('q')`` (24 bytes per entry: about 6 MB per GiB of 4 KB
batches). The file is written at segment roll and at clean shutdown, never on the append path; a
crash can therefore leave it short or stale, which is why recovery rebuilds the index of every
segment it scans and ``load`` rejects anything that is not a consistent prefix.
"""

from __future__ import annotations

import os
import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

ENTRY_SIZE = 24


class OffsetIndex:
    """Sparse ``offset -> position`` map of one segment plus the running max timestamp."""

    __slots__ = ("offsets", "positions", "max_timestamps", "persisted")

    def __init__(self) -> None:
        self.offsets = array("q")
        self.positions = array("q")
        self.max_timestamps = array("q")
        # Entries [0, persisted) are already in the file; save() appends the rest.
        self.persisted = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def append(self, offset: int, position: int, max_timestamp: int) -> None:
        self.offsets.append(offset)
        self.positions.append(position)
        self.max_timestamps.append(max_timestamp)

    def floor_entry(self, offset: int) -> int:
        """Index of the last entry with ``offsets[i] <= offset`` (-1 if none)."""
        return bisect_right(self.offsets, offset) - 1

    def entry_limited(self, max_position: int, max_offset: int) -> int:
        """Last entry whose batch starts at or before ``max_position`` with offset < ``max_offset``."""
        return min(bisect_right(self.positions, max_position), bisect_left(self.offsets, max_offset)) - 1

    def first_reaching(self, timestamp: int) -> int:
        """First entry whose running max timestamp is >= ``timestamp`` (``len`` if none)."""
        return bisect_left(self.max_timestamps, timestamp)

    def truncate_to_position(self, position: int) -> None:
        """Drop entries of batches at or after ``position`` (after the log was truncated there)."""
        keep = bisect_left(self.positions, position)
        del self.offsets[keep:], self.positions[keep:], self.max_timestamps[keep:]
        self.persisted = min(self.persisted, keep)

    # -- file --------------------------------------------------------------------------------

    def _encode(self, start: int) -> bytes:
        n = len(self.offsets)
        flat = array("q", bytes(ENTRY_SIZE * (n - start)))
        flat[0::3] = self.offsets[start:]
        flat[1::3] = self.positions[start:]
        flat[2::3] = self.max_timestamps[start:]
        if sys.byteorder == "little":
            flat.byteswap()
        return flat.tobytes()

    def save(self, path: Path, fsync: bool) -> None:
        """Write the entries not yet in the file (all of them if the file is shorter than expected)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            expected = self.persisted * ENTRY_SIZE
            if os.fstat(fd).st_size != expected:
                # Missing, stale or longer than what we have: rewrite from scratch.
                os.ftruncate(fd, 0)
                self.persisted = 0
                expected = 0
            if self.persisted < len(self.offsets):
                data = self._encode(self.persisted)
                written = os.pwrite(fd, data, expected)
                if written != len(data):
                    raise OSError(f"short write to {path}")
                self.persisted = len(self.offsets)
            if fsync:
                os.fdatasync(fd)
        finally:
            os.close(fd)

    @classmethod
    def load(cls, path: Path, base_offset: int, segment_size: int) -> OffsetIndex | None:
        """Read an index file; None if it is missing or not a consistent index of the segment.

        Consistent: whole entries, the first at ``base_offset``/position 0, offsets and positions
        strictly increasing, positions inside the segment, running max timestamps non-decreasing.
        """
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if not data:
            # An empty segment has an empty index; a non-empty one always has an entry at 0.
            return cls() if segment_size == 0 else None
        if len(data) % ENTRY_SIZE:
            return None
        flat = array("q")
        flat.frombytes(data)
        if sys.byteorder == "little":
            flat.byteswap()
        index = cls._checked(flat, base_offset, segment_size)
        if index is not None:
            index.persisted = len(index.offsets)
        return index

    def flat(self) -> list[int]:
        """The entries as ``[offset, position, max_timestamp, ...]`` (a clean point's inline
        index, ``clean_points.py``)."""
        flat = array("q", bytes(ENTRY_SIZE * len(self.offsets)))
        flat[0::3] = self.offsets
        flat[1::3] = self.positions
        flat[2::3] = self.max_timestamps
        return flat.tolist()

    @classmethod
    def from_flat(cls, entries: list[int], base_offset: int,
                  segment_size: int) -> OffsetIndex | None:
        """The index ``flat()`` gave (not in the file: ``persisted`` 0); None if it is not a
        consistent index of the segment (as ``load``)."""
        if not entries:
            return cls() if segment_size == 0 else None
        try:
            flat = array("q", entries)
        except (TypeError, OverflowError):
            return None
        return cls._checked(flat, base_offset, segment_size)

    @classmethod
    def _checked(cls, flat: array, base_offset: int, segment_size: int) -> OffsetIndex | None:
        if not flat or len(flat) % 3:
            return None
        index = cls()
        index.offsets = flat[0::3]
        index.positions = flat[1::3]
        index.max_timestamps = flat[2::3]
        offsets, positions, stamps = index.offsets, index.positions, index.max_timestamps
        # The first batch may lie after the segment's base offset when cleaning removed earlier
        # records (cleaner.py); it is always at position 0.
        if offsets[0] < base_offset or positions[0] != 0 or positions[-1] >= max(segment_size, 1):
            return None
        n = len(offsets)
        # Monotonicity, checked without a Python-level loop over every entry: compare each column
        # with itself shifted by one.
        if n > 1 and not (
            all(map(int.__lt__, offsets[:-1], offsets[1:]))
            and all(map(int.__lt__, positions[:-1], positions[1:]))
            and all(map(int.__le__, stamps[:-1], stamps[1:]))
        ):
            return None
        return index
