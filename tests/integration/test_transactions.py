"""Transactions end to end: confluent-kafka and kafka-python transactional producers and
read_committed consumers against the real broker process, the raw WriteTxnMarkers path, fencing,
timeouts of a producer killed mid-transaction, the seeds' consume-transform-produce loop, and a
kill -9 of the broker between EndTxn's PrepareCommit and the markers."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.log.topics import TRANSACTION_STATE_TOPIC as TRANSACTION_STATE
from broker.log.topics import partition_for
from broker.txn.state import TxnState
from broker.txn.txn_log import decode_key, decode_value
from client.cli.transactions import transactions as transactions_cli
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.framing import encode_frame
from protocol.headers import (
    RequestHeader,
    encode_request_header,
    parse_response_header_untrusted,
)
from protocol.messages import decode_response, encode_request
from protocol.records import decode_batches_untrusted, encode_batch, parse_control_record
from tests.broker_process import BrokerProcess
from tests.process_guard import popen
from tests.raw_client import RawConnection

kafka = pytest.importorskip("kafka")

PARTITIONS = 3
# Short timers so that the periodic task and the rebalances run within a test.
BROKER_CONFIG = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
}


def start_broker(tmp_path: Path, crash_at: str | None = None, **extra: str) -> BrokerProcess:
    properties = "".join(f"{k}={v}\n" for k, v in {**BROKER_CONFIG, **extra}.items())
    return BrokerProcess.configured(tmp_path, properties, crash_at=crash_at).start()


@pytest.fixture
def broker(tmp_path):
    proc = start_broker(tmp_path)
    try:
        yield proc
    finally:
        proc.stop()
        print("".join(proc.output[-40:]))  # shown by pytest when the test failed


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[
        name
    ].result(timeout=15)


def txn_producer(bootstrap: str, transactional_id: str, **extra) -> Producer:
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        "linger.ms": 5,
        **extra,
    })
    producer.init_transactions(15)
    return producer


def consume_values(bootstrap: str, topic: str, isolation: str, expected: int | None = None,
                   partitions: int = PARTITIONS) -> list[bytes]:
    """Every value a confluent consumer gets from the start of each partition: until
    ``expected`` values arrived (then a short wait for unexpected extras), or, without
    ``expected``, until nothing more arrives for a while."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "referee",
        "enable.auto.commit": False,
        "isolation.level": isolation,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    last = time.monotonic()
    deadline = last + 30
    try:
        while time.monotonic() < deadline:
            messages = consumer.consume(1000, 0.2)
            for msg in messages:
                assert msg.error() is None, msg.error()
                values.append(msg.value())
            if messages:
                last = time.monotonic()
            quiet = time.monotonic() - last
            if expected is not None and len(values) >= expected and quiet > 0.3:
                break
            if expected is None and quiet > (1.5 if values else 4.0):
                break
    finally:
        consumer.close()
    return values


def consume_values_kafka_python(bootstrap: str, topic: str, isolation: str, expected: int,
                                partitions: int = PARTITIONS) -> list[bytes]:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        isolation_level=isolation,
    )
    consumer.assign([kafka.TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=300)
            for messages in polled.values():
                values.extend(m.value for m in messages)
            if len(values) >= expected and not polled:
                break  # everything expected, and one more empty poll for extras
    finally:
        consumer.close()
    return values


def list_offset(port: int, topic: str, partition: int, committed: bool) -> int:
    """ListOffsets v2 LATEST: the LSO under read_committed, else the HW."""
    with RawConnection(port) as conn:
        response = conn.request(ApiKey.LIST_OFFSETS, 2, {
            "replica_id": -1, "isolation_level": 1 if committed else 0,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "timestamp": -1}]}],
        })
    part = response.topics[0].partitions[0]
    assert part.error_code == ErrorCode.NONE
    return part.offset


def describe(port: int, transactional_id: str):
    with RawConnection(port) as conn:
        response = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {
            "transactional_ids": [transactional_id], "tagged_fields": {}})
    return response.transaction_states[0]


def wait_until(predicate, timeout: float = 15.0, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def values(prefix: str, n: int) -> list[bytes]:
    return [b"%s-%d" % (prefix.encode(), i) for i in range(n)]


# -- commit visible, abort not -------------------------------------------------------------------


def test_confluent_commit_is_visible_and_abort_is_not(broker):
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "cv")
    producer = txn_producer(bootstrap, "cv-tx")
    for prefix, n, commit in (("c1", 120, True), ("a1", 80, False), ("c2", 50, True)):
        producer.begin_transaction()
        for v in values(prefix, n):
            producer.produce("cv", key=v, value=v)
        if commit:
            producer.commit_transaction(15)
        else:
            producer.flush(15)  # the aborted records do reach the log
            producer.abort_transaction(15)
    committed = sorted(values("c1", 120) + values("c2", 50))
    everything = sorted(committed + values("a1", 80))
    assert sorted(consume_values(bootstrap, "cv", "read_committed", len(committed))) == committed
    assert sorted(consume_values(bootstrap, "cv", "read_uncommitted", len(everything))) == everything
    assert sorted(consume_values_kafka_python(bootstrap, "cv", "read_committed", len(committed))) \
        == committed
    assert sorted(consume_values_kafka_python(bootstrap, "cv", "read_uncommitted",
                                              len(everything))) == everything
    for p in range(PARTITIONS):  # nothing left open: LSO = HW
        assert list_offset(broker.port, "cv", p, True) == list_offset(broker.port, "cv", p, False)
    state = describe(broker.port, "cv-tx")
    assert (state.error_code, state.transaction_state, state.producer_epoch) == \
        (ErrorCode.NONE, "CompleteCommit", 0)


