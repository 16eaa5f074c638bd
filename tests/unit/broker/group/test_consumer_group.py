"""The consumer group protocol's coordinator (KIP-848), pure: epochs, target assignments, the
reconciliation table, fencing, leaving, static members, timeouts, regexes, the assignors and the
records that restore a group after a restart."""

from __future__ import annotations

import itertools

import pytest

from broker.group.assignors import range_, uniform
from broker.group.consumer_group import (
    RECONCILE,
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    ConsumerGroupState,
    Finding,
    HeartbeatRequest,
    IllegalMemberTransition,
    MemberState,
    next_member_state,
)
from broker.group.consumer_records import ConsumerGroupReplay, group_records
from protocol.errors import ErrorCode

HB = 1_000
SESSION = 10_000


class Topics:
    def __init__(self, **counts: int) -> None:
        self.counts = dict(counts)

    def partition_count(self, topic: str) -> int | None:
        return self.counts.get(topic)

    def topics(self) -> dict[str, int]:
        return dict(self.counts)


def coordinator(assignment_interval_ms: int = 0) -> ConsumerGroupCoordinator:
    """A coordinator whose targets follow every change at once unless an assignment interval
    (Kafka's default 1 s, tested on its own below) is given."""
    ids = (f"m{i}" for i in itertools.count(1))
    return ConsumerGroupCoordinator(
        ConsumerGroupConfig(heartbeat_interval_ms=HB, session_timeout_ms=SESSION,
                            internal_topics=frozenset({"__consumer_offsets"}),
                            assignment_interval_ms=assignment_interval_ms),
        new_member_id=lambda: next(ids))


def join(c, topics, member_id, now=0, names=("t",), regex=None, instance=None, version=1,
         assignor=None):
    return c.heartbeat(HeartbeatRequest(
        "g", member_id, 0, instance_id=instance, rebalance_timeout_ms=5_000,
        subscribed_topic_names=names, subscribed_topic_regex=regex, server_assignor=assignor,
        owned={}, version=version), topics, now)


def beat(c, topics, member_id, epoch, owned, now=0):
    return c.heartbeat(HeartbeatRequest("g", member_id, epoch, owned=owned), topics, now)


def owned_all(result, prior=None):
    return result.assignment if result.assignment is not None else prior


def test_reconciliation_table_rejects_pairs_it_does_not_list():
    assert next_member_state(MemberState.STABLE, Finding.REVOKE) is MemberState.UNREVOKED_PARTITIONS
    missing = [(s, f) for s in MemberState for f in Finding if (s, f) not in RECONCILE]
    assert (MemberState.STABLE, Finding.STILL_REVOKING) in missing
    with pytest.raises(IllegalMemberTransition):
        next_member_state(MemberState.STABLE, Finding.STILL_REVOKING)


def test_first_member_gets_every_partition_at_epoch_two():
    # A new group starts at epoch 1 (Kafka 4.4); the join bumps it.
    c, topics = coordinator(), Topics(t=4)
    r = join(c, topics, "a")
    assert r.error is ErrorCode.NONE and r.member_epoch == 2 and r.member_id == "a"
    assert r.assignment == {"t": frozenset({0, 1, 2, 3})}
    assert r.heartbeat_interval_ms == HB
    assert c.groups["g"].state is ConsumerGroupState.STABLE
    # An unchanged heartbeat sends no assignment.
    again = beat(c, topics, "a", 2, None, now=100)
    assert again.error is ErrorCode.NONE and again.assignment is None and again.member_epoch == 2


def test_v0_member_gets_an_id_from_the_coordinator():
    c, topics = coordinator(), Topics(t=1)
    r = join(c, topics, "", version=0)
    assert r.error is ErrorCode.NONE and r.member_id == "m1"
    assert join(c, topics, "", version=1).error is ErrorCode.INVALID_REQUEST


