"""The records of __share_group_state (broker/share/state_log.py)."""

from __future__ import annotations

import struct
import uuid

import pytest

from broker.share.partition_state import StateBatch
from broker.share.state_log import (
    Snapshot,
    StateKey,
    decode_key_untrusted,
    decode_value_untrusted,
    encode_key,
    encode_snapshot,
)
from protocol.errors import CorruptFrameError


def test_round_trip_in_kafkas_layout() -> None:
    key = StateKey("g", uuid.UUID(int=7), 3)
    data = encode_key(key)
    # type 0 (ShareSnapshotKey), then group (int16 length), topic id, partition
    assert data == struct.pack(">hh", 0, 1) + b"g" + uuid.UUID(int=7).bytes + struct.pack(">i", 3)
    assert decode_key_untrusted(data) == key
    snap = Snapshot(10, 0, [StateBatch(10, 12, 0, 2), StateBatch(13, 13, 4, 1)])
    value = encode_snapshot(snap, now_ms=5)
    assert value[:2] == b"\x00\x00"
    assert decode_value_untrusted(data, value) == snap
    assert decode_value_untrusted(data, None) is None


def test_bad_bytes_raise_the_one_error() -> None:
    with pytest.raises(CorruptFrameError):
        decode_key_untrusted(b"\x00")
    with pytest.raises(CorruptFrameError):
        decode_key_untrusted(b"\x00\x00\x00\x05ab")
    key = encode_key(StateKey("g", uuid.UUID(int=7), 3))
    with pytest.raises(CorruptFrameError):
        decode_value_untrusted(key, b"\x00\x00\x01")
    assert decode_key_untrusted(b"\x00\x09whatever") is None  # a type this broker does not read
