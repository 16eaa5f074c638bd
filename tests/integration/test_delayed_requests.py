"""Delayed coordinator requests (Jepsen 2024, KAFKA-17754): a fault-injection proxy holds the
EndTxn(commit) of transaction 1 on its connection past the client's request timeout; the client
retries on a new connection and transaction 1 commits; transaction 2 writes records; then the held
request is delivered. It must never act on transaction 2, which the application aborts.

- Our client, transaction version 2 (the broker's default): EndTxn v5 bumped the epoch, so the
  late request is fenced. Version 1 (``transaction.version=1``): the client bumps the epoch itself
  after a timed-out EndTxn (InitProducerId, KIP-360) before the next transaction. 0 aborted
  records visible, every committed one visible, in every round.
- confluent-kafka (librdkafka: no transaction version 2, its issue 5423): the late request commits
  transaction 2 - the anomaly, as documented in docs/design.md section 5.1; with the mitigation documented there
  (re-create the producer when commit_transaction() took longer than socket.timeout.ms, i.e. an
  EndTxn timed out and was retried) nothing of transaction 2 is visible.
- kafka-python: a timed-out EndTxn is a fatal error (commit_transaction raises), so the
  application must re-create the producer; its InitProducerId aborts transaction 1 and bumps the
  epoch, and the late EndTxn is fenced: transaction 1 is not visible (the application was told it
  failed), the next transaction commits normally.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import Producer as CProducer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from client import Producer
from protocol.api_keys import ApiKey
from tests.broker_process import BrokerProcess
from tests.fault_proxy import HoldingProxy

ROUNDS = 3
TIMEOUT_S = 1.5  # the clients' request timeout; the proxy holds EndTxn past it
TOPIC = "delayed"


def start(tmp_path: Path, transaction_version: int) -> tuple[HoldingProxy, BrokerProcess]:
    """The broker advertises the proxy's port, so every client connection goes through it."""
    proxy = HoldingProxy(("127.0.0.1", 1))
    broker = BrokerProcess.configured(
        tmp_path,
        f"transaction.version={transaction_version}\n"
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=200\n",
        "--advertised-port", str(proxy.port))
    try:
        broker.start()
    except BaseException:
        proxy.close()
        raise
    proxy.upstream = ("127.0.0.1", broker.port)
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(
        timeout=15)
    return proxy, broker


@pytest.fixture(params=[1], ids=["tv1"])
def transaction_version(request) -> int:
    return request.param