def test_kafka_python_commit_is_visible_and_abort_is_not(broker):
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "kp")
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-tx",
                                   linger_ms=5)
    try:
        producer.init_transactions()
        for prefix, n, commit in (("c1", 100, True), ("a1", 60, False), ("c2", 40, True)):
            producer.begin_transaction()
            for v in values(prefix, n):
                producer.send("kp", key=v, value=v)
            if commit:
                producer.commit_transaction()
            else:
                producer.flush()
                producer.abort_transaction()
    finally:
        producer.close()
    committed = sorted(values("c1", 100) + values("c2", 40))
    everything = sorted(committed + values("a1", 60))
    assert sorted(consume_values(bootstrap, "kp", "read_committed", len(committed))) == committed
    assert sorted(consume_values(bootstrap, "kp", "read_uncommitted", len(everything))) == everything
    assert sorted(consume_values_kafka_python(bootstrap, "kp", "read_committed", len(committed))) \
        == committed


# -- an open transaction holds read_committed consumers ----------------------------------------


def test_open_transaction_holds_read_committed_consumers_at_its_first_offset(broker):
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "hold", 1)
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for v in values("before", 5):
        plain.produce("hold", value=v)
    plain.flush(10)
    producer = txn_producer(bootstrap, "hold-tx")
    producer.begin_transaction()
    for v in values("txn", 4):
        producer.produce("hold", value=v)
    producer.flush(10)
    for v in values("after", 3):
        plain.produce("hold", value=v)
    plain.flush(10)

    assert list_offset(broker.port, "hold", 0, committed=False) == 12
    assert list_offset(broker.port, "hold", 0, committed=True) == 5  # the transaction's first offset
    kp = kafka.KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    try:
        assert kp.end_offsets([kafka.TopicPartition("hold", 0)]) == \
            {kafka.TopicPartition("hold", 0): 5}
    finally:
        kp.close()
    assert consume_values(bootstrap, "hold", "read_committed", 5, partitions=1) == values("before", 5)

    producer.commit_transaction(10)
    assert list_offset(broker.port, "hold", 0, committed=True) == 13  # HW, the marker included
    assert consume_values(bootstrap, "hold", "read_committed", 12, partitions=1) == \
        values("before", 5) + values("txn", 4) + values("after", 3)


# -- fencing ------------------------------------------------------------------------------------


def test_second_producer_fences_the_first_and_the_zombie_never_becomes_visible(broker):
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "fence")
    zombie = txn_producer(bootstrap, "fence-tx")
    zombie.begin_transaction()
    for v in values("zombie", 30):
        zombie.produce("fence", key=v, value=v)
    zombie.flush(10)

    successor = txn_producer(bootstrap, "fence-tx")  # aborts the zombie's transaction, fences it
    state = describe(broker.port, "fence-tx")
    assert (state.transaction_state, state.producer_epoch) == ("Empty", 2)  # aborted at 1

    # The zombie's next write is refused with INVALID_PRODUCER_EPOCH: librdkafka's fatal _FENCED.
    with pytest.raises(KafkaException) as info:
        zombie.produce("fence", value=b"zombie-late")
        zombie.flush(5)
        zombie.commit_transaction(10)
    assert info.value.args[0].fatal() and "fenced" in str(info.value)

    successor.begin_transaction()
    for v in values("good", 20):
        successor.produce("fence", key=v, value=v)
    successor.commit_transaction(10)
    seen = consume_values(bootstrap, "fence", "read_committed", 20)
    assert sorted(seen) == sorted(values("good", 20))
    # read_uncommitted shows the zombie's first records were written, then aborted
    assert set(values("zombie", 30)) <= set(consume_values(bootstrap, "fence", "read_uncommitted", 50))


