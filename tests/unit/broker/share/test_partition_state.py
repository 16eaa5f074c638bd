"""The share-partition state machine (broker/share/partition_state.py), time passed in."""

from __future__ import annotations

import tracemalloc

import pytest

from broker.share.partition_state import (
    TRANSITIONS,
    AckType,
    Acquired,
    Event,
    IllegalTransition,
    LogBatch,
    RecordState,
    SharePartitionState,
    StateBatch,
    transition,
)
from protocol.errors import ErrorCode

A, ACC, REL, REJ = AckType.ACCEPT, AckType.ACCEPT, AckType.RELEASE, AckType.REJECT


def state(start: int = 0, limit: int = 3, lock: int = 1000, window: int = 100) -> SharePartitionState:
    return SharePartitionState(start, delivery_limit=limit, lock_ms=lock, max_in_flight=window)


def batches(*ranges: tuple[int, int], deliverable: bool = True) -> list[LogBatch]:
    return [LogBatch(a, b, deliverable) for a, b in ranges]


def test_transition_table_refuses_the_rest() -> None:
    assert transition(RecordState.AVAILABLE, Event.ACQUIRE) == RecordState.ACQUIRED
    for st in RecordState:
        for ev in Event:
            if (st, ev) not in TRANSITIONS:
                with pytest.raises(IllegalTransition):
                    transition(st, ev)
    with pytest.raises(IllegalTransition):
        transition(RecordState.ACKNOWLEDGED, Event.RELEASE)


def test_acquire_accept_moves_the_start_offset() -> None:
    s = state()
    got = s.acquire("m1", batches((0, 4), (5, 9)), 100, now_ms=0)
    assert got == [Acquired(0, 9, 1)]
    assert s.next_fetch_offset() == 10 and s.in_flight() == 10
    assert s.acknowledge("m1", 0, 4, [ACC], now_ms=1) == ErrorCode.NONE
    assert s.start == 5
    assert s.acknowledge("m1", 5, 9, [ACC], now_ms=1) == ErrorCode.NONE
    assert s.start == 10 and s.runs == []


def test_only_the_holder_may_acknowledge_and_only_acquired_records() -> None:
    s = state()
    s.acquire("m1", batches((0, 9)), 100, now_ms=0)
    assert s.acknowledge("m2", 0, 0, [ACC], now_ms=1) == ErrorCode.INVALID_RECORD_STATE
    assert s.acknowledge("m1", 5, 12, [ACC], now_ms=1) == ErrorCode.INVALID_RECORD_STATE
    assert s.acknowledge("m1", 3, 3, [ACC], now_ms=1) == ErrorCode.NONE
    assert s.acknowledge("m1", 3, 3, [ACC], now_ms=1) == ErrorCode.INVALID_RECORD_STATE
    assert s.acknowledge("m1", 4, 5, [1, 2, 3], now_ms=1) == ErrorCode.INVALID_REQUEST
    assert s.acknowledge("m1", 4, 4, [9], now_ms=1) == ErrorCode.INVALID_REQUEST
    assert s.start == 0  # offset 0..2 still acquired


def test_release_redelivers_with_a_higher_delivery_count() -> None:
    s = state()
    s.acquire("m1", batches((0, 9)), 100, now_ms=0)
    assert s.acknowledge("m1", 0, 9, [ACC] * 3 + [REL] * 2 + [ACC] * 5, now_ms=1) == ErrorCode.NONE
    assert s.start == 3 and s.next_fetch_offset() == 3
    got = s.acquire("m2", batches((0, 9)), 100, now_ms=2)
    assert got == [Acquired(3, 4, 2)]
    assert s.redelivered == 2


def test_lock_expiry_redelivers_and_the_limit_archives() -> None:
    s = state(limit=2, lock=100)
    s.acquire("m1", batches((0, 1)), 100, now_ms=0)
    assert not s.expire(99)
    assert s.expire(100)
    assert s.state_of(0) == RecordState.AVAILABLE
    assert s.acquire("m2", batches((0, 1)), 100, now_ms=150) == [Acquired(0, 1, 2)]
    # the second delivery's lock runs out too: the limit (2) archives them
    assert s.acknowledge("m2", 0, 1, [ACC], now_ms=250) == ErrorCode.INVALID_RECORD_STATE
    assert s.start == 2 and s.runs == [] and s.archived_by_limit == 2


