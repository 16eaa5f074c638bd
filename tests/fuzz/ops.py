"""Valid Kafka requests over a raw connection, one function per step a client takes: what the
internal-topic tests (``tests/integration/test_internal_topics.py``) and the hostile-order
fuzzer (``tests/fuzz/orders.py``) send. Each returns the codes the broker answered; none asserts
success except ``commit_transaction`` and ``read_committed`` (the invariants' own clients).
"""

from __future__ import annotations

import time

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import decode_batches_untrusted, encode_batch
from tests.raw_client import RawConnection
from tests.secured import sasl_plain

TopicPartition = tuple[str, int]


def connect(port: int, user: str | None = None, password: str | None = None,
            timeout: float = 10.0) -> RawConnection:
    """A connection, authenticated with SASL PLAIN when ``user`` is given."""
    conn = RawConnection(port, timeout=timeout)
    if user is not None:
        sasl_plain(conn, user, password or "")
    return conn


def create_topic(conn: RawConnection, name: str, partitions: int = 1) -> int:
    response = conn.request(ApiKey.CREATE_TOPICS, 2, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout_ms": 5000, "validate_only": False})
    return response.topics[0].error_code


def init_producer_id(conn: RawConnection, transactional_id: str | None, timeout_ms: int = 60_000,
                     producer_id: int = -1, epoch: int = -1, version: int = 3
                     ) -> tuple[int, int, int]:
    """``(error_code, producer_id, producer_epoch)``."""
    r = conn.request(ApiKey.INIT_PRODUCER_ID, version, {
        "transactional_id": transactional_id, "transaction_timeout_ms": timeout_ms,
        "producer_id": producer_id, "producer_epoch": epoch})
    return r.error_code, r.producer_id, r.producer_epoch


def add_partitions(conn: RawConnection, transactional_id: str, producer_id: int, epoch: int,
                   partitions: list[TopicPartition], version: int = 3) -> dict[TopicPartition, int]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    r = conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, {
        "transactional_id": transactional_id, "producer_id": producer_id,
        "producer_epoch": epoch,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return {(t.name, p.partition_index): p.error_code for t in r.results for p in t.results}


def add_offsets(conn: RawConnection, transactional_id: str, producer_id: int, epoch: int,
                group: str) -> int:
    return conn.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": transactional_id, "producer_id": producer_id,
        "producer_epoch": epoch, "group_id": group}).error_code


def end_txn(conn: RawConnection, transactional_id: str, producer_id: int, epoch: int,
            commit: bool, version: int = 3) -> tuple[int, int, int]:
    """``(error_code, producer_id, epoch)``: v5 answers the pair to go on with."""
    r = conn.request(ApiKey.END_TXN, version, {
        "transactional_id": transactional_id, "producer_id": producer_id,
        "producer_epoch": epoch, "committed": commit})
    if version >= 5 and r.error_code == 0:
        return r.error_code, r.producer_id, r.producer_epoch
    return r.error_code, producer_id, epoch


def batch(values: list[bytes], producer_id: int = -1, epoch: int = -1, sequence: int = -1,
          transactional: bool = False) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([(None, v, (), now) for v in values], producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence, transactional=transactional)


def produce(conn: RawConnection, topic: str, partition: int, records: bytes,
            transactional_id: str | None = None, version: int = 9, acks: int = -1) -> int:
    r = conn.request(ApiKey.PRODUCE, version, {
        "transactional_id": transactional_id, "acks": acks, "timeout_ms": 5000,
        "topic_data": [{"name": topic,
                        "partition_data": [{"index": partition, "records": records}]}]})
    return r.responses[0].partition_responses[0].error_code


def txn_offset_commit(conn: RawConnection, transactional_id: str, group: str, producer_id: int,
                      epoch: int, offsets: dict[TopicPartition, int], version: int = 3
                      ) -> dict[TopicPartition, int]:
    by_topic: dict[str, list[dict]] = {}
    for (topic, index), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": index, "committed_offset": offset, "committed_metadata": ""})
    r = conn.request(ApiKey.TXN_OFFSET_COMMIT, version, {
        "transactional_id": transactional_id, "group_id": group, "producer_id": producer_id,
        "producer_epoch": epoch, "generation_id": -1, "member_id": "",
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def write_txn_markers(conn: RawConnection, producer_id: int, epoch: int, commit: bool,
                      partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    r = conn.request(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": producer_id, "producer_epoch": epoch, "transaction_result": commit,
        "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
        "coordinator_epoch": 0}]})
    return {(t.name, p.partition_index): p.error_code
            for m in r.markers for t in m.topics for p in t.partitions}


