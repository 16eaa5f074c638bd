"""validate_records_untrusted: what the broker checks before storing a batch."""

from __future__ import annotations

import pytest

from protocol.errors import CorruptFrameError
from protocol.records import (
    Compression,
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
