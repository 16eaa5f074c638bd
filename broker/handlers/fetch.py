"""Fetch v4+ (bounded long poll, read_committed bound) and ListOffsets.

On a plaintext connection the records of a partition are a ``FileSlice`` of the segment file
(sent with sendfile, broker/log/file_slice.py), elsewhere the bytes read from it; the answer
is the same bytes either way.

Fetch sessions (KIP-227, v7+): the broker creates none. A full fetch (session_id 0) is answered
with session_id 0, which tells the client that no session exists, so it keeps sending full
fetches; a session id the broker never gave out gets FETCH_SESSION_ID_NOT_FOUND.
"""

from __future__ import annotations

import trio

from broker.handlers.authz import allowed
from broker.handlers.context import Broker
from broker.handlers.marks import handles
from broker.log.file_slice import FileSlice, read_range
from broker.reply import Deferred
from broker.security.acl import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import encode_response, encode_response_parts

READ_COMMITTED = 1
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # ListOffsets v7+ (KIP-734)
EARLIEST_LOCAL_TIMESTAMP = -4  # v8+ (KIP-405)
LATEST_TIERED_TIMESTAMP = -5  # v9+ (KIP-1005)
# The first ListOffsets version of each special timestamp (-6, EARLIEST_PENDING_UPLOAD, KIP-1023,
# is v11, which is not served). Kafka answers UNSUPPORTED_VERSION for one asked below its version,
# and for a negative timestamp that is none of them.
SPECIAL_TIMESTAMP_VERSION = {
    LATEST_TIMESTAMP: 0, EARLIEST_TIMESTAMP: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
}
# Cap on a client's max_wait_ms, so that a bogus value cannot park a connection for days.
MAX_WAIT_CAP_MS = 60_000


def _read_partitions(broker: Broker, request, refused: frozenset[str]) -> tuple[list, int]:
    """One pass over the requested partitions: ``(response topics, bytes of records)``; the
    topics in ``refused`` (no Read) answer TOPIC_AUTHORIZATION_FAILED. Records are never null
    (an empty field instead: librdkafka fails to parse a null one, docs/protocol.md)."""
    committed = request.isolation_level == READ_COMMITTED
    # The broker's fetch.max.bytes bounds every response, whatever the client asks for (plus at
    # most one batch beyond it, which a consumer needs to make progress).
    cap = broker.config.fetch_max_bytes
    remaining = min(request.max_bytes, cap) if request.max_bytes > 0 else cap
    total = 0
    topics = []
    for topic in request.topics:
        partitions = []
        for part in topic.partitions:
            hw = lso = log_start = -1
            records: bytes | FileSlice = b""
            aborted = None
            error = ErrorCode.NONE
            try:
                if topic.topic in refused:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                partition = broker.partition(topic.topic, part.partition)
                hw, lso = partition.high_watermark, partition.last_stable_offset
                log_start = partition.log_start_offset
                bound = lso if committed else hw
                if remaining > 0:
                    limit = min(part.partition_max_bytes, remaining)
                    found = partition.locate(part.fetch_offset, limit, bound)
                    if found is not None:
                        try:
                            records = read_range(*found)
                        except OSError as exc:
                            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc
                if committed:
                    # Aborted transactions overlapping what is returned; none without records.
                    aborted = [{"producer_id": producer_id, "first_offset": first_offset}
                               for producer_id, first_offset
                               in partition.aborted_transactions(part.fetch_offset, bound)
                               ] if records else []
            except KafkaError as exc:
                # Kafka answers an erring partition without its offsets (ReplicaManager's
                # LogReadResult of an exception: high watermark, LSO and log start -1).
                error = exc.code
                hw = lso = log_start = -1
                # A partition refused before any read (unknown, not authorized) is Kafka's
                # FetchResponse.partitionResponse(error), with an empty aborted list; a read
                # that failed (OFFSET_OUT_OF_RANGE) has none (null).
                if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             ErrorCode.TOPIC_AUTHORIZATION_FAILED):
                    aborted = []
            remaining -= len(records)
            total += len(records)
            partitions.append({
                "partition_index": part.partition, "error_code": error, "high_watermark": hw,
                "last_stable_offset": lso, "log_start_offset": log_start,
                "aborted_transactions": aborted, "records": records,
            })
        topics.append({"topic": topic.topic, "partitions": partitions})
    return topics, total


