"""Kafka 4.4's own share consumer (``VerifiableShareConsumer``, the KafkaShareConsumer behind
``kafka-console-share-consumer.sh``) against minibroker and against the reference Kafka, side by
side: three consumers sharing a one-partition topic acknowledge every record exactly once,
released and rejected records meet the delivery limit, read_committed never delivers an aborted
record; on minibroker also a broker kill -9 mid-run (nothing acknowledged comes back, nothing is
lost).
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.api_keys import ApiKey
from tests.broker_process import BrokerProcess
from tests.kafka_ref.javaproc import JavaProgram
from tests.raw_client import RawConnection

pytestmark = [pytest.mark.xdist_group("kafka_ref"), pytest.mark.slow]

CONSUMER = "org.apache.kafka.tools.VerifiableShareConsumer"


@pytest.fixture
def minibroker(tmp_path, kafka_ref):
    with BrokerProcess.configured(tmp_path, "group.share.record.lock.duration.ms=15000\n") as b:
        yield b


@pytest.fixture(params=["minibroker", "kafka"])
def bootstrap(request, tmp_path, kafka_ref) -> str:
    if request.param == "kafka":
        return request.getfixturevalue("kafka_one").bootstrap
    return request.getfixturevalue("minibroker").bootstrap


def fresh(name: str) -> str:
    return f"{name}-{time.monotonic_ns()}"


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)


def produce(bootstrap: str, topic: str, values: list[str], transactional: str | None = None,
            abort: bool = False) -> None:
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    if transactional:
        conf["transactional.id"] = transactional
    producer = Producer(conf)
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    for v in values:
        producer.produce(topic, value=v.encode())
    if transactional:
        (producer.abort_transaction if abort else producer.commit_transaction)(30)
    assert producer.flush(30) == 0


def set_group_config(bootstrap: str, group: str, key: str, value: str) -> None:
    port = int(bootstrap.rsplit(":", 1)[1])
    with RawConnection(port) as conn:
        answer = conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": 32, "resource_name": group,
            "configs": [{"name": key, "config_operation": 0, "value": value}]}]})
    assert answer.responses[0].error_code == 0, answer


def consumer(bootstrap: str, topic: str, group: str, *args: str) -> JavaProgram:
    return JavaProgram(CONSUMER, "--bootstrap-server", bootstrap, "--topic", topic,
                       "--group-id", group, "--offset-reset-strategy", "earliest",
                       "--acknowledgement-mode", "sync", *args)


def acked(program: JavaProgram, success: bool = True) -> list[int]:
    return [o for e in list(program.events) if e.get("name") == "offsets_acknowledged"
            and e.get("success") is success for p in e["partitions"] for o in p["offsets"]]


def consumed(program: JavaProgram) -> list[int]:
    return [o for e in list(program.events) if e.get("name") == "records_consumed"
            for p in e["partitions"] for o in p["offsets"]]


def wait_until(condition, what: str, programs: list[JavaProgram], timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n"
                                 + "\n".join(p.output(15) for p in programs))
        time.sleep(0.2)


def test_three_share_consumers_acknowledge_every_record_once(bootstrap) -> None:
    topic, group, n = fresh("shared"), fresh("sg"), 3000
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [str(i) for i in range(n)])
    programs = [consumer(bootstrap, topic, group) for _ in range(3)]
    try:
        wait_until(lambda: sum(len(acked(p)) for p in programs) >= n, f"{n} acknowledgements",
                   programs)
        time.sleep(1)
        counts = Counter(o for p in programs for o in acked(p))
        assert sorted(counts) == list(range(n))  # none lost
        assert max(counts.values()) == 1  # each acknowledged exactly once across the group
        assert not any(acked(p, success=False) for p in programs)
    finally:
        for p in programs:
            p.kill()


def test_released_and_rejected_records_meet_the_delivery_limit(bootstrap) -> None:
    topic, group = fresh("limit"), fresh("sg")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, ["a", "b", "c", "d"])
    # even offsets released every time (delivered 5 times: Kafka's default limit, then
    # archived), odd offsets rejected (delivered once)
    with consumer(bootstrap, topic, group, "--ack-pattern", "release,reject") as program:
        wait_until(lambda: len(consumed(program)) >= 12, "12 deliveries", [program])
        time.sleep(3)
        assert Counter(consumed(program)) == {0: 5, 1: 1, 2: 5, 3: 1}


def test_read_committed_never_delivers_an_aborted_record(bootstrap) -> None:
    topic, group = fresh("txn"), fresh("sg")
    create_topic(bootstrap, topic)
    set_group_config(bootstrap, group, "share.isolation.level", "read_committed")
    produce(bootstrap, topic, ["c0", "c1"], transactional=fresh("t"))
    produce(bootstrap, topic, ["x0", "x1", "x2"], transactional=fresh("t"), abort=True)
    produce(bootstrap, topic, ["c2"], transactional=fresh("t"))
    with consumer(bootstrap, topic, group, "--verbose") as program:
        wait_until(lambda: len(consumed(program)) >= 3, "3 records", [program])
        time.sleep(2)
        values = [e["value"] for e in list(program.events) if e.get("name") == "record_data"]
        assert sorted(values) == ["c0", "c1", "c2"]


def start_offset(bootstrap: str, group: str, topic: str) -> int:
    port = int(bootstrap.rsplit(":", 1)[1])
    with RawConnection(port) as conn:
        answer = conn.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [{
            "group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}]})
    return answer.groups[0].topics[0].partitions[0].start_offset


def lag(bootstrap: str, group: str, topic: str) -> int:
    """DescribeShareGroupOffsets v1's lag (-1 while the group has no state or the broker is
    down): 0 once every record is finished, on both brokers (Kafka's start offset may stay
    behind its delivery-complete records until its next state write)."""
    port = int(bootstrap.rsplit(":", 1)[1])
    try:
        with RawConnection(port) as conn:
            answer = conn.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [{
                "group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}]})
    except OSError:
        return -1
    partition = answer.groups[0].topics[0].partitions[0]
    return partition.lag if partition.error_code == 0 else -1


@pytest.fixture(params=["minibroker", "kafka"])
def crashable(request, tmp_path, kafka_ref):
    """A broker of this test's own that ``crash()`` kills with SIGKILL and starts again on the
    same data: minibroker, or a one-node Kafka 4.4 (not the session's shared one)."""
    from tests.kafka_ref.fixtures import SMALL_INTERNAL_TOPICS
    from tests.kafka_ref.harness import KafkaCluster

    if request.param == "minibroker":
        with BrokerProcess.configured(tmp_path, "group.share.record.lock.duration.ms=15000\n") \
                as broker:
            def crash() -> None:
                broker.kill9()
                broker.restart()
            yield broker.bootstrap, crash
        return
    cluster = KafkaCluster(tmp_path / "kafka", 1, config={
        **SMALL_INTERNAL_TOPICS, "group.share.record.lock.duration.ms": 15000})
    cluster.start()
    try:
        def crash_kafka() -> None:
            cluster.kill9(0)
            cluster.start_node(0)
        yield cluster.bootstrap, crash_kafka
    finally:
        cluster.stop()


def test_broker_kill9_mid_run_loses_nothing_and_redelivers_nothing_acknowledged(
        crashable) -> None:
    """The broker is killed with SIGKILL while Kafka's share consumer acknowledges record by
    record, and started again. An acknowledgement whose answer the kill cut off may or may not
    have been applied (the client reports it failed); one answered success is never followed by
    a redelivery, and every record is finished in the end (lag 0): none lost. The same on
    minibroker and on Kafka 4.4."""
    bootstrap, crash = crashable
    topic, group, n = fresh("crash"), fresh("sg"), 4000
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [str(i) for i in range(n)])
    with consumer(bootstrap, topic, group) as program:
        wait_until(lambda: len(acked(program)) >= 500, "500 acknowledgements", [program])
        crash()
        wait_until(lambda: lag(bootstrap, group, topic) == 0, "every record finished (lag 0)",
                   [program], timeout=240)
        time.sleep(1)
        events = list(program.events)
    done: set[int] = set()
    seen: set[int] = set()
    for event in events:
        offsets = [o for p in event.get("partitions", ()) for o in p["offsets"]]
        if event.get("name") == "records_consumed":
            assert not done & set(offsets), "an acknowledged record was delivered again"
            seen |= set(offsets)
        elif event.get("name") == "offsets_acknowledged" and event.get("success"):
            done |= set(offsets)
    assert seen == set(range(n))
    assert Counter(acked(program)).most_common(1)[0][1] == 1  # no double success