def visible(bootstrap: str, expected_committed: int) -> list[bytes]:
    """Everything a read_committed reader sees (waits for the committed records, then a little)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([CTopicPartition(TOPIC, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
            if len(got) >= expected_committed and quiet_until is None:
                quiet_until = time.monotonic() + 1.0
            if quiet_until is not None and time.monotonic() > quiet_until:
                break
    finally:
        consumer.close()
    return got


def committed_and_aborted(values: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    return ([v for v in values if v.startswith(b"keep")],
            [v for v in values if v.startswith(b"drop")])


def test_our_client_a_late_end_txn_never_acts_on_the_next_transaction(tmp_path,
                                                                      transaction_version):
    proxy, broker = start(tmp_path, transaction_version)
    try:
        producer = Producer({"bootstrap.servers": proxy.bootstrap, "transactional.id": "ours",
                             "request.timeout.ms": int(TIMEOUT_S * 1000), "linger.ms": 0,
                             "delivery.timeout.ms": 30_000})
        producer.init_transactions(15)
        assert producer._engine._tm.tv2 is (transaction_version == 2)
        for r in range(ROUNDS):
            producer.begin_transaction()
            for i in range(3):
                producer.send(TOPIC, value=b"keep-%d-%d" % (r, i))
            producer.flush(15)
            proxy.hold(ApiKey.END_TXN)
            producer.commit_transaction(30)  # times out once, retried on a new connection
            assert proxy.holding == 1
            producer.begin_transaction()
            for i in range(3):
                producer.send(TOPIC, value=b"drop-%d-%d" % (r, i))
            producer.flush(15)
            assert proxy.release() == 1
            time.sleep(0.5)  # the late EndTxn is answered (fenced) meanwhile
            producer.abort_transaction(15)
        producer.close(10)
        keep, drop = committed_and_aborted(visible(proxy.bootstrap, 3 * ROUNDS))
        assert drop == []
        assert sorted(keep) == sorted(b"keep-%d-%d" % (r, i) for r in range(ROUNDS)
                                      for i in range(3))
    finally:
        proxy.close()
        broker.stop()


def _confluent_round(proxy: HoldingProxy, producer: CProducer, config: dict, r: int,
                     mitigate: bool) -> CProducer:
    producer.begin_transaction()
    for i in range(3):
        producer.produce(TOPIC, b"keep-%d-%d" % (r, i))
    producer.flush(15)
    proxy.hold(ApiKey.END_TXN)
    started = time.monotonic()
    producer.commit_transaction(30)  # librdkafka retries the timed-out EndTxn by itself
    took = time.monotonic() - started
    assert proxy.holding == 1 and took >= TIMEOUT_S
    if mitigate and took >= TIMEOUT_S:
        # The documented mitigation: an EndTxn timed out (the commit took longer than
        # socket.timeout.ms): re-create the producer; its InitProducerId bumps the epoch.
        producer = CProducer(config)
        producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(TOPIC, b"drop-%d-%d" % (r, i))
    producer.flush(15)
    assert proxy.release() == 1
    time.sleep(0.5)
    try:
        producer.abort_transaction(15)
    except KafkaException as exc:
        # Without the mitigation the late EndTxn committed transaction 2: abort fails (fatal).
        assert not mitigate, exc
        producer = CProducer(config)
        producer.init_transactions(15)
    return producer


@pytest.mark.slow
@pytest.mark.parametrize("mitigate", [False, True], ids=["as-is", "mitigated"])
def test_confluent_kafka_late_end_txn_as_documented(tmp_path, mitigate):
    proxy, broker = start(tmp_path, 2)  # librdkafka speaks version 1 whatever the broker offers
    try:
        config = {"bootstrap.servers": proxy.bootstrap, "transactional.id": "theirs",
                  "socket.timeout.ms": int(TIMEOUT_S * 1000), "linger.ms": 0}
        producer = CProducer(config)
        producer.init_transactions(15)
        for r in range(ROUNDS):
            producer = _confluent_round(proxy, producer, config, r, mitigate)
        keep, drop = committed_and_aborted(visible(proxy.bootstrap, 3 * ROUNDS))
        assert len(keep) == 3 * ROUNDS
        if mitigate:
            assert drop == []
        else:
            # docs/design.md 5.1 "Delayed requests": the anomaly Jepsen found, every round.
            assert len(drop) == 3 * ROUNDS
    finally:
        proxy.close()
        broker.stop()


@pytest.mark.slow
def test_kafka_python_late_end_txn_as_documented(tmp_path):
    kafka = pytest.importorskip("kafka")
    proxy, broker = start(tmp_path, 2)
    try:
        def new_producer():
            producer = kafka.KafkaProducer(bootstrap_servers=proxy.bootstrap,
                                           transactional_id="kp", linger_ms=0,
                                           request_timeout_ms=int(TIMEOUT_S * 1000))
            producer.init_transactions()
            return producer

        producer = new_producer()
        for r in range(ROUNDS):
            producer.begin_transaction()
            for i in range(3):
                producer.send(TOPIC, b"lost-%d-%d" % (r, i), partition=0)
            producer.flush(15)
            proxy.hold(ApiKey.END_TXN)
            with pytest.raises(kafka.errors.KafkaError):
                producer.commit_transaction()  # RequestTimedOut: fatal for kafka-python
            assert proxy.holding == 1
            producer.close(5)
            producer = new_producer()  # aborts transaction 1, bumps the epoch
            producer.begin_transaction()
            for i in range(3):
                producer.send(TOPIC, b"keep-%d-%d" % (r, i), partition=0)
            producer.flush(15)
            assert proxy.release() == 1  # the late EndTxn(commit) of transaction 1: fenced
            time.sleep(0.5)
            producer.commit_transaction()
        producer.close(5)
        values = visible(proxy.bootstrap, 3 * ROUNDS)
        assert sorted(values) == sorted(b"keep-%d-%d" % (r, i) for r in range(ROUNDS)
                                        for i in range(3))
    finally:
        proxy.close()
        broker.stop()
