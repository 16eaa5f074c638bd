"""OffsetForLeaderEpoch (KIP-320) against the real broker on loopback: the end offset of leader
epoch 0 (the only one of a single broker), unknown epochs, the current-leader-epoch fences,
unknown partitions, every version Kafka 4.4 serves (2-4); librdkafka consuming from a position
that carries a leader epoch."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.broker_process import BrokerProcess
from tests.raw_client import RawConnection


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("ofle") / "data") as proc:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic("epochs", 2, 1)])["epochs"].result(timeout=15)
        producer = Producer({"bootstrap.servers": proc.bootstrap})
        for i in range(5):
            producer.produce("epochs", b"%d" % i, partition=0)
        assert producer.flush(15) == 0
        yield proc


def _ask(port: int, version: int, partitions, topic="epochs"):
    with RawConnection(port) as conn:
        answer = conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, {
            "replica_id": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": p, "current_leader_epoch": current, "leader_epoch": epoch}
                for p, current, epoch in partitions]}]})
    return [(p.partition, ErrorCode(p.error_code), p.leader_epoch, p.end_offset)
            for t in answer.topics for p in t.partitions]


@pytest.mark.parametrize("version", [2, 3, 4])
def test_end_offsets_and_fences_as_kafka(broker, version):
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    assert _ask(port, version, [(0, -1, 0), (1, -1, 0), (0, 0, 0), (0, -1, 3), (0, -1, -1),
                                (0, 1, 0), (0, -1, -5)]) == [
        (0, ErrorCode.NONE, 0, 5),                    # epoch 0 ends at the log end
        (1, ErrorCode.NONE, 0, 0),                    # an empty partition
        (0, ErrorCode.NONE, 0, 5),                    # current leader epoch 0: the leader's
        (0, ErrorCode.NONE, -1, -1),                  # an epoch after the last: unknown
        (0, ErrorCode.NONE, -1, -1),                  # no epoch
        (0, ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1),  # the client knows a newer leader
        (0, ErrorCode.NONE, -5, 0),                   # before epoch 0: where epoch 0 starts
    ]
    assert _ask(port, version, [(7, -1, 0)]) == [(7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
    assert _ask(port, version, [(0, -1, 0)], topic="nope") == [
        (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]


def test_librdkafka_consumes_from_a_position_with_a_leader_epoch(broker):
    """A position that carries a leader epoch (KIP-320; librdkafka may validate it with
    OffsetForLeaderEpoch first) is consumed from as given."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ofle",
                         "enable.auto.commit": False})
    try:
        tp = TopicPartition("epochs", 0, 2, leader_epoch=0)
        consumer.assign([tp])
        got = []
        for _ in range(100):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.offset())
                assert msg.leader_epoch() == 0
            if len(got) == 3:
                break
        assert got == [2, 3, 4]
    finally:
        consumer.close()