def test_revocation_before_assignment_no_partition_owned_twice():
    c, topics = coordinator(), Topics(t=4)
    a = join(c, topics, "a").assignment
    b = join(c, topics, "b", now=10)
    # b is at the new epoch but gets nothing a still owns.
    assert b.member_epoch == 3 and b.assignment == {}
    group = c.groups["g"]
    assert group.state is ConsumerGroupState.RECONCILING
    # a's next heartbeat: keep two, revoke two; a keeps its epoch until it reports.
    ra = beat(c, topics, "a", 2, a, now=20)
    assert ra.member_epoch == 2 and sum(map(len, ra.assignment.values())) == 2
    assert group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    # b still gets nothing: the revoked partitions are a's until a says so.
    assert beat(c, topics, "b", 3, {}, now=30).assignment is None
    # a still reporting the old set: still revoking.
    assert beat(c, topics, "a", 2, a, now=40).member_epoch == 2
    ra2 = beat(c, topics, "a", 2, ra.assignment, now=50)
    assert ra2.member_epoch == 3
    rb = beat(c, topics, "b", 3, {}, now=60)
    assert rb.assignment is not None
    owners = [tp for m in group.members.values() for tp in m.owns()]
    assert len(owners) == len(set(owners)) == 4
    assert group.state is ConsumerGroupState.STABLE


def test_fenced_and_unknown_member_and_lost_response():
    c, topics = coordinator(), Topics(t=2)
    a = join(c, topics, "a")
    assert beat(c, topics, "a", 5, a.assignment).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert beat(c, topics, "x", 2, {}).error is ErrorCode.UNKNOWN_MEMBER_ID
    join(c, topics, "b", now=1)
    beat(c, topics, "a", 2, a.assignment, now=2)
    ra = beat(c, topics, "a", 2, {"t": frozenset({0})}, now=3)
    assert ra.member_epoch == 3
    # The response was lost: the previous epoch with owned partitions it holds is accepted.
    assert beat(c, topics, "a", 2, {"t": frozenset({0})}, now=4).error is ErrorCode.NONE
    assert beat(c, topics, "a", 2, {"t": frozenset({0, 1})}, now=5).error is \
        ErrorCode.FENCED_MEMBER_EPOCH


def test_invalid_requests_and_assignors():
    c, topics = coordinator(), Topics(t=2)
    bad = c.heartbeat(HeartbeatRequest("g", "a", 0, subscribed_topic_names=("t",), owned={}),
                      topics, 0)
    assert bad.error is ErrorCode.INVALID_REQUEST and "RebalanceTimeoutMs" in bad.message
    assert join(c, topics, "a", assignor="sticky").error is ErrorCode.UNSUPPORTED_ASSIGNOR
    assert join(c, topics, "a", names=(), regex="(").error is ErrorCode.INVALID_REGULAR_EXPRESSION
    assert beat(c, topics, "a", 3, {}).error is ErrorCode.GROUP_ID_NOT_FOUND
    assert join(c, topics, "a", assignor="range").error is ErrorCode.NONE
    assert c.groups["g"].assignor == "range"


def test_leave_bumps_the_epoch_and_moves_partitions():
    c, topics = coordinator(), Topics(t=2)
    a = join(c, topics, "a")
    join(c, topics, "b", now=1)
    ra = beat(c, topics, "a", 2, a.assignment, now=2)
    beat(c, topics, "a", 2, ra.assignment, now=3)
    left = c.heartbeat(HeartbeatRequest("g", "b", -1), topics, 4)
    assert left.error is ErrorCode.NONE and left.member_epoch == -1
    group = c.groups["g"]
    assert set(group.members) == {"a"} and group.group_epoch == 4
    r = beat(c, topics, "a", 3, ra.assignment, now=5)
    assert r.member_epoch == 4 and r.assignment == {"t": frozenset({0, 1})}


