"""Fetch v4 (api key 1): read record batches, with isolation_level and aborted transactions.

Request:  replica_id INT32, max_wait_ms INT32, min_bytes INT32, max_bytes INT32, isolation_level INT8,
          topics [topic STRING, partitions [partition INT32, fetch_offset INT64, partition_max_bytes INT32]]
Response: throttle_time_ms INT32,
          responses [topic STRING,
                     partitions [partition_index INT32, error_code INT16, high_watermark INT64,
                                 last_stable_offset INT64,
                                 aborted_transactions [producer_id INT64, first_offset INT64] (nullable),
                                 records BYTES]]

Kafka's schema makes ``records`` nullable, but librdkafka fails to parse a null (-1) records field
(PROTOCOL.md section 5), so this schema has plain BYTES: nothing built with it can send a null, and
the client decodes ``records`` as ``bytes``. aborted_transactions is null under read_uncommitted.

The broker encodes responses with ``encode_fetch_response_v4_parts``, which leaves every records
buffer (maybe megabytes read from a segment) as it is, for one gather-write; the client decodes
them with ``decode_fetch_response_v4_untrusted``, which hands out each records field as a view
into the response frame instead of copying it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from construct import Struct

from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError
from protocol.messages._registry import register
from protocol.primitives import Array, Bytes, Int8, Int16, Int32, Int64, NullableArray, String

FetchRequestV4 = Struct(
    "replica_id" / Int32,
    "max_wait_ms" / Int32,
    "min_bytes" / Int32,
    "max_bytes" / Int32,
    "isolation_level" / Int8,
    "topics" / Array(
        Struct(
            "topic" / String,
            "partitions" / Array(
                Struct(
                    "partition" / Int32,
                    "fetch_offset" / Int64,
                    "partition_max_bytes" / Int32,
                )
            ),
        )
    ),
)

FetchResponseV4 = Struct(
    "throttle_time_ms" / Int32,
    "responses" / Array(
        Struct(
            "topic" / String,
            "partitions" / Array(
                Struct(
                    "partition_index" / Int32,
                    "error_code" / Int16,
                    "high_watermark" / Int64,
                    "last_stable_offset" / Int64,
                    "aborted_transactions" / NullableArray(
                        Struct("producer_id" / Int64, "first_offset" / Int64)
                    ),
                    "records" / Bytes,
                )
            ),
        )
    ),
)

FETCH_V4 = register(ApiKey.FETCH, 4, FetchRequestV4, FetchResponseV4)


# -- broker fast path -------------------------------------------------------------------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqqi")  # index, error, HW, LSO, aborted_transactions count
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset

AbortedPair = tuple[int, int]  # (producer_id, first_offset)
FetchPartitionData = tuple[
    int, int, int, int, Sequence[AbortedPair] | None, bytes | bytearray | memoryview | None
]  # (partition_index, error_code, high_watermark, last_stable_offset, aborted, records)


def encode_fetch_response_v4_parts(
    throttle_time_ms: int,
    topics: Sequence[tuple[str, Sequence[FetchPartitionData]]],
) -> list[bytes | bytearray | memoryview]:
    """Encode a Fetch v4 response body as chunks for one gather-write.

    ``topics`` is ``[(topic, [(partition_index, error_code, high_watermark, last_stable_offset,
    aborted_transactions, records), ...])]`` with ``aborted_transactions`` a list of
    ``(producer_id, first_offset)`` or None (sent as null), and ``records`` bytes or a byte-format
    memoryview. Every non-empty records buffer is one chunk of the result, as it is (no copy); the
    fields between them are packed into small chunks. Empty (or None) records are sent as a
    0-length field, never as null. ``b"".join(parts)`` is the body; its length is the sum of
    ``len(part)``.
    """
    parts: list[bytes | bytearray | memoryview] = []
    head = bytearray(_I32.pack(throttle_time_ms))
    head += _I32.pack(len(topics))
    for name, partitions in topics:
        encoded = name.encode("utf-8")
        head += _I16.pack(len(encoded))
        head += encoded
        head += _I32.pack(len(partitions))
        for index, error_code, high_watermark, last_stable_offset, aborted, records in partitions:
            head += _PARTITION_HEAD.pack(
                index,
                error_code,
                high_watermark,
                last_stable_offset,
                -1 if aborted is None else len(aborted),
            )
            if aborted:
                for producer_id, first_offset in aborted:
                    head += _ABORTED.pack(producer_id, first_offset)
            if records is None:
                size = 0
            elif isinstance(records, memoryview):
                if records.itemsize != 1:  # len() of the chunk must count bytes
                    records = records.cast("B")
                size = records.nbytes
            else:
                size = len(records)
            head += _I32.pack(size)
            if size and records is not None:
                parts.append(head)
                parts.append(records)
                head = bytearray()
    if head:
        parts.append(head)
    return parts


# -- client fast path -------------------------------------------------------------------------------


class AbortedTransaction(NamedTuple):
    producer_id: int
    first_offset: int


class FetchPartitionResponse(NamedTuple):
    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    aborted_transactions: list[AbortedTransaction] | None
    records: memoryview  # a view into the response frame


class FetchTopicResponse(NamedTuple):
    topic: str
    partitions: list[FetchPartitionResponse]


class FetchResponse(NamedTuple):
    throttle_time_ms: int
    responses: list[FetchTopicResponse]


def decode_fetch_response_v4_untrusted(frame, offset: int) -> FetchResponse:
    """Decode a Fetch v4 response body at ``offset`` of ``frame`` without copying records.

    The same fields as ``FetchResponseV4`` (attribute access), with each ``records`` a
    ``memoryview`` slice of ``frame``. Accepts exactly what the schema accepts; raises only
    ``CorruptFrameError``.
    """
    end = len(frame)
    view = memoryview(frame)
    try:
        throttle_time_ms, topic_count = _I32x2.unpack_from(frame, offset)
        pos = offset + 8
        _check_count(topic_count)
        responses = []
        for _ in range(topic_count):
            (n,) = _I16.unpack_from(frame, pos)
            pos += 2
            if n < 0 or pos + n > end:
                raise CorruptFrameError(f"invalid topic name length {n}")
            topic = str(frame[pos : pos + n], "utf-8")
            pos += n
            (partition_count,) = _I32.unpack_from(frame, pos)
            pos += 4
            _check_count(partition_count)
            partitions = []
            for _ in range(partition_count):
                index, error, high_watermark, lso, aborted_count = _PARTITION_HEAD.unpack_from(
                    frame, pos
                )
                pos += _PARTITION_HEAD.size
                if aborted_count < 0:
                    _check_count(aborted_count, nullable=True)
                    aborted = None
                else:
                    if pos + aborted_count * _ABORTED.size > end:
                        raise CorruptFrameError("aborted transactions run past the end")
                    aborted = [
                        AbortedTransaction(*_ABORTED.unpack_from(frame, pos + i * _ABORTED.size))
                        for i in range(aborted_count)
                    ]
                    pos += aborted_count * _ABORTED.size
                (size,) = _I32.unpack_from(frame, pos)
                pos += 4
                if size < 0 or pos + size > end:
                    raise CorruptFrameError(f"invalid records length {size}")
                partitions.append(
                    FetchPartitionResponse(
                        index, error, high_watermark, lso, aborted, view[pos : pos + size]
                    )
                )
                pos += size
            responses.append(FetchTopicResponse(topic, partitions))
    except struct.error as exc:
        raise CorruptFrameError(f"truncated Fetch response: {exc}") from None
    except UnicodeDecodeError as exc:
        raise CorruptFrameError(f"topic name is not UTF-8: {exc}") from None
    return FetchResponse(throttle_time_ms, responses)


_I32x2 = struct.Struct(">ii")


def _check_count(count: int, nullable: bool = False) -> None:
    if count < 0 and not (nullable and count == -1):
        raise CorruptFrameError(f"invalid array length {count}")
