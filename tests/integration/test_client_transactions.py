"""Transactions end to end: commit/abort visibility, zombie fencing, offsets in a transaction,
handing a transaction to another process; confluent-kafka and kafka-python as referees.

Skipped (saying so) while the broker's ApiVersions does not list the transaction APIs.
"""

from __future__ import annotations

import time

import pytest

from client import Admin, Consumer, Producer, TopicPartition, TransactionHandle
from client.errors import (
    IllegalStateError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionAbortedError,
)
from protocol.api_keys import ApiKey
from tests.broker_process import BrokerProcess
from tests.fault_proxy import FaultyProxy, broker_supports

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

TXN_APIS = (
    ApiKey.FIND_COORDINATOR,
    ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.ADD_OFFSETS_TO_TXN,
    ApiKey.END_TXN,
    ApiKey.TXN_OFFSET_COMMIT,
)


@pytest.fixture
def bootstrap(broker_proc):
    if not broker_supports(broker_proc.bootstrap, *TXN_APIS):
        pytest.skip("the broker's ApiVersions does not list the transaction APIs (EndTxn ...) yet")
    return broker_proc.bootstrap


def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    from tests.spark.helpers import wait_for_topic  # also run against a Kafka cluster

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, partitions, exist_ok=True)
        wait_for_topic(admin, topic)


def ours(
    bootstrap: str, topic: str, partitions: int = 1, isolation: str = "read_committed"
) -> list[bytes]:
    """Every value our consumer returns up to the end offsets (the LSO under read_committed),
    once decided transactions are complete (Kafka writes the markers after answering EndTxn)."""
    from tests.spark.helpers import wait_for_decided_transactions

    wait_for_decided_transactions(bootstrap)
    config = {
        "bootstrap.servers": bootstrap,
        "auto.offset.reset": "earliest",
        "isolation.level": isolation,
    }
    tps = [(topic, p) for p in range(partitions)]
    out = []
    with Consumer(config) as consumer:
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "did not reach the end offsets"
            out.extend(r.value for r in consumer.poll(0.2))
    return out


def confluent_values(bootstrap: str, topic: str, partitions: int = 1) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "referee",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    tps = [
        confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
        for p in range(partitions)
    ]
    consumer.assign(tps)
    ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
    out = []
    deadline = time.monotonic() + 30
    try:
        while True:
            positions = {tp.partition: tp.offset for tp in consumer.position(tps)}
            if all(positions[p] >= ends[p] for p in ends):
                break
            assert time.monotonic() < deadline, "did not reach the end offsets"
            out.extend(m.value() for m in consumer.consume(500, 0.2) if not m.error())
    finally:
        consumer.close()
    return out


def kafka_python_values(bootstrap: str, topic: str, partitions: int = 1) -> list[bytes]:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    tps = [kafka.TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(tps)
    out = []
    deadline = time.monotonic() + 30
    try:
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "did not reach the end offsets"
            for batch in consumer.poll(200).values():
                out.extend(r.value for r in batch)
    finally:
        consumer.close()
    return out


def test_commit_and_abort_visibility(bootstrap):
    create(bootstrap, "vis", 2)
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": "vis-tx"}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(10):
            producer.send("vis", b"c1-%d" % i, partition=i % 2)
        producer.commit_transaction()

        producer.begin_transaction()
        futures = [producer.send("vis", b"a-%d" % i, partition=i % 2) for i in range(10)]
        producer.flush()
        producer.abort_transaction()
        assert all(f.result(0).offset >= 0 for f in futures)  # written, then aborted

        producer.begin_transaction()
        dropped = producer.send("vis", b"never-sent", partition=0)
        producer.abort_transaction()  # aborted before it was sent: dropped
        with pytest.raises(TransactionAbortedError):
            dropped.result(10)

        producer.begin_transaction()
        for i in range(5):
            producer.send("vis", b"open-%d" % i, partition=1)
        producer.flush()
        committed = sorted(b"c1-%d" % i for i in range(10))
        # The open transaction is invisible under read_committed, visible under
        # read_uncommitted once durable (answered once appended, its batches are synced within
        # half a second, or by its PrepareCommit if sooner).
        assert sorted(ours(bootstrap, "vis", 2)) == committed
        deadline = time.monotonic() + 10
        while True:
            uncommitted = ours(bootstrap, "vis", 2, isolation="read_uncommitted")
            if b"open-4" in uncommitted or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert {b"open-%d" % i for i in range(5)} <= set(uncommitted)
        assert {b"a-%d" % i for i in range(10)} <= set(uncommitted)
        producer.commit_transaction()

    expected = sorted([b"c1-%d" % i for i in range(10)] + [b"open-%d" % i for i in range(5)])
    assert sorted(ours(bootstrap, "vis", 2)) == expected
    assert sorted(confluent_values(bootstrap, "vis", 2)) == expected
    assert sorted(kafka_python_values(bootstrap, "vis", 2)) == expected


def test_their_transactional_producers_to_our_consumer(bootstrap):
    create(bootstrap, "theirs", 1)
    cp = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "c-tx"})
    cp.init_transactions(30)
    cp.begin_transaction()
    for i in range(5):
        cp.produce("theirs", b"c-commit-%d" % i)
    cp.commit_transaction(30)
    cp.begin_transaction()
    for i in range(5):
        cp.produce("theirs", b"c-abort-%d" % i)
    cp.flush(30)
    cp.abort_transaction(30)

    kp = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id="k-tx", enable_idempotence=True
    )
    kp.init_transactions()
    kp.begin_transaction()
    for i in range(5):
        kp.send("theirs", b"k-abort-%d" % i)
    kp.flush()
    kp.abort_transaction()
    kp.begin_transaction()
    for i in range(5):
        kp.send("theirs", b"k-commit-%d" % i)
    kp.commit_transaction()
    kp.close()

    got = ours(bootstrap, "theirs")
    assert got == [b"c-commit-%d" % i for i in range(5)] + [b"k-commit-%d" % i for i in range(5)]


