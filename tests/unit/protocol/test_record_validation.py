"""validate_records_untrusted: what the broker checks before storing a batch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import CorruptFrameError
from protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    Compression,
    _check_each_record,
    _same_shape_records,
    decode_records_untrusted,
    encode_batch,
    parse_header_untrusted,
    validate_records_untrusted,
)
from tests.fuzz.poison import TS, good_section, poison_batches, with_records


def _validate(batch: bytes, limit: int = 16 << 20) -> None:
    validate_records_untrusted(batch, 0, parse_header_untrusted(batch), limit)


@pytest.mark.parametrize("codec", list(Compression))
def test_batches_our_encoder_writes_are_valid(codec: Compression) -> None:
    records = [
        (b"k%d" % i if i % 2 else None, b"v" * (i * 97 % 9000) if i % 3 else None,
         [("h", b"x"), ("n", None)] if i % 4 == 0 else [], TS + i)
        for i in range(300)
    ]
    _validate(encode_batch(records, compression=codec))


def test_raw_section_helper_builds_valid_batches() -> None:
    batch = with_records(good_section(5), 5)
    _validate(batch)
    assert len(decode_records_untrusted(batch)) == 5


@pytest.mark.parametrize("name", sorted(poison_batches()))
def test_poison_batches_are_refused(name: str) -> None:
    with pytest.raises(CorruptFrameError):
        _validate(poison_batches()[name])


def test_decompression_bound_is_enforced_while_decompressing() -> None:
    batch = encode_batch([(None, b"\x00" * 200_000, [], TS)], compression=Compression.GZIP)
    _validate(batch, limit=300_000)
    with pytest.raises(CorruptFrameError, match="expand"):
        _validate(batch, limit=100_000)


def test_count_beyond_the_bound_is_refused_before_decompressing() -> None:
    batch = bytearray(encode_batch([(None, b"v", [], TS)], compression=Compression.GZIP))
    with pytest.raises(CorruptFrameError, match="cannot fit"):
        validate_records_untrusted(batch, 0, parse_header_untrusted(batch)._replace(
            records_count=10**9), 1000)


# The fast path for records of one shape (_same_shape_records) must never accept what the
# record-by-record check refuses, and must take the batches real producers write.

def _section(batch: bytes) -> tuple[memoryview, int, int, int]:
    header = parse_header_untrusted(batch)
    return memoryview(batch), HEADER_SIZE, header.length + LOG_OVERHEAD, header.records_count


def _each_accepts(batch: bytes) -> bool:
    try:
        _check_each_record(*_section(batch))
    except CorruptFrameError:
        return False
    return True


@pytest.mark.parametrize("count", [1, 2, 63, 64, 65, 200, 8192, 8193, 9500, 16385])
@pytest.mark.parametrize("key", [None, b"", b"k" * 70])
def test_records_of_one_shape_take_the_fast_path(count: int, key: bytes | None) -> None:
    # one- two- and three-byte offset deltas (librdkafka's default 1 MB batches of 100-byte
    # values hold about 9,000 records)
    batch = encode_batch([(key, b"v" * 60, [], TS + i % 50) for i in range(count)])
    assert _same_shape_records(*_section(batch))
    _validate(batch)


@pytest.mark.parametrize("records", [
    [(None, b"v" * (i % 3), [], TS) for i in range(10)],         # lengths differ
    [(None, b"v", [("h", b"x")], TS) for i in range(10)],         # headers
    [(None, b"v", [], TS + i * 1000) for i in range(10)],         # two-byte timestamp deltas
])
def test_records_of_other_shapes_are_checked_one_by_one(records: list) -> None:
    batch = encode_batch(records)
    assert not _same_shape_records(*_section(batch))
    _validate(batch)


@given(count=st.sampled_from([1, 2, 63, 64, 65, 140, 8191, 8192, 8193, 8300]), key_len=st.integers(-1, 200), value_len=st.integers(-1, 200),
       data=st.data())
@settings(max_examples=300, deadline=None)
def test_the_fast_path_never_accepts_what_the_full_check_refuses(
    count: int, key_len: int, value_len: int, data: st.DataObject
) -> None:
    key = None if key_len < 0 else b"k" * key_len
    value = None if value_len < 0 else b"v" * value_len
    batch = bytearray(encode_batch([(key, value, [], TS) for _ in range(count)]))
    assert _same_shape_records(*_section(bytes(batch)))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(HEADER_SIZE, len(batch) - 1))
        batch[at] = data.draw(st.integers(0, 255))
    mutated = bytes(batch)
    if _same_shape_records(*_section(mutated)):
        assert _each_accepts(mutated)
