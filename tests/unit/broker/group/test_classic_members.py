"""Groups that change protocol, pure: the embedded consumer protocol codec, the conversion of a
classic group into a consumer group and back, classic members inside a consumer group (join,
sync, heartbeat, timeouts, leave), the migration policy, and the records that keep a classic
member's metadata across a restart."""

from __future__ import annotations

import itertools
import struct
import uuid

import pytest

from broker.group.classic_members import (
    ClassicJoin,
    UpgradeRefused,
    check_upgrade,
    classic_heartbeat,
    classic_join,
    classic_leave,
    classic_members_of,
    classic_sync,
    consumer_group_from_classic,
)
from broker.group.consumer_group import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    HeartbeatRequest,
    MemberState,
    MigrationPolicy,
)
from broker.group.consumer_protocol import (
    decode_assignment_untrusted,
    decode_subscription_untrusted,
    encode_assignment,
)
from broker.group.consumer_records import ConsumerGroupReplay, group_records
from broker.group.coordinator import Group, Member
from broker.group.state import GroupState
from protocol.errors import CorruptFrameError, ErrorCode

from .test_consumer_group import Topics


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def subscription(topics, owned=None, version=1, rack=None) -> bytes:
    out = struct.pack(">hi", version, len(topics)) + b"".join(_s(t) for t in topics)
    out += struct.pack(">i", -1)
    if version >= 1:
        owned = owned or {}
        out += struct.pack(">i", len(owned))
        for topic, parts in owned.items():
            out += _s(topic) + struct.pack(">i", len(parts)) + b"".join(
                struct.pack(">i", p) for p in parts)
    if version >= 2:
        out += struct.pack(">i", 5)
    if version >= 3:
        out += _s(rack) if rack is not None else struct.pack(">h", -1)
    return out


def coordinator(policy=MigrationPolicy.BIDIRECTIONAL, max_size=2**31 - 1):
    ids = (f"m{i}" for i in itertools.count(1))
    return ConsumerGroupCoordinator(
        ConsumerGroupConfig(heartbeat_interval_ms=1_000, session_timeout_ms=10_000,
                            migration_policy=policy, max_size=max_size),
        new_member_id=lambda: next(ids))


def classic_group(members=(("a", [0, 1]), ("b", [2, 3])), generation=3) -> Group:
    group = Group("g", GroupState.STABLE, generation, "consumer", "range", "a")
    for member_id, parts in members:
        group.members[member_id] = Member(
            member_id, "client", "/127.0.0.1", 6_000, 20_000, "consumer",
            (("range", subscription(["t"])),), 0, encode_assignment({"t": frozenset(parts)}))
    return group


def join_request(member_id="", owned=None, protocols=None, **kw) -> ClassicJoin:
    return ClassicJoin("g", member_id, "client", "/127.0.0.1", 6_000, 20_000, "consumer",
                       protocols or (("range", subscription(["t"], owned)),), **kw)


def test_embedded_protocol_codec_every_version_and_bad_input():
    for version in range(4):
        sub = decode_subscription_untrusted(subscription(["t", "u"], {"t": [1, 0]}, version,
                                                         rack="r1"))
        assert sub.topics == ("t", "u")
        assert sub.owned == ({"t": frozenset({0, 1})} if version >= 1 else {})
        assert sub.rack_id == ("r1" if version >= 3 else None)
    data = encode_assignment({"t": frozenset({2, 0}), "u": frozenset({1})}, version=3)
    assert decode_assignment_untrusted(data) == {"t": frozenset({0, 2}), "u": frozenset({1})}
    assert decode_assignment_untrusted(b"") == {}
    for bad in (b"\x00", b"\x00\x01\x7f\xff\xff\xff", subscription(["t"])[:-3],
                b"\x00\x00\x00\x00\x00\x01\x00\x05ab"):
        with pytest.raises(CorruptFrameError):
            decode_subscription_untrusted(bad)


def test_upgrade_keeps_generation_members_and_assignments():
    group = consumer_group_from_classic(classic_group())
    assert (group.group_epoch, group.assignment_epoch) == (3, 3)
    a = group.members["a"]
    assert (a.member_epoch, a.state, a.assigned, a.subscribed_topic_names) == (
        3, MemberState.STABLE, {"t": frozenset({0, 1})}, ("t",))
    assert a.classic is not None and a.classic.session_timeout_ms == 6_000
    assert group.target == {"a": {"t": frozenset({0, 1})}, "b": {"t": frozenset({2, 3})}}


