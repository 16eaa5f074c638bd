"""Our share consumer (client/share_consumer.py) against the broker process: three consumers
sharing a one-partition topic see each record once, explicit acknowledgement with release
(delivered again, counted) and reject (never again), and close releasing what is still held."""

from __future__ import annotations

import threading
import time

import pytest

from client.share_consumer import AcknowledgeType, ShareConsumer
from tests.broker_process import BrokerProcess
from tests.integration.test_share_groups import create_topic, produce, set_group_config


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess.configured(tmp_path, "group.share.record.lock.duration.ms=2000\n") as proc:
        yield proc


def consumer(broker, group: str, **extra) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, **extra})


def test_three_share_consumers_see_each_record_once(broker) -> None:
    create_topic(broker.port, "jobs")
    set_group_config(broker.port, "g", "share.auto.offset.reset", "earliest")
    produce(broker.port, "jobs", 60)
    seen: list[list[int]] = [[], [], []]
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            with consumer(broker, "g") as c:
                c.subscribe(["jobs"])
                while not stop.is_set():
                    seen[i] += [r.offset for r in c.poll(0.5)]
                c.commit_sync()
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while sum(map(len, seen)) < 60 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(30)
    assert not errors, errors
    everything = sorted(o for s in seen for o in s)
    assert everything == list(range(60)), seen  # none lost, none twice


def test_explicit_release_and_reject(broker) -> None:
    create_topic(broker.port, "jobs")
    set_group_config(broker.port, "g", "share.auto.offset.reset", "earliest")
    produce(broker.port, "jobs", 4)
    with consumer(broker, "g", **{"share.acknowledgement.mode": "explicit"}) as c:
        c.subscribe("jobs")
        first: list = []
        deadline = time.monotonic() + 30
        while len(first) < 4 and time.monotonic() < deadline:
            first += c.poll(0.5)
        assert [r.offset for r in first] == [0, 1, 2, 3]
        assert {c.delivery_count(r) for r in first} == {1}
        for r in first:
            c.acknowledge(r, AcknowledgeType.RELEASE if r.offset % 2 == 0
                          else AcknowledgeType.REJECT)
        assert all(e is None for e in c.commit_sync().values())
        again: list = []
        deadline = time.monotonic() + 30
        while len(again) < 2 and time.monotonic() < deadline:
            again += c.poll(0.5)
        assert [r.offset for r in again] == [0, 2]  # released: again; rejected: never
        assert {c.delivery_count(r) for r in again} == {2}
        for r in again:
            c.acknowledge(r)
        assert c.poll(0.5) == []  # acknowledged with this poll's fetch; nothing left
    # close released nothing (all acknowledged): a new member gets nothing
    with consumer(broker, "g") as other:
        other.subscribe("jobs")
        assert other.poll(1.5) == []


def test_close_releases_what_is_held(broker) -> None:
    create_topic(broker.port, "jobs")
    set_group_config(broker.port, "g", "share.auto.offset.reset", "earliest")
    produce(broker.port, "jobs", 3)
    c = consumer(broker, "g", **{"share.acknowledgement.mode": "explicit"})
    c.subscribe("jobs")
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        got += c.poll(0.5)
    c.close()  # explicit mode, nothing acknowledged: the session's close releases them
    with consumer(broker, "g") as other:
        other.subscribe("jobs")
        again: list = []
        deadline = time.monotonic() + 30
        while len(again) < 3 and time.monotonic() < deadline:
            again += other.poll(0.5)
        assert [r.offset for r in again] == [0, 1, 2]
        assert {other.delivery_count(r) for r in again} == {2}
