"""The Streams protocol's pure parts (KIP-1071): topology configuration, the sticky task
assignor, reconciliation (revoke before assign), epochs and timers, offsets validation, and the
records in ``__consumer_offsets`` (written, replayed, the same group back)."""

from __future__ import annotations

import pytest

from broker.group.streams_assignor import MemberSpec, TaskSet, assign_tasks
from broker.group.streams_group import RECONCILE, StreamsGroupCoordinator
from broker.group.streams_model import (
    HeartbeatRequest,
    MemberState,
    StreamsGroupConfig,
    StreamsGroupSettings,
    StreamsGroupState,
)
from broker.group.streams_records import StreamsGroupReplay, group_records
from broker.group.streams_topology import (
    CopartitionGroup,
    Status,
    Subtopology,
    TopicInfo,
    Topology,
    configure,
    validate_topology,
)
from protocol.errors import ErrorCode


class Topics:
    def __init__(self, **counts: int) -> None:
        self.counts = dict(counts)

    def partition_count(self, topic: str) -> int | None:
        return self.counts.get(topic)

    def topics(self) -> dict[str, int]:
        return self.counts


def _exact(pattern: str):
    return lambda name: name == pattern


WORDCOUNT = Topology(0, (
    Subtopology("0", source_topics=("words",), repartition_sink_topics=("app-rep",)),
    Subtopology("1", state_changelog_topics=(TopicInfo("app-store-changelog"),),
                repartition_source_topics=(TopicInfo("app-rep"),)),
))


def test_configure_derives_internal_topic_partitions():
    configured = configure(WORDCOUNT, Topics(words=4), _exact)
    assert configured.task_counts == {"0": 4, "1": 4}
    assert {n: t.partitions for n, t in configured.internal_topics.items()} == {
        "app-rep": 4, "app-store-changelog": 4}
    assert [s for s, _ in configured.status] == [Status.MISSING_INTERNAL_TOPICS]
    ready = configure(WORDCOUNT, Topics(words=4, **{"app-rep": 4, "app-store-changelog": 4}),
                      _exact)
    assert ready.ready and ready.status == []


def test_configure_statuses():
    missing = configure(WORDCOUNT, Topics(), _exact)
    assert not missing.ready and missing.status[0][0] is Status.MISSING_SOURCE_TOPICS
    assert "words" in missing.status[0][1]
    wrong = configure(WORDCOUNT, Topics(words=4, **{"app-rep": 2}), _exact)
    assert wrong.status[0][0] is Status.INCORRECTLY_PARTITIONED_TOPICS
    join = Topology(0, (Subtopology("0", source_topics=("a", "b"),
                                    copartition_groups=(CopartitionGroup((0, 1)),)),))
    assert configure(join, Topics(a=2, b=3), _exact).status[0][0] is \
        Status.INCORRECTLY_PARTITIONED_TOPICS
    assert configure(join, Topics(a=3, b=3), _exact).ready


def test_validate_topology():
    assert validate_topology(WORDCOUNT) is None
    duplicate = Topology(0, (Subtopology("0", ("a",)), Subtopology("0", ("b",))))
    assert "not unique" in (validate_topology(duplicate) or "")
    out_of_range = Topology(0, (Subtopology("0", ("a",), copartition_groups=(
        CopartitionGroup((3,)),)),))
    assert "out of range" in (validate_topology(out_of_range) or "")


def test_assignor_is_sticky_balanced_and_places_standbys_apart():
    counts = {"0": 4, "1": 4}
    first = assign_tasks({"a": MemberSpec("p1")}, counts, {"1"}, 1)
    assert sum(len(p) for p in first["a"].active.values()) == 8
    assert first["a"].standby == {}  # one process: nowhere to put a standby
    second = assign_tasks({"a": MemberSpec("p1", first["a"].active), "b": MemberSpec("p2")},
                          counts, {"1"}, 1)
    a_tasks = {(s, p) for s, ps in second["a"].active.items() for p in ps}
    b_tasks = {(s, p) for s, ps in second["b"].active.items() for p in ps}
    assert len(a_tasks) == len(b_tasks) == 4 and not a_tasks & b_tasks
    assert a_tasks <= {(s, p) for s, ps in first["a"].active.items() for p in ps}  # sticky
    for me, other in (("a", b_tasks), ("b", a_tasks)):
        standby = {(s, p) for s, ps in second[me].standby.items() for p in ps}
        assert standby == {t for t in other if t[0] == "1"}  # stateful tasks only, elsewhere
    # same process: no standby beside the active copy
    same = assign_tasks({"a": MemberSpec("p"), "b": MemberSpec("p")}, counts, {"1"}, 1)
    assert all(not t.standby for t in same.values())


