"""Transaction version 2 (KIP-890 part 2) over the wire, request by request, as a client of it
sends them: ApiVersions v3 finalizes ``transaction.version``; Produce v12 adds a partition with its
first batch and TxnOffsetCommit v5 the group (no AddPartitionsToTxn, no AddOffsetsToTxn); every
EndTxn v5 bumps the epoch and answers it; requests of an ended transaction that arrive late are
fenced; an abort of a transaction that added nothing is allowed. Then our client, which picks
version 2 from the finalized feature, and version 1 when the broker is configured so."""

from __future__ import annotations

import pytest

from client import Admin, Consumer, NewTopic, Producer
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import encode_batch
from tests.broker_process import BrokerProcess
from tests.raw_client import RawConnection

TOPIC = "tv2"
TIMEOUT_MS = 60_000


def _features(port: int) -> dict[str, int]:
    with RawConnection(port) as conn:
        answer = conn.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                      "client_software_version": "1"})
    assert answer.error_code == ErrorCode.NONE
    return {f.name: f.max_version_level for f in answer.finalized_features}


def _init(conn: RawConnection, tid: str) -> tuple[int, int]:
    """InitProducerId v5 for ``tid``: its producer id and epoch."""
    init = conn.request(ApiKey.INIT_PRODUCER_ID, 5, {"transactional_id": tid,
                                                      "transaction_timeout_ms": TIMEOUT_MS})
    assert init.error_code == ErrorCode.NONE
    return init.producer_id, init.producer_epoch


def _produce(conn: RawConnection, tid: str, pid: int, epoch: int, seq: int, value: bytes) -> int:
    records = encode_batch([(None, value, (), 0)], producer_id=pid, producer_epoch=epoch,
                           base_sequence=seq, transactional=True)
    answer = conn.request(ApiKey.PRODUCE, 12, {
        "transactional_id": tid, "acks": -1, "timeout_ms": 5000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}],
    })
    return answer.responses[0].partition_responses[0].error_code


def _end(conn: RawConnection, tid: str, pid: int, epoch: int, commit: bool):
    answer = conn.request(ApiKey.END_TXN, 5, {"transactional_id": tid, "producer_id": pid,
                                              "producer_epoch": epoch, "committed": commit})
    return answer.error_code, (answer.producer_id, answer.producer_epoch)


def _read_committed(bootstrap: str) -> list[bytes]:
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
                   "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([(TOPIC, 0)])
        end = consumer.end_offsets([(TOPIC, 0)])
        values = []
        while consumer.position((TOPIC, 0)) < next(iter(end.values())):
            values.extend(r.value for r in consumer.poll(0.5))
        return values


@pytest.fixture
def broker(tmp_path):
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        with Admin({"bootstrap.servers": proc.bootstrap}) as admin:
            admin.create_topics([NewTopic(TOPIC, 1)])
        yield proc
    finally:
        proc.stop()


def test_version_2_requests_and_late_ones_fenced(broker):
    assert _features(broker.port) == {"transaction.version": 2}
    tid = "raw-tv2"
    with RawConnection(broker.port) as conn:
        pid, epoch = _init(conn, tid)

        # An abort before anything was added: allowed, and it bumps the epoch too.
        assert _end(conn, tid, pid, epoch, False) == (ErrorCode.NONE, (pid, epoch + 1))
        epoch += 1

        # Transaction 1: the partition and the group join with their first request.
        assert _produce(conn, tid, pid, epoch, 0, b"one") == ErrorCode.NONE
        offsets = conn.request(ApiKey.TXN_OFFSET_COMMIT, 5, {
            "transactional_id": tid, "group_id": "tv2-group", "producer_id": pid,
            "producer_epoch": epoch, "generation_id": -1, "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{
                "partition_index": 0, "committed_offset": 7, "committed_metadata": None}]}],
        })
        assert offsets.topics[0].partitions[0].error_code == ErrorCode.NONE
        assert _end(conn, tid, pid, epoch, True) == (ErrorCode.NONE, (pid, epoch + 1))
        # The answer was lost and the client retries: the same answer, nothing else happens.
        assert _end(conn, tid, pid, epoch, True) == (ErrorCode.NONE, (pid, epoch + 1))
        old, epoch = epoch, epoch + 1

        # Transaction 2 starts at the new epoch (sequences start again at 0).
        assert _produce(conn, tid, pid, epoch, 0, b"two") == ErrorCode.NONE
        # Late requests of transaction 1 cannot touch it: the delayed-EndTxn fault of KAFKA-17754.
        assert _produce(conn, tid, pid, old, 1, b"late") == ErrorCode.INVALID_PRODUCER_EPOCH
        code, _ = _end(conn, tid, pid, old, True)
        assert code == ErrorCode.PRODUCER_FENCED
        assert _end(conn, tid, pid, epoch, False) == (ErrorCode.NONE, (pid, epoch + 1))

    assert _read_committed(broker.bootstrap) == [b"one"]
    with Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tv2-group"}) as consumer:
        assert consumer.committed([(TOPIC, 0)])[(TOPIC, 0)].offset == 7


def test_our_client_uses_version_2_and_version_1_when_configured(tmp_path):
    for level in (2, 1):
        config = tmp_path / f"tv{level}.properties"
        config.write_text(f"transaction.version={level}\n")
        proc = BrokerProcess(tmp_path / f"data{level}", "--config", str(config)).start()
        try:
            assert _features(proc.port) == {"transaction.version": level}
            conf = {"bootstrap.servers": proc.bootstrap}
            with Admin(conf) as admin:
                admin.create_topics([NewTopic(TOPIC, 1)])
            with Producer({**conf, "transactional.id": f"ours-{level}"}) as producer:
                producer.init_transactions()
                for i in range(3):
                    producer.begin_transaction()
                    producer.send(TOPIC, b"v%d" % i, partition=0)
                    producer.commit_transaction()
            with Admin(conf) as admin:
                [state] = admin.describe_transactions([f"ours-{level}"])
            # Version 2 bumps the epoch at each of the 3 commits; version 1 keeps it.
            assert state.producer_epoch == (3 if level == 2 else 0)
            assert _read_committed(proc.bootstrap) == [b"v0", b"v1", b"v2"]
        finally:
            proc.stop()


def test_a_commit_that_overtook_its_batch_is_retried_and_commits_it(broker):
    """The order of the bench's failure (issue 37): Kafka 4.4's Java client sent the EndTxn(commit)
    of a transaction before that transaction's only Produce (a race in its Sender thread under
    load), right after the previous commit. The answer was INVALID_TXN_STATE, fatal for that
    client; Kafka answers CONCURRENT_TRANSACTIONS there as a rule (its previous transaction's
    markers are still being written), and so does this broker now: the client sends the batch,
    then the EndTxn again, and every transaction is committed."""
    tid = "raw-ahead"
    with RawConnection(broker.port) as conn:
        pid, epoch = _init(conn, tid)
        for value in (b"first", b"second", b"third"):
            if value != b"first":
                # The next transaction's commit arrives first (twice), then its batch.
                for _ in range(2):
                    assert _end(conn, tid, pid, epoch, True)[0] == \
                        ErrorCode.CONCURRENT_TRANSACTIONS
            assert _produce(conn, tid, pid, epoch, 0, value) == ErrorCode.NONE
            assert _end(conn, tid, pid, epoch, True) == (ErrorCode.NONE, (pid, epoch + 1))
            epoch += 1
    assert _read_committed(broker.bootstrap) == [b"first", b"second", b"third"]
