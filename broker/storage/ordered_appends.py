"""Appends whose records are checked in a worker thread, kept in arrival order per partition
(issue 36: a gzip bomb in a Produce request blocked the event loop 0.1-0.3 s).

Theory of operation:

- The Produce handler appends on the event loop, inflating compressed records only up to
  ``INLINE_INFLATE_BYTES`` per partition (``Partition.append_untrusted(inline_inflate=...)``).
  Beyond that it ``submit``s the append here: ``check`` (the records' framing, inflated within
  the 16 MiB cap) runs in a worker thread, at most ``threads`` at once (each holds up to 16 MiB
  of inflated records: that limiter bounds the memory), then ``append`` runs on the event loop.
- Per partition, appends happen in arrival order, as everywhere else in the broker: while a
  partition has a submitted append not yet done (``queues``), every later Produce append to it
  is submitted too, behind it, even one that needs no thread. No later request of the same
  connection, nor another producer (the same producer id from another connection included),
  overtakes it there; sequence checks and transaction verification run at append time, in that
  order, exactly as if the append had been made on arrival.
- The appends run in this service's task, never in a connection's: a client that stops reading
  its replies holds up no other client's appends (the queue of a partition only waits for
  threads). The connection that sent the request reads nothing more until its appends are done
  (``Deferred.hold``; Kafka mutes a channel while its request is processed), and its frame keeps
  its share of ``queued.max.request.bytes`` until then.
- Without the service's task (handlers driven by unit tests, no server) nothing is submitted:
  the handler inflates inline, as before.
"""

from __future__ import annotations

import logging
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

import trio

from protocol.text import clip

log = logging.getLogger("minibroker.appends")

# What one partition's append may inflate on the event loop (measured: a 1 MiB gzip batch of
# 100-byte records is checked in 2-8 ms here, lz4/zstd/snappy in 0.5-1.5 ms; a 16 MiB bomb took
# 0.1-0.3 s). More goes to a worker thread.
INLINE_INFLATE_BYTES = 1024 * 1024
# Worker threads inflating at once (each up to 16 MiB: records.MAX_UNCOMPRESSED_BATCH_BYTES).
INFLATE_THREADS = 2


class PendingAppend:
    """One submitted append: ``done`` is set once it ran (``result``) or failed (``error``)."""

    __slots__ = ("append", "check", "checked", "done", "error", "result")

    def __init__(self, check: Callable[[], None] | None, append: Callable[[], Any]) -> None:
        self.check = check
        self.append = append
        self.checked = check is None
        self.done = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class OrderedAppends:
    """Per-partition FIFO queues of appends waiting for a worker thread (see the module's text).

    ``queues`` maps a partition (any hashable key) to its waiting appends; a partition without
    any is absent, so an empty dict is the whole cost of the fast path."""

    def __init__(self, threads: int = INFLATE_THREADS) -> None:
        self._limiter = trio.CapacityLimiter(threads)
        self.queues: dict[Any, deque[PendingAppend]] = {}
        self._nursery: trio.Nursery | None = None
        self.running = False  # the service's task runs: appends may be submitted

    async def run(self) -> None:
        """The task the submitted checks run in (``broker/network/server.py`` starts it)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.running = True
                await trio.sleep_forever()
        finally:
            self._nursery = None
            self.running = False

    def submit(self, key: Any, check: Callable[[], None] | None,
               append: Callable[[], Any]) -> PendingAppend:
        """Queue ``append`` on partition ``key`` behind its waiting appends, after ``check`` (in
        a worker thread; None: nothing to check). ``append`` runs on the event loop in this
        service's task; what it raises is the entry's ``error`` (``check``'s too, and then
        ``append`` does not run)."""
        entry = PendingAppend(check, append)
        queue = self.queues.get(key)
        if queue is None:
            queue = self.queues[key] = deque()
        queue.append(entry)
        if check is not None:
            if self._nursery is None:
                raise RuntimeError("OrderedAppends is not running")
            self._nursery.start_soon(self._check, key, entry)
        elif len(queue) == 1:
            self._drain(key)
        return entry

    async def _check(self, key: Any, entry: PendingAppend) -> None:
        try:
            await trio.to_thread.run_sync(entry.check, limiter=self._limiter)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - the entry's outcome, answered by its request
            _clear_frames(exc)
            entry.error = exc
        entry.checked = True
        self._drain(key)

    def _drain(self, key: Any) -> None:
        """Run the appends at the head of ``key``'s queue whose check is done, in order."""
        queue = self.queues.get(key)
        while queue and queue[0].checked:
            entry = queue.popleft()
            if entry.error is None:
                try:
                    entry.result = entry.append()
                except Exception as exc:  # noqa: BLE001 - a bug costs this append, not the queue
                    log.error("a queued append failed: %s", clip(repr(exc)))
                    entry.error = exc
            entry.done.set()
        if queue is not None and not queue:
            del self.queues[key]

    async def wait(self, entries: list[PendingAppend]) -> None:
        """Until every entry is done."""
        for entry in entries:
            await entry.done.wait()


def _clear_frames(exc: BaseException) -> None:
    """Clear the locals of the frames ``exc``, and each exception it chains, went through. An
    entry keeps its error until its request is answered, and a failed check's frames hold what
    it read: a gzip bomb's 16 MiB of inflated parts, past the request budget, for as long as
    the request waits (the fuzzer found such errors piling up). The tracebacks stay, for the
    log of a bug."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        todo += (current.__cause__, current.__context__)