def _join(member: str, process: str = "p1", topology: Topology = WORDCOUNT):
    return HeartbeatRequest("app", member, 0, rebalance_timeout_ms=1000, topology=topology,
                            owned=TaskSet(), process_id=process)


def _beat(member: str, epoch: int, owned: TaskSet | None = None):
    return HeartbeatRequest("app", member, epoch, owned=owned)


READY = Topics(words=2, **{"app-rep": 2, "app-store-changelog": 2})


def test_revoke_before_assign_then_replay():
    c = StreamsGroupCoordinator(StreamsGroupConfig(num_standby_replicas=0), _exact)
    one = c.heartbeat(_join("m1"), READY, 0)
    assert one.error is ErrorCode.NONE and one.member_epoch == 2  # a new group starts at epoch 1 (Kafka 4.4)
    assert one.tasks == TaskSet({"0": frozenset({0, 1}), "1": frozenset({0, 1})})
    two = c.heartbeat(_join("m2", "p2"), READY, 10)
    assert two.tasks == TaskSet()  # everything still active at m1
    group = c.groups["app"]
    assert group.state is StreamsGroupState.RECONCILING
    revoke = c.heartbeat(_beat("m1", 2, one.tasks), READY, 20)
    assert revoke.member_epoch == 2 and revoke.tasks is not None
    assert group.members["m1"].state is MemberState.UNREVOKED_TASKS
    still = c.heartbeat(_beat("m2", two.member_epoch, TaskSet()), READY, 25)
    assert still.tasks is None or still.tasks == TaskSet()  # m1 has not revoked yet
    done = c.heartbeat(_beat("m1", 2, revoke.tasks), READY, 30)
    assert done.member_epoch == 3
    got = c.heartbeat(_beat("m2", two.member_epoch, TaskSet()), READY, 40)
    assert got.member_epoch == 3 and got.tasks is not None
    assert group.state is StreamsGroupState.STABLE
    mine = {(s, p) for s, ps in revoke.tasks.active.items() for p in ps}
    theirs = {(s, p) for s, ps in got.tasks.active.items() for p in ps}
    assert not mine & theirs and len(mine | theirs) == 4

    # a heartbeat that changes nothing writes nothing
    records = [r for _, changed in c.take_changes() if changed for r in group_records(changed)]
    assert c.heartbeat(_beat("m1", 3), READY, 45).tasks is None
    assert c.take_changes() == []

    # fenced epochs; a leave bumps the group epoch
    assert c.heartbeat(_beat("m1", 7), READY, 50).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert c.heartbeat(_beat("nobody", 1), READY, 50).error is ErrorCode.UNKNOWN_MEMBER_ID

    # offsets: the member's epoch, or epoch -1 with no member while empty
    assert c.validate_offset_commit("app", "m1", 3, 9, [("words", 0)]) == [ErrorCode.NONE]
    assert c.validate_offset_commit("app", "m1", 2, 9, [("words", 0)]) == [
        ErrorCode.STALE_MEMBER_EPOCH]
    assert c.validate_offset_commit("app", "m1", 2, 5, [("words", 0)], True) == [
        ErrorCode.ILLEGAL_GENERATION]
    assert c.validate_offset_commit("app", "x", 3, 9, [("words", 0)]) == [
        ErrorCode.UNKNOWN_MEMBER_ID]

    # the records replay to the same group
    for _group_id, changed in c.take_changes():
        assert changed is not None
        records += group_records(changed)
    replay = StreamsGroupReplay()
    for key, value in records:
        assert replay.apply_untrusted(key, value)
    (back,) = replay.groups(0)
    assert back.group_epoch == group.group_epoch and back.topology == WORDCOUNT
    assert {m: (v.member_epoch, v.assigned, v.process_id) for m, v in back.members.items()} == {
        m: (v.member_epoch, v.assigned, v.process_id) for m, v in group.members.items()}
    assert back.target == group.target


