"""Groups that change protocol (KIP-848's migration): classic members inside a consumer group, and
the conversions between a classic group and a consumer group. Pure, like its two coordinators.

Rules / theory of operation (Kafka 4's GroupMetadataManager: classicGroupJoinToConsumerGroup,
classicGroupSyncToConsumerGroup, classicGroupHeartbeatToConsumerGroup,
classicGroupLeaveToConsumerGroup, convertToConsumerGroup, convertToClassicGroup):

- Upgrade. A ConsumerGroupHeartbeat joining (epoch 0) a classic group with members converts it,
  when ``group.consumer.migration.policy`` allows upgrades, its protocol type is "consumer", it
  fits ``group.consumer.max.size``, its members' protocol decodes and no assignment carries a
  custom assignor's user data (else GROUP_ID_NOT_FOUND with Kafka 4.4's message). Every classic member
  becomes a member of the consumer group at member epoch = the generation, Stable, its target
  and current assignment its last classic assignment; the group epoch and the assignment epoch
  are the generation. The joining member then bumps the epoch as any join does. Offsets are the
  group id's and stay where they are.
- Classic members of a consumer group keep speaking JoinGroup/SyncGroup/Heartbeat/LeaveGroup,
  answered at once from the consumer group: a JoinGroup updates the member's subscription (the
  embedded protocol's topics; its owned partitions count as what it reports owning), bumps the
  epoch if it changed and reconciles the member one step, as a consumer heartbeat would; the
  answer's generation is the member epoch, and the member never leads (it gets no member list).
  SyncGroup hands back the member's current assignment (without partitions it must revoke).
  Heartbeat and SyncGroup answer REBALANCE_IN_PROGRESS when the member should rejoin: its epoch
  is behind the group's, or it has partitions to revoke, or partitions it waited for are free.
  A classic member's session is its JoinGroup's session timeout; a JoinGroup must be followed by
  its SyncGroup, and a REBALANCE_IN_PROGRESS by a JoinGroup, within the rebalance timeout.
- Downgrade (``ConsumerGroupCoordinator._maybe_downgrade``): when the last member that speaks the
  consumer protocol leaves or is fenced and classic members remain, the group becomes a classic
  group at generation = the group epoch, each member holding its target assignment, and a
  rebalance starts so that they rejoin (``classic_members_of``). Also when a JoinGroup with the
  instance id of that last member replaces it (a static member comes back with the classic
  protocol; Kafka replaces a static member for a classic join without waiting for its leave):
  the newcomer takes its predecessor's assignment and the classic group is Stable, or, if the
  newcomer's subscription differs, rebalancing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from broker.group.assignors import Assignment
from broker.group.consumer_group import (
    JOIN_EPOCH,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerGroupCoordinator,
    ConsumerMember,
    MemberState,
    TopicsView,
)
from broker.group.consumer_protocol import (
    Subscription,
    decode_assignment_with_user_data_untrusted,
    decode_subscription_untrusted,
    encode_assignment,
    protocol_version,
)
from broker.group.coordinator import Group, JoinResult, Member, SyncResult
from protocol.errors import CorruptFrameError, ErrorCode

CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True)
class ClassicJoin:
    """A JoinGroup, decoded (``member_id`` "" for a new member)."""

    group_id: str
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    instance_id: str | None = None
    require_known_member_id: bool = False


# -- upgrade ------------------------------------------------------------------------------------


class UpgradeRefused(Exception):
    """GROUP_ID_NOT_FOUND with Kafka 4.4's message: the classic group stays classic."""


def _refused(group_id: str, because: str) -> UpgradeRefused:
    return UpgradeRefused(f"Cannot upgrade classic group {group_id} to consumer group because "
                          f"{because}.")


def check_upgrade(classic: Group, coordinator: ConsumerGroupCoordinator) -> None:
    """Kafka 4.4's validateOnlineUpgrade: raises UpgradeRefused unless the classic group with
    members may become a consumer group now."""
    config = coordinator.config
    if not config.migration_policy.upgrade:
        raise _refused(classic.group_id, "online upgrade is disabled")
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        raise _refused(classic.group_id, "the group does not use the consumer embedded protocol")
    if len(classic.members) > config.max_size:
        raise _refused(classic.group_id,
                       "the group size exceeds the consumer group maximum size")


