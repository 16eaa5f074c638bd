"""The consumer group protocol's (KIP-848) values: the group and its members, the requests and
answers of ConsumerGroupHeartbeat, the configuration. Pure data; ``consumer_group.py`` has the
rules that change them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from broker.group.assignors import UNIFORM, Assignment, TargetAssignment
from broker.group.reconciliation import MemberState
from protocol.errors import ErrorCode

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2  # a static member leaves and will come back under its instance id

# ConsumerGroupDescribe v1 (KIP-1099): the member's protocol
MEMBER_TYPE_CONSUMER = 1
MEMBER_TYPE_CLASSIC = 0  # a member of a group that changed protocol, on the classic one


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"



class TopicsView(Protocol):
    """What the coordinator needs to know of the topics (the log manager has these)."""

    def partition_count(self, topic: str) -> int | None: ...

    def topics(self) -> Mapping[str, int]: ...


# Compiles a regex (RE2 syntax) and returns its fullmatch, or raises ValueError.
RegexCompiler = Callable[[str], Callable[[str], bool]]


def _re2_compiler(pattern: str) -> Callable[[str], bool]:
    import re2  # google-re2: the syntax Kafka's RE2/J accepts

    try:
        compiled = re2.compile(pattern)
    except re2.error as exc:
        raise ValueError(str(exc)) from None
    return lambda name: compiled.fullmatch(name) is not None


class MigrationPolicy(enum.Enum):
    """``group.consumer.migration.policy`` (Kafka's ConsumerGroupMigrationPolicy): whether a
    non-empty classic group whose member joins with the consumer protocol becomes a consumer
    group (upgrade), and whether a consumer group whose last consumer-protocol member leaves
    becomes a classic group again (downgrade). Empty groups change in both directions always."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @property
    def upgrade(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrade(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)

    @classmethod
    def parse(cls, value: str) -> MigrationPolicy:
        """Case-insensitive, as Kafka's validator; ValueError for another value."""
        try:
            return cls(value.strip().lower())
        except ValueError:
            raise ValueError(f"group.consumer.migration.policy must be one of "
                             f"{', '.join(p.value for p in cls)}, not {value!r}") from None


@dataclass(frozen=True)
class ClassicMetadata:
    """What a member that speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside a
    consumer group keeps (Kafka's ClassicMemberMetadata): its session timeout and the
    ``(name, subscription)`` protocols of its last JoinGroup, in its order of preference."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class ConsumerGroupConfig:
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    assignors: tuple[str, ...] = (UNIFORM, "range")  # group.consumer.assignors
    max_size: int = 2**31 - 1  # group.consumer.max.size
    # Topics a regex never matches (Kafka's internal topics).
    internal_topics: frozenset[str] = frozenset()
    # group.consumer.migration.policy: whether a non-empty group may change protocol
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL
    classic_max_size: int = 2**31 - 1  # group.max.size (a downgraded group must fit it)
    # group.consumer.assignment.interval.ms (KIP-1263): new targets at most this often
    assignment_interval_ms: int = 1_000
    # group id -> (session timeout, heartbeat interval): the group's consumer.session.timeout.ms
    # and consumer.heartbeat.interval.ms (GROUP configs, broker/config/group_configs.py); None:
    # the two above for every group.
    timing: Callable[[str], tuple[int, int]] | None = field(default=None, compare=False)

    def timing_of(self, group_id: str) -> tuple[int, int]:
        if self.timing is None:
            return self.session_timeout_ms, self.heartbeat_interval_ms
        return self.timing(group_id)


@dataclass(frozen=True)
class HeartbeatRequest:
    """A decoded ConsumerGroupHeartbeat (topic ids of owned partitions already resolved)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None  # None: unchanged since the last heartbeat
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged (not sent)


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 0
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    last_heartbeat_ms: int = 0
    revocation_deadline_ms: int | None = None
    # (topic, partition) -> the member epoch at which the member got it (Kafka 4.3+: a commit
    # from an older epoch is accepted for the partitions the member already had then)
    assignment_epochs: dict[tuple[str, int], int] = field(default_factory=dict)
    # A member that speaks the classic protocol (None: the consumer protocol), and its join or
    # sync deadline (the rebalance timeout after a JoinGroup or a REBALANCE_IN_PROGRESS)
    classic: ClassicMetadata | None = None
    classic_deadline_ms: int | None = None

    def session_deadline(self, session_timeout_ms: int) -> int:
        """When the member is removed unless it heartbeats (or revokes, or joins/syncs)."""
        if self.classic is not None:
            session_timeout_ms = self.classic.session_timeout_ms
        deadline = self.last_heartbeat_ms + session_timeout_ms
        for other in (self.revocation_deadline_ms, self.classic_deadline_ms):
            if other is not None and other < deadline:
                deadline = other
        return deadline

    def owns(self) -> Iterable[tuple[str, int]]:
        for assignment in (self.assigned, self.pending_revocation):
            for topic, indexes in assignment.items():
                for index in indexes:
                    yield topic, index


# A new group's epoch and target assignment epoch: Kafka 4.4's ModernGroup starts both at 1 (not
# 0), so the first member's join (a subscription change: one bump) gets member epoch 2, as
# Kafka 4.4 answers (checked on it: the first ConsumerGroupMetadata record of a new group holds 2).
NEW_GROUP_EPOCH = 1


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = NEW_GROUP_EPOCH
    assignment_epoch: int = NEW_GROUP_EPOCH
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: TargetAssignment = field(default_factory=dict)
    # topic -> partition count of the subscribed topics when the target was computed
    subscribed: dict[str, int] = field(default_factory=dict)
    assignor: str = UNIFORM
    # The topic names the members subscribe to by name (existing or not) and whether some
    # subscribe by regex: what a heartbeat checks for topic changes without visiting every
    # member (recomputed when membership or a subscription changes).
    watched: frozenset[str] = frozenset()
    has_regex: bool = False
    next_regex_check_ms: int = 0
    # regex -> the topics it matched when last resolved (Kafka's resolved regular expressions);
    # regex_pending: a member subscribed to a regex not resolved yet
    resolved: dict[str, frozenset[str]] = field(default_factory=dict)
    regex_pending: bool = False
    # when the target was last computed (0: never, or the group became empty): KIP-1263
    assignment_timestamp_ms: int = 0
    # No member's session or revocation deadline is before this (0: unknown, scan).
    next_expiry_ms: int = 0
    # group epoch bumps since this broker started (Kafka's consumer-group rebalances sensor)
    rebalances: int = 0
    # what changed since the last take_records()
    dirty_group: bool = False
    dirty_members: set[str] = field(default_factory=set)
    removed_members: set[str] = field(default_factory=set)

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.assignment_epoch < self.group_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if member.member_epoch != self.assignment_epoch or member.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member
        return None
