"""validate_records_untrusted: what the broker checks before storing a batch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import records as records_module
from protocol.errors import CorruptFrameError
from protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    Compression,
    _check_each_record,
    _check_records,
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


@pytest.mark.parametrize("count", [3, 36])
def test_record_attributes_of_0x80_or_more_are_refused(count: int) -> None:
    # The bits are unused (every client writes 0) and Kafka lets any byte through, but
    # kafka-python reads the byte as a varint and then cannot read the batch: refused by the
    # record-by-record check (3 records) and the fast path (36) alike; 0x7F is kept.
    batch = encode_batch([(None, b"v" * 20, [], TS) for _ in range(count)])
    stride = (len(batch) - HEADER_SIZE) // count
    for byte, accepted in ((0x7F, True), (0x80, False), (0xFF, False)):
        mutated = bytearray(batch)
        for i in range(count):
            mutated[HEADER_SIZE + i * stride + 1] = byte  # after each record's one-byte length
        assert _accepted(bytes(mutated)) == accepted == _accepted_one_by_one(bytes(mutated))


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


# The fast path for runs of records of one shape (_same_shape_run) must never accept what the
# record-by-record check refuses, and must take the batches real producers write.

def _section(batch: bytes) -> tuple[memoryview, int, int, int]:
    header = parse_header_untrusted(batch)
    return memoryview(batch), HEADER_SIZE, header.length + LOG_OVERHEAD, header.records_count


def _accepted_one_by_one(batch: bytes) -> bool:
    data, p, n, count = _section(batch)
    try:
        return _check_each_record(data, p, n, 0, count) == n
    except CorruptFrameError:
        return False


def _accepted(batch: bytes) -> bool:
    try:
        _check_records(*_section(batch))
    except CorruptFrameError:
        return False
    return True


@pytest.fixture
def slow_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The runs (first, stop) that were checked record by record."""
    runs: list[tuple[int, int]] = []

    def spy(data, p, n, first, stop):
        runs.append((first, stop))
        return _check_each_record(data, p, n, first, stop)

    monkeypatch.setattr(records_module, "_check_each_record", spy)
    return runs


@pytest.mark.parametrize("count", [8, 9, 63, 64, 65, 200, 8192, 8193, 9500, 16385])
@pytest.mark.parametrize("key", [None, b"", b"k" * 70])
def test_records_of_one_shape_take_the_fast_path(count: int, key: bytes | None,
                                                 slow_runs: list) -> None:
    # one- two- and three-byte offset deltas (librdkafka's default 1 MB batches of 100-byte
    # values hold about 9,000 records)
    _validate(encode_batch([(key, b"v" * 60, [], TS + i % 50) for i in range(count)]))
    assert slow_runs == []


@pytest.mark.parametrize("value_size", [100, 1000])
def test_runs_read_from_a_copy_and_in_place_agree(value_size: int, slow_runs: list) -> None:
    # 1,200 records of 1,000 bytes are a run over _COPIED_RUN_MAX: its columns are read in place
    records = [(None, b"v" * value_size, [], TS + i % 50) for i in range(1200)]
    _validate(encode_batch(records))
    assert slow_runs == []
    assert (1200 * value_size > records_module._COPIED_RUN_MAX) == (value_size == 1000)
    bad = bytearray(encode_batch(records))
    bad[len(bad) - 1 - value_size - 2] ^= 0x02  # the last record's value length, changed
    assert not _accepted(bytes(bad)) and not _accepted_one_by_one(bytes(bad))


@pytest.mark.parametrize("count", [1, 2, 7])
def test_a_batch_of_few_records_is_checked_one_by_one(count: int, slow_runs: list) -> None:
    # cheaper than the column slices below _FEW_RECORDS records
    _validate(encode_batch([(None, b"v" * 60, [], TS) for _ in range(count)]))
    assert slow_runs == [(0, count)]


def test_a_run_of_another_shape_is_checked_alone(slow_runs: list) -> None:
    # Timestamp deltas of one byte, then two from record 300 (a batch that spans more than
    # 63 ms), then three from record 700: the run 64-999 is halved until the parts around the
    # two changes are small, and only those are checked record by record.
    records = [(None, b"v" * 20, [], TS + (0 if i < 300 else 100 if i < 700 else 9000))
               for i in range(1000)]
    _validate(encode_batch(records))
    assert len(slow_runs) == 2
    for (first, stop), change in zip(slow_runs, (300, 700), strict=True):
        assert first < change < stop and stop - first <= records_module._LEAF_RUN


@pytest.mark.parametrize("records", [
    [(None, b"v" * (i % 3), [], TS) for i in range(10)],         # lengths differ
    [(None, b"v", [("h", b"x")], TS) for i in range(10)],         # headers
])
def test_records_of_other_shapes_are_checked_one_by_one(records: list, slow_runs: list) -> None:
    _validate(encode_batch(records))
    assert slow_runs == [(0, 10)]


@given(count=st.sampled_from([1, 2, 8, 9, 63, 64, 65, 140, 300, 8191, 8192, 8193, 8300]),
       key_len=st.integers(-1, 200), value_len=st.integers(-1, 200),
       ts_step=st.sampled_from([0, 1, 70, 9000]), data=st.data())
@settings(max_examples=300, deadline=None)
def test_the_fast_path_never_accepts_what_the_full_check_refuses(
    count: int, key_len: int, value_len: int, ts_step: int, data: st.DataObject
) -> None:
    key = None if key_len < 0 else b"k" * key_len
    value = None if value_len < 0 else b"v" * value_len
    batch = bytearray(encode_batch([(key, value, [], TS + ts_step * min(i, 1))
                                    for i in range(count)]))
    stride = (len(batch) - HEADER_SIZE) // count  # about: record 0 may be a byte shorter
    for _ in range(data.draw(st.integers(1, 3))):
        if data.draw(st.booleans()):  # anywhere
            at = data.draw(st.integers(HEADER_SIZE, len(batch) - 1))
        else:  # the framing bytes at the start and end of a record
            record = data.draw(st.integers(0, count - 1))
            offset = data.draw(st.sampled_from([0, 1, 2, 3, 4, 5, 6, stride - 1]))
            at = min(len(batch) - 1, HEADER_SIZE + record * stride + offset)
        batch[at] = data.draw(st.integers(0, 255))
    mutated = bytes(batch)
    assert _accepted(mutated) == _accepted_one_by_one(mutated)


@pytest.mark.parametrize("key, value, ts_step", [
    (None, b"v" * 20, 0),           # one-byte varints
    (b"k" * 3, b"v" * 70, 100),     # two-byte value lengths, timestamp and offset deltas
])
def test_every_byte_value_at_every_position_of_a_record(key, value, ts_step) -> None:
    # Exhaustive for record 70 (in the run of records 64-79): each of its bytes set to each
    # value. Records 1-79 have the same timestamp delta; 64-79 the same size.
    def batch_of(count: int) -> bytes:
        return encode_batch([(key, value, [], TS + ts_step * min(i, 1)) for i in range(count)])

    count = 80
    batch = batch_of(count)
    stride = len(batch_of(count + 1)) - len(batch)
    start = len(batch) - (count - 70) * stride
    for at in range(start, start + stride):
        for byte in range(256):
            mutated = bytearray(batch)
            mutated[at] = byte
            assert _accepted(bytes(mutated)) == _accepted_one_by_one(bytes(mutated)), (at, byte)
