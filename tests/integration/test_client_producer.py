"""Our producer against the real broker, with confluent-kafka and kafka-python as referees.

Every test talks to a broker subprocess on 127.0.0.1 (the ``broker_proc`` fixture, or one started
here when a proxy must sit in front of it) and stops it through its own handle.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from client import Admin, Consumer, Producer
from client.errors import IllegalStateError, MessageTooLargeError
from client.partitioner import partition_for_key
from tests.broker_process import BrokerProcess
from tests.fault_proxy import FaultyProxy

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(name, partitions)


def read_with_our_consumer(
    bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30.0
):
    records = []
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(records) < expected and time.monotonic() < deadline:
            records.extend(consumer.poll(0.5))
        records.extend(consumer.poll(0.5))  # anything beyond the expected count
    return records


def read_with_confluent(
    bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30.0
):
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "referee",  # required by librdkafka; no subscribe, no commits
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(partitions)
        ]
    )
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error():
                    continue
                out.append(message)
    finally:
        consumer.close()
    return out


def read_with_kafka_python(
    bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30.0
):
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    consumer.assign([kafka.TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(500).values():
                out.extend(batch)
    finally:
        consumer.close()
    return out


def test_our_producer_to_confluent_and_kafka_python(broker_proc):
    bootstrap = broker_proc.bootstrap
    create_topic(bootstrap, "interop", 3)
    n = 3000
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 2}) as producer:
        futures = [
            producer.send(
                "interop",
                b"value-%d" % i,
                key=b"key-%d" % (i % 17),
                headers=[("i", str(i).encode())] if i % 100 == 0 else None,
            )
            for i in range(n)
        ]
        producer.flush()
        metadata = [f.result() for f in futures]
        assert producer.producer_id >= 0
    # The murmur2 partitioner: a key's partition is the Java client's choice.
    for i, md in enumerate(metadata):
        assert md.partition == partition_for_key(b"key-%d" % (i % 17), 3)

    for messages in (
        [
            (m.partition(), m.offset(), m.key(), m.value(), m.headers())
            for m in read_with_confluent(bootstrap, "interop", 3, n)
        ],
        [
            (r.partition, r.offset, r.key, r.value, r.headers or None)
            for r in read_with_kafka_python(bootstrap, "interop", 3, n)
        ],
    ):
        assert len(messages) == n
        by_partition = defaultdict(list)
        for partition, offset, key, value, headers in messages:
            by_partition[partition].append((offset, key, value, headers))
        for partition, rows in by_partition.items():
            rows.sort()
            indexes = [int(value.split(b"-")[1]) for _, _, value, _ in rows]
            assert indexes == sorted(indexes), "per-partition order is send order"
            for _offset, key, value, headers in rows:
                i = int(value.split(b"-")[1])
                assert key == b"key-%d" % (i % 17)
                assert partition == partition_for_key(key, 3)
                if i % 100 == 0:
                    assert [(k, bytes(v)) for k, v in headers] == [("i", str(i).encode())]
        assert sorted((md.partition, md.offset) for md in metadata) == sorted(
            (part, off) for part, rows in by_partition.items() for off, *_ in rows
        )


def test_same_key_same_partition_as_librdkafka_murmur2(broker_proc):
    bootstrap = broker_proc.bootstrap
    create_topic(bootstrap, "keys", 7)
    keys = [b"user-%d" % i for i in range(40)] + [b"", b"a", b"\x00\xff"]
    theirs = {}
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"}
    )

    def remember(err, msg):
        assert err is None
        theirs[msg.key()] = msg.partition()

    for key in keys:
        producer.produce("keys", b"v", key=key, on_delivery=remember)
    producer.flush(30)
    with Producer({"bootstrap.servers": bootstrap}) as ours:
        mine = {key: ours.send("keys", b"v", key=key).result(30).partition for key in keys}
    assert mine == theirs


def test_foreign_producers_to_our_consumer(broker_proc):
    bootstrap = broker_proc.bootstrap
    create_topic(bootstrap, "foreign", 2)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True}
    )
    for i in range(500):
        producer.produce(
            "foreign", b"c-%d" % i, key=b"k%d" % (i % 5), partition=i % 2, headers={"src": b"c"}
        )
    assert producer.flush(30) == 0
    kp = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(500):
        kp.send("foreign", b"k-%d" % i, partition=i % 2)
    kp.flush(30)
    kp.close()

    records = read_with_our_consumer(bootstrap, "foreign", 2, 1000)
    assert len(records) == 1000
    assert sorted(r.value for r in records) == sorted(
        [b"c-%d" % i for i in range(500)] + [b"k-%d" % i for i in range(500)]
    )
    for p in (0, 1):
        offsets = [r.offset for r in records if r.partition == p]
        assert offsets == list(range(500))
        assert [r.value for r in records if r.partition == p and r.value.startswith(b"c")] == [
            b"c-%d" % i for i in range(p, 500, 2)
        ]
    confluent_record = next(r for r in records if r.value == b"c-3")
    assert confluent_record.key == b"k3" and confluent_record.headers == (("src", b"c"),)


def test_exactly_once_in_order_across_lost_acknowledgements(tmp_path):
    """Every 4th Produce response is lost and its connection cut after the broker appended the
    batch: the resent batches must be recognised as duplicates, and order must hold."""
    proxy = FaultyProxy(("127.0.0.1", 1), drop_produce_responses_every=4)
    broker = BrokerProcess(tmp_path / "data", "--advertised-port", str(proxy.port))
    try:
        broker.start()
        proxy.upstream = ("127.0.0.1", broker.port)
        bootstrap = proxy.bootstrap
        create_topic(bootstrap, "eos", 3)
        n = 6000
        config = {
            "bootstrap.servers": bootstrap,
            "batch.size": 2048,  # many small batches: many requests in flight
            "linger.ms": 1,
            "retry.backoff.ms": 20,
        }
        with Producer(config) as producer:
            futures = [producer.send("eos", b"%06d" % i, key=b"k%d" % (i % 9)) for i in range(n)]
            producer.flush(60)
            for f in futures:
                f.result(0)
        assert proxy.dropped >= 3, "the test must actually lose acknowledgements"
        direct = f"127.0.0.1:{broker.port}"
        records = read_with_our_consumer(direct, "eos", 3, n)
    finally:
        proxy.close()
        broker.stop()
    values = [r.value for r in records]
    assert len(values) == n, f"{len(values) - len(set(values))} duplicates"
    assert sorted(values) == [b"%06d" % i for i in range(n)]
    per_key = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        per_key[r.key].append(int(r.value))
    for key, seq in per_key.items():
        assert seq == sorted(seq), f"reordered for {key}"


def test_connections_dropped_while_sending(tmp_path):
    proxy = FaultyProxy(("127.0.0.1", 1))
    broker = BrokerProcess(tmp_path / "data", "--advertised-port", str(proxy.port))
    try:
        broker.start()
        proxy.upstream = ("127.0.0.1", broker.port)
        create_topic(proxy.bootstrap, "drops", 1)
        n = 20000
        with Producer(
            {
                "bootstrap.servers": proxy.bootstrap,
                "batch.size": 4096,
                "linger.ms": 0,
                "retry.backoff.ms": 10,
            }
        ) as producer:
            futures = []
            for i in range(n):
                futures.append(producer.send("drops", b"%06d" % i))
                if i % 5000 == 2500:
                    proxy.drop_all()
            producer.flush(60)
            offsets = [f.result(0).offset for f in futures]
        records = read_with_our_consumer(f"127.0.0.1:{broker.port}", "drops", 1, n)
    finally:
        proxy.close()
        broker.stop()
    assert [r.value for r in records] == [b"%06d" % i for i in range(n)]
    assert offsets == list(range(n))


def test_callbacks_explicit_partition_and_errors(broker_proc):
    bootstrap = broker_proc.bootstrap
    create_topic(bootstrap, "cb", 2)
    seen = []
    with Producer({"bootstrap.servers": bootstrap, "max.request.size": 10_000}) as producer:
        for i in range(10):
            producer.send(
                "cb", b"x%d" % i, partition=1, on_delivery=lambda err, md: seen.append((err, md))
            )
        with pytest.raises(ValueError, match="Invalid partition"):
            producer.send("cb", b"x", partition=2)
        with pytest.raises(MessageTooLargeError, match="max.request.size"):
            producer.send("cb", b"x" * 20_000)
        producer.flush()
        metadata = producer.send("cb", "text value", key="text key", timestamp=1234).result(10)
        assert metadata.timestamp == 1234
        with pytest.raises(IllegalStateError, match="transactional.id"):
            producer.init_transactions()
    assert [md.offset for err, md in seen] == list(range(10))
    assert all(err is None and md.partition == 1 for err, md in seen)
    with pytest.raises(IllegalStateError):
        producer.send("cb", b"late")
    records = read_with_our_consumer(bootstrap, "cb", 2, 11)
    text = [r for r in records if r.key == b"text key"]
    assert len(text) == 1 and text[0].value == b"text value" and text[0].timestamp == 1234


def test_send_to_a_new_topic_auto_creates_it(broker_proc):
    with Producer({"bootstrap.servers": broker_proc.bootstrap}) as producer:
        md = producer.send("brand-new", b"hello").result(30)
    assert (md.topic, md.offset) == ("brand-new", 0)


def test_many_threads_share_one_producer(broker_proc):
    import threading

    bootstrap = broker_proc.bootstrap
    create_topic(bootstrap, "threads", 4)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 1}) as producer:

        def worker(t: int) -> None:
            for i in range(2000):
                producer.send("threads", b"%d-%d" % (t, i), key=b"t%d" % t)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        producer.flush(60)
    records = read_with_our_consumer(bootstrap, "threads", 4, 8000)
    assert len(records) == 8000
    for t in range(4):
        mine = [
            int(r.value.split(b"-")[1])
            for r in sorted(records, key=lambda r: (r.partition, r.offset))
            if r.key == b"t%d" % t
        ]
        assert mine == list(range(2000))