def test_session_expiry_and_validation():
    c = StreamsGroupCoordinator(StreamsGroupConfig(session_timeout_ms=100), _exact)
    c.heartbeat(_join("m1"), READY, 0)
    c.heartbeat(_join("m2", "p2"), READY, 0)
    epoch = c.groups["app"].group_epoch
    c.heartbeat(_beat("m2", c.groups["app"].members["m2"].member_epoch), READY, 90)
    c.tick(READY, 150)
    assert list(c.groups["app"].members) == ["m2"] and c.groups["app"].group_epoch > epoch
    bad = HeartbeatRequest("app", "m3", 0, rebalance_timeout_ms=1000, owned=TaskSet(),
                           process_id="p")
    assert c.heartbeat(bad, READY, 160).error is ErrorCode.INVALID_REQUEST  # no topology
    newer = Topology(1, WORDCOUNT.subtopologies)
    refused = c.heartbeat(_join("m3", "p3", newer), READY, 160)
    assert refused.error is ErrorCode.STREAMS_INVALID_TOPOLOGY_EPOCH


@pytest.mark.parametrize("pair", sorted(RECONCILE, key=str))
def test_reconcile_table_is_total_over_its_states(pair):
    assert RECONCILE[pair] in MemberState


def test_endpoint_map_for_interactive_queries():
    c = StreamsGroupCoordinator(StreamsGroupConfig(), _exact)
    join = HeartbeatRequest("app", "m1", 0, rebalance_timeout_ms=1000, topology=WORDCOUNT,
                            owned=TaskSet(), process_id="p1", user_endpoint=("h1", 7001))
    one = c.heartbeat(join, READY, 0)
    assert one.endpoint_information_epoch >= 1
    assert one.endpoints == [(("h1", 7001), {"app-rep": [0, 1], "words": [0, 1]}, {})]
    current = c.heartbeat(HeartbeatRequest("app", "m1", one.member_epoch,
                                           endpoint_information_epoch=one.endpoint_information_epoch),
                          READY, 10)
    assert current.endpoints is None  # up to date: not sent again
    no_endpoint = StreamsGroupCoordinator(StreamsGroupConfig(), _exact)
    assert no_endpoint.heartbeat(_join("m1"), READY, 0).endpoints is None


def _tasks_of(tasks: dict) -> set[tuple[str, int]]:
    return {(s, p) for s, ps in tasks.items() for p in ps}


def test_assignor_gives_a_task_to_the_member_holding_its_state():
    """Kafka 4.4's sticky assignor: a task whose owner is gone goes to the member that reports
    its state (TaskOffsets: a restarted instance under a new member id), not the first by id;
    among standby holders the most caught-up one first."""
    counts = {"0": 2, "1": 2}
    specs = {"a": MemberSpec("p1"), "z": MemberSpec("p2", task_offsets={"1": {0: 50, 1: 70}})}
    got = assign_tasks(specs, counts, {"1"}, 0)
    assert _tasks_of(got["z"].active) == {("1", 0), ("1", 1)}
    assert _tasks_of(got["a"].active) == {("0", 0), ("0", 1)}
    # standby of a stateful task: the member that ran it as active before, else the standby
    # holder with the highest offset sum
    specs = {"a": MemberSpec("p1"), "y": MemberSpec("p2", standby={"1": frozenset({0})},
                                                     task_offsets={"1": {0: 10}}),
             "z": MemberSpec("p3", standby={"1": frozenset({0})}, task_offsets={"1": {0: 90}})}
    got = assign_tasks(specs, {"1": 1}, {"1"}, 1)
    owner = next(m for m, t in got.items() if t.active)
    holder = next(m for m, t in got.items() if t.standby)
    assert owner == "z" and holder == "y"  # the freshest state runs it; the next keeps a copy
    # a task that moves away keeps a standby copy where it ran (over the least loaded by id)
    moved = assign_tasks({"z": MemberSpec("p1", active={"1": frozenset({0, 1})}),
                          "a": MemberSpec("p2"), "b": MemberSpec("p3")},
                         {"1": 2}, {"1"}, 1)
    assert _tasks_of(moved["z"].active) == {("1", 0)} and _tasks_of(moved["a"].active) == {
        ("1", 1)}
    assert _tasks_of(moved["z"].standby) == {("1", 1)}
    assert _tasks_of(moved["b"].standby) == {("1", 0)}


