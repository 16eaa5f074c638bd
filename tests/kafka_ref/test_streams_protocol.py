"""Kafka Streams 4.4 with ``group.protocol=streams`` (KIP-1071) and exactly_once_v2 against
minibroker: a word count that repartitions and keeps a changelogged store (the broker creates both
internal topics from the topology), two instances (tasks move from one to the other by
revoke-before-assign), through a broker kill -9; the final counts in the output topic (read
committed) are exact. Then ``kafka-streams-groups.sh --describe`` on minibroker beside the same
tool on the reference Kafka 4.4 with the same application.
"""

from __future__ import annotations

import re
import struct
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from protocol.api_keys import ApiKey
from tests.kafka_ref.harness import KafkaCluster
from tests.kafka_ref.javaproc import JavaProgram
from tests.kafka_ref.test_java_client import create_topic, fault
from tests.kafka_ref.tools import Tool, normalize, run_batch
from tests.raw_client import RawConnection

pytestmark = [pytest.mark.xdist_group("kafka_ref"), pytest.mark.slow]

PARTITIONS = 4
WORDS = 25
BROKER_PROPERTIES = (
    "group.streams.heartbeat.interval.ms=500\n"
    "group.streams.session.timeout.ms=10000\n"
    "group.initial.rebalance.delay.ms=0\n"
    "offsets.topic.num.partitions=3\ntransaction.state.log.num.partitions=3\n"
)


STREAMS_GROUPS = "org.apache.kafka.tools.streams.StreamsGroupCommand"


def run_tool(*args: str) -> str:
    """``kafka-streams-groups.sh ARGS``' standard output (and error, when it fails)."""
    result = run_batch([Tool(STREAMS_GROUPS, list(args))])[0]
    return result.out if result.code == 0 else str(result)


