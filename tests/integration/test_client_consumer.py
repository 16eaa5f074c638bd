"""Our consumer against the real broker: assignment, positions, offsets and consumer groups.

Group tests need the broker's group coordinator: they run when the broker's ApiVersions lists
JoinGroup (and are skipped, saying so, when it does not).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
import trio

from client import Admin, Consumer, Producer, TopicPartition
from client.aio import AsyncConsumer, AsyncProducer
from client.errors import IllegalStateError, NoOffsetForPartitionError, OffsetOutOfRangeError
from protocol.api_keys import ApiKey
from tests.broker_process import BrokerProcess
from tests.fault_proxy import FaultyProxy, broker_supports

kafka = pytest.importorskip("kafka")


def produce(bootstrap: str, topic: str, partitions: int, n: int, create: bool = True) -> None:
    if create:
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topic(topic, partitions, exist_ok=True)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 1}) as producer:
        for i in range(n):
            producer.send(topic, b"%d" % i, partition=i % partitions)
        producer.flush(30)


def poll_until(consumer: Consumer, count: int, timeout: float = 30.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        out.extend(consumer.poll(0.2))
    return out


def require_groups(bootstrap: str) -> None:
    if not broker_supports(bootstrap, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT):
        pytest.skip("the broker's ApiVersions does not list JoinGroup/SyncGroup/Heartbeat yet")


def require_offsets(bootstrap: str) -> None:
    if not broker_supports(
        bootstrap, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.FIND_COORDINATOR
    ):
        pytest.skip("the broker's ApiVersions does not list OffsetCommit/OffsetFetch yet")


def test_assign_seek_position_pause(broker_proc):
    bootstrap = broker_proc.bootstrap
    produce(bootstrap, "pos", 2, 100)
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([("pos", 0), ("pos", 1)])
        assert consumer.assignment() == {TopicPartition("pos", 0), TopicPartition("pos", 1)}
        assert consumer.position(("pos", 0)) == 0
        assert consumer.end_offsets([("pos", 0), ("pos", 1)]) == {
            TopicPartition("pos", 0): 50,
            TopicPartition("pos", 1): 50,
        }
        assert consumer.beginning_offsets([("pos", 1)]) == {TopicPartition("pos", 1): 0}
        records = poll_until(consumer, 100)
        assert Counter(r.partition for r in records) == {0: 50, 1: 50}
        assert consumer.position(("pos", 1)) == 50
        consumer.seek(("pos", 1), 45)
        again = poll_until(consumer, 5)
        assert [(r.partition, r.offset) for r in again] == [(1, o) for o in range(45, 50)]

        consumer.pause([("pos", 0)])
        assert consumer.paused() == {TopicPartition("pos", 0)}
        produce(bootstrap, "pos", 2, 10, create=False)
        fresh = poll_until(consumer, 5, timeout=5)
        assert {r.partition for r in fresh} == {1}
        consumer.resume([("pos", 0)])
        rest = poll_until(consumer, 5, timeout=10)
        assert {r.partition for r in rest} == {0}

        consumer.seek_to_beginning([("pos", 0)])
        assert consumer.position(("pos", 0)) == 0
        consumer.seek_to_end()
        assert consumer.position(("pos", 1)) == 55
        assert consumer.poll(0.3) == []


def test_latest_and_none_reset_policies(broker_proc):
    bootstrap = broker_proc.bootstrap
    produce(bootstrap, "reset", 1, 20)
    with Consumer({"bootstrap.servers": bootstrap}) as consumer:  # default: latest
        consumer.assign([("reset", 0)])
        assert consumer.poll(0.3) == []
        assert consumer.position(("reset", 0)) == 20
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "none"}) as consumer:
        consumer.assign([("reset", 0)])
        with pytest.raises(NoOffsetForPartitionError):
            consumer.poll(0.3)


def test_reset_none_without_committed_offset_raises_at_once(broker_proc):
    """With a group but nothing committed, every poll raises (no busy loop returning [])."""
    bootstrap = broker_proc.bootstrap
    require_groups(bootstrap)
    require_offsets(bootstrap)
    produce(bootstrap, "none-group", 1, 5)
    config = {"bootstrap.servers": bootstrap, "group.id": "none-g", "auto.offset.reset": "none"}
    with Consumer(config) as consumer:
        consumer.assign([("none-group", 0)])
        start = time.monotonic()
        for _ in range(3):
            with pytest.raises(NoOffsetForPartitionError):
                consumer.poll(2.0)
        assert time.monotonic() - start < 1.0
        consumer.seek(("none-group", 0), 3)
        assert [r.offset for r in poll_until(consumer, 2, timeout=10)] == [3, 4]
    with Consumer({**config, "group.id": "none-g2"}) as consumer:
        consumer.subscribe(["none-group"])
        start = time.monotonic()
        with pytest.raises(NoOffsetForPartitionError):
            poll_until(consumer, 1, timeout=10)
        assert time.monotonic() - start < 5.0  # the join, then the raise


def test_reset_none_out_of_range_raises_and_stops_fetching(tmp_path):
    """A fetch position beyond the end with reset=none: poll raises OffsetOutOfRangeError naming
    the partition, which is not fetched again (no Fetch storm) until the application seeks."""
    proxy = FaultyProxy(("127.0.0.1", 1))
    broker = BrokerProcess(tmp_path / "data", "--advertised-port", str(proxy.port))
    try:
        broker.start()
        proxy.upstream = ("127.0.0.1", broker.port)
        bootstrap = proxy.bootstrap
        produce(bootstrap, "oor", 1, 10)
        config = {"bootstrap.servers": bootstrap, "auto.offset.reset": "none"}
        with Consumer(config) as consumer:
            consumer.assign([("oor", 0)])
            consumer.seek(("oor", 0), 100)
            start = time.monotonic()
            with pytest.raises(OffsetOutOfRangeError) as info:
                consumer.poll(5.0)
            assert time.monotonic() - start < 1.0
            assert info.value.partitions == {TopicPartition("oor", 0): 100}
            fetches = proxy.requests[ApiKey.FETCH]
            time.sleep(0.5)
            with pytest.raises(OffsetOutOfRangeError):
                consumer.poll(0.5)
            assert proxy.requests[ApiKey.FETCH] == fetches <= 2
            consumer.seek(("oor", 0), 8)
            assert [r.offset for r in poll_until(consumer, 2, timeout=10)] == [8, 9]
    finally:
        proxy.close()
        broker.stop()


def test_close_does_not_wait_for_a_long_poll_fetch(broker_proc):
    """close() of a consumer long-polling an empty partition is prompt and still commits."""
    bootstrap = broker_proc.bootstrap
    require_offsets(bootstrap)
    produce(bootstrap, "idle", 1, 5)
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": "prompt-close",
        "auto.offset.reset": "earliest",
        "fetch.max.wait.ms": 5000,
    }
    consumer = Consumer(config)
    try:
        consumer.assign([("idle", 0)])
        # The coordinator is found now: the first use of __consumer_offsets is not what we time.
        assert consumer.committed([("idle", 0)]) == {TopicPartition("idle", 0): None}
        assert len(poll_until(consumer, 5, timeout=10)) == 5
        assert consumer.poll(0.3) == []  # a Fetch at offset 5 now waits on the broker
    finally:
        start = time.monotonic()
        consumer.close()
        elapsed = time.monotonic() - start
    # Waiting for the Fetch would take fetch.max.wait.ms (5 s); close also commits (a durable
    # write at the broker), which took up to 0.8 s on a loaded 2-core machine.
    assert elapsed < 2.0, f"close took {elapsed:.2f} s"
    with Consumer(config) as again:  # close committed (auto-commit)
        assert again.committed([("idle", 0)])[TopicPartition("idle", 0)].offset == 5


def test_consumer_errors_for_misuse(broker_proc):
    with Consumer({"bootstrap.servers": broker_proc.bootstrap}) as consumer:
        with pytest.raises(IllegalStateError, match="not subscribed"):
            consumer.poll(0)
        with pytest.raises(IllegalStateError, match="group.id"):
            consumer.subscribe(["x"])
        with pytest.raises(IllegalStateError, match="No current assignment"):
            consumer.seek(("x", 0), 1)


def test_read_uncommitted_sees_the_same_plain_data(broker_proc):
    bootstrap = broker_proc.bootstrap
    produce(bootstrap, "iso", 1, 300)
    config = {
        "bootstrap.servers": bootstrap,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_uncommitted",
    }
    with Consumer(config) as consumer:
        consumer.assign([("iso", 0)])
        assert [int(r.value) for r in poll_until(consumer, 300)] == list(range(300))


async def test_async_consumer_and_producer_on_one_loop(broker_proc):
    bootstrap = broker_proc.bootstrap
    async with AsyncProducer({"bootstrap.servers": bootstrap}) as producer:
        futures = [await producer.send("async-topic", b"%d" % i) for i in range(50)]
        await producer.flush()
        assert (await futures[-1].wait()).offset == 49
    async with AsyncConsumer(
        {"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}
    ) as consumer:
        consumer.assign([("async-topic", 0)])
        got = []
        with trio.fail_after(20):
            while len(got) < 50:
                got.extend(await consumer.poll(0.2))
        assert [int(r.value) for r in got] == list(range(50))


def test_commit_and_committed_with_manual_assignment(broker_proc):
    bootstrap = broker_proc.bootstrap
    require_offsets(bootstrap)
    produce(bootstrap, "commits", 1, 30)
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": "manual",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    with Consumer(config) as consumer:
        consumer.assign([("commits", 0)])
        assert consumer.committed([("commits", 0)]) == {TopicPartition("commits", 0): None}
        poll_until(consumer, 30)
        consumer.commit()
        assert consumer.committed([("commits", 0)])[TopicPartition("commits", 0)].offset == 30
        consumer.commit({("commits", 0): 12})
        done = threading.Event()
        consumer.commit(
            {("commits", 0): 17}, asynchronous=True, callback=lambda err, offsets: done.set()
        )
        assert done.wait(10)
        assert consumer.committed([("commits", 0)])[TopicPartition("commits", 0)].offset == 17
    with Consumer(config) as consumer:  # a new instance starts at the committed offset
        consumer.assign([("commits", 0)])
        assert consumer.poll(5.0)[0].offset == 17
    # kafka-python reads the same committed offset.
    kc = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, group_id="manual", enable_auto_commit=False
    )
    try:
        assert kc.committed(kafka.TopicPartition("commits", 0)) == 17
    finally:
        kc.close()


def test_group_of_three_shares_six_partitions_through_rebalances(broker_proc):
    """Three of our consumers in one group over 6 partitions: each gets 2 (range assignor), every
    record is read once while members join and one leaves, committed offsets carry over."""
    bootstrap = broker_proc.bootstrap
    require_groups(bootstrap)
    require_offsets(bootstrap)
    produce(bootstrap, "grouped", 6, 600)
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": "three",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 300,
        "max.poll.interval.ms": 20_000,
    }
    lock = threading.Lock()
    seen: list[tuple[int, int]] = []
    assignments: dict[int, set] = {}
    events: list[tuple[int, str, list]] = []
    stop = threading.Event()
    started = []

    def member(index: int) -> None:
        consumer = Consumer(config)
        try:

            def on_assign(partitions):
                with lock:
                    assignments[index] = set(partitions)
                    events.append((index, "assigned", partitions))

            def on_revoke(partitions):
                consumer.commit()  # callbacks run in this thread: blocking calls are fine
                with lock:
                    events.append((index, "revoked", partitions))

            consumer.subscribe(["grouped"], on_assign=on_assign, on_revoke=on_revoke)
            started.append(index)
            while not stop.is_set() and not (index == 2 and leave.is_set()):
                records = consumer.poll(0.2)
                with lock:
                    seen.extend((r.partition, r.offset) for r in records)
                if records:
                    consumer.commit()
        finally:
            consumer.close()
            with lock:
                assignments.pop(index, None)

    leave = threading.Event()
    threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
    try:
        for th in threads:
            th.start()
            time.sleep(0.5)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if (
                    len(assignments) == 3
                    and all(len(a) == 2 for a in assignments.values())
                    and len(set(seen)) >= 600
                ):
                    break
            time.sleep(0.2)
        with lock:
            assert sorted(len(a) for a in assignments.values()) == [2, 2, 2], assignments
            union = set().union(*assignments.values())
            assert union == {TopicPartition("grouped", p) for p in range(6)}
        leave.set()  # member 2 leaves (LeaveGroup): the other two take over its partitions
        threads[2].join(30)
        produce(bootstrap, "grouped", 6, 60, create=False)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if (
                    len(assignments) == 2
                    and sum(len(a) for a in assignments.values()) == 6
                    and len(set(seen)) >= 660
                ):
                    break
            time.sleep(0.2)
        with lock:
            assert sorted(len(a) for a in assignments.values()) == [3, 3]
            assert len(set(seen)) == 660
    finally:
        stop.set()
        for th in threads:
            th.join(30)
    assert any(kind == "revoked" for _, kind, _ in events)
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        offsets = admin.list_group_offsets("three")
    assert sum(o.offset for o in offsets.values()) == 660


def test_subscribing_before_the_topic_exists(broker_proc):
    """The group leader watches subscribed topics: once the topic appears, the group rebalances
    and the new partitions are consumed."""
    bootstrap = broker_proc.bootstrap
    require_groups(bootstrap)
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": "early",
        "auto.offset.reset": "earliest",
        "heartbeat.interval.ms": 200,
    }
    with Consumer(config) as consumer:
        consumer.subscribe(["late-topic"])
        assert consumer.poll(1.0) == []
        assert consumer.assignment() == set()
        produce(bootstrap, "late-topic", 2, 10)
        records = poll_until(consumer, 10, timeout=30)
        assert sorted(int(r.value) for r in records) == list(range(10))
        assert consumer.assignment() == {TopicPartition("late-topic", 0), TopicPartition("late-topic", 1)}
