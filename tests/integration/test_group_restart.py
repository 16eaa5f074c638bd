"""Group members survive a broker crash: the group's metadata record in ``__consumer_offsets``
brings back its generation, members and assignments, so confluent-kafka's consumer and ours keep
heartbeating with the same generation and assignment after a kill -9 and restart (no rebalance).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import Producer as CkProducer
from confluent_kafka.admin import AdminClient, NewTopic

from client import Admin
from client import Consumer as OurConsumer
from tests.broker_process import BrokerProcess

BROKER_CONFIG = (
    "group.initial.rebalance.delay.ms=200\n"
    "group.min.session.timeout.ms=1000\n"
    "offsets.topic.num.partitions=3\n"
)
TOPIC = "orders"


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess.configured(tmp_path, BROKER_CONFIG) as proc:
        yield proc


def wait_for(condition, what: str, timeout: float = 30.0, step=None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        if step is not None:
            step()
        else:
            time.sleep(0.1)


@pytest.mark.slow
def test_members_keep_generation_and_assignment_across_a_kill9(broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(timeout=15)
    rebalances = {"assign": 0, "revoke": 0}

    def on_assign(consumer, partitions):
        rebalances["assign"] += 1

    def on_revoke(consumer, partitions):
        rebalances["revoke"] += 1

    ck = CkConsumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "ck-group",
        "session.timeout.ms": 30_000, "heartbeat.interval.ms": 200,
        "auto.offset.reset": "earliest", "metadata.recovery.strategy": "none",
    })
    ours = OurConsumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "our-group",
        "session.timeout.ms": 30_000, "heartbeat.interval.ms": 200,
        "auto.offset.reset": "earliest",
    })
    ours_assigned: list[int] = []
    try:
        ck.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)
        ours.subscribe([TOPIC], on_assign=lambda parts: ours_assigned.append(len(parts)))
        wait_for(lambda: ck.assignment() and ours.assignment(), "both groups to be assigned",
                 step=lambda: (ck.poll(0.1), ours.poll(0.1)))
        ck_member, ck_assignment = ck.memberid(), set(ck.assignment())
        ours_meta, ours_assignment = ours.group_metadata(), ours.assignment()
        assert rebalances == {"assign": 1, "revoke": 0} and ours_assigned == [2]

        # (30 s sessions: librdkafka itself rejoins when it cannot heartbeat for a session, and
        # a restart on a loaded machine takes seconds.)
        broker.kill9()
        broker.restart()

        # Several heartbeat intervals and a produce/consume round trip after the restart.
        producer = CkProducer({"bootstrap.servers": broker.bootstrap})
        for p in (0, 1):
            producer.produce(TOPIC, value=b"after-%d" % p, partition=p)
        assert producer.flush(15) == 0
        seen_ck: list[bytes] = []
        seen_ours: list[bytes] = []

        def step() -> None:
            msg = ck.poll(0.1)
            if msg is not None and msg.error() is None:
                seen_ck.append(msg.value())
            seen_ours.extend(r.value for r in ours.poll(0.1))

        wait_for(lambda: len(seen_ck) == 2 and len(seen_ours) == 2, "consumption after restart",
                 step=step)
        settle = time.monotonic() + 2.0
        while time.monotonic() < settle:
            step()

        assert rebalances == {"assign": 1, "revoke": 0}, "confluent-kafka rebalanced"
        assert ck.memberid() == ck_member and set(ck.assignment()) == ck_assignment
        assert ours_assigned == [2], "our consumer rebalanced"
        assert ours.group_metadata() == ours_meta and ours.assignment() == ours_assignment
        with Admin({"bootstrap.servers": broker.bootstrap}) as our_admin:
            ck_group, our_group = our_admin.describe_groups(["ck-group", "our-group"])
        assert ck_group.state == "Stable" and [m.member_id for m in ck_group.members] == [
            ck_member]
        assert our_group.state == "Stable" and [m.member_id for m in our_group.members] == [
            ours_meta.member_id]
        assert sorted(tp.partition for tp in our_group.members[0].assignment) == [0, 1]
    finally:
        ck.close()
        ours.close()