def test_kafka_python_zombie_is_fenced(broker):
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "kfence", 2)
    zombie = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kf-tx", linger_ms=5)
    successor = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kf-tx",
                                    linger_ms=5)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        for v in values("zombie", 10):
            zombie.send("kfence", value=v)
        zombie.flush()
        successor.init_transactions()
        # The zombie's next write gets INVALID_PRODUCER_EPOCH. A kafka-python that sees a broker
        # with InitProducerId v3+ treats it as abortable and tries to bump its epoch (KIP-360),
        # which the coordinator refuses: either way the zombie cannot commit.
        with pytest.raises(kafka.errors.KafkaError,
                           match="InvalidProducerEpoch|ProducerFenced|BUMPING_PRODUCER_EPOCH"):
            zombie.send("kfence", value=b"zombie-late")
            zombie.flush()
            zombie.commit_transaction()
        # That bump (KIP-360) runs in kafka-python's background thread and names the same
        # producer id: arriving while the successor's transaction is ongoing, Kafka's coordinator
        # (and ours) aborts that transaction to fence the bumping producer (CI failed 1 in ~10
        # runs under load this way). The zombie stops sending before the successor goes on.
        zombie.close(timeout=5)
        successor.begin_transaction()
        successor.send("kfence", value=b"good")
        successor.commit_transaction()
    finally:
        zombie.close(timeout=1)
        successor.close()
    assert consume_values(bootstrap, "kfence", "read_committed", 1, partitions=2) == [b"good"]


# -- a producer that dies mid-transaction ----------------------------------------------------------

DYING_PRODUCER = textwrap.dedent("""
    import sys, time
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "dying-tx",
                         "transaction.timeout.ms": 1500, "linger.ms": 0})
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(10):
        producer.produce("dying", value=b"dying-%d" % i, partition=0)
    producer.flush(15)
    print("ready", flush=True)
    time.sleep(600)
""")


def test_producer_killed_mid_transaction_is_aborted_after_its_timeout(broker):
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "dying", 1)
    child = popen([sys.executable, "-c", DYING_PRODUCER, bootstrap],
                  what="dying transactional producer", stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        child.kill()  # SIGKILL: no abort, no close
        child.wait(10)
        killed_at = time.monotonic()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    assert list_offset(broker.port, "dying", 0, committed=True) == 0  # held by the open txn
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for v in values("later", 5):
        plain.produce("dying", value=v, partition=0)
    plain.flush(10)

    # The coordinator aborts it after 1.5 s (plus one 200 ms interval), bumping the epoch.
    assert wait_until(lambda: list_offset(broker.port, "dying", 0, committed=True) ==
                      list_offset(broker.port, "dying", 0, committed=False), timeout=10)
    assert time.monotonic() - killed_at < 6
    state = describe(broker.port, "dying-tx")
    assert (state.transaction_state, state.producer_epoch) == ("CompleteAbort", 1)
    assert consume_values(bootstrap, "dying", "read_committed", 5, partitions=1) == values("later", 5)


# -- the seeds' consume-transform-produce loop ---------------------------------------------------


def advertises(port: int, api_key: ApiKey) -> bool:
    with RawConnection(port) as conn:
        response = conn.request(ApiKey.API_VERSIONS, 0, {})
    return any(k.api_key == api_key for k in response.api_keys)


@pytest.mark.slow
def test_consume_transform_produce_copies_every_record_exactly_once(broker):
    if not advertises(broker.port, ApiKey.JOIN_GROUP):
        pytest.skip("the broker does not advertise JoinGroup: no consumer groups to subscribe with")
    bootstrap = broker.bootstrap
    total = 20_000
    create_topic(bootstrap, "ctp-in")
    create_topic(bootstrap, "ctp-out")
    source = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                       "linger.ms": 5})
    for i in range(total):
        source.produce("ctp-in", key=b"%d" % i, value=b"in-%d" % i)
        if i % 1000 == 0:
            source.poll(0)
    assert source.flush(30) == 0

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "ctp", "enable.auto.commit": False,
        "isolation.level": "read_committed", "auto.offset.reset": "earliest",
    })
    consumer.subscribe(["ctp-in"])
    producer = txn_producer(bootstrap, "ctp-tx", **{"linger.ms": 5})
    copied = aborted = transactions = 0
    deadline = time.monotonic() + 120
    try:
        while copied < total and time.monotonic() < deadline:
            batch = consumer.consume(500, 0.5)
            batch = [m for m in batch if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for msg in batch:
                producer.produce("ctp-out", key=msg.key(), value=b"out-" + msg.value()[3:])
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 15)
            transactions += 1
            if transactions % 7 == 3:
                # On purpose: abort, and rewind to the committed offsets to process it again.
                producer.abort_transaction(15)
                aborted += 1
                for tp in consumer.committed(consumer.assignment(), 10):
                    consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                 tp.offset if tp.offset >= 0 else 0))
                continue
            producer.commit_transaction(15)
            copied += len(batch)
    finally:
        consumer.close()
    assert copied == total and aborted > 0

    out = consume_values(bootstrap, "ctp-out", "read_committed", total)
    assert len(out) == total and sorted(out) == sorted(b"out-%d" % i for i in range(total))
    # The committed offsets are the ends of the input partitions.
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp"})
    try:
        committed = check.committed([TopicPartition("ctp-in", p) for p in range(PARTITIONS)], 10)
        ends = {p: check.get_watermark_offsets(TopicPartition("ctp-in", p), 10)[1]
                for p in range(PARTITIONS)}
    finally:
        check.close()
    assert {tp.partition: tp.offset for tp in committed} == ends
    assert sum(ends.values()) == total


