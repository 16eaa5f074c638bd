"""Produce (api key 0): append record batches to partitions.

v1 throttle_time_ms; v2 log_append_time_ms; v3 transactional_id and RecordBatch v2 (the first we
serve); v4 (KAFKA_STORAGE_ERROR); v5 log_start_offset; v6-7 (no change); v8 record_errors and
error_message; v9 flexible; v10 current_leader / node_endpoints tagged fields (KIP-951); v11
(no change, KIP-1005); v12 (no change) is transaction version 2 (KIP-890 part 2): the partition
joins the producer's transaction with its first batch. ``records`` holds RecordBatch
v2 bytes (``protocol.records``). acks=0 requests get no response.

The declared codec serves the client (it encodes requests and decodes responses with it). The
broker's hot path uses the two hand-written functions below instead (docs/design.md section 9: protocol
work per request decides small-batch throughput); tests check them against the declared codec:

- ``decode_produce_request_untrusted`` walks the frame with ``struct.unpack_from`` and returns
  each partition's records as a writable ``memoryview`` into the frame, so the log can patch
  baseOffset in place and write the view to disk without a copy;
- ``encode_produce_response`` packs the (small) response with ``struct``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Literal, NamedTuple, overload

from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError
from protocol.messages._declare import F, declare
from protocol.primitives import encode_uvarint
from protocol.trusted import trusted

PRODUCE = declare(
    ApiKey.PRODUCE, valid="0-12", flexible="9+",
    request=[
        F("transactional_id", "string", "3+", nullable="3+", default=None),
        F("acks", "int16"),
        F("timeout_ms", "int32"),
        F("topic_data", "[]", fields=[
            F("name", "string"),
            F("partition_data", "[]", fields=[F("index", "int32"), F("records", "records")]),
        ]),
    ],
    response=[
        F("responses", "[]", fields=[
            F("name", "string"),
            F("partition_responses", "[]", fields=[
                F("index", "int32"),
                F("error_code", "int16"),
                F("base_offset", "int64"),
                F("log_append_time_ms", "int64", "2+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("record_errors", "[]", "8+", fields=[
                    F("batch_index", "int32"),
                    F("batch_index_error_message", "string", nullable="0+", default=None),
                ]),
                F("error_message", "string", "8+", nullable="8+", default=None),
                F("current_leader", "struct", "10+", tag=0, fields=[
                    F("leader_id", "int32", default=-1), F("leader_epoch", "int32", default=-1),
                ]),
            ]),
        ]),
        F("throttle_time_ms", "int32", "1+"),
        F("node_endpoints", "[]", "10+", tag=0, fields=[
            F("node_id", "int32"),
            F("host", "string"),
            F("port", "int32"),
            F("rack", "string", nullable="0+", default=None),
        ]),
    ],
)

FIRST_FLEXIBLE = 9


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


_new_request = trusted(ProduceRequest)
_new_topic = trusted(ProduceTopic)
_new_partition = trusted(ProducePartition)


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
# Builds a NamedTuple without its Python-level __new__ (a frame per element of every Produce).
_ACKS_TIMEOUT_COUNT = struct.Struct(">hii")  # acks, timeout_ms, topic_data count
_ACKS_TIMEOUT = struct.Struct(">hi")
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


def uvarint_at(frame, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos``: ``(value, position after it)``."""
    n = len(frame)
    if pos < n:
        first = frame[pos]
        if first < 0x80:  # one byte: counts, lengths, empty tag sections
            return first, pos + 1
        if pos + 1 < n and frame[pos + 1] < 0x80:  # two: a record batch's size up to 16 KiB
            return (first & 0x7F) | (frame[pos + 1] << 7), pos + 2
    result = 0
    for shift in range(0, 35, 7):
        if pos >= n:
            raise CorruptFrameError("truncated varint")
        byte = frame[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
    raise CorruptFrameError("unsigned varint longer than 5 bytes")


def compact_nullable_string_at(frame, pos: int, end: int) -> tuple[str | None, int]:
    if pos < end and frame[pos] < 0x80:  # one byte: shorter than 127 bytes
        n = frame[pos]
        pos += 1
    else:
        n, pos = uvarint_at(frame, pos)
    if n == 0:
        return None, pos
    n -= 1
    if pos + n > end:
        raise CorruptFrameError("string runs past the end of the frame")
    return str(frame[pos : pos + n], "utf-8"), pos + n


def compact_string_at(frame, pos: int, end: int) -> tuple[str, int]:
    value, pos = compact_nullable_string_at(frame, pos, end)
    if value is None:
        raise CorruptFrameError("null for a non-nullable compact string")
    return value, pos


def skip_tagged_fields_at(frame, pos: int, end: int) -> int:
    if pos < end and frame[pos] == 0:  # what clients send
        return pos + 1
    count, pos = uvarint_at(frame, pos)
    for _ in range(count):
        _, pos = uvarint_at(frame, pos)
        size, pos = uvarint_at(frame, pos)
        pos += size
        if pos > end:
            raise CorruptFrameError("tagged field runs past the end of the frame")
    return pos


def decode_produce_request_untrusted(frame: bytearray, offset: int, version: int) -> ProduceRequest:
    """Decode a Produce request body (v3+) at ``offset`` of ``frame``, without copying records.

    Each partition's ``records`` is a ``memoryview`` slice of ``frame`` (None for a null field),
    writable when ``frame`` is a bytearray. Bytes after the body are ignored, as Kafka does.
    Accepts exactly what the declared codec accepts; raises only ``CorruptFrameError``.
    """
    try:
        if version >= FIRST_FLEXIBLE:
            return _decode_flexible(frame, offset)
        return _decode_v3(frame, offset)
    except struct.error as exc:
        raise CorruptFrameError(f"truncated Produce request: {exc}") from None
    except UnicodeDecodeError as exc:
        raise CorruptFrameError(f"string is not UTF-8: {exc}") from None


def _decode_v3(frame: bytearray, offset: int) -> ProduceRequest:
    end = len(frame)
    view = memoryview(frame)
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
            partitions.append(_new_partition((index, records)))
        topics.append(_new_topic((name, partitions)))
    return _new_request((transactional_id, acks, timeout_ms, topics))


def _decode_flexible(frame: bytearray, offset: int) -> ProduceRequest:
    end = len(frame)
    view = memoryview(frame)
    transactional_id, pos = compact_nullable_string_at(frame, offset, end)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
    topic_count, pos = uvarint_at(frame, pos + 6)
    if topic_count == 0:
        raise CorruptFrameError("null for a non-nullable compact array")
    topics = []
    for _ in range(topic_count - 1):
        name, pos = compact_string_at(frame, pos, end)
        partition_count, pos = uvarint_at(frame, pos)
        if partition_count == 0:
            raise CorruptFrameError("null for a non-nullable compact array")
        partitions = []
        for _ in range(partition_count - 1):
            (index,) = _I32.unpack_from(frame, pos)
            size, pos = uvarint_at(frame, pos + 4)
            if size == 0:
                records = None
            else:
                size -= 1
                if pos + size > end:
                    raise CorruptFrameError("records run past the end of the frame")
                records = view[pos : pos + size]
                pos += size
            pos = skip_tagged_fields_at(frame, pos, end)
            partitions.append(_new_partition((index, records)))
        pos = skip_tagged_fields_at(frame, pos, end)
        topics.append(_new_topic((name, partitions)))
    skip_tagged_fields_at(frame, pos, end)
    return _new_request((transactional_id, acks, timeout_ms, topics))


# Per partition after (index, error_code, base_offset, log_append_time_ms): what each version adds
# with our values (log_start_offset given; record_errors empty; error_message null; no tags).
_PARTITION_V3 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")
_V8_TAIL = struct.pack(">ih", 0, -1)  # record_errors [], error_message null
_FLEX_TAIL = b"\x01\x00\x00"  # compact [] record_errors, compact null error_message, no tags

ProducePartitionResponse = tuple[int, int, int, int, int]
# (index, error_code, base_offset, log_append_time_ms, log_start_offset)


def encode_produce_response(
    version: int,
    responses: Sequence[tuple[str, Sequence[ProducePartitionResponse]]],
    throttle_time_ms: int = 0,
) -> bytes:
    """Encode a Produce response body (v3+); the same bytes as the declared codec.

    ``responses`` is ``[(topic, [(index, error_code, base_offset, log_append_time_ms,
    log_start_offset), ...])]``.
    """
    flexible = version >= FIRST_FLEXIBLE
    parts: list[bytes] = [
        encode_uvarint(len(responses) + 1) if flexible else _I32.pack(len(responses))
    ]
    for name, partitions in responses:
        encoded = name.encode("utf-8")
        if flexible:
            parts.append(encode_uvarint(len(encoded) + 1))
            parts.append(encoded)
            parts.append(encode_uvarint(len(partitions) + 1))
        else:
            parts.append(_I16.pack(len(encoded)))
            parts.append(encoded)
            parts.append(_I32.pack(len(partitions)))
        for p in partitions:
            if version < 5:
                parts.append(_PARTITION_V3.pack(*p[:4]))
            else:
                parts.append(_PARTITION_V5.pack(*p))
                if flexible:
                    parts.append(_FLEX_TAIL)
                elif version >= 8:
                    parts.append(_V8_TAIL)
        if flexible:
            parts.append(b"\x00")
    parts.append(_I32.pack(throttle_time_ms))
    if flexible:
        parts.append(b"\x00")
    return b"".join(parts)

