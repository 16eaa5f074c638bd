"""The log's trio side, shared by all connections: group commit and the two waiting points.

Domain objects (``LogManager``, partitions, producer state) are synchronous and take ``now_ms``.
This module adds what needs trio: group commit of fsyncs (``FlushScheduler``), waking long-poll
fetches when the high watermark moves (``DataArrived``), and ``Storage``, the log as the services
write to it (built by ``broker/app.py``).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from broker.data_dir_lock import DataDirLock
from broker.log.manager import LogManager
from broker.log.partition import AppendResult, FlushTicket, Partition
from broker.log.segment import atomic_write

log = logging.getLogger("minibroker")


class DataArrived:
    """Wakes every long-polling fetch whenever some high watermark moved."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = trio.Event()

    def event(self) -> trio.Event:
        return self._event


class FlushScheduler:
    """Group commit: appends mark partitions dirty; one task fsyncs them all, then wakes waiters.

    ``mark(partition)`` returns the event set once a flush covering that append has finished, so
    concurrent acks=all requests share one fdatasync per partition. The fdatasyncs of a round run
    in a worker thread: meanwhile the event loop keeps reading and appending the requests that
    arrive, and the next round covers all of them (measured: inline fsyncs of ~0.8 ms each left
    one request per round with librdkafka's 5 in-flight requests).
    """

    def __init__(
        self, data_arrived: DataArrived, on_round: Callable[[float], None] | None = None,
        seconds: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._on_round = on_round  # metrics: seconds of each round's fdatasyncs
        self._seconds = seconds  # a monotonic clock in seconds (``sync_alone``'s window)
        self._dirty: dict[int, Partition] = {}
        self._round = trio.Event()
        self._wakeup = trio.Event()
        self._data_arrived = data_arrived
        self._retry = False  # the last round left partitions dirty after an error
        self._in_thread = False  # a round's fdatasyncs are running in the worker thread
        # ``sync_alone``: when the last inline sync began, and how long it took.
        self._inline_started = 0.0
        self._inline_seconds = 0.0
        # Counters for the log at shutdown: how well do fsyncs group?
        self.rounds = 0
        self.partition_syncs = 0
        self.seconds = 0.0

    def mark(self, partition: Partition, wake: bool = True) -> trio.Event:
        """Put ``partition`` in the next round; the event is set once that round is done.

        ``wake=False``: the caller syncs it inline (``flush_now``) before its request ends, so the
        task is not woken for a round that would find nothing (two passes of the event loop per
        transaction).
        """
        self._dirty[id(partition)] = partition
        if wake:
            self._wakeup.set()
        return self._round

    @property
    def busy(self) -> bool:
        """A round is being synced in the worker thread, or one is about to start: a small write
        that joins it shares its fdatasyncs instead of making its own."""
        return self._in_thread or bool(self._dirty)

    async def run(self) -> None:
        while True:
            if self._retry:
                # A failed round: try again a little later, not in a tight loop.
                self._retry = False
                await trio.sleep(0.1)
                self._wakeup.set()
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            # Let every request that is already runnable append first: one fsync then covers them.
            await trio.lowlevel.cancel_shielded_checkpoint()
            if not self._dirty:
                continue  # ``flush_now`` took them meanwhile (EndTxn's markers, one producer)
            dirty, done = self._take_round()
            small = _small_round(dirty)
            tickets = self._begin(dirty)
            started = time.perf_counter()
            if small:
                # A few small appends (transaction-log records, markers, one-record batches):
                # their fdatasync is shorter than a round trip through a worker thread, and it
                # costs less CPU inline (bench/transactions.py).
                _sync_all([t for _, t in tickets if t is not None])
            else:
                # Not cancellable: a shutdown waits for the fsyncs under way (close() flushes
                # anyway).
                self._in_thread = True
                try:
                    await trio.to_thread.run_sync(_sync_all,
                                                  [t for _, t in tickets if t is not None])
                finally:
                    self._in_thread = False
            self._finish_round(tickets, done, started)

    def sync_alone(self, partition: Partition) -> bool:
        """fdatasync ``partition`` here and now if it looks alone: no round under way and no
        inline sync begun within the last few fsync times. True once it is durable.

        One producer's acks=all write is then answered by its own request, without waiting for
        this task (three passes of the event loop: about 0.2 ms of broker CPU per one-record
        transaction here, bench/transactions.py). Writes that come faster than that (many
        producers) go to the rounds, where they share fdatasyncs: one inline sync per window at
        most.
        """
        now = self._seconds()
        if self.busy or now - self._inline_started < _INLINE_WINDOW_SYNCS * self._inline_seconds:
            return False
        self._inline_started = now
        self._sync_inline([partition], None)
        self._inline_seconds = self._seconds() - now
        return partition.high_watermark == partition.log_end_offset

    def flush_now(self) -> None:
        """Flush every dirty partition inline (shutdown, or callers that cannot wait)."""
        self._sync_inline(*self._take_round())

    def _sync_inline(self, partitions: list[Partition], done: trio.Event | None) -> None:
        started = time.perf_counter()
        # The loop waits for these fdatasyncs: the partitions' own descriptors serve.
        tickets = self._begin(partitions, shared=False)
        _sync_all([t for _, t in tickets if t is not None])
        self._finish_round(tickets, done, started)

    def _begin(
        self, dirty: list[Partition], shared: bool = True
    ) -> list[tuple[Partition, FlushTicket | None]]:
        """Each partition's ticket (``shared``: see ``Partition.begin_flush``); one that cannot
        be taken (out of descriptors: EMFILE) is logged and left dirty for the next round, whose
        waiters then see no progress."""
        tickets = []
        for partition in dirty:
            try:
                tickets.append((partition, partition.begin_flush(shared)))
            except OSError as exc:
                log.error("flush of %s-%d postponed: %s", partition.topic, partition.index, exc)
                self._dirty[id(partition)] = partition
                self._retry = True
        return tickets

    def _take_round(self) -> tuple[list[Partition], trio.Event]:
        dirty, self._dirty = self._dirty, {}
        done, self._round = self._round, trio.Event()
        return list(dirty.values()), done

    def _finish_round(
        self, tickets: list[tuple[Partition, FlushTicket | None]], done: trio.Event | None,
        started: float,
    ) -> None:
        for partition, ticket in tickets:
            if ticket is not None and not partition.complete_flush(ticket):
                # Not durable (EIO, ENOSPC): the high watermark stays, acks=all waiters get
                # KAFKA_STORAGE_ERROR, and the next round retries.
                log.error("fdatasync of %s-%d failed: %s", partition.topic, partition.index,
                          ticket.error)
                self._dirty[id(partition)] = partition
                self._retry = True
                self._wakeup.set()  # an inline sync failed: the task retries it
        elapsed = time.perf_counter() - started
        self.seconds += elapsed
        if self._on_round is not None and tickets:
            self._on_round(elapsed)
        self.rounds += 1
        self.partition_syncs += len(tickets)
        if done is not None:
            done.set()
        if tickets:
            self._data_arrived.notify()


# A round is synced inline when it covers at most this many partitions and bytes, none of which
# needs a directory sync (a new segment); bigger rounds go to a worker thread so that the loop
# keeps reading the requests the next round will cover.
_INLINE_PARTITIONS = 2
_INLINE_BYTES = 8 * 1024


def _small_round(dirty: list[Partition]) -> bool:
    return len(dirty) <= _INLINE_PARTITIONS and all(
        p.unsynced_bytes <= _INLINE_BYTES and not p.needs_directory_sync for p in dirty
    )


# ``sync_alone``: at most one inline sync per this many fsync times.
_INLINE_WINDOW_SYNCS = 4


# fdatasyncs of one round run in parallel: on this machine 50 small files took 6.4 ms one after
# the other and 2.2 ms from a pool of 16 threads (the journal commits them together).
# (The pool starts its threads on first use.)
_SYNC_POOL = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="fsync")