def _refusal(group, c) -> str | None:
    try:
        check_upgrade(group, c)
        consumer_group_from_classic(group)
    except UpgradeRefused as exc:
        return str(exc)
    return None


def test_upgrade_refusals_as_kafka_4_4_words_them():
    assert _refusal(classic_group(), coordinator()) is None
    prefix = "Cannot upgrade classic group g to consumer group because "
    assert _refusal(classic_group(), coordinator(MigrationPolicy.DOWNGRADE)) == \
        prefix + "online upgrade is disabled."
    connect = classic_group()
    connect.protocol_type = "connect"
    assert _refusal(connect, coordinator()) == \
        prefix + "the group does not use the consumer embedded protocol."
    assert _refusal(classic_group(), coordinator(max_size=1)) == \
        prefix + "the group size exceeds the consumer group maximum size."
    malformed = classic_group()
    malformed.members["a"].assignment = b"\x00\x01\x00"
    assert _refusal(malformed, coordinator()) == \
        prefix + "the embedded consumer protocol is malformed."
    custom = classic_group()
    custom.members["b"].assignment = custom.members["b"].assignment[:-4] + b"\x00\x00\x00\x01x"
    assert _refusal(custom, coordinator()).startswith(
        prefix + "an unsupported custom assignor is in use.")
    with pytest.raises(ValueError):
        MigrationPolicy.parse("sideways")
    assert MigrationPolicy.parse(" Upgrade ") is MigrationPolicy.UPGRADE


def _upgraded(policy=MigrationPolicy.BIDIRECTIONAL, instance_id=None):
    c, topics = coordinator(policy), Topics(t=4, u=1)
    c.adopt(consumer_group_from_classic(classic_group()), topics, 0)
    joined = c.heartbeat(HeartbeatRequest("g", "new", 0, rebalance_timeout_ms=20_000,
                                          subscribed_topic_names=("t",), owned={},
                                          instance_id=instance_id), topics, 0)
    assert joined.error is ErrorCode.NONE and joined.member_epoch == 4
    return c, topics, c.groups["g"]


def test_classic_members_rejoin_revoke_then_get_the_new_epoch():
    c, topics, group = _upgraded()
    # the classic member the newcomer takes a partition from
    [giver] = [m for m in ("a", "b") if group.target[m] != group.members[m].assigned]
    assert classic_heartbeat(group, giver, 3, None, 10) is ErrorCode.REBALANCE_IN_PROGRESS
    assert classic_heartbeat(group, giver, 2, None, 10) is ErrorCode.ILLEGAL_GENERATION
    assert classic_heartbeat(group, "zz", 3, None, 10) is ErrorCode.UNKNOWN_MEMBER_ID
    member = group.members[giver]
    owned = sorted(member.assigned["t"])
    joined = classic_join(c, group, join_request(giver, {"t": owned}), topics, 20)
    assert (joined.error, joined.generation_id, joined.leader, joined.members) == (
        ErrorCode.NONE, 3, "", ())
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    synced = classic_sync(group, giver, 3, None, "consumer", "range", 30)
    assert synced.error is ErrorCode.NONE
    kept = decode_assignment_untrusted(synced.assignment)
    assert kept == member.assigned and len(kept["t"]) == 1
    assert classic_sync(group, giver, 3, None, "consumer", "roundrobin", 30).error is \
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert classic_heartbeat(group, giver, 3, None, 35) is ErrorCode.REBALANCE_IN_PROGRESS
    again = classic_join(c, group, join_request(giver, {"t": sorted(kept["t"])}), topics, 40)
    assert again.generation_id == 4 and member.state is MemberState.STABLE
    assert classic_sync(group, giver, 4, None, None, None, 45).error is ErrorCode.NONE
    assert classic_heartbeat(group, giver, 4, None, 50) is ErrorCode.NONE
    # A consumer-protocol member id cannot speak the classic protocol.
    assert classic_heartbeat(group, "new", 4, None, 50) is ErrorCode.UNKNOWN_MEMBER_ID
    # Kafka's answers to new members: an id first (v4+), other protocols refused.
    assert classic_join(c, group, join_request(require_known_member_id=True), topics,
                        50).error is ErrorCode.MEMBER_ID_REQUIRED
    assert classic_join(c, group, join_request(protocols=(("x", subscription(["t"])),)),
                        topics, 50).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert classic_join(c, group, join_request(protocols=(("range", b"\x00"),)),
                        topics, 50).error is ErrorCode.UNKNOWN_SERVER_ERROR