# -- kill -9 between EndTxn and the markers ------------------------------------------------------


@pytest.mark.parametrize("point", ["after_prepare_commit", "after_markers"])
def test_kill9_between_end_txn_and_markers_then_restart(tmp_path, point):
    proc = start_broker(tmp_path, crash_at=point)
    producer = None
    try:
        bootstrap = proc.bootstrap
        create_topic(bootstrap, "crash")
        producer = txn_producer(bootstrap, "crash-tx")
        producer.begin_transaction()
        expected = values("v", 300)
        for v in expected:
            producer.produce("crash", key=v, value=v)
        producer.flush(10)
        outcome: list = []

        def commit() -> None:
            try:
                producer.commit_transaction(30)
                outcome.append("committed")
            except KafkaException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=commit)
        thread.start()
        assert proc.proc.wait(15) == 137  # the fault hook: like SIGKILL, at that point of EndTxn
        proc.kill9()
        proc.restart()
        thread.join(40)
        assert outcome, "commit_transaction did not return"

        # Recovery completed the commit: every record once, nothing open, state CompleteCommit.
        assert any("completed commit of 'crash-tx'" in line for line in proc.output)
        seen = consume_values(proc.bootstrap, "crash", "read_committed", len(expected))
        assert sorted(seen) == sorted(expected)
        for p in range(PARTITIONS):
            assert list_offset(proc.port, "crash", p, True) == list_offset(proc.port, "crash", p, False)
        assert describe(proc.port, "crash-tx").transaction_state == "CompleteCommit"
        # The producer (or a new instance) goes on.
        if outcome != ["committed"]:
            producer = txn_producer(proc.bootstrap, "crash-tx")
        producer.begin_transaction()
        producer.produce("crash", value=b"next")
        producer.commit_transaction(15)
        again = consume_values(proc.bootstrap, "crash", "read_committed", len(expected) + 1)
        assert sorted(again) == sorted(expected + [b"next"])
    finally:
        producer = None  # librdkafka handles are freed by the garbage collector
        proc.stop()
        print("".join(proc.output[-40:]))  # shown by pytest when the test failed


@pytest.mark.parametrize("machine_restarted", [False, True], ids=["same-boot", "machine-restart"])
def test_kill9_with_acknowledged_unsynced_transactional_batches(tmp_path, machine_restarted):
    """Transactional batches are answered once appended and synced with their PrepareCommit. A
    kill -9 while a transaction is open: no reader ever saw its batches (the high watermark only
    covers synced data), and a committed transaction keeps every record.

    - On the same boot (only the process died) the page cache kept every write: recovery syncs
      the tails and the open transaction goes on, as on a Kafka broker restart; its producer
      commits it and every record is read once.
    - After a machine restart (simulated: the data dir's ``.boot_id`` no longer matches) batches
      answered before their fsync may be lost: recovery aborts the open transaction with an
      epoch bump, the producer, told it was fenced, goes on once its application initializes it
      again, and no record of the aborted transaction is ever read."""
    proc = start_broker(tmp_path)
    kept = open_ = None
    try:
        create_topic(proc.bootstrap, "unsynced")
        kept = txn_producer(proc.bootstrap, "kept-tx")
        kept.begin_transaction()
        committed = values("kept", 200)
        for v in committed:
            kept.produce("unsynced", key=v, value=v)
        kept.commit_transaction(15)
        visible = [list_offset(proc.port, "unsynced", p, False) for p in range(PARTITIONS)]

        open_ = txn_producer(proc.bootstrap, "open-tx")
        open_.begin_transaction()
        pending = values("open", 300)
        for v in pending:
            open_.produce("unsynced", key=v, value=v)
        assert open_.flush(10) == 0  # every batch acknowledged (acks=all)
        # Appended, not synced: not even read_uncommitted readers see them (high watermark).
        assert [list_offset(proc.port, "unsynced", p, False)
                for p in range(PARTITIONS)] == visible
        proc.kill9()
        if machine_restarted:
            (proc.data_dir / ".boot_id").write_text("a-boot-before-a-power-cut\n")
        proc.restart()

        aborted_line = any("aborting the ongoing transaction of 'open-tx'" in line
                           for line in proc.output)
        state = describe(proc.port, "open-tx")
        assert sorted(consume_values(proc.bootstrap, "unsynced", "read_committed",
                                     len(committed))) == sorted(committed)
        if not machine_restarted:
            assert not aborted_line
            assert (state.transaction_state, state.producer_epoch) == ("Ongoing", 0)
            open_.commit_transaction(15)  # the same producer finishes what it began
            seen = consume_values(proc.bootstrap, "unsynced", "read_committed",
                                  len(committed) + len(pending))
            assert sorted(seen) == sorted(committed + pending)
            return
        assert aborted_line
        assert (state.transaction_state, state.producer_epoch) == ("CompleteAbort", 1)
        for p in range(PARTITIONS):  # nothing left open: the LSO is the high watermark
            assert list_offset(proc.port, "unsynced", p, True) == \
                list_offset(proc.port, "unsynced", p, False)
        # The producer learns its transaction was aborted by the coordinator: fenced.
        with pytest.raises(KafkaException) as info:
            open_.commit_transaction(15)
        assert info.value.args[0].fatal()
        open_ = txn_producer(proc.bootstrap, "open-tx")  # the application initializes again
        open_.begin_transaction()
        open_.produce("unsynced", value=b"after")
        open_.commit_transaction(15)
        seen = consume_values(proc.bootstrap, "unsynced", "read_committed", len(committed) + 1)
        assert sorted(seen) == sorted(committed + [b"after"])
    finally:
        kept = open_ = None  # librdkafka handles are freed by the garbage collector
        proc.stop()
        print("".join(proc.output[-40:]))  # shown by pytest when the test failed