def test_kafka_configs_on_groups_and_the_share_consumer_honours_them(minibroker, kafka_one
                                                                    ) -> None:
    """kafka-configs.sh --entity-type groups (issue 40 item 1) against both brokers: the same
    lines for an alter, a describe and a refused value; then Kafka's share consumer, given no
    reset strategy of its own, reads from the start because share.auto.offset.reset=earliest
    was set this way."""
    from tests.kafka_ref.harness import run_tool

    def configs(bootstrap: str, *args: str) -> tuple[int, str]:
        done = run_tool("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", bootstrap,
                        "--entity-type", "groups", *args)
        text = done.stdout + "\n".join(line for line in done.stderr.splitlines()
                                       if "InvalidConfigurationException:" in line
                                       and not line.startswith("Caused by"))
        return done.returncode, text.replace(bootstrap, "BOOTSTRAP")

    group = fresh("cfg")
    outputs = []
    for bootstrap in (minibroker.bootstrap, kafka_one.bootstrap):
        topic = fresh("cfg")
        create_topic(bootstrap, topic)
        produce(bootstrap, topic, [str(i) for i in range(10)])
        steps = [
            configs(bootstrap, "--entity-name", group, "--alter", "--add-config",
                    "share.auto.offset.reset=earliest,share.delivery.count.limit=4"),
            configs(bootstrap, "--entity-name", group, "--describe"),
            configs(bootstrap, "--entity-name", group, "--alter", "--add-config",
                    "share.session.timeout.ms=5000"),
            configs(bootstrap, "--entity-name", group, "--alter", "--add-config",
                    "share.record.lock.duration.ms=100"),
            configs(bootstrap, "--entity-name", group, "--alter", "--add-config",
                    "no.such.key=1"),
        ]
        outputs.append(steps)
        program = JavaProgram(CONSUMER, "--bootstrap-server", bootstrap, "--topic", topic,
                              "--group-id", group, "--acknowledgement-mode", "sync",
                              "--max-messages", "10")
        with program:
            wait_until(lambda p=program: len(acked(p)) >= 10, "10 acknowledgements", [program])
            assert sorted(acked(program)) == list(range(10))
    ours, kafka = outputs
    assert ours == kafka
    assert [code for code, _ in ours] == [0, 0, 1, 1, 1]
    assert "share.auto.offset.reset=earliest sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:" \
           "share.auto.offset.reset=earliest, DEFAULT_CONFIG:share.auto.offset.reset=latest}" \
           in ours[1][1]


