"""RecordBatch v2 codec: golden bytes, kafka-python as an independent referee, round trips, bad input."""

from __future__ import annotations

import struct
import sys
import warnings
import zlib

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import records as rec
from protocol.errors import CorruptFrameError
from protocol.records import (
    HEADER_SIZE,
    INT32_MAX,
    LOG_OVERHEAD,
    BatchHeader,
    Compression,
    ControlType,
    Record,
    batch_crc_ok,
    decode_batches_untrusted,
    decode_records_untrusted,
    decode_varint,
    encode_batch,
    encode_control_batch,
    encode_varint,
    iter_batches_untrusted,
    parse_control_record,
    parse_header_untrusted,
    patch_base_offset,
    patch_partition_leader_epoch,
)

# kafka-python's package import trips a DeprecationWarning (importlib.resources.read_text), which
# the project's filterwarnings = error would turn into a collection error.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record import _crc32c as kafka_pure_crc32c
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from kafka.record.util import decode_varint as kafka_decode_varint
    from kafka.record.util import encode_varint as kafka_encode_varint

TS = 1_700_000_000_000
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

OPTIONAL_CODECS = {
    Compression.SNAPPY: "snappy",
    Compression.LZ4: "lz4.frame",
    Compression.ZSTD: "zstandard",
}


def _require_codec(codec: Compression) -> None:
    if codec in OPTIONAL_CODECS:
        pytest.importorskip(OPTIONAL_CODECS[codec])


def _sample_records(n: int = 50) -> list[tuple]:
    return [
        (
            None if i % 5 == 0 else b"key-%d" % i,
            None if i % 7 == 3 else bytes(range(i % 256)) * 2,
            [("trace", b"t%d" % i), ("empty", None)] if i % 3 == 0 else [],
            TS + i * 13 - (i % 4) * 50,  # timestamps not monotonic: negative deltas
        )
        for i in range(n)
    ]


def _as_tuples(records: list[Record]) -> list[tuple]:
    return [(r.key, r.value, list(r.headers), r.timestamp) for r in records]


def _expected(records: list[tuple]) -> list[tuple]:
    return [(k, v, list(h), ts) for k, v, h, ts in records]


def _recrc(batch: bytearray, pos: int = 0) -> None:
    """Recompute the CRC after a test edits bytes under it (to reach the record decoder)."""
    header = parse_header_untrusted(batch, pos)
    crc = crc32c.crc32c(bytes(batch[pos + 21 : pos + header.size]))
    struct.pack_into(">I", batch, pos + 17, crc)


def _with_section(section: bytes, records_count: int, attributes: int = 0) -> bytearray:
    """A valid header (CRC included) around an arbitrary records section."""
    batch = bytearray(
        struct.pack(
            ">qiibIhiqqqhii",
            0,
            HEADER_SIZE - LOG_OVERHEAD + len(section),
            -1,
            2,
            0,
            attributes,
            max(records_count - 1, 0),
            TS,
            TS,
            -1,
            -1,
            -1,
            records_count,
        )
        + section
    )
    _recrc(batch)
    return batch


# ---------------------------------------------------------------------------------------------
# Golden values


def test_crc32c_golden_value() -> None:
    # The CRC-32C check value from the Castagnoli / iSCSI specification.
    assert crc32c.crc32c(b"123456789") == 0xE3069283
    assert kafka_pure_crc32c.crc(b"123456789") == 0xE3069283


def _golden_single_record_batch() -> bytes:
    # Record: every varint is zig-zag, so 1 -> 0x02 and a body of 8 bytes -> 0x10.
    body = bytes(
        [
            0x00,  # record attributes
            0x00,  # timestampDelta 0
            0x00,  # offsetDelta 0
            0x02,  # keyLength 1
        ]
    )
    body += b"k" + b"\x02" + b"v" + b"\x00"  # key, valueLength 1, value, headersCount 0
    assert len(body) == 8
    record = b"\x10" + body
    after_crc = (
        struct.pack(">h", 0)  # attributes: no codec, CreateTime, not transactional
        + struct.pack(">i", 0)  # lastOffsetDelta
        + struct.pack(">q", TS)  # baseTimestamp
        + struct.pack(">q", TS)  # maxTimestamp
        + struct.pack(">q", 1000)  # producerId
        + struct.pack(">h", 0)  # producerEpoch
        + struct.pack(">i", 0)  # baseSequence
        + struct.pack(">i", 1)  # recordsCount
        + record
    )
    crc = kafka_pure_crc32c.crc(after_crc)  # a pure-Python CRC-32C, not the one records.py uses
    return (
        struct.pack(">q", 0)  # baseOffset
        + struct.pack(">i", 4 + 1 + 4 + len(after_crc))  # length: epoch + magic + crc + rest
        + struct.pack(">i", -1)  # partitionLeaderEpoch
        + struct.pack(">b", 2)  # magic
        + struct.pack(">I", crc)
        + after_crc
    )


