"""``Storage``: the log as the services write to it, and the one place durability is decided.

Kafka's shape (``ReplicaManager.appendRecords(requiredAcks, callback)``; Tansu's ``Storage``
trait): ``append`` appends a Produce or OffsetCommit request's batches and says whether the answer
must wait; ``commit`` makes appends durable, inline or in a shared group-commit round, and calls
back once they are (``broker/storage/flusher.py`` decides which). Every other writer (the
transaction log, markers, group records) appends to its partition and calls ``commit``. Nothing
else in the broker fsyncs a partition while serving (tests/unit/test_layering.py checks it).

What is durable when (DESIGN.md section 3):
- ``flush="always"``: a non-transactional acks=all batch is answered once it is durable; a
  transactional batch is answered once appended, and made durable no later than its
  transaction's PrepareCommit (the manager commits the transaction's partitions with the Prepare
  record). The high watermark (every reader's limit) moves only over synced data.
- ``flush="never"``: nothing is fsynced while serving (a commit is done at once) but what a
  segment roll leaves (the rolled segment, its index, a producer-state snapshot: synced by a
  background round, as Kafka flushes a rolled segment); ``close`` syncs everything.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from broker.log.clean_points import PendingWrite
from broker.log.manager import LogManager
from broker.log.partition import AppendResult, Partition
from broker.log.segment import atomic_write
from broker.storage.flusher import Commit, DataArrived, FlushScheduler, OnDurable
from broker.storage.lock import DataDirLock
from broker.storage.syncfs import sync_file_system

log = logging.getLogger("minibroker")

# Changed partitions from which a clean close syncs the file system once instead of each file
# (about four fsyncs per partition).
SYNCFS_FROM_PARTITIONS = 64


def file_system_sync(partitions: int) -> Callable[[Path], bool] | None:
    """How the files of ``partitions`` partitions are made durable at once (a clean close, what
    an unclean start's scans rewrote): many with one syncfs (``syncfs.py``), a few file by file
    (syncfs would also write back whatever else the file system holds dirty)."""
    return sync_file_system if partitions >= SYNCFS_FROM_PARTITIONS else None


class Storage:
    def __init__(
        self,
        logs: LogManager,
        flusher: FlushScheduler,
        data_arrived: DataArrived,
        durable: bool,
        lock: DataDirLock | None = None,
    ) -> None:
        self.logs = logs
        self.flusher = flusher
        self.data_arrived = data_arrived
        self.durable = durable
        self._lock = lock  # the data dir's, released by close()
        # What a segment roll leaves to sync goes to a flush round (both flush modes).
        logs.set_on_roll(flusher.rolled)

    def partition(self, topic: str, index: int) -> Partition:
        return self.logs.partition(topic, index)

    def append(
        self, partition: Partition, records: Any, now: int, acks: int = -1,
        transactional: bool = False, inline_inflate: int | None = None,
        records_checked: bool = False,
    ) -> tuple[AppendResult, Commit | None]:
        """Append a request's batches: ``(result, the commit to wait for)``.

        None when the answer waits for nothing: not durable, already durable (a retried
        duplicate), acks other than all (the round moves the high watermark soon), or a
        transactional batch (durable by its transaction's PrepareCommit: marked for the next
        round without starting one).

        ``inline_inflate`` and ``records_checked``: as ``Partition.append_untrusted`` (which
        raises ``InflateLater`` before appending anything).
        """
        result = partition.append_untrusted(records, now, inline_inflate, records_checked)
        if not self.durable:
            if not result.duplicate:
                self.data_arrived.notify()
            return result, None
        if partition.high_watermark > result.last_offset:
            return result, None
        if transactional or acks != -1:
            self.flusher.mark(partition, wake=not transactional)
            return result, None
        commit = self.flusher.commit([partition], pipelined=True)
        return result, None if commit.done and commit.ok else commit

    def commit(
        self, partitions: Iterable[Partition], on_durable: OnDurable | None = None,
        answered: bool = False,
    ) -> Commit:
        """Make what was appended to ``partitions`` durable (``FlushScheduler.commit``); with
        ``flush="never"`` it is done at once."""
        if not self.durable:
            commit = Commit({}, on_durable)
            commit.resolve(True)
            return commit
        return self.flusher.commit(partitions, on_durable, answered=answered)

    def sync_together(self, partition: Partition, other: Partition) -> None:
        """Whatever next syncs ``partition`` syncs ``other`` with it, in the same round
        (``FlushScheduler.sync_together``): a transaction's unsynced batches never become
        durable without the records of ``__transaction_state`` that admitted them. Nothing with
        ``flush="never"``."""
        if self.durable:
            self.flusher.sync_together(partition, other)

    def settle(self) -> None:
        """Sync everything dirty and decide every waiting commit, inline: recovery at start,
        before the flusher's task runs."""
        self.flusher.flush_now()

    def prepare_recovery_points(self) -> PendingWrite | None:
        """Once a start's recovery is complete and settled, and the broker serves: the
        partitions' clean points (``LogManager.prepare_recovery_points``): the points file to
        write in a worker thread and commit on the event loop (None: nothing to write)."""
        return self.logs.prepare_recovery_points()

    def close(self) -> None:
        self.flusher.flush_now()
        f = self.flusher
        log.info(
            "flush stats: %d rounds, %d partition syncs, %.3f s in fsync",
            f.rounds,
            f.partition_syncs,
            f.seconds,
        )
        changed = sum(1 for p in self.logs.all_partitions() if p.changed)
        try:
            self.logs.close(file_system_sync(changed))
        finally:
            if self._lock is not None:
                self._lock.release()


def load_cluster_id(data_dir: Path) -> str:
    path = data_dir / "meta.properties"
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id":
                return value.strip()
    cluster_id = uuid.uuid4().hex[:22]
    # Durable before it is used: a crash must not leave an empty file or a second cluster id.
    atomic_write(path, f"cluster.id={cluster_id}\nversion=0\n".encode())
    return cluster_id