def _lose_last_txn_log_record(data_dir: Path, transactional_id: str) -> None:
    """What a power cut leaves of the unsynced tail of the id's ``__transaction_state``
    partition: its last batch (which must be the record that started the transaction) zeroed."""
    index = partition_for(transactional_id, len(list(data_dir.glob(f"{TRANSACTION_STATE}-*"))))
    path = data_dir / f"{TRANSACTION_STATE}-{index}" / ("0" * 20 + ".log")
    data = bytearray(path.read_bytes())
    pos = last = 0
    while pos + 12 <= len(data):
        length = struct.unpack_from(">i", data, pos + 8)[0]
        if length <= 0:
            break
        last, pos = pos, pos + 12 + length
    [(_, records)] = list(decode_batches_untrusted(bytes(data[last:pos])))
    assert decode_key(records[0].key) == transactional_id
    assert decode_value(transactional_id, records[0].value).state is TxnState.ONGOING
    data[last:pos] = bytes(pos - last)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("admitted", ["batch", "offsets"])
def test_machine_restart_that_lost_the_add_record_aborts_what_it_admitted(tmp_path, admitted):
    """AddPartitionsToTxn / AddOffsetsToTxn are answered once their record is appended (synced
    with the transaction's Prepare record). A power cut between the fsyncs of one round can
    leave the batch they admitted durable and the record lost: after the machine restart the
    partition holds a transaction its coordinator never recorded. Recovery aborts it there (the
    LSO moves; pending TxnOffsetCommit offsets are dropped), fences the producer (its commit
    would otherwise be answered as a retry of its last one), and the same id commits again."""
    proc = start_broker(tmp_path)
    producer = None
    try:
        create_topic(proc.bootstrap, "lost", 1)
        if admitted == "offsets":
            group = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "lost-g",
                              "enable.auto.commit": False})
            group.commit(offsets=[TopicPartition("lost", 0, 1)], asynchronous=False)
        producer = txn_producer(proc.bootstrap, "lost-tx")
        producer.begin_transaction()
        if admitted == "batch":
            producer.produce("lost", value=b"never")
            assert producer.flush(10) == 0
        else:
            producer.send_offsets_to_transaction([TopicPartition("lost", 0, 7)],
                                                 group.consumer_group_metadata(), 15)
        proc.kill9()
        _lose_last_txn_log_record(proc.data_dir, "lost-tx")
        (proc.data_dir / ".boot_id").write_text("a-boot-before-a-power-cut\n")
        proc.restart()

        assert any("recovery: aborting the transaction of 'lost-tx'" in line
                   for line in proc.output)
        assert describe(proc.port, "lost-tx").transaction_state == "CompleteAbort"
        assert list_offset(proc.port, "lost", 0, True) == list_offset(proc.port, "lost", 0, False)
        with pytest.raises(KafkaException) as info:
            producer.commit_transaction(15)
        assert info.value.args[0].fatal()
        producer = txn_producer(proc.bootstrap, "lost-tx")  # the application initializes again
        producer.begin_transaction()
        producer.produce("lost", value=b"after")
        if admitted == "offsets":
            committed = group.committed([TopicPartition("lost", 0)], 10)
            assert [tp.offset for tp in committed] == [1]  # the pending 7 dropped
            producer.send_offsets_to_transaction([TopicPartition("lost", 0, 9)],
                                                 group.consumer_group_metadata(), 15)
        producer.commit_transaction(15)
        assert consume_values(proc.bootstrap, "lost", "read_committed", 1, 1) == [b"after"]
        if admitted == "offsets":
            assert [tp.offset for tp in group.committed([TopicPartition("lost", 0)], 10)] == [9]
            group.close()
    finally:
        producer = None  # librdkafka handles are freed by the garbage collector
        proc.stop()
        print("".join(proc.output[-40:]))  # shown by pytest when the test failed


# -- WriteTxnMarkers v0 over a raw socket ----------------------------------------------------------


def _fetch(conn: RawConnection, topic: str, committed: bool, offset: int = 0):
    response = conn.request(ApiKey.FETCH, 4, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 1 if committed else 0,
        "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}],
    })
    return response.responses[0].partitions[0]


