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
  leaves or expires, a subscription changes (topic names, a regex already resolved, the
  group's preferred server assignor), a regex's matches change, or a subscribed topic appears,
  disappears or gains partitions. A heartbeat then computes a new *target assignment* with the
  group's assignor (the one most members ask for, else the first configured: ``uniform``) and
  stamps it with the group epoch (the assignment epoch) -- at most once per
  ``assignment_interval_ms`` (KIP-1263; a new or emptied group's first at once). Leaves and
  expiries only bump the epoch, as Kafka's; the next heartbeat computes the target.
- Regexes (RE2) are resolved as Kafka resolves them, off the request path: a member
  subscribing to a regex no other member uses is answered at the unchanged epoch, the
  resolution right after the answer bumps the epoch if it matched topics, and the member gets
  them at its next heartbeat; afterwards a group's regexes are matched again at most once per
  heartbeat interval (new topics).
- Each member then moves from its current assignment to its target, one heartbeat at a time,
  by the reconciliation table ``RECONCILE`` (``reconciliation.py``): partitions it must give up are revoked first
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
Assigning (the target assignment is older than the group epoch: within the assignment interval,
after a leave, after a regex resolution), Reconciling (some member is not at the target's epoch
or has partitions to revoke or receive), Stable.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from broker.group.assignors import ASSIGNORS, Assignment, assign
from broker.group.consumer_model import JOIN_EPOCH as JOIN_EPOCH
from broker.group.consumer_model import LEAVE_EPOCH as LEAVE_EPOCH
from broker.group.consumer_model import MEMBER_TYPE_CLASSIC as MEMBER_TYPE_CLASSIC
from broker.group.consumer_model import MEMBER_TYPE_CONSUMER as MEMBER_TYPE_CONSUMER
from broker.group.consumer_model import NEW_GROUP_EPOCH as NEW_GROUP_EPOCH
from broker.group.consumer_model import STATIC_LEAVE_EPOCH as STATIC_LEAVE_EPOCH
from broker.group.consumer_model import ClassicMetadata as ClassicMetadata
from broker.group.consumer_model import ConsumerGroup as ConsumerGroup
from broker.group.consumer_model import ConsumerGroupConfig as ConsumerGroupConfig
from broker.group.consumer_model import ConsumerGroupState as ConsumerGroupState
from broker.group.consumer_model import ConsumerMember as ConsumerMember
from broker.group.consumer_model import HeartbeatRequest as HeartbeatRequest
from broker.group.consumer_model import HeartbeatResult as HeartbeatResult
from broker.group.consumer_model import MigrationPolicy as MigrationPolicy
from broker.group.consumer_model import RegexCompiler as RegexCompiler
from broker.group.consumer_model import TopicsView as TopicsView
from broker.group.consumer_model import _re2_compiler
from broker.group.consumer_subscriptions import Subscriptions
from broker.group.modern_group import ModernGroupCoordinator
from broker.group.offsets import valid_group_id
from broker.group.reconciliation import RECONCILE as RECONCILE
from broker.group.reconciliation import Finding as Finding
from broker.group.reconciliation import IllegalMemberTransition as IllegalMemberTransition
from broker.group.reconciliation import MemberState as MemberState
from broker.group.reconciliation import (
    _intersect,
    _normalized,
    _subtract,
    _union,
    next_member_state,
)
from protocol.errors import ErrorCode


def _new_member_id() -> str:
    return str(uuid.uuid4())


class ConsumerGroupCoordinator(ModernGroupCoordinator[ConsumerGroup]):
    """Every consumer-protocol group of this broker (their keeping, deletion and changes to
    write: ``modern_group.py``)."""

    def __init__(
        self,
        config: ConsumerGroupConfig,
        compile_regex: RegexCompiler = _re2_compiler,
        new_member_id: Callable[[], str] = _new_member_id,
    ) -> None:
        super().__init__()
        self.config = config
        self._subs = Subscriptions(config, compile_regex)
        self._new_member_id = new_member_id
        self._downgrades: list[tuple[ConsumerGroup, list[str], bool]] = []

    def _resolve_regexes(self, group: ConsumerGroup, topics: TopicsView, now_ms: int,
                         bump: bool = True) -> None:
        """The group's regexes resolved (``Subscriptions.resolve_regexes``); the epoch goes up
        if their topics changed."""
        if self._subs.resolve_regexes(group, topics, now_ms) and bump:
            self._bump(group)

    # -- the group epoch and the target assignment ------------------------------------------

    def _bump(self, group: ConsumerGroup) -> None:
        group.group_epoch += 1
        group.rebalances += 1
        group.dirty_group = True

    def _topics_changed(self, group: ConsumerGroup, topics: TopicsView) -> bool:
        """Whether a topic the members subscribe to (by name or a resolved regex) appeared,
        went or changed its partition count since the target was computed."""
        subscribed = group.subscribed
        for topic in group.watched:
            if topics.partition_count(topic) != subscribed.get(topic):
                return True
        return False

    def _may_assign(self, group: ConsumerGroup, now_ms: int) -> bool:
        """Kafka 4.3+'s assignment interval (KIP-1263, ``group.consumer.assignment.interval.ms``):
        a new target at most once per interval; the first one of a new (or emptied) group, or
        with an interval of 0, at once. In between the group is Assigning: its epoch moved,
        its target did not, and members reconcile towards the older target."""
        last = group.assignment_timestamp_ms
        interval = self.config.assignment_interval_ms
        return last == 0 or interval == 0 or now_ms >= last + interval

    def _membership_changed(self, group: ConsumerGroup) -> None:
        """A member left or expired: the epoch goes up (the next heartbeat computes the new
        target, as Kafka's consumerGroupFenceMembers); an empty group's target is empty at
        once, and its next one comes without waiting for the interval."""
        self._bump(group)
        self._subs.watch(group)
        if not group.members:
            group.assignment_epoch = group.group_epoch
            group.target = {}
            group.subscribed = {}
            group.assignment_timestamp_ms = 0

    def _maybe_update_target(self, group: ConsumerGroup, topics: TopicsView,
                             force: bool = False, now_ms: int = 0) -> None:
        """Bump the group epoch if ``force`` (a member joined or its subscription changed) or if
        the subscribed topics changed, and compute the target assignment of the group epoch
        when it is behind and the assignment interval allows."""
        if not group.members:
            if force:
                self._membership_changed(group)
            return
        if force:
            self._bump(group)
            self._subs.watch(group)
        if group.assignment_epoch == group.group_epoch:
            if not self._topics_changed(group, topics):
                return
            self._bump(group)
        if not self._may_assign(group, now_ms):
            return
        subscriptions, counts = self._subs.of(group, topics)
        group.subscribed = counts
        group.assignor = self._subs.choose_assignor(group)
        target = assign(group.assignor, subscriptions, counts, group.target)
        for member_id, assignment in target.items():
            if group.target.get(member_id) != assignment:
                group.dirty_members.add(member_id)
        group.target = target
        group.assignment_epoch = group.group_epoch
        group.assignment_timestamp_ms = max(now_ms, 1)  # 0 means "none yet"
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
            deadline = m.session_deadline(session)
            if now_ms >= deadline:
                expired.append(m)
            elif earliest is None or deadline < earliest:
                earliest = deadline
        group.next_expiry_ms = earliest if earliest is not None else now_ms + session
        for member in expired:
            if self._maybe_downgrade(group, member):
                return
            self._remove_member(group, member)
        if expired:
            self._membership_changed(group)

    # -- groups that change protocol ------------------------------------------------------------

    def _maybe_downgrade(self, group: ConsumerGroup, leaving: ConsumerMember) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember: when the last member that speaks the
        consumer protocol leaves (or is fenced) and classic members remain, the group becomes
        a classic group again, if the policy allows it and the classic group size limit holds.
        Then the group is gone from here: ``take_downgrades`` hands it (without ``leaving``) to
        the caller, which builds the classic group; its records here are all tombstoned."""
        others = [m for m in group.members.values() if m.member_id != leaving.member_id]
        if (not others or any(m.classic is None for m in others) or leaving.classic is not None
                or not self.config.migration_policy.downgrade
                or len(others) > self.config.classic_max_size):
            return False
        del group.members[leaving.member_id]
        self.downgrade(group, leaving.member_id, rebalance=True)
        return True

    def may_downgrade_replacing(self, group: ConsumerGroup, replaced: ConsumerMember) -> bool:
        """Kafka's validateOnlineDowngradeWithReplacedMember: a member joining with the
        classic protocol replaces the static member ``replaced``, the last one that speaks the
        consumer protocol; the group may then become classic (policy and size allowing)."""
        return (replaced.classic is None
                and all(m.classic is not None for m in group.members.values()
                        if m is not replaced)
                and self.config.migration_policy.downgrade
                and len(group.members) <= self.config.classic_max_size)

    def downgrade(self, group: ConsumerGroup, leaving: str | None, rebalance: bool) -> None:
        """The group leaves this coordinator for the classic one (``take_downgrades``)."""
        self.groups.pop(group.group_id, None)
        self._to_store.pop(group.group_id, None)
        # every member id the group's records were written under gets its tombstones
        gone = set(group.removed_members)
        if leaving is not None:
            gone.add(leaving)
        self._downgrades.append((group, sorted(gone), rebalance))

    def take_downgrades(self) -> list[tuple[ConsumerGroup, list[str], bool]]:
        """``(group, member ids gone, rebalance)`` of every group that became classic since
        the last call; the group still holds its other members, their target assignments and
        epoch. ``rebalance``: the classic group must rebalance at once (its members rejoin);
        else it is Stable with the members' target assignments (a static member's new
        incarnation replaced the last consumer-protocol member and kept its assignment)."""
        out, self._downgrades = self._downgrades, []
        return out

    def bump_epoch(self, group: ConsumerGroup) -> None:
        self._bump(group)

    def may_assign(self, group: ConsumerGroup, now_ms: int) -> bool:
        return self._may_assign(group, now_ms)

    def adopt(self, group: ConsumerGroup, topics: TopicsView, now_ms: int) -> None:
        """Take in a group converted from a classic group (upgrade): every record of it is
        written (the caller tombstones the classic group's), sessions start at ``now_ms``."""
        self.load_group(group, topics)
        for member in group.members.values():
            member.last_heartbeat_ms = now_ms
        group.next_expiry_ms = 0
        group.dirty_group = True
        group.dirty_members.update(group.members)
        self._store(group)

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
        """Expire members whose session or rebalance timeout passed. (Topic changes are seen,
        and new targets computed, by the next heartbeat, as in Kafka.)"""
        for group in list(self.groups.values()):
            self._expire(group, topics, now_ms)
            if group.group_id not in self.groups:
                continue  # it became a classic group
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
                self._subs.matcher(req.subscribed_topic_regex)
            except ValueError as exc:
                return HeartbeatResult(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid "
                    f"regular expression: {exc}.")
        group = self.groups.get(req.group_id)
        if group is not None:
            self._expire(group, topics, now_ms)
            if req.group_id not in self.groups:  # it became a classic group
                return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND,
                                       f"Group {req.group_id} is not a consumer group.")
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
        send = (req.member_epoch == JOIN_EPOCH
                or sent_before != (member.member_epoch, member.assigned)
                or (req.owned is not None and _normalized(req.owned) != member.assigned))
        result = HeartbeatResult(
            ErrorCode.NONE, None, member.member_id, member.member_epoch,
            self.config.timing_of(group.group_id)[1], member.assigned if send else None)
        self._resolve_regexes(group, topics, now_ms)  # after the answer, as Kafka's
        self._store(group)
        return result

    # -- for classic members (classic_members.py) -----------------------------------------

    def new_member_id(self) -> str:
        return self._new_member_id()

    @staticmethod
    def rename_member(group: ConsumerGroup, member: ConsumerMember, member_id: str) -> None:
        """A static member's new incarnation takes over its membership under ``member_id``."""
        old_id = member.member_id
        del group.members[old_id]
        group.removed_members.add(old_id)
        group.dirty_members.discard(old_id)
        member.member_id = member_id
        group.members[member_id] = member
        group.target[member_id] = group.target.pop(old_id, {})
        group.removed_members.discard(member_id)
        group.dirty_members.add(member_id)

    def update_target(self, group: ConsumerGroup, topics: TopicsView, force: bool,
                      now_ms: int) -> None:
        self._maybe_update_target(group, topics, force=force, now_ms=now_ms)

    def reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None,
                  now_ms: int) -> None:
        self._reconcile(group, member, owned, now_ms)

    def store(self, group: ConsumerGroup) -> None:
        self._store(group)

    def remove_member(self, group: ConsumerGroup, member: ConsumerMember, topics: TopicsView,
                      now_ms: int) -> None:
        """A member left: removed, the epoch bumped (the next join or heartbeat computes the
        new target)."""
        self._remove_member(group, member)
        self._membership_changed(group)

    def _forget_if_new_and_empty(self, group: ConsumerGroup) -> None:
        if not group.members and group.group_epoch == NEW_GROUP_EPOCH and not group.target:
            self.groups.pop(group.group_id, None)

    def _member(self, group: ConsumerGroup, req: HeartbeatRequest, now_ms: int
                ) -> tuple[ConsumerMember | None, HeartbeatResult | None]:
        if req.member_epoch == JOIN_EPOCH:
            static = group.static_member(req.instance_id)
            if static is not None and static.member_id != req.member_id:
                if static.member_epoch != STATIC_LEAVE_EPOCH and static.classic is None:
                    return None, HeartbeatResult(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"Static member {static.member_id} with instance id "
                        f"{req.instance_id} is not released.")
                # The new incarnation takes over the departed one's assignment and epoch (a
                # classic one is replaced without waiting for its leave, as Kafka's
                # getOrMaybeSubscribeStaticConsumerGroupMember does).
                self.rename_member(group, static, req.member_id or self._new_member_id())
                if static.member_epoch == STATIC_LEAVE_EPOCH:
                    static.member_epoch = static.previous_member_epoch
                static.classic = None
                static.classic_deadline_ms = None
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

    def _update_member(self, group: ConsumerGroup, member: ConsumerMember,
                       req: HeartbeatRequest) -> bool:
        """Apply the request's non-null fields; True if the group epoch must go up (Kafka's
        bumpGroupEpoch): the topic names changed, the regex changed to one already resolved
        or to none, or the group's preferred server assignor changed. A regex not resolved
        yet waits for ``_resolve_regexes``."""
        changed = False
        assignor_before = self._subs.choose_assignor(group)
        if req.subscribed_topic_names is not None:
            names = tuple(sorted(set(req.subscribed_topic_names)))
            if names != member.subscribed_topic_names:
                member.subscribed_topic_names = names
                changed = True
            if req.subscribed_topic_regex is None and req.member_epoch == JOIN_EPOCH \
                    and member.subscribed_topic_regex is not None:
                member.subscribed_topic_regex = None
                group.dirty_members.add(member.member_id)
                changed = True
        if req.subscribed_topic_regex is not None:
            regex = req.subscribed_topic_regex or None
            if regex != member.subscribed_topic_regex:
                member.subscribed_topic_regex = regex
                group.dirty_members.add(member.member_id)
                if regex is None or regex in group.resolved:
                    changed = True
                else:
                    group.regex_pending = True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor = req.server_assignor
            group.dirty_members.add(member.member_id)
            changed = changed or self._subs.choose_assignor(group) != assignor_before
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
        elif self._maybe_downgrade(group, member):
            return HeartbeatResult(ErrorCode.NONE, None, member.member_id, req.member_epoch)
        else:
            self._remove_member(group, member)
            self._membership_changed(group)
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
        if member.classic is not None:
            # A classic member's generation is its member epoch (Kafka's validateMemberEpoch).
            return every(ErrorCode.NONE if member_epoch == member.member_epoch
                         else ErrorCode.ILLEGAL_GENERATION)
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
            return (ErrorCode.ILLEGAL_GENERATION if member.classic is not None
                    else ErrorCode.STALE_MEMBER_EPOCH)
        return ErrorCode.NONE

    def subscribed_topics(self, group_id: str) -> set[str]:
        group = self.groups.get(group_id)
        return set(group.subscribed) if group is not None else set()

    # -- persistence ----------------------------------------------------------------------------

    def _has_changes(self, group: ConsumerGroup) -> bool:
        return bool(group.dirty_group or group.dirty_members or group.removed_members)

    def load_group(self, group: ConsumerGroup, topics: TopicsView) -> None:
        """Restore a group read back from ``__consumer_offsets`` (broker start): epochs,
        members and assignments as written; the subscribed topics as they are now, so that only
        a real change of them bumps the epoch."""
        if group.members:
            self._subs.watch(group)
            group.regex_pending = group.has_regex
            self._resolve_regexes(group, topics, 0, bump=False)
            group.subscribed = self._subs.of(group, topics)[1]
            group.assignor = self._subs.choose_assignor(group)
        self.groups[group.group_id] = group

    def supported_assignor(self, name: str) -> bool:
        return name in self.config.assignors and name in ASSIGNORS