def test_session_and_rebalance_timeouts_remove_members():
    c, topics = coordinator(), Topics(t=2)
    a = join(c, topics, "a")
    join(c, topics, "b", now=1)
    # a never revokes: at its rebalance timeout (5 s) it is removed.
    ra = beat(c, topics, "a", 2, a.assignment, now=2)
    assert c.groups["g"].members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert c.next_deadline() == 2 + 5_000
    beat(c, topics, "b", 3, {}, now=5_001)
    assert set(c.groups["g"].members) == {"a", "b"}
    rb = beat(c, topics, "b", 3, {}, now=5_002)
    assert set(c.groups["g"].members) == {"b"}
    assert rb.member_epoch == 4 and rb.assignment == {"t": frozenset({0, 1})}
    assert ra.error is ErrorCode.NONE
    # b's session expires without heartbeats: tick removes it.
    c.tick(topics, 5_002 + SESSION)
    assert c.groups["g"].state is ConsumerGroupState.EMPTY


def test_static_member_leaves_and_its_instance_takes_over():
    c, topics = coordinator(), Topics(t=2)
    a = join(c, topics, "a", instance="i1")
    # A second live member with the same instance id is refused.
    assert join(c, topics, "a2", instance="i1").error is ErrorCode.UNRELEASED_INSTANCE_ID
    left = c.heartbeat(HeartbeatRequest("g", "a", -2, instance_id="i1"), topics, 1)
    assert left.member_epoch == -2
    epoch = c.groups["g"].group_epoch
    back = join(c, topics, "a3", instance="i1", now=2)
    assert back.error is ErrorCode.NONE and back.member_epoch == a.member_epoch
    assert back.assignment == a.assignment
    assert set(c.groups["g"].members) == {"a3"} and c.groups["g"].group_epoch == epoch


def test_regex_subscription_follows_new_topics():
    """Kafka resolves regexes off the request path: the first member of a regex gets epoch 1 and
    nothing, the resolution bumps the group epoch, its next heartbeat gets the partitions. New
    topics are matched at most once per heartbeat interval, after a heartbeat's answer."""
    c, topics = coordinator(), Topics(**{"orders-1": 1, "other": 1, "__consumer_offsets": 3})
    first = join(c, topics, "a", names=None, regex="orders-.*")
    assert (first.member_epoch, first.assignment) == (1, {})
    group = c.groups["g"]
    assert (group.group_epoch, group.assignment_epoch) == (2, 1)
    assert group.state is ConsumerGroupState.ASSIGNING
    r = beat(c, topics, "a", 1, {}, now=10)
    assert (r.member_epoch, r.assignment) == (2, {"orders-1": frozenset({0})})
    # A second member of the same (resolved) regex bumps the epoch at once.
    b = join(c, topics, "b", names=None, regex="orders-.*", now=20)
    assert b.member_epoch == 3 and group.group_epoch == 3
    c.heartbeat(HeartbeatRequest("g", "b", -1), topics, 30)
    r = beat(c, topics, "a", 2, r.assignment, now=40)
    assert r.member_epoch == 4
    topics.counts["orders-2"] = 2
    assert beat(c, topics, "a", 4, r.assignment, now=HB - 1).assignment is None
    # at HB the regex is resolved again (after the answer); the next heartbeat gets the news
    assert beat(c, topics, "a", 4, r.assignment, now=HB).assignment is None
    r2 = beat(c, topics, "a", 4, r.assignment, now=HB + 1)
    assert r2.member_epoch == 5
    assert r2.assignment == {"orders-1": frozenset({0}), "orders-2": frozenset({0, 1})}