def test_golden_batch_byte_for_byte() -> None:
    golden = _golden_single_record_batch()
    assert len(golden) == HEADER_SIZE + 9
    ours = encode_batch([(b"k", b"v", [], TS)], producer_id=1000, producer_epoch=0, base_sequence=0)
    assert ours == golden
    # The CRC of this exact batch, pinned: any change to the layout or the CRC range shows here.
    assert struct.unpack_from(">I", ours, 17)[0] == crc32c.crc32c(ours[21:]) == 0x5FC9226A
    header = parse_header_untrusted(ours)
    assert header == BatchHeader(0, 58, -1, 2, 0x5FC9226A, 0, 0, TS, TS, 1000, 0, 0, 1)
    assert header.size == len(ours)
    assert batch_crc_ok(ours, 0, header)
    assert decode_records_untrusted(ours) == [Record(0, TS, b"k", b"v", ())]


def test_header_struct_matches_constants() -> None:
    assert rec._HEADER.size == HEADER_SIZE
    assert LOG_OVERHEAD == 12


def test_known_varint_encodings() -> None:
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(63) == b"\x7e"
    assert encode_varint(-64) == b"\x7f"
    assert encode_varint(64) == b"\x80\x01"
    assert encode_varint(300) == b"\xd8\x04"
    assert encode_varint(INT64_MAX) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert encode_varint(INT64_MIN) == b"\xff" * 9 + b"\x01"


# ---------------------------------------------------------------------------------------------
# kafka-python's codec as the referee


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_decodes_our_batches(codec: Compression) -> None:
    _require_codec(codec)
    records = _sample_records(300)
    batch = encode_batch(
        records,
        base_offset=4242,
        producer_id=77,
        producer_epoch=3,
        base_sequence=10,
        transactional=True,
        compression=codec,
    )
    theirs = DefaultRecordBatch(bytearray(batch))
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert theirs.is_transactional and not theirs.is_control_batch
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (77, 3, 10)
    assert theirs.last_sequence == 10 + 299
    assert theirs.max_timestamp == max(r[3] for r in records)
    decoded = list(theirs)
    assert [r.offset for r in decoded] == list(range(4242, 4242 + 300))
    assert [(r.key, r.value, list(r.headers), r.timestamp) for r in decoded] == _expected(records)


@pytest.mark.parametrize("codec", list(Compression))
def test_we_decode_kafka_python_batches(codec: Compression) -> None:
    _require_codec(codec)
    records = _sample_records(300)
    builder = DefaultRecordBatchBuilder(2, codec, True, 77, 3, 10, batch_size=1 << 24)
    for i, (key, value, headers, ts) in enumerate(records):
        assert builder.append(i, ts, key, value, headers) is not None
    batch = bytes(builder.build())
    header = parse_header_untrusted(batch)
    assert batch_crc_ok(batch, 0, header)
    assert header.compression == codec
    assert header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 10)
    assert header.records_count == 300 and header.last_offset_delta == 299
    decoded = decode_records_untrusted(batch)
    assert [r.offset for r in decoded] == list(range(300))
    assert _as_tuples(decoded) == _expected(records)


