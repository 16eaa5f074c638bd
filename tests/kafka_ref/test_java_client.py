"""Kafka's Java client (4.4) as a referee against minibroker: the idempotent producer, an
exactly-once copier (Kafka's own TransactionalMessageCopier and ``Referee copy``) through a broker
``kill -9`` and a SIGSTOP longer than the client's request timeout, with transaction version 2 (as
minibroker finalizes it by default) and version 1 (``transaction.version=1`` in the broker's
config: ApiVersions then finalizes level 1 and the Java client keeps the epoch across
transactions), and classic consumer groups through rebalances, next to the reference Kafka."""

from __future__ import annotations

import signal
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.api_keys import ApiKey
from tests.broker_process import BrokerProcess
from tests.kafka_ref.javaproc import JavaProgram
from tests.raw_client import RawConnection

pytestmark = [pytest.mark.xdist_group("kafka_ref"), pytest.mark.slow]

COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"


def start_minibroker(tmp_path, tv: int = 2) -> BrokerProcess:
    config = tmp_path / "server.properties"
    config.write_text(f"transaction.version={tv}\ngroup.initial.rebalance.delay.ms=0\n"
                      "offsets.topic.num.partitions=3\ntransaction.state.log.num.partitions=3\n")
    return BrokerProcess(tmp_path / "data", "--config", str(config)).start()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions,
                                  replication_factor=1)])[name].result(timeout=30)


def produce_values(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, key=b"k%d" % i, value=str(i).encode(), partition=i % partitions)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed",
             ) -> dict[int, list[str]]:
    """Every record of ``topic`` up to its last stable offset, per partition, in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "referee-reader",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True})
    out: dict[int, list[str]] = {p: [] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    at_eof: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_eof) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error():
                    assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                    at_eof.add(msg.partition())
                    continue
                at_eof.discard(msg.partition())
                out[msg.partition()].append(msg.value().decode())
    finally:
        consumer.close()
    assert len(at_eof) == partitions, "did not reach the end of every partition"
    return out


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)
    finally:
        consumer.close()
    return [tp.offset for tp in got]


def producer_epoch(port: int, transactional_id: str) -> int:
    with RawConnection(port) as conn:
        answer = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]})
    (state,) = answer["transaction_states"]
    assert state["error_code"] == 0, state
    return state["producer_epoch"]


def fault(broker: BrokerProcess, kind: str) -> None:
    if kind == "kill9":
        broker.kill9()
        broker.restart()
    else:  # SIGSTOP for 5 s, longer than the clients' request.timeout.ms=3000
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(5)
        finally:
            broker.proc.send_signal(signal.SIGCONT)


def test_idempotent_producer_through_kill9(kafka_ref, tmp_path):
    broker = start_minibroker(tmp_path)
    try:
        n = 4000
        create_topic(broker.bootstrap, "idem", 2)
        with JavaProgram("Referee", "produce", "--bootstrap", broker.bootstrap, "--topic", "idem",
                         "--count", str(n), "--partitions", "2", "--pace-every", "20",
                         "--prop", "request.timeout.ms=5000") as producer:
            producer.wait_for(lambda e: e.get("acked", 0) >= 800)
            fault(broker, "kill9")
            assert producer.wait(120) == 0, producer.output()
            assert producer.events[-1] == {"acked": n, "done": True}
        records = read_all(broker.bootstrap, "idem", 2, "read_uncommitted")
        for p in (0, 1):  # each value once, in the order sent
            assert records[p] == [str(i) for i in range(p, n, 2)]
    finally:
        broker.stop()


def check_exactly_once(bootstrap: str, group: str, n: int, partitions: int, inp: str = "in",
                       output: str = "out", suffix: str = ":copied") -> None:
    out = read_all(bootstrap, output, partitions)
    for p in range(partitions):
        assert out[p] == [f"{i}{suffix}" for i in range(p, n, partitions)], f"partition {p}"
    ends = [n // partitions + (1 if p < n % partitions else 0) for p in range(partitions)]
    assert committed_offsets(bootstrap, group, inp, partitions) == ends


@pytest.mark.parametrize("tv", [2, 1])
def test_referee_copier_exactly_once_through_kill9_and_sigstop(kafka_ref, tmp_path, tv):
    broker = start_minibroker(tmp_path, tv)
    try:
        n, partitions = 2400, 2
        create_topic(broker.bootstrap, "in", partitions)
        create_topic(broker.bootstrap, "out", partitions)
        produce_values(broker.bootstrap, "in", n, partitions)
        with JavaProgram("Referee", "copy", "--bootstrap", broker.bootstrap, "--input", "in",
                         "--output", "out", "--group", "copier", "--transactional-id", "copier-1",
                         "--expect", str(n), "--prop", "max.poll.records=40",
                         "--prop", "request.timeout.ms=3000") as copier:
            copier.wait_for(lambda e: e.get("committed", 0) >= 600)
            fault(broker, "kill9")
            copier.wait_for(lambda e: e.get("committed", 0) >= 1400)
            fault(broker, "sigstop")
            assert copier.wait(150) == 0, copier.output()
            done = copier.events[-1]
        assert done["committed"] == n and done["done"], copier.output()
        check_exactly_once(broker.bootstrap, "copier", n, partitions)
        epoch = producer_epoch(broker.port, "copier-1")
        if tv == 2:  # every EndTxn bumped the epoch
            assert epoch >= done["txns"], (epoch, done)
        else:  # the epoch stays (a timed-out request may make the client bump it once or twice)
            assert epoch < 5, (epoch, done)
    finally:
        broker.stop()


@pytest.mark.parametrize("tv", [2, 1])
def test_kafka_transactional_message_copier_through_kill9(kafka_ref, tmp_path, tv):
    broker = start_minibroker(tmp_path, tv)
    try:
        n = 1500
        create_topic(broker.bootstrap, "in", 1)
        create_topic(broker.bootstrap, "out", 1)
        produce_values(broker.bootstrap, "in", n, 1)
        with JavaProgram(COPIER, "--broker-list", broker.bootstrap, "--input-topic", "in",
                         "--input-partition", "0", "--output-topic", "out",
                         "--consumer-group", "copier", "--transactional-id", "kafka-copier",
                         "--transaction-size", "50", "--use-group-metadata") as copier:
            copier.wait_for(lambda e: e.get("totalProcessed", 0) >= 400)
            fault(broker, "kill9")
            assert copier.wait(150) == 0, copier.output()
        last = [e for e in copier.events if "totalProcessed" in e][-1]
        assert last["totalProcessed"] == n and last["remaining"] == 0, copier.output()
        check_exactly_once(broker.bootstrap, "copier", n, 1, suffix="")  # copies values as they are
        epoch = producer_epoch(broker.port, "kafka-copier")
        assert (epoch >= n // 50) if tv == 2 else (epoch < 5), epoch
    finally:
        broker.stop()


def test_referee_copier_on_kafka(kafka_one):
    """The same copier and checks against the reference Kafka: the test's own baseline."""
    n, partitions = 1000, 2
    bootstrap, tag = kafka_one.bootstrap, time.monotonic_ns()
    inp, out, group, txn_id = f"in-{tag}", f"out-{tag}", f"copier-{tag}", f"copier-{tag}"
    create_topic(bootstrap, inp, partitions)
    create_topic(bootstrap, out, partitions)
    produce_values(bootstrap, inp, n, partitions)
    with JavaProgram("Referee", "copy", "--bootstrap", bootstrap, "--input", inp, "--output",
                     out, "--group", group, "--transactional-id", txn_id, "--expect",
                     str(n), "--prop", "max.poll.records=40") as copier:
        assert copier.wait(120) == 0, copier.output()
        done = copier.events[-1]
    check_exactly_once(bootstrap, group, n, partitions, inp, out)
    assert producer_epoch(kafka_one.nodes[0].port, txn_id) >= done["txns"]


