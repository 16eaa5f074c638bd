"""The Streams rebalance protocol (KIP-1071) over raw sockets against the real broker process:
StreamsGroupHeartbeat with a topology (internal topics created, statuses for missing source
topics), task assignment with revoke-before-assign, StreamsGroupDescribe, ListGroups type
"streams", DeleteGroups, group ids of another protocol, and the group after a kill -9.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.broker_process import BrokerProcess
from tests.raw_client import RawConnection

BROKER_CONFIG = (
    "group.streams.heartbeat.interval.ms=500\n"
    "group.streams.session.timeout.ms=30000\n"
    "group.streams.num.standby.replicas=1\n"
    "group.streams.initial.rebalance.delay.ms=0\n"
    "offsets.topic.num.partitions=3\n"
    "group.initial.rebalance.delay.ms=0\n"
)
MISSING_SOURCE_TOPICS = 1


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess.configured(tmp_path, BROKER_CONFIG) as proc:
        yield proc


def _port(broker: BrokerProcess) -> int:
    return int(broker.bootstrap.rsplit(":", 1)[1])


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=15)


def _topology(app: str, source: str) -> dict:
    """Two subtopologies: 0 reads ``source`` and writes the repartition topic; 1 reads it and
    counts into a store with a changelog (a word count)."""
    return {"epoch": 0, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [source], "source_topic_regex": [],
         "state_changelog_topics": [], "repartition_sink_topics": [f"{app}-rep"],
         "repartition_source_topics": [], "copartition_groups": []},
        {"subtopology_id": "1", "source_topics": [], "source_topic_regex": [],
         "state_changelog_topics": [{"name": f"{app}-store-changelog", "partitions": 0,
                                     "replication_factor": 0, "topic_configs": [
                                         {"key": "cleanup.policy", "value": "compact"}]}],
         "repartition_sink_topics": [],
         "repartition_source_topics": [{"name": f"{app}-rep", "partitions": 0,
                                        "replication_factor": 0, "topic_configs": []}],
         "copartition_groups": []},
    ]}


def _join(conn: RawConnection, group: str, member: str, process: str, topology: dict):
    return conn.request(ApiKey.STREAMS_GROUP_HEARTBEAT, 1, {
        "group_id": group, "member_id": member, "member_epoch": 0,
        "rebalance_timeout_ms": 30_000, "topology": topology, "process_id": process,
        "active_tasks": [], "standby_tasks": [], "warmup_tasks": []})


def _beat(conn: RawConnection, group: str, member: str, epoch: int, owned=None):
    body = {"group_id": group, "member_id": member, "member_epoch": epoch}
    if owned is not None:
        body.update(owned)
    return conn.request(ApiKey.STREAMS_GROUP_HEARTBEAT, 1, body)


def _tasks(items) -> dict[str, list[int]]:
    return {t.subtopology_id: sorted(t.partitions) for t in items}


def _owned(response) -> dict:
    return {kind: [{"subtopology_id": t.subtopology_id, "partitions": list(t.partitions)}
                   for t in getattr(response, kind)]
            for kind in ("active_tasks", "standby_tasks", "warmup_tasks")}


def _describe(conn: RawConnection, group: str):
    return conn.request(ApiKey.STREAMS_GROUP_DESCRIBE, 1, {
        "group_ids": [group], "include_authorized_operations": False}).groups[0]


def test_streams_group_lifecycle(broker):
    app = "wc"
    with RawConnection(_port(broker)) as conn:
        versions = {k.api_key: (k.min_version, k.max_version)
                    for k in conn.request(ApiKey.API_VERSIONS, 3, {
                        "client_software_name": "t", "client_software_version": "1"}).api_keys}
        assert versions[ApiKey.STREAMS_GROUP_HEARTBEAT] == (0, 1)
        assert versions[ApiKey.STREAMS_GROUP_DESCRIBE] == (0, 1)

        # No source topic yet: NotReady, a status, no tasks.
        first = _join(conn, app, "m1", "p1", _topology(app, "words"))
        assert first.error_code == ErrorCode.NONE and first.member_epoch >= 1
        assert [s.status_code for s in first.status] == [MISSING_SOURCE_TOPICS]
        assert _tasks(first.active_tasks) == {}
        assert _describe(conn, app).group_state == "NotReady"

        # The source topic appears: the next heartbeat creates the internal topics (the
        # repartition topic as wide as its writer, the changelog as its subtopology's tasks)
        # and gives m1 every active task.
        _create(broker.bootstrap, "words", 4)
        second = _beat(conn, app, "m1", first.member_epoch, _owned(first))
        assert second.error_code == ErrorCode.NONE and list(second.status) == []
        assert _tasks(second.active_tasks) == {"0": [0, 1, 2, 3], "1": [0, 1, 2, 3]}
        assert _tasks(second.standby_tasks) == {}  # one process: no standby
        metadata = conn.request(ApiKey.METADATA, 12, {"topics": None,
                                                      "allow_auto_topic_creation": False})
        counts = {t.name: len(t.partitions) for t in metadata.topics}
        assert counts[f"{app}-rep"] == 4 and counts[f"{app}-store-changelog"] == 4
        epoch1 = second.member_epoch

        # A second process joins: m1 must revoke half of its active tasks before m2 gets them.
        joined = _join(conn, app, "m2", "p2", _topology(app, "words"))
        assert joined.error_code == ErrorCode.NONE
        assert _tasks(joined.active_tasks) == {}  # m1 still owns everything m2 would get
        revoke = _beat(conn, app, "m1", epoch1, _owned(second))
        assert revoke.member_epoch == epoch1  # keeps its epoch until it has revoked
        kept = _tasks(revoke.active_tasks)
        assert sum(len(p) for p in kept.values()) == 4
        after = _beat(conn, app, "m1", epoch1, _owned(revoke))
        assert after.member_epoch > epoch1
        m1_standby = _tasks(after.standby_tasks)
        assert m1_standby and sum(len(p) for p in m1_standby.values()) == 4  # stateful "1" only
        assert set(m1_standby) == {"1"}
        got = _beat(conn, app, "m2", joined.member_epoch, _owned(joined))
        m2_active = _tasks(got.active_tasks)
        both = [(s, p) for tasks in (kept, m2_active) for s, ps in tasks.items() for p in ps]
        assert sorted(both) == sorted((s, p) for s in "01" for p in range(4))  # each once
        assert got.member_epoch == after.member_epoch

        described = _describe(conn, app)
        assert described.group_state == "Stable"
        assert described.assignor_name == "sticky"
        assert {m.member_id: m.process_id for m in described.members} == {"m1": "p1", "m2": "p2"}
        sub1 = next(s for s in described.topology.subtopologies if s.subtopology_id == "1")
        assert sub1.state_changelog_topics[0].partitions == 4

        listed = conn.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [],
                                                       "types_filter": ["streams"]})
        assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [
            (app, "streams", "Stable")]

        # Another protocol's heartbeat for this group id: Kafka's error.
        consumer = conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            "group_id": app, "member_id": "c1", "member_epoch": 0,
            "rebalance_timeout_ms": 30_000, "subscribed_topic_names": ["words"],
            "topic_partitions": []})
        assert consumer.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        # ... and a streams heartbeat for a consumer group's id
        assert conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            "group_id": "cg", "member_id": "c1", "member_epoch": 0,
            "rebalance_timeout_ms": 30_000, "subscribed_topic_names": ["words"],
            "topic_partitions": []}).error_code == ErrorCode.NONE
        assert _join(conn, "cg", "m9", "p9", _topology("cg", "words")).error_code == \
            ErrorCode.GROUP_ID_NOT_FOUND

        classic = conn.request(ApiKey.DESCRIBE_GROUPS, 6, {
            "groups": [app], "include_authorized_operations": False}).groups[0]
        assert classic.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        joined_classic = conn.request(ApiKey.JOIN_GROUP, 6, {
            "group_id": app, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]})
        assert joined_classic.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL

        # A bad topology; a fenced epoch.
        bad = _topology("bad", "words")
        bad["subtopologies"][1]["subtopology_id"] = "0"
        assert _join(conn, "bad", "b1", "p", bad).error_code == ErrorCode.STREAMS_INVALID_TOPOLOGY
        assert _beat(conn, app, "m1", 99).error_code == ErrorCode.FENCED_MEMBER_EPOCH

        # Members leave; the empty group is deleted.
        for member in ("m1", "m2"):
            assert _beat(conn, app, member, -1).error_code == ErrorCode.NONE
        assert _describe(conn, app).group_state == "Empty"
        deleted = conn.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": [app, "nope"]})
        assert [r.error_code for r in deleted.results] == [ErrorCode.NONE,
                                                            ErrorCode.GROUP_ID_NOT_FOUND]
        assert _describe(conn, app).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def _alter_group(conn: RawConnection, group: str, **configs: str) -> None:
    altered = conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 32, "resource_name": group,
        "configs": [{"name": k.replace("_", "."), "config_operation": 0, "value": v}
                    for k, v in configs.items()]}], "validate_only": False})
    assert [r.error_code for r in altered.responses] == [ErrorCode.NONE]


def test_streams_group_configs_and_task_offsets(broker):
    """The streams.* GROUP configs apply to the group (the heartbeat interval and task offset
    interval it answers; standby replicas: a change rebalances the group at the next
    heartbeat), and StreamsGroupDescribe shows the task offsets each member last sent."""
    app = "cfg"
    _create(broker.bootstrap, "words", 2)
    with RawConnection(_port(broker)) as conn:
        one = _join(conn, app, "m1", "p1", _topology(app, "words"))
        assert one.heartbeat_interval_ms == 500  # the broker's
        assert one.task_offset_interval_ms == 60_000 and one.acceptable_recovery_lag == 10_000
        owned = {"m1": _owned(one)}
        one = _beat(conn, app, "m1", one.member_epoch, owned["m1"])
        two = _join(conn, app, "m2", "p2", _topology(app, "words"))
        owned["m2"] = _owned(two)
        for _ in range(4):  # reconcile both: m1 revokes, m2 gets its share
            for member, response in (("m1", one), ("m2", two)):
                if response.active_tasks is not None:  # null: unchanged
                    owned[member] = _owned(response)
            one = _beat(conn, app, "m1", one.member_epoch, owned["m1"])
            two = _beat(conn, app, "m2", two.member_epoch, owned["m2"])
        described = _describe(conn, app)
        assert described.group_state == "Stable"
        assert any(m.assignment.standby_tasks for m in described.members)  # standby 1
        epoch = described.group_epoch

        _alter_group(conn, app, streams_heartbeat_interval_ms="6000",
                     streams_num_standby_replicas="0", streams_task_offset_interval_ms="20000")
        body = {"task_offsets": [{"subtopology_id": "1", "partition": 1, "offset": 40},
                                 {"subtopology_id": "1", "partition": 0, "offset": 30}],
                "task_end_offsets": [{"subtopology_id": "1", "partition": 0, "offset": 35}]}
        beat = conn.request(ApiKey.STREAMS_GROUP_HEARTBEAT, 1, {
            "group_id": app, "member_id": "m1", "member_epoch": one.member_epoch, **body})
        assert beat.error_code == ErrorCode.NONE
        assert beat.heartbeat_interval_ms == 6000 and beat.task_offset_interval_ms == 20000
        described = _describe(conn, app)
        assert described.group_epoch == epoch + 1  # the standby count changed: a rebalance
        assert all(not m.target_assignment.standby_tasks for m in described.members)
        m1 = next(m for m in described.members if m.member_id == "m1")
        assert [(t.subtopology_id, t.partition, t.offset) for t in m1.task_offsets] == [
            ("1", 0, 30), ("1", 1, 40)]
        assert [(t.subtopology_id, t.partition, t.offset) for t in m1.task_end_offsets] == [
            ("1", 0, 35)]
        m2 = next(m for m in described.members if m.member_id == "m2")
        assert list(m2.task_offsets) == [] and list(m2.task_end_offsets) == []
        # a heartbeat without them keeps them; v1 asks for the topology description: Kafka
        # 4.4 without a description plugin has none stored
        _beat(conn, app, "m1", beat.member_epoch)
        v1 = conn.request(ApiKey.STREAMS_GROUP_DESCRIBE, 1, {
            "group_ids": [app, "nope"], "include_authorized_operations": False,
            "include_topology_description": True}).groups
        assert [(g.topology_description_status, g.topology_description) for g in v1] == [
            (1, None), (0, None)]
        assert [(t.partition, t.offset) for t in v1[0].members[0].task_offsets
                if v1[0].members[0].member_id == "m1"] in ([(0, 30), (1, 40)], [])
        assert _describe(conn, app).topology_description_status == 0  # not asked


@pytest.mark.slow
def test_streams_group_survives_kill9(broker):
    """Topology, epochs and tasks come back after a kill -9; a deleted group stays deleted."""
    app = "wc"
    _create(broker.bootstrap, "words", 4)
    with RawConnection(_port(broker)) as conn:
        first = _join(conn, app, "m1", "p1", _topology(app, "words"))
        second = _join(conn, app, "m2", "p2", _topology(app, "words"))
        revoke = _beat(conn, app, "m1", first.member_epoch, _owned(first))
        _beat(conn, app, "m1", first.member_epoch, _owned(revoke))
        _beat(conn, app, "m2", second.member_epoch, _owned(second))
        described = _describe(conn, app)
        assert described.group_state == "Stable" and len(described.members) == 2
        state_before = {m.member_id: (m.member_epoch, _tasks(m.assignment.active_tasks))
                        for m in described.members}
        group_epoch = described.group_epoch
    broker.kill9()
    broker.restart()
    with RawConnection(_port(broker)) as conn:
        described = _describe(conn, app)
        assert described.error_code == ErrorCode.NONE
        assert described.group_epoch == group_epoch
        assert {m.member_id: (m.member_epoch, _tasks(m.assignment.active_tasks))
                for m in described.members} == state_before
        assert [s.subtopology_id for s in described.topology.subtopologies] == ["0", "1"]
        epoch = state_before["m1"][0]
        assert _beat(conn, app, "m1", epoch).error_code == ErrorCode.NONE

        # Members leave; the empty group is deleted.
        for member in ("m1", "m2"):
            assert _beat(conn, app, member, -1).error_code == ErrorCode.NONE
        assert _describe(conn, app).group_state == "Empty"
        deleted = conn.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": [app]})
        assert deleted.results[0].error_code == ErrorCode.NONE
        assert _describe(conn, app).error_code == ErrorCode.GROUP_ID_NOT_FOUND

    broker.kill9()
    broker.restart()
    with RawConnection(_port(broker)) as conn:
        assert _describe(conn, app).error_code == ErrorCode.GROUP_ID_NOT_FOUND