def offset_commit(conn: RawConnection, group: str, offsets: dict[TopicPartition, int]
                  ) -> dict[TopicPartition, int]:
    by_topic: dict[str, list[dict]] = {}
    for (topic, index), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": index, "committed_offset": offset, "committed_metadata": "m"})
    r = conn.request(ApiKey.OFFSET_COMMIT, 2, {
        "group_id": group, "generation_id": -1, "member_id": "", "retention_time_ms": -1,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def offset_fetch(conn: RawConnection, group: str, partitions: list[TopicPartition]
                 ) -> dict[TopicPartition, tuple[int, int]]:
    """``tp -> (error_code, committed offset)``."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    r = conn.request(ApiKey.OFFSET_FETCH, 5, {
        "group_id": group,
        "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]})
    return {(t.name, p.partition_index): (p.error_code, p.committed_offset)
            for t in r.topics for p in t.partitions}


def alter_config(conn: RawConnection, topic: str, ops: list[tuple[str, int, str | None]]
                 ) -> int:
    """IncrementalAlterConfigs of one topic: ``(key, op, value)``, op 0 SET, 1 DELETE."""
    r = conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 2, "resource_name": topic,
        "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}],
        "validate_only": False})
    return r.responses[0].error_code


def replace_config(conn: RawConnection, topic: str, configs: dict[str, str]) -> int:
    """AlterConfigs of one topic (the overrides become exactly ``configs``)."""
    r = conn.request(ApiKey.ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 2, "resource_name": topic,
        "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "validate_only": False})
    return r.responses[0].error_code


def delete_records(conn: RawConnection, topic: str, partition: int, offset: int) -> int:
    r = conn.request(ApiKey.DELETE_RECORDS, 1, {"topics": [{
        "name": topic, "partitions": [{"partition_index": partition, "offset": offset}]}],
        "timeout_ms": 5000})
    return r.topics[0].partitions[0].error_code


def create_partitions(conn: RawConnection, topic: str, count: int) -> int:
    r = conn.request(ApiKey.CREATE_PARTITIONS, 1, {
        "topics": [{"name": topic, "count": count, "assignments": None}],
        "timeout_ms": 5000, "validate_only": False})
    return r.results[0].error_code


def delete_topic(conn: RawConnection, topic: str) -> int:
    r = conn.request(ApiKey.DELETE_TOPICS, 1, {"topic_names": [topic], "timeout_ms": 5000})
    return r.responses[0].error_code


def commit_transaction(conn: RawConnection, transactional_id: str, topic: str,
                       values: list[bytes], partition: int = 0) -> None:
    """One whole transaction that must succeed (retrying CONCURRENT_TRANSACTIONS and
    COORDINATOR_LOAD_IN_PROGRESS a few seconds)."""
    deadline = time.monotonic() + 15

    def retried(step):
        while True:
            code = step()
            if code not in (ErrorCode.CONCURRENT_TRANSACTIONS,
                            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) or time.monotonic() > deadline:
                return code
            time.sleep(0.05)

    got: list = []
    code = retried(lambda: got.append(init_producer_id(conn, transactional_id)) or got[-1][0])
    assert code == ErrorCode.NONE, f"InitProducerId({transactional_id}): {ErrorCode(code).name}"
    _, pid, epoch = got[-1]
    codes = add_partitions(conn, transactional_id, pid, epoch, [(topic, partition)])
    assert set(codes.values()) == {ErrorCode.NONE}, codes
    code = produce(conn, topic, partition, batch(values, pid, epoch, 0, True), transactional_id)
    assert code == ErrorCode.NONE, f"Produce: {ErrorCode(code).name}"
    code = retried(lambda: end_txn(conn, transactional_id, pid, epoch, True)[0])
    assert code == ErrorCode.NONE, f"EndTxn: {ErrorCode(code).name}"


def read_committed(conn: RawConnection, topic: str, partition: int = 0) -> list[bytes]:
    """Every committed value of the partition (read_committed, aborted ones dropped); fails on
    a partition error."""
    values: list[bytes] = []
    offset = 0
    while True:
        r = conn.request(ApiKey.FETCH, 11, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 1, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
            }]}], "forgotten_topics_data": [], "rack_id": ""})
        p = r.responses[0].partitions[0]
        assert p.error_code == ErrorCode.NONE, ErrorCode(p.error_code).name
        aborted = {a.producer_id for a in (p.aborted_transactions or [])}
        records = bytes(p.records or b"")
        if not records:
            return values
        for header, recs in decode_batches_untrusted(records):
            offset = header.base_offset + header.last_offset_delta + 1
            if header.is_control or (header.is_transactional and header.producer_id in aborted):
                continue
            values.extend(r.value or b"" for r in recs)
        if offset >= p.last_stable_offset:
            return values


# Kafka's ACL enums (the values CreateAcls carries).
RESOURCE = {"topic": 2, "group": 3, "cluster": 4, "transactional_id": 5}
OPERATION = {"all": 2, "read": 3, "write": 4, "describe": 8, "cluster_action": 9}


def allow(conn: RawConnection, principal: str, resource: str, name: str, operation: str) -> None:
    """An ALLOW ACL (literal pattern, any host); asserts it was created."""
    r = conn.request(ApiKey.CREATE_ACLS, 1, {"creations": [{
        "resource_type": RESOURCE[resource], "resource_name": name, "resource_pattern_type": 3,
        "principal": principal, "host": "*", "operation": OPERATION[operation],
        "permission_type": 3}]})
    assert r.results[0].error_code == ErrorCode.NONE, r.results[0]
