"""The log cleaner as a service: picks the dirtiest compacted partition, cleans it in a worker
thread (``broker/log/cleaner.py`` has the rules and the crash-safe swap), swaps the result in on the
event loop. Built by ``broker/app.py``, run by ``server.serve`` as one task; ``log.cleaner.*``
settings. Never blocks the event loop: the worker reads and writes, the loop only plans and swaps.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from broker.log.cleaner import (
    MAP_ENTRY_BYTES,
    Checkpoint,
    Cleanability,
    CleaningAborted,
    CleanResult,
    CrashHook,
    apply_result,
    clean,
    cleanability,
    make_job,
    read_checkpoint,
    valid_checkpoint,
)

if TYPE_CHECKING:
    from broker.log.partition import Partition

log = logging.getLogger("minibroker.cleaner")


class Throttle:
    """Bounds the cleaner's I/O rate (bytes read + written per second) by sleeping."""

    def __init__(self, bytes_per_second: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = bytes_per_second
        self._clock = clock
        self._sleep = sleep
        self._start = clock()
        self._bytes = 0

    def add(self, nbytes: int) -> None:
        if self.rate == float("inf"):
            return
        self._bytes += nbytes
        ahead = self._bytes / self.rate - (self._clock() - self._start)
        if ahead > 0:
            self._sleep(ahead)


@dataclass
class CleanerStats:
    cleanings: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    errors: int = 0


class LogCleaner:
    """The background cleaner: picks the dirtiest compacted partition, cleans it in a worker
    thread, swaps the result in on the event loop. Collaborators are passed in: ``partitions``
    lists the partitions to consider, ``clock`` gives now in ms."""

    def __init__(
        self,
        partitions: Callable[[], Iterable[Partition]],
        clock: Callable[[], int],
        *,
        threads: int = 1,
        backoff_ms: int = 15_000,
        dedupe_buffer_size: int = 128 * 1024 * 1024,
        io_max_bytes_per_second: float = float("inf"),
        crash_hook: CrashHook | None = None,
    ) -> None:
        """``crash_hook(point)`` is called at each step of CRASH_POINTS (tests only: it may end
        the process there)."""
        self._partitions = partitions
        self._clock = clock
        self.threads = max(threads, 1)
        self.backoff_s = backoff_ms / 1000
        self.max_map_entries = max(dedupe_buffer_size // MAP_ENTRY_BYTES, 1)
        self.io_max_bytes_per_second = io_max_bytes_per_second
        self._crash_hook = crash_hook
        self._abort = threading.Event()
        # Per partition object (a topic deleted and created again is a new one).
        self._checkpoints: weakref.WeakKeyDictionary[Partition, Checkpoint] = (
            weakref.WeakKeyDictionary()
        )
        self._in_progress: weakref.WeakSet[Partition] = weakref.WeakSet()
        # Partitions whose cleaning failed (unreadable data, a full disk): left alone until restart.
        self._failed: weakref.WeakSet[Partition] = weakref.WeakSet()
        self.stats = CleanerStats()

    def checkpoint(self, partition: Partition) -> Checkpoint:
        checkpoint = self._checkpoints.get(partition)
        if checkpoint is None:
            checkpoint = self._checkpoints[partition] = read_checkpoint(partition.dir)
        return valid_checkpoint(checkpoint, partition)

    def _pick(self, now_ms: int) -> tuple[Partition, Cleanability] | None:
        best = None
        best_ratio = -1.0
        for p in self._partitions():
            if p in self._in_progress or p in self._failed or not p.config.compact:
                continue
            try:
                p.roll_if_idle(now_ms)  # max.compaction.lag.ms also holds when writes stop
            except OSError as exc:
                log.warning("cannot roll %s-%d: %s", p.topic, p.index, exc)
            plan = cleanability(p, self.checkpoint(p), now_ms)
            if plan is None or not plan.due:
                continue
            ratio = plan.dirty_bytes / max(plan.total_bytes, 1)
            if ratio > best_ratio:
                best, best_ratio = (p, plan), ratio
        return best

    async def run(self) -> None:
        """Clean forever (until cancelled); ``threads`` partitions at a time."""
        async with trio.open_nursery() as nursery:
            for _ in range(self.threads):
                nursery.start_soon(self._loop)

    async def _loop(self) -> None:
        while True:
            if not await self.clean_once():
                await trio.sleep(self.backoff_s)

    async def clean_once(self) -> bool:
        """Clean the dirtiest partition that is due, if any; True if one was cleaned."""
        now = self._clock()
        picked = self._pick(now)
        if picked is None:
            return False
        partition, plan = picked
        return await self.clean_partition(partition, plan, now) is not None

    async def clean_partition(self, partition: Partition, plan: Cleanability, now_ms: int
                              ) -> CleanResult | None:
        try:
            job = make_job(partition, plan, self.checkpoint(partition), now_ms,
                           self.max_map_entries)
        except OSError as exc:  # out of descriptors: try again at the next round
            log.warning("cannot clean %s-%d now: %s", partition.topic, partition.index, exc)
            return None
        self._in_progress.add(partition)
        partition.cleaning = True
        finished = False

        async def abort_on_cancel() -> None:
            # A shutdown cancels us while the thread runs: ask it to stop at the next batch (the
            # thread itself cannot be cancelled; a group past its commit point is completed).
            try:
                await trio.sleep_forever()
            finally:
                if not finished:
                    self._abort.set()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(abort_on_cancel)
                started = time.perf_counter()
                result = await trio.to_thread.run_sync(
                    clean, job, Throttle(self.io_max_bytes_per_second).add, self._abort.is_set,
                    self._crash_hook,
                )
                result.seconds = time.perf_counter() - started
                finished = True
                nursery.cancel_scope.cancel()
        finally:
            partition.cleaning = False
            self._in_progress.discard(partition)
        try:
            if not apply_result(partition, result):
                return None
        except Exception as exc:  # a bug, not bad data: keep the broker up, leave it alone
            result.error = exc
        if result.error is not None:
            if not isinstance(result.error, CleaningAborted):
                self._failed.add(partition)
                self.stats.errors += 1
                log.error("cleaning %s-%d failed, left alone until restart: %r",
                          partition.topic, partition.index, result.error)
            return None
        self._checkpoints[partition] = result.checkpoint
        stats = self.stats
        stats.cleanings += 1
        stats.bytes_read += result.bytes_read
        stats.bytes_written += result.bytes_written
        stats.seconds += result.seconds
        # A pass that removed nothing (the compacted internal topics' usual pass, every
        # backoff) is DEBUG, so that it does not fill the log at INFO.
        log.log(
            logging.INFO if result.records_removed else logging.DEBUG,
            "cleaned %s-%d: %d -> %d bytes, %d records removed, %.3f s",
            partition.topic, partition.index, result.bytes_read, result.bytes_written,
            result.records_removed, result.seconds,
        )
        return result

    def abort(self) -> None:
        """Make cleanings under way stop soon (shutdown); the thread leaves nothing half done."""
        self._abort.set()
