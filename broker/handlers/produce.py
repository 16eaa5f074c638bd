"""Produce (v3+, RecordBatch v2): validate and append each partition's batches, answer after fsync for acks=all
(a transactional batch: once appended, see ``broker/storage/store.py``).

The request is decoded without copying the records: each partition's records are a writable view
into the request frame, whose baseOffset fields the log patches in place before writing them.
"""

from __future__ import annotations

from functools import partial

from broker.handlers.authz import allowed
from broker.handlers.context import Broker
from broker.handlers.marks import handles
from broker.log.topics import INTERNAL_TOPICS
from broker.reply import NO_RESPONSE, Deferred
from broker.security.acl import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError

VALID_ACKS = (-1, 0, 1)
# The log's refusals answered without the partition's log start offset; every other refusal of
# the log (sequence, epoch, invalid record) carries it, as Kafka's ReplicaManager.appendToLocalLog
# answers (LogAppendInfo.UNKNOWN_LOG_APPEND_INFO for these, unknownLogAppendInfoWithLogStartOffset
# for the rest).
NO_LOG_START = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.KAFKA_STORAGE_ERROR,
})
MAGIC_OFFSET = 16  # of a record batch's magic byte
TV2_PRODUCE = 12  # the first version of transaction version 2 (KIP-890 part 2)


@handles(ApiKey.PRODUCE)
def produce(broker: Broker, header, request):
    version = header.api_version
    transactional_id, acks, topics = request.transactional_id, request.acks, request.topic_data
    now = broker.clock.now_ms()
    transactions = broker.transactions
    commits = []
    responses = []
    # Authorization (the seeds' checks, as Kafka makes them): Write on the transactional id for
    # a transactional produce (else every partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    # and Write on each topic. Nothing of a refused partition is written.
    txn_refused = transactional_id is not None and not allowed(
        broker, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
    if transactional_id is None and any(
            p.records is not None and transactions.needs_verification(p.records, None)
            for topic in topics for p in topic.partition_data):
        # Transactional batches without a transactional id: Kafka's handleProduceRequest refuses
        # the whole request with TRANSACTIONAL_ID_AUTHORIZATION_FAILED (no id to authorize).
        txn_refused = True
    for topic in topics:
        name = topic.name
        partition_responses: list[dict] = []
        refused = (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if txn_refused
                   else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                   if not allowed(broker, Operation.WRITE, ResourceType.TOPIC, name)
                   else None)
        for p in topic.partition_data:
            index, records = p.index, p.records
            error, base_offset, log_append_time, log_start = ErrorCode.NONE, -1, -1, -1
            appending = None
            try:
                if refused is not None:
                    raise KafkaError(refused)
                if acks not in VALID_ACKS:
                    raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS)
                if records is None or len(records) == 0:
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "no records")
                if name in INTERNAL_TOPICS:
                    # Only the coordinators write there (Kafka refuses it the same way).
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "internal topic")
                partition = broker.partition(name, index)
                if len(records) > MAGIC_OFFSET and records[MAGIC_OFFSET] in (0, 1):
                    # Kafka's ProduceRequest.validateRecords, before the log: v3+ carries
                    # RecordBatch v2 only (InvalidRecordException, answered without offsets).
                    raise KafkaError(ErrorCode.INVALID_RECORD,
                                     f"Produce requests with version {version} are only allowed"
                                     " to contain record batches with magic version 2")
                if transactions.needs_verification(records, transactional_id):
                    # KIP-890 part 1: only partitions of the producer's ongoing transaction;
                    # part 2 (v12, transaction version 2): the partition joins it here.
                    transactions.verify_produce(partition, records, transactional_id,
                                                now, add_partition=version >= TV2_PRODUCE)
                appending = partition
                # A transactional batch is answered once appended: durable by its transaction's
                # PrepareCommit (broker/storage/store.py).
                result, commit = broker.storage.append(partition, records, now, acks,
                                                       transactions.is_transactional(records))
                base_offset = result.base_offset
                log_append_time = result.log_append_time
                log_start = partition.log_start_offset
                if commit is not None:
                    commits.append((commit, partition_responses, len(partition_responses)))
            except KafkaError as exc:
                error = exc.code
                if appending is not None and error not in NO_LOG_START:
                    log_start = appending.log_start_offset
            partition_responses.append({
                "index": index, "error_code": error, "base_offset": base_offset,
                "log_append_time_ms": log_append_time, "log_start_offset": log_start,
            })
        responses.append({"name": name, "partition_responses": partition_responses})
    if acks == 0:
        return NO_RESPONSE
    if commits:
        return Deferred(partial(_durable_answer, commits, responses))
    return {"responses": responses, "throttle_time_ms": 0}


async def _durable_answer(commits: list, responses: list) -> dict:
    """The answer once the acks=all appends are durable."""
    for commit, answers, i in commits:
        if not await commit.wait():
            # The fsync failed (disk full, I/O error): not acknowledged.
            answers[i] = {"index": answers[i]["index"],
                          "error_code": ErrorCode.KAFKA_STORAGE_ERROR, "base_offset": -1,
                          "log_append_time_ms": -1, "log_start_offset": -1}
    return {"responses": responses, "throttle_time_ms": 0}
