"""The consumer group protocol (KIP-848): member epochs, the group epoch, target assignments and the
incremental reconciliation of each member. Pure: no I/O, no clock (every entry point takes
``now_ms``), no topic store (the caller passes a ``TopicsView``).

Rules / theory of operation (Kafka 4's group coordinator: ``GroupMetadataManager``'s
consumerGroupHeartbeat, ``ConsumerGroup``, ``CurrentAssignmentBuilder``):

- A member heartbeats (ConsumerGroupHeartbeat) every ``heartbeat_interval_ms``. It joins with
  member epoch 0 (a full request: subscription, rebalance timeout, owned partitions = []), leaves
  with -1, and a static member (``instance_id``) that will come back leaves with -2: it keeps its
  assignment and epoch until its session expires, and a new member with the same instance id
  takes them over (joining with epoch 0). A second live member with an instance id in use is
  refused UNRELEASED_INSTANCE_ID.
- The group epoch goes up whenever what the assignment depends on changes: a member joins,
  leaves or expires, a subscription changes (topic names, regex, server assignor), or a
  subscribed topic appears, disappears or gains partitions. Then the coordinator computes a new
  *target assignment* with the group's assignor (the one most members ask for, else the first
  configured: ``uniform``) and stamps it with the group epoch (the assignment epoch).
- Each member then moves from its current assignment to its target, one heartbeat at a time,
  by the reconciliation table ``RECONCILE`` below: partitions it must give up are revoked first
  (the member keeps its epoch until it reports, in a later heartbeat's owned partitions, that it
  no longer owns them); only then does it get the target's epoch and the target partitions that
  no other member still owns. Partitions still owned elsewhere are handed over by later
  heartbeats (UNRELEASED_PARTITIONS). So a partition is never owned by two members at once, and
  the others never stop consuming partitions they keep.
- Epoch checks: a heartbeat with an epoch above the member's, or below it other than the
  previous epoch (a lost response, accepted only when the owned partitions match), is
  FENCED_MEMBER_EPOCH; the client rejoins with epoch 0. An unknown member id: UNKNOWN_MEMBER_ID.
- Timers: a member whose session (``session_timeout_ms`` since its last heartbeat) expires is
  removed; a member that does not revoke within its rebalance timeout is removed too. Both bump
  the group epoch, as a leave does.
- Offsets: OffsetCommit (v9+) and OffsetFetch (v9+) carry the member id and epoch;
  ``validate_offset_commit`` / ``validate_offset_fetch`` check them (STALE_MEMBER_EPOCH for an
  older epoch, UNKNOWN_MEMBER_ID; commits with epoch -1 and no member only while the group is
  Empty). TxnOffsetCommit from a producer whose consumer is a member: ILLEGAL_GENERATION for
  an epoch that is not the member's current one (KIP-447's fencing with member epochs).
- Persistence: every change is also a list of records for ``__consumer_offsets``
  (``consumer_records.py``); ``take_records()`` hands them to the shell, which appends them and
  answers the heartbeat once they are durable. ``load`` rebuilds a group from them at start.

Group states (``ConsumerGroupState``) follow from the members, as in Kafka: Empty (no members),
Assigning (the target assignment is older than the group epoch: never seen here, where the
target is computed in the same call), Reconciling (some member is not at the target's epoch or
has partitions to revoke or receive), Stable.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from broker.group.assignors import ASSIGNORS, UNIFORM, Assignment, TargetAssignment, assign
from broker.group.offsets import valid_group_id
from protocol.errors import ErrorCode

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2  # a static member leaves and will come back under its instance id

# ConsumerGroupDescribe v1 (KIP-1099): the member's protocol
MEMBER_TYPE_CONSUMER = 1


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


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


def next_member_state(state: MemberState, finding: Finding) -> MemberState:
    """The table's answer; IllegalMemberTransition for a pair it does not list."""
    try:
        return RECONCILE[(state, finding)]
    except KeyError:
        raise IllegalMemberTransition(f"{state.name} with {finding.value}") from None


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


@dataclass(frozen=True)
class ConsumerGroupConfig:
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    assignors: tuple[str, ...] = (UNIFORM, "range")  # group.consumer.assignors
    max_size: int = 2**31 - 1  # group.consumer.max.size
    # Topics a regex never matches (Kafka's internal topics).
    internal_topics: frozenset[str] = frozenset()
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

    def owns(self) -> Iterable[tuple[str, int]]:
        for assignment in (self.assigned, self.pending_revocation):
            for topic, indexes in assignment.items():
                for index in indexes:
                    yield topic, index


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
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
    # No member's session or revocation deadline is before this (0: unknown, scan).
    next_expiry_ms: int = 0
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