def test_kafka_share_groups_tool(bootstrap) -> None:
    """kafka-share-groups.sh (ShareGroupCommand): list, describe offsets, reset to earliest,
    delete offsets, delete the group; the same lines from both brokers."""
    from tests.kafka_ref.harness import run_tool

    topic, group = fresh("tool"), fresh("sg")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [str(i) for i in range(10)])

    def tool(*args: str) -> str:
        done = run_tool("org.apache.kafka.tools.consumer.group.ShareGroupCommand",
                        "--bootstrap-server", bootstrap, *args)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    with consumer(bootstrap, topic, group, "--max-messages", "10") as program:
        wait_until(lambda: len(acked(program)) >= 10, "10 acknowledgements", [program])
        assert program.wait(60) == 0
    assert group in tool("--list").split()
    rows = [line.split() for line in tool("--describe", "--group", group).splitlines()]
    # Lag 0 on both. The start offset differs: minibroker moves it past the acknowledged
    # records at once (10); Kafka 4.4 keeps 0 with the 10 counted as delivery-complete until
    # its next state write.
    assert [group, topic, "0", "10", "0"] in rows or [group, topic, "0", "0", "0"] in rows, rows
    tool("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    rows = [line.split() for line in tool("--describe", "--group", group).splitlines()]
    assert [group, topic, "0", "0", "10"] in rows, rows
    assert "Successful" in tool("--delete-offsets", "--group", group, "--topic", topic)
    assert "successful" in tool("--delete", "--group", group)
    assert group not in tool("--list").split()


def test_a_vanished_member_s_records_come_back_counted(bootstrap) -> None:
    """A member acquires records and its connection goes away without acknowledging or closing
    its share session: another member gets them again with delivery count 2, at once (the
    share session goes with its connection, on both brokers), not after the 15 s lock."""
    from tests.integration.test_share_groups import Member, fetch_until, offsets

    topic, group = fresh("vanish"), fresh("sg")
    create_topic(bootstrap, topic)
    set_group_config(bootstrap, group, "share.auto.offset.reset", "earliest")
    set_group_config(bootstrap, group, "share.record.lock.duration.ms", "15000")
    produce(bootstrap, topic, ["a", "b", "c"])
    port = int(bootstrap.rsplit(":", 1)[1])
    with RawConnection(port) as conn:
        topic_id = conn.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}]}) \
            .topics[0].topic_id
    gone = Member(port, group, topic, topic_id)
    first = fetch_until(gone, 3, timeout=30)
    assert offsets(first) == [0, 1, 2] and {d for *_, d in first} == {1}
    gone.close()
    started = time.monotonic()
    survivor = Member(port, group, topic, topic_id)
    try:
        again = fetch_until(survivor, 3, timeout=40)
        waited = time.monotonic() - started
        assert offsets(again) == [0, 1, 2] and {d for *_, d in again} == {2}, again
        assert waited < 10, waited
        answer = survivor.acknowledge([(0, 2, [1])])
        assert answer.responses[0].partitions[0].error_code == 0
    finally:
        survivor.close()