def test_uncompressed_batches_are_identical_to_kafka_python() -> None:
    # kafka-python writes partitionLeaderEpoch 0; otherwise the layouts must agree to the byte.
    records = _sample_records(200)
    builder = DefaultRecordBatchBuilder(2, 0, False, 5, 1, 0, batch_size=1 << 24)
    for i, (key, value, headers, ts) in enumerate(records):
        builder.append(i, ts, key, value, headers)
    ours = encode_batch(
        records, producer_id=5, producer_epoch=1, base_sequence=0, partition_leader_epoch=0
    )
    assert ours == bytes(builder.build())


def test_log_append_time_uses_max_timestamp_like_kafka_python() -> None:
    records = [(None, b"a", [], TS + 5), (None, b"b", [], TS + 9), (None, b"c", [], TS)]
    batch = encode_batch(records, timestamp_type=1)
    header = parse_header_untrusted(batch)
    assert header.timestamp_type == 1 and header.max_timestamp == TS + 9
    assert [r.timestamp for r in decode_records_untrusted(batch)] == [TS + 9] * 3
    assert [r.timestamp for r in DefaultRecordBatch(bytearray(batch))] == [TS + 9] * 3


@given(st.integers(min_value=INT64_MIN, max_value=INT64_MAX))
def test_varint_round_trip_and_matches_kafka_python(value: int) -> None:
    encoded = encode_varint(value)
    assert decode_varint(encoded + b"\xaa", 0) == (value, len(encoded))
    theirs = bytearray()
    kafka_encode_varint(value, theirs.append)
    assert encoded == bytes(theirs)
    assert kafka_decode_varint(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize(
    "value", [0, -1, 1, 63, -64, 64, INT32_MAX, -(2**31), INT64_MAX, INT64_MIN]
)
def test_varint_extremes_round_trip_at_an_offset(value: int) -> None:
    buf = memoryview(b"\x05\x06" + encode_varint(value))
    assert decode_varint(buf, 2) == (value, len(buf))


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1])
def test_varint_outside_int64_is_refused(value: int) -> None:
    with pytest.raises(ValueError):
        encode_varint(value)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x80", b"\xff\xff", b"\xff" * 10 + b"\x01", b"\xff" * 9 + b"\x02"],
    ids=["empty", "unterminated", "unterminated2", "11-bytes", "over-64-bits"],
)
def test_bad_varints(data: bytes) -> None:
    with pytest.raises(CorruptFrameError):
        decode_varint(data, 0)


# ---------------------------------------------------------------------------------------------
# Round trips

keys_or_values = st.none() | st.binary(max_size=300)
headers_strategy = st.lists(
    st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3
)
record_strategy = st.tuples(
    keys_or_values,
    keys_or_values,
    headers_strategy,
    st.integers(min_value=0, max_value=2**42),
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(record_strategy, min_size=1, max_size=60),
    base_offset=st.integers(min_value=0, max_value=2**62),
    base_sequence=st.integers(min_value=-1, max_value=INT32_MAX),
    codec=st.sampled_from([Compression.NONE, Compression.GZIP]),
)
def test_round_trip(records, base_offset, base_sequence, codec) -> None:
    batch = encode_batch(
        records,
        base_offset=base_offset,
        producer_id=9 if base_sequence >= 0 else -1,
        producer_epoch=2 if base_sequence >= 0 else -1,
        base_sequence=base_sequence,
        compression=codec,
    )
    header = parse_header_untrusted(batch)
    assert header.size == len(batch)
    assert batch_crc_ok(batch, 0, header)
    assert header.base_timestamp == records[0][3]
    assert header.max_timestamp == max(r[3] for r in records)
    assert header.last_offset == base_offset + len(records) - 1
    decoded = decode_records_untrusted(batch)
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(records)))
    assert _as_tuples(decoded) == _expected(records)
    # The referee agrees on every generated batch too.
    theirs = [
        (r.key, r.value, list(r.headers), r.timestamp) for r in DefaultRecordBatch(bytearray(batch))
    ]
    assert theirs == _expected(records)


def test_large_fields_use_long_varints() -> None:
    # Lengths and deltas beyond the lookup tables (>= 8192) and negative/huge timestamp deltas.
    records = [
        (b"k" * 10_000, b"v" * 70_000, [("h" * 200, b"x" * 9000)], TS),
        (None, b"", [], TS - 10**12),
        (b"", None, [], TS + 10**12),
    ] + [(None, b"", [], TS)] * 9000
    batch = encode_batch(records)
    decoded = decode_records_untrusted(batch)
    assert _as_tuples(decoded) == _expected(records)
    assert decoded[-1].offset == len(records) - 1
    assert _as_tuples(list(DefaultRecordBatch(bytearray(batch)))) == _expected(records)


