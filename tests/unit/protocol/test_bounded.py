"""protocol/bounded.py: every read of untrusted bytes either returns a value or raises the
caller's error, naming what was read; no count the bytes cannot hold is accepted."""

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.bounded import BoundedReader
from protocol.errors import CorruptFrameError


class RecordError(Exception):
    pass


def test_reads_kafka_primitives_in_order():
    tid = uuid.uuid4()
    data = (struct.pack(">bhiq", -1, 2, 3, 4) + tid.bytes + b"\x96\x01"
            + struct.pack(">h", 2) + b"ab" + struct.pack(">h", -1)
            + struct.pack(">i", 1) + b"z" + struct.pack(">i", -1)
            + b"\x03xy" + b"\x00" + struct.pack(">i", 2) + b"\x03" + b"\x02\x00\x01q\x05\x00")
    r = BoundedReader(data, "test record")
    assert (r.i8(), r.i16(), r.i32(), r.i64()) == (-1, 2, 3, 4)
    assert r.uuid() == tid
    assert r.uvarint() == 150
    assert (r.string(), r.nullable_string()) == ("ab", None)
    assert (r.nullable_bytes(), r.nullable_bytes()) == (b"z", None)
    assert (r.compact_string(), r.compact_string()) == ("xy", None)
    assert r.count() == 2
    assert r.compact_count() == 2
    assert r.tagged_fields() == {0: b"q", 5: b""}
    assert r.left == 0


def test_truncation_raises_the_callers_error_naming_the_record():
    r = BoundedReader(b"\x00", "transaction log record", RecordError)
    with pytest.raises(RecordError, match="transaction log record is truncated"):
        r.i32()


@pytest.mark.parametrize("data, read, problem", [
    (struct.pack(">i", 3) + b"\x00" * 8, lambda r: r.count(min_size=4), "bad array length 3"),
    (struct.pack(">i", -2), lambda r: r.count(), "bad array length -2"),
    (b"\x00", lambda r: r.compact_count(), "bad array length -1"),
    (b"\xff" * 6, lambda r: r.uvarint(), "longer than 5 bytes"),
    (struct.pack(">h", 1) + b"\xc3", lambda r: r.string(), "not UTF-8"),
    (struct.pack(">h", -1), lambda r: r.string(), "null string"),
    (b"\x02\x05\x00\x01\x00", lambda r: r.tagged_fields(), "out of order"),
])
def test_malformed_values_are_refused(data, read, problem):
    with pytest.raises(CorruptFrameError, match=problem):
        read(BoundedReader(data, "group metadata record"))


@given(st.binary(max_size=64), st.lists(st.sampled_from([
    "i8", "i16", "i32", "i64", "uuid", "uvarint", "string", "nullable_string",
    "nullable_bytes", "compact_string", "count", "compact_count", "tagged_fields",
]), max_size=8))
def test_arbitrary_bytes_only_ever_raise_the_callers_error(data, reads):
    r = BoundedReader(data, "fuzzed record", RecordError)
    try:
        for name in reads:
            getattr(r, name)()
    except RecordError:
        pass
    assert 0 <= r.pos <= len(data)
