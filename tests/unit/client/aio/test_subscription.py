"""The consumer's subscription state (no I/O): assignment changes keep or void partition state,
seeks bump epochs, assignment and subscription exclude each other."""

from __future__ import annotations

import pytest

from client.aio.subscription import EARLIEST, SubscriptionState
from client.errors import IllegalStateError
from client.structs import TopicPartition

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


def test_reassignment_keeps_kept_partitions_and_voids_dropped_ones():
    subs = SubscriptionState()
    subs.set_assignment([A, B])
    a, b = subs.assignment[A], subs.assignment[B]
    a.seek(5)
    epoch_a, epoch_b = a.epoch, b.epoch
    subs.set_assignment([A])
    assert subs.assignment[A] is a and a.position == 5 and a.epoch == epoch_a
    assert b.epoch == epoch_b + 1 and not subs.is_current(b, epoch_b)
    assert subs.is_current(a, epoch_a)


def test_seek_and_seek_to():
    subs = SubscriptionState()
    subs.set_assignment([A, B])
    subs.out_of_range[A] = 9
    state = subs.seek(A, 7)
    assert (state.position, state.fetch_offset, state.reset_to) == (7, 7, None)
    assert A not in subs.out_of_range
    before = state.epoch
    (reset,) = subs.seek_to([A], EARLIEST)
    assert reset.position is None and reset.reset_to == EARLIEST and reset.epoch == before + 1
    assert subs.positions() == {}
    with pytest.raises(IllegalStateError, match="No current assignment for partition t-5"):
        subs.seek(("t", 5), 0)


def test_assignment_and_subscription_exclude_each_other():
    subs = SubscriptionState()
    subs.subscribe(["b", "a", "a"], None, None)
    assert subs.topics == ["a", "b"] and subs.subscribed
    with pytest.raises(IllegalStateError, match="mutually exclusive"):
        subs.check_assign()
    manual = SubscriptionState()
    manual.set_assignment([A])
    with pytest.raises(IllegalStateError, match="mutually exclusive"):
        manual.subscribe(["t"], None, None)
