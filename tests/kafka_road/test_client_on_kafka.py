"""Our client, unchanged, against the three-node Kafka 4.4 cluster (replication 3, min ISR 2): the
transaction tests of tests/integration/test_client_transactions.py run there as they are (their
``bootstrap`` is the cluster's here), and exactly-once holds while a Kafka broker is killed -9 in
the middle of a transactional run and restarted."""

from __future__ import annotations

import threading
import time

import pytest

from client import Admin, Producer
from tests.integration import test_client_transactions as txn_tests
from tests.integration.test_client_transactions import create, ours

pytestmark = [pytest.mark.xdist_group("kafka_three"), pytest.mark.slow]


@pytest.fixture
def bootstrap(kafka_three):
    return kafka_three.bootstrap


# The same checks, against Kafka (the lost-acknowledgement test is minibroker's own: a proxy in
# front of one broker process; its Kafka counterpart is the kill -9 test below).
test_commit_and_abort_visibility = txn_tests.test_commit_and_abort_visibility
test_their_transactional_producers_to_our_consumer = txn_tests.test_their_transactional_producers_to_our_consumer
test_zombie_producer_is_fenced = txn_tests.test_zombie_producer_is_fenced
test_consume_transform_produce_with_offsets_in_the_transaction = (
    txn_tests.test_consume_transform_produce_with_offsets_in_the_transaction)
test_transaction_handed_to_another_process = txn_tests.test_transaction_handed_to_another_process
test_admin_lists_and_describes_transactions = txn_tests.test_admin_lists_and_describes_transactions


def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        (description,) = admin.describe_topics([topic])
    return next(p.leader for p in description.partitions if p.partition == partition)


def test_transactions_exactly_once_across_a_kafka_broker_killed(kafka_three):
    """Rounds of 1000 records over 2 partitions in transactions; in the middle of one, the leader
    of partition 0 is killed -9 (the client moves to the new leader), and restarted later."""
    bootstrap = kafka_three.bootstrap
    topic = "road-kill-txn"
    create(bootstrap, topic, 2)
    victim = leader_of(bootstrap, topic, 0)
    config = {
        "bootstrap.servers": bootstrap,
        "transactional.id": "road-kill-txn-tx",
        "batch.size": 2048,
        "linger.ms": 1,
        "retry.backoff.ms": 50,
        "delivery.timeout.ms": 120_000,
        "transaction.timeout.ms": 60_000,
    }
    expected: list[bytes] = []
    killed = threading.Event()
    try:
        with Producer(config) as producer:
            producer.init_transactions()
            for round_ in range(6):
                producer.begin_transaction()
                for i in range(1000):
                    value = b"%d-%04d" % (round_, i)
                    producer.send(topic, value, partition=i % 2)
                    expected.append(value)
                    if round_ == 2 and i == 500:
                        kafka_three.kill9(victim)  # mid-transaction, records in flight
                        killed.set()
                producer.commit_transaction()
                if round_ == 4:
                    kafka_three.start_node(victim)
        assert leader_of(bootstrap, topic, 0) != victim or killed.is_set()
    finally:
        if kafka_three.node(victim).proc is None:
            kafka_three.start_node(victim)
    got = ours(bootstrap, topic, 2)
    assert sorted(got) == sorted(expected)  # each record once: nothing lost, nothing doubled
    for p in (0, 1):
        mine = [v for v in got if int(v.split(b"-")[1]) % 2 == p]
        assert mine == sorted(mine)  # and in order


def test_aborted_transaction_across_a_kafka_broker_killed(kafka_three):
    """A transaction aborted after its partition leader died stays invisible; the next one commits."""
    bootstrap = kafka_three.bootstrap
    topic = "road-kill-abort"
    create(bootstrap, topic, 1)
    victim = leader_of(bootstrap, topic, 0)
    config = {"bootstrap.servers": bootstrap, "transactional.id": "road-kill-abort-tx",
              "retry.backoff.ms": 50}
    try:
        with Producer(config) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            for i in range(100):
                producer.send(topic, b"dropped-%d" % i)
            producer.flush()
            kafka_three.kill9(victim)
            producer.abort_transaction()
            producer.begin_transaction()
            for i in range(100):
                producer.send(topic, b"kept-%d" % i)
            producer.commit_transaction()
    finally:
        kafka_three.start_node(victim)
    deadline = time.monotonic() + 60
    while True:
        got = ours(bootstrap, topic, 1)
        if len(got) >= 100 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert got == [b"kept-%d" % i for i in range(100)]
