"""The client's zero-copy Fetch v4 response decoder agrees with the construct schema."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import CorruptFrameError
from protocol.messages.fetch import FetchResponseV4, decode_fetch_response_v4_untrusted

i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)

partitions = st.fixed_dictionaries(
    {
        "partition_index": i32,
        "error_code": i16,
        "high_watermark": i64,
        "last_stable_offset": i64,
        "aborted_transactions": st.none()
        | st.lists(st.fixed_dictionaries({"producer_id": i64, "first_offset": i64}), max_size=3),
        "records": st.binary(max_size=200),
    }
)
responses = st.fixed_dictionaries(
    {
        "throttle_time_ms": i32,
        "responses": st.lists(
            st.fixed_dictionaries(
                {"topic": st.text(max_size=20), "partitions": st.lists(partitions, max_size=3)}
            ),
            max_size=3,
        ),
    }
)


def as_plain(decoded) -> dict:
    """Both decoders' results as plain data, for comparison."""
    return {
        "throttle_time_ms": decoded.throttle_time_ms,
        "responses": [
            {
                "topic": t.topic,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": p.error_code,
                        "high_watermark": p.high_watermark,
                        "last_stable_offset": p.last_stable_offset,
                        "aborted_transactions": None
                        if p.aborted_transactions is None
                        else [(a.producer_id, a.first_offset) for a in p.aborted_transactions],
                        "records": bytes(p.records),
                    }
                    for p in t.partitions
                ],
            }
            for t in decoded.responses
        ],
    }


@settings(max_examples=200, deadline=None)
@given(responses, st.binary(max_size=8))
def test_agrees_with_the_schema(response, prefix):
    body = FetchResponseV4.build(response)
    frame = bytearray(prefix + body)
    fast = decode_fetch_response_v4_untrusted(frame, len(prefix))
    assert as_plain(fast) == as_plain(FetchResponseV4.parse(body))
    for t in fast.responses:
        for p in t.partitions:
            assert isinstance(p.records, memoryview)  # a view, not a copy


@settings(max_examples=100, deadline=None)
@given(responses, st.data())
def test_truncations_are_rejected_like_the_schema(response, data):
    body = FetchResponseV4.build(response)
    cut = data.draw(st.integers(0, len(body) - 1))
    with pytest.raises(CorruptFrameError):
        decode_fetch_response_v4_untrusted(bytearray(body[:cut]), 0)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_raises_only_corrupt_frame_error(garbage):
    try:
        decode_fetch_response_v4_untrusted(bytearray(garbage), 0)
    except CorruptFrameError:
        pass


def test_negative_lengths():
    body = bytearray(FetchResponseV4.build({"throttle_time_ms": 0, "responses": []}))
    body[4:8] = (-2).to_bytes(4, "big", signed=True)
    with pytest.raises(CorruptFrameError):
        decode_fetch_response_v4_untrusted(body, 0)