def test_requests_behind_end_txn_find_the_transaction_complete(broker):
    """EndTxn is answered before its markers' fsync when nothing else waits (one producer), and
    the fsync and the completion follow before any other request is handled: a Fetch and the
    next AddPartitionsToTxn sent in the same packet as EndTxn see the transaction complete."""
    create_topic(broker.bootstrap, "pipe", 1)
    with RawConnection(broker.port) as conn:
        init = conn.request(ApiKey.INIT_PRODUCER_ID, 0,
                            {"transactional_id": "pipe-tx", "transaction_timeout_ms": 60_000})
        pid, epoch = init.producer_id, init.producer_epoch
        ids = {"transactional_id": "pipe-tx", "producer_id": pid, "producer_epoch": epoch}
        add = {**ids, "topics": [{"name": "pipe", "partitions": [0]}]}
        assert conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, 0, add).results[0].results[0] \
            .error_code == ErrorCode.NONE
        batch = encode_batch([(None, b"p%d" % i, (), 0) for i in range(3)], producer_id=pid,
                             producer_epoch=epoch, base_sequence=0, transactional=True)
        produced = conn.request(ApiKey.PRODUCE, 3, {
            "transactional_id": "pipe-tx", "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": "pipe", "partition_data": [{"index": 0, "records": batch}]}]})
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE

        fetch = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                 "isolation_level": 1, "topics": [{"topic": "pipe", "partitions": [
                     {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
        pipelined = [(ApiKey.END_TXN, 0, {**ids, "committed": True}), (ApiKey.FETCH, 4, fetch),
                     (ApiKey.ADD_PARTITIONS_TO_TXN, 0, add)]
        conn.send_raw(b"".join(
            encode_frame(encode_request_header(RequestHeader(key, version, 100 + i, "raw"))
                         + encode_request(key, version, body))
            for i, (key, version, body) in enumerate(pipelined)))
        answers = []
        for i, (key, version, _) in enumerate(pipelined):
            frame = conn.read_frame()
            assert frame is not None
            correlation, offset = parse_response_header_untrusted(frame, key, version)
            assert correlation == 100 + i
            answers.append(decode_response(key, version, frame, offset))
        ended, fetched, added = answers
        assert ended.error_code == ErrorCode.NONE
        part = fetched.responses[0].partitions[0]
        assert (part.high_watermark, part.last_stable_offset) == (4, 4)  # the marker durable
        assert [h.base_offset for h, _ in decode_batches_untrusted(part.records)] == [0, 3]
        assert added.results[0].results[0].error_code == ErrorCode.NONE  # the next one started
    assert describe(broker.port, "pipe-tx").transaction_state == "Ongoing"


def test_write_txn_markers_frame_writes_the_marker_and_moves_the_lso(broker):
    create_topic(broker.bootstrap, "raw", 1)
    with RawConnection(broker.port) as conn:
        init = conn.request(ApiKey.INIT_PRODUCER_ID, 0,
                            {"transactional_id": "raw-tx", "transaction_timeout_ms": 60_000})
        assert init.error_code == ErrorCode.NONE
        pid, epoch = init.producer_id, init.producer_epoch
        added = conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, 0, {
            "transactional_id": "raw-tx", "producer_id": pid, "producer_epoch": epoch,
            "topics": [{"name": "raw", "partitions": [0]}]})
        assert added.results[0].results[0].error_code == ErrorCode.NONE

        def produce(seq: int, n: int) -> int:
            batch = encode_batch([(None, b"r%d" % (seq + i), (), 0) for i in range(n)],
                                 producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                 transactional=True)
            response = conn.request(ApiKey.PRODUCE, 3, {
                "transactional_id": "raw-tx", "acks": -1, "timeout_ms": 5000,
                "topic_data": [{"name": "raw", "partition_data": [{"index": 0, "records": batch}]}]})
            part = response.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.NONE
            return part.base_offset

        assert produce(0, 3) == 0
        # Answered once appended; not synced yet, so no reader sees it (the high watermark).
        fetched = _fetch(conn, "raw", committed=False)
        assert (fetched.high_watermark, fetched.last_stable_offset, fetched.records) == (0, 0, b"")

        def write_marker(commit: bool) -> None:
            response = conn.request(ApiKey.WRITE_TXN_MARKERS, 0, {"markers": [{
                "producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
                "topics": [{"name": "raw", "partition_indexes": [0]}], "coordinator_epoch": 0}]})
            marker = response.markers[0]
            assert marker.producer_id == pid
            assert marker.topics[0].partitions[0].error_code == ErrorCode.NONE

        write_marker(commit=True)
        fetched = _fetch(conn, "raw", committed=True)
        assert (fetched.high_watermark, fetched.last_stable_offset) == (4, 4)
        assert fetched.aborted_transactions == []
        batches = list(decode_batches_untrusted(fetched.records))
        assert [h.base_offset for h, _ in batches] == [0, 3]
        assert batches[1][0].is_control and parse_control_record(batches[1][1][0])[0] == 1

        # An aborted one: the data stays in the log, listed as aborted for read_committed.
        assert produce(3, 2) == 4
        # An ABORT marker for a transaction the coordinator still runs (Ongoing) is refused
        # (issue 39 item 4); the transaction is aborted through its coordinator instead.
        response = conn.request(ApiKey.WRITE_TXN_MARKERS, 0, {"markers": [{
            "producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
            "topics": [{"name": "raw", "partition_indexes": [0]}], "coordinator_epoch": 0}]})
        assert (response.markers[0].topics[0].partitions[0].error_code
                == ErrorCode.TRANSACTION_COORDINATOR_FENCED)
        assert _fetch(conn, "raw", committed=True, offset=4).last_stable_offset == 4
        ended = conn.request(ApiKey.END_TXN, 0, {"transactional_id": "raw-tx", "producer_id": pid,
                                                 "producer_epoch": epoch, "committed": False})
        assert ended.error_code == ErrorCode.NONE
        deadline = time.monotonic() + 10
        while (fetched := _fetch(conn, "raw", committed=True, offset=4)).last_stable_offset < 7:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert (fetched.high_watermark, fetched.last_stable_offset) == (7, 7)
        assert [(a.producer_id, a.first_offset) for a in fetched.aborted_transactions] == [(pid, 4)]
        uncommitted = _fetch(conn, "raw", committed=False, offset=4)
        assert uncommitted.aborted_transactions is None


def test_transactional_produce_outside_the_transaction_is_refused(broker):
    create_topic(broker.bootstrap, "kip890", 2)
    with RawConnection(broker.port) as conn:
        init = conn.request(ApiKey.INIT_PRODUCER_ID, 0,
                            {"transactional_id": "k-tx", "transaction_timeout_ms": 60_000})
        pid, epoch = init.producer_id, init.producer_epoch
        conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, 0, {
            "transactional_id": "k-tx", "producer_id": pid, "producer_epoch": epoch,
            "topics": [{"name": "kip890", "partitions": [0]}]})
        batch = encode_batch([(None, b"x", (), 0)], producer_id=pid, producer_epoch=epoch,
                             base_sequence=0, transactional=True)
        response = conn.request(ApiKey.PRODUCE, 3, {
            "transactional_id": "k-tx", "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": "kip890", "partition_data": [{"index": 1, "records": batch}]}]})
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_TXN_STATE
        # Nothing was written: no open transaction pins the partition.
        assert list_offset(broker.port, "kip890", 1, committed=True) == 0
        assert list_offset(broker.port, "kip890", 1, committed=False) == 0