def test_decoding_from_bytearray_and_memoryview_inside_a_larger_buffer() -> None:
    records = _sample_records(20)
    batch = encode_batch(records, base_offset=100)
    framed = bytearray(b"\xee" * 7 + batch + b"\xdd" * 5)
    for buf in (framed, memoryview(framed), bytes(framed)):
        header = parse_header_untrusted(buf, 7)
        assert batch_crc_ok(buf, 7, header)
        assert _as_tuples(decode_records_untrusted(buf, 7)) == _expected(records)
        assert _as_tuples(decode_records_untrusted(buf, 7, header)) == _expected(records)
        assert list(iter_batches_untrusted(buf, 7, 7 + len(batch))) == [(7, header)]


def test_iter_and_decode_many_batches() -> None:
    batches = [encode_batch(_sample_records(n), base_offset=o) for n, o in ((3, 0), (5, 3), (1, 8))]
    blob = b"".join(batches)
    positions = [pos for pos, _ in iter_batches_untrusted(blob)]
    assert positions == [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    decoded = list(decode_batches_untrusted(blob))
    assert [h.base_offset for h, _ in decoded] == [0, 3, 8]
    assert [r.offset for _, rs in decoded for r in rs] == list(range(9))


def test_header_properties() -> None:
    batch = encode_batch(
        [(None, b"x", [], TS)] * 4,
        base_offset=10,
        producer_id=1,
        producer_epoch=0,
        base_sequence=5,
        transactional=True,
        compression=Compression.GZIP,
    )
    header = parse_header_untrusted(batch)
    assert header.compression is Compression.GZIP
    assert header.is_transactional and not header.is_control
    assert header.timestamp_type == 0
    assert header.last_offset == 13
    assert header.last_sequence == 8


@pytest.mark.parametrize(
    ("base_sequence", "last_offset_delta", "expected"),
    [
        (INT32_MAX, 0, INT32_MAX),
        (INT32_MAX, 1, 0),
        (INT32_MAX - 1, 3, 1),
        (INT32_MAX - 10, 10, INT32_MAX),
        (0, 4, 4),
        (-1, 4, -1),
    ],
)
def test_last_sequence_wraps_past_int32_max(base_sequence, last_offset_delta, expected) -> None:
    header = BatchHeader(0, 49, -1, 2, 0, 0, last_offset_delta, 0, 0, 1, 0, base_sequence, 1)
    assert header.last_sequence == expected


def test_last_sequence_wrap_agrees_with_kafka_python() -> None:
    batch = encode_batch(
        [(None, b"x", [], TS)] * 3, producer_id=1, producer_epoch=0, base_sequence=INT32_MAX - 1
    )
    # Sequences INT32_MAX - 1, INT32_MAX, 0.
    assert parse_header_untrusted(batch).last_sequence == 0
    assert DefaultRecordBatch(bytearray(batch)).last_sequence == 0


# ---------------------------------------------------------------------------------------------
# Control batches


@pytest.mark.parametrize("commit", [True, False])
def test_control_batch(commit: bool) -> None:
    batch = encode_control_batch(
        producer_id=4000,
        producer_epoch=7,
        commit=commit,
        coordinator_epoch=12,
        timestamp_ms=TS,
        base_offset=55,
    )
    header = parse_header_untrusted(batch)
    assert header.attributes == 0x30
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4000, 7, -1)
    assert (header.records_count, header.last_offset_delta, header.base_offset) == (1, 0, 55)
    assert batch_crc_ok(batch, 0, header)
    [record] = decode_records_untrusted(batch)
    assert record.offset == 55 and record.timestamp == TS and record.headers == ()
    assert record.key == (b"\x00\x00\x00\x01" if commit else b"\x00\x00\x00\x00")
    assert record.value == b"\x00\x00\x00\x00\x00\x0c"
    expected_type = ControlType.COMMIT if commit else ControlType.ABORT
    assert parse_control_record(record) == (expected_type, 12)
    [theirs] = list(DefaultRecordBatch(bytearray(batch)))
    assert theirs.commit is commit and theirs.abort is not commit


