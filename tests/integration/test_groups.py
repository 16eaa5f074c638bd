"""Consumer groups and committed offsets against the real broker process on loopback.

confluent-kafka and kafka-python consumers ``subscribe()`` in groups of several members sharing six
partitions (every record consumed exactly once, a rebalance when a member leaves); committed
offsets survive a kill -9; the group APIs over raw sockets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from broker.log.topics import partition_for
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.broker_process import BrokerProcess
from tests.raw_client import RawConnection

PARTITIONS = 6
# Low delays so that tests are fast; 1 s is the smallest session the clients accept here.
BROKER_CONFIG = (
    "group.initial.rebalance.delay.ms=300\n"
    "group.min.session.timeout.ms=1000\n"
    "offsets.topic.num.partitions=10\n"
)
SESSION_MS = 6000
HEARTBEAT_MS = 300


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess.configured(tmp_path, BROKER_CONFIG) as proc:
        yield proc


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout=15)


def produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


class Member(threading.Thread):
    """One group member in its own thread: poll, record, commit synchronously, repeat.

    Committing what was processed before the next poll means a rebalance (which only happens
    inside poll) never hands a partition over with processed-but-uncommitted records: every record
    is then consumed exactly once across the group.
    """

    def __init__(self, name: str, seen: dict, lock: threading.Lock) -> None:
        super().__init__(name=name, daemon=True)
        self.seen = seen
        self.lock = lock
        self.stop = threading.Event()
        self.assignment: set[int] = set()
        self.count = 0
        self.error: BaseException | None = None

    def record(self, partition: int, offset: int, value: bytes) -> None:
        with self.lock:
            self.seen.setdefault((partition, offset), []).append((self.name, value))
        self.count += 1

    def run(self) -> None:
        try:
            self.loop()
        except BaseException as exc:  # reported by the test
            self.error = exc


class ConfluentMember(Member):
    def loop(self) -> None:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
        })
        consumer.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                messages = consumer.consume(num_messages=500, timeout=0.2)
                for msg in messages:
                    assert msg.error() is None, msg.error()
                    self.record(msg.partition(), msg.offset(), msg.value())
                if messages:
                    consumer.commit(asynchronous=False)
                self.assignment = {tp.partition for tp in consumer.assignment()}
        finally:
            consumer.close()  # LeaveGroup


class KafkaPythonMember(Member):
    def loop(self) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        consumer.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                batches = consumer.poll(timeout_ms=200)
                for tp, messages in batches.items():
                    for msg in messages:
                        self.record(tp.partition, msg.offset, msg.value)
                if batches:
                    consumer.commit()
                self.assignment = {tp.partition for tp in consumer.assignment()}
        finally:
            consumer.close()  # LeaveGroup


def start_members(kinds: list[type[Member]], bootstrap: str, topic: str, group: str):
    seen: dict[tuple[int, int], list] = {}
    lock = threading.Lock()
    members = []
    for i, kind in enumerate(kinds):
        m = kind(f"{kind.__name__}-{i}", seen, lock)
        m.bootstrap, m.topic, m.group = bootstrap, topic, group
        m.start()
        members.append(m)
    return members, seen


def wait_until(condition: Callable[[], bool], timeout: float, members) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for m in members:
            assert m.error is None, f"{m.name}: {m.error!r}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def assignments_cover(members) -> bool:
    alive = [m for m in members if m.is_alive()]
    parts = [m.assignment for m in alive]
    union = set().union(*parts) if parts else set()
    disjoint = sum(len(p) for p in parts) == len(union)
    return union == set(range(PARTITIONS)) and disjoint and all(parts)


def fetch_committed(port: int, group: str, topic: str) -> dict[int, int]:
    with RawConnection(port) as conn:
        response = conn.request(ApiKey.OFFSET_FETCH, 2, {
            "group_id": group,
            "topics": [{"name": topic, "partition_indexes": list(range(PARTITIONS))}],
        })
    assert response.error_code == ErrorCode.NONE
    return {p.partition_index: p.committed_offset for t in response.topics for p in t.partitions}


def run_group_scenario(broker: BrokerProcess, kinds: list[type[Member]]) -> None:
    """Members share the topic; one leaves half-way; every record is consumed exactly once."""
    topic, group = "shared", "workers"
    create_topic(broker.bootstrap, topic)
    first, second = 1200, 600
    produce(broker.bootstrap, topic, 0, first)
    members, seen = start_members(kinds, broker.bootstrap, topic, group)
    try:
        wait_until(lambda: len(seen) >= first and assignments_cover(members), 60, members)
        assert all(m.count > 0 or len(m.assignment) > 0 for m in members)
        assert all(m.assignment for m in members), [m.assignment for m in members]

        leaver = members[0]
        leaver.stop.set()
        leaver.join(30)
        assert not leaver.is_alive() and leaver.error is None
        rest = members[1:]
        # the rest take over the leaver's partitions
        wait_until(lambda: assignments_cover(rest), 60, rest)
        produce(broker.bootstrap, topic, first, second)
        wait_until(lambda: len(seen) >= first + second, 60, rest)
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(30)
    for m in members:
        assert m.error is None, f"{m.name}: {m.error!r}"

    duplicates = {k: v for k, v in seen.items() if len(v) > 1}
    assert not duplicates, f"records consumed more than once: {list(duplicates.items())[:3]}"
    per_partition = {}
    for (p, o) in seen:
        per_partition.setdefault(p, []).append(o)
    total = first + second
    assert {p: sorted(o) for p, o in per_partition.items()} == {
        p: list(range(total // PARTITIONS)) for p in range(PARTITIONS)
    }
    values = sorted(v for entries in seen.values() for _, v in entries)
    assert values == sorted(b"v%d" % i for i in range(total))
    # what the group committed is where each partition ends
    assert fetch_committed(broker.port, group, topic) == {
        p: total // PARTITIONS for p in range(PARTITIONS)
    }


@pytest.mark.slow
def test_confluent_kafka_group_of_three(broker):
    run_group_scenario(broker, [ConfluentMember] * 3)


@pytest.mark.slow
def test_kafka_python_group_of_three(broker):
    run_group_scenario(broker, [KafkaPythonMember] * 3)


@pytest.mark.slow
def test_mixed_clients_in_one_group(broker):
    # both speak the "consumer" protocol with the range assignor in common
    run_group_scenario(broker, [KafkaPythonMember, ConfluentMember])


@pytest.mark.slow
def test_committed_offsets_survive_kill9(broker):
    topic, group = "durable", "keeper"
    create_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, 0, 60)
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
    })
    try:
        committed = consumer.commit(
            offsets=[TopicPartition(topic, p, 3 + p) for p in range(PARTITIONS)],
            asynchronous=False,
        )
        assert all(tp.error is None for tp in committed)
    finally:
        consumer.close()
    broker.kill9()  # acknowledged commits were fsync'd before the answer
    broker.restart()
    assert fetch_committed(broker.port, group, topic) == {p: 3 + p for p in range(PARTITIONS)}

    # a member of the group resumes where the group left off
    resumed = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
    )
    try:
        resumed.subscribe([topic])
        first_offsets: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while len(first_offsets) < PARTITIONS and time.monotonic() < deadline:
            for tp, messages in resumed.poll(timeout_ms=200).items():
                first_offsets.setdefault(tp.partition, messages[0].offset)
    finally:
        resumed.close()
    assert first_offsets == {p: 3 + p for p in range(PARTITIONS)}


# -- raw sockets ---------------------------------------------------------------------------------


def commit_body(group: str, topic: str, offsets: dict[int, int], generation: int = -1,
                member: str = "") -> dict:
    return {
        "group_id": group, "generation_id": generation, "member_id": member,
        "retention_time_ms": -1,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_metadata": f"m{p}"}
            for p, o in offsets.items()
        ]}],
    }


def test_offset_commit_and_fetch_over_raw_sockets(broker):
    create_topic(broker.bootstrap, "raw", 3)
    with RawConnection(broker.port) as conn:
        response = conn.request(ApiKey.OFFSET_COMMIT, 2, commit_body("manual", "raw", {0: 11, 2: 33}))
        assert [(p.partition_index, p.error_code) for p in response.topics[0].partitions] == [
            (0, ErrorCode.NONE), (2, ErrorCode.NONE)]

        fetched = conn.request(ApiKey.OFFSET_FETCH, 2, {
            "group_id": "manual", "topics": [{"name": "raw", "partition_indexes": [0, 1, 2]}]})
        assert fetched.error_code == ErrorCode.NONE
        assert [(p.partition_index, p.committed_offset, p.metadata, p.error_code)
                for p in fetched.topics[0].partitions] == [
            (0, 11, "m0", 0), (1, -1, "", 0), (2, 33, "m2", 0)]

        everything = conn.request(ApiKey.OFFSET_FETCH, 2, {"group_id": "manual", "topics": None})
        assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
                for t in everything.topics] == [("raw", [(0, 11), (2, 33)])]

        unknown = conn.request(ApiKey.OFFSET_COMMIT, 2, commit_body("manual", "nope", {0: 1}))
        assert unknown.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        stale = conn.request(ApiKey.OFFSET_COMMIT, 2,
                             commit_body("no-such-group", "raw", {0: 1}, generation=3, member="x"))
        assert stale.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION

        nobody = conn.request(ApiKey.OFFSET_FETCH, 2, {"group_id": "nobody", "topics": None})
        assert nobody.error_code == ErrorCode.NONE and list(nobody.topics) == []

        meta = conn.request(ApiKey.METADATA, 4, {"topics": [{"name": "__consumer_offsets"}],
                                                  "allow_auto_topic_creation": False})
        assert len(meta.topics[0].partitions) == 10  # offsets.topic.num.partitions
        assert meta.topics[0].is_internal

    # written to the group's partition of __consumer_offsets: a clean restart replays it
    expected_partition = partition_for("manual", 10)
    broker.stop()
    assert (broker.data_dir / f"__consumer_offsets-{expected_partition}").is_dir()
    broker.restart()
    assert fetch_committed(broker.port, "manual", "raw") == {0: 11, 1: -1, 2: 33, 3: -1, 4: -1, 5: -1}


def join_body(member_id: str = "", protocols=(("range", b"meta"),), session: int = 6000) -> dict:
    return {
        "group_id": "raw-group", "session_timeout_ms": session, "rebalance_timeout_ms": 10_000,
        "member_id": member_id, "protocol_type": "consumer",
        "protocols": [{"name": n, "metadata": m} for n, m in protocols],
    }


def test_group_protocol_over_raw_sockets(broker):
    create_topic(broker.bootstrap, "grouped", 1)
    a_conn, b_conn, admin = (RawConnection(broker.port) for _ in range(3))
    try:
        # v2: a new member gets its id in the same round, after the initial delay
        started = time.monotonic()
        joined = a_conn.request(ApiKey.JOIN_GROUP, 2, join_body())
        assert time.monotonic() - started >= 0.25  # group.initial.rebalance.delay.ms=300
        assert joined.error_code == ErrorCode.NONE and joined.generation_id == 1
        a = joined.member_id
        assert a.startswith("raw-") and joined.leader == a
        assert [(m.member_id, m.metadata) for m in joined.members] == [(a, b"meta")]
        synced = a_conn.request(ApiKey.SYNC_GROUP, 0, {
            "group_id": "raw-group", "generation_id": 1, "member_id": a,
            "assignments": [{"member_id": a, "assignment": b"all"}]})
        assert (synced.error_code, synced.assignment) == (ErrorCode.NONE, b"all")
        assert _heartbeat(a_conn, a, 1) == ErrorCode.NONE

        # a second member: its JoinGroup waits for a to rejoin; a learns from its heartbeat
        b_conn.send_request(ApiKey.JOIN_GROUP, 2, join_body())
        time.sleep(0.2)
        assert _heartbeat(a_conn, a, 1) == ErrorCode.REBALANCE_IN_PROGRESS
        rejoined = a_conn.request(ApiKey.JOIN_GROUP, 2, join_body(a))
        b_joined = _read(b_conn, ApiKey.JOIN_GROUP, 2)
        assert rejoined.generation_id == b_joined.generation_id == 2
        b = b_joined.member_id
        assert rejoined.leader == b_joined.leader == a
        assert [m.member_id for m in rejoined.members] == [a, b] and list(b_joined.members) == []

        # b's SyncGroup waits for the leader's
        b_conn.send_request(ApiKey.SYNC_GROUP, 0, {
            "group_id": "raw-group", "generation_id": 2, "member_id": b, "assignments": []})
        a_conn.request(ApiKey.SYNC_GROUP, 0, {
            "group_id": "raw-group", "generation_id": 2, "member_id": a,
            "assignments": [{"member_id": a, "assignment": b"A"},
                            {"member_id": b, "assignment": b"B"}]})
        assert _read(b_conn, ApiKey.SYNC_GROUP, 0).assignment == b"B"

        described = admin.request(ApiKey.DESCRIBE_GROUPS, 0, {"groups": ["raw-group", "ghost"]})
        group, ghost = described.groups
        assert (group.error_code, group.group_state, group.protocol_type, group.protocol_data) == (
            ErrorCode.NONE, "Stable", "consumer", "range")
        assert [(m.member_id, m.client_id, m.member_assignment) for m in group.members] == [
            (a, "raw", b"A"), (b, "raw", b"B")]
        assert ghost.group_state == "Dead" and list(ghost.members) == []
        listed = admin.request(ApiKey.LIST_GROUPS, 0, {})
        assert (listed.error_code, [(g.group_id, g.protocol_type) for g in listed.groups]) == (
            ErrorCode.NONE, [("raw-group", "consumer")])

        # members commit with their generation; stale generations and strangers are refused
        ok = a_conn.request(ApiKey.OFFSET_COMMIT, 2, commit_body("raw-group", "grouped", {0: 1}, 2, a))
        assert ok.topics[0].partitions[0].error_code == ErrorCode.NONE
        stale = a_conn.request(ApiKey.OFFSET_COMMIT, 2, commit_body("raw-group", "grouped", {0: 1}, 1, a))
        assert stale.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
        alone = admin.request(ApiKey.OFFSET_COMMIT, 2, commit_body("raw-group", "grouped", {0: 1}))
        assert alone.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID

        # a leaves: b's heartbeat says rebalance, b rejoins alone and leads
        assert admin.request(ApiKey.LEAVE_GROUP, 0, {"group_id": "raw-group", "member_id": a}).error_code == 0
        assert _heartbeat(b_conn, b, 2) == ErrorCode.REBALANCE_IN_PROGRESS
        alone = b_conn.request(ApiKey.JOIN_GROUP, 2, join_body(b))
        assert (alone.generation_id, alone.leader, [m.member_id for m in alone.members]) == (3, b, [b])
        assert _heartbeat(a_conn, a, 2) == ErrorCode.UNKNOWN_MEMBER_ID

        # validation
        bad = admin.request(ApiKey.JOIN_GROUP, 2, join_body(session=500))
        assert bad.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        wrong = admin.request(ApiKey.JOIN_GROUP, 2, join_body(protocols=(("sticky", b""),)))
        assert wrong.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    finally:
        for conn in (a_conn, b_conn, admin):
            conn.close()


def test_silent_member_is_expired(broker):
    with RawConnection(broker.port) as a_conn, RawConnection(broker.port) as b_conn:
        a = a_conn.request(ApiKey.JOIN_GROUP, 2, join_body(session=1000)).member_id
        a_conn.request(ApiKey.SYNC_GROUP, 0, {
            "group_id": "raw-group", "generation_id": 1, "member_id": a, "assignments": []})
        # a never heartbeats: a new member's JoinGroup completes once a's 1 s session is over,
        # long before the 10 s rebalance timeout
        started = time.monotonic()
        joined = b_conn.request(ApiKey.JOIN_GROUP, 2, join_body())
        assert time.monotonic() - started < 5
        assert joined.generation_id == 2 and [m.member_id for m in joined.members] == [joined.member_id]
        assert _heartbeat(a_conn, a, 1) == ErrorCode.UNKNOWN_MEMBER_ID


def _heartbeat(conn: RawConnection, member_id: str, generation: int) -> int:
    return conn.request(ApiKey.HEARTBEAT, 0, {
        "group_id": "raw-group", "generation_id": generation, "member_id": member_id}).error_code


def _read(conn: RawConnection, api_key: ApiKey, version: int):
    from protocol.headers import parse_response_header_untrusted
    from protocol.messages import decode_response

    frame = conn.read_frame()
    assert frame is not None
    _, offset = parse_response_header_untrusted(frame, api_key, version)
    return decode_response(api_key, version, frame, offset)
