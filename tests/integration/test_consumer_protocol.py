"""The consumer group protocol (KIP-848) against the real broker process on loopback.

confluent-kafka (librdkafka 2.12+: ``group.protocol=consumer``) members in their own processes:
three consume a topic while records keep coming, a fourth joins (it must get partitions within two
heartbeat intervals), one is killed with kill -9 and one stops cleanly; every record is consumed,
the offsets are committed to the end, and no partition is ever owned by two live members (the
members log each assignment and revocation with its time). A group survives a kill -9 of the
broker with its epochs and assignment; the group APIs over raw sockets answer as Kafka does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition, libversion
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.broker_process import BrokerProcess
from tests.raw_client import RawConnection

HEARTBEAT_MS = 500
SESSION_MS = 3_000
BROKER_CONFIG = (
    f"group.consumer.heartbeat.interval.ms={HEARTBEAT_MS}\n"
    f"group.consumer.session.timeout.ms={SESSION_MS}\n"
    "offsets.topic.num.partitions=3\n"
    "group.initial.rebalance.delay.ms=0\n"  # the classic group beside them
)
PARTITIONS = 6

pytestmark = pytest.mark.skipif(libversion()[1] < 0x020C0000,
                                reason="librdkafka < 2.12 has no group.protocol=consumer")

# One member: consume, log every record and every assignment change (with its time), commit
# synchronously after each batch; SIGTERM closes it (a clean leave).
MEMBER = r"""
import json, signal, sys, time
from confluent_kafka import Consumer
bootstrap, group, topic, out = sys.argv[1:5]
log = open(out, "a", buffering=1)
def emit(**event):
    event["t"] = time.time()
    log.write(json.dumps(event) + "\n")
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "enable.auto.commit": False})
c.subscribe([topic],
            on_assign=lambda _, ps: emit(kind="assign", p=[p.partition for p in ps]),
            on_revoke=lambda _, ps: emit(kind="revoke", p=[p.partition for p in ps]),
            on_lost=lambda _, ps: emit(kind="lost", p=[p.partition for p in ps]))
emit(kind="start")
while not stop:
    msgs = c.consume(100, 0.2)
    got = [m for m in msgs if m.error() is None]
    for m in got:
        log.write(json.dumps({"kind": "rec", "p": m.partition(), "o": m.offset()}) + "\n")
    if got:
        c.commit(asynchronous=False)
c.close()
emit(kind="closed")
"""


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess.configured(tmp_path, BROKER_CONFIG) as proc:
        yield proc


def _port(broker: BrokerProcess) -> int:
    return int(broker.bootstrap.rsplit(":", 1)[1])


def _create(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=15)


def _produce(bootstrap: str, topic: str, start: int, n: int, partitions: int = PARTITIONS
             ) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        producer.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert producer.flush(30) == 0


def _events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line cut by kill -9
    return out


def _assigned(path: Path) -> set[int]:
    owned: set[int] = set()
    for e in _events(path):
        if e["kind"] == "assign":
            owned |= set(e["p"])
        elif e["kind"] in ("revoke", "lost"):
            owned -= set(e["p"])
    return owned


def _wait(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _committed(bootstrap: str, group: str, topic: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [tp.offset for tp in c.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)]
    finally:
        c.close()


class Members:
    def __init__(self, bootstrap: str, group: str, topic: str, directory: Path) -> None:
        self.args = (bootstrap, group, topic)
        self.directory = directory
        self.procs: dict[str, subprocess.Popen] = {}
        self.killed_at: dict[str, float] = {}

    def start(self, name: str) -> Path:
        path = self.directory / f"{name}.log"
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-c", MEMBER, *self.args, str(path)],
            env={**os.environ, "PYTHONPATH": ""})
        return path

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def kill9(self, name: str) -> None:
        self.killed_at[name] = time.time()
        self.procs[name].kill()
        self.procs[name].wait(10)

    def stop(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGTERM)
        assert self.procs[name].wait(30) == 0
        self.killed_at[name] = time.time()

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def _ownership(paths: dict[str, Path], ended: dict[str, float]) -> dict[int, list]:
    """partition -> [(start, end, member)] from each member's log."""
    intervals: dict[int, list] = {}
    for name, path in paths.items():
        since: dict[int, float] = {}
        for e in _events(path):
            if e["kind"] == "assign":
                for p in e["p"]:
                    since[p] = e["t"]
            elif e["kind"] in ("revoke", "lost"):
                for p in e["p"]:
                    if p in since:
                        intervals.setdefault(p, []).append((since.pop(p), e["t"], name))
        end = ended.get(name, float("inf"))
        for p, start in since.items():
            intervals.setdefault(p, []).append((start, end, name))
    return intervals


