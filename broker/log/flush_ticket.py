"""``FlushTicket``: what one fdatasync round of a partition covers, taken on the event loop
(``Partition.begin_flush``) and synced in any thread (the flusher's rounds, ``Partition.flush``).
The order of its writes is what recovery trusts ("Segment roll" in ``partition.py``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from broker.log.producer_state import list_snapshots, snapshot_path
from broker.log.segment import Segment, atomic_write, fdatasync_path, fsync_dir

# Producer-state snapshots kept per partition: the newest is the recovery point, the one before is
# the fallback if the newest turns out to lie beyond the recovered log.
SNAPSHOTS_RETAINED = 2


@dataclass
class FlushTicket:
    """What one fdatasync round of a partition covers (see ``Partition.begin_flush``)."""

    fds: list[int]
    directory: Path | None
    log_end_offset: int
    error: OSError | None = None  # set by sync() if the disk refused (EIO, ENOSPC)
    owned: bool = True  # the fds are duplicates that ``sync`` closes
    # What segment rolls left (see "Segment roll" in the module docstring): the rolled segments
    # (their descriptors are in ``fds``), whose indexes are synced by path, and producer-state
    # snapshots ``(offset, file bytes)`` put in place once all of that is durable.
    rolled: list[Segment] = field(default_factory=list)
    snapshots: list[tuple[int, bytes]] = field(default_factory=list)
    active: bool = True  # the active segment's writes are in ``fds``
    covers_log: bool = True  # synced, everything below ``log_end_offset`` is durable
    entries: bool = False  # a segment file was created: ``directory`` syncs its entry
    txn_index: bool = False  # ``fds[0]`` is the aborted-transaction index's

    def sync(self, fsync: bool = True) -> None:
        """fdatasync the files, then the rolled segments' indexes, then write the snapshots
        (temporary file, fsync, rename), then fsync the directory; safe in a worker thread
        (when the fds are owned duplicates, which it closes). An OSError is kept in ``error``
        (the high watermark must then not move). The order is what recovery relies on: a
        snapshot is in place only once every segment below its offset is durable.
        ``fsync=False`` (a clean close that syncs the whole file system afterwards,
        ``Partition.close``): the same writes, no fsync."""
        try:
            if fsync:
                for fd in self.fds:
                    os.fdatasync(fd)
                for seg in self.rolled:
                    fdatasync_path(seg.index_path)
            if self.snapshots:
                assert self.directory is not None
                for offset, data in self.snapshots:
                    atomic_write(snapshot_path(self.directory, offset), data, sync_dir=False,
                                 fsync=fsync)
            if self.directory is not None and fsync:
                fsync_dir(self.directory)
            if self.snapshots:
                assert self.directory is not None
                for offset in list_snapshots(self.directory)[:-SNAPSHOTS_RETAINED]:
                    snapshot_path(self.directory, offset).unlink(missing_ok=True)
        except OSError as exc:
            self.error = exc
        finally:
            if self.owned:
                for fd in self.fds:
                    os.close(fd)
            self.fds = []