def test_offset_checks_with_member_epochs():
    c, topics = coordinator(), Topics(t=2)
    a = join(c, topics, "a")
    tp0 = ("t", 0)

    def commit(member, epoch, version=9, txn=False, tps=(tp0,)):
        return c.validate_offset_commit("g", member, epoch, version, tps, transactional=txn)

    assert commit("a", a.member_epoch) == [ErrorCode.NONE]
    assert commit("a", 0) == [ErrorCode.STALE_MEMBER_EPOCH]
    assert commit("a", 7) == [ErrorCode.STALE_MEMBER_EPOCH]
    assert commit("zz", 2) == [ErrorCode.UNKNOWN_MEMBER_ID]
    assert commit("a", 2, version=8) == [ErrorCode.UNSUPPORTED_VERSION]
    assert commit("", -1) == [ErrorCode.UNKNOWN_MEMBER_ID]
    assert c.validate_offset_fetch("g", "a", 0) is ErrorCode.STALE_MEMBER_EPOCH
    assert c.validate_offset_fetch("g", None, -1) is ErrorCode.NONE
    assert commit("a", 0, txn=True) == [ErrorCode.ILLEGAL_GENERATION]
    assert commit("", -1, txn=True) == [ErrorCode.NONE]
    # b joins; a gives up one partition and moves to epoch 3 keeping the other: a commit from
    # epoch 2 still counts for the partition a had since epoch 2, not for the one it gave up.
    join(c, topics, "b", now=1)
    ra = beat(c, topics, "a", 2, a.assignment, now=2)
    beat(c, topics, "a", 2, ra.assignment, now=3)
    kept = next(iter(ra.assignment["t"]))
    gone = 1 - kept
    assert c.groups["g"].members["a"].member_epoch == 3
    assert commit("a", 2, tps=(("t", kept), ("t", gone))) == [
        ErrorCode.NONE, ErrorCode.STALE_MEMBER_EPOCH]
    assert commit("a", 3, tps=(("t", kept),)) == [ErrorCode.NONE]


def test_records_restore_epochs_and_assignments():
    c, topics = coordinator(), Topics(t=4, u=1)
    ids = {"t": __import__("uuid").uuid4(), "u": __import__("uuid").uuid4()}
    names = {v: k for k, v in ids.items()}
    a = join(c, topics, "a", instance="i1")
    join(c, topics, "b", now=1)
    beat(c, topics, "a", 2, a.assignment, now=2)
    replay = ConsumerGroupReplay()
    for _, group in c.take_changes():
        for key, value in group_records(group, ids.get):
            assert replay.apply_untrusted(key, value)
    [restored] = replay.groups(names.get, 100)
    group = c.groups["g"]
    assert (restored.group_epoch, restored.assignment_epoch) == (3, 3)
    # the target's time (KIP-1263's tagged field): the interval holds across a restart
    assert restored.assignment_timestamp_ms == group.assignment_timestamp_ms == 1
    for member_id, member in group.members.items():
        r = restored.members[member_id]
        assert (r.member_epoch, r.previous_member_epoch, r.state, r.assigned,
                r.pending_revocation, r.instance_id, r.subscribed_topic_names) == (
            member.member_epoch, member.previous_member_epoch, member.state, member.assigned,
            member.pending_revocation, member.instance_id, member.subscribed_topic_names)
        assert r.assignment_epochs == member.assignment_epochs
    assert restored.members["a"].assignment_epochs
    assert restored.target == group.target
    # A member that left: tombstones remove it at replay.
    c.heartbeat(HeartbeatRequest("g", "b", -1), topics, 3)
    for _, g in c.take_changes():
        for key, value in group_records(g, ids.get):
            replay.apply_untrusted(key, value)
    [again] = replay.groups(names.get, 200)
    assert set(again.members) == {"a"} and again.group_epoch == 4


def test_uniform_is_balanced_and_sticky():
    subs = {m: frozenset({"t"}) for m in "abc"}
    first = uniform(subs, {"t": 10}, {})
    sizes = sorted(len(a.get("t", ())) for a in first.values())
    assert sizes == [3, 3, 4]
    second = uniform({**subs, "d": frozenset({"t"})}, {"t": 10}, first)
    assert sorted(len(a.get("t", ())) for a in second.values()) == [2, 2, 3, 3]
    # Sticky: the three old members kept partitions they had.
    for m in "abc":
        assert second[m]["t"] <= first[m]["t"]
    every = [p for a in second.values() for p in a.get("t", ())]
    assert sorted(every) == list(range(10))


