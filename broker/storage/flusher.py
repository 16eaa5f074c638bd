"""Group commit: the only code that fsyncs a partition while the broker serves.

A ``Commit`` stands for appends already made to some partitions: it is done once every one of
those partitions' high watermarks covers them (``ok``), or once a round that should have covered
them failed (not ``ok``: EIO, ENOSPC). ``FlushScheduler.commit`` decides how: inline, in the
caller's request, when the appends are small and nothing else is waiting or syncing (one
producer: no extra pass of the event loop); otherwise in the next shared round, where concurrent
requests share one fdatasync per partition. The round's fdatasyncs run in a worker thread when
they are big (meanwhile the loop keeps reading and appending the requests the next round will
cover), inline in this task when they are small. In worker threads a round has two lanes: the
transaction log and small files first (their commits decided as soon as they are durable), then
each large file on its own (see ``_LANE_RULES``): a commit waits for its own data, never for a
larger file's fdatasync that began with it.

Every fsync is counted here (``on_round``: the metrics' fsync histogram; ``rounds``,
``partition_syncs`` and ``seconds``: the shutdown statistics).

``sync_together(partition, other)``: the next fsync of ``partition``, whoever asks for it (an
inline commit, a round, the unwaited round, recovery, shutdown), syncs ``other`` with it, in the
same round. The transaction manager ties a partition holding a transaction's unsynced batches to
that transaction's ``__transaction_state`` partition: the records that added the partition to
the transaction (and completed the previous one) are then never left behind its batches, except
by a power cut in the middle of that round (docs/design.md section 3).
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import time
from collections.abc import Callable, Iterable

import trio

from broker.log.partition import FlushTicket, Partition

try:  # the run loop's state, for ``_others_ready`` (private to trio: guarded)
    from trio._core import _run as _trio_run

    _RUN_CONTEXT: object = _trio_run.GLOBAL_RUN_CONTEXT
except (ImportError, AttributeError):  # pragma: no cover
    _RUN_CONTEXT = None

log = logging.getLogger("minibroker")

# What a commit calls once it is decided: True when durable, False when a sync failed.
OnDurable = Callable[[bool], None]


class DataArrived:
    """Wakes every long-polling fetch whenever some high watermark moved."""

    def __init__(self) -> None:
        self._event = trio.Event()
        self._handed_out = False  # someone may wait on _event

    def notify(self) -> None:
        # An event nobody took needs no replacing (most appends: no fetch is waiting).
        if self._handed_out:
            self._event.set()
            self._event = trio.Event()
            self._handed_out = False

    def event(self) -> trio.Event:
        """The event the next ``notify`` sets."""
        self._handed_out = True
        return self._event


class Commit:
    """The durability of appends already made (see the module docstring)."""

    __slots__ = ("_callbacks", "_event", "_targets", "done", "ok")

    def __init__(self, targets: dict[Partition, int], on_durable: OnDurable | None) -> None:
        self._targets = targets  # partition -> the log end offset the commit must cover
        self._callbacks = [] if on_durable is None else [on_durable]
        self._event: trio.Event | None = None
        self.done = False
        self.ok = False

    @property
    def covered(self) -> bool:
        return all(p.high_watermark >= offset for p, offset in self._targets.items())

    @property
    def partitions(self) -> Iterable[Partition]:
        return self._targets.keys()

    async def wait(self) -> bool:
        """Wait until the commit is decided; True if durable."""
        if not self.done:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()
        return self.ok

    def resolve(self, ok: bool) -> None:
        """Decide the commit: run its callbacks (in order), then wake its waiters."""
        if self.done:
            return
        self.done, self.ok = True, ok
        for callback in self._callbacks:
            try:
                callback(ok)
            except Exception:
                # A bug costs that caller, never the flusher (nor the other commits).
                log.exception("a commit callback failed")
        if self._event is not None:
            self._event.set()


class FlushScheduler:
    """Group commit: commits put partitions into the next round; one task fsyncs them all, then
    decides the round's commits."""

    def __init__(
        self, data_arrived: DataArrived, on_round: Callable[[float], None] | None = None,
        seconds: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._on_round = on_round  # metrics: seconds of each round's fdatasyncs
        self._seconds = seconds  # a monotonic clock in seconds (the inline window)
        self._dirty: dict[int, Partition] = {}
        # partition -> partitions its next fsync syncs too (``sync_together``)
        self._together: dict[Partition, list[Partition]] = {}
        self._waiting: list[Commit] = []  # decided by the next round
        # Partitions (ids) being synced by rounds in worker threads: no other ticket of theirs
        # may be taken until those end (``_blocked``).
        self._syncing_ids: set[int] = set()
        self._nursery: trio.Nursery | None = None  # ``run``'s: the worker-thread rounds' tasks
        self._wakeup = trio.Event()
        self._round_pending = False  # the task was woken for partitions marked since
        # The task's sleep: its deadline is set when partitions nobody waits for are marked.
        self._sleep = trio.CancelScope()
        self._data_arrived = data_arrived
        self._retry = False  # the last round left partitions dirty after an error
        # The inline window: when the last inline sync began, and how long it took.
        self._inline_started = 0.0
        self._inline_seconds = 0.0
        self._inline_task: object = None  # the task (a connection) that began it
        # Counters for the log at shutdown: how well do fsyncs group?
        self.rounds = 0
        self.partition_syncs = 0
        self.seconds = 0.0

    # -- the one decision --------------------------------------------------------------------

    def commit(
        self, partitions: Iterable[Partition], on_durable: OnDurable | None = None,
        pipelined: bool = False, answered: bool = False,
    ) -> Commit:
        """Make what was appended to ``partitions`` durable; ``on_durable(ok)`` runs once decided.

        Inline (the commit is done when this returns, ``on_durable`` has run) when the appends
        are small, the flusher is idle (no round under way or waiting), no other task is ready
        to run, and no other connection's inline sync began within the last few fsync times
        (``_INLINE_WINDOW_SYNCS``). One producer gets its answers one pass of the event loop
        earlier; with many, an inline fsync blocks the loop while their requests wait, so the
        requests read in the same pass append too and share a round (50 producers, durable,
        2.2-2.4x the transactions/s), and inline fsyncs take at most about a fifth of the
        loop's time (at 50 transactional producers the loop had spent about a fifth of its time
        in 500 inline fsyncs a second; with the window, 1,640-1,857 became 2,034-2,178
        transactions/s). ``pipelined`` (a client's data: Produce, OffsetCommit, with up to five
        requests in flight behind it on the same connection): the window holds for the same
        connection too (measured: syncing each pipelined 4 KB Produce inline cut durable
        records/s by more than half); coordinator records come one request at a time per
        producer. ``answered``: the caller has already sent the answer these appends back
        (EndTxn's markers, ``AnswerFirst``), so requests handled next must find them durable:
        inline whenever the flusher is idle, even if other tasks are ready or another inline
        sync just ran.
        """
        targets = {p: p.log_end_offset for p in partitions
                   if p.high_watermark < p.log_end_offset or p.dirty}
        commit = Commit(targets, on_durable)
        if not targets:
            commit.resolve(True)
        elif self._inline(targets, pipelined, answered):
            self._inline_started = self._seconds()
            self._inline_task = _current_task()
            self._sync_commit(commit)
        else:
            self._enqueue(commit)
        return commit

    def _inline(self, partitions: Iterable[Partition], pipelined: bool, answered: bool) -> bool:
        # While a round syncs in a worker thread, nothing is synced on the loop: that fdatasync
        # could wait for the file system's journal behind the round's (megabytes), with the
        # loop stopped. The flusher's task syncs the commit in a worker thread of its own.
        if self.busy or (not answered and _others_ready()):
            return False
        partitions = list(partitions)
        if not _small_round(partitions) or any(
            # A partition tied to them is synced with them (``_with_tied``): if what a segment
            # roll left is to be synced there, the commit goes to a round too.
            t.needs_directory_sync for p in partitions for t in self._together.get(p, ())
        ):
            return False
        if answered or (self._seconds() - self._inline_started
                        >= _INLINE_WINDOW_SYNCS * self._inline_seconds):
            return True
        return not pipelined and self._inline_task is _current_task()

    def mark(self, partition: Partition, wake: bool = True) -> None:
        """Put ``partition`` in the next round, whoever waits for it (``wake=False``: in the
        next round someone else starts)."""
        self._dirty[id(partition)] = partition
        if wake:
            self._round_pending = True
            self._wakeup.set()
        elif self._sleep.deadline == math.inf:
            # Nobody waits (transactional batches: their PrepareCommit syncs them; what a
            # segment roll left): a round within ``_UNWAITED_SECONDS`` all the same, so that
            # read_uncommitted readers see them; moving the sleep's deadline costs no pass of
            # the event loop.
            try:
                self._sleep.deadline = trio.current_time() + _UNWAITED_SECONDS
            except RuntimeError:
                pass  # outside the event loop (recovery at start): flush_now takes it

    def rolled(self, partition: Partition) -> None:
        """A segment of ``partition`` rolled (``Partition.on_roll``): the fsyncs the roll left
        (the rolled segment's data and index, a producer-state snapshot, the directory) go
        into the next round, or a background round within ``_UNWAITED_SECONDS``; never onto
        the event loop (such a partition is never synced inline, see ``_small_round``)."""
        self.mark(partition, wake=False)

    def sync_together(self, partition: Partition, other: Partition) -> None:
        """The next fsync of ``partition`` syncs ``other`` too, in the same round (see the
        module docstring). Nothing is synced now, no round is started."""
        if other is partition:
            return
        tied = self._together.get(partition)
        if tied is None:
            self._together[partition] = [other]
        elif other not in tied:
            tied.append(other)

    def _with_tied(self, partitions: list[Partition]) -> tuple[list[Partition], set[int]]:
        """``partitions`` and the partitions tied to them that have something to sync (taken
        out of the next round: they are synced now); and the ids of the tie targets among
        them (the records that admitted the others' batches: a round syncs them first)."""
        if not self._together:
            return partitions, set()
        out = list(partitions)
        targets: set[int] = set()
        for partition in partitions:
            for other in self._together.pop(partition, ()):
                targets.add(id(other))
                if other.dirty and other not in out:
                    self._dirty.pop(id(other), None)
                    out.append(other)
        return out, targets

    @property
    def busy(self) -> bool:
        """A round is being synced in a worker thread, or one is about to start (partitions
        marked without waking the task do not start one)."""
        return bool(self._syncing_ids) or self._round_pending or bool(self._waiting)

    def _blocked(self, partition: Partition) -> bool:
        """A round in a worker thread is syncing ``partition`` or a partition its next fsync
        takes along (``sync_together``): its next ticket waits for that round."""
        syncing = self._syncing_ids
        return id(partition) in syncing or any(
            id(t) in syncing for t in self._together.get(partition, ()))

    def _enqueue(self, commit: Commit) -> None:
        for partition in commit.partitions:
            self._dirty[id(partition)] = partition
        self._waiting.append(commit)
        self._wakeup.set()

    def _sync_commit(self, commit: Commit) -> None:
        """Sync ``commit``'s partitions here and now (no round is under way: ``_inline``) and
        decide it."""
        started = self._seconds()
        partitions = [p for p in commit.partitions if p.dirty]
        for p in partitions:
            self._dirty.pop(id(p), None)
        self._sync_inline(self._with_tied(partitions)[0])
        self._inline_seconds = self._seconds() - started
        if commit.covered:
            commit.resolve(True)
        elif any(p.dirty for p in commit.partitions):  # a sync failed: the retry decides it
            self._enqueue(commit)
        else:  # nothing left to sync, and not covered (a partition deleted meanwhile)
            commit.resolve(False)

    # -- rounds ------------------------------------------------------------------------------

    async def run(self) -> None:
        # Rounds too big to sync on the loop run in worker threads, each in a task of this
        # nursery, while this task goes on starting rounds for what they do not hold.
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self._rounds()

    async def _rounds(self) -> None:
        chain = False  # the last round was synced inline without waiting for the loop first
        while True:
            if self._retry:
                # A failed round: try again a little later, not in a tight loop.
                self._retry = False
                await trio.sleep(0.1)
                self._wakeup.set()
                chain = False
            chained = chain and bool(self._waiting)
            if chained:
                # Commits made by the callbacks of the round just synced (a Prepare round's
                # markers): the next round starts now, not after the loop's batch of the
                # requests the last round released (two passes of the event loop, a few
                # milliseconds each at 50 producers, twice per EndTxn). Not twice in a row
                # without the loop running between (rounds synced inline never yield).
                self._wakeup = trio.Event()
            else:
                with self._sleep:
                    await self._wakeup.wait()
                self._sleep = trio.CancelScope()
                self._wakeup = trio.Event()
                # Let every request that is already runnable append first: one fsync then
                # covers them.
                await trio.lowlevel.cancel_shielded_checkpoint()
            if not self._dirty and not self._waiting:
                chain = False
                continue  # an inline sync took them meanwhile
            chain = self._round() is True and not chained

    def _round(self) -> bool | None:
        """Take the next round and start it: synced here when small and no round is in a
        worker thread (True), else in worker threads, from a task of its own (False); None:
        nothing to take now.

        What a round in a worker thread is syncing stays for the round after it; the rest goes
        now: a request never waits for a round that began before it to sync data of other
        partitions. In worker threads a round syncs in two lanes (``_LANE_RULES``): first the
        transaction log and the small files, whose commits are decided as soon as they are
        durable, then the large files, each partition's commits decided as soon as its own
        fdatasync returns (``_Round``)."""
        dirty, commits = self._take_round()
        dirty, targets = self._with_tied(dirty)
        if not dirty and not commits:
            return None  # all of it waits for the rounds under way (they start the next)
        # Both before the tickets: they reset ``unsynced_bytes``.
        small = _small_round(dirty)
        lanes = {id(p): _lane(p, targets) for p in dirty}
        tickets = self._begin(dirty)
        if len(tickets) < len(dirty):
            # Out of descriptors (EMFILE) for some partitions: the commits that need them fail
            # now (KAFKA_STORAGE_ERROR, the client retries), as an inline round decides them;
            # the partitions stay dirty for the next round.
            failed = {id(p) for p in dirty} - {id(p) for p, _ in tickets}
            kept = []
            for commit in commits:
                if any(id(p) in failed for p in commit.partitions):
                    commit.resolve(False)
                else:
                    kept.append(commit)
            commits = kept
        started = time.perf_counter()
        nursery = self._nursery
        # (None: not running, which never calls this.) A small round waits for the loop's
        # fdatasync only when no round is in a worker thread (see ``_inline``).
        if nursery is None or (small and not self._syncing_ids):
            # A few small appends (transaction-log records, markers, one-record batches):
            # their fdatasync is shorter than a round trip through a worker thread, and it
            # costs less CPU inline (bench/transactions.py).
            _sync_all([t for _, t in tickets if t is not None])
            self._finish_round(tickets, started)
            self._decide(commits)
            return True
        round_ = _Round(
            first=[(p, t) for p, t in tickets if lanes[id(p)] == _FIRST],
            late=[(p, t) for p, t in tickets if lanes[id(p)] == _LATE],
            commits=commits, started=started)
        self._syncing_ids |= round_.pending
        nursery.start_soon(self._thread_round, round_)
        return False

    async def _thread_round(self, round_: _Round) -> None:
        # Shielded: a shutdown waits for the fdatasyncs under way, and every ticket taken is
        # completed (what was appended since, close() syncs).
        with trio.CancelScope(shield=True):
            round_.step(_FIRST)
            if round_.first:
                await self._sync_lane(round_, round_.first)
            round_.step(_LATE)
            if len(round_.late) == 1:
                await self._sync_lane(round_, round_.late)
            elif round_.late:
                # Each large file on its own: its commits do not wait for a larger one's.
                async with trio.open_nursery() as lane:
                    for ticket in round_.late:
                        lane.start_soon(self._sync_lane, round_, [ticket])
            round_.step(_DONE)
            if round_.commits:
                # Lanes decide their commits; a round none of whose tickets could be taken (out
                # of descriptors: EMFILE) has no lane, and its commits are decided here (failed:
                # KAFKA_STORAGE_ERROR, the client retries), never left waiting.
                self._decide(round_.commits)
                round_.commits = []
        self._count_round(round_.synced, round_.started)

    async def _sync_lane(
        self, round_: _Round, tickets: list[tuple[Partition, FlushTicket | None]],
    ) -> None:
        """Sync ``tickets`` of ``round_`` in a worker thread, then decide the round's commits
        that no other lane of it holds, and start the next round if commits wait."""
        ids = {id(p) for p, _ in tickets}
        try:
            await trio.to_thread.run_sync(_sync_all, [t for _, t in tickets if t is not None])
        finally:
            self._syncing_ids -= ids
            round_.pending -= ids
        round_.synced += self._complete(tickets)
        round_.commits = self._decide_ready(round_.commits, round_.pending)
        if self._waiting and not self._retry:
            # Commits waited while this lane synced (or its callbacks made them): the next
            # round starts now, from this task (see ``_rounds``).
            self._round()

    def _decide_ready(self, commits: list[Commit], pending: set[int]) -> list[Commit]:
        """Decide the commits none of whose partitions is in ``pending`` (still being synced
        by a lane of their round); return the others."""
        if not pending:
            self._decide(commits)
            return []
        ready: list[Commit] = []
        left: list[Commit] = []
        for commit in commits:
            (left if any(id(p) in pending for p in commit.partitions) else ready).append(commit)
        self._decide(ready)
        return left

    def flush_now(self) -> None:
        """Sync every dirty partition inline and decide every waiting commit (shutdown, and
        recovery at start, which has no loop)."""
        dirty, commits = self._take_round()
        self._sync_inline(self._with_tied(dirty)[0])
        self._decide(commits)

    def _decide(self, commits: list[Commit]) -> None:
        for commit in commits:
            if commit.covered:
                commit.resolve(True)
            elif any(p.dirty for p in commit.partitions) and not self._retry:
                self._enqueue(commit)  # appended again after the round took it: the next one
            else:
                commit.resolve(False)  # the fdatasync failed: KAFKA_STORAGE_ERROR

    def _sync_inline(self, partitions: list[Partition]) -> None:
        started = time.perf_counter()
        # The loop waits for these fdatasyncs: the partitions' own descriptors serve.
        tickets = self._begin(partitions, shared=False)
        _sync_all([t for _, t in tickets if t is not None])
        self._finish_round(tickets, started)

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
                self._retry = self._round_pending = True
        return tickets

    def _take_round(self) -> tuple[list[Partition], list[Commit]]:
        """The dirty partitions and waiting commits of the next round: all of them, but those
        a round in a worker thread holds (``_blocked``), which wait for the round after it."""
        if not self._syncing_ids:
            self._round_pending = False
            dirty, self._dirty = self._dirty, {}
            commits, self._waiting = self._waiting, []
            return list(dirty.values()), commits
        blocked = self._blocked
        taken = [p for p in self._dirty.values() if not blocked(p)]
        for p in taken:
            del self._dirty[id(p)]
        ready: list[Commit] = []
        waiting: list[Commit] = []
        for commit in self._waiting:
            (waiting if any(blocked(p) for p in commit.partitions) else ready).append(commit)
        self._waiting = waiting
        self._round_pending = False  # what is left goes when those rounds end (they wake us)
        return taken, ready

    def _finish_round(
        self, tickets: list[tuple[Partition, FlushTicket | None]], started: float,
    ) -> None:
        self._count_round(self._complete(tickets), started)

    def _complete(self, tickets: list[tuple[Partition, FlushTicket | None]]) -> int:
        """Complete synced tickets (the high watermarks move); how many there were."""
        for partition, ticket in tickets:
            if ticket is not None and not partition.complete_flush(ticket):
                # Not durable (EIO, ENOSPC): the high watermark stays, its commits fail, and
                # the next round retries.
                log.error("fdatasync of %s-%d failed: %s", partition.topic, partition.index,
                          ticket.error)
                self._dirty[id(partition)] = partition
                self._retry = self._round_pending = True
                self._wakeup.set()  # an inline sync failed: the task retries it
        synced = sum(1 for _, t in tickets if t is not None)
        if synced:
            self.partition_syncs += synced
            self._data_arrived.notify()
        return synced

    def _count_round(self, synced: int, started: float) -> None:
        """The statistics and the metrics' fsync histogram: one round (if it synced
        anything), however many lanes it had."""
        if not synced:
            return
        elapsed = time.perf_counter() - started
        self.seconds += elapsed
        if self._on_round is not None:
            self._on_round(elapsed)
        self.rounds += 1


# The lanes of a round in worker threads, and its steps. Rules:
# - the first lane is synced (its files in parallel) and its commits decided before the late
#   lane starts: a transaction's records in ``__transaction_state`` and a small acks=all batch
#   never wait for a large file's fdatasync, nor does the file system's journal commit they
#   need wait for that file's writeback (not started yet); and the records that admitted a
#   transaction's batches (a tie target, ``sync_together``) are durable before the batches;
# - in the late lane every partition is synced on its own: its commits are decided when its
#   own fdatasync returns, and its next round can start then;
# - a commit is decided once no lane of its round still holds one of its partitions: it waits
#   for its own data, never for more (but for the first lane, which is small).
_FIRST = "first"
_LATE = "late"
_DONE = "done"
_TAKEN = "taken"

# Which lane syncs a partition: the first rule that matches. (``targets``: the ids of the tie
# targets of the round, ``FlushScheduler._with_tied``.)
_LANE_RULES: tuple[tuple[str, Callable[[Partition, set[int]], bool], str], ...] = (
    ("a tie target: the records that admitted another partition's batches",
     lambda p, targets: id(p) in targets, _FIRST),
    ("what a segment roll left: rolled segments, their indexes, a snapshot, the directory",
     lambda p, targets: p.needs_directory_sync, _LATE),
    ("a large file: more than _FIRST_LANE_BYTES appended since its last sync",
     lambda p, targets: p.unsynced_bytes > _FIRST_LANE_BYTES, _LATE),
    ("a small file", lambda p, targets: True, _FIRST),
)

# A round's steps: each state and the states it may come from.
_ROUND_STEPS: dict[str, frozenset[str]] = {
    _FIRST: frozenset({_TAKEN}),
    _LATE: frozenset({_FIRST}),
    _DONE: frozenset({_LATE}),
}

_FIRST_LANE_BYTES = 64 * 1024


class IllegalRoundStep(RuntimeError):
    """A round was moved to a step its state does not lead to (a bug)."""


def _lane(partition: Partition, targets: set[int]) -> str:
    for _, matches, lane in _LANE_RULES:
        if matches(partition, targets):
            return lane
    raise IllegalRoundStep("no lane rule matched")  # pragma: no cover (the last one always does)


class _Round:
    """A round synced in worker threads: its lanes' tickets, the commits it decides, the
    partitions (ids) a lane still holds (``pending``)."""

    __slots__ = ("commits", "first", "late", "pending", "started", "state", "synced")

    def __init__(self, first: list[tuple[Partition, FlushTicket | None]],
                 late: list[tuple[Partition, FlushTicket | None]], commits: list[Commit],
                 started: float) -> None:
        self.first, self.late, self.commits, self.started = first, late, commits, started
        self.pending = {id(p) for p, _ in first} | {id(p) for p, _ in late}
        self.state = _TAKEN
        self.synced = 0  # tickets synced, for the statistics

    def step(self, to: str) -> None:
        if self.state not in _ROUND_STEPS.get(to, ()):
            raise IllegalRoundStep(f"a round cannot go from {self.state} to {to}")
        self.state = to


# A round is synced inline when it covers at most this many partitions and bytes, none of which
# needs a directory sync (a new segment); bigger rounds go to a worker thread so that the loop
# keeps reading the requests the next round will cover.
_INLINE_PARTITIONS = 3
_INLINE_BYTES = 8 * 1024


def _others_ready() -> bool:
    """Other tasks are ready to run (requests of other connections, read in this pass of the
    event loop): they may append too, so the commit waits for a round they can share instead of
    blocking them behind an inline fsync. False outside the event loop (recovery at start).

    The length of trio's run queue, read directly: ``current_statistics().tasks_runnable`` is
    the same number, but the statistics also count the I/O registrations one by one (4.3 us
    with 100 connections, 0.07 us read directly; up to two calls per transaction). If trio's
    internals ever move, the public call serves (the flusher test pins both)."""
    runner = getattr(_RUN_CONTEXT, "runner", None)
    if runner is not None:
        try:
            return len(runner.runq) > 0
        except AttributeError:
            pass
    try:
        return trio.lowlevel.current_statistics().tasks_runnable > 0
    except RuntimeError:
        return False


def _current_task() -> object:
    """The running trio task (one per connection), None outside the event loop."""
    try:
        return trio.lowlevel.current_task()
    except RuntimeError:
        return None


def _small_round(dirty: Iterable[Partition]) -> bool:
    dirty = list(dirty)
    return len(dirty) <= _INLINE_PARTITIONS and all(
        p.unsynced_bytes <= _INLINE_BYTES and not p.needs_directory_sync for p in dirty
    )


# Partitions marked without a waiter (transactional batches) are synced at the latest this long
# after the first of them (or by their PrepareCommit, or any earlier round).
_UNWAITED_SECONDS = 0.5

# The inline window: at most one inline sync per this many fsync times (but for ``answered``
# ones, and another of the same connection's coordinator records); the requests that come
# faster share the next round.
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
