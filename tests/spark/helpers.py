"""Helpers for the Spark suite that talk to the broker with our client directly: the referee for
what the connector wrote. No pyspark here, so that modules skip cleanly without it."""

from __future__ import annotations

import time

from client import Admin, Consumer, ConsumerRecord, Producer
from client.errors import BrokerConnectionError
from client.structs import TopicDescription


def create_topic(bootstrap: str, topic: str, partitions: int,
                 configs: dict[str, str] | None = None) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, partitions, configs=configs)
        wait_for_topic(admin, topic)


def wait_for_topic(admin: Admin, topic: str, timeout: float = 60.0) -> TopicDescription:
    """Until Metadata shows ``topic`` with a leader for every partition. At once on minibroker; on
    a Kafka cluster CreateTopics answers when the controller has the topic, and each broker learns
    it a moment later (Kafka's own tests wait the same way)."""
    from client.errors import UnknownTopicOrPartitionError

    deadline = time.monotonic() + timeout
    seen: object = None
    while True:
        try:
            (description,) = admin.describe_topics([topic])
            # (a topic that already existed may have another partition count: exist_ok callers)
            if description.partitions and all(p.leader >= 0 for p in description.partitions):
                return description
            seen = description
        except UnknownTopicOrPartitionError as exc:
            seen = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} not in Metadata after {timeout} s; last: {seen!r}")
        time.sleep(0.1)


def end_offsets(bootstrap: str, topic: str, isolation: str = "read_committed") -> dict[int, int]:
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": isolation}) as consumer:
        tps = consumer.partitions_for(topic)
        return {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}


def wait_for_decided_transactions(bootstrap: str, timeout: float = 30.0) -> None:
    """Until no transaction is between its EndTxn's answer and its markers (PrepareCommit or
    PrepareAbort). minibroker answers EndTxn once the markers are written; Kafka answers once the
    decision is logged and writes the markers after, so a read_committed read right after a
    commit can still stop at the transaction there."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if not admin.list_transactions(states=["PrepareCommit", "PrepareAbort"]):
                    return
            except BrokerConnectionError:
                # ListTransactions asks every node; the tests that kill one ask while it is down
                # (Kafka's admin client fails the same way): ask again.
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"transactions still completing after {timeout} s")
            time.sleep(0.05)


def consume_all(bootstrap: str, topic: str, isolation: str = "read_committed", timeout: float = 30.0) -> list[ConsumerRecord]:
    """Every record of ``topic`` up to its current end (LSO under read_committed), once every
    decided transaction is complete."""
    wait_for_decided_transactions(bootstrap)
    config = {"bootstrap.servers": bootstrap, "isolation.level": isolation, "auto.offset.reset": "earliest"}
    out: list[ConsumerRecord] = []
    with Consumer(config) as consumer:
        tps = consumer.partitions_for(topic)
        ends = consumer.end_offsets(tps)
        consumer.assign(tps)
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} up to {ends}")
            out.extend(r for r in consumer.poll(0.2) if r.offset < ends[(r.topic, r.partition)])
    return out


def no_open_transactions(bootstrap: str, topic: str) -> bool:
    """True when the last stable offset of every partition is its high watermark."""
    wait_for_decided_transactions(bootstrap)
    return end_offsets(bootstrap, topic) == end_offsets(bootstrap, topic, "read_uncommitted")


def produce(bootstrap: str, topic: str, values: list[bytes], transactional_id: str | None = None, abort: bool = False) -> None:
    """``values`` round-robin over the topic's partitions; in one transaction if an id is given."""
    config = {"bootstrap.servers": bootstrap}
    if transactional_id:
        config["transactional.id"] = transactional_id
    with Producer(config) as producer:
        count = partition_count(bootstrap, topic)
        if transactional_id:
            producer.init_transactions()
            producer.begin_transaction()
        for i, value in enumerate(values):
            producer.send(topic, value, key=value, partition=i % count)
        if transactional_id:
            producer.flush()
            if abort:
                producer.abort_transaction()
            else:
                producer.commit_transaction()
        else:
            producer.flush()


def partition_count(bootstrap: str, topic: str) -> int:
    """(On a Kafka cluster the node asked may learn a topic just created a moment later.)"""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return len(wait_for_topic(admin, topic).partitions)


def slow_identity(value: bytes) -> bytes:
    """A UDF body that makes a write task take a while (5 ms a row), so that something can happen
    to the broker while the task is producing."""
    time.sleep(0.005)
    return value