def test_control_record_accepts_later_versions_with_extra_bytes() -> None:
    record = Record(0, TS, b"\x00\x01\x00\x01\xff", b"\x00\x01\x00\x00\x00\x03\xff\xff", ())
    assert parse_control_record(record) == (ControlType.COMMIT, 3)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, b"\x00\x00\x00\x00\x00\x00"),
        (b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00"),  # short key
        (b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x00"),  # unknown type
        (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x00"),  # negative key version
        (b"\x00\x00\x00\x01", None),
        (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00"),  # short value
        (b"\x00\x00\x00\x01", b"\xff\xff\x00\x00\x00\x00"),  # negative value version
    ],
)
def test_bad_control_records(key, value) -> None:
    with pytest.raises(CorruptFrameError):
        parse_control_record(Record(0, TS, key, value, ()))


# ---------------------------------------------------------------------------------------------
# In-place patches and the bytes the CRC covers


def test_patch_base_offset_and_leader_epoch_keep_crc_valid() -> None:
    records = _sample_records(10)
    batch = encode_batch(records)
    buf = bytearray(b"\x00" * 3 + batch)
    patch_base_offset(buf, 3, 1_000_000)
    patch_partition_leader_epoch(memoryview(buf), 3, 42)
    header = parse_header_untrusted(buf, 3)
    assert header.base_offset == 1_000_000 and header.partition_leader_epoch == 42
    assert header.crc == parse_header_untrusted(batch).crc
    assert batch_crc_ok(buf, 3, header)
    decoded = decode_records_untrusted(buf, 3)
    assert [r.offset for r in decoded] == list(range(1_000_000, 1_000_010))
    assert DefaultRecordBatch(bytearray(buf[3:])).validate_crc()


def test_crc_covers_exactly_bytes_from_attributes_to_the_end() -> None:
    batch = encode_batch(_sample_records(3))
    header = parse_header_untrusted(batch)
    outside = [*range(0, 8), *range(12, 16)]  # baseOffset, partitionLeaderEpoch
    for i in outside:
        flipped = bytearray(batch)
        flipped[i] ^= 0x40
        assert batch_crc_ok(flipped, 0, parse_header_untrusted(flipped)), i
    for i in range(21, len(batch)):
        flipped = bytearray(batch)
        flipped[i] ^= 0x01
        assert not batch_crc_ok(flipped, 0, header), i
    assert not batch_crc_ok(batch[:-1], 0, header)  # truncated: not ok, no exception


def test_decode_batches_rejects_a_crc_mismatch() -> None:
    batch = bytearray(encode_batch(_sample_records(3)))
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptFrameError, match="CRC"):
        list(decode_batches_untrusted(batch))


# ---------------------------------------------------------------------------------------------
# Bad headers and truncation


def test_header_needs_61_bytes() -> None:
    batch = encode_batch(_sample_records(1))
    with pytest.raises(CorruptFrameError):
        parse_header_untrusted(batch[:60])
    with pytest.raises(CorruptFrameError):
        parse_header_untrusted(batch, len(batch) - 60)
    parse_header_untrusted(batch[:61])  # the rest of the batch is not its business


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "match"),
    [
        (16, ">b", 1, "magic"),
        (16, ">b", 3, "magic"),
        (8, ">i", 48, "length"),
        (8, ">i", -1, "length"),
        (57, ">i", -1, "records count"),
        (23, ">i", -2, "offset delta"),
        (22, ">b", 5, "codec"),
        (22, ">b", 7, "codec"),
    ],
)
def test_bad_header_fields(offset, fmt, value, match) -> None:
    batch = bytearray(encode_batch(_sample_records(2)))
    struct.pack_into(fmt, batch, offset, value)
    with pytest.raises(CorruptFrameError, match=match):
        parse_header_untrusted(batch)
    with pytest.raises(CorruptFrameError):
        list(iter_batches_untrusted(batch))
    with pytest.raises(CorruptFrameError):
        decode_records_untrusted(batch)
    with pytest.raises(CorruptFrameError):
        list(decode_batches_untrusted(batch))


