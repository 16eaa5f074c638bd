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
from broker.log.partition import InflateLater, Partition
from broker.log.topics import INTERNAL_TOPICS
from broker.reply import NO_RESPONSE, Deferred
from broker.security.acl import Operation, ResourceType
from broker.storage import Commit
from broker.storage.ordered_appends import INLINE_INFLATE_BYTES
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
    # Appends that wait for a worker thread (broker/storage/ordered_appends.py): a partition's
    # compressed records inflating beyond INLINE_INFLATE_BYTES, and every later append to a
    # partition that has such an append waiting (arrival order).
    appends = broker.appends
    waiting = appends.queues
    inline = INLINE_INFLATE_BYTES if appends.running else None
    later: list = []
    # Authorization (the seeds' checks, as Kafka makes them): Write on the transactional id for
    # a transactional produce (else every partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    # and Write on each topic. Nothing of a refused partition is written.
    txn_refused = transactional_id is not None and not allowed(
        broker, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
    is_transactional = transactions.is_transactional  # of a partition's batches
    if transactional_id is None and any(
            p.records is not None and is_transactional(p.records)
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
            check = None  # _NOTHING: checked on arrival (behind a waiting append)
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
                if waiting and partition in waiting:
                    # Earlier appends to this partition wait for a worker thread: this one
                    # goes behind them, checked now if that is cheap.
                    check = _check_now(partition, records, inline)
                    raise InflateLater
                transactional = is_transactional(records)
                if transactions.needs_verification(transactional, transactional_id):
                    # KIP-890 part 1: only partitions of the producer's ongoing transaction;
                    # part 2 (v12, transaction version 2): the partition joins it here.
                    transactions.verify_produce(partition, records, transactional_id,
                                                now, add_partition=version >= TV2_PRODUCE)
                appending = partition
                # A transactional batch is answered once appended: durable by its transaction's
                # PrepareCommit (broker/storage/store.py).
                result, commit = broker.storage.append(partition, records, now, acks,
                                                       transactional, inline)
                base_offset = result.base_offset
                log_append_time = result.log_append_time
                log_start = partition.log_start_offset
                if commit is not None:
                    commits.append((commit, partition_responses, len(partition_responses)))
            except InflateLater:
                # Nothing appended: checked in a worker thread (unless it just was), then
                # appended in this partition's order.
                entry = appends.submit(
                    partition,
                    None if check is _NOTHING else partial(partition.check_untrusted, records),
                    partial(_append_checked, broker, partition, name, index, records,
                            transactional_id, acks, version))
                later.append((entry, partition, partition_responses, len(partition_responses)))
                error = ErrorCode.REQUEST_TIMED_OUT  # replaced once the append is done
            except KafkaError as exc:
                error = exc.code
                if appending is not None and error not in NO_LOG_START:
                    log_start = appending.log_start_offset
            partition_responses.append({
                "index": index, "error_code": error, "base_offset": base_offset,
                "log_append_time_ms": log_append_time, "log_start_offset": log_start,
            })
        responses.append({"name": name, "partition_responses": partition_responses})
    if later:
        entries = [entry for entry, _, _, _ in later]
        return Deferred(partial(_answer_later, later, commits, responses, acks),
                        hold=partial(appends.wait, entries))
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


_NOTHING = object()  # ``check``: the records were checked on arrival


def _check_now(partition: Partition, records, inline: int | None) -> object:
    """``_NOTHING`` once the records are checked here (what the event loop may inflate), None
    if they need a worker thread; KafkaError if they are refused."""
    try:
        partition.check_untrusted(records, inline)
    except InflateLater:
        return None
    return _NOTHING


def _append_checked(broker: Broker, partition: Partition, name: str, index: int, records,
                    transactional_id: str | None, acks: int,
                    version: int) -> tuple[dict, Commit | None]:
    """An append whose records were checked (in a worker thread, or on arrival behind one), made
    on the event loop in its partition's arrival order: the partition answer and the commit to
    wait for. What was verified on arrival is verified again now (the transaction may have
    ended meanwhile), as the producer state's sequence checks are made now."""
    error, base_offset, log_append_time, log_start = ErrorCode.NONE, -1, -1, -1
    commit = None
    now = broker.clock.now_ms()
    transactions = broker.transactions
    appending = None
    try:
        if broker.partition(name, index) is not partition:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "the partition was deleted")
        transactional = transactions.is_transactional(records)
        if transactions.needs_verification(transactional, transactional_id):
            transactions.verify_produce(partition, records, transactional_id, now,
                                        add_partition=version >= TV2_PRODUCE)
        appending = partition
        result, commit = broker.storage.append(partition, records, now, acks, transactional,
                                               records_checked=True)
        base_offset = result.base_offset
        log_append_time = result.log_append_time
        log_start = partition.log_start_offset
    except KafkaError as exc:
        error = exc.code
        if appending is not None and error not in NO_LOG_START:
            log_start = appending.log_start_offset
    return {"index": index, "error_code": error, "base_offset": base_offset,
            "log_append_time_ms": log_append_time, "log_start_offset": log_start}, commit


async def _answer_later(later: list, commits: list, responses: list, acks: int):
    """The answer once the appends that waited for a worker thread are done (and durable, for
    acks=all); nothing for acks=0."""
    for entry, partition, answers, i in later:
        await entry.done.wait()
        error = entry.error
        if error is None:
            answers[i], commit = entry.result
            if commit is not None:
                commits.append((commit, answers, i))
        elif isinstance(error, KafkaError):  # the worker thread's check refused the records
            answers[i] = {"index": answers[i]["index"], "error_code": error.code,
                          "base_offset": -1, "log_append_time_ms": -1,
                          "log_start_offset": -1 if error.code in NO_LOG_START
                          else partition.log_start_offset}
        else:
            raise error  # a bug: costs this connection (the dispatcher's guard logs it)
    if acks == 0:
        return NO_RESPONSE
    if commits:
        return await _durable_answer(commits, responses)
    return {"responses": responses, "throttle_time_ms": 0}