def _produce(bootstrap: str, start: int, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    for i in range(start, start + n):
        producer.produce("words", key=b"k%d" % i, value=b"w%d" % (i % WORDS),
                         partition=i % PARTITIONS)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def _counts(bootstrap: str) -> dict[str, int]:
    """The latest count of each word in ``counts`` (read committed, up to the end)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "counts-reader",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        parts = [TopicPartition("counts", p, 0) for p in range(PARTITIONS)]
        ends = {p: consumer.get_watermark_offsets(TopicPartition("counts", p), timeout=10)[1]
                for p in range(PARTITIONS)}
        consumer.assign(parts)
        latest: dict[str, int] = {}
        position = dict.fromkeys(range(PARTITIONS), 0)
        deadline = time.monotonic() + 30
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                # read_committed stops at the last stable offset: positions tell where it is
                for tp in consumer.position(parts):
                    position[tp.partition] = max(position[tp.partition], tp.offset)
                continue
            if msg.error():
                continue
            latest[msg.key().decode()] = struct.unpack(">q", msg.value())[0]
            position[msg.partition()] = msg.offset() + 1
        return latest
    finally:
        consumer.close()


def _wait_counts(bootstrap: str, expected: dict[str, int], timeout: float = 150) -> None:
    deadline = time.monotonic() + timeout
    got: dict[str, int] = {}
    while time.monotonic() < deadline:
        got = _counts(bootstrap)
        if got == expected:
            return
        time.sleep(1)
    raise AssertionError(f"counts differ: {sorted(set(got.items()) ^ set(expected.items()))[:10]}")


def _wait_tasks_split(port: int, timeout: float = 60) -> None:
    """Both instances own active tasks, none twice, all eight of them (2 subtopologies x 4)."""
    deadline = time.monotonic() + timeout
    owned: list[list[tuple[str, int]]] = []
    while time.monotonic() < deadline:
        with RawConnection(port) as conn:
            group = conn.request(ApiKey.STREAMS_GROUP_DESCRIBE, 1, {
                "group_ids": ["wordcount"], "include_authorized_operations": False}).groups[0]
        owned = [[(t.subtopology_id, p) for t in m.assignment.active_tasks for p in t.partitions]
                 for m in group.members]
        flat = [task for tasks in owned for task in tasks]
        if group.group_state == "Stable" and len(owned) == 2 and all(owned) \
                and len(flat) == len(set(flat)) == 8:
            return
        time.sleep(0.5)
    raise AssertionError(f"tasks not split between the two instances: {owned}")


def _app(bootstrap: str, state_dir: Path, *extra: str) -> JavaProgram:
    return JavaProgram("StreamsApp", "--bootstrap", bootstrap, "--app-id", "wordcount",
                       "--input", "words", "--output", "counts", "--state-dir", str(state_dir),
                       "--prop", "group.protocol=streams",
                       "--prop", "processing.guarantee=exactly_once_v2",
                       "--prop", "request.timeout.ms=5000", *extra, stdin=True)


def _expected(n: int) -> dict[str, int]:
    return {f"w{w}": c for w, c in Counter(i % WORDS for i in range(n)).items()}


def test_kafka_streams_streams_protocol_exactly_once_through_kill9(kafka_ref, tmp_path):
    from tests.broker_process import BrokerProcess

    with BrokerProcess.configured(tmp_path, BROKER_PROPERTIES) as broker:
        bootstrap = broker.bootstrap
        create_topic(bootstrap, "words", PARTITIONS)
        create_topic(bootstrap, "counts", PARTITIONS)
        _produce(bootstrap, 0, 1000)
        # application.server: the broker answers each instance the endpoint map of the other
        # (interactive queries), as Kafka does
        with _app(bootstrap, tmp_path / "a", "--prop", "application.server=127.0.0.1:7001") as a:
            a.wait_for(lambda e: e.get("state") == "RUNNING", timeout=90)
            _wait_counts(bootstrap, _expected(1000))
            with _app(bootstrap, tmp_path / "b",
                      "--prop", "application.server=127.0.0.1:7002") as b:
                b.wait_for(lambda e: e.get("state") == "RUNNING", timeout=90)
                _produce(bootstrap, 1000, 1000)
                _wait_counts(bootstrap, _expected(2000))
                _wait_tasks_split(broker.port)
                # each instance knows both endpoints and the partitions behind them: 4 of "words"
                # and 4 of the repartition topic between the two
                both = lambda e: re.fullmatch(  # noqa: E731
                    r"127\.0\.0\.1:7001=\d+,127\.0\.0\.1:7002=\d+", e.get("hosts", "")) and \
                    sum(int(x.split("=")[1]) for x in e["hosts"].split(",")) == 8
                a.wait_for(both, timeout=30)
                b.wait_for(both, timeout=30)
                fault(broker, "kill9")
                _produce(broker.bootstrap, 2000, 1000)
                _wait_counts(broker.bootstrap, _expected(3000))
                assert not [e for e in a.events + b.events if "error" in e], a.output()
                out = run_tool("--bootstrap-server",
                               broker.bootstrap, "--describe", "--group", "wordcount")
                assert "wordcount" in out


def test_streams_groups_describe_beside_kafka(kafka_ref, tmp_path):
    """``kafka-streams-groups.sh --describe --members`` on the same one-instance application:
    the same columns and rows (member ids, hosts and epochs aside)."""
    from tests.broker_process import BrokerProcess

    outputs = {}
    kafka = KafkaCluster(tmp_path / "kafka", 1, config={
        "offsets.topic.num.partitions": 3, "transaction.state.log.num.partitions": 3,
        "share.coordinator.state.topic.num.partitions": 1,
        "group.streams.heartbeat.interval.ms": 500,
        "group.streams.min.heartbeat.interval.ms": 500})
    kafka.start()
    (tmp_path / "mini").mkdir()
    try:
        with BrokerProcess.configured(tmp_path / "mini", BROKER_PROPERTIES) as broker:
            for name, bootstrap in (("kafka", kafka.bootstrap), ("minibroker", broker.bootstrap)):
                create_topic(bootstrap, "words", PARTITIONS)
                create_topic(bootstrap, "counts", PARTITIONS)
                _produce(bootstrap, 0, 100)
                with _app(bootstrap, tmp_path / f"state-{name}") as app:
                    app.wait_for(lambda e: e.get("state") == "RUNNING", timeout=90)
                    _wait_counts(bootstrap, _expected(100))
                    outputs[name] = [
                        run_tool("--bootstrap-server", bootstrap, *args)
                        for args in (("--list",),
                                     ("--describe", "--group", "wordcount", "--members"),
                                     ("--describe", "--group", "wordcount", "--state"),
                                     ("--describe", "--group", "wordcount", "--offsets"))]
    finally:
        kafka.stop()
    for mini, ref in zip(outputs["minibroker"], outputs["kafka"], strict=True):
        print(f"--- minibroker:\n{mini}--- kafka:\n{ref}")
        # rows after the header in no defined order (the tool walks a hash map)
        assert _rows(mini)[:1] == _rows(ref)[:1], (mini, ref)
        assert sorted(_rows(mini)[1:]) == sorted(_rows(ref)[1:]), (mini, ref)


def _rows(text: str) -> list[list[str]]:
    """The table without the values that differ by run: member ids (22 characters of base64),
    process and client ids (UUIDs), hosts and the coordinator's port."""
    rows = []
    for line in normalize(text).splitlines():
        cells = line.split()
        if cells:
            rows.append(["*" if re.fullmatch(r"[\w-]{22}|127\.0\.0\.1:\d+", c)
                         or "<uuid>" in c or "/" in c else c for c in cells])
    return rows