def test_iter_batches_rejects_truncation() -> None:
    first = encode_batch(_sample_records(4))
    second = encode_batch(_sample_records(4), base_offset=4)
    blob = first + second
    for cut in (len(blob) - 1, len(first) + 30, len(first) + 61):
        it = iter_batches_untrusted(blob[:cut])
        assert next(it)[0] == 0
        with pytest.raises(CorruptFrameError):
            next(it)
    with pytest.raises(CorruptFrameError, match="truncated"):
        list(iter_batches_untrusted(blob, 0, len(blob) - 1))  # end inside the buffer
    with pytest.raises(CorruptFrameError):
        decode_records_untrusted(first[:-1])


def test_decode_batches_ignores_a_trailing_partial_batch() -> None:
    first = encode_batch(_sample_records(4))
    second = encode_batch(_sample_records(4), base_offset=4)
    for cut in range(len(first), len(first) + len(second)):
        decoded = list(decode_batches_untrusted(first + second[: cut - len(first)]))
        assert [h.base_offset for h, _ in decoded] == [0]
    assert list(decode_batches_untrusted(b"")) == []


# ---------------------------------------------------------------------------------------------
# Bad record sections

ONE_RECORD = b"\x10\x00\x00\x00\x02k\x02v\x00"  # the golden record: key b"k", value b"v"
LONG_RECORD = b"\x70\x00\x00\x00\x01\x64" + b"v" * 50 + b"\x00"  # null key, 50-byte value


@pytest.mark.parametrize(
    ("section", "count", "match"),
    [
        (LONG_RECORD, 2, "past the end"),  # fewer records than recordsCount
        (ONE_RECORD + ONE_RECORD, 1, "left after 1 records"),
        (ONE_RECORD, 10**9, "does not fit"),  # absurd count: refused before looping
        (b"\x12" + ONE_RECORD[1:] + b"\x00", 1, "declares"),  # length longer than the fields
        (b"\x0e" + ONE_RECORD[1:] + b"\x00", 1, "declares"),  # length shorter than the fields
        (b"\x7f" + ONE_RECORD[1:], 1, "bad record length"),  # -64
        (b"\x10\x00\x00\x00\x03k\x02v\x00", 1, "bad key length"),  # -2
        (b"\x10\x00\x00\x00\x02k\x05v\x00", 1, "bad value length"),  # -3
        (b"\x10\x00\x00\x00\x02k\x02v\x01", 1, "bad header count"),  # -1
        (b"\x10\x00\x00\x00\x02k\x02v\x02", 1, "bad header count"),  # 1, no bytes for it
        (b"\x14\x00\x00\x00\x02k\x02v\x02\x01\x00", 1, "bad header key length"),  # -1
        (b"\x16\x00\x00\x00\x02k\x02v\x02\x02\xff\x00", 1, "UTF-8"),
        (b"\x16\x00\x00\x00\x02k\x02v\x02\x02h\x03", 1, "bad header value length"),  # -2
        (b"\x10\x00" + b"\xff" * 11, 1, "longer than 10 bytes"),  # timestamp delta
        (b"\xff" * 8, 1, "past the end"),  # record length varint never ends
        (b"\x0c\x00\x00\x00\x7e" + b"abcdefg", 1, "past the end"),  # key of 63 bytes
    ],
)
def test_garbage_record_sections(section: bytes, count: int, match: str) -> None:
    batch = _with_section(section, count)
    with pytest.raises(CorruptFrameError, match=match):
        decode_records_untrusted(batch)
    with pytest.raises(CorruptFrameError, match=match):
        list(decode_batches_untrusted(batch))


def test_section_helper_builds_a_valid_batch() -> None:
    # Guards the cases above: the same helper with well-formed records decodes fine.
    assert decode_records_untrusted(_with_section(ONE_RECORD, 1)) == [Record(0, TS, b"k", b"v", ())]
    assert decode_records_untrusted(_with_section(LONG_RECORD, 1)) == [
        Record(0, TS, None, b"v" * 50, ())
    ]
    header_section = b"\x18\x00\x00\x00\x02k\x02v\x02\x02h\x02x"
    assert decode_records_untrusted(_with_section(header_section, 1))[0].headers == (("h", b"x"),)
    null_header = b"\x16\x00\x00\x00\x02k\x02v\x02\x02h\x01"
    assert decode_records_untrusted(_with_section(null_header, 1))[0].headers == (("h", None),)


