"""The reconciliation table of the consumer group protocol (KIP-848): how a member moves from its
current assignment to its target one heartbeat at a time (Kafka's ``CurrentAssignmentBuilder``),
and the set arithmetic on assignments it uses. Pure; ``consumer_group.py`` drives it (its
docstring has the rules).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

from broker.group.assignors import Assignment


class MemberState(enum.IntEnum):
    """Kafka's MemberState, with its record values."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


# The reconciliation table: (the member's state, what this heartbeat finds) -> the next state.
# "behind": the member's epoch is below the target assignment's; "revoke": its current
# assignment holds partitions the target does not; "revoked": the member reported (owned
# partitions) that it gave up those pending revocation; "unreleased": target partitions it lacks
# are still owned by another member.
class Finding(enum.Enum):
    UP_TO_DATE = "up to date"  # at the target's epoch, holding every target partition
    REVOKE = "revoke"  # behind, and must give partitions up first
    STILL_REVOKING = "still revoking"  # partitions pending revocation still reported owned
    UNRELEASED = "unreleased"  # at the target's epoch, some target partitions owned elsewhere


_M = MemberState
_F = Finding
RECONCILE: dict[tuple[MemberState, Finding], MemberState] = {
    (_M.STABLE, _F.UP_TO_DATE): _M.STABLE,
    (_M.STABLE, _F.REVOKE): _M.UNREVOKED_PARTITIONS,
    (_M.STABLE, _F.UNRELEASED): _M.UNRELEASED_PARTITIONS,
    (_M.UNREVOKED_PARTITIONS, _F.STILL_REVOKING): _M.UNREVOKED_PARTITIONS,
    (_M.UNREVOKED_PARTITIONS, _F.REVOKE): _M.UNREVOKED_PARTITIONS,
    (_M.UNREVOKED_PARTITIONS, _F.UP_TO_DATE): _M.STABLE,
    (_M.UNREVOKED_PARTITIONS, _F.UNRELEASED): _M.UNRELEASED_PARTITIONS,
    (_M.UNRELEASED_PARTITIONS, _F.UP_TO_DATE): _M.STABLE,
    (_M.UNRELEASED_PARTITIONS, _F.UNRELEASED): _M.UNRELEASED_PARTITIONS,
    (_M.UNRELEASED_PARTITIONS, _F.REVOKE): _M.UNREVOKED_PARTITIONS,
}


class IllegalMemberTransition(Exception):
    """A coordinator bug: a (state, finding) pair the reconciliation table does not have."""


S = TypeVar("S", bound=enum.Enum)


def lookup(table: Mapping[tuple[S, Finding], S], state: S, finding: Finding) -> S:
    """A reconciliation table's answer (this one, or the Streams protocol's over tasks:
    ``streams_group.py``); IllegalMemberTransition for a pair it does not list."""
    try:
        return table[(state, finding)]
    except KeyError:
        raise IllegalMemberTransition(f"{state.name} with {finding.value}") from None


def next_member_state(state: MemberState, finding: Finding) -> MemberState:
    """The table's answer; IllegalMemberTransition for a pair it does not list."""
    return lookup(RECONCILE, state, finding)


def _subtract(a: Assignment, b: Assignment) -> Assignment:
    out = {}
    for topic, indexes in a.items():
        left = indexes - b.get(topic, frozenset())
        if left:
            out[topic] = left
    return out


def _intersect(a: Assignment, b: Assignment) -> Assignment:
    out = {}
    for topic, indexes in a.items():
        both = indexes & b.get(topic, frozenset())
        if both:
            out[topic] = both
    return out


def _union(a: Assignment, b: Assignment) -> Assignment:
    out = dict(a)
    for topic, indexes in b.items():
        out[topic] = out.get(topic, frozenset()) | indexes
    return {t: p for t, p in sorted(out.items()) if p}


def _normalized(a: Assignment) -> Assignment:
    return {t: frozenset(p) for t, p in sorted(a.items()) if p}
