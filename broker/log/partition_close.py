"""A partition's clean point and its close: what a clean close (or a start whose recovery is
complete) makes durable so that the next start loads the partition without a scan. Part of
``Partition`` (``partition.py``), whose fields it reads.

Per partition only what is not yet durable is written: the data (fdatasync, or left to the
caller's one syncfs), and the active segment's index file only when it has more entries than a
clean point holds inline. The producer state and a small active index go into the one points file
the log manager writes for every partition (``clean_points.py``), not into files of their own.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from broker.log.clean_points import INLINE_INDEX_ENTRIES, CleanPoint, CleanState
from broker.log.producer_state import ProducerStateManager
from broker.log.segment import Segment
from broker.log.txn_index import TxnIndex


class PartitionClose:
    """The clean-point and close methods of ``Partition``."""

    dir: Path
    segments: list[Segment]
    producers: ProducerStateManager
    txn_index: TxnIndex
    log_start_offset: int
    log_end_offset: int
    checkpoint: CleanState | None
    _closed: bool
    _dirty: bool
    _dir_dirty: bool
    _unsynced: list[Segment]
    _snapshots: list[tuple[int, bytes]]

    @property
    def dirty(self) -> bool:
        raise NotImplementedError  # (Partition's)

    @property
    def needs_directory_sync(self) -> bool:
        raise NotImplementedError  # (Partition's)

    def flush(self, fsync: bool = True) -> int:
        raise NotImplementedError  # (Partition's)

    @property
    def clean_state(self) -> CleanState:
        active = self.segments[-1]
        return CleanState(self.log_end_offset, active.base_offset, active.size)

    @property
    def changed(self) -> bool:
        """Something was appended, rolled or left unsynced since the clean point on disk
        (``checkpoint``): a clean close has to write it."""
        return self.checkpoint is None or self.checkpoint != self.clean_state or self.dirty

    @property
    def clean_point_indexed(self) -> bool:
        """The active segment's index is too long to go inline: its file holds it."""
        return len(self.segments[-1].index) > INLINE_INDEX_ENTRIES

    def clean_point(self) -> CleanPoint:
        """The partition's entry in the points file, from memory (the event loop, or a worker
        thread once nothing else touches the partition). It claims what ``save_clean_point``
        made durable: call it only after that, with nothing appended since."""
        return CleanPoint(self.clean_state, self.log_start_offset, self.producers.entries(),
                          None if self.clean_point_indexed else self.segments[-1].index.flat())

    def save_clean_point(self, fsync: bool = True) -> bool:
        """What ``close`` writes, the files left open: fdatasync what is not yet durable, and
        save the active index when it is too long to go inline; ``checkpoint`` becomes the clean
        point (``LogManager.prepare_recovery_points`` after a recovery, and ``close``). Nothing
        if unchanged since the clean point on disk. ``fsync=False`` as in ``close``. Safe in a
        worker thread (one partition per thread). True if it wrote anything it did not sync
        (only with ``fsync=False``)."""
        if not self.changed:
            return False
        active = self.segments[-1]
        wrote = self.dirty or self.txn_index.unsynced
        # Without fsync only when nothing but the active segment's own writes is unsynced:
        # what a roll left (rolled segments, their snapshots) and aborted-transaction entries
        # keep their order (the rolled data and the entries durable before a snapshot or
        # marker past them: recovery trusts that), as in every flush round.
        self.flush(fsync or self.needs_directory_sync or self.txn_index.unsynced)
        if self.clean_point_indexed:
            active.save_index(fsync=fsync)
            wrote = True
        self.checkpoint = self.clean_state
        return wrote and not fsync

    def close(self, fsync: bool = True) -> bool:
        """fdatasync what is not yet durable, save the active index if it does not go inline,
        close the files. After this the partition can be loaded without a scan (given its clean
        point in the points file). A partition unchanged since its clean point (``changed``)
        only closes its files. Safe in a worker thread (one partition per thread: it touches
        nothing but its own files and fields).

        The active segment keeps its preallocated tail (zeros after ``size``): truncating it
        cost a file-system journal operation per partition, serialized across the file system
        (2-3 ms each here, most of a clean close with thousands of partitions once the fsyncs
        are shared); the clean point records the data's size and the loader reads up to it
        (``recovery._load_clean``). A roll still trims.

        ``fsync=False``: the same writes, no fsync; the caller makes them durable together
        (``LogManager.close``: one syncfs of the data dir's file system) before it writes the
        points and the clean-shutdown marker: True if there is anything for it to sync."""
        if self._closed:
            return False
        wrote = self.save_clean_point(fsync) or (not fsync and self.txn_index.unsynced)
        self.txn_index.close(sync=fsync)
        for seg in self.segments:
            seg.close()
        self._closed = True
        return wrote

    def delete(self) -> None:
        """Close the files without saving anything and remove the directory. Nothing is left to
        sync: a flush round that still lists the partition (an unsynced transactional batch of a
        topic deleted before its PrepareCommit) finds it clean instead of closed descriptors."""
        self.txn_index.close(sync=False)
        for seg in self.segments:
            seg.close()
        self._closed = True
        self._dirty = self._dir_dirty = False
        self._unsynced.clear()
        self._snapshots = []
        shutil.rmtree(self.dir, ignore_errors=True)