def test_record_attributes_are_signed_int8() -> None:
    section = b"\x10\x05\x00\x00\x02k\x02v\x00" + b"\x10\xff\x00\x02\x02k\x02v\x00"
    assert [r.attributes for r in decode_records_untrusted(_with_section(section, 2))] == [5, -1]


def test_empty_batch_from_compaction_decodes_to_no_records() -> None:
    assert decode_records_untrusted(_with_section(b"", 0)) == []


def test_bad_gzip_data() -> None:
    good = zlib.compress(ONE_RECORD, 6, 31)
    for section in (good[:-3], good[:10], b"\x1f\x8b" + b"\x00" * 20, b"not gzip at all"):
        with pytest.raises(CorruptFrameError):
            decode_records_untrusted(_with_section(section, 1, attributes=Compression.GZIP))
    records = decode_records_untrusted(_with_section(good, 1, attributes=Compression.GZIP))
    assert records == [Record(0, TS, b"k", b"v", ())]


def test_concatenated_gzip_members_are_read() -> None:
    section = zlib.compress(ONE_RECORD, 6, 31) + zlib.compress(
        b"\x10\x00\x00\x02\x02k\x02w\x00", 6, 31
    )
    records = decode_records_untrusted(_with_section(section, 2, attributes=Compression.GZIP))
    assert [(r.offset, r.value) for r in records] == [(0, b"v"), (1, b"w")]


def test_decompression_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rec, "_MAX_UNCOMPRESSED_SIZE", 10_000)
    batch = encode_batch([(None, b"\x00" * 20_000, [], TS)], compression=Compression.GZIP)
    assert len(batch) < 200  # a tiny batch claiming 20 KB once inflated
    with pytest.raises(CorruptFrameError, match="expand"):
        decode_records_untrusted(batch)