@handles(ApiKey.FETCH)
def fetch(broker: Broker, header, request):
    version = header.api_version
    if request.session_id != 0:
        return encode_response(ApiKey.FETCH, version, {
            "error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0, "responses": [],
        })
    refused = frozenset(t.topic for t in request.topics
                        if not allowed(broker, Operation.READ, ResourceType.TOPIC, t.topic))
    topics, total = _read_partitions(broker, request, refused)
    max_wait_ms = min(request.max_wait_ms, MAX_WAIT_CAP_MS)
    if total >= request.min_bytes or max_wait_ms <= 0 or _has_error(topics):
        # the records as chunks, unread (a FileSlice: sendfile); no session (session_id 0)
        return encode_response_parts(ApiKey.FETCH, version, {"responses": topics})

    async def long_poll():
        nonlocal topics, total
        with trio.move_on_after(max_wait_ms / 1000):
            while total < request.min_bytes:
                await broker.data_arrived.event().wait()
                topics, total = _read_partitions(broker, request, refused)
        if total < request.min_bytes:
            topics, total = _read_partitions(broker, request, refused)
        return encode_response_parts(ApiKey.FETCH, version, {"responses": topics})

    return Deferred(long_poll)


def _has_error(topics) -> bool:
    return any(p["error_code"] != ErrorCode.NONE for t in topics for p in t["partitions"])


@handles(ApiKey.LIST_OFFSETS)
def list_offsets(broker: Broker, header, request) -> dict:
    committed = request.isolation_level == READ_COMMITTED
    version = header.api_version
    # A partition asked twice is answered once, INVALID_REQUEST (Kafka's duplicatePartitions).
    seen: set[tuple[str, int]] = set()
    duplicates = set()
    for topic in request.topics:
        for part in topic.partitions:
            key = (topic.name, part.partition_index)
            if key in seen:
                duplicates.add(key)
            seen.add(key)
    answered: set[tuple[str, int]] = set()
    topics = []
    for topic in request.topics:
        partitions = []
        describable = allowed(broker, Operation.DESCRIBE, ResourceType.TOPIC, topic.name)
        for part in topic.partitions:
            key = (topic.name, part.partition_index)
            if key in answered:
                continue
            answered.add(key)
            error, timestamp, offset = ErrorCode.NONE, -1, -1
            try:
                if key in duplicates:
                    raise KafkaError(ErrorCode.INVALID_REQUEST)
                if not describable:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if part.timestamp < 0 and version < SPECIAL_TIMESTAMP_VERSION.get(
                        part.timestamp, 1 << 15):
                    raise KafkaError(ErrorCode.UNSUPPORTED_VERSION)
                partition = broker.partition(topic.name, part.partition_index)
                visible = partition.last_stable_offset if committed else partition.high_watermark
                if part.timestamp == LATEST_TIMESTAMP:
                    offset = visible
                elif part.timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                    offset = partition.log_start_offset  # no tiered storage: local = all
                elif part.timestamp == LATEST_TIERED_TIMESTAMP:
                    pass  # no tiered storage: -1, as Kafka without remote storage answers
                elif part.timestamp == MAX_TIMESTAMP:
                    # The batch holding the largest timestamp (batch granularity, like the
                    # lookup by time below).
                    largest = max((s.max_timestamp for s in partition.segments if s.size), default=-1)
                    found = partition.offset_for_timestamp(largest) if largest >= 0 else None
                    if found is not None and found[1] < visible:
                        timestamp, offset = found
                else:
                    found = partition.offset_for_timestamp(part.timestamp)
                    if found is not None and found[1] < visible:
                        timestamp, offset = found
            except KafkaError as exc:
                error = exc.code
            partitions.append(
                {
                    "partition_index": part.partition_index,
                    "error_code": error,
                    "timestamp": timestamp,
                    "offset": offset,
                }
            )
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
