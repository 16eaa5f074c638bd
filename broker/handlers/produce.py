"""Produce v3: validate and append each partition's batches, answer after fsync for acks=all.

The request is decoded without copying the records: each partition's records are a writable view
into the request frame, whose baseOffset fields the log patches in place before writing them.
"""

from __future__ import annotations

from broker.context import Broker
from broker.dispatcher import NO_RESPONSE, Deferred, handles
from broker.topics import INTERNAL_TOPICS
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.produce import (
    decode_produce_request_v3_untrusted,
    encode_produce_response_v3,
)

VALID_ACKS = (-1, 0, 1)


@handles(ApiKey.PRODUCE, 3, raw=True)
def produce(broker: Broker, header, frame: bytearray, offset: int):
    request = decode_produce_request_v3_untrusted(frame, offset)
    now = broker.clock.now_ms()
    transactions = broker.transactions
    flushes = []
    responses = []
    for topic in request.topics:
        partition_responses: list[tuple[int, ErrorCode, int, int]] = []
        for part in topic.partitions:
            error, base_offset, log_append_time = ErrorCode.NONE, -1, -1
            try:
                if request.acks not in VALID_ACKS:
                    raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS)
                if part.records is None or len(part.records) == 0:
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "no records")
                if topic.name in INTERNAL_TOPICS:
                    # Only the coordinators write there (Kafka refuses it the same way).
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "internal topic")
                partition = broker.partition(topic.name, part.index)
                if transactions.needs_verification(part.records, request.transactional_id):
                    # KIP-890 part 1: only partitions of the producer's ongoing transaction.
                    transactions.verify_produce(partition, part.records, request.transactional_id)
                result, flushed = broker.append_untrusted(partition, part.records, now)
                base_offset = result.base_offset
                log_append_time = result.log_append_time
                if flushed is not None:
                    flushes.append((flushed, partition, result.last_offset,
                                    partition_responses, len(partition_responses)))
            except KafkaError as exc:
                error = exc.code
            partition_responses.append((part.index, error, base_offset, log_append_time))
        responses.append((topic.name, partition_responses))
    if request.acks == 0:
        return NO_RESPONSE
    if request.acks == -1 and flushes:

        async def durable() -> bytes:
            for event, partition, last_offset, answers, i in flushes:
                await event.wait()
                if partition.high_watermark <= last_offset:
                    # The fsync failed (disk full, I/O error): not acknowledged.
                    answers[i] = (answers[i][0], ErrorCode.KAFKA_STORAGE_ERROR, -1, -1)
            return encode_produce_response_v3(responses)

        return Deferred(durable)
    return encode_produce_response_v3(responses)