# -- the CLI -------------------------------------------------------------------------------------


def test_transactions_cli_lists_and_describes(broker):
    create_topic(broker.bootstrap, "cli", 2)
    producer = txn_producer(broker.bootstrap, "cli-tx")
    producer.begin_transaction()
    producer.produce("cli", value=b"x", partition=1)
    producer.flush(10)
    runner = CliRunner()
    # (our table: --format table; the default is kafka-transactions.sh's columns, compared with
    # its output by tests/kafka_ref/test_cli_same_output.py)
    result = runner.invoke(transactions_cli, ["list", "--format", "table", "--bootstrap-server",
                                              broker.bootstrap])
    assert result.exit_code == 0, result.output
    header, row = result.output.strip().splitlines()
    assert header.split()[:3] == ["TRANSACTIONAL", "ID", "STATE"]
    cells = row.split()
    assert cells[:5] == ["cli-tx", "Ongoing", cells[2], "0", "cli-1"]
    assert cells[-1] == "1m00s"  # librdkafka's default transaction.timeout.ms

    result = runner.invoke(transactions_cli, ["list", "--state", "CompleteCommit",
                                              "--bootstrap-server", broker.bootstrap])
    assert result.exit_code == 0 and len(result.output.strip().splitlines()) == 1
    kafka = runner.invoke(transactions_cli, ["list", "--bootstrap-server", broker.bootstrap])
    assert kafka.output.split("\n")[0].split() == ["TransactionalId", "Coordinator", "ProducerId",
                                                   "TransactionState"]
    assert kafka.output.split("\n")[1].split() == ["cli-tx", "0", cells[2], "Ongoing"]
    producer.commit_transaction(10)
    result = runner.invoke(transactions_cli, ["describe", "cli-tx", "--format", "table",
                                              "--bootstrap-server", broker.bootstrap])
    assert result.exit_code == 0
    assert result.output.strip().splitlines()[1].split()[:6] == \
        ["cli-tx", "CompleteCommit", cells[2], "0", "-", "-"]

    result = runner.invoke(transactions_cli, ["describe", "nobody",
                                              "--bootstrap-server", broker.bootstrap])
    assert result.exit_code == 1
    assert result.output.strip() == "Error: transactional id 'nobody' not found"
    result = runner.invoke(transactions_cli, ["list", "--state", "Bogus",
                                              "--bootstrap-server", broker.bootstrap])
    assert result.exit_code == 1 and "unknown transaction state(s): Bogus" in result.output
    result = runner.invoke(transactions_cli, ["list", "--bootstrap-server", "127.0.0.1:1"])
    assert result.exit_code == 1 and result.output.startswith("Error: no broker reachable")
    assert os.environ.get("MINIBROKER_TEST_CRASH_AT") is None


