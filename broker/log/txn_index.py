"""The aborted-transaction index of one partition (``aborted.txnindex``).

A read_committed Fetch must list every aborted transaction ``(producer_id, first_offset)`` whose
range ``[first_offset, marker_offset]`` overlaps the data returned (docs/protocol.md section 5): clients
drop that producer's batches from ``first_offset`` until they meet its ABORT marker. Each ABORT
marker that ends an open transaction appends one entry here.

File ``aborted.txnindex`` in the partition directory (one per partition, not per segment: entries
are few and small), created on the first abort; a flat array of 32-byte entries, big-endian::

    AbortedTxn =>
      producer_id          int64
      first_offset         int64   first offset of the transaction's data in this partition
      last_offset          int64   offset of the ABORT marker
      last_stable_offset   int64   the first offset still undecided right after the marker
                                   (the first offset of the oldest other open transaction, or
                                   marker + 1): lets a lookup stop early (see ``collect``)

Entries are in marker order, so ``last_offset`` increases. Durability: a flush of the partition
(``Partition.begin_flush``, which a segment roll leaves to the next round too) fdatasyncs this file
before the data, so a synced marker always has its durable entry; but the marker is written
to the log before its entry is written here, and unsynced pages reach the disk in any order, so a
power cut (or a kill -9 between the two writes) can leave a marker without its entry: recovery's
scan finds every ABORT marker it replays and puts back the missing entries (``restore``; found
by tests/crashsim, changed 2026-11-29). Loading drops entries whose marker is not in the log (``last_offset`` at or past
the recovered log end: a torn tail cut them) or was deleted by retention (before the log start),
and rewrites the file when it dropped anything. A partial entry at the end of the file (a torn
write) is ignored the same way.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from pathlib import Path
from typing import NamedTuple

from broker.log.segment import atomic_write, fsync_dir

FILE_NAME = "aborted.txnindex"
_ENTRY = struct.Struct(">qqqq")
ENTRY_SIZE = _ENTRY.size
# Entries dropped by retention are removed from the file once this many have accumulated.
_REWRITE_AFTER = 1024


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndex:
    """In memory: the entries in marker order; on disk: ``aborted.txnindex`` (appended)."""

    def __init__(self, directory: Path, log_start_offset: int, log_end_offset: int,
                 exists: bool = True) -> None:
        """``exists=False``: the caller listed the directory and the file is not there."""
        self.path = Path(directory) / FILE_NAME
        self._entries: list[AbortedTxn] = []
        self._lasts: list[int] = []
        self._fd = -1
        self._dirty = False
        self._stale = 0  # entries still in the file but dropped from memory by retention
        if exists:
            self._load(log_start_offset, log_end_offset)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def _load(self, log_start_offset: int, log_end_offset: int) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % ENTRY_SIZE
        kept: list[AbortedTxn] = []
        changed = whole != len(data)
        previous = -1
        for pos in range(0, whole, ENTRY_SIZE):
            entry = AbortedTxn(*_ENTRY.unpack_from(data, pos))
            if entry.last_offset <= previous or entry.first_offset > entry.last_offset:
                changed = True  # not an index we wrote: keep the consistent prefix
                break
            previous = entry.last_offset
            if entry.last_offset >= log_end_offset:
                changed = True  # the marker was cut from the log: every later one too
                break
            if entry.last_offset < log_start_offset:
                changed = True
                continue
            kept.append(entry)
        self._entries = kept
        self._lasts = [e.last_offset for e in kept]
        if changed:
            self._rewrite()

    def _rewrite(self) -> None:
        self._close_fd()
        if self._entries:
            atomic_write(self.path, b"".join(_ENTRY.pack(*e) for e in self._entries))
        elif self.path.exists():
            self.path.unlink()
            fsync_dir(self.path.parent)
        self._stale = 0
        self._dirty = False

    def append(self, entry: AbortedTxn) -> None:
        """Record an aborted transaction whose marker was just appended (not yet durable)."""
        if self._lasts and entry.last_offset <= self._lasts[-1]:
            raise ValueError(f"aborted transaction {entry} is not after {self._entries[-1]}")
        if self._fd < 0:
            created = not self.path.exists()
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            if created:
                fsync_dir(self.path.parent)  # once per partition: the file must outlive a crash
        data = _ENTRY.pack(*entry)
        if os.write(self._fd, data) != len(data):
            raise OSError(f"short write to {self.path}")
        self._entries.append(entry)
        self._lasts.append(entry.last_offset)
        self._dirty = True

    def restore(self, found: tuple[AbortedTxn, ...] | list[AbortedTxn]) -> int:
        """Recovery: put back the aborted transactions a log scan found (``found``, in marker
        order) whose entry is missing (the marker durable, the entry not), durably; returns how
        many. An entry the index already has for that marker is kept."""
        have = set(self._lasts)
        missing = [e for e in found if e.last_offset not in have]
        if not missing:
            return 0
        if not self._lasts or missing[0].last_offset > self._lasts[-1]:
            for entry in missing:
                self.append(entry)
            self.sync()
        else:
            merged = sorted([*self._entries, *missing], key=lambda e: e.last_offset)
            self._entries = merged
            self._lasts = [e.last_offset for e in merged]
            self._rewrite()
        return len(missing)

    @property
    def unsynced(self) -> bool:
        """Entries were appended since the last sync."""
        return self._dirty and self._fd >= 0

    def sync(self) -> None:
        """Make appended entries durable (before the data holding their markers)."""
        if self._dirty and self._fd >= 0:
            os.fdatasync(self._fd)
            self._dirty = False

    def take_sync_fd(self, duplicate: bool = True) -> int | None:
        """For a flush round in a worker thread: a duplicate descriptor to fdatasync (the caller
        closes it), or None if nothing was appended since the last sync. ``duplicate=False``:
        the index's own descriptor, for a sync done before anything else runs."""
        if not self._dirty or self._fd < 0:
            return None
        # dup may raise (EMFILE): then still dirty for the next round
        fd = os.dup(self._fd) if duplicate else self._fd
        self._dirty = False
        return fd

    def sync_failed(self) -> None:
        """The round that took ``take_sync_fd`` failed: the next one syncs the file again."""
        if self._fd >= 0:
            self._dirty = True

    def collect(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of the aborted transactions overlapping
        ``[fetch_offset, upper_bound)``.

        Entries ending before ``fetch_offset`` cannot overlap (bisect past them). The scan stops
        after an entry whose ``last_stable_offset`` reaches ``upper_bound``: any transaction
        aborted later was still open or not yet begun when that marker was written, so it starts
        at or after that offset, beyond the range (Kafka's ``TransactionIndex`` does the same).
        """
        result = []
        entries = self._entries
        for i in range(bisect_left(self._lasts, fetch_offset), len(entries)):
            entry = entries[i]
            if entry.first_offset < upper_bound:
                result.append((entry.producer_id, entry.first_offset))
            if entry.last_stable_offset >= upper_bound:
                break
        return result

    def drop_before(self, log_start_offset: int) -> None:
        """Forget entries whose marker retention deleted; rewrite the file now and then."""
        n = bisect_left(self._lasts, log_start_offset)
        if not n:
            return
        del self._entries[:n], self._lasts[:n]
        self._stale += n
        if self._stale >= _REWRITE_AFTER or not self._entries:
            self._rewrite()

    def remove(self, marker_offsets: list[int]) -> None:
        """Forget the aborted transactions whose ABORT markers the cleaner removed (with all their
        data); the file is rewritten now and then, like after retention."""
        if not marker_offsets:
            return
        gone = set(marker_offsets)
        kept = [e for e in self._entries if e.last_offset not in gone]
        removed = len(self._entries) - len(kept)
        if not removed:
            return
        self._entries = kept
        self._lasts = [e.last_offset for e in kept]
        self._stale += removed
        if self._stale >= _REWRITE_AFTER or not self._entries:
            self._rewrite()

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def close(self, sync: bool = True) -> None:
        if sync:
            self.sync()
        self._close_fd()