def group_scenario(bootstrap: str, topic: str) -> list[tuple[str, object]]:
    """Three classic members through joins, a clean leave and a kill -9; the assignments seen and
    every record consumed at least once (exactly once but for the killed member's last batch)."""
    partitions, per_round = 4, 40
    create_topic(bootstrap, topic, partitions)
    history: list[tuple[str, object]] = []
    base = ["Referee", "member", "--bootstrap", bootstrap, "--topic", topic, "--group", f"g-{topic}"]
    produced = 0

    def produce() -> None:
        nonlocal produced
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(produced, produced + per_round):
            producer.produce(topic, value=str(i).encode(), partition=i % partitions)
        assert producer.flush(30) == 0
        produced += per_round

    def records(*members: JavaProgram) -> set[str]:
        return {e["record"] for m in members for e in m.events if "record" in e}

    def wait_records(*members: JavaProgram) -> None:
        deadline = time.monotonic() + 60
        while len(records(*members)) < produced:
            assert time.monotonic() < deadline, [m.output() for m in members]
            time.sleep(0.1)

    def assigned(member: JavaProgram, start: int = 0) -> list[int]:
        return member.wait_for(lambda e: "assigned" in e and e["assigned"], start=start)["assigned"]

    with JavaProgram(*base, stdin=True) as a:
        history.append(("a", assigned(a)))
        produce()
        wait_records(a)
        mark = len(a.events)
        with JavaProgram(*base, stdin=True) as b:
            history.append(("b", assigned(b)))
            history.append(("a", assigned(a, mark)))
            produce()
            wait_records(a, b)
            mark = len(b.events)
            a.close_stdin()  # a clean leave: b takes over at once
            assert a.wait(60) == 0, a.output()
            history.append(("b after a left", b.wait_for(
                lambda e: e.get("assigned") == [0, 1, 2, 3], start=mark)["assigned"]))
            produce()
            wait_records(a, b)
            b.kill()  # kill -9: c gets the partitions once b's session (6 s) has timed out
            with JavaProgram(*base, stdin=True) as c:
                history.append(("c", c.wait_for(lambda e: e.get("assigned") == [0, 1, 2, 3],
                                                 timeout=60)["assigned"]))
                produce()
                wait_records(a, b, c)
                c.close_stdin()
                assert c.wait(60) == 0, c.output()
                # a and c committed before leaving: nothing they owned was read twice
                seen = [e["record"] for m in (a, c) for e in m.events if "record" in e]
                assert len(seen) == len(set(seen))
    return history


def test_classic_group_rebalances_as_on_kafka(kafka_ref, kafka_one, tmp_path):
    broker = start_minibroker(tmp_path)
    try:
        ours = group_scenario(broker.bootstrap, "members")
    finally:
        broker.stop()
    theirs = group_scenario(kafka_one.bootstrap, f"members-{time.monotonic_ns()}")

    def split_unordered(history: list[tuple[str, object]]) -> list[object]:
        # Which of a and b gets partitions 0-1 follows the order of their random member ids
        # (the range assignor sorts members), on Kafka as here: compare the split, not who.
        return [history[0], sorted([history[1][1], history[2][1]]), *history[3:]]

    assert split_unordered(ours) == split_unordered(theirs)
    assert ours[0] == ("a", [0, 1, 2, 3]) and sorted(ours[1][1] + ours[2][1]) == [0, 1, 2, 3]
