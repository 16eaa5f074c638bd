"""The Streams rebalance protocol's (KIP-1071) values: the group and its members, the requests
and answers of StreamsGroupHeartbeat, the configuration. Pure data; ``streams_group.py`` has the
rules that change them (as ``consumer_model.py`` / ``consumer_group.py`` for the consumer
protocol).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.group.streams_assignor import EMPTY_TASKS, TaskSet
from broker.group.streams_topology import ConfiguredTopology, Status, Topology
from protocol.errors import ErrorCode

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
NEW_GROUP_EPOCH = 1  # a streams group's epoch before its first bump (Kafka 4.4's StreamsGroup)
ASSIGNOR_NAME = "sticky"


class StreamsGroupState(enum.Enum):
    EMPTY = "Empty"
    NOT_READY = "NotReady"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(enum.IntEnum):
    """Kafka's streams MemberState, with its record values."""

    STABLE = 0
    UNREVOKED_TASKS = 1
    UNRELEASED_TASKS = 2
    UNKNOWN = 127


# -- members and groups ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    endpoint_information_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: Topology | None = None
    owned: TaskSet | None = None  # None: unchanged since the last heartbeat
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] | None = None
    shutdown_application: bool = False
    client_id: str = ""
    client_host: str = ""
    # (subtopology id, partition, offset sum) of the tasks whose state the member holds, and
    # their changelogs' end offsets; None: unchanged (sent every task.offset.interval.ms)
    task_offsets: tuple[tuple[str, int, int], ...] | None = None
    task_end_offsets: tuple[tuple[str, int, int], ...] | None = None
    api_version: int = 1


@dataclass(frozen=True)
class MemberTaskOffsets:
    """What a member last reported (Kafka keeps it in memory only, as here)."""

    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    end_offsets: dict[str, dict[int, int]] = field(default_factory=dict)


def nested_offsets(reported: tuple[tuple[str, int, int], ...]) -> dict[str, dict[int, int]] | str:
    """``subtopology -> partition -> offset``, or INVALID_REQUEST's message for a duplicate."""
    out: dict[str, dict[int, int]] = {}
    for sub, partition, offset in reported:
        parts = out.setdefault(sub, {})
        if partition in parts:
            return (f"Task offsets contain a duplicate entry for subtopology {sub} and "
                    f"partition {partition}.")
        parts[partition] = offset
    return out


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    status: tuple[tuple[Status, str], ...] | None = None
    tasks: TaskSet | None = None  # None: unchanged (not sent)
    endpoint_information_epoch: int = 0
    # Interactive queries: (host, port) -> (active, standby) partitions by topic; None: the
    # member's endpoint information is current (not sent).
    endpoints: list[tuple[tuple[str, int], dict[str, list[int]], dict[str, list[int]]]] | None \
        = None
    task_offset_interval_ms: int = 60_000
    acceptable_recovery_lag: int = 10_000


@dataclass
class StreamsMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 0
    topology_epoch: int = 0
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: TaskSet = EMPTY_TASKS
    pending_revocation: TaskSet = EMPTY_TASKS
    last_heartbeat_ms: int = 0
    revocation_deadline_ms: int | None = None


@dataclass
class StreamsGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    topology: Topology | None = None
    members: dict[str, StreamsMember] = field(default_factory=dict)
    target: dict[str, TaskSet] = field(default_factory=dict)
    configured: ConfiguredTopology | None = None
    task_counts: dict[str, int] = field(default_factory=dict)  # those of the target
    # the end of the initial rebalance delay (in memory: a timer, as Kafka's); None: not delayed
    assignment_delayed_until_ms: int | None = None
    shutdown_requested_by: str | None = None  # the last member that asked (in memory, as Kafka)
    # the assignment configs the target was computed with (stored in the group's metadata
    # record, as Kafka's LastAssignmentConfigs)
    last_assignment_configs: dict[str, str] = field(default_factory=dict)
    task_offsets: dict[str, MemberTaskOffsets] = field(default_factory=dict)  # by member id
    # Bumped when a member's tasks or endpoint change: members behind it get the endpoint map.
    endpoint_information_epoch: int = 0
    # what changed since the last take_changes()
    dirty_group: bool = False
    dirty_topology: bool = False
    dirty_members: set[str] = field(default_factory=set)
    removed_members: set[str] = field(default_factory=set)

    @property
    def state(self) -> StreamsGroupState:
        if not self.members:
            return StreamsGroupState.EMPTY
        if self.topology is None or self.configured is None or not self.configured.ready:
            return StreamsGroupState.NOT_READY
        if self.assignment_epoch < self.group_epoch:
            return StreamsGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE:
                return StreamsGroupState.RECONCILING
        return StreamsGroupState.STABLE


@dataclass(frozen=True)
class StreamsGroupSettings:
    """One group's settings: its ``streams.*`` GROUP configs, else the broker's."""

    session_timeout_ms: int = 45_000  # group.streams.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.streams.heartbeat.interval.ms
    num_standby_replicas: int = 0  # group.streams.num.standby.replicas
    task_offset_interval_ms: int = 60_000  # group.streams.task.offset.interval.ms
    acceptable_recovery_lag: int = 10_000  # group.streams.acceptable.recovery.lag
    rack_aware_assignment_tags: tuple[str, ...] = ()  # group.streams.rack.aware.assignment.tags
    initial_rebalance_delay_ms: int = 0  # group.streams.initial.rebalance.delay.ms

    def assignment_configs(self) -> dict[str, str]:
        """What the target assignment depends on (Kafka's streamsGroupAssignmentConfigs): a
        group whose last assignment used others is rebalanced at its next heartbeat."""
        out = {"num.standby.replicas": str(self.num_standby_replicas)}
        if self.rack_aware_assignment_tags:
            out["rack.aware.assignment.tags"] = ",".join(self.rack_aware_assignment_tags)
        return out


@dataclass(frozen=True)
class StreamsGroupConfig:
    heartbeat_interval_ms: int = 5_000  # group.streams.heartbeat.interval.ms
    session_timeout_ms: int = 45_000  # group.streams.session.timeout.ms
    num_standby_replicas: int = 0  # group.streams.num.standby.replicas
    max_size: int = 2**31 - 1  # group.streams.max.size
    task_offset_interval_ms: int = 60_000
    acceptable_recovery_lag: int = 10_000
    initial_rebalance_delay_ms: int = 0  # the broker passes its 3000 (Kafka's default)
    # group id -> its settings (the streams.* GROUP configs, broker/config/group_configs.py);
    # None: the fields above for every group
    settings: Callable[[str], StreamsGroupSettings] | None = field(default=None, compare=False)

    def of(self, group_id: str) -> StreamsGroupSettings:
        if self.settings is not None:
            return self.settings(group_id)
        return StreamsGroupSettings(self.session_timeout_ms, self.heartbeat_interval_ms,
                                    self.num_standby_replicas, self.task_offset_interval_ms,
                                    self.acceptable_recovery_lag,
                                    initial_rebalance_delay_ms=self.initial_rebalance_delay_ms)
