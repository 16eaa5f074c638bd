"""Issue 28 items 1-2: no client writes into ``__transaction_state`` or ``__consumer_offsets``,
no client setting makes the broker forget or refuse its own state there, and a replay that meets
what it cannot read keeps every partition served.

Every path is tried over a socket as an anonymous client of a default broker and as ``bob``, a
SASL user with every right on ``Topic:*`` (and Write on ``TransactionalId:*``, Read on
``Group:*``, ClusterAction), on a broker with an authorizer. After the attempts come a clean
restart and a kill -9 restart, each followed by the checks of ``tests/fuzz/orders.py``: every
transaction-log partition has a coordinator, another transactional id commits, a group commits
and fetches, and the canary transaction committed first reads back exactly.
"""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig
from broker.group.offsets import OffsetAndMetadata, encode_offset_key, encode_offset_value
from broker.log.topics import CONSUMER_OFFSETS_TOPIC as OFFSETS
from broker.log.topics import TRANSACTION_STATE_TOPIC as TXN_LOG
from broker.log.topics import partition_for
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import encode_batch
from tests.broker_process import BrokerProcess
from tests.fuzz import ops
from tests.fuzz.orders import check_broker
from tests.secured import secured

INTERNAL = [(TXN_LOG, i) for i in range(50)] + [(OFFSETS, i) for i in range(50)]
CANARY = [b"canary-1", b"canary-2"]


def _start(tmp_path, mode: str) -> tuple[BrokerProcess, dict]:
    if mode == "anonymous":
        return BrokerProcess(tmp_path / "data").start(), {}
    properties = "\n".join(secured("connection.failed.authentication.delay.ms=0")) + "\n"
    proc = BrokerProcess.configured(tmp_path, properties).start()
    with ops.connect(proc.port, "admin", "admin-secret") as admin:
        for resource, name, operation in (
                ("topic", "*", "all"), ("transactional_id", "*", "write"),
                ("group", "*", "read"), ("cluster", "kafka-cluster", "cluster_action")):
            ops.allow(admin, "User:bob", resource, name, operation)
    return proc, {"user": "bob", "password": "bob-secret"}