@pytest.mark.slow
def test_members_join_die_and_leave_every_record_consumed_once_owned(broker, tmp_path):
    topic, group = "kip848", "kip848-group"
    _create(broker.bootstrap, topic)
    _produce(broker.bootstrap, topic, 0, 3000)
    members = Members(broker.bootstrap, group, topic, tmp_path)
    producing = threading.Thread(target=lambda: [
        (_produce(broker.bootstrap, topic, 3000 + 300 * i, 300), time.sleep(0.2))
        for i in range(10)])
    try:
        for name in ("a", "b", "c"):
            members.start(name)
        _wait(lambda: all(len(_assigned(members.path(n))) == 2 for n in "abc"),
              "three members with two partitions each")
        producing.start()
        # A fourth member joins the stable group of three: partitions within two intervals.
        time.sleep(1.0)
        joined = members.start("d")
        _wait(lambda: any(e["kind"] == "start" for e in _events(joined)), "d to start")
        started = next(e["t"] for e in _events(joined) if e["kind"] == "start")
        _wait(lambda: _assigned(joined), "d to get partitions")
        first = next(e["t"] for e in _events(joined) if e["kind"] == "assign" and e["p"])
        join_ms = (first - started) * 1000
        print(f"join latency: {join_ms:.0f} ms (heartbeat interval {HEARTBEAT_MS} ms)")
        # The first heartbeat goes out after the consumer's own start-up (metadata, the
        # coordinator lookup): measured from its start, 2 intervals plus that.
        assert join_ms < 2 * HEARTBEAT_MS + 500, join_ms
        members.kill9("a")
        time.sleep(0.5)
        members.stop("b")
        producing.join(60)
        total = 6000
        _wait(lambda: sum(_committed(broker.bootstrap, group, topic)) == total,
              "offsets committed to the end", timeout=60)
        alive = {"c", "d"}
        _wait(lambda: set().union(*(_assigned(members.path(n)) for n in alive))
              == set(range(PARTITIONS)), "the survivors to own every partition")
    finally:
        members.close()
    seen = set()
    for name in "abcd":
        seen |= {(e["p"], e["o"]) for e in _events(members.path(name)) if e["kind"] == "rec"}
    per_partition = [total // PARTITIONS] * PARTITIONS
    assert seen == {(p, o) for p in range(PARTITIONS) for o in range(per_partition[p])}
    assert _committed(broker.bootstrap, group, topic) == per_partition
    intervals = _ownership({n: members.path(n) for n in "abcd"}, members.killed_at)
    for partition, spans in intervals.items():
        spans.sort()
        held_until, holder = float("-inf"), None
        for start, end, member in spans:
            assert start >= held_until, f"partition {partition} owned by {holder} and {member}"
            if end > held_until:
                held_until, holder = end, member


def _describe(port: int, group: str) -> dict:
    with RawConnection(port) as conn:
        response = conn.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1,
                                {"group_ids": [group], "include_authorized_operations": False})
    return response.groups[0]


def test_group_keeps_its_epochs_across_a_broker_kill9(broker):
    topic, group = "durable", "durable-group"
    _create(broker.bootstrap, topic, 2)
    assigned: list[list[int]] = []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic], on_assign=lambda _, ps: assigned.append(
            [p.partition for p in ps]))
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.1)
        before = _describe(_port(broker), group)
        assert before.error_code == ErrorCode.NONE and before.group_state == "Stable"
        [member] = before.members
        assert member.member_epoch == before.group_epoch >= 1
        broker.kill9()
        broker.restart()
        after = _describe(_port(broker), group)
        assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch,
                                                               before.assignment_epoch)
        [restored] = after.members
        assert (restored.member_id, restored.member_epoch) == (member.member_id,
                                                               member.member_epoch)
        assert [sorted(tp.partitions) for tp in restored.assignment.topic_partitions] == [[0, 1]]
        # The member carries on: records produced after the restart arrive, no new assignment.
        _produce(broker.bootstrap, topic, 0, 4, partitions=2)
        got = 0
        deadline = time.monotonic() + 30
        while got < 4 and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            got += msg is not None and msg.error() is None
        assert got == 4
        assert consumer.memberid() == member.member_id
        assert _describe(_port(broker), group).group_epoch == before.group_epoch
    finally:
        consumer.close()