def test_task_offsets_kept_per_member_and_validated():
    c = StreamsGroupCoordinator(StreamsGroupConfig(), _exact)
    one = c.heartbeat(_join("m1"), READY, 0)
    group = c.groups["app"]
    assert "m1" not in group.task_offsets
    sent = HeartbeatRequest("app", "m1", one.member_epoch,
                            task_offsets=(("1", 0, 5), ("1", 1, 7)),
                            task_end_offsets=(("1", 0, 9),))
    assert c.heartbeat(sent, READY, 10).error is ErrorCode.NONE
    assert group.task_offsets["m1"].offsets == {"1": {0: 5, 1: 7}}
    assert group.task_offsets["m1"].end_offsets == {"1": {0: 9}}
    # null: unchanged; each list on its own
    c.heartbeat(HeartbeatRequest("app", "m1", one.member_epoch, task_offsets=(("1", 0, 6),)),
                READY, 20)
    assert group.task_offsets["m1"].offsets == {"1": {0: 6}}
    assert group.task_offsets["m1"].end_offsets == {"1": {0: 9}}
    dup = HeartbeatRequest("app", "m1", one.member_epoch,
                           task_end_offsets=(("1", 0, 1), ("1", 0, 2)))
    refused = c.heartbeat(dup, READY, 30)
    assert refused.error is ErrorCode.INVALID_REQUEST
    assert refused.message == ("Task offsets contain a duplicate entry for subtopology 1 and "
                               "partition 0.")
    assert group.task_offsets["m1"].end_offsets == {"1": {0: 9}}
    c.heartbeat(HeartbeatRequest("app", "m1", -1), READY, 40)
    assert "m1" not in group.task_offsets


def test_group_settings_apply_per_group_and_survive_replay():
    """The streams.* GROUP configs (a settings lookup per group): session timeout and heartbeat
    interval per group; a change of the standby count rebalances at the next heartbeat, and the
    configs the target was computed with are stored (Kafka's LastAssignmentConfigs), so a
    replayed group is not rebalanced again."""
    settings = {"app": StreamsGroupSettings(session_timeout_ms=100, heartbeat_interval_ms=7)}
    config = StreamsGroupConfig(settings=lambda g: settings.get(g, StreamsGroupSettings()))
    c = StreamsGroupCoordinator(config, _exact)
    one = c.heartbeat(_join("m1"), READY, 0)
    assert one.heartbeat_interval_ms == 7
    other = HeartbeatRequest("other", "o1", 0, rebalance_timeout_ms=1000, topology=WORDCOUNT,
                             owned=TaskSet(), process_id="p")
    assert c.heartbeat(other, READY, 0).heartbeat_interval_ms == 5_000
    group = c.groups["app"]
    assert group.last_assignment_configs == {"num.standby.replicas": "0"}
    assert c.next_deadline() == 100
    c.tick(READY, 100)
    assert not group.members and c.groups["other"].members  # 45 s for the other group

    one = c.heartbeat(_join("m1"), READY, 200)
    c.heartbeat(_join("m2", "p2"), READY, 200)
    epoch = group.group_epoch
    assert c.heartbeat(_beat("m1", one.member_epoch), READY, 210).error is ErrorCode.NONE
    assert group.group_epoch == epoch  # nothing changed
    settings["app"] = StreamsGroupSettings(session_timeout_ms=100, num_standby_replicas=1)
    c.heartbeat(_beat("m1", one.member_epoch), READY, 220)
    assert group.group_epoch == epoch + 1
    assert any(t.standby for t in group.target.values())
    assert group.last_assignment_configs == {"num.standby.replicas": "1"}

    records = [r for _, changed in c.take_changes() if changed for r in group_records(changed)]
    replay = StreamsGroupReplay()
    for key, value in records:
        replay.apply_untrusted(key, value)
    back = next(g for g in replay.groups(230) if g.group_id == "app")
    assert back.last_assignment_configs == {"num.standby.replicas": "1"}
    again = StreamsGroupCoordinator(config, _exact)
    again.load_group(back, READY)
    again.heartbeat(_beat("m1", back.members["m1"].member_epoch), READY, 240)
    assert again.groups["app"].group_epoch == back.group_epoch  # no second rebalance