def _attack(conn) -> None:
    """Every client path into the internal logs, each refused with the code Kafka uses (or,
    where Kafka lets it through, the one this broker documents)."""
    refused = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # AddPartitionsToTxn (the attack), every version's shape.
    for version in (0, 3):
        code, pid, epoch = ops.init_producer_id(conn, f"evil-{version}")
        assert code == ErrorCode.NONE
        codes = ops.add_partitions(conn, f"evil-{version}", pid, epoch, [*INTERNAL, ("t", 0)],
                                   version)
        assert {codes[tp] for tp in INTERNAL} == {refused}
        assert codes[("t", 0)] == ErrorCode.OPERATION_NOT_ATTEMPTED
        code, _, _ = ops.end_txn(conn, f"evil-{version}", pid, epoch, True)
        assert code == ErrorCode.INVALID_TXN_STATE  # nothing was added: nothing to commit
    # Produce: plain, idempotent, and transactional v12 (transaction version 2 adds the
    # partition to the transaction by itself).
    for topic in (TXN_LOG, OFFSETS):
        assert ops.produce(conn, topic, 0, ops.batch([b"x"])) == ErrorCode.INVALID_TOPIC_EXCEPTION
        code, pid, epoch = ops.init_producer_id(conn, None)
        assert ops.produce(conn, topic, 0, ops.batch([b"x"], pid, epoch, 0)) == \
            ErrorCode.INVALID_TOPIC_EXCEPTION
        code, pid, epoch = ops.init_producer_id(conn, "evil-v2", version=5)
        assert code == ErrorCode.NONE
        assert ops.produce(conn, topic, 0, ops.batch([b"x"], pid, epoch, 0, True), "evil-v2",
                           version=12) == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert ops.end_txn(conn, "evil-v2", pid, epoch, True, version=5)[0] == \
            ErrorCode.INVALID_TXN_STATE
    # TxnOffsetCommit naming the internal topics: an offset record of the group, written by the
    # group coordinator into the group's own partition (never into the transaction log).
    code, pid, epoch = ops.init_producer_id(conn, "evil-offsets")
    assert ops.add_offsets(conn, "evil-offsets", pid, epoch, "evil-group") == ErrorCode.NONE
    codes = ops.txn_offset_commit(conn, "evil-offsets", "evil-group", pid, epoch,
                                  {(TXN_LOG, 0): 1, (OFFSETS, 0): 1})
    assert set(codes.values()) == {ErrorCode.NONE}
    assert ops.end_txn(conn, "evil-offsets", pid, epoch, True)[0] == ErrorCode.NONE
    # WriteTxnMarkers: never into the transaction log, into the offsets log only the ABORT of a
    # hanging transaction (there is none here).
    for commit in (True, False):
        codes = ops.write_txn_markers(conn, pid, epoch, commit, [(TXN_LOG, 0), (OFFSETS, 0)])
        assert set(codes.values()) == {ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    # DeleteRecords, CreatePartitions, DeleteTopics, CreateTopics.
    for topic in (TXN_LOG, OFFSETS):
        assert ops.delete_records(conn, topic, 0, -1) == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert ops.create_partitions(conn, topic, 60) == ErrorCode.INVALID_REQUEST
        assert ops.delete_topic(conn, topic) == ErrorCode.INVALID_REQUEST
        # (they exist: refused as any topic that exists, as Kafka answers)
        assert ops.create_topic(conn, topic, 3) == ErrorCode.TOPIC_ALREADY_EXISTS
    # Configs: what would make the broker forget or refuse its state is refused...
    policy = ErrorCode.POLICY_VIOLATION
    for topic in (TXN_LOG, OFFSETS):
        assert ops.alter_config(conn, topic, [("max.message.bytes", 0, "1")]) == policy
        assert ops.alter_config(conn, topic, [("cleanup.policy", 0, "delete")]) == policy
        assert ops.alter_config(conn, topic, [("cleanup.policy", 2, "delete")]) == policy
        assert ops.alter_config(conn, topic, [("cleanup.policy", 1, None)]) == policy
        assert ops.alter_config(conn, topic, [("retention.ms", 0, "1")]) == policy
        assert ops.alter_config(conn, topic, [("retention.bytes", 0, "1")]) == policy
        assert ops.alter_config(conn, topic, [("segment.bytes", 0, "14")]) == policy
        assert ops.alter_config(conn, topic, [("segment.ms", 0, "1")]) == policy
        assert ops.alter_config(conn, topic, [("max.compaction.lag.ms", 0, "1")]) == policy
        assert ops.replace_config(conn, topic, {"max.message.bytes": "0"}) == policy
        assert ops.replace_config(conn, topic, {"preallocate": "false"}) == policy  # drops compact
        # ...the rest is a topic config like any other.
        assert ops.alter_config(conn, topic, [("delete.retention.ms", 0, "1000")]) == \
            ErrorCode.NONE


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["anonymous", "topic-writer"])
def test_no_client_path_writes_into_the_internal_logs(tmp_path, mode):
    proc, auth = _start(tmp_path, mode)
    try:
        with ops.connect(proc.port, **auth) as conn:
            assert ops.create_topic(conn, "t") == ErrorCode.NONE
            assert ops.create_topic(conn, "canary") == ErrorCode.NONE
            ops.commit_transaction(conn, "canary", "canary", CANARY)
            assert ops.offset_commit(conn, "g-before", {("t", 0): 3}) == {("t", 0): 0}
            _attack(conn)
            # Nothing of it reached the logs: OffsetCommit (the second sequence) and
            # transactions still work before any restart.
            assert ops.offset_commit(conn, "g-after", {("t", 0): 5}) == {("t", 0): 0}
            ops.commit_transaction(conn, "bystander", "t", [b"b"])
        for restart in ("clean", "kill -9"):
            if restart == "clean":
                assert proc.stop() == 0
            else:
                proc.kill9()
            proc.restart()
            check_broker(proc, auth, canary=CANARY, committed={"g-before": 3, "g-after": 5},
                         label=f"{mode}, {restart} restart")
    finally:
        proc.stop()


# The default partition counts of the internal topics (the brokers here keep them).
TXN_PARTITIONS = BrokerConfig.transaction_state_log_num_partitions
OFFSETS_PARTITIONS = BrokerConfig.offsets_topic_num_partitions


def _same_partition(name: str, prefix: str, partitions: int = OFFSETS_PARTITIONS) -> str:
    target = partition_for(name, partitions)
    return next(f"{prefix}-{i}" for i in range(10_000)
                if partition_for(f"{prefix}-{i}", partitions) == target)