@pytest.mark.parametrize("codec", [Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_missing_codec_package(codec: Compression, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, OPTIONAL_CODECS[codec], None)  # makes the import fail
    with pytest.raises(ValueError, match=rec._CODEC_PACKAGES[codec][1]):
        encode_batch([(None, b"v", [], TS)], compression=codec)
    batch = _with_section(b"\x00" * 8, 1, attributes=codec)
    with pytest.raises(CorruptFrameError, match=codec.name.lower()):
        decode_records_untrusted(batch)


@pytest.mark.parametrize("codec", [Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_optional_codecs_reject_garbage(codec: Compression) -> None:
    _require_codec(codec)
    good = encode_batch(_sample_records(30), compression=codec)
    header = parse_header_untrusted(good)
    for section in (good[HEADER_SIZE:-5], b"\x00garbage" * 4):
        batch = _with_section(section, header.records_count, attributes=codec)
        with pytest.raises(CorruptFrameError):
            decode_records_untrusted(batch)


# ---------------------------------------------------------------------------------------------
# Encoder argument errors


@pytest.mark.parametrize(
    "kwargs",
    [
        {"transactional": True},  # transactional without a producer id
        {"timestamp_type": 2},
        {"producer_epoch": 40_000},  # int16 overflow
        {"base_sequence": 2**31},
        {"base_offset": 2**63},
    ],
)
def test_encode_batch_argument_errors(kwargs) -> None:
    with pytest.raises(ValueError):
        encode_batch([(None, b"v", [], TS)], **kwargs)


def test_encode_batch_needs_records() -> None:
    with pytest.raises(ValueError):
        encode_batch([])


# ---------------------------------------------------------------------------------------------
# Fuzz: bad bytes only ever raise CorruptFrameError

VALID = encode_batch(_sample_records(6), producer_id=3, producer_epoch=0, base_sequence=0)
VALID_GZIP = encode_batch(_sample_records(6), compression=Compression.GZIP)


def _decode_everything(buf: bytes | bytearray) -> None:
    for call in (
        lambda: list(iter_batches_untrusted(buf)),
        lambda: list(decode_batches_untrusted(buf)),
        lambda: decode_records_untrusted(buf),
    ):
        try:
            call()
        except CorruptFrameError:
            pass


@settings(deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes(data: bytes) -> None:
    _decode_everything(data)
    # Behind a valid header, so that the record decoder is reached.
    _decode_everything(_with_section(data, len(data) % 9))
    _decode_everything(_with_section(data, len(data) % 9, attributes=Compression.GZIP))


@settings(deadline=None)
@given(
    base=st.sampled_from([VALID, VALID_GZIP]),
    edits=st.lists(
        st.tuples(st.integers(min_value=0, max_value=len(VALID) - 1), st.integers(0, 255)),
        min_size=1,
        max_size=4,
    ),
    cut=st.integers(min_value=0, max_value=len(VALID)),
    fix_crc=st.booleans(),
)
def test_fuzz_mutated_batches(base: bytes, edits, cut: int, fix_crc: bool) -> None:
    batch = bytearray(base)
    for index, byte in edits:
        batch[index % len(batch)] = byte
    if fix_crc:
        try:
            _recrc(batch)
        except CorruptFrameError:
            pass
    _decode_everything(batch)
    _decode_everything(batch[:cut])


def test_a_missing_codec_names_its_pypi_package_and_the_extra():
    import tomllib
    from pathlib import Path

    from protocol.records import codec_import, missing_codec

    assert codec_import("gzip") is None and codec_import("none") is None
    message = missing_codec("snappy")
    assert "python-snappy" in message and "minibroker[compression]" in message
    pyproject = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())
    extra = " ".join(pyproject["project"]["optional-dependencies"]["compression"])
    for codec in ("snappy", "lz4", "zstd"):
        assert codec_import(codec)[1] in extra


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
@pytest.mark.parametrize("producer", [(-1, -1, -1, False), (7, 2, 40, True)])
def test_build_batch_returns_encode_batch_bytes_and_their_header(codec, producer) -> None:
    pid, epoch, seq, transactional = producer
    records = [(b"k", b"v" * 30, [("h", b"x")], 1_700_000_000_000 + i) for i in range(3)]
    options = dict(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                   transactional=transactional, compression=codec)
    buf, header = rec.build_batch(records, **options)
    assert isinstance(buf, bytearray)
    assert bytes(buf) == encode_batch(records, **options)
    assert header == parse_header_untrusted(buf)


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00\x01x", b"k" * 200])
@pytest.mark.parametrize("value", [None, b"", b"v" * 60, b"v" * 9000])
def test_build_record_batch_is_build_batch_of_one_record(key, value) -> None:
    """The one-record builder (coordinator records) makes build_batch's bytes and header, varint
    lengths of one, two and three bytes and null keys and values included."""
    built = rec.build_record_batch(key, value, 1_700_000_000_000)
    assert built == rec.build_batch([(key, value, (), 1_700_000_000_000)])
    assert built[1] == parse_header_untrusted(built[0])
    assert decode_records_untrusted(built[0])[0].key == key


@pytest.mark.parametrize("commit", [True, False])
def test_build_control_batch_returns_encode_control_batch_bytes_and_their_header(commit) -> None:
    buf, header = rec.build_control_batch(9, 3, commit, 17, 1_700_000_000_000)
    assert bytes(buf) == encode_control_batch(producer_id=9, producer_epoch=3, commit=commit,
                                              coordinator_epoch=17, timestamp_ms=1_700_000_000_000)
    assert header == parse_header_untrusted(buf)


@pytest.mark.parametrize("value_size", [0, 900, 950, 960, 970, 1000, 5000])
def test_the_crc_is_the_same_whether_the_batch_is_copied_or_viewed(value_size: int) -> None:
    # _finish_batch takes the CRC over a copy of a small batch and a view of a large one
    value = bytes(range(256)) * (value_size // 256) + bytes(value_size % 256)
    out = bytearray(encode_batch([(b"k", value, (), 1_700_000_000_000)]))
    header = parse_header_untrusted(out)
    assert batch_crc_ok(out, 0, header)
    assert header.crc == crc32c.crc32c(bytes(out[21:]))
