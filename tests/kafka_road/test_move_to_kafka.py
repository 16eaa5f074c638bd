"""The move of docs/operations.md ("Moving to a Kafka cluster"): a small topic and a consumer group
go from minibroker to the three-node Kafka with examples/move_to_kafka.py; every committed record
arrives (key, value, headers, timestamp, partition, order), and the group resumes on Kafka at the
first record it had not consumed on minibroker: nothing lost, nothing read twice."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from client import Admin, Consumer, Producer, TopicPartition
from client.structs import ConfigResource
from tests.integration.test_cli import minibroker_argv

pytestmark = [pytest.mark.xdist_group("kafka_three"), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TOPIC, GROUP, PARTITIONS = "road-moved", "road-movers", 3


def read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {p: [] for p in range(partitions)}
    config = {"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
              "auto.offset.reset": "earliest"}
    with Consumer(config) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"could not read {topic} to {ends}"
            for r in consumer.poll(0.3):
                out[r.partition].append((r.key, r.value, r.headers, r.timestamp))
    return out


def consume_in_group(bootstrap: str, count: int, commit: bool = True) -> list[bytes]:
    """``count`` records as member of GROUP (subscribed), committing what it returned."""
    config = {"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "max.poll.records": 7}
    got: list[bytes] = []
    with Consumer(config) as consumer:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while len(got) < count:
            assert time.monotonic() < deadline, f"only {len(got)} of {count} records"
            records = consumer.poll(0.5)
            got.extend(r.value for r in records)
            if records and commit:
                consumer.commit()
    return got


def test_topic_and_group_move_to_kafka_with_nothing_lost(broker_proc, kafka_three):
    source, target = broker_proc.bootstrap, kafka_three.bootstrap
    with Admin({"bootstrap.servers": source}) as admin:
        admin.create_topic(TOPIC, PARTITIONS, configs={"retention.ms": "604800000"})
    values = [b"m%03d" % i for i in range(300)]
    # Transactions (one aborted) leave markers and aborted records in the log: the offsets on
    # Kafka differ, the group's position must still point at the same next record.
    with Producer({"bootstrap.servers": source, "transactional.id": "road-mover-tx"}) as producer:
        producer.init_transactions()
        for start in range(0, 200, 50):
            producer.begin_transaction()
            for i in range(start, start + 50):
                producer.send(TOPIC, values[i], key=b"k%d" % (i % 10), partition=i % PARTITIONS,
                              headers=[("n", b"%d" % i)], timestamp=1_700_000_000_000 + i)
            producer.commit_transaction()
            producer.begin_transaction()
            for i in range(5):
                producer.send(TOPIC, b"aborted-%d" % i, partition=i % PARTITIONS)
            producer.abort_transaction()
    with Producer({"bootstrap.servers": source}) as producer:
        for i in range(200, 300):
            producer.send(TOPIC, values[i], key=b"k%d" % (i % 10), partition=i % PARTITIONS,
                          headers=[("n", b"%d" % i)], timestamp=1_700_000_000_000 + i)
    # The group reads a part on minibroker and commits it.
    consumed_before = consume_in_group(source, 120)
    assert len(set(consumed_before)) == len(consumed_before)

    done = subprocess.run([sys.executable, str(ROOT / "examples" / "move_to_kafka.py"),
                           "--source", source, "--target", target, "--topic", TOPIC,
                           "--group", GROUP], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0] == {"topic": TOPIC, "partitions": PARTITIONS, "records": 300}

    # Every committed record, partition by partition, in order, with its key, headers, timestamp.
    assert read_all(target, TOPIC, PARTITIONS) == read_all(source, TOPIC, PARTITIONS)
    with Admin({"bootstrap.servers": target}) as admin:
        (description,) = admin.describe_topics([TOPIC])
        assert {len(p.replicas) for p in description.partitions} == {3}  # the target's default
        resource = ConfigResource("topic", TOPIC)
        assert admin.describe_configs([resource])[resource]["retention.ms"].value == "604800000"
    # The group's lag on Kafka, as our CLI shows it, is what it had left on minibroker.
    described = subprocess.run([*minibroker_argv(), "groups", "describe", GROUP,
                                "--bootstrap-server", target, "--format", "json"],
                               capture_output=True, text=True, timeout=60)
    assert described.returncode == 0, described.stderr
    (group,) = json.loads(described.stdout)
    lag = sum(row["lag"] for row in group["partitions"])
    assert lag == 300 - len(consumed_before)
    # The group resumes on Kafka where it left off: the rest, each once.
    consumed_after = consume_in_group(target, 300 - len(consumed_before))
    assert sorted(consumed_before + consumed_after) == values