def test_zombie_producer_is_fenced(bootstrap):
    create(bootstrap, "zombie", 1)
    config = {"bootstrap.servers": bootstrap, "transactional.id": "zombie-tx"}
    zombie = Producer(config)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send("zombie", b"from-zombie").result(10)
        with Producer(config) as successor:
            successor.init_transactions()  # bumps the epoch: aborts the zombie's transaction
            assert successor.producer_epoch > zombie.producer_epoch
            assert successor.producer_id == zombie.producer_id
            successor.begin_transaction()
            successor.send("zombie", b"from-successor")
            successor.commit_transaction()
            # The zombie's next move fails: it is fenced, and stays unusable.
            with pytest.raises((ProducerFencedError, IllegalStateError)) as info:
                zombie.send("zombie", b"late").result(10)
                zombie.commit_transaction()
            fenced = info.value
            if isinstance(fenced, IllegalStateError):
                assert isinstance(fenced.__cause__, ProducerFencedError)
            with pytest.raises(IllegalStateError):
                zombie.begin_transaction()
    finally:
        zombie.close(0)
    assert ours(bootstrap, "zombie") == [b"from-successor"]


def test_consume_transform_produce_with_offsets_in_the_transaction(bootstrap):
    if not broker_supports(bootstrap, ApiKey.JOIN_GROUP, ApiKey.OFFSET_FETCH):
        pytest.skip("the broker's ApiVersions does not list the group APIs yet")
    create(bootstrap, "source", 1)
    create(bootstrap, "sink", 1)
    with Producer({"bootstrap.servers": bootstrap}) as plain:
        for i in range(20):
            plain.send("source", b"%d" % i)
    group = "ctp"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe(["source"])
        records = []
        deadline = time.monotonic() + 30
        while len(records) < 20 and time.monotonic() < deadline:
            records.extend(consumer.poll(0.5))
        assert len(records) == 20
        with Producer({"bootstrap.servers": bootstrap, "transactional.id": "ctp-tx"}) as producer:
            producer.init_transactions()
            # An aborted round: neither output nor offsets become visible.
            producer.begin_transaction()
            for r in records[:10]:
                producer.send("sink", b"x" + r.value)
            producer.send_offsets_to_transaction({("source", 0): 10}, consumer.group_metadata())
            producer.abort_transaction()
            with Admin({"bootstrap.servers": bootstrap}) as admin:
                assert admin.list_group_offsets(group).get(TopicPartition("source", 0)) is None
            # A committed round: both do, atomically.
            producer.begin_transaction()
            for r in records:
                producer.send("sink", b"y" + r.value)
            producer.send_offsets_to_transaction({("source", 0): 20}, consumer.group_metadata())
            producer.commit_transaction()
    finally:
        consumer.close()
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        assert admin.list_group_offsets(group)[TopicPartition("source", 0)].offset == 20
    assert ours(bootstrap, "sink") == [b"y%d" % i for i in range(20)]


