"""The classic group protocol's values (JoinGroup/SyncGroup/Heartbeat/LeaveGroup): the group and
its members, what the coordinator answers, its configuration, and the member checks every request
makes. Pure data and pure functions; ``coordinator.py`` has the rules.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from broker.group.state import GroupState
from protocol.errors import ErrorCode

NO_GENERATION = -1
NO_MEMBER_ID = ""


@dataclass(frozen=True)
class GroupConfig:
    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms


@dataclass(frozen=True)
class JoinResult:
    error: ErrorCode
    generation_id: int = NO_GENERATION
    protocol_name: str = ""
    leader: str = ""
    member_id: str = NO_MEMBER_ID
    members: tuple[tuple[str, bytes], ...] = ()  # only in the leader's answer
    member_instance_ids: tuple[str | None, ...] = ()  # group.instance.id of each of ``members``
    protocol_type: str = ""
    # KIP-814: a static leader that rejoined a Stable group gets the members but must not assign.
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""


@dataclass(frozen=True)
class Waiting:
    """The answer will come as a completion for ``waiter``."""

    waiter: int


Completion = tuple[int, JoinResult | SyncResult]


@dataclass
class Outcome:
    """What a coordinator call returns: its own reply (or ``Waiting``) and answers to earlier
    waiting requests that this call produced."""

    reply: JoinResult | SyncResult | Waiting | ErrorCode
    completions: list[Completion] = field(default_factory=list)


@dataclass(frozen=True)
class MemberSummary:
    member_id: str
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(frozen=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...]


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    last_heartbeat_ms: int
    assignment: bytes = b""
    group_instance_id: str | None = None  # static membership (KIP-345)
    join_waiter: int | None = None
    sync_waiter: int | None = None

    @property
    def protocol_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.protocols)

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def session_deadline(self) -> int | None:
        """When the session expires; None while a JoinGroup or SyncGroup of it is waiting."""
        if self.join_waiter is not None or self.sync_waiter is not None:
            return None
        return self.last_heartbeat_ms + self.session_timeout_ms


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # join order
    # PreparingRebalance timer: when the join phase ends (or is re-examined, initial delay)
    rebalance_deadline_ms: int | None = None
    initial_delay: bool = False  # the running rebalance is an initial delayed join
    initial_remaining_ms: int = 0
    new_member_added: bool = False
    # KIP-394: member ids handed out with MEMBER_ID_REQUIRED, until they join (id -> expiry)
    pending_members: dict[str, int] = field(default_factory=dict)

    def static_member(self, group_instance_id: str | None) -> Member | None:
        """The member with this group.instance.id (static membership, KIP-345)."""
        if group_instance_id is None:
            return None
        for member in self.members.values():
            if member.group_instance_id == group_instance_id:
                return member
        return None

    def fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """A static member id that was replaced by a newer instance (FENCED_INSTANCE_ID)."""
        member = self.static_member(group_instance_id)
        return member is not None and member.member_id != member_id

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return all(m.join_waiter is not None for m in self.members.values())


def _subscription_topics(metadata: bytes) -> list[str]:
    """The topic list of a consumer-protocol subscription (``version int16, topics [str],
    ...``); [] if it does not decode."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        pos, topics = 6, []
        for _ in range(max(count, 0)):
            (n,) = struct.unpack_from(">h", metadata, pos)
            if n < 0 or pos + 2 + n > len(metadata):
                return []
            topics.append(metadata[pos + 2 : pos + 2 + n].decode("utf-8"))
            pos += 2 + n
        return topics
    except (struct.error, UnicodeDecodeError):
        return []


def _inconsistent(requested: str | None, groups: str | None) -> bool:
    """A protocol type or name the request names that is not the group's (either unset: no)."""
    return requested is not None and groups is not None and requested != groups


def _member_of(group: Group, member_id: str, generation_id: int,
               group_instance_id: str | None) -> tuple[ErrorCode, Member | None]:
    """The member of ``group`` a SyncGroup, Heartbeat or OffsetCommit comes from, with NONE; or
    the refusal with None: FENCED_INSTANCE_ID (a stale member id of a static member),
    UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION (not the group's current generation)."""
    if group.fenced(group_instance_id, member_id):
        return ErrorCode.FENCED_INSTANCE_ID, None
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID, None
    if generation_id != group.generation_id:
        return ErrorCode.ILLEGAL_GENERATION, None
    return ErrorCode.NONE, member