def consumer_group_from_classic(classic: Group) -> ConsumerGroup:
    """Kafka 4.4's ConsumerGroup.fromClassicGroup. Raises UpgradeRefused if a member's
    subscription or assignment does not decode, or an assignment carries a custom assignor's
    user data (which the consumer group would lose)."""
    generation = classic.generation_id
    group = ConsumerGroup(classic.group_id, group_epoch=generation, assignment_epoch=generation)
    for m in classic.members.values():
        metadata = m.metadata_for(classic.protocol) if classic.protocol else m.protocols[0][1]
        try:
            subscription = decode_subscription_untrusted(metadata)
            assigned, user_data = decode_assignment_with_user_data_untrusted(m.assignment)
        except CorruptFrameError:
            raise _refused(classic.group_id,
                           "the embedded consumer protocol is malformed") from None
        if user_data:
            raise _refused(classic.group_id, "an unsupported custom assignor is in use. Please "
                           "refer to the documentation or switch to a default assignor before "
                           "re-attempting the upgrade")
        member = ConsumerMember(
            m.member_id, instance_id=m.group_instance_id, rack_id=subscription.rack_id,
            client_id=m.client_id, client_host=m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            member_epoch=generation, previous_member_epoch=generation,
            state=MemberState.STABLE, assigned=assigned,
            classic=ClassicMetadata(m.session_timeout_ms, m.protocols),
        )
        member.assignment_epochs = {(t, p): generation for t, ps in assigned.items() for p in ps}
        group.members[m.member_id] = member
        group.target[m.member_id] = assigned
    return group


# -- downgrade ----------------------------------------------------------------------------------


def classic_members_of(group: ConsumerGroup, now_ms: int) -> list[Member]:
    """The members of the classic group a downgraded consumer group becomes (Kafka's
    ClassicGroup.fromConsumerGroup): each one's target assignment, written in the embedded
    protocol version of its subscription."""
    out = []
    for m in group.members.values():
        classic = m.classic
        if classic is None:
            continue
        version = protocol_version(classic.protocols[0][1]) if classic.protocols else 0
        out.append(Member(
            m.member_id, m.client_id, m.client_host, classic.session_timeout_ms,
            m.rebalance_timeout_ms, CONSUMER_PROTOCOL_TYPE, classic.protocols, now_ms,
            encode_assignment(group.target.get(m.member_id, {}), version), m.instance_id,
        ))
    return out


# -- classic requests to a consumer group ---------------------------------------------------------


def _subscription(protocols: Sequence[tuple[str, bytes]]) -> Subscription | None:
    """The first protocol's subscription (Kafka reads only that one), None if malformed."""
    try:
        return decode_subscription_untrusted(protocols[0][1])
    except CorruptFrameError:
        return None


def _supports(group: ConsumerGroup, member_id: str, protocol_type: str,
              names: frozenset[str]) -> bool:
    """Kafka's ConsumerGroup.supportsClassicProtocols: the "consumer" type and a protocol
    every other classic member supports."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not names:
        return False
    others = [m.classic for mid, m in group.members.items()
              if m.classic is not None and mid != member_id]
    return not others or any(all(name in dict(c.protocols) for c in others) for name in names)


def _member(group: ConsumerGroup, member_id: str, instance_id: str | None
            ) -> tuple[ConsumerMember | None, ErrorCode]:
    """Kafka's validateConsumerGroupMember, for a classic member."""
    if instance_id is None:
        member = group.members.get(member_id)
    else:
        member = group.static_member(instance_id)
        if member is not None and member.member_id != member_id:
            return None, ErrorCode.FENCED_INSTANCE_ID
    if member is None or member.classic is None:
        return None, ErrorCode.UNKNOWN_MEMBER_ID
    return member, ErrorCode.NONE


def _should_rejoin(group: ConsumerGroup, member: ConsumerMember, may_assign: bool) -> bool:
    """Kafka's classicGroupHeartbeatToConsumerGroup: the target moved past the member, or it has
    partitions to revoke, or partitions it waits for are free. Also when the group epoch moved
    and a new target may be computed now (``may_assign``, the assignment interval): the
    member's join computes it, so a group of classic members only never waits for one."""
    if (member.member_epoch < group.assignment_epoch
            or (member.member_epoch < group.group_epoch and may_assign)
            or member.state is MemberState.UNREVOKED_PARTITIONS):
        return True
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        # rejoin once every partition it waits for is free
        missing = {(t, p) for t, ps in group.target.get(member.member_id, {}).items()
                   for p in ps} - set(member.owns())
        busy = {tp for other in group.members.values() if other is not member
                for tp in other.owns()}
        return not (missing & busy)
    return False


def _join_deadline(group: ConsumerGroup, member: ConsumerMember, now_ms: int) -> None:
    if member.classic_deadline_ms is None:
        member.classic_deadline_ms = now_ms + member.rebalance_timeout_ms
        group.next_expiry_ms = min(group.next_expiry_ms, member.classic_deadline_ms)


