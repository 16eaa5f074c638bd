"""Fetch v4 and ListOffsets v2 over a real socket: long poll, bounds, at least one batch, errors."""

from __future__ import annotations

import threading
import time

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import decode_batches_untrusted, encode_batch
from tests.raw_client import RawConnection

TOPIC = "fetchy"


@pytest.fixture
def conn(broker_proc):
    with RawConnection(broker_proc.port) as connection:
        meta = connection.request(
            ApiKey.METADATA, 4, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": True}
        )
        assert meta.topics[0].error_code == ErrorCode.NONE
        yield connection


def produce(conn, value: bytes, timestamp: int, count: int = 1) -> int:
    records = encode_batch([(None, value, [], timestamp)] * count)
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}],
    }
    part = conn.request(ApiKey.PRODUCE, 3, body).responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.NONE
    return part.base_offset


def fetch(conn, offset: int, max_wait_ms: int = 0, min_bytes: int = 0, partition_max_bytes: int = 1 << 20):
    body = {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": 1 << 24,
        "isolation_level": 0,
        "topics": [
            {
                "topic": TOPIC,
                "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": partition_max_bytes}
                ],
            }
        ],
    }
    return conn.request(ApiKey.FETCH, 4, body).responses[0].partitions[0]


def list_offset(conn, timestamp: int, isolation_level: int = 0):
    body = {
        "replica_id": -1,
        "isolation_level": isolation_level,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}],
    }
    return conn.request(ApiKey.LIST_OFFSETS, 2, body).topics[0].partitions[0]


def test_fetch_returns_whole_batches_and_watermarks(conn):
    produce(conn, b"a" * 1000, 1000, count=3)
    produce(conn, b"b" * 1000, 2000, count=2)
    part = fetch(conn, 0, partition_max_bytes=10)  # smaller than one batch: still one whole batch
    assert part.error_code == ErrorCode.NONE
    assert part.high_watermark == 5 and part.last_stable_offset == 5
    assert part.aborted_transactions is None  # read_uncommitted
    batches = list(decode_batches_untrusted(part.records))
    assert len(batches) == 1 and [r.offset for r in batches[0][1]] == [0, 1, 2]
    everything = fetch(conn, 3)
    assert [r.offset for _, rs in decode_batches_untrusted(everything.records) for r in rs] == [3, 4]
    at_end = fetch(conn, 5)
    assert at_end.error_code == ErrorCode.NONE and at_end.records == b""


def test_fetch_offset_out_of_range(conn):
    produce(conn, b"x", 1)
    assert fetch(conn, 2).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert fetch(conn, -1).error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_long_poll_waits_then_wakes_on_data(broker_proc, conn):
    started = time.monotonic()
    empty = fetch(conn, 0, max_wait_ms=400, min_bytes=1)
    waited = time.monotonic() - started
    assert empty.records == b"" and 0.35 <= waited < 3

    def produce_soon() -> None:
        time.sleep(0.3)
        with RawConnection(broker_proc.port) as other:
            produce(other, b"late", 5)

    thread = threading.Thread(target=produce_soon)
    thread.start()
    started = time.monotonic()
    part = fetch(conn, 0, max_wait_ms=10_000, min_bytes=1)
    waited = time.monotonic() - started
    thread.join()
    assert part.records and waited < 5  # woken by the append, not by the 10 s timeout


def test_list_offsets_earliest_latest_and_by_time(conn):
    produce(conn, b"x", 1_000, count=2)  # offsets 0-1
    produce(conn, b"y", 5_000, count=2)  # offsets 2-3
    assert list_offset(conn, -2).offset == 0
    assert list_offset(conn, -1).offset == 4
    assert list_offset(conn, -1, isolation_level=1).offset == 4  # LSO == HW without transactions
    by_time = list_offset(conn, 3_000)
    assert (by_time.timestamp, by_time.offset) == (5_000, 2)
    assert list_offset(conn, 1_000).offset == 0
    missing = list_offset(conn, 9_000)
    assert (missing.timestamp, missing.offset) == (-1, -1)