def test_group_apis_answer_as_kafka(broker):
    topic, group = "apis", "apis-group"
    _create(broker.bootstrap, topic, 2)
    port = _port(broker)
    with RawConnection(port) as conn:
        joined = conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            "group_id": group, "member_id": "member-1", "member_epoch": 0,
            "rebalance_timeout_ms": 30_000, "subscribed_topic_names": [topic],
            "topic_partitions": []})
        # A new group starts at epoch 1, as on Kafka 4.4: the first member gets 2.
        assert joined.error_code == ErrorCode.NONE and joined.member_epoch == 2
        assert sum(len(tp.partitions) for tp in joined.assignment.topic_partitions) == 2
        # A classic JoinGroup for a consumer group with members is the group's to answer
        # (a classic member of it, as Kafka): another protocol type is refused, a new member
        # without an id gets one first.
        join = {"group_id": group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
                "member_id": "", "protocol_type": "connect",
                "protocols": [{"name": "range", "metadata": b""}]}
        classic = conn.request(ApiKey.JOIN_GROUP, 5, join)
        assert classic.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        classic = conn.request(ApiKey.JOIN_GROUP, 5, {**join, "protocol_type": "consumer"})
        assert classic.error_code == ErrorCode.MEMBER_ID_REQUIRED
        # OffsetCommit v9: the member's epoch commits, an older one is stale.
        commit = {"group_id": group, "generation_id": 2, "member_id": "member-1",
                  "topics": [{"name": topic, "partitions": [
                      {"partition_index": 0, "committed_offset": 5,
                       "committed_metadata": None}]}]}
        ok = conn.request(ApiKey.OFFSET_COMMIT, 9, commit)
        assert ok.topics[0].partitions[0].error_code == ErrorCode.NONE
        stale = conn.request(ApiKey.OFFSET_COMMIT, 9, {**commit, "generation_id": 0})
        assert stale.topics[0].partitions[0].error_code == ErrorCode.STALE_MEMBER_EPOCH
        fetch = {"groups": [{"group_id": group, "member_id": "member-1", "member_epoch": 0,
                             "topics": None}], "require_stable": False}
        assert conn.request(ApiKey.OFFSET_FETCH, 9, fetch).groups[0].error_code == \
            ErrorCode.STALE_MEMBER_EPOCH
        fetch["groups"][0]["member_epoch"] = 2
        fetched = conn.request(ApiKey.OFFSET_FETCH, 9, fetch).groups[0]
        assert fetched.error_code == ErrorCode.NONE
        assert fetched.topics[0].partitions[0].committed_offset == 5
        # ListGroups v5: the group's type and state.
        listed = conn.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [],
                                                      "types_filter": ["consumer"]})
        assert [(g.group_id, g.group_type, g.group_state, g.protocol_type)
                for g in listed.groups] == [(group, "consumer", "Stable", "consumer")]
        # DescribeGroups v6: not a classic group.
        described = conn.request(ApiKey.DESCRIBE_GROUPS, 6, {"groups": [group]})
        assert described.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        # DeleteGroups: not while it has members; after the member leaves, yes.
        deleted = conn.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]})
        assert deleted.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
        left = conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            "group_id": group, "member_id": "member-1", "member_epoch": -1})
        assert left.error_code == ErrorCode.NONE and left.member_epoch == -1
        deleted = conn.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]})
        assert deleted.results[0].error_code == ErrorCode.NONE
        gone = conn.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0,
                            {"group_ids": [group], "include_authorized_operations": False})
        assert gone.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        # Bad requests get Kafka's codes and the connection stays usable.
        bad = {"group_id": group, "member_id": "member-2", "member_epoch": 0,
               "rebalance_timeout_ms": 30_000, "topic_partitions": []}
        assert conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            **bad, "subscribed_topic_regex": "a(b"}).error_code == \
            ErrorCode.INVALID_REGULAR_EXPRESSION
        assert conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            **bad, "subscribed_topic_names": [topic], "server_assignor": "nope"}).error_code == \
            ErrorCode.UNSUPPORTED_ASSIGNOR
        assert conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            **bad, "subscribed_topic_names": [topic], "member_epoch": -7}).error_code == \
            ErrorCode.INVALID_REQUEST
        assert conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            **bad, "subscribed_topic_names": [topic], "topic_partitions": None}).error_code == \
            ErrorCode.INVALID_REQUEST
        # A heartbeat (not joining) for a group that does not exist.
        unknown = conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            "group_id": "nope", "member_id": "x", "member_epoch": 3})
        assert unknown.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        versions = {k.api_key: (k.min_version, k.max_version)
                    for k in conn.request(ApiKey.API_VERSIONS, 3, {
                        "client_software_name": "t", "client_software_version": "1"}).api_keys}
        assert versions[ApiKey.CONSUMER_GROUP_HEARTBEAT] == (0, 1)
        assert versions[ApiKey.CONSUMER_GROUP_DESCRIBE] == (0, 1)