def _open_transaction(conn: RawConnection, tid: str, topic: str) -> tuple[int, int]:
    """InitProducerId, AddPartitionsToTxn and one record on ``topic``-0: ``(pid, epoch)``."""
    init = conn.request(ApiKey.INIT_PRODUCER_ID, 0,
                        {"transactional_id": tid, "transaction_timeout_ms": 60_000})
    pid, epoch = init.producer_id, init.producer_epoch
    added = conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, 0, {
        "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
        "topics": [{"name": topic, "partitions": [0]}]})
    assert added.results[0].results[0].error_code == ErrorCode.NONE
    batch = encode_batch([(None, b"v", (), 0)], producer_id=pid, producer_epoch=epoch,
                         base_sequence=0, transactional=True)
    produced = conn.request(ApiKey.PRODUCE, 3, {
        "transactional_id": tid, "acks": -1, "timeout_ms": 30_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    return pid, epoch


@pytest.mark.parametrize("request_", ["EndTxn", "InitProducerId"])
def test_a_decided_transaction_completes_when_its_reply_is_never_sent(broker, request_):
    # Replies go out in request order, so the reply to an EndTxn (or to an InitProducerId that
    # aborts the open transaction first) waits behind a long-poll Fetch; the peer then resets
    # the connection, and that reply is never sent. The outcome was decided (the Prepare record
    # is durable) and must still be carried out: markers, the LSO moved, the id usable again.
    # (It used to stay prepared for ever, its id marked as completing.)
    topic = "unsent-reply"
    create_topic(broker.bootstrap, topic, 1)
    create_topic(broker.bootstrap, topic + "-idle", 1)
    tid = "unsent-reply"
    with RawConnection(broker.port) as conn:
        pid, epoch = _open_transaction(conn, tid, topic)
        conn.send_request(ApiKey.FETCH, 4, {  # waits: nothing to read in the idle topic
            "replica_id": -1, "max_wait_ms": 5_000, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "topics": [{"topic": topic + "-idle", "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        if request_ == "EndTxn":
            conn.send_request(ApiKey.END_TXN, 0, {
                "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                "committed": True})
        else:
            conn.send_request(ApiKey.INIT_PRODUCER_ID, 0,
                              {"transactional_id": tid, "transaction_timeout_ms": 60_000})
        time.sleep(0.5)  # both requests read and dispatched
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    final = "CompleteCommit" if request_ == "EndTxn" else "CompleteAbort"
    assert wait_until(lambda: describe(broker.port, tid).transaction_state == final,
                      timeout=15), describe(broker.port, tid)
    assert list_offset(broker.port, topic, 0, committed=True) == 2  # the record and its marker
    with RawConnection(broker.port) as conn:  # the id serves a new producer
        again = conn.request(ApiKey.INIT_PRODUCER_ID, 0,
                             {"transactional_id": tid, "transaction_timeout_ms": 60_000})
        assert again.error_code == ErrorCode.NONE and again.producer_epoch > epoch


def test_many_producers_at_once_share_coordinator_fsyncs_and_stay_exact(broker):
    # Twenty transactional producers committing and aborting at the same time keep group-commit
    # rounds going, so their AddPartitionsToTxn and EndTxn records join those rounds instead of
    # being synced one by one (TransactionManager._persist_shared). Whatever the path, exactly
    # the committed records are visible and every transaction completes.
    topic = "many-producers"
    create_topic(broker.bootstrap, topic)
    # The last transaction (t = 12) commits: see the end.
    producers, transactions = 20, 13
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            producer = Producer({"bootstrap.servers": broker.bootstrap,
                                 "transactional.id": f"many-{n}", "linger.ms": 0})
            producer.init_transactions(30)
            for t in range(transactions):
                producer.begin_transaction()
                for p in range(PARTITIONS):
                    producer.produce(topic, b"%d-%d-%d" % (n, t, p), partition=p)
                if t % 3 == 2:
                    producer.abort_transaction(30)
                else:
                    producer.commit_transaction(30)
            producer.flush(30)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    committed = sorted(b"%d-%d-%d" % (n, t, p) for n in range(producers)
                       for t in range(transactions) if t % 3 != 2 for p in range(PARTITIONS))
    seen = consume_values(broker.bootstrap, topic, "read_committed", expected=len(committed))
    assert sorted(seen) == committed
    states = {describe(broker.port, f"many-{n}").transaction_state for n in range(producers)}
    # Every producer's last EndTxn was a commit, answered: none left open or prepared. (The
    # last transaction must not be an abort: librdkafka 2.16 aborts without EndTxn when the
    # answer to its AddPartitionsToTxn arrives after the abort began, even though the
    # coordinator added the partitions; that transaction stays Ongoing, on Kafka too, until the
    # producer's next transaction takes it over or it times out. Seen here in 1 run of 20.)
    assert states == {"CompleteCommit"}, states