def test_transaction_handed_to_another_process(bootstrap):
    create(bootstrap, "handoff", 2)
    config = {"bootstrap.servers": bootstrap, "transactional.id": "handoff-tx"}
    with Producer(config) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(6):
            producer.send("handoff", b"h-%d" % i, partition=i % 2)
        handle = producer.transaction_handle()
        with pytest.raises(IllegalStateError):
            producer.send("handoff", b"after")
    assert handle.transactional_id == "handoff-tx" and not handle.empty
    assert ours(bootstrap, "handoff", 2) == []  # still open
    shipped = TransactionHandle.from_dict(handle.to_dict())
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.end_transaction(shipped, commit=True)
        admin.end_transaction(shipped, commit=True)  # a repeat of the same outcome is fine
        with pytest.raises(InvalidTxnStateError):
            admin.end_transaction(shipped, commit=False)
    assert sorted(ours(bootstrap, "handoff", 2)) == sorted(b"h-%d" % i for i in range(6))

    # Abort through a handle, and an empty transaction's handle.
    with Producer(config) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("handoff", b"dropped", partition=0)
        aborted = producer.transaction_handle()
    with Producer(config) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        empty = producer.transaction_handle()
    assert empty.empty
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.end_transaction(empty, commit=True)  # nothing to do
        # The second init_transactions fenced `aborted` (and aborted its transaction): committing
        # it is refused, aborting it is what already happened.
        with pytest.raises(ProducerFencedError):
            admin.end_transaction(aborted, commit=True)
        admin.end_transaction(aborted, commit=False)
    assert b"dropped" not in ours(bootstrap, "handoff", 2)


def test_transactional_exactly_once_across_lost_acknowledgements(tmp_path):
    proxy = FaultyProxy(("127.0.0.1", 1), drop_produce_responses_every=3)
    broker = BrokerProcess(tmp_path / "data", "--advertised-port", str(proxy.port))
    try:
        broker.start()
        proxy.upstream = ("127.0.0.1", broker.port)
        direct = f"127.0.0.1:{broker.port}"
        if not broker_supports(direct, *TXN_APIS):
            pytest.skip(
                "the broker's ApiVersions does not list the transaction APIs (EndTxn ...) yet"
            )
        create(proxy.bootstrap, "txn-eos", 2)
        config = {
            "bootstrap.servers": proxy.bootstrap,
            "transactional.id": "eos-tx",
            "batch.size": 2048,
            "linger.ms": 1,
            "retry.backoff.ms": 20,
        }
        expected = []
        with Producer(config) as producer:
            producer.init_transactions()
            for round_ in range(3):
                producer.begin_transaction()
                for i in range(1000):
                    value = b"%d-%04d" % (round_, i)
                    producer.send("txn-eos", value, partition=i % 2)
                    expected.append(value)
                producer.commit_transaction()
        assert proxy.dropped >= 2
        got = ours(direct, "txn-eos", 2)
    finally:
        proxy.close()
        broker.stop()
    assert sorted(got) == sorted(expected)
    for p in (0, 1):
        mine = [v for v in got if int(v.split(b"-")[1]) % 2 == p]
        assert mine == sorted(mine)


def test_admin_lists_and_describes_transactions(bootstrap):
    if not broker_supports(bootstrap, ApiKey.LIST_TRANSACTIONS, ApiKey.DESCRIBE_TRANSACTIONS):
        pytest.skip("the broker's ApiVersions does not list ListTransactions/DescribeTransactions")
    create(bootstrap, "described", 2)
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": "described-tx"}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("described", b"x", partition=1)
        handle = producer.transaction_handle()
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        (desc,) = admin.describe_transactions(["described-tx"])
        assert desc.state == "Ongoing"
        assert (desc.producer_id, desc.producer_epoch) == (handle.producer_id, handle.producer_epoch)
        assert desc.partitions == (TopicPartition("described", 1),)
        assert desc.start_time_ms > 0
        listed = admin.list_transactions(states=["Ongoing"])
        assert ("described-tx", handle.producer_id, "Ongoing") in listed
        admin.end_transaction(handle, commit=True)
        # minibroker answers EndTxn once the commit is complete; Kafka once PrepareCommit is
        # written, the markers and CompleteCommit follow (tests/kafka_road runs this on Kafka).
        deadline = time.monotonic() + 10
        while (after := admin.describe_transactions(["described-tx"])[0]).state == "PrepareCommit":
            assert time.monotonic() < deadline, "the commit did not complete"
            time.sleep(0.05)
        assert after.state == "CompleteCommit"
        assert "described-tx" not in {t.transactional_id for t in admin.list_transactions(states=["Ongoing"])}
