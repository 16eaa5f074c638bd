"""Fetch (api key 1): read record batches, with isolation_level and aborted transactions.

v1 throttle_time_ms; v2 (message format 1); v3 max_bytes; v4 isolation_level, last_stable_offset
and aborted_transactions, RecordBatch v2 (the first we serve); v5 log_start_offset; v6 (no
change); v7 fetch sessions (KIP-227: session_id / session_epoch, forgotten_topics_data, a top-level
error_code); v8 (no change); v9 current_leader_epoch; v10 (zstd); v11 rack_id and
preferred_read_replica (KIP-392); v12 flexible, last_fetched_epoch, tagged fields; v13+ topic ids.

Kafka's schema makes ``records`` nullable, but librdkafka fails to parse a null (-1) records field
(docs/protocol.md section 5): the broker always sends a 0-length field instead. aborted_transactions is
null under read_uncommitted.

The broker encodes responses with ``encode_fetch_response_parts``, which leaves every records
buffer (maybe megabytes read from a segment) as it is, for one gather-write; the client decodes
them with ``decode_fetch_response_untrusted``, which hands out each records field as a view into
the response frame instead of copying it. Tests check both against the declared codec.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence, Sized
from typing import NamedTuple

from protocol.api_keys import FIRST_FLEXIBLE_VERSION, ApiKey
from protocol.errors import CorruptFrameError
from protocol.messages._codegen import uvarint_at
from protocol.messages._declare import F, declare
from protocol.primitives import encode_uvarint

FETCH = declare(
    ApiKey.FETCH, valid="0-12", flexible="12+",
    request=[
        F("cluster_id", "string", "12+", nullable="12+", tag=0, default=None),
        F("replica_id", "int32", default=-1),
        F("max_wait_ms", "int32"),
        F("min_bytes", "int32"),
        F("max_bytes", "int32", "3+", default=0x7FFFFFFF),
        F("isolation_level", "int8", "4+"),
        F("session_id", "int32", "7+"),
        F("session_epoch", "int32", "7+", default=-1),
        F("topics", "[]", fields=[
            F("topic", "string"),
            F("partitions", "[]", fields=[
                F("partition", "int32"),
                F("current_leader_epoch", "int32", "9+", default=-1),
                F("fetch_offset", "int64"),
                F("last_fetched_epoch", "int32", "12+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("partition_max_bytes", "int32"),
            ]),
        ]),
        F("forgotten_topics_data", "[]", "7+", fields=[
            F("topic", "string"), F("partitions", "[]int32"),
        ]),
        F("rack_id", "string", "11+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "7+"),
        F("session_id", "int32", "7+"),
        F("responses", "[]", fields=[
            F("topic", "string"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("high_watermark", "int64"),
                F("last_stable_offset", "int64", "4+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("diverging_epoch", "struct", "12+", tag=0, fields=[
                    F("epoch", "int32", default=-1), F("end_offset", "int64", default=-1),
                ]),
                F("current_leader", "struct", "12+", tag=1, fields=[
                    F("leader_id", "int32", default=-1), F("leader_epoch", "int32", default=-1),
                ]),
                F("snapshot_id", "struct", "12+", tag=2, fields=[
                    F("end_offset", "int64", default=-1), F("epoch", "int32", default=-1),
                ]),
                F("aborted_transactions", "[]", "4+", nullable="4+", fields=[
                    F("producer_id", "int64"), F("first_offset", "int64"),
                ]),
                F("preferred_read_replica", "int32", "11+", default=-1),
                F("records", "records"),
            ]),
        ]),
    ],
)

FIRST_FLEXIBLE = FIRST_FLEXIBLE_VERSION[ApiKey.FETCH]


def compact_string_at(frame, pos: int, end: int) -> tuple[str, int]:
    n, pos = uvarint_at(frame, pos)
    if n == 0:
        raise CorruptFrameError("null for a non-nullable compact string")
    n -= 1
    if pos + n > end:
        raise CorruptFrameError("string runs past the end of the frame")
    return str(frame[pos : pos + n], "utf-8"), pos + n


def skip_tagged_fields_at(frame, pos: int, end: int) -> int:
    count, pos = uvarint_at(frame, pos)
    for _ in range(count):
        _, pos = uvarint_at(frame, pos)
        size, pos = uvarint_at(frame, pos)
        pos += size
        if pos > end:
            raise CorruptFrameError("tagged field runs past the end of the frame")
    return pos


# -- broker fast path -------------------------------------------------------------------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error, HW, LSO
_PARTITION_V5 = struct.Struct(">ihqqq")  # + log_start_offset
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset

AbortedTransaction = tuple[int, int]  # (producer_id, first_offset)
# A records field: bytes, or any sized object the writer of the parts knows how to send (the
# broker's FileSlice: bytes sent from a file), passed through as one chunk.
RecordsChunk = bytes | bytearray | memoryview | Sized
FetchPartitionData = tuple[
    int, int, int, int, int, Sequence[AbortedTransaction] | None, RecordsChunk | None,
]  # (partition_index, error_code, high_watermark, last_stable_offset, log_start_offset, aborted,
#    records)


def encode_fetch_response_parts(
    version: int,
    throttle_time_ms: int,
    topics: Sequence[tuple[str, Sequence[FetchPartitionData]]],
) -> list[RecordsChunk]:
    """Encode a Fetch response body (v4-12) as chunks for one gather-write.

    ``topics`` is ``[(topic, [(partition_index, error_code, high_watermark, last_stable_offset,
    log_start_offset, aborted_transactions, records), ...])]`` with ``aborted_transactions`` a
    list of ``(producer_id, first_offset)`` or None (sent as null), and ``records`` bytes, a
    byte-format memoryview or another sized chunk (its ``len`` is its size in bytes; this codec
    never reads it). Every non-empty records chunk is one chunk of the result, as it is (no
    copy); the fields between them are packed into small chunks. Empty (or None) records are
    sent as a 0-length field, never as null. The session is always 0 (none: every fetch is a full
    one), error_code 0, preferred_read_replica -1. ``b"".join(parts)`` is the body.
    """
    flexible = version >= FIRST_FLEXIBLE
    parts: list[RecordsChunk] = []
    head = bytearray(_I32.pack(throttle_time_ms))
    if version >= 7:
        head += b"\x00\x00\x00\x00\x00\x00"  # error_code 0, session_id 0
    head += encode_uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    for name, partitions in topics:
        encoded = name.encode("utf-8")
        if flexible:
            head += encode_uvarint(len(encoded) + 1)
            head += encoded
            head += encode_uvarint(len(partitions) + 1)
        else:
            head += _I16.pack(len(encoded))
            head += encoded
            head += _I32.pack(len(partitions))
        for index, error_code, hw, lso, log_start, aborted, records in partitions:
            if version >= 5:
                head += _PARTITION_V5.pack(index, error_code, hw, lso, log_start)
            else:
                head += _PARTITION_V4.pack(index, error_code, hw, lso)
            if flexible:
                head += b"\x00" if aborted is None else encode_uvarint(len(aborted) + 1)
            else:
                head += _I32.pack(-1 if aborted is None else len(aborted))
            if aborted:
                for producer_id, first_offset in aborted:
                    head += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        head += b"\x00"
            if version >= 11:
                head += b"\xff\xff\xff\xff"  # preferred_read_replica -1
            if records is None:
                size = 0
            elif isinstance(records, memoryview):
                if records.itemsize != 1:  # len() of the chunk must count bytes
                    records = records.cast("B")
                size = records.nbytes
            else:
                size = len(records)
            head += encode_uvarint(size + 1) if flexible else _I32.pack(size)
            if records is not None and size:
                parts.append(head)
                parts.append(records)
                head = bytearray()
            if flexible:
                head += b"\x00"  # the partition's tagged fields
        if flexible:
            head += b"\x00"  # the topic's
    if flexible:
        head += b"\x00"  # the response's
    if head:
        parts.append(head)
    return parts


# -- client fast path -------------------------------------------------------------------------------


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int


class FetchPartitionResponse(NamedTuple):
    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[AbortedTxn] | None
    records: memoryview  # a view into the response frame (empty for null)


class FetchTopicResponse(NamedTuple):
    topic: str
    partitions: list[FetchPartitionResponse]


class FetchResponse(NamedTuple):
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: list[FetchTopicResponse]


_I32x2 = struct.Struct(">ii")
_HEAD_V7 = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id


def decode_fetch_response_untrusted(frame, offset: int, version: int) -> FetchResponse:
    """Decode a Fetch response body (v4-12) at ``offset`` of ``frame`` without copying records.

    The same fields as the declared codec (attribute access; the tagged fields of v12 are
    skipped), with each ``records`` a ``memoryview`` slice of ``frame``. Accepts what the codec
    accepts; raises only ``CorruptFrameError``.
    """
    try:
        return _decode_fetch(frame, offset, version)
    except struct.error as exc:
        raise CorruptFrameError(f"truncated Fetch response: {exc}") from None
    except UnicodeDecodeError as exc:
        raise CorruptFrameError(f"topic name is not UTF-8: {exc}") from None


def _count(frame, pos: int, flexible: bool) -> tuple[int, int]:
    n, pos = _nullable_count(frame, pos, flexible, nullable=False)
    assert n is not None  # _nullable_count raises on null when not nullable
    return n, pos


def _nullable_count(frame, pos: int, flexible: bool, nullable: bool = True
                    ) -> tuple[int | None, int]:
    if flexible:
        n, pos = uvarint_at(frame, pos)
        n -= 1
    else:
        (n,) = _I32.unpack_from(frame, pos)
        pos += 4
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise CorruptFrameError(f"invalid array length {n}")
    return n, pos


def _decode_fetch(frame, offset: int, version: int) -> FetchResponse:
    end = len(frame)
    view = memoryview(frame)
    flexible = version >= FIRST_FLEXIBLE
    error_code = session_id = 0
    if version >= 7:
        throttle_time_ms, error_code, session_id = _HEAD_V7.unpack_from(frame, offset)
        pos = offset + _HEAD_V7.size
    else:
        (throttle_time_ms,) = _I32.unpack_from(frame, offset)
        pos = offset + 4
    topic_count, pos = _count(frame, pos, flexible)
    responses = []
    for _ in range(topic_count):
        if flexible:
            topic, pos = compact_string_at(frame, pos, end)
        else:
            (n,) = _I16.unpack_from(frame, pos)
            pos += 2
            if n < 0 or pos + n > end:
                raise CorruptFrameError(f"invalid topic name length {n}")
            topic = str(frame[pos : pos + n], "utf-8")
            pos += n
        partition_count, pos = _count(frame, pos, flexible)
        partitions = []
        for _ in range(partition_count):
            log_start = -1
            if version >= 5:
                index, error, hw, lso, log_start = _PARTITION_V5.unpack_from(frame, pos)
                pos += _PARTITION_V5.size
            else:
                index, error, hw, lso = _PARTITION_V4.unpack_from(frame, pos)
                pos += _PARTITION_V4.size
            aborted_count, pos = _nullable_count(frame, pos, flexible)
            aborted = None
            if aborted_count is not None:
                step = _ABORTED.size + (1 if flexible else 0)
                if pos + aborted_count * step > end:
                    raise CorruptFrameError("aborted transactions run past the end")
                aborted = []
                for _ in range(aborted_count):
                    aborted.append(AbortedTxn(*_ABORTED.unpack_from(frame, pos)))
                    pos += _ABORTED.size
                    if flexible:
                        pos = skip_tagged_fields_at(frame, pos, end)
            if version >= 11:
                pos += 4  # preferred_read_replica
            if flexible:
                size, pos = uvarint_at(frame, pos)
                size = max(size - 1, 0)  # null records: empty
            else:
                (size,) = _I32.unpack_from(frame, pos)
                pos += 4
                if size == -1:
                    size = 0
            if size < 0 or pos + size > end:
                raise CorruptFrameError(f"invalid records length {size}")
            records = view[pos : pos + size]
            pos += size
            if flexible:
                pos = skip_tagged_fields_at(frame, pos, end)
            partitions.append(
                FetchPartitionResponse(index, error, hw, lso, log_start, aborted, records)
            )
        if flexible:
            pos = skip_tagged_fields_at(frame, pos, end)
        responses.append(FetchTopicResponse(topic, partitions))
    if flexible:
        skip_tagged_fields_at(frame, pos, end)
    elif pos > end:
        raise CorruptFrameError("Fetch response runs past the end")
    return FetchResponse(throttle_time_ms, error_code, session_id, responses)