def test_reject_archives_and_gap_archives() -> None:
    s = state()
    s.acquire("m", batches((0, 3)), 100, now_ms=0)
    assert s.acknowledge("m", 0, 3, [REJ, AckType.GAP, ACC, REJ], now_ms=1) == ErrorCode.NONE
    assert s.start == 4
    assert s.acquire("m", batches((0, 3)), 100, now_ms=2) == []


def test_release_member_and_renew() -> None:
    s = state(lock=100)
    s.acquire("a", batches((0, 4)), 100, now_ms=0)
    s.acquire("b", batches((5, 9)), 100, now_ms=0)
    assert s.acknowledge("b", 5, 9, [AckType.RENEW], now_ms=90) == ErrorCode.NONE
    assert s.expire(100)  # a's lock ran out, b's was renewed to 190
    assert s.state_of(0) == RecordState.AVAILABLE and s.state_of(5) == RecordState.ACQUIRED
    assert s.release_member("b")
    assert s.state_of(5) == RecordState.AVAILABLE
    assert s.acquire("c", batches((0, 9)), 100, now_ms=101) == [Acquired(0, 9, 2)]


def test_max_records_and_the_in_flight_window() -> None:
    s = state(window=10)
    got = s.acquire("m", batches((0, 4), (5, 9), (10, 14)), 3, now_ms=0)
    assert got == [Acquired(0, 4, 1)]  # whole batches: may overshoot max_records
    got = s.acquire("m", batches((5, 9), (10, 14)), 100, now_ms=0)
    assert got == [Acquired(5, 9, 1)]  # the window (10 in flight) is full
    assert s.next_fetch_offset() is None
    s.acknowledge("m", 0, 4, [ACC], now_ms=1)
    assert s.next_fetch_offset() == 10


def test_undeliverable_batches_and_gaps_are_archived() -> None:
    s = state()
    got = s.acquire("m", [LogBatch(0, 2, True), LogBatch(3, 3, False), LogBatch(6, 8, True)],
                    100, now_ms=0)
    assert got == [Acquired(0, 2, 1), Acquired(6, 8, 1)]
    assert s.state_of(3) == RecordState.ARCHIVED and s.state_of(4) == RecordState.ARCHIVED
    s.acknowledge("m", 0, 2, [ACC], now_ms=1)
    assert s.start == 6


def test_snapshot_and_restore_keep_finished_and_reset_acquired() -> None:
    s = state()
    s.acquire("m", batches((0, 9)), 100, now_ms=0)
    s.acknowledge("m", 0, 9, [ACC, REL, ACC, REJ, ACC, ACC, ACC, ACC, ACC, ACC], now_ms=1)
    s.acquire("m", batches((0, 9), (10, 11)), 100, now_ms=2)  # 1 again (count 2), 10-11
    snap = s.snapshot()
    assert snap[0] == StateBatch(1, 1, RecordState.AVAILABLE, 2)
    r = state()
    r.restore(s.start, snap)
    assert r.start == 1 and r.end == 12
    assert r.acquire("x", batches((0, 11)), 100, now_ms=3) == [Acquired(1, 1, 3),
                                                                 Acquired(10, 11, 2)]
    assert r.state_of(2) == RecordState.ACKNOWLEDGED and r.state_of(3) == RecordState.ARCHIVED


def test_runs_stay_few_when_batches_are_acknowledged_whole() -> None:
    s = state(window=1_000_000)
    for base in range(0, 1_000_000, 500):
        s.acquire("m", batches((base, base + 499)), 1_000_000, now_ms=0)
    assert s.in_flight() == 1_000_000 and len(s.runs) == 1  # one member, one lock: merged


def test_a_million_in_flight_records_fit_in_100_mb() -> None:
    """A million records in flight, acquired as 2,000 batches of 500 at different times by
    three members (so no two runs merge), then every fortieth batch acknowledged record by record
    alternately accepted and released (500 runs each): the state stays far below 100 MB."""
    tracemalloc.start()
    try:
        s = state(window=1_000_000, lock=10**9)
        for i, base in enumerate(range(0, 1_000_000, 500)):
            s.acquire(f"m{i % 3}", batches((base, base + 499)), 1_000_000, now_ms=i)
        for i in range(40, 2000, 40):
            base = i * 500
            assert s.acknowledge(f"m{i % 3}", base, base + 499, [ACC, REL] * 250,
                                 now_ms=5000) == ErrorCode.NONE
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert s.in_flight() == 1_000_000 and len(s.runs) > 20_000
    assert peak < 100 * 1024 * 1024, peak