def _new_member_id() -> str:
    return str(uuid.uuid4())


class ConsumerGroupCoordinator:
    """Every consumer-protocol group of this broker."""

    def __init__(
        self,
        config: ConsumerGroupConfig,
        compile_regex: RegexCompiler = _re2_compiler,
        new_member_id: Callable[[], str] = _new_member_id,
    ) -> None:
        self.config = config
        self.groups: dict[str, ConsumerGroup] = {}
        self._compile_regex = compile_regex
        self._regexes: dict[str, Callable[[str], bool]] = {}
        self._new_member_id = new_member_id
        # Groups whose records must be written (take_records), in order; a deleted group maps
        # to True (its tombstones).
        self._to_store: dict[str, bool] = {}

    # -- subscriptions ------------------------------------------------------------------------

    def _matcher(self, pattern: str) -> Callable[[str], bool]:
        matcher = self._regexes.get(pattern)
        if matcher is None:
            if len(self._regexes) > 1024:
                self._regexes.clear()
            matcher = self._regexes[pattern] = self._compile_regex(pattern)
        return matcher

    def _member_topics(self, member: ConsumerMember, topics: TopicsView,
                       all_topics: Mapping[str, int] | None) -> set[str]:
        """The existing topics the member subscribes to (names, and the regex's matches)."""
        names = {t for t in member.subscribed_topic_names if topics.partition_count(t) is not None}
        if member.subscribed_topic_regex is not None and all_topics is not None:
            match = self._matcher(member.subscribed_topic_regex)
            names.update(t for t in all_topics
                         if t not in self.config.internal_topics and match(t))
        return names

    def _subscriptions(self, group: ConsumerGroup, topics: TopicsView
                       ) -> tuple[dict[str, frozenset[str]], dict[str, int]]:
        all_topics = (topics.topics()
                      if any(m.subscribed_topic_regex for m in group.members.values()) else None)
        subscriptions = {m.member_id: frozenset(self._member_topics(m, topics, all_topics))
                         for m in group.members.values()}
        counts: dict[str, int] = {}
        for subscribed in subscriptions.values():
            for topic in subscribed:
                if topic not in counts:
                    counts[topic] = topics.partition_count(topic) or 0
        return subscriptions, counts

    def _choose_assignor(self, group: ConsumerGroup) -> str:
        votes: dict[str, int] = {}
        for m in group.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return self.config.assignors[0]
        best = max(votes.values())
        return min(name for name, n in votes.items() if n == best)

    # -- the group epoch and the target assignment ------------------------------------------

    def _bump(self, group: ConsumerGroup) -> None:
        group.group_epoch += 1
        group.dirty_group = True

    def _topics_changed(self, group: ConsumerGroup, topics: TopicsView, now_ms: int) -> bool:
        """Whether a topic the members subscribe to by name appeared, went or changed its
        partition count; with regexes, a full check at most once per heartbeat interval."""
        subscribed = group.subscribed
        for topic in group.watched:
            if topics.partition_count(topic) != subscribed.get(topic):
                return True
        return group.has_regex and now_ms >= group.next_regex_check_ms

    def _maybe_update_target(self, group: ConsumerGroup, topics: TopicsView,
                             force: bool = False, now_ms: int = 0) -> None:
        """Bump the group epoch if ``force`` (membership or a subscription changed) or if the
        subscribed topics changed, and compute the target assignment of the new epoch."""
        if not group.members:
            if force:
                self._bump(group)
                group.assignment_epoch = group.group_epoch
                group.target = {}
                group.subscribed = {}
            return
        if not force and group.assignment_epoch == group.group_epoch and not self._topics_changed(
                group, topics, now_ms):
            return
        subscriptions, counts = self._subscriptions(group, topics)
        group.watched = frozenset(t for m in group.members.values()
                                  for t in m.subscribed_topic_names)
        group.has_regex = any(m.subscribed_topic_regex for m in group.members.values())
        group.next_regex_check_ms = now_ms + self.config.heartbeat_interval_ms
        if counts != group.subscribed:
            force = True
        if not force and group.assignment_epoch == group.group_epoch:
            return
        if force:
            self._bump(group)
        group.subscribed = counts
        group.assignor = self._choose_assignor(group)
        target = assign(group.assignor, subscriptions, counts, group.target)
        for member_id, assignment in target.items():
            if group.target.get(member_id) != assignment:
                group.dirty_members.add(member_id)
        group.target = target
        group.assignment_epoch = group.group_epoch
        group.dirty_group = True

    # -- reconciliation -------------------------------------------------------------------------

    @staticmethod
    def _owned_elsewhere(group: ConsumerGroup, member_id: str) -> set[tuple[str, int]]:
        owned: set[tuple[str, int]] = set()
        for other in group.members.values():
            if other.member_id != member_id:
                owned.update(other.owns())
        return owned

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember,
                   owned: Assignment | None, now_ms: int) -> None:
        """Move ``member`` one step towards its target (the table ``RECONCILE``)."""
        if (member.state is MemberState.STABLE
                and member.member_epoch == group.assignment_epoch):
            return  # at the target already (the target changes only with the epoch)
        target = group.target.get(member.member_id, {})
        before = (member.member_epoch, member.state, member.assigned, member.pending_revocation)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or _intersect(owned, member.pending_revocation):
                finding = Finding.STILL_REVOKING
                member.state = next_member_state(member.state, finding)
                return
            for topic, indexes in member.pending_revocation.items():
                for index in indexes:
                    member.assignment_epochs.pop((topic, index), None)
            member.pending_revocation = {}
            member.revocation_deadline_ms = None
        revoke = _subtract(member.assigned, target)
        if revoke:
            finding = Finding.REVOKE
            member.assigned = _intersect(member.assigned, target)
            member.pending_revocation = _union(member.pending_revocation, revoke)
            member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
            group.next_expiry_ms = min(group.next_expiry_ms, member.revocation_deadline_ms)
        else:
            busy = self._owned_elsewhere(group, member.member_id)
            free = {t: frozenset(p for p in indexes if (t, p) not in busy)
                    for t, indexes in _subtract(target, member.assigned).items()}
            member.assigned = _union(member.assigned, _normalized(free))
            if member.member_epoch != group.assignment_epoch:
                member.previous_member_epoch = member.member_epoch
                member.member_epoch = group.assignment_epoch
            for topic, indexes in free.items():
                for index in indexes:
                    member.assignment_epochs[(topic, index)] = member.member_epoch
            finding = Finding.UP_TO_DATE if member.assigned == _normalized(target) \
                else Finding.UNRELEASED
        member.state = next_member_state(member.state, finding)
        if before != (member.member_epoch, member.state, member.assigned,
                      member.pending_revocation):
            group.dirty_members.add(member.member_id)

    # -- timers ---------------------------------------------------------------------------------

    def _expire(self, group: ConsumerGroup, topics: TopicsView, now_ms: int) -> None:
        """Remove members whose session or revocation deadline passed. Deadlines only move
        later (heartbeats) except a new revocation deadline, which lowers ``next_expiry_ms``:
        so the members are visited only once the earliest deadline is due."""
        if now_ms < group.next_expiry_ms:
            return
        session = self.config.timing_of(group.group_id)[0]
        expired = []
        earliest: int | None = None
        for m in group.members.values():
            deadline = m.last_heartbeat_ms + session
            if m.revocation_deadline_ms is not None:
                deadline = min(deadline, m.revocation_deadline_ms)
            if now_ms >= deadline:
                expired.append(m)
            elif earliest is None or deadline < earliest:
                earliest = deadline
        group.next_expiry_ms = earliest if earliest is not None else now_ms + session
        for member in expired:
            self._remove_member(group, member)
        if expired:
            self._maybe_update_target(group, topics, force=True, now_ms=now_ms)

    def _remove_member(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        group.dirty_members.discard(member.member_id)
        group.removed_members.add(member.member_id)
        self._store(group)

    def next_deadline(self) -> int | None:
        """No session or revocation deadline of any member passes before this."""
        best: int | None = None
        for group in self.groups.values():
            if group.members and (best is None or group.next_expiry_ms < best):
                best = group.next_expiry_ms
        return best

    def tick(self, topics: TopicsView, now_ms: int) -> None:
        """Expire members whose session or rebalance timeout passed; bump the epoch of groups
        whose subscribed topics changed."""
        for group in list(self.groups.values()):
            self._expire(group, topics, now_ms)
            self._maybe_update_target(group, topics, now_ms=now_ms)
            self._store(group)

    # -- ConsumerGroupHeartbeat -----------------------------------------------------------------

    def _validate(self, req: HeartbeatRequest) -> str | None:
        """INVALID_REQUEST's message, or None (Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid)."""
        if not req.group_id:
            return "GroupId can't be empty."
        if not valid_group_id(req.group_id):
            return "GroupId is longer than 32767 bytes."
        if req.version >= 1 and not req.member_id:
            return "MemberId can't be empty."
        if req.instance_id is not None and not req.instance_id:
            return "InstanceId can't be empty."
        if req.rack_id is not None and not req.rack_id:
            return "RackId can't be empty."
        if req.member_epoch == JOIN_EPOCH:
            if req.rebalance_timeout_ms == -1:
                return "RebalanceTimeoutMs must be provided in first request."
            if req.owned is None or req.owned:
                return "TopicPartitions must be empty when (re-)joining."
            if not req.subscribed_topic_names and not req.subscribed_topic_regex:
                return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
        elif req.member_epoch == STATIC_LEAVE_EPOCH:
            if req.instance_id is None:
                return "InstanceId can't be null."
        elif req.member_epoch < STATIC_LEAVE_EPOCH:
            return f"MemberEpoch is {req.member_epoch}, but must be greater than or equal to -2."
        return None

    def heartbeat(self, req: HeartbeatRequest, topics: TopicsView, now_ms: int) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat. The caller has checked that the group id is not a
        classic group's."""
        message = self._validate(req)
        if message is not None:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, message)
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            return HeartbeatResult(ErrorCode.UNSUPPORTED_ASSIGNOR,
                                   f"Assignor {req.server_assignor} is not supported. Supported "
                                   f"assignors: {', '.join(self.config.assignors)}.")
        if req.subscribed_topic_regex:
            try:
                self._matcher(req.subscribed_topic_regex)
            except ValueError as exc:
                return HeartbeatResult(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid "
                    f"regular expression: {exc}.")
        group = self.groups.get(req.group_id)
        if group is not None:
            self._expire(group, topics, now_ms)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, req, topics, now_ms)
        if group is None:
            if req.member_epoch != JOIN_EPOCH:
                return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND,
                                       f"Group {req.group_id} not found.")
            group = self.groups[req.group_id] = ConsumerGroup(req.group_id)
        member, error = self._member(group, req, now_ms)
        if error is not None:
            self._forget_if_new_and_empty(group)
            return error
        assert member is not None
        changed = self._update_member(group, member, req)
        member.last_heartbeat_ms = now_ms
        self._maybe_update_target(group, topics, force=changed, now_ms=now_ms)
        sent_before = (member.member_epoch, member.assigned)
        self._reconcile(group, member, req.owned, now_ms)
        self._store(group)
        send = (req.member_epoch == JOIN_EPOCH
                or sent_before != (member.member_epoch, member.assigned)
                or (req.owned is not None and _normalized(req.owned) != member.assigned))
        return HeartbeatResult(
            ErrorCode.NONE, None, member.member_id, member.member_epoch,
            self.config.timing_of(group.group_id)[1], member.assigned if send else None)

    def _forget_if_new_and_empty(self, group: ConsumerGroup) -> None:
        if not group.members and group.group_epoch == 0:
            self.groups.pop(group.group_id, None)

    def _member(self, group: ConsumerGroup, req: HeartbeatRequest, now_ms: int
                ) -> tuple[ConsumerMember | None, HeartbeatResult | None]:
        if req.member_epoch == JOIN_EPOCH:
            static = group.static_member(req.instance_id)
            if static is not None and static.member_id != req.member_id:
                if static.member_epoch != STATIC_LEAVE_EPOCH:
                    return None, HeartbeatResult(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"Static member {static.member_id} with instance id "
                        f"{req.instance_id} is not released.")
                # The new incarnation takes over the departed one's assignment and epoch.
                old_id = static.member_id
                member_id = req.member_id or self._new_member_id()
                del group.members[old_id]
                group.removed_members.add(old_id)
                group.dirty_members.discard(old_id)
                static.member_id = member_id
                static.member_epoch = static.previous_member_epoch
                group.members[member_id] = static
                group.target[member_id] = group.target.pop(old_id, {})
                group.removed_members.discard(member_id)
                group.dirty_members.add(member_id)
                return static, None
            member = group.members.get(req.member_id) if req.member_id else None
            if member is None:
                if len(group.members) >= self.config.max_size:
                    return None, HeartbeatResult(
                        ErrorCode.GROUP_MAX_SIZE_REACHED,
                        f"The consumer group has reached its maximum capacity of "
                        f"{self.config.max_size} members.")
                member_id = req.member_id or self._new_member_id()
                member = group.members[member_id] = ConsumerMember(member_id)
                member.last_heartbeat_ms = now_ms
            else:
                # A member that rejoins owns nothing any more: what it held goes back.
                member.assigned = {}
                member.pending_revocation = {}
                member.assignment_epochs = {}
                member.revocation_deadline_ms = None
                member.state = MemberState.STABLE
                member.member_epoch = JOIN_EPOCH
            group.dirty_members.add(member.member_id)
            return member, None
        member = group.members.get(req.member_id)
        if member is None:
            return None, HeartbeatResult(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {req.member_id} is not a member of group {req.group_id}.")
        if req.member_epoch != member.member_epoch:
            lost_response = (req.member_epoch == member.previous_member_epoch
                             and req.owned is not None
                             and not _subtract(_normalized(req.owned), member.assigned))
            if not lost_response:
                return None, HeartbeatResult(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The consumer group member has a greater epoch ({req.member_epoch}) than "
                    f"the one known by the group coordinator ({member.member_epoch}). The member "
                    "must abandon all its partitions and rejoin."
                    if req.member_epoch > member.member_epoch else
                    f"The consumer group member has a smaller member epoch "
                    f"({req.member_epoch}) than the one known by the group coordinator "
                    f"({member.member_epoch}). The member must abandon all its partitions and "
                    "rejoin.")
        if req.instance_id is not None and member.instance_id not in (None, req.instance_id):
            return None, HeartbeatResult(ErrorCode.FENCED_INSTANCE_ID,
                                         f"Instance id {req.instance_id} is not this member's.")
        return member, None

    @staticmethod
    def _update_member(group: ConsumerGroup, member: ConsumerMember, req: HeartbeatRequest
                       ) -> bool:
        """Apply the request's non-null fields; True if the subscription changed."""
        changed = False
        if req.subscribed_topic_names is not None:
            names = tuple(sorted(set(req.subscribed_topic_names)))
            if names != member.subscribed_topic_names:
                member.subscribed_topic_names = names
                changed = True
            if req.subscribed_topic_regex is None and req.member_epoch == JOIN_EPOCH \
                    and member.subscribed_topic_regex is not None:
                member.subscribed_topic_regex = None
                changed = True
        if req.subscribed_topic_regex is not None:
            regex = req.subscribed_topic_regex or None
            if regex != member.subscribed_topic_regex:
                member.subscribed_topic_regex = regex
                changed = True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor = req.server_assignor
            changed = True
        metadata = (req.instance_id or member.instance_id, req.rack_id or member.rack_id,
                    req.client_id, req.client_host,
                    member.rebalance_timeout_ms if req.rebalance_timeout_ms == -1
                    else req.rebalance_timeout_ms)
        if changed or metadata != (member.instance_id, member.rack_id, member.client_id,
                                   member.client_host, member.rebalance_timeout_ms):
            (member.instance_id, member.rack_id, member.client_id, member.client_host,
             member.rebalance_timeout_ms) = metadata
            group.dirty_members.add(member.member_id)
        return changed

    def _leave(self, group: ConsumerGroup | None, req: HeartbeatRequest, topics: TopicsView,
               req_now: int) -> HeartbeatResult:
        member = None
        if group is not None:
            member = group.members.get(req.member_id)
            if member is None and req.instance_id is not None:
                member = group.static_member(req.instance_id)
                if member is not None and req.member_id and member.member_id != req.member_id:
                    return HeartbeatResult(ErrorCode.FENCED_INSTANCE_ID,
                                           f"Instance id {req.instance_id} belongs to "
                                           f"another member.")
        if group is None or member is None:
            if group is None:
                return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND,
                                       f"Group {req.group_id} not found.")
            return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                   f"Member {req.member_id} is not a member of group "
                                   f"{req.group_id}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # Kept, with its assignment, until its session expires or its instance returns.
            if member.member_epoch != STATIC_LEAVE_EPOCH:
                member.previous_member_epoch = member.member_epoch
            member.member_epoch = STATIC_LEAVE_EPOCH
            group.dirty_members.add(member.member_id)
        else:
            self._remove_member(group, member)
            self._maybe_update_target(group, topics, force=True, now_ms=req_now)
        self._store(group)
        # (no heartbeat interval in the answer to a leave, as Kafka's)
        return HeartbeatResult(ErrorCode.NONE, None, member.member_id, req.member_epoch)

    # -- offsets ----------------------------------------------------------------------------

    def validate_offset_commit(
        self, group_id: str, member_id: str, member_epoch: int, api_version: int,
        partitions: Iterable[tuple[str, int]], transactional: bool = False,
    ) -> list[ErrorCode]:
        """OffsetCommit (or TxnOffsetCommit, ``transactional``) for a consumer group: one code
        per partition, as Kafka 4.4's ConsumerGroup.validateOffsetCommit decides.

        No member and epoch -1: allowed while the group is Empty (and always for a transactional
        commit that names no member). Otherwise the member must exist (UNKNOWN_MEMBER_ID) and,
        for OffsetCommit, use v9+ (UNSUPPORTED_VERSION). Its current epoch commits everything; a
        newer epoch nothing (STALE_MEMBER_EPOCH); an older one the partitions the member already
        had at that epoch, the others STALE_MEMBER_EPOCH. A transactional commit answers
        ILLEGAL_GENERATION instead of STALE_MEMBER_EPOCH (the producer's TxnOffsetCommit
        handler knows that code: the transaction aborts, the consumer's records are re-read)."""
        group = self.groups[group_id]
        wanted = list(partitions)
        stale = ErrorCode.ILLEGAL_GENERATION if transactional else ErrorCode.STALE_MEMBER_EPOCH

        def every(code: ErrorCode) -> list[ErrorCode]:
            return [code] * len(wanted)

        if member_epoch < 0 and not group.members and not (transactional and member_id):
            return every(ErrorCode.NONE)
        if transactional and member_epoch < 0 and not member_id:
            return every(ErrorCode.NONE)
        member = group.members.get(member_id)
        if member is None:
            return every(ErrorCode.UNKNOWN_MEMBER_ID)
        if not transactional and api_version < 9:
            return every(ErrorCode.UNSUPPORTED_VERSION)
        if member_epoch == member.member_epoch:
            return every(ErrorCode.NONE)
        if member_epoch > member.member_epoch:
            return every(stale)
        epochs = member.assignment_epochs
        return [ErrorCode.NONE if epochs.get(tp, member_epoch + 1) <= member_epoch else stale
                for tp in wanted]

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int
                              ) -> ErrorCode:
        """OffsetFetch v9+ naming a member (Kafka's ConsumerGroup.validateOffsetFetch)."""
        group = self.groups[group_id]
        if member_id is None or (member_epoch < 0 and not member_id):
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def subscribed_topics(self, group_id: str) -> set[str]:
        group = self.groups.get(group_id)
        return set(group.subscribed) if group is not None else set()

    # -- admin ----------------------------------------------------------------------------------

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        del self.groups[group_id]
        self._to_store[group_id] = True
        return ErrorCode.NONE

    def remove_empty_groups(self, keep: Callable[[str], bool]) -> None:
        """Forget Empty groups for which ``keep(group_id)`` (offsets left) is False."""
        for group_id, group in list(self.groups.items()):
            if not group.members and not keep(group_id):
                self.delete_group(group_id)

    # -- persistence ----------------------------------------------------------------------------

    def _store(self, group: ConsumerGroup) -> None:
        if group.dirty_group or group.dirty_members or group.removed_members:
            self._to_store.setdefault(group.group_id, False)

    def take_changes(self) -> list[tuple[str, ConsumerGroup | None]]:
        """``(group_id, group)`` of every group with changes to write since the last call
        (None: the group was deleted); the caller writes the records and then calls
        ``clear_changes`` on each group."""
        out: list[tuple[str, ConsumerGroup | None]] = []
        for group_id, deleted in self._to_store.items():
            out.append((group_id, None if deleted else self.groups.get(group_id)))
        self._to_store = {}
        return out

    def load_group(self, group: ConsumerGroup, topics: TopicsView) -> None:
        """Restore a group read back from ``__consumer_offsets`` (broker start): epochs,
        members and assignments as written; the subscribed topics as they are now, so that only
        a real change of them bumps the epoch."""
        if group.members:
            group.subscribed = self._subscriptions(group, topics)[1]
            group.assignor = self._choose_assignor(group)
            group.watched = frozenset(t for m in group.members.values()
                                      for t in m.subscribed_topic_names)
            group.has_regex = any(m.subscribed_topic_regex for m in group.members.values())
        self.groups[group.group_id] = group

    def supported_assignor(self, name: str) -> bool:
        return name in self.config.assignors and name in ASSIGNORS
