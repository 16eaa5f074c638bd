"""The group state table: every allowed and every forbidden transition."""

from __future__ import annotations

import itertools

import pytest

from broker.group.state import (
    VALID_PREVIOUS_STATES,
    GroupState,
    IllegalGroupTransition,
    can_transition,
    check_transition,
)

E = GroupState.EMPTY
P = GroupState.PREPARING_REBALANCE
C = GroupState.COMPLETING_REBALANCE
S = GroupState.STABLE
D = GroupState.DEAD

# Written out by hand from Kafka's GroupMetadata (validPreviousStates), not derived from the table.
ALLOWED = {
    (E, P),  # first member joins
    (S, P),  # join, leave, expiry or metadata change of a stable group
    (C, P),  # the same while the leader's assignment is awaited
    (P, C),  # every member rejoined (or the rebalance timed out)
    (P, E),  # the rebalance ended with no members left
    (C, S),  # the leader's SyncGroup arrived
    (E, D),
    (P, D),
    (C, D),
    (S, D),
    (D, D),
}
ALL_PAIRS = list(itertools.product(GroupState, repeat=2))


def test_states_have_kafka_names() -> None:
    assert [s.value for s in GroupState] == [
        "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead",
    ]


def test_every_state_has_a_row() -> None:
    assert set(VALID_PREVIOUS_STATES) == set(GroupState)


@pytest.mark.parametrize(("current", "target"), sorted(ALLOWED, key=lambda p: (p[0].value, p[1].value)))
def test_allowed_transition(current: GroupState, target: GroupState) -> None:
    assert can_transition(current, target)
    assert check_transition("g", current, target) is target


FORBIDDEN = [pair for pair in ALL_PAIRS if pair not in ALLOWED]


@pytest.mark.parametrize(("current", "target"), FORBIDDEN)
def test_forbidden_transition(current: GroupState, target: GroupState) -> None:
    assert not can_transition(current, target)
    with pytest.raises(IllegalGroupTransition) as info:
        check_transition("orders", current, target)
    assert info.value.current is current and info.value.target is target
    assert "orders" in str(info.value)
    assert f"{current.value} -> {target.value}" in str(info.value)


def test_forbidden_count() -> None:
    # 25 pairs, 11 allowed: nothing leaves Dead, Stable only follows CompletingRebalance, ...
    assert len(FORBIDDEN) == 14
    assert all(not can_transition(D, t) for t in GroupState if t is not D)
