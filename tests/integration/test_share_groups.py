"""Share groups (KIP-932) over the wire, request by request, against the real broker process:
acquisition, acknowledgement, redelivery after a lock or a member that vanished, the delivery
limit, read_committed, and the share state across a clean restart and a kill -9.

(Kafka's own share consumer against minibroker and Kafka: tests/kafka_ref/test_share_groups.py.)
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.broker_process import BrokerProcess
from tests.raw_client import RawConnection

LOCK_MS = 1000
CONFIG = (f"group.share.record.lock.duration.ms={LOCK_MS}\n"
          "group.share.delivery.count.limit=3\n")
ACCEPT, RELEASE, REJECT = 1, 2, 3
COORDINATOR_WAIT = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    ErrorCode.NOT_COORDINATOR}


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess.configured(tmp_path, CONFIG) as proc:
        yield proc


def create_topic(port: int, name: str, partitions: int = 1) -> uuid.UUID:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=10)
    with RawConnection(port) as conn:
        meta = conn.request(ApiKey.METADATA, 12, {"topics": [{"name": name}]})
    return meta.topics[0].topic_id


def produce(port: int, topic: str, n: int, transactional: str | None = None,
            abort: bool = False) -> None:
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 0}
    if transactional:
        conf["transactional.id"] = transactional
    producer = Producer(conf)
    if transactional:
        producer.init_transactions(10)
        producer.begin_transaction()
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i)
        producer.flush(10)  # one batch per record: acknowledgements split nothing
    if transactional:
        (producer.abort_transaction if abort else producer.commit_transaction)(10)
    assert producer.flush(10) == 0


def set_group_config(port: int, group: str, key: str, value: str) -> None:
    with RawConnection(port) as conn:
        answer = conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": 32, "resource_name": group,
            "configs": [{"name": key, "config_operation": 0, "value": value}]}]})
    assert answer.responses[0].error_code == 0, answer


class Member:
    """One share consumer as raw requests: a heartbeat to join, then a share session."""

    def __init__(self, port: int, group: str, topic: str, topic_id: uuid.UUID) -> None:
        self.conn = RawConnection(port)
        self.group, self.topic_id = group, topic_id
        self.member_id = str(uuid.uuid4())
        deadline = time.monotonic() + 30
        while True:  # Kafka answers NOT_COORDINATOR until its group coordinator has loaded
            found = self.conn.request(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
            beat = self.conn.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
                "group_id": group, "member_id": self.member_id, "member_epoch": 0,
                "subscribed_topic_names": [topic]})
            if found.error_code == 0 and beat.error_code not in COORDINATOR_WAIT:
                break
            assert time.monotonic() < deadline, (found, beat)
            time.sleep(0.5)
        assert beat.error_code == 0, beat
        self.epoch = beat.member_epoch
        self.assignment = beat.assignment
        self.session_epoch = 0

    def fetch(self, acks: list[tuple[int, int, list[int]]] = (), max_wait_ms: int = 0,
              max_records: int = 500):
        body = {"group_id": self.group, "member_id": self.member_id,
                "share_session_epoch": self.session_epoch, "max_wait_ms": max_wait_ms,
                "min_bytes": 1, "max_bytes": 1 << 20, "max_records": max_records,
                "batch_size": max_records,
                "topics": [{"topic_id": self.topic_id, "partitions": [{
                    "partition_index": 0, "acknowledgement_batches": [
                        {"first_offset": a, "last_offset": b, "acknowledge_types": t}
                        for a, b, t in acks]}]}]}
        answer = self.conn.request(ApiKey.SHARE_FETCH, 1, body)
        if answer.error_code == 0 and self.session_epoch != -1:
            self.session_epoch += 1
        return answer

    def acknowledge(self, acks: list[tuple[int, int, list[int]]], close: bool = False):
        body = {"group_id": self.group, "member_id": self.member_id,
                "share_session_epoch": -1 if close else self.session_epoch,
                "topics": [{"topic_id": self.topic_id, "partitions": [{
                    "partition_index": 0, "acknowledgement_batches": [
                        {"first_offset": a, "last_offset": b, "acknowledge_types": t}
                        for a, b, t in acks]}]}]}
        answer = self.conn.request(ApiKey.SHARE_ACKNOWLEDGE, 1, body)
        if answer.error_code == 0 and not close:
            self.session_epoch += 1
        return answer

    def close(self) -> None:
        self.conn.close()


def acquired(answer) -> list[tuple[int, int, int]]:
    assert answer.error_code == 0, answer
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in answer.responses for p in t.partitions for a in p.acquired_records]


def fetch_until(member: Member, want: int, timeout: float = 10.0) -> list[tuple[int, int, int]]:
    got: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + timeout
    while sum(b - a + 1 for a, b, _ in got) < want:
        assert time.monotonic() < deadline, f"acquired only {got}"
        got += acquired(member.fetch(max_wait_ms=500))
    return got


def offsets(ranges) -> list[int]:
    return sorted(o for a, b, *_ in ranges for o in range(a, b + 1))


def test_members_share_a_partition_and_acknowledge_once(broker) -> None:
    port = broker.port
    tid = create_topic(port, "q")
    set_group_config(port, "g", "share.auto.offset.reset", "earliest")
    a, b = Member(port, "g", "q", tid), Member(port, "g", "q", tid)
    try:
        assert [tp.partitions for tp in b.assignment.topic_partitions] == [[0]]
        produce(port, "q", 6)
        first = fetch_until(a, 6)
        assert offsets(first) == list(range(6)) and {d for *_, d in first} == {1}
        # everything is locked by a: b gets nothing
        assert acquired(b.fetch()) == []
        # a accepts 0-1, releases 2-3 (b gets them, second delivery), rejects 4, keeps 5
        answer = a.acknowledge([(0, 1, [ACCEPT]), (2, 3, [RELEASE]), (4, 4, [REJECT])])
        assert answer.responses[0].partitions[0].error_code == 0
        assert acquired(b.fetch()) == [(2, 3, 2)]
        # acknowledging what another member holds, or what is done, is INVALID_RECORD_STATE
        bad = a.acknowledge([(2, 2, [ACCEPT])])
        assert bad.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
        # acknowledgements ride on the next fetch too
        fetched = b.fetch(acks=[(2, 3, [ACCEPT])])
        assert fetched.responses[0].partitions[0].acknowledge_error_code == 0
        a.acknowledge([(5, 5, [ACCEPT])])
        # the group and its members as ShareGroupDescribe shows them
        with RawConnection(port) as conn:
            described = conn.request(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": ["g", "nope"]})
        group, missing = described.groups
        assert group.group_state == "Stable" and len(group.members) == 2
        assert group.members[0].assignment.topic_partitions[0].topic_name == "q"
        assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    finally:
        a.close()
        b.close()


def test_session_epochs_are_checked(broker) -> None:
    port = broker.port
    tid = create_topic(port, "q")
    m = Member(port, "g", "q", tid)
    try:
        assert m.fetch().error_code == 0
        m.session_epoch = 7
        assert m.fetch().error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        m.session_epoch = 0
        assert m.fetch(acks=[(0, 0, [ACCEPT])]).error_code == ErrorCode.INVALID_REQUEST
        other = Member(port, "g", "q", tid)
        other.session_epoch = 3
        assert other.fetch().error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        other.close()
    finally:
        m.close()


def test_records_come_back_after_the_lock_or_a_closed_connection_and_the_limit_archives(
        broker) -> None:
    port = broker.port
    tid = create_topic(port, "q")
    set_group_config(port, "g", "share.auto.offset.reset", "earliest")
    produce(port, "q", 3)
    silent = Member(port, "g", "q", tid)
    assert offsets(fetch_until(silent, 3)) == [0, 1, 2]
    # the holder stays connected and says nothing: the records come back after the lock
    second = Member(port, "g", "q", tid)
    started = time.monotonic()
    again = fetch_until(second, 3)
    assert time.monotonic() - started >= LOCK_MS / 1000 * 0.5
    assert {d for *_, d in again} == {2}
    # the second holder's connection closes: its share session goes, the records come back
    # at once (as Kafka does), the third delivery
    second.close()
    third = Member(port, "g", "q", tid)
    try:
        started = time.monotonic()
        assert {d for *_, d in fetch_until(third, 3)} == {3}
        assert time.monotonic() - started < LOCK_MS / 1000
        # released at the limit (3 deliveries): archived, never delivered again
        third.acknowledge([(0, 2, [RELEASE])])
        assert acquired(third.fetch(max_wait_ms=300)) == []
        produce(port, "q", 1)
        assert fetch_until(third, 1) == [(3, 3, 1)]
    finally:
        third.close()
        silent.close()


def test_read_committed_never_delivers_aborted_records(broker) -> None:
    port = broker.port
    tid = create_topic(port, "q")
    set_group_config(port, "g", "share.auto.offset.reset", "earliest")
    set_group_config(port, "g", "share.isolation.level", "read_committed")
    produce(port, "q", 2, transactional="t1")
    produce(port, "q", 3, transactional="t2", abort=True)
    produce(port, "q", 2, transactional="t1")
    m = Member(port, "g", "q", tid)
    try:
        got = fetch_until(m, 4)
        # committed 0-1, marker 2, aborted 3-5, marker 6, committed 7-8, marker 9
        assert offsets(got) == [0, 1, 7, 8]
        m.acknowledge([(a, b, [ACCEPT]) for a, b, _ in got])
        assert acquired(m.fetch(max_wait_ms=200)) == []
    finally:
        m.close()


@pytest.mark.parametrize("stop", [pytest.param("clean", marks=pytest.mark.slow), "kill9"])
def test_share_state_survives_a_restart(tmp_path, stop) -> None:
    with BrokerProcess.configured(tmp_path, CONFIG) as broker:
        port = broker.port
        tid = create_topic(port, "q")
        set_group_config(port, "g", "share.auto.offset.reset", "earliest")
        produce(port, "q", 6)
        m = Member(port, "g", "q", tid)
        assert offsets(fetch_until(m, 6)) == list(range(6))
        answer = m.acknowledge([(0, 2, [ACCEPT]), (4, 4, [ACCEPT])])
        assert answer.responses[0].partitions[0].error_code == 0
        m.close()
        if stop == "clean":
            broker.stop()
        else:
            broker.kill9()
        broker.restart()
        port = broker.port
        m = Member(port, "g", "q", tid)
        try:
            # 0-2 and 4 were acknowledged: never again; 3 and 5 were only acquired: again
            got = fetch_until(m, 2)
            assert offsets(got) == [3, 5]
            m.acknowledge([(3, 3, [ACCEPT]), (5, 5, [ACCEPT])])
            assert acquired(m.fetch(max_wait_ms=200)) == []
        finally:
            m.close()


def test_unknown_topics_are_answered_and_not_kept(broker) -> None:
    port = broker.port
    tid = create_topic(port, "q")
    m = Member(port, "g", "q", tid)
    try:
        bogus = uuid.uuid4()
        m.topic_id = bogus
        answer = m.fetch()
        codes = {(t.topic_id, p.partition_index): p.error_code
                 for t in answer.responses for p in t.partitions}
        assert codes[(bogus, 0)] == ErrorCode.UNKNOWN_TOPIC_ID
        m.topic_id = tid
        again = m.fetch()  # the session forgot the bogus topic: only q is answered
        assert {t.topic_id for t in again.responses} == {tid}
        # an acknowledgement range far outside what is in flight is refused, not looped over
        bad = m.acknowledge([(0, 1 << 60, [ACCEPT])])
        assert bad.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
        bad = m.acknowledge([(0, 3, [ACCEPT, ACCEPT])])  # neither one type nor one per offset
        assert bad.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
    finally:
        m.close()


def test_offset_admin_refuses_a_group_id_no_group_may_have(broker) -> None:
    # Found by the order fuzzer: a 40,000-byte group id reached the state log's key encoder (a
    # closed connection), and the group it left behind made every ListGroups unanswerable.
    create_topic(broker.port, "q")
    huge = "g" * 40_000
    with RawConnection(broker.port) as conn:
        altered = conn.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, {
            "group_id": huge, "topics": [{"topic_name": "q", "partitions": [
                {"partition_index": 0, "start_offset": 0}]}]})
        assert altered.error_code == ErrorCode.INVALID_GROUP_ID
        deleted = conn.request(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {
            "group_id": huge, "topics": [{"topic_name": "q"}]})
        assert deleted.error_code == ErrorCode.INVALID_GROUP_ID
        listed = conn.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
        assert listed.error_code == ErrorCode.NONE
        assert all(len(g.group_id) < 32_768 for g in listed.groups)


def test_acls_read_on_the_group_and_the_topic(tmp_path) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    from tests.secured import USERS, sasl_plain, secured

    config = "\n".join(secured("connection.failed.authentication.delay.ms=0")) + "\n"
    with BrokerProcess.configured(tmp_path, config) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap,
                             "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                             "sasl.username": "admin", "sasl.password": USERS["admin"]})
        for f in admin.create_topics([NewTopic(t, 1) for t in ("jobs", "secret")]).values():
            f.result(15)
        for rtype, name in ((ResourceType.GROUP, "g-alice"), (ResourceType.TOPIC, "jobs")):
            for f in admin.create_acls([AclBinding(
                    rtype, name, ResourcePatternType.LITERAL, "User:alice", "*",
                    AclOperation.READ, AclPermissionType.ALLOW)]).values():
                f.result(15)
        with sasl_plain(RawConnection(broker.port), "admin") as conn:
            meta = conn.request(ApiKey.METADATA, 12, {"topics": [{"name": "jobs"},
                                                                {"name": "secret"}]})
        ids = {t.name: t.topic_id for t in meta.topics}
        with sasl_plain(RawConnection(broker.port), "alice") as conn:
            def beat(group: str, topics: list[str]):
                return conn.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
                    "group_id": group, "member_id": "m1", "member_epoch": 0,
                    "subscribed_topic_names": topics}).error_code

            assert beat("g-other", ["jobs"]) == ErrorCode.GROUP_AUTHORIZATION_FAILED
            assert beat("g-alice", ["secret"]) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            assert beat("g-alice", ["jobs"]) == ErrorCode.NONE

            def fetch(group: str):
                return conn.request(ApiKey.SHARE_FETCH, 1, {
                    "group_id": group, "member_id": "m1", "share_session_epoch": 0,
                    "max_wait_ms": 0, "min_bytes": 1, "max_records": 10, "batch_size": 10,
                    "topics": [{"topic_id": ids[t], "partitions": [{"partition_index": 0}]}
                               for t in ("jobs", "secret")]})

            assert fetch("g-other").error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
            answer = fetch("g-alice")
            codes = {t.topic_id: t.partitions[0].error_code for t in answer.responses}
            assert codes == {ids["jobs"]: ErrorCode.NONE,
                             ids["secret"]: ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def describe_group_configs(port: int, group: str, keys: list[str] | None = None) -> dict:
    with RawConnection(port) as conn:
        answer = conn.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{
            "resource_type": 32, "resource_name": group, "configuration_keys": keys}],
            "include_synonyms": True, "include_documentation": False})
    result = answer.results[0]
    assert result.error_code == 0, result
    return {c.name: c for c in result.configs}


def test_group_configs_apply_are_refused_as_kafka_and_survive_kill9(tmp_path) -> None:
    """Issue 40 item 1: GROUP config resources. share.auto.offset.reset=earliest and
    share.delivery.count.limit=2 set by IncrementalAlterConfigs apply to the share group (records
    produced before the first member come; a record released twice is archived); a value outside
    the broker's bounds is INVALID_CONFIG with Kafka's message; the overrides survive kill -9
    with their source and synonyms."""
    with BrokerProcess.configured(tmp_path, CONFIG) as broker:
        port = broker.port
        tid = create_topic(port, "q")
        produce(port, "q", 3)
        set_group_config(port, "g", "share.auto.offset.reset", "earliest")
        set_group_config(port, "g", "share.delivery.count.limit", "2")
        with RawConnection(port) as conn:
            refused = conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
                "resource_type": 32, "resource_name": "g", "configs": [
                    {"name": "share.record.lock.duration.ms", "config_operation": 0,
                     "value": "100000"}]}]}).responses[0]
        assert refused.error_code == ErrorCode.INVALID_CONFIG
        assert refused.error_message == ("share.record.lock.duration.ms must be in the range "
                                         "15000 to 60000 inclusive.")
        broker.kill9()
        broker.restart()
        port = broker.port
        configs = describe_group_configs(port, "g")
        reset = configs["share.auto.offset.reset"]
        assert (reset.value, reset.config_source) == ("earliest", 8)  # DYNAMIC_GROUP_CONFIG
        assert [(s.name, s.value, s.source) for s in reset.synonyms] == [
            ("share.auto.offset.reset", "earliest", 8), ("share.auto.offset.reset", "latest", 5)]
        limit = configs["share.delivery.count.limit"]
        assert (limit.value, limit.config_source) == ("2", 8)
        assert configs["share.record.lock.duration.ms"].value == str(LOCK_MS)  # the broker's
        assert describe_group_configs(port, "other")["share.auto.offset.reset"].value == "latest"
        m = Member(port, "g", "q", tid)
        try:
            assert offsets(fetch_until(m, 3)) == [0, 1, 2]  # earliest: produced before
            m.acknowledge([(0, 0, [RELEASE]), (1, 2, [ACCEPT])])
            again = fetch_until(m, 1)
            assert again == [(0, 0, 2)]
            m.acknowledge([(0, 0, [RELEASE])])  # the second delivery was the last (limit 2)
            assert acquired(m.fetch(max_wait_ms=300)) == []
        finally:
            m.close()


@pytest.mark.slow
def test_the_timer_expires_locks_and_silent_members_without_requests(tmp_path) -> None:
    """Issue 40 item 3 (and 4): with no request arriving, a lock that ran out makes its records
    Available and a member without heartbeats leaves the group, when due (Kafka's timer). Seen
    through the Prometheus endpoint's share metrics and ShareGroupDescribe, neither of which
    looks at the deadlines itself."""
    import urllib.request

    # a 2.5 s lock and a 3 s session: margin for a loaded machine between the acquisition and
    # the first scrape
    config = ("group.share.record.lock.duration.ms=2500\ngroup.share.delivery.count.limit=3\n"
              "metrics.port=0\ngroup.share.session.timeout.ms=3000\n"
              "group.share.heartbeat.interval.ms=500\n")
    with BrokerProcess.configured(tmp_path, config) as broker:
        port = broker.port
        found = broker.wait_for_output("metrics on http://127.0.0.1:")
        import re
        metrics = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", found
                                ).group(1))  # type: ignore[union-attr]

        def share_metrics() -> dict[str, float]:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as r:
                text = r.read().decode()
            out = {}
            for line in text.splitlines():
                if line.startswith("minibroker_share_") and 'group="g"' in line:
                    out[line.split("{")[0]] = float(line.rsplit(" ", 1)[1])
            return out

        tid = create_topic(port, "q")
        set_group_config(port, "g", "share.auto.offset.reset", "earliest")
        produce(port, "q", 4)
        m = Member(port, "g", "q", tid)
        try:
            assert offsets(fetch_until(m, 4)) == [0, 1, 2, 3]
            m.acknowledge([(3, 3, [REJECT])])
            before = share_metrics()
            assert before["minibroker_share_acquired_records"] == 3
            assert before["minibroker_share_archived_records_total"] == 1
            time.sleep(4)  # the lock and the session run out; no request is sent
            after = share_metrics()
            assert after["minibroker_share_acquired_records"] == 0
            assert after["minibroker_share_in_flight_records"] == 3
            with RawConnection(port) as conn:
                described = conn.request(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": ["g"]})
            assert described.groups[0].members == []
        finally:
            m.close()
        again = Member(port, "g", "q", tid)
        try:
            assert [(a, b, n) for a, b, n in fetch_until(again, 3)] == [(0, 2, 2)]
            assert share_metrics()["minibroker_share_redelivered_records_total"] == 3
        finally:
            again.close()


def test_deleting_a_topic_drops_its_share_state(tmp_path) -> None:
    """Issue 40 item 2: a deleted topic's share-partition state goes (durably: not back after a
    kill -9); the topic created again under the name starts afresh (share.auto.offset.reset)."""
    with BrokerProcess.configured(tmp_path, CONFIG) as broker:
        port = broker.port
        tid = create_topic(port, "q")
        set_group_config(port, "g", "share.auto.offset.reset", "earliest")
        produce(port, "q", 5)
        m = Member(port, "g", "q", tid)
        assert offsets(fetch_until(m, 5)) == list(range(5))
        m.acknowledge([(0, 4, [ACCEPT])])
        m.close()
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        admin.delete_topics(["q"])["q"].result(timeout=10)

        def start_offset() -> int:
            with RawConnection(broker.port) as conn:
                answer = conn.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [{
                    "group_id": "g", "topics": None}]})
            return [p.start_offset for t in answer.groups[0].topics for p in t.partitions]

        assert start_offset() == []
        broker.kill9()
        broker.restart()
        port = broker.port
        # the replay finds the tombstones: nothing of the deleted topic's state comes back
        assert "loaded the state of 0 share partitions" in broker.wait_for_output(
            "loaded the state of")
        assert start_offset() == []
        tid = create_topic(port, "q")
        produce(port, "q", 2)
        m = Member(port, "g", "q", tid)
        try:
            assert offsets(fetch_until(m, 2)) == [0, 1]
        finally:
            m.close()


def test_consumer_group_configs_reach_consumer_protocol_groups(broker) -> None:
    """consumer.heartbeat.interval.ms set on a GROUP resource is the interval a KIP-848
    member of that group is told; another group keeps the broker's (5 s)."""
    port = broker.port
    create_topic(port, "cq")
    set_group_config(port, "cg", "consumer.heartbeat.interval.ms", "7000")
    with RawConnection(port) as conn:
        def join(group: str) -> int:
            joined = conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
                "group_id": group, "member_id": str(uuid.uuid4()), "member_epoch": 0,
                "rebalance_timeout_ms": 30_000, "subscribed_topic_names": ["cq"],
                "topic_partitions": []})
            assert joined.error_code == 0, joined
            return joined.heartbeat_interval_ms

        assert join("cg") == 7000
        assert join("other") == 5000