@pytest.mark.slow
def test_cli_lists_and_describes_both_kinds_of_group(broker):
    from tests.integration.test_cli import ok, run

    topic = "both-kinds"
    _create(broker.bootstrap, topic, 2)
    _produce(broker.bootstrap, topic, 0, 4, partitions=2)
    b = ["--bootstrap-server", broker.bootstrap]
    consumers = [Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                           "group.protocol": protocol, "auto.offset.reset": "earliest",
                           "client.id": f"{protocol}-client"})
                 for group, protocol in (("new-kind", "consumer"), ("old-kind", "classic"))]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not all(c.assignment() for c in consumers) and time.monotonic() < deadline:
            for consumer in consumers:
                consumer.poll(0.1)
        listed = json.loads(ok(run("groups", "list", "--format", "json", *b)).stdout)
        assert {(g["group"], g["state"], g["protocol_type"]) for g in listed} == {
            ("new-kind", "Stable", "consumer"), ("old-kind", "Stable", "consumer")}
        [described] = json.loads(ok(run("groups", "describe", "new-kind", "--format", "json",
                                        *b)).stdout)
        assert (described["state"], described["protocol"]) == ("Stable", "uniform")
        [member] = described["members"]
        assert member["client_id"] == "consumer-client"
        assert sorted(map(tuple, member["assignment"])) == [(topic, 0), (topic, 1)]
        assert {r["consumer_id"] for r in described["partitions"]} == {member["consumer_id"]}
        text = ok(run("groups", "describe", "new-kind", "--members", "--verbose", *b)).stdout
        assert "consumer-client" in text and f"{topic}-0,{topic}-1" in text
    finally:
        for consumer in consumers:
            consumer.close()


def test_our_consumer_shares_a_consumer_protocol_group_with_librdkafka(broker):
    from client.consumer import Consumer as OurConsumer

    topic, group = "mixed", "mixed-group"
    _create(broker.bootstrap, topic, 4)
    _produce(broker.bootstrap, topic, 0, 200, partitions=4)
    seen: dict[tuple[int, int], list[str]] = {}
    events: list[tuple[str, str, list[int]]] = []
    ours = OurConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                        "group.protocol": "consumer", "auto.offset.reset": "earliest",
                        "enable.auto.commit": False})
    theirs = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                       "group.protocol": "consumer", "auto.offset.reset": "earliest",
                       "enable.auto.commit": False})

    def note(who: str, kind: str, partitions) -> None:
        events.append((who, kind, sorted(p.partition for p in partitions)))

    try:
        ours.subscribe([topic], on_assign=lambda ps: note("ours", "assign", ps),
                       on_revoke=lambda ps: note("ours", "revoke", ps))
        deadline = time.monotonic() + 30
        while len(ours.assignment()) < 4 and time.monotonic() < deadline:
            for r in ours.poll(0.1):
                seen.setdefault((r.partition, r.offset), []).append("ours")
        assert len(ours.assignment()) == 4
        ours.commit()
        theirs.subscribe([topic], on_assign=lambda _, ps: note("theirs", "assign", ps),
                         on_revoke=lambda _, ps: note("theirs", "revoke", ps))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
                len(ours.assignment()) == 2 and len(theirs.assignment()) == 2
                and len(seen) == 200):
            for r in ours.poll(0.05):
                seen.setdefault((r.partition, r.offset), []).append("ours")
            ours.commit()
            msg = theirs.poll(0.05)
            if msg is not None and msg.error() is None:
                seen.setdefault((msg.partition(), msg.offset()), []).append("theirs")
                theirs.commit(msg, asynchronous=False)
        mine = {tp.partition for tp in ours.assignment()}
        other = {tp.partition for tp in theirs.assignment()}
        assert len(mine) == len(other) == 2 and not mine & other
        assert sorted(seen) == [(p, o) for p in range(4) for o in range(50)]
        # Each record once: partitions moved only after their commits.
        assert all(len(who) == 1 for who in seen.values()), seen
        # ours gave up exactly what theirs got, and was told before theirs got it.
        revoked = [e for e in events if e[:2] == ("ours", "revoke")]
        assert revoked and sorted(revoked[0][2]) == sorted(other)
        assert events.index(revoked[0]) < events.index(
            next(e for e in events if e[:2] == ("theirs", "assign") and e[2]))
        theirs.close()
        theirs = None
        deadline = time.monotonic() + 10
        while len(ours.assignment()) < 4 and time.monotonic() < deadline:
            ours.poll(0.1)
        assert len(ours.assignment()) == 4
    finally:
        ours.close()
        if theirs is not None:
            theirs.close()


