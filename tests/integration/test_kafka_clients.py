"""confluent-kafka and kafka-python, unmodified, against the real broker process on loopback."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

N_RECORDS = 10_000
PARTITIONS = 3


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout=15)


def idempotent_producer(bootstrap: str, **extra) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            **extra,
        }
    )


def produce_records(bootstrap: str, topic: str, n: int) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """Produce ``n`` keyed records; returns {(partition, offset): (key, value)} from the reports."""
    delivered: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    errors = []

    def report(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    producer = idempotent_producer(bootstrap)
    for i in range(n):
        producer.produce(topic, key=b"key-%d" % i, value=b"value-%d" % i, on_delivery=report)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return delivered


def consume_confluent(bootstrap: str, topic: str, expected: int, partitions: int = PARTITIONS) -> dict:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "referee",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    deadline = time.monotonic() + 60
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                key = (msg.partition(), msg.offset())
                assert key not in seen, f"offset delivered twice: {key}"
                seen[key] = (msg.key(), msg.value())
    finally:
        consumer.close()
    return seen


def consume_kafka_python(bootstrap: str, topic: str, expected: int, partitions: int = PARTITIONS) -> dict:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        consumer_timeout_ms=1000,
    )
    consumer.assign([KTopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    seen: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    deadline = time.monotonic() + 60
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=500).items():
                for msg in messages:
                    key = (tp.partition, msg.offset)
                    assert key not in seen, f"offset delivered twice: {key}"
                    seen[key] = (msg.key, msg.value)
    finally:
        consumer.close()
    return seen


@pytest.mark.slow
def test_idempotent_produce_consume_restart(broker_proc):
    topic = "orders"
    create_topic(broker_proc.bootstrap, topic)
    delivered = produce_records(broker_proc.bootstrap, topic, N_RECORDS)
    assert len(delivered) == N_RECORDS
    assert {p for p, _ in delivered} == set(range(PARTITIONS))
    # Offsets per partition are dense from 0: nothing lost, nothing duplicated.
    for p in range(PARTITIONS):
        offsets = sorted(o for q, o in delivered if q == p)
        assert offsets == list(range(len(offsets)))

    assert consume_confluent(broker_proc.bootstrap, topic, N_RECORDS) == delivered
    assert consume_kafka_python(broker_proc.bootstrap, topic, N_RECORDS) == delivered

    assert broker_proc.stop() == 0  # clean shutdown on SIGTERM
    broker_proc.restart()
    assert any("listening on" in line for line in broker_proc.output)
    assert consume_kafka_python(broker_proc.bootstrap, topic, N_RECORDS) == delivered
    assert consume_confluent(broker_proc.bootstrap, topic, N_RECORDS) == delivered


@pytest.mark.slow
def test_kill9_during_acks_all_keeps_every_acknowledged_record(broker_proc):
    topic = "crash"
    create_topic(broker_proc.bootstrap, topic)
    acknowledged: dict[bytes, tuple[int, int]] = {}
    stop = threading.Event()

    def report(err, msg) -> None:
        if err is None:
            acknowledged[msg.value()] = (msg.partition(), msg.offset())

    def produce_until_killed() -> None:
        producer = idempotent_producer(
            broker_proc.bootstrap, **{"message.timeout.ms": 3000, "retries": 2}
        )
        i = 0
        while not stop.is_set():
            try:
                producer.produce(topic, key=b"k%d" % i, value=b"v%08d" % i, on_delivery=report)
                i += 1
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
        producer.flush(5)

    thread = threading.Thread(target=produce_until_killed)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(acknowledged) < 20_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        broker_proc.kill9()
        killed_at = len(acknowledged)
    finally:
        stop.set()
        thread.join(30)
    assert killed_at > 0

    broker_proc.restart()
    total = sum(_end_offsets(broker_proc.bootstrap, topic).values())
    stored = consume_kafka_python(broker_proc.bootstrap, topic, total)
    values = [v for _, v in stored.values()]
    assert len(values) == len(set(values)), "a record is stored twice"
    by_value = {v: pos for pos, (_, v) in stored.items()}
    missing = [v for v in acknowledged if v not in by_value]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
    for value, position in acknowledged.items():
        assert by_value[value] == position


def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tps = [KTopicPartition(topic, p) for p in range(PARTITIONS)]
        return {tp.partition: off for tp, off in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()