def test_range_gives_contiguous_ranges_per_topic():
    subs = {"a": frozenset({"t", "u"}), "b": frozenset({"t", "u"})}
    result = range_(subs, {"t": 3, "u": 3}, {})
    assert result["a"] == {"t": frozenset({0, 1}), "u": frozenset({0, 1})}
    assert result["b"] == {"t": frozenset({2}), "u": frozenset({2})}


def test_a_subscribed_topic_created_or_grown_later_bumps_the_epoch():
    c, topics = coordinator(), Topics(t=1)
    r = join(c, topics, "a", names=("t", "later"))
    assert r.assignment == {"t": frozenset({0})}
    topics.counts["later"] = 1
    r2 = beat(c, topics, "a", r.member_epoch, r.assignment, now=1)
    assert r2.member_epoch == r.member_epoch + 1
    assert r2.assignment == {"t": frozenset({0}), "later": frozenset({0})}
    topics.counts["t"] = 2
    r3 = beat(c, topics, "a", r2.member_epoch, r2.assignment, now=2)
    assert r3.assignment == {"t": frozenset({0, 1}), "later": frozenset({0})}


def test_expiry_scans_only_when_the_earliest_deadline_is_due():
    c, topics = coordinator(), Topics(t=2)
    a = join(c, topics, "a")
    join(c, topics, "b", now=5)
    group = c.groups["g"]
    assert c.next_deadline() is not None and c.next_deadline() <= SESSION
    beat(c, topics, "b", 3, {}, now=SESSION - 1)  # b alive; a silent since 0
    assert "a" in group.members
    beat(c, topics, "b", 3, {}, now=SESSION)
    assert set(group.members) == {"b"} and a.error is ErrorCode.NONE
    # a lower bound: b's deadline as of the scan (its heartbeat at SESSION - 1)
    assert c.next_deadline() == 2 * SESSION - 1


def test_assignment_interval_delays_new_targets_as_kafka_4_4():
    """KIP-1263 (group.consumer.assignment.interval.ms, 1 s by default): a second member joining
    right after the first gets the assignment epoch (2), not the group epoch (3), and nothing;
    the group is Assigning until a heartbeat at least an interval after the last target. A
    leave bumps the epoch only: the next heartbeat computes the target."""
    c, topics = coordinator(assignment_interval_ms=1_000), Topics(t=4)
    a = join(c, topics, "a", now=100)
    assert a.member_epoch == 2 and a.assignment == {"t": frozenset({0, 1, 2, 3})}
    b = join(c, topics, "b", now=200)
    group = c.groups["g"]
    assert (b.member_epoch, b.assignment) == (2, {})
    assert (group.group_epoch, group.assignment_epoch) == (3, 2)
    assert group.state is ConsumerGroupState.ASSIGNING
    assert beat(c, topics, "a", 2, a.assignment, now=1_099).assignment is None
    ra = beat(c, topics, "a", 2, a.assignment, now=1_100)  # the interval passed: epoch 3
    assert group.assignment_epoch == 3 and sum(map(len, ra.assignment.values())) == 2
    ra = beat(c, topics, "a", 2, ra.assignment, now=1_200)
    rb = beat(c, topics, "b", 2, {}, now=1_300)
    assert ra.member_epoch == rb.member_epoch == 3 and len(rb.assignment["t"]) == 2
    c.heartbeat(HeartbeatRequest("g", "b", -1), topics, 1_400)
    assert (group.group_epoch, group.assignment_epoch) == (4, 3)
    assert group.state is ConsumerGroupState.ASSIGNING
    assert beat(c, topics, "a", 3, ra.assignment, now=1_500).member_epoch == 3  # too soon
    back = beat(c, topics, "a", 3, ra.assignment, now=2_100)
    assert back.member_epoch == 4 and back.assignment == {"t": frozenset({0, 1, 2, 3})}
    # The last member leaving: the next group's first target comes at once.
    c.heartbeat(HeartbeatRequest("g", "a", -1), topics, 2_200)
    assert group.assignment_timestamp_ms == 0 and group.state is ConsumerGroupState.EMPTY
    assert join(c, topics, "c", now=2_300).assignment == {"t": frozenset({0, 1, 2, 3})}
