"""Group commit (``broker/storage/flusher.py``): an acks=all write that is small and alone is
synced by its own request; anything else joins the flusher's next round, where writes share
fdatasyncs. A transactional batch is answered once appended (durable by its transaction's
PrepareCommit), and readers never see it before it is synced."""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path
from typing import Any

import trio
import trio.testing

from broker.log.manager import LogManager
from broker.log.topic_config import LogConfig
from broker.storage import DataArrived, FlushScheduler, Storage
from protocol.records import encode_batch

NOW = 1_700_000_000_000


class Seconds:
    """A monotonic clock that moves a millisecond per reading (an fsync takes one), and as far
    as the test moves it."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def storage(tmp_path: Path, seconds: Seconds) -> Storage:
    logs = LogManager(tmp_path / "data", LogConfig(), NOW)
    logs.create_topic("t", 3, None, NOW)
    arrived = DataArrived()
    return Storage(logs, FlushScheduler(arrived, seconds=seconds), arrived, durable=True)


def record(size: int = 100) -> bytearray:
    return bytearray(encode_batch([(None, b"x" * size, (), NOW)]))


async def test_a_lone_acks_all_write_is_synced_by_its_request(tmp_path: Path) -> None:
    seconds = Seconds()
    s = storage(tmp_path, seconds)
    p0, p1, p2 = (s.partition("t", i) for i in range(3))

    result, commit = s.append(p0, record(), NOW)
    assert commit is None and p0.high_watermark == p0.log_end_offset == 1  # durable already

    # Another write right after (within the window of a few fsync times): many producers, or
    # requests pipelined behind it, so it joins the next round instead of blocking the loop for
    # an fsync of its own.
    _, commit = s.append(p1, record(), NOW)
    assert commit is not None and not commit.done and p1.high_watermark == 0
    s.settle()
    assert commit.done and commit.ok and p1.high_watermark == 1
    # A coordinator's commit right after an inline one is inline too when the same connection
    # (task) made both: one producer, one request at a time. Another connection's goes to a
    # round (many producers' EndTxn: inline fsyncs would keep the loop from their requests),
    # unless its answer was already sent.
    seconds.now += 1.0  # quiet again
    p1.append_untrusted(record(), NOW)
    assert s.commit([p1]).done and p1.high_watermark == 2  # alone: inline
    p1.append_untrusted(record(), NOW)
    assert s.commit([p1]).done and p1.high_watermark == 3  # the same task again: inline
    commits = []

    async def another_connection(**kwargs) -> None:
        p1.append_untrusted(record(), NOW)
        commits.append(s.commit([p1], **kwargs))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(another_connection)
    assert not commits[0].done and p1.high_watermark == 3
    s.settle()
    assert commits[0].done and commits[0].ok and p1.high_watermark == 4
    p1.append_untrusted(record(), NOW)
    assert s.commit([p1]).done and p1.high_watermark == 5  # inline: it opens the window again
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(another_connection, answered=True))
    assert commits[1].done and commits[1].ok and p1.high_watermark == 6

    seconds.now += 1.0  # quiet again
    _, commit = s.append(p2, record(), NOW, acks=1)  # nobody waits, the round syncs
    assert commit is None and p2.high_watermark == 0
    _, commit = s.append(p0, record(), NOW)  # a round is pending
    assert commit is not None and p0.high_watermark == 1
    s.settle()
    assert p0.high_watermark == 2 and p2.high_watermark == 1

    seconds.now += 1.0
    _, commit = s.append(p1, record(16 * 1024), NOW)  # not small
    assert commit is not None
    s.settle()
    _, commit = s.append(p2, record(), NOW)  # alone again
    assert commit is None and p2.high_watermark == p2.log_end_offset
    s.close()


async def test_a_transactional_batch_is_answered_appended_and_hidden_until_synced(
    tmp_path: Path, nursery
) -> None:
    """acks=all for a transactional batch: no commit to wait for, no round started, and the
    high watermark (what every reader, read_uncommitted included, may see) stays below it until
    a commit of its partition (the transaction's PrepareCommit round) syncs it."""
    s = storage(tmp_path, Seconds())
    nursery.start_soon(s.flusher.run)
    p0 = s.partition("t", 0)
    batch = bytearray(encode_batch([(None, b"x", (), NOW)], producer_id=7, producer_epoch=0,
                                   base_sequence=0, transactional=True))
    result, commit = s.append(p0, batch, NOW, acks=-1, transactional=True)
    assert commit is None and result.base_offset == 0
    await trio.testing.wait_all_tasks_blocked()
    assert p0.log_end_offset == 1 and p0.high_watermark == 0  # no round started for it
    assert p0.read(0, 1 << 20, p0.high_watermark) == b""  # invisible to every reader
    done = s.commit([p0])
    assert done.done and done.ok and p0.high_watermark == 1
    # The next append gets the next offset: nothing is reused.
    assert s.append(p0, record(), NOW)[0].base_offset == 1
    s.close()


async def test_inline_syncs_need_no_spare_descriptors(tmp_path: Path, monkeypatch) -> None:
    """Inline syncs (a lone write, ``flush_now``, ``Partition.flush``) fdatasync the files' own
    descriptors: out of descriptors (EMFILE), they still make writes durable. (A round in the
    worker thread duplicates them, as its files may be closed meanwhile.)"""
    seconds = Seconds()
    s = storage(tmp_path, seconds)
    p0, p1 = s.partition("t", 0), s.partition("t", 1)

    def no_descriptors(fd: int) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr("broker.log.partition.os.dup", no_descriptors)
    _, commit = s.append(p0, record(), NOW)
    assert commit is None and p0.high_watermark == 1
    p1.append_untrusted(record(), NOW)
    assert p1.flush() == 1
    s.append(p0, record(), NOW, acks=1)
    s.settle()
    assert p0.high_watermark == 2


async def test_a_tied_partition_is_synced_by_whatever_syncs_the_other_once(tmp_path: Path) -> None:
    """``sync_together(p, q)``: the next fsync of ``p`` syncs ``q`` too, whether an inline
    commit, a round or ``settle`` takes ``p``; after that fsync the tie is gone."""
    seconds = Seconds()
    s = storage(tmp_path, seconds)
    p0, p1, p2 = (s.partition("t", i) for i in range(3))
    for way in ("inline", "round", "settle"):
        seconds.now += 1.0  # quiet: a lone commit is inline
        p1.append_untrusted(record(), NOW)  # q: unsynced, nobody commits it
        s.append(p0, record(), NOW, transactional=True)  # p: marked, not synced
        s.sync_together(p0, p1)
        assert p0.high_watermark < p0.log_end_offset and p1.high_watermark < p1.log_end_offset
        if way == "inline":
            p0.append_untrusted(record(), NOW)
            assert s.commit([p0]).done  # synced by the request itself
        elif way == "round":
            p2.append_untrusted(record(), NOW)
            s.flusher.mark(p2)  # a round is pending: the commit joins it
            commit = s.commit([p0])
            assert not commit.done
            s.settle()
            assert commit.done and commit.ok
        else:
            s.settle()
        assert p0.high_watermark == p0.log_end_offset
        assert p1.high_watermark == p1.log_end_offset, way
    # Untied once synced: a later fsync of p0 leaves p1 alone.
    p1.append_untrusted(record(), NOW)
    p0.append_untrusted(record(), NOW)
    seconds.now += 1.0
    assert s.commit([p0]).done
    assert p1.high_watermark < p1.log_end_offset
    s.close()


async def test_a_commit_waits_for_a_round_while_other_requests_are_ready(tmp_path: Path) -> None:
    """Many producers: while other tasks (the requests of other connections) are ready to run,
    a small commit joins the next round, which they share, instead of an inline fdatasync that
    would keep them waiting; alone again, it is synced inline."""
    s = storage(tmp_path, Seconds())
    p0 = s.partition("t", 0)
    ready = trio.Event()

    async def another_request() -> None:
        await ready.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(another_request)
        await trio.testing.wait_all_tasks_blocked()
        p0.append_untrusted(record(), NOW)
        ready.set()  # the other request is ready to run now, not yet run
        commit = s.commit([p0])
        assert not commit.done and p0.high_watermark == 0
        s.settle()
        assert commit.done and commit.ok and p0.high_watermark == 1
    p0.append_untrusted(record(), NOW)
    commit = s.commit([p0])
    assert commit.done and commit.ok and p0.high_watermark == 2

    # Appends whose answer is already sent (EndTxn's markers) are synced inline all the same:
    # the requests handled next must find them durable.
    ready = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(another_request)
        await trio.testing.wait_all_tasks_blocked()
        p0.append_untrusted(record(), NOW)
        ready.set()
        commit = s.commit([p0], answered=True)
        assert commit.done and commit.ok and p0.high_watermark == 3
    s.close()


async def test_the_round_a_round_asked_for_starts_before_the_loop_runs_again(
    tmp_path: Path, nursery, monkeypatch
) -> None:
    """Commits made by a round's callbacks (a Prepare round's markers), or while it synced, are
    taken by the next round at once, not after the batch of requests the round released (two
    passes of the event loop; at 50 producers a few milliseconds each, twice per EndTxn). A
    round synced inline never yields, so the round after a chained one waits for the loop."""
    from broker.storage import flusher

    monkeypatch.setattr(flusher, "_others_ready", lambda: True)  # many producers: rounds
    s = storage(tmp_path, Seconds())
    nursery.start_soon(s.flusher.run)
    p0, p1, p2 = (s.partition("t", i) for i in range(3))
    passes = 0  # how often the other requests ran
    seen: list[tuple[str, int]] = []

    async def other_requests() -> None:
        nonlocal passes
        while True:
            passes += 1
            await trio.lowlevel.checkpoint()

    def prepared(ok: bool) -> None:  # the Prepare round decided: the markers now
        seen.append(("prepared", passes))
        p1.append_untrusted(record(), NOW)
        s.commit([p1], marked)

    def marked(ok: bool) -> None:  # decided by the chained round: it asks for a third
        seen.append(("marked", passes))
        p2.append_untrusted(record(), NOW)
        s.commit([p2], lambda ok: seen.append(("third", passes)))

    nursery.start_soon(other_requests)
    p0.append_untrusted(record(), NOW)
    commit = s.commit([p0], prepared)
    assert not commit.done  # the other requests are ready: a round
    while len(seen) < 3:
        await trio.lowlevel.checkpoint()
    (_, prepared_at), (_, marked_at), (_, third_at) = seen
    assert marked_at == prepared_at  # the markers' round followed at once
    assert third_at > marked_at  # the loop ran before the next one
    assert p0.high_watermark == p1.high_watermark == p2.high_watermark == 1
    nursery.cancel_scope.cancel()


async def test_what_a_roll_leaves_is_synced_by_a_round_off_the_loop(
    tmp_path: Path, monkeypatch
) -> None:
    """A segment roll does no fsync on the event loop, in either flush mode: the rolled segment,
    its index, the snapshot at the roll offset and the directory go to a round in the worker
    thread: the commit's, or with nobody committing (``--flush never``, a roll of an idle
    segment) a background round within half a second. With ``--flush always`` the high
    watermark waits for that round."""
    loop_thread = threading.get_ident()
    on_loop: list[str] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def watched(fd: int, real=real, name=name) -> None:
            if threading.get_ident() == loop_thread:
                on_loop.append(name)
            real(fd)

        monkeypatch.setattr(os, name, watched)
    for flush in ("always", "never"):
        logs = LogManager(tmp_path / flush, LogConfig(flush=flush), NOW)
        logs.create_topic("small", 1, {"segment.bytes": "2000"}, NOW)
        arrived = DataArrived()
        s = Storage(logs, FlushScheduler(arrived, seconds=Seconds()), arrived,
                    durable=flush == "always")
        p = s.partition("small", 0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(s.flusher.run)
            await trio.testing.wait_all_tasks_blocked()
            while len(p.segments) == 1:
                before = len(on_loop)  # a lone small write before is synced inline
                _, commit = s.append(p, record(300), NOW)
                if commit is not None:
                    assert await commit.wait()
            roll = p.segments[-1].base_offset
            assert p.high_watermark == p.log_end_offset == roll + 1  # after the round
            if flush == "always":
                assert (p.dir / f"{roll:020d}.snapshot").exists()
            # Nobody commits: an idle compacted partition rolled by the cleaner's service.
            assert p.roll_if_idle(NOW + 10**9)
            for offset in (roll, roll + 1):
                with trio.fail_after(5):  # the background round
                    while not (p.dir / f"{offset:020d}.snapshot").exists() or s.flusher.busy:
                        await trio.sleep(0.01)
            assert on_loop[before:] == [] and not p.needs_directory_sync
            assert s.flusher.rounds > 0
            nursery.cancel_scope.cancel()
        s.close()


async def test_a_commit_tied_to_a_rolled_partition_goes_to_a_round(tmp_path: Path) -> None:
    """A lone small commit is synced inline, with the partitions tied to it; if one of those
    rolled a segment, what the roll left would be synced on the event loop: the commit goes to
    a round (in the worker thread) instead."""
    seconds = Seconds()
    s = storage(tmp_path, seconds)
    s.logs.create_topic("small", 1, {"segment.bytes": "1000"}, NOW)
    p, q = s.partition("t", 0), s.partition("small", 0)
    while len(q.segments) == 1:
        q.append_untrusted(record(300), NOW)  # e.g. __transaction_state records
    s.sync_together(p, q)
    p.append_untrusted(record(), NOW)
    commit = s.commit([p])
    assert not commit.done and q.needs_directory_sync
    s.settle()
    assert commit.done and commit.ok and not q.needs_directory_sync
    assert q.high_watermark == q.log_end_offset
    seconds.now += 1.0
    p.append_untrusted(record(), NOW)
    assert s.commit([p]).done  # nothing rolled: inline again
    s.close()


async def test_a_round_in_the_worker_thread_holds_back_only_its_own_partitions(
    tmp_path: Path, nursery, monkeypatch
) -> None:
    """While a round syncs large batches of one partition in a worker thread, a small commit
    of another partition is decided at once, by its own fdatasync in another worker thread
    (never on the loop meanwhile); a commit of the partition being synced, or of one tied to
    it, waits for the round after it."""
    from broker.log.partition import FlushTicket

    s = storage(tmp_path, Seconds())
    nursery.start_soon(s.flusher.run)
    p0, p1, p2 = (s.partition("t", i) for i in range(3))
    gate = threading.Event()
    real_sync = FlushTicket.sync
    big_fds: set[int] = set()

    def sync(ticket: FlushTicket) -> None:
        if set(ticket.fds) & big_fds:
            gate.wait(10)  # the large round's fdatasync takes its time
        real_sync(ticket)

    monkeypatch.setattr(FlushTicket, "sync", sync)
    real_begin = type(p0).begin_flush

    def begin(partition, *args, **kwargs):
        ticket = real_begin(partition, *args, **kwargs)
        if partition is p0 and ticket is not None:
            big_fds.update(ticket.fds)
        return ticket

    monkeypatch.setattr(type(p0), "begin_flush", begin)
    await trio.testing.wait_all_tasks_blocked()
    p0.append_untrusted(record(200_000), NOW)  # too big to sync on the loop: a worker thread
    big = s.commit([p0])
    with trio.fail_after(5):
        while not s.flusher.busy or s.flusher._waiting:
            await trio.sleep(0.001)
    assert not big.done
    try:
        for round_ in range(3):  # alone, then pipelined: through the flusher's task
            p1.append_untrusted(record(), NOW)
            small = s.flusher.commit([p1], pipelined=round_ > 0)
            with trio.fail_after(5):
                assert await small.wait()
            assert p1.high_watermark == p1.log_end_offset and not big.done
        p0.append_untrusted(record(), NOW)
        s.sync_together(p2, p0)
        p2.append_untrusted(record(), NOW)
        behind = [s.commit([p0]), s.commit([p2])]
        await trio.sleep(0.05)
        assert not any(c.done for c in behind) and p2.high_watermark == 0
    finally:
        gate.set()
    with trio.fail_after(10):
        assert await big.wait()
        for commit in behind:
            assert await commit.wait()
    assert p0.high_watermark == p0.log_end_offset and p2.high_watermark == p2.log_end_offset
    nursery.cancel_scope.cancel()


async def test_others_ready_reads_the_run_queue_the_statistics_count(nursery) -> None:
    """``_others_ready`` reads trio's run queue directly (the statistics also count every I/O
    registration: 4.3 us with 100 connections); the same answer as the public call, and the
    direct read is in use (a trio that moved its internals fails here, not silently slower)."""
    from broker.storage import flusher

    runner = getattr(flusher._RUN_CONTEXT, "runner", None)
    assert runner is not None and hasattr(runner, "runq")
    ready = trio.Event()

    async def another_request() -> None:
        await ready.wait()

    nursery.start_soon(another_request)
    await trio.testing.wait_all_tasks_blocked()
    assert trio.lowlevel.current_statistics().tasks_runnable == 0
    assert flusher._others_ready() is False
    ready.set()
    assert trio.lowlevel.current_statistics().tasks_runnable > 0
    assert flusher._others_ready() is True
    assert await trio.to_thread.run_sync(flusher._others_ready) is False  # no loop there


def test_data_arrived_sets_every_event_it_handed_out() -> None:
    # notify replaces the event only once someone took it (most appends: no fetch waits)
    arrived = DataArrived()
    first = arrived.event()
    arrived.notify()
    assert first.is_set()
    second = arrived.event()
    assert second is not first and not second.is_set()
    assert arrived.event() is second  # the same until the next notify
    arrived.notify()
    arrived.notify()  # nobody took the new one
    assert second.is_set()
    third = arrived.event()
    assert third is not second and not third.is_set()
    arrived.notify()
    assert third.is_set()


class GatedSyncs:
    """FlushTicket.sync wrapped: the syncs of the partitions in ``held`` wait for ``gate``;
    ``events`` lists ("start"|"end", partition index) in the order the worker threads saw."""

    def __init__(self, monkeypatch, partitions, held) -> None:
        from broker.log.partition import FlushTicket

        self.gate = threading.Event()
        self.events: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self._owner: dict[int, int] = {}  # fd -> partition index
        real_sync, real_begin = FlushTicket.sync, type(partitions[0]).begin_flush
        held_ids = {id(p) for p in held}
        gated: set[int] = set()

        def begin(partition, *args, **kwargs):
            ticket = real_begin(partition, *args, **kwargs)
            if ticket is not None:
                for fd in ticket.fds:
                    self._owner[fd] = partition.index
                    if id(partition) in held_ids:
                        gated.add(fd)
            return ticket

        def sync(ticket) -> None:
            index = self._owner.get(ticket.fds[0], -1) if ticket.fds else -1
            with self._lock:
                self.events.append(("start", index))
            if set(ticket.fds) & gated:
                self.gate.wait(10)
            real_sync(ticket)
            with self._lock:
                self.events.append(("end", index))

        monkeypatch.setattr(FlushTicket, "sync", sync)
        monkeypatch.setattr(type(partitions[0]), "begin_flush", begin)


async def test_a_round_decides_small_files_before_a_large_one_ends(
    tmp_path: Path, nursery, monkeypatch
) -> None:
    """One round takes a large batch (p0) and small ones (p1, and p2 tied to p1 as a
    transaction's batch to its ``__transaction_state`` partition): the small files and the tie
    target are synced first and their commits decided while the large file's fdatasync is still
    under way, which starts only after them (the kernel's journal commit of the small ones then
    does not wait for its writeback)."""
    from broker.storage import flusher

    monkeypatch.setattr(flusher, "_others_ready", lambda: True)  # many producers: rounds
    s = storage(tmp_path, Seconds())
    p0, p1, p2 = (s.partition("t", i) for i in range(3))
    syncs = GatedSyncs(monkeypatch, [p0, p1, p2], held=[p0])
    nursery.start_soon(s.flusher.run)
    await trio.testing.wait_all_tasks_blocked()
    p0.append_untrusted(record(200_000), NOW)
    p1.append_untrusted(record(), NOW)
    p2.append_untrusted(record(), NOW)
    s.sync_together(p2, p1)
    big, small, tied = s.commit([p0]), s.commit([p1]), s.commit([p2])
    assert not any(c.done for c in (big, small, tied))  # all three in the next round
    try:
        with trio.fail_after(5):
            assert await small.wait() and await tied.wait()
        assert not big.done and p0.high_watermark == 0
        assert s.flusher.busy  # the large file's lane
    finally:
        syncs.gate.set()
    with trio.fail_after(10):
        assert await big.wait()
    assert p0.high_watermark == p0.log_end_offset
    first_starts = [i for kind, i in syncs.events if kind == "start"]
    large_start = syncs.events.index(("start", 0))
    assert set(first_starts) == {0, 1, 2}
    assert {("end", 1), ("end", 2)} <= set(syncs.events[:large_start])
    await trio.testing.wait_all_tasks_blocked()
    assert s.flusher.rounds == 1  # one round, however many lanes
    nursery.cancel_scope.cancel()


async def test_each_large_file_of_a_round_is_decided_on_its_own(
    tmp_path: Path, nursery, monkeypatch
) -> None:
    """Two large batches in one round: the commit of the one whose fdatasync returned is
    decided while the other's is still under way, and that partition's next commit starts a
    round of its own at once."""
    from broker.storage import flusher

    monkeypatch.setattr(flusher, "_others_ready", lambda: True)
    s = storage(tmp_path, Seconds())
    p0, p1, p2 = (s.partition("t", i) for i in range(3))
    syncs = GatedSyncs(monkeypatch, [p0, p1, p2], held=[p0])
    nursery.start_soon(s.flusher.run)
    await trio.testing.wait_all_tasks_blocked()
    p0.append_untrusted(record(200_000), NOW)
    p1.append_untrusted(record(200_000), NOW)
    held, free = s.commit([p0]), s.commit([p1])
    try:
        with trio.fail_after(5):
            assert await free.wait()
        p1.append_untrusted(record(200_000), NOW)
        with trio.fail_after(5):
            assert await s.commit([p1]).wait()  # the next round: p0 is still held
        assert not held.done and p0.high_watermark == 0
    finally:
        syncs.gate.set()
    with trio.fail_after(10):
        assert await held.wait()
    nursery.cancel_scope.cancel()


def test_lane_rules() -> None:
    from broker.storage import flusher

    class P:
        def __init__(self, unsynced: int, directory: bool = False) -> None:
            self.unsynced_bytes, self.needs_directory_sync = unsynced, directory

    small: Any = P(100)
    large: Any = P(flusher._FIRST_LANE_BYTES + 1)
    rolled: Any = P(100, True)
    assert flusher._lane(small, set()) == flusher._FIRST
    assert flusher._lane(large, set()) == flusher._LATE
    assert flusher._lane(rolled, set()) == flusher._LATE
    assert flusher._lane(large, {id(large)}) == flusher._FIRST  # a tie target goes first
    assert flusher._lane(rolled, {id(rolled)}) == flusher._FIRST
    round_ = flusher._Round([], [], [], 0.0)
    round_.step(flusher._FIRST)
    try:
        round_.step(flusher._DONE)
    except flusher.IllegalRoundStep:
        pass
    else:
        raise AssertionError("first -> done skips the late lane")
