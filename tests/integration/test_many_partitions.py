"""Many partitions (issue 36 items 8-9) with real clients: disk use and event-loop stalls of a
CreateTopics of 300 partitions and a Produce to all of them; the partition caps and their Kafka
error codes; kill -9 with 2,000 partitions keeps every acknowledged record."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
from confluent_kafka import KafkaError as CKError
from confluent_kafka import Producer as CKProducer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from broker.config import build_config
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.headers import parse_response_header_untrusted
from protocol.messages import decode_response
from tests.broker_process import BrokerProcess
from tests.raw_client import RawConnection

POLICY_VIOLATION = 44  # Kafka's code


class LongestStep(trio.abc.Instrument):
    """The longest time the event loop spent in one task step (nothing else could run)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.task = ""
        self._began: float | None = None  # (added in the middle of a step: not that one)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._began is None:
            return
        took = time.perf_counter() - self._began
        if took > self.longest:
            self.longest, self.task = took, task.name


def du(directory: Path) -> int:
    return directory.stat().st_blocks * 512 + sum(
        f.stat().st_blocks * 512 for f in directory.iterdir())


def create_and_produce(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    errors: list[object] = []
    producer = CKProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                           "enable.idempotence": False})
    for p in range(partitions):
        producer.produce(topic, b"x" * 40, partition=p,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(60) == 0 and not errors


async def test_300_partitions_one_small_batch_each(tmp_path: Path, nursery) -> None:
    from broker.app import serve

    data = tmp_path / "data"
    port = await nursery.start(serve, build_config({}, port=0, data_dir=data))
    await trio.sleep(0.2)  # start-up tasks
    stalls = []
    # The machine is shared: a step may also last because the process waited for a core. A
    # stall by design (1 MiB of zeros per partition, fsyncs on the loop: 0.8 s here) shows in
    # every attempt; noise does not, so the best of up to three attempts is what counts.
    for attempt in range(3):
        topic = f"t{attempt}"
        probe = LongestStep()
        trio.lowlevel.add_instrument(probe)
        try:
            await trio.to_thread.run_sync(create_and_produce, f"127.0.0.1:{port}", topic, 300)
        finally:
            trio.lowlevel.remove_instrument(probe)
        sizes = [du(d) for d in data.glob(f"{topic}-*")]
        assert len(sizes) == 300
        assert max(sizes) <= 64 * 1024, f"{max(sizes)} bytes in one partition directory"
        stalls.append((probe.longest, probe.task))
        if probe.longest < 0.05:
            break
    assert min(stalls)[0] < 0.05, f"the event loop stopped for (s, in): {stalls}"


def grow(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    admin.create_partitions([NewPartitions(topic, partitions)])[topic].result(60)


async def test_create_partitions_builds_off_the_event_loop(tmp_path: Path, nursery) -> None:
    # CreatePartitions makes its partitions' files in a worker thread, as CreateTopics does
    # (on the loop, 300 partitions stopped it for 0.5-1.3 s here).
    from broker.app import serve

    data = tmp_path / "data"
    port = await nursery.start(serve, build_config({}, port=0, data_dir=data))
    await trio.sleep(0.2)  # start-up tasks
    stalls = []
    for attempt in range(3):  # best of three: the machine is shared (see above)
        topic = f"g{attempt}"
        probe = LongestStep()
        trio.lowlevel.add_instrument(probe)
        try:
            await trio.to_thread.run_sync(grow, f"127.0.0.1:{port}", topic, 301)
        finally:
            trio.lowlevel.remove_instrument(probe)
        assert len(list(data.glob(f"{topic}-*"))) == 301
        stalls.append((probe.longest, probe.task))
        if probe.longest < 0.05:
            break
    assert min(stalls)[0] < 0.05, f"the event loop stopped for (s, in): {stalls}"


def metadata_at_once(port: int, topic: str, clients: int) -> list:
    """``clients`` connections each send a Metadata that auto-creates ``topic``, all sent before
    any answer is read; returns the answers' entries for it."""
    conns = [RawConnection(port, timeout=60) for _ in range(clients)]
    try:
        body = {"topics": [{"name": topic}], "allow_auto_topic_creation": True}
        sent = [c.send_request(ApiKey.METADATA, 4, body) for c in conns]
        entries = []
        for c, correlation in zip(conns, sent, strict=True):
            frame = c.read_frame()
            assert frame is not None
            got, offset = parse_response_header_untrusted(frame, ApiKey.METADATA, 4)
            assert got == correlation
            entries.append(decode_response(ApiKey.METADATA, 4, frame, offset).topics[0])
        return entries
    finally:
        for c in conns:
            c.close()


async def test_metadata_auto_creation_builds_off_the_event_loop(
        tmp_path: Path, nursery, monkeypatch: pytest.MonkeyPatch) -> None:
    # A Metadata that auto-creates a topic of num.partitions=300 builds its files in a worker
    # thread, as CreateTopics does (on the loop: 0.3-0.9 s here), and answers once it is
    # built; four such requests at once build it once.
    from broker.app import serve
    from broker.log.pending import PendingTopic

    builds: list[str] = []
    real_build = PendingTopic.build

    def counted(self: PendingTopic) -> None:
        builds.append(self.name)
        real_build(self)

    monkeypatch.setattr(PendingTopic, "build", counted)
    data = tmp_path / "data"
    port = await nursery.start(serve, build_config({"num.partitions": "300"}, port=0,
                                                   data_dir=data))
    await trio.sleep(0.2)  # start-up tasks
    stalls = []
    for attempt in range(3):  # best of three: the machine is shared (see above)
        topic = f"auto{attempt}"
        probe = LongestStep()
        trio.lowlevel.add_instrument(probe)
        try:
            entries = await trio.to_thread.run_sync(metadata_at_once, port, topic, 4)
        finally:
            trio.lowlevel.remove_instrument(probe)
        assert [(e.error_code, len(e.partitions)) for e in entries] == [
            (ErrorCode.NONE, 300)] * 4
        assert builds.count(topic) == 1, builds
        assert len(list(data.glob(f"{topic}-*"))) == 300
        stalls.append((probe.longest, probe.task))
        if probe.longest < 0.05:
            break
    assert min(stalls)[0] < 0.05, f"the event loop stopped for (s, in): {stalls}"


@pytest.fixture
def capped(tmp_path: Path):
    with BrokerProcess.configured(tmp_path, "max.partitions=40\nmax.partitions.per.request=30\n"
                                  "num.partitions=3\n") as proc:
        yield proc


def test_partition_caps_answer_kafkas_error(capped) -> None:
    admin = AdminClient({"bootstrap.servers": capped.bootstrap})
    # One request asking for more than max.partitions.per.request in all: every topic of it
    # fails with POLICY_VIOLATION and Kafka's message, nothing is created.
    futures = admin.create_topics([NewTopic("a", 20, 1), NewTopic("b", 11, 1)])
    for name in ("a", "b"):
        error = futures[name].exception(30).args[0]
        assert error.code() == POLICY_VIOLATION
        assert error.str() == "Excessively large number of partitions per request."
    assert not {"a", "b"} & set(admin.list_topics(timeout=30).topics)
    # Under the per-request cap, up to max.partitions.
    admin.create_topics([NewTopic("a", 20, 1), NewTopic("b", 10, 1)])["b"].result(30)
    error = admin.create_topics([NewTopic("c", 11, 1)])["c"].exception(30).args[0]
    assert error.code() == POLICY_VIOLATION and "max.partitions=40" in error.str()
    error = admin.create_partitions([NewPartitions("b", 21)])["b"].exception(30).args[0]
    assert error.code() == POLICY_VIOLATION
    admin.create_partitions([NewPartitions("b", 20)])["b"].result(30)
    # Auto-creation (num.partitions=3) is refused too; the broker's own topics are not.
    producer = CKProducer({"bootstrap.servers": capped.bootstrap})
    metadata = producer.list_topics("auto", timeout=30)
    assert metadata.topics["auto"].error.code() == POLICY_VIOLATION
    assert CKError.POLICY_VIOLATION == POLICY_VIOLATION


def test_kafka_python_sees_policy_violation(capped) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic
    from kafka.errors import PolicyViolationError

    admin = KafkaAdminClient(bootstrap_servers=capped.bootstrap)
    try:
        with pytest.raises(PolicyViolationError):
            admin.create_topics([KpNewTopic("big", 31, 1)])
    finally:
        admin.close()


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from client import Admin

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        ends = admin.list_offsets({(topic, p): -1 for p in range(partitions)},
                                  read_committed=False)
    return [ends[next(tp for tp in ends if tp.partition == p)][0] for p in range(partitions)] \
        if len(ends) == partitions else []


@pytest.mark.slow
def test_kill9_with_2000_partitions_keeps_every_acknowledged_record(tmp_path: Path) -> None:
    partitions = 2000
    with BrokerProcess(tmp_path / "data") as proc:
        create_and_produce(proc.bootstrap, "t", partitions)
        proc.kill9()  # no clean point yet: every partition is scanned
        proc.restart(timeout=60)
        assert high_watermarks(proc.bootstrap, "t", partitions) == [1] * partitions
        assert proc.stop() == 0  # a clean point for every partition
        proc.restart(timeout=60)
        # One more acknowledged record to every third partition, then kill -9: those are
        # scanned, the others load from their recovery points.
        producer = CKProducer({"bootstrap.servers": proc.bootstrap, "acks": "all",
                               "linger.ms": 20})
        for p in range(0, partitions, 3):
            producer.produce("t", b"y", partition=p)
        assert producer.flush(60) == 0
        proc.kill9()
        proc.restart(timeout=60)
        line = proc.wait_for_output("partitions recovered")
        assert f"{len(range(0, partitions, 3))} after an unclean shutdown" in line, line
        assert high_watermarks(proc.bootstrap, "t", partitions) == [
            2 if p % 3 == 0 else 1 for p in range(partitions)]
        # That recovery wrote its outcome as recovery points: kill -9 again with nothing
        # written, and no partition is scanned (every one was, before issue 36's third round).
        proc.kill9()
        proc.restart(timeout=60)
        line = proc.wait_for_output("partitions recovered")
        assert "after an unclean shutdown" not in line, line


def produce_idempotent(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    errors: list[object] = []
    producer = CKProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                           "enable.idempotence": True})
    for p in range(partitions):
        producer.produce(topic, b"x" * 40, partition=p,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(60) == 0 and not errors


async def test_a_clean_restart_reads_one_points_file_not_a_file_per_partition(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: with N partitions a clean stop writes no file per partition for its producer
    state or small index, and the next start reads none: their clean points are one file.
    Counted (the snapshot and index files the start reads), not timed."""
    from functools import partial

    from broker.app import serve
    from broker.log.index import OffsetIndex
    from broker.log.producer_state import ProducerStateManager

    partitions = 120
    config = build_config({}, port=0, data_dir=tmp_path / "data")
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve, config)
        await trio.to_thread.run_sync(produce_idempotent, f"127.0.0.1:{port}", "t", partitions)
        nursery.cancel_scope.cancel()  # a clean stop (SIGTERM's path: serve closes the broker)
    read: list[str] = []
    real_snapshot = ProducerStateManager.read_snapshot.__func__  # type: ignore[attr-defined]
    real_index = OffsetIndex.load.__func__  # type: ignore[attr-defined]

    def snapshot(cls, path: Path):  # type: ignore[no-untyped-def]
        read.append(str(path))
        return real_snapshot(cls, path)

    def index(cls, path: Path, *args):  # type: ignore[no-untyped-def]
        read.append(str(path))
        return real_index(cls, path, *args)

    monkeypatch.setattr(ProducerStateManager, "read_snapshot", classmethod(snapshot))
    monkeypatch.setattr(OffsetIndex, "load", classmethod(index))
    brokers: list = []
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve, config,
                                           on_listening=lambda b, _: brokers.append(b)))
        logs = brokers[0].storage.logs
        assert [p for p in read if "/t-" in p] == []
        assert not logs.unclean_start
        assert all(r.clean for r in logs.recovered if r.topic == "t")
        ends = await trio.to_thread.run_sync(high_watermarks, f"127.0.0.1:{port}", "t",
                                             partitions)
        assert ends == [1] * partitions
        # Each partition's producer state came back from the points file: the idempotent
        # producer's sequence is known there.
        assert all(len(logs.partition("t", i).producers) == 1 for i in range(partitions))
        nursery.cancel_scope.cancel()
