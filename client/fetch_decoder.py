"""Turning one partition's Fetch ``records`` bytes into the records an application may see.

Pure: bytes in, records out. Rules (docs/protocol.md section 5, Kafka's consumer):

- Control batches (transaction markers) are never returned.
- read_committed: the response lists ``aborted_transactions`` as ``(producer_id, first_offset)``.
  Walking the batches in offset order, every listed transaction whose first offset is at or before
  the batch's last offset makes its producer "aborted"; a transactional batch of an aborted
  producer is dropped; that producer's ABORT marker ends it (later batches of the same producer
  belong to a new transaction). read_uncommitted returns every data batch.
- Records before the fetch offset are skipped (a batch may start before it).
- The next offset to fetch follows the last *batch* returned, markers and dropped batches
  included, so the consumer moves past them.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterable, Sequence

from client.structs import ConsumerRecord
from protocol.records import (
    HEADER_SIZE,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    ControlType,
    decode_batches_untrusted,
    parse_control_record,
)
from protocol.trusted import trusted

_BASE_OFFSET = struct.Struct(">qi")  # baseOffset, length
_LAST_OFFSET_DELTA = struct.Struct(">i")
_new_consumer_record = trusted(ConsumerRecord)


def next_fetch_offset(data: bytes, fetch_offset: int) -> int:
    """The offset after the last whole batch in ``data`` (``fetch_offset`` if none), from the
    batch headers alone: lets the next Fetch go out before the records are decoded. Bad bytes
    are left for ``decode_fetched`` to report; this only stops at them."""
    pos, end = 0, len(data)
    next_offset = fetch_offset
    while end - pos >= HEADER_SIZE:
        base_offset, length = _BASE_OFFSET.unpack_from(data, pos)
        size = length + LOG_OVERHEAD
        if length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
            break
        (last_delta,) = _LAST_OFFSET_DELTA.unpack_from(data, pos + LAST_OFFSET_DELTA_OFFSET)
        if base_offset + last_delta + 1 > next_offset:
            next_offset = base_offset + last_delta + 1
        pos += size
    return next_offset


def decode_fetched(
    data: bytes,
    topic: str,
    partition: int,
    fetch_offset: int,
    aborted_transactions: Iterable[tuple[int, int]] | None,
    read_committed: bool,
) -> tuple[list[ConsumerRecord], int]:
    """``(records to return, next fetch offset)``; raises ``CorruptFrameError`` on bad bytes.

    ``next fetch offset`` is ``fetch_offset`` when ``data`` holds no whole batch.
    """
    out: list[ConsumerRecord] = []
    next_offset = fetch_offset
    if not data:
        return out, next_offset
    pending: list[tuple[int, int]] = []  # heap of (first_offset, producer_id)
    if read_committed and aborted_transactions:
        pending = [(first, pid) for pid, first in aborted_transactions]
        heapq.heapify(pending)
    aborted: set[int] = set()
    append = out.append
    new = _new_consumer_record
    for header, records in decode_batches_untrusted(data):
        last_offset = header.base_offset + header.last_offset_delta
        if last_offset + 1 > next_offset:
            next_offset = last_offset + 1
        if read_committed and header.producer_id >= 0:
            while pending and pending[0][0] <= last_offset:
                aborted.add(heapq.heappop(pending)[1])
            if header.is_control:
                if records and _is_abort(records):
                    aborted.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborted:
                continue
        if header.is_control:
            continue
        ts_type = header.timestamp_type
        if header.base_offset >= fetch_offset:
            # Records are (offset, timestamp, key, value, headers, attributes) tuples: unpacking
            # them beats seven attribute lookups per record.
            for offset, timestamp, key, value, headers, _ in records:
                append(
                    new((topic, partition, offset, timestamp, key, value, headers, ts_type))
                )
        else:
            for offset, timestamp, key, value, headers, _ in records:
                if offset >= fetch_offset:
                    append(
                        new((topic, partition, offset, timestamp, key, value, headers, ts_type))
                    )
    return out, next_offset


def _is_abort(records: Sequence) -> bool:
    control_type, _ = parse_control_record(records[0])
    return control_type == ControlType.ABORT
