"""Consumer-group states and the one table of allowed transitions.

Rules / theory of operation (Kafka's classic group protocol, ``GroupMetadata.scala``):

- ``Empty``: no members. A group that only stores offsets (manual assignment) lives here, and so
  does a group whose members all left. The first JoinGroup starts a rebalance.
- ``PreparingRebalance``: the coordinator collects JoinGroup requests. It completes when every
  known member has rejoined, or when the rebalance timeout passes (members that did not rejoin are
  removed); the first rebalance of an empty group instead waits ``group.initial.rebalance.delay.ms``
  (extended while new members keep arriving) so that a fleet starting together lands in one
  generation. Completing bumps the generation and answers every waiting JoinGroup.
- ``CompletingRebalance``: the generation is chosen; the coordinator waits for the leader's
  SyncGroup with the assignment. Followers' SyncGroups wait until then.
- ``Stable``: assignments handed out; members heartbeat. A join, a leave, a metadata change or an
  expired session moves the group back to ``PreparingRebalance``.
- ``Dead``: the group is being removed (no members, no offsets); nothing leaves this state.

Each state lists the states it may be entered from (as Kafka's ``validPreviousStates`` does);
``check_transition`` is the only place that consults the table.
"""

from __future__ import annotations

import enum


class GroupState(enum.Enum):
    """The value is the name Kafka's DescribeGroups and ListGroups show."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState

# target state -> the states it may be entered from
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.EMPTY, _S.STABLE, _S.COMPLETING_REBALANCE}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset(
        {_S.EMPTY, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.STABLE, _S.DEAD}
    ),
}


class IllegalGroupTransition(Exception):
    """A coordinator bug: a transition the table does not allow."""

    def __init__(self, group_id: str, current: GroupState, target: GroupState) -> None:
        super().__init__(
            f"group {group_id!r}: illegal transition {current.value} -> {target.value}"
        )
        self.group_id = group_id
        self.current = current
        self.target = target


def can_transition(current: GroupState, target: GroupState) -> bool:
    return current in VALID_PREVIOUS_STATES[target]


def check_transition(group_id: str, current: GroupState, target: GroupState) -> GroupState:
    """Return ``target`` if ``current -> target`` is allowed; raise IllegalGroupTransition if not."""
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalGroupTransition(group_id, current, target)
    return target