def _sync_all(tickets: list[FlushTicket]) -> None:
    """fdatasync every ticket, the first in this thread and the others in the pool at the
    same time (errors stay in each ticket, as ``FlushTicket.sync`` keeps them)."""
    others = [_SYNC_POOL.submit(ticket.sync) for ticket in tickets[1:]]
    for ticket in tickets[:1]:
        ticket.sync()
    for future in others:
        future.result()


class Storage:
    """The log as the services write to it: partitions, and appends with group commit.

    ``append_untrusted`` is the one append path of Produce and OffsetCommit; ``mark_dirty`` puts
    a partition written some other way (markers, coordinator records) into the next fsync round.
    """

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

    def partition(self, topic: str, index: int) -> Partition:
        return self.logs.partition(topic, index)

    def append_untrusted(
        self, partition: Partition, records: Any, now: int, waited_for: bool = False
    ) -> tuple[AppendResult, trio.Event | None]:
        """Append a Produce request's batches: ``(result, event set once they are durable)``.

        The event is None when nothing needs waiting for (not durable, or already flushed, which a
        retried duplicate may be, or synced here: ``waited_for``, an acks=all write that is small
        and alone, see ``FlushScheduler.sync_alone``).
        """
        result = partition.append_untrusted(records, now)
        if not self.durable:
            if not result.duplicate:
                self.data_arrived.notify()
            return result, None
        if partition.high_watermark > result.last_offset:
            return result, None
        if waited_for and _small_round([partition]) and self.flusher.sync_alone(partition):
            return result, None
        return result, self.flusher.mark(partition)

    def mark_dirty(self, partition: Partition, wake: bool = True) -> trio.Event:
        """Flush ``partition`` in the next round (whatever ``durable`` says): the event is set
        once that round is done. ``wake=False``: the caller calls ``flush_now`` itself."""
        return self.flusher.mark(partition, wake)

    def flush_now(self) -> None:
        self.flusher.flush_now()

    def close(self) -> None:
        self.flusher.flush_now()
        f = self.flusher
        log.info(
            "flush stats: %d rounds, %d partition syncs, %.3f s in fsync",
            f.rounds,
            f.partition_syncs,
            f.seconds,
        )
        try:
            self.logs.close()
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
