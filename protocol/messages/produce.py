"""Produce v3 (api key 0): append record batches to partitions.

Request:  transactional_id NULLABLE_STRING, acks INT16, timeout_ms INT32,
          topic_data [name STRING, partition_data [index INT32, records NULLABLE_BYTES]]
Response: responses [name STRING,
                     partition_responses [index INT32, error_code INT16, base_offset INT64,
                                          log_append_time_ms INT64]],
          throttle_time_ms INT32

``records`` holds RecordBatch v2 bytes (``protocol.records``). acks=0 requests get no response.

The construct Structs serve the client (it encodes requests and decodes responses with them). The
broker's hot path uses the two hand-written functions below instead (DESIGN.md section 9: protocol
work per request decides small-batch throughput):

- ``decode_produce_request_v3_untrusted`` walks the frame with ``struct.unpack_from`` and returns
  each partition's records as a writable ``memoryview`` into the frame, so the log can patch
  baseOffset in place and write the view to disk without a copy;
- ``encode_produce_response_v3`` packs the (small) response with ``struct``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Literal, NamedTuple, overload

from construct import Struct

from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError
from protocol.messages._registry import register
from protocol.primitives import Array, Int16, Int32, Int64, NullableBytes, NullableString, String

ProduceRequestV3 = Struct(
    "transactional_id" / NullableString,
    "acks" / Int16,
    "timeout_ms" / Int32,
    "topic_data" / Array(
        Struct(
            "name" / String,
            "partition_data" / Array(Struct("index" / Int32, "records" / NullableBytes)),
        )
    ),
)

ProduceResponseV3 = Struct(
    "responses" / Array(
        Struct(
            "name" / String,
            "partition_responses" / Array(
                Struct(
                    "index" / Int32,
                    "error_code" / Int16,
                    "base_offset" / Int64,
                    "log_append_time_ms" / Int64,
                )
            ),
        )
    ),
    "throttle_time_ms" / Int32,
)

PRODUCE_V3 = register(ApiKey.PRODUCE, 3, ProduceRequestV3, ProduceResponseV3)


# -- broker fast path -------------------------------------------------------------------------------


class ProducePartition(NamedTuple):
    index: int  # type: ignore[assignment]  # Kafka's field name; shadows tuple.index
    # A view into the request frame (writable when the frame is a bytearray); None for null.
    records: memoryview | None


class ProduceTopic(NamedTuple):
    name: str
    partitions: list[ProducePartition]


class ProduceRequest(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[ProduceTopic]


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT_COUNT = struct.Struct(">hii")  # acks, timeout_ms, topic_data count
_INDEX_SIZE = struct.Struct(">ii")  # partition index, records length


@overload
def _string_at(frame, pos: int, end: int, nullable: Literal[False]) -> tuple[str, int]: ...
@overload
def _string_at(frame, pos: int, end: int, nullable: bool) -> tuple[str | None, int]: ...
def _string_at(frame, pos: int, end: int, nullable: bool) -> tuple[str | None, int]:
    (n,) = _I16.unpack_from(frame, pos)
    pos += 2
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise CorruptFrameError(f"invalid string length {n}")
    if pos + n > end:
        raise CorruptFrameError("string runs past the end of the frame")
    return str(frame[pos : pos + n], "utf-8"), pos + n


def decode_produce_request_v3_untrusted(frame: bytearray, offset: int) -> ProduceRequest:
    """Decode a Produce v3 request body starting at ``offset`` of ``frame``, without copying records.

    Each partition's ``records`` is a ``memoryview`` slice of ``frame`` (None for a null field),
    writable when ``frame`` is a bytearray. Bytes after the body are ignored, as Kafka does.
    Accepts exactly what ``ProduceRequestV3`` accepts; raises only ``CorruptFrameError``.
    """
    end = len(frame)
    view = memoryview(frame)
    try:
        transactional_id, pos = _string_at(frame, offset, end, True)
        acks, timeout_ms, topic_count = _ACKS_TIMEOUT_COUNT.unpack_from(frame, pos)
        pos += 10
        if topic_count < 0:
            raise CorruptFrameError(f"invalid array length {topic_count}")
        topics = []
        for _ in range(topic_count):
            name, pos = _string_at(frame, pos, end, False)
            (partition_count,) = _I32.unpack_from(frame, pos)
            pos += 4
            if partition_count < 0:
                raise CorruptFrameError(f"invalid array length {partition_count}")
            partitions = []
            for _ in range(partition_count):
                index, size = _INDEX_SIZE.unpack_from(frame, pos)
                pos += 8
                if size < 0:
                    if size != -1:
                        raise CorruptFrameError(f"invalid bytes length {size}")
                    records = None
                else:
                    if pos + size > end:
                        raise CorruptFrameError("records run past the end of the frame")
                    records = view[pos : pos + size]
                    pos += size
                partitions.append(ProducePartition(index, records))
            topics.append(ProduceTopic(name, partitions))
    except struct.error as exc:
        raise CorruptFrameError(f"truncated Produce request: {exc}") from None
    except UnicodeDecodeError as exc:
        raise CorruptFrameError(f"string is not UTF-8: {exc}") from None
    return ProduceRequest(transactional_id, acks, timeout_ms, topics)


_PARTITION_RESPONSE = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
# The common case (librdkafka: one topic, one partition per request) in one pack call.
_SINGLE_HEAD = struct.Struct(">ih")  # topic count 1, name length
_SINGLE_TAIL = struct.Struct(">iihqqi")  # partition count 1, the partition, throttle_time_ms


def encode_produce_response_v3(
    responses: Sequence[tuple[str, Sequence[tuple[int, int, int, int]]]],
    throttle_time_ms: int = 0,
) -> bytes:
    """Encode a Produce v3 response body; the same bytes as ``ProduceResponseV3.build``.

    ``responses`` is ``[(topic, [(index, error_code, base_offset, log_append_time_ms), ...])]``.
    """
    if len(responses) == 1 and len(responses[0][1]) == 1:
        name, ((index, error_code, base_offset, log_append_time_ms),) = responses[0]
        encoded = name.encode("utf-8")
        return b"".join(
            (
                _SINGLE_HEAD.pack(1, len(encoded)),
                encoded,
                _SINGLE_TAIL.pack(
                    1, index, error_code, base_offset, log_append_time_ms, throttle_time_ms
                ),
            )
        )
    parts = [_I32.pack(len(responses))]
    for name, partitions in responses:
        encoded = name.encode("utf-8")
        parts.append(_I16.pack(len(encoded)))
        parts.append(encoded)
        parts.append(_I32.pack(len(partitions)))
        parts.extend(_PARTITION_RESPONSE.pack(*p) for p in partitions)
    parts.append(_I32.pack(throttle_time_ms))
    return b"".join(parts)
