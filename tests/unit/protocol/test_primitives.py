"""Unsigned varints of the flexible versions: the one-byte table against the general loop."""

from __future__ import annotations

import io

import pytest

from protocol.primitives import encode_uvarint, read_uvarint


def _reference(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@pytest.mark.parametrize("value", [*range(0, 300), 2**14 - 1, 2**14, 2**21, 2**31 - 1, 2**32 - 1])
def test_encode_uvarint_is_leb128_and_reads_back(value: int) -> None:
    encoded = encode_uvarint(value)
    assert type(encoded) is bytes
    assert encoded == _reference(value)
    assert len(encoded) == 1 if value < 0x80 else len(encoded) > 1
    assert read_uvarint(io.BytesIO(encoded)) == value


@pytest.mark.parametrize("value", [-1, -128])
def test_encode_uvarint_refuses_negative_values(value: int) -> None:
    with pytest.raises(ValueError):
        encode_uvarint(value)
