"""Group metadata records in ``__consumer_offsets``: what a group's membership looks like after its
last completed rebalance, so that members survive a broker restart. Pure: no I/O, no clock.

Layouts (Kafka's GroupMetadataKey v2 and GroupMetadataValue v0-v3; big-endian, ``str`` = int16
length + UTF-8, ``str?`` = the same with -1 for null, ``bytes`` = int32 length + data, arrays =
int32 count)::

    key   = version                 int16   2 (a group metadata record; 0/1 are offset commits)
            group                   str
    value = version                 int16   3 (0-2 are read too)
            protocol_type           str
            generation              int32
            protocol                str?
            leader                  str?
            current_state_timestamp int64   (v2+)
            members [
              member_id             str
              group_instance_id     str?    (v3+; static membership)
              client_id             str
              client_host           str
              rebalance_timeout     int32   (v1+)
              session_timeout       int32
              subscription          bytes   the member's metadata for the chosen protocol
              assignment            bytes
            ]
    value = null                            tombstone: the group was deleted

The latest record of a group is its state (so a compacted ``__consumer_offsets`` keeps exactly
what is needed); a tombstone deletes it. The coordinator writes one when a generation is settled
(the leader's SyncGroup stored the assignments), when a rebalance ends without members, and a
tombstone when the group is deleted or expires.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from protocol.errors import CorruptFrameError
from protocol.records import encode_batch

GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


@dataclass(frozen=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataRecord:
    protocol_type: str
    generation_id: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...]


# -- encode ---------------------------------------------------------------------------------------


def _str(value: str | None) -> bytes:
    if value is None:
        return _INT16.pack(-1)
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    return _INT16.pack(len(data)) + data


def _bytes(value: bytes) -> bytes:
    return _INT32.pack(len(value)) + value


def encode_group_metadata_key(group_id: str) -> bytes:
    return _INT16.pack(GROUP_METADATA_KEY_VERSION) + _str(group_id)


def encode_group_metadata_value(record: GroupMetadataRecord) -> bytes:
    parts = [
        _INT16.pack(GROUP_METADATA_VALUE_VERSION),
        _str(record.protocol_type),
        _INT32.pack(record.generation_id),
        _str(record.protocol),
        _str(record.leader),
        _INT64.pack(record.current_state_timestamp),
        _INT32.pack(len(record.members)),
    ]
    for m in record.members:
        parts += [
            _str(m.member_id), _str(m.group_instance_id), _str(m.client_id), _str(m.client_host),
            _INT32.pack(m.rebalance_timeout_ms), _INT32.pack(m.session_timeout_ms),
            _bytes(m.subscription), _bytes(m.assignment),
        ]
    return b"".join(parts)


def build_group_metadata_batch(
    records: Sequence[tuple[str, GroupMetadataRecord | None]], now_ms: int
) -> bytearray:
    """One batch with a group metadata record (or tombstone, None) per ``(group_id, record)``."""
    return bytearray(
        encode_batch([
            (encode_group_metadata_key(group_id),
             None if record is None else encode_group_metadata_value(record), (), now_ms)
            for group_id, record in records
        ])
    )


# -- decode ---------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptFrameError("group metadata record is truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(chunk)

    def i16(self) -> int:
        return _INT16.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _INT32.unpack(self._take(4))[0]

    def i64(self) -> int:
        return _INT64.unpack(self._take(8))[0]

    def nullable_str(self) -> str | None:
        n = self.i16()
        if n == -1:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptFrameError(f"bad string in group metadata record: {exc}") from None

    def str(self) -> str:
        value = self.nullable_str()
        if value is None:
            raise CorruptFrameError("null string in group metadata record")
        return value

    def bytes(self) -> bytes:
        n = self.i32()
        return b"" if n == -1 else self._take(n)


def decode_group_metadata_key_untrusted(key: bytes | None) -> str | None:
    """The group id of a group metadata record key; None for another kind of record."""
    if key is None or len(key) < 2 or _INT16.unpack_from(key, 0)[0] != GROUP_METADATA_KEY_VERSION:
        return None
    reader = _Reader(key)
    reader.pos = 2
    return reader.str()


def decode_group_metadata_value_untrusted(value: bytes | None) -> GroupMetadataRecord | None:
    """The record (None for a tombstone). Raises CorruptFrameError."""
    if value is None:
        return None
    reader = _Reader(value)
    version = reader.i16()
    if not 0 <= version <= GROUP_METADATA_VALUE_VERSION:
        raise CorruptFrameError(f"unknown group metadata value version {version}")
    protocol_type = reader.str()
    generation = reader.i32()
    protocol = reader.nullable_str()
    leader = reader.nullable_str()
    timestamp = reader.i64() if version >= 2 else -1
    count = reader.i32()
    if count < 0 or count > len(value):
        raise CorruptFrameError(f"bad member count {count}")
    members = []
    for _ in range(count):
        member_id = reader.str()
        instance_id = reader.nullable_str() if version >= 3 else None
        client_id = reader.str()
        client_host = reader.str()
        rebalance_timeout = reader.i32() if version >= 1 else -1
        session_timeout = reader.i32()
        members.append(MemberRecord(
            member_id, instance_id, client_id, client_host,
            session_timeout if rebalance_timeout < 0 else rebalance_timeout, session_timeout,
            reader.bytes(), reader.bytes(),
        ))
    return GroupMetadataRecord(protocol_type, generation, protocol, leader, timestamp,
                               tuple(members))