def classic_join(cg: ConsumerGroupCoordinator, group: ConsumerGroup, req: ClassicJoin,
                 topics: TopicsView, now_ms: int) -> JoinResult:
    """A JoinGroup to a consumer group with members (the caller ran its timers)."""
    unknown = not req.member_id
    member_id = req.member_id or cg.new_member_id()
    static = group.static_member(req.instance_id)
    existing = static if static is not None else group.members.get(member_id)
    if existing is None and len(group.members) >= cg.config.max_size:
        return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id=member_id)
    names = frozenset(name for name, _ in req.protocols)
    if not _supports(group, member_id, req.protocol_type, names):
        return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
    if unknown and req.instance_id is None and req.require_known_member_id:
        return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
    subscription = _subscription(req.protocols)
    if subscription is None:  # Kafka: an IllegalStateException, so UNKNOWN_SERVER_ERROR
        return JoinResult(ErrorCode.UNKNOWN_SERVER_ERROR, member_id=member_id)
    downgrade = False
    if static is not None and static.member_id != member_id:
        if not unknown:
            return JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=member_id)
        # The new incarnation takes it over, whichever protocol the old one spoke (Kafka
        # replaces a static member for a classic join without waiting for its leave); when
        # the old one was the last consumer-protocol member, the group goes back to classic.
        downgrade = cg.may_downgrade_replacing(group, static)
        cg.rename_member(group, static, member_id)
        static.member_epoch = static.previous_member_epoch = JOIN_EPOCH
        static.classic = ClassicMetadata(req.session_timeout_ms, req.protocols)
    member = group.members.get(member_id)
    if member is not None and member.classic is None:
        return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
    if member is None:
        member = group.members[member_id] = ConsumerMember(member_id, member_epoch=JOIN_EPOCH)
    names_before = member.subscribed_topic_names
    member.subscribed_topic_names = tuple(sorted(set(subscription.topics)))
    member.instance_id = req.instance_id or member.instance_id
    member.rack_id = subscription.rack_id or member.rack_id
    member.client_id, member.client_host = req.client_id, req.client_host
    if req.rebalance_timeout_ms != -1:
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
    member.classic = ClassicMetadata(req.session_timeout_ms, req.protocols)
    member.last_heartbeat_ms = now_ms
    group.dirty_members.add(member_id)
    owned: Assignment = {t: ps for t, ps in subscription.owned.items() if ps}
    if downgrade:
        # Kafka's classicGroupJoinToConsumerGroup with a valid downgrade: no new target; the
        # member reconciles with its predecessor's (unless its subscription changed: then the
        # classic group rebalances), and the group becomes classic (classic_members_of).
        if member.subscribed_topic_names != names_before:
            cg.bump_epoch(group)
        rebalance = group.assignment_epoch < group.group_epoch
        if not rebalance:
            cg.reconcile(group, member, owned, now_ms)
        cg.downgrade(group, None, rebalance)
        return JoinResult(ErrorCode.NONE, generation_id=member.member_epoch,
                          protocol_name=req.protocols[0][0], leader="", member_id=member_id,
                          protocol_type=CONSUMER_PROTOCOL_TYPE)
    cg.update_target(group, topics, member.subscribed_topic_names != names_before, now_ms)
    cg.reconcile(group, member, owned, now_ms)
    # the SyncGroup that must follow, within the rebalance timeout
    member.classic_deadline_ms = None
    _join_deadline(group, member, now_ms)
    cg.store(group)
    return JoinResult(ErrorCode.NONE, generation_id=member.member_epoch,
                      protocol_name=req.protocols[0][0], leader="", member_id=member_id,
                      protocol_type=CONSUMER_PROTOCOL_TYPE)


def classic_sync(group: ConsumerGroup, member_id: str, generation_id: int,
                 instance_id: str | None, protocol_type: str | None, protocol_name: str | None,
                 now_ms: int) -> SyncResult:
    member, code = _member(group, member_id, instance_id)
    if member is None:
        return SyncResult(code)
    assert member.classic is not None
    if generation_id != member.member_epoch:
        return SyncResult(ErrorCode.ILLEGAL_GENERATION)
    first = member.classic.protocols[0][0] if member.classic.protocols else ""
    if ((protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE)
            or (protocol_name is not None and protocol_name != first)):
        return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    if (group.assignment_epoch > member.member_epoch  # Kafka's throwIfRebalanceInProgress
            and member.state is not MemberState.UNREVOKED_PARTITIONS):
        _join_deadline(group, member, now_ms)
        return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
    member.classic_deadline_ms = None
    member.last_heartbeat_ms = now_ms
    version = protocol_version(member.classic.protocols[0][1]) if member.classic.protocols else 0
    return SyncResult(ErrorCode.NONE, encode_assignment(member.assigned, version))


def classic_heartbeat(group: ConsumerGroup, member_id: str, generation_id: int,
                      instance_id: str | None, now_ms: int, may_assign: bool = True
                      ) -> ErrorCode:
    member, code = _member(group, member_id, instance_id)
    if member is None:
        return code
    if generation_id != member.member_epoch:
        return ErrorCode.ILLEGAL_GENERATION
    member.last_heartbeat_ms = now_ms
    if _should_rejoin(group, member, may_assign):
        _join_deadline(group, member, now_ms)
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.NONE


def classic_leave(cg: ConsumerGroupCoordinator, group: ConsumerGroup, member_id: str,
                  instance_id: str | None, topics: TopicsView, now_ms: int) -> ErrorCode:
    """One member of a LeaveGroup (Kafka's classicGroupLeaveToConsumerGroup): a static member
    may be named by its instance id alone."""
    if instance_id is None:
        member = group.members.get(member_id)
    else:
        member = group.static_member(instance_id)
        if member is not None and member_id and member.member_id != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
    if member is None or member.classic is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    cg.remove_member(group, member, topics, now_ms)
    return ErrorCode.NONE