def test_classic_member_that_never_syncs_is_removed_after_its_rebalance_timeout():
    c, topics, group = _upgraded()
    classic_join(c, group, join_request("b", {"t": [2, 3]}), topics, 100)
    for now in (5_000, 10_000, 15_000, 20_000):  # heartbeats keep sessions, not the deadline
        for member in group.members.values():
            member.last_heartbeat_ms = now
        c.tick(topics, now)
    assert set(group.members) == {"a", "b", "new"}
    c.tick(topics, 100 + 20_000)
    assert set(group.members) == {"a", "new"} and c.groups["g"] is group


def test_last_consumer_member_leaving_downgrades_unless_the_policy_forbids():
    c, topics, group = _upgraded()
    epoch = group.group_epoch
    left = c.heartbeat(HeartbeatRequest("g", "new", -1), topics, 50)
    assert left.error is ErrorCode.NONE and "g" not in c.groups
    [(gone, leaving, rebalance)] = c.take_downgrades()
    assert leaving == ["new"] and set(gone.members) == {"a", "b"} and rebalance
    members = classic_members_of(gone, 60)
    assert [m.member_id for m in members] == ["a", "b"]
    # Each keeps its target of the last epoch (the leaver's partitions go in the rebalance
    # the classic group starts, as Kafka's ClassicGroup.fromConsumerGroup).
    assert [decode_assignment_untrusted(m.assignment) for m in members] == [
        gone.target["a"], gone.target["b"]]
    assert gone.group_epoch == epoch
    # "upgrade" only: the group stays a consumer group with its classic members.
    c, topics, group = _upgraded(MigrationPolicy.UPGRADE)
    c.heartbeat(HeartbeatRequest("g", "new", -1), topics, 50)
    assert "g" in c.groups and not c.take_downgrades() and set(group.members) == {"a", "b"}
    # A classic member leaving never downgrades.
    assert classic_leave(c, group, "a", None, topics, 60) is ErrorCode.NONE
    assert classic_leave(c, group, "a", None, topics, 60) is ErrorCode.UNKNOWN_MEMBER_ID


def test_classic_metadata_survives_the_records():
    c, topics, group = _upgraded()
    ids = {"t": uuid.uuid4()}
    replay = ConsumerGroupReplay()
    for _, g in c.take_changes():
        for key, value in group_records(g, ids.get):
            assert replay.apply_untrusted(key, value)
    [restored] = replay.groups({v: k for k, v in ids.items()}.get, 0)
    assert restored.members["a"].classic == group.members["a"].classic
    assert restored.members["new"].classic is None


def _reconciled(c, topics, group, now):
    """Every member at the target: "new" heartbeats, the classic ones rejoin and sync."""
    for _ in range(3):
        member = group.members["new"]
        c.heartbeat(HeartbeatRequest("g", "new", member.member_epoch, owned=member.assigned),
                    topics, now)
        for mid in ("a", "b"):
            m = group.members[mid]
            classic_join(c, group, join_request(mid, {t: sorted(ps) for t, ps in
                                                      m.assigned.items()}), topics, now)
    assert group.state.value == "Stable"