@pytest.mark.slow
def test_what_replay_cannot_read_is_skipped_and_every_partition_served(tmp_path):
    """A data dir as an older version or a damaged disk leaves it: a COMMIT marker and an
    undecodable record in the transaction log, an undecodable offset record and a batch with a
    flipped byte (CRC mismatch) in the offsets log, and a saved ``max.message.bytes=1`` and
    ``cleanup.policy=delete`` on ``__consumer_offsets``. The broker starts, logs each skip with
    its offset, serves every partition with the state it could read and needs no repair."""
    from broker.log.manager import LogConfig, LogManager
    from broker.txn.txn_log import encode_key
    from tests.fuzz.poison import recrc

    victim = "victim"
    late = _same_partition(victim, "late", TXN_PARTITIONS)
    g_crc = "g-crc"
    g_after_crc = _same_partition(g_crc, "g-after")
    g_bad = "g-bad"
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        with ops.connect(proc.port) as conn:
            assert ops.create_topic(conn, "t", 2) == ErrorCode.NONE
            assert ops.create_topic(conn, "canary") == ErrorCode.NONE
            ops.commit_transaction(conn, "canary", "canary", CANARY)
            ops.commit_transaction(conn, victim, "t", [b"v"])
            assert ops.offset_commit(conn, g_crc, {("t", 0): 1}) == {("t", 0): 0}
            assert ops.offset_commit(conn, g_after_crc, {("t", 0): 2}) == {("t", 0): 0}
            assert ops.offset_commit(conn, g_bad, {("t", 0): 3}) == {("t", 0): 0}
        assert proc.stop() == 0

        logs = LogManager(tmp_path / "data", LogConfig(), 0)
        txn_index = partition_for(victim, TXN_PARTITIONS)
        txn_part = logs.partition(TXN_LOG, txn_index)
        marker_offset = txn_part.append_marker(12345, 0, True, 0, 0)
        bad_txn_offset = txn_part.log_end_offset
        txn_part.append_control_batch(
            recrc(encode_batch([(encode_key(victim), b"\x00\x01garbage", (), 0)])), 0)
        bad_part = logs.partition(OFFSETS, partition_for(g_bad, OFFSETS_PARTITIONS))
        bad_offset = bad_part.log_end_offset  # first record: undecodable; second: a good one
        bad_part.append_untrusted(bytearray(encode_batch([
            (encode_offset_key(g_bad, "t", 1), b"\x00\x00\x01", (), 0),
            (encode_offset_key(g_bad, "t", 0), encode_offset_value(
                OffsetAndMetadata(9, "", 0)), (), 0)])), 0)
        logs.alter_topic_config(OFFSETS, {**logs.topic_overrides(OFFSETS),
                                          "max.message.bytes": "1", "cleanup.policy": "delete"})
        logs.close()
        # Flip one byte inside g-crc's commit, the first batch of its partition (a clean
        # shutdown: the next start trusts the files and does not rescan them).
        directory = tmp_path / "data" / f"{OFFSETS}-{partition_for(g_crc, OFFSETS_PARTITIONS)}"
        segment = sorted(directory.glob("*.log"))[0]
        data = bytearray(segment.read_bytes())
        data[70] ^= 0xFF
        segment.write_bytes(data)

        proc.restart()
        out = "".join(proc.output)
        assert f"{TXN_LOG}-{txn_index}: at start, skipped the control batch at offset {marker_offset}" in out
        assert f"{TXN_LOG}-{txn_index}: at start, skipped the record at offset {bad_txn_offset}" in out
        assert f"{OFFSETS}-{partition_for(g_bad, OFFSETS_PARTITIONS)}: at start, skipped the record at offset {bad_offset}" \
            in out
        assert f"{OFFSETS}-{partition_for(g_crc, OFFSETS_PARTITIONS)}: at start, skipped the batch at offset 0: CRC " \
            "mismatch" in out
        assert f"{OFFSETS}: restored cleanup.policy=compact, max.message.bytes=(default)" in out
        with ops.connect(proc.port) as conn:
            # Every state that could be read: the later records of each damaged partition.
            assert ops.offset_fetch(conn, g_bad, [("t", 0), ("t", 1)]) == {
                ("t", 0): (0, 9), ("t", 1): (0, -1)}
            assert ops.offset_fetch(conn, g_after_crc, [("t", 0)]) == {("t", 0): (0, 2)}
            assert ops.offset_fetch(conn, g_crc, [("t", 0)]) == {("t", 0): (0, -1)}  # its batch
            ops.commit_transaction(conn, victim, "t", [b"v2"])  # no repair needed
            ops.commit_transaction(conn, late, "t", [b"late"])  # after the bad records
        check_broker(proc, {}, canary=CANARY, committed={}, label="after the damage")
        proc.kill9()
        proc.restart()
        # An unclean start rescans the files: recovery truncates the offsets partition at the
        # batch whose CRC fails, as Kafka's does (so g_after_crc's commit behind it is gone);
        # the partition is still served.
        check_broker(proc, {}, canary=CANARY, committed={},
                     label="kill -9 restart after the damage")
        with ops.connect(proc.port) as conn:
            r = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [late]})
            assert r.transaction_states[0].transaction_state == "CompleteCommit"
    finally:
        proc.stop()