def test_missing_client_tags_and_shutdown_statuses():
    """Kafka 4.4's statuses: a v1 member without a tag of streams.rack.aware.assignment.tags
    hears MISSING_CLIENT_TAGS (v0: not); SHUTDOWN_APPLICATION names the first member that asked
    and is cleared when the group empties."""
    tags = StreamsGroupSettings(rack_aware_assignment_tags=("zone", "rack"))
    c = StreamsGroupCoordinator(StreamsGroupConfig(settings=lambda g: tags), _exact)
    join = HeartbeatRequest("app", "m1", 0, rebalance_timeout_ms=1000, topology=WORDCOUNT,
                            owned=TaskSet(), process_id="p1", client_tags=(("zone", "a"),))
    one = c.heartbeat(join, READY, 0)
    assert one.status == ((Status.MISSING_CLIENT_TAGS,
                           "Missing required client tags for rack-aware standby assignment: "
                           "[rack]. Configure them via 'client.tag.<tagKey>' in your Streams "
                           "config."),)
    v0 = HeartbeatRequest("app", "m1", one.member_epoch, api_version=0)
    assert c.heartbeat(v0, READY, 1).status == ()
    c.heartbeat(_join("m2", "p2"), READY, 2)
    for member in ("m2", "m1"):
        asked = HeartbeatRequest("app", member, c.groups["app"].members[member].member_epoch,
                                 shutdown_application=True, api_version=0)
        status = c.heartbeat(asked, READY, 3).status
    assert status[-1] == (Status.SHUTDOWN_APPLICATION,
                          "Streams group member m2 encountered a fatal error and requested a "
                          "shutdown for the entire application.")
    for member in ("m1", "m2"):
        c.heartbeat(HeartbeatRequest("app", member, -1), READY, 4)
    assert c.groups["app"].shutdown_requested_by is None


def test_initial_rebalance_delay():
    """Kafka 4.4's streams.initial.rebalance.delay.ms: the first member of an empty group waits
    (status ASSIGNMENT_DELAYED, no tasks, group Assigning) while more join; at its end one
    target covers them all."""
    c = StreamsGroupCoordinator(StreamsGroupConfig(initial_rebalance_delay_ms=3000), _exact)
    one = c.heartbeat(_join("m1"), READY, 0)
    assert one.tasks == TaskSet() and one.member_epoch == 1
    assert [code for code, _ in one.status] == [Status.ASSIGNMENT_DELAYED]
    group = c.groups["app"]
    assert group.state is StreamsGroupState.ASSIGNING and c.next_deadline() == 3000
    two = c.heartbeat(_join("m2", "p2"), READY, 1000)
    assert two.tasks == TaskSet() and two.status[0][0] is Status.ASSIGNMENT_DELAYED
    c.tick(READY, 3000)  # the timer: both members in one target
    assert group.assignment_epoch == group.group_epoch == 3
    assert all(group.target[m].active for m in ("m1", "m2"))
    got = c.heartbeat(_beat("m1", one.member_epoch, TaskSet()), READY, 3100)
    assert got.member_epoch == 3 and got.tasks is not None and got.tasks.active
    assert got.status == ()
    # a heartbeat during the delay changes nothing (the configs went with the epoch)
    c2 = StreamsGroupCoordinator(StreamsGroupConfig(initial_rebalance_delay_ms=1000), _exact)
    first = c2.heartbeat(_join("m1"), READY, 0)
    c2.heartbeat(_beat("m1", first.member_epoch, TaskSet()), READY, 10)
    assert c2.groups["app"].group_epoch == 2
