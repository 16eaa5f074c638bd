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

from protocol.bounded import BoundedReader
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


def decode_group_metadata_key_untrusted(key: bytes | None) -> str | None:
    """The group id of a group metadata record key; None for another kind of record."""
    if key is None or len(key) < 2 or _INT16.unpack_from(key, 0)[0] != GROUP_METADATA_KEY_VERSION:
        return None
    reader = BoundedReader(key, "group metadata record")
    reader.pos = 2
    return reader.string()


def decode_group_metadata_value_untrusted(value: bytes | None) -> GroupMetadataRecord | None:
    """The record (None for a tombstone). Raises CorruptFrameError."""
    if value is None:
        return None
    reader = BoundedReader(value, "group metadata record")
    version = reader.i16()
    if not 0 <= version <= GROUP_METADATA_VALUE_VERSION:
        raise CorruptFrameError(f"unknown group metadata value version {version}")
    protocol_type = reader.string()
    generation = reader.i32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    timestamp = reader.i64() if version >= 2 else -1
    count = reader.count()
    members = []
    for _ in range(count):
        member_id = reader.string()
        instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        rebalance_timeout = reader.i32() if version >= 1 else -1
        session_timeout = reader.i32()
        members.append(MemberRecord(
            member_id, instance_id, client_id, client_host,
            session_timeout if rebalance_timeout < 0 else rebalance_timeout, session_timeout,
            reader.nullable_bytes() or b"", reader.nullable_bytes() or b"",
        ))
    return GroupMetadataRecord(protocol_type, generation, protocol, leader, timestamp,
                               tuple(members))