def test_static_classic_member_replacing_the_last_consumer_member_downgrades():
    """Kafka's classicGroupJoinToConsumerGroup: a JoinGroup (unknown member id) with the
    instance id of the last consumer-protocol member replaces it at once and the group becomes
    classic: Stable, the newcomer holding its predecessor's assignment at the group epoch, or,
    if the newcomer subscribes to something else, rebalancing."""
    c, topics, group = _upgraded(instance_id="i1")
    _reconciled(c, topics, group, 100)
    epoch, kept = group.group_epoch, group.members["new"].assigned
    joined = classic_join(c, group, join_request(instance_id="i1"), topics, 200)
    assert (joined.error, joined.generation_id, joined.member_id) == (ErrorCode.NONE, epoch,
                                                                      "m1")
    assert "g" not in c.groups
    [(gone, ids, rebalance)] = c.take_downgrades()
    assert (ids, rebalance, set(gone.members)) == (["new"], False, {"a", "b", "m1"})
    members = {m.member_id: m for m in classic_members_of(gone, 300)}
    assert decode_assignment_untrusted(members["m1"].assignment) == kept
    assert members["m1"].group_instance_id == "i1"
    # A new subscription: the classic group rebalances, the newcomer has no generation yet.
    c, topics, group = _upgraded(instance_id="i1")
    _reconciled(c, topics, group, 100)
    joined = classic_join(c, group, join_request(
        instance_id="i1", protocols=(("range", subscription(["t", "u"])),)), topics, 200)
    assert (joined.error, joined.generation_id) == (ErrorCode.NONE, 0)
    [(gone, _, rebalance)] = c.take_downgrades()
    assert rebalance and gone.group_epoch > gone.assignment_epoch
    # A known member id under another's instance id is fenced; nothing changes.
    c, topics, group = _upgraded(instance_id="i1")
    assert classic_join(c, group, join_request("a", instance_id="i1"), topics, 200).error is \
        ErrorCode.FENCED_INSTANCE_ID
    assert "g" in c.groups and not c.take_downgrades()
    # Without downgrades allowed the group stays a consumer group, its members all classic.
    c, topics, group = _upgraded(MigrationPolicy.UPGRADE, instance_id="i1")
    _reconciled(c, topics, group, 100)
    joined = classic_join(c, group, join_request(instance_id="i1"), topics, 200)
    assert joined.error is ErrorCode.NONE and joined.generation_id == group.group_epoch
    assert c.groups["g"] is group and not c.take_downgrades()
    assert set(group.members) == {"a", "b", "m1"}
    assert all(m.classic is not None for m in group.members.values())
    assert group.members["m1"].assigned == kept


def test_consumer_member_replaces_a_static_classic_member_without_its_leave():
    """Kafka's getOrMaybeSubscribeStaticConsumerGroupMember: only a consumer-protocol
    predecessor must have left (UNRELEASED_INSTANCE_ID); a classic one is replaced at once."""
    c, topics, group = _upgraded()
    classic_join(c, group, join_request("a", {"t": [0, 1]}, instance_id="ia"), topics, 10)
    joined = c.heartbeat(HeartbeatRequest("g", "a2", 0, rebalance_timeout_ms=20_000,
                                          subscribed_topic_names=("t",), owned={},
                                          instance_id="ia"), topics, 20)
    assert joined.error is ErrorCode.NONE and joined.member_id == "a2"
    assert "a" not in group.members and group.members["a2"].classic is None
    again = c.heartbeat(HeartbeatRequest("g", "a3", 0, rebalance_timeout_ms=20_000,
                                         subscribed_topic_names=("t",), owned={},
                                         instance_id="ia"), topics, 30)
    assert again.error is ErrorCode.UNRELEASED_INSTANCE_ID


def test_classic_members_rejoin_once_a_new_target_may_be_computed():
    """Within the assignment interval (KIP-1263) the target stays at its epoch: a classic member
    at it keeps syncing and heartbeating (Kafka's checks use the assignment epoch); once a new
    target may be computed, its heartbeat asks it to rejoin, and the join computes it."""
    c, topics, group = _upgraded(instance_id="i1")
    _reconciled(c, topics, group, 100)
    epoch = group.group_epoch
    c.heartbeat(HeartbeatRequest("g", "new2", 0, rebalance_timeout_ms=20_000,
                                 subscribed_topic_names=("t",), owned={}), topics, 200)
    assert (group.group_epoch, group.assignment_epoch) == (epoch + 1, epoch)
    assert classic_heartbeat(group, "a", epoch, None, 300, c.may_assign(group, 300)) is \
        ErrorCode.NONE
    assert classic_sync(group, "a", epoch, None, None, None, 300).error is ErrorCode.NONE
    assert classic_heartbeat(group, "a", epoch, None, 1_100, c.may_assign(group, 1_100)) is \
        ErrorCode.REBALANCE_IN_PROGRESS
    a = group.members["a"]
    classic_join(c, group, join_request("a", {t: sorted(ps) for t, ps in a.assigned.items()}),
                 topics, 1_200)
    assert group.assignment_epoch == epoch + 1