def _poll_until(consumers, condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        for consumer in consumers:
            consumer.poll(0.05)


def test_regex_subscription_and_static_membership_with_librdkafka(broker):
    for topic in ("orders-1", "other"):
        _create(broker.bootstrap, topic, 2)
    port = _port(broker)

    def parts(consumer) -> list[tuple[str, int]]:
        return sorted((tp.topic, tp.partition) for tp in consumer.assignment())

    # A regex (RE2, resolved by the broker) follows a topic created later.
    regex = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rx",
                      "group.protocol": "consumer"})
    try:
        regex.subscribe(["^orders-.*"])
        _poll_until([regex], lambda: len(regex.assignment()) == 2)
        assert parts(regex) == [("orders-1", 0), ("orders-1", 1)]
        _create(broker.bootstrap, "orders-2", 2)
        _poll_until([regex], lambda: len(regex.assignment()) == 4)
        assert parts(regex)[2:] == [("orders-2", 0), ("orders-2", 1)]
        [member] = _describe(port, "rx").members
        assert "^orders-.*" in member.subscribed_topic_regex  # librdkafka wraps it in ( )
    finally:
        regex.close()

    # A static member leaves (epoch -2: its partitions wait for it) and comes back to the same
    # partitions and epoch, without a new group epoch.
    def static(instance: str) -> Consumer:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "st",
                             "group.protocol": "consumer", "group.instance.id": instance})
        consumer.subscribe(["other"])
        return consumer

    first, second = static("i1"), static("i2")
    try:
        _poll_until([first, second], lambda: first.assignment() and second.assignment())
        before = _describe(port, "st")
        mine = parts(first)
        first.close()
        left = _describe(port, "st")
        assert {m.instance_id: m.member_epoch for m in left.members} == {
            "i1": -2, "i2": before.group_epoch}
        for _ in range(10):
            second.poll(0.1)
        assert len(parts(second)) == 1  # i1's partition is kept for it
        first = static("i1")
        _poll_until([first, second], lambda: first.assignment())
        after = _describe(port, "st")
        assert parts(first) == mine and after.group_epoch == before.group_epoch
        assert {m.instance_id: m.member_epoch for m in after.members} == {
            "i1": before.group_epoch, "i2": before.group_epoch}
    finally:
        first.close()
        second.close()


def test_describe_topic_partitions_pages_with_a_cursor(broker):
    """DescribeTopicPartitions (KIP-966): sorted topics, topic ids as Metadata's, the partition
    limit and the cursor; an unknown topic is UNKNOWN_TOPIC_OR_PARTITION."""
    _create(broker.bootstrap, "dtp-a", 3)
    _create(broker.bootstrap, "dtp-b", 2)
    with RawConnection(_port(broker)) as conn:
        ids = {t.name: t.topic_id for t in conn.request(ApiKey.METADATA, 12, {
            "topics": [{"name": "dtp-a"}, {"name": "dtp-b"}]}).topics}
        named = [{"name": n} for n in ("dtp-b", "dtp-a", "nope")]
        first = conn.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
            "topics": named, "response_partition_limit": 2})
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in first.topics] == [
            ("dtp-a", [0, 1])]
        assert first.topics[0].topic_id == ids["dtp-a"] and ids["dtp-a"].int
        assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == ("dtp-a", 2)
        rest = conn.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
            "topics": named, "response_partition_limit": 10, "cursor": first.next_cursor})
        assert [(t.name, t.error_code, [p.partition_index for p in t.partitions])
                for t in rest.topics] == [("dtp-a", 0, [2]), ("dtp-b", 0, [0, 1]),
                                          ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])]
        assert rest.next_cursor is None
        assert list(rest.topics[1].partitions[0].eligible_leader_replicas) == []
