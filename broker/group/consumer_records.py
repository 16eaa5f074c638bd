"""Consumer-group (KIP-848) records in ``__consumer_offsets``: what survives a restart of a
consumer-protocol group. Pure: no I/O, no clock.

The record types and layouts are Kafka's (``ConsumerGroup*Key/Value.json`` of the group
coordinator): a key is an int16 record type followed by non-flexible fields (``str`` = int16
length + UTF-8); a value is an int16 version (0) followed by a flexible body (compact strings and
arrays: unsigned varint length + 1, 0 = null; a tagged-field section, empty here, at the end of
every struct)::

    type 3  ConsumerGroupMetadata           key: group        value: epoch int32
    type 5  ConsumerGroupMemberMetadata      key: group, member
            value: instance_id str?, rack_id str?, client_id str, client_host str,
                   subscribed_topic_names [str], subscribed_topic_regex str?,
                   rebalance_timeout_ms int32, server_assignor str?,
                   tag 0: classic_member_metadata? (a member speaking the classic protocol:
                          session_timeout_ms int32, supported_protocols [name str, metadata bytes])
    type 6  ConsumerGroupTargetAssignmentMetadata  key: group  value: assignment_epoch int32,
            tag 0: assignment_timestamp int64 (when it was computed, KIP-1263; absent: 0)
    type 7  ConsumerGroupTargetAssignmentMember    key: group, member
            value: topic_partitions [topic_id uuid, partitions [int32]]
    type 8  ConsumerGroupCurrentMemberAssignment   key: group, member
            value: member_epoch int32, previous_member_epoch int32, state int8,
                   assigned_partitions [topic_id uuid, partitions [int32]],
                   partitions_pending_revocation [same]

A null value is a tombstone. Records of other types (offset commits 0/1, classic group
metadata 2, types this module does not write) are not this module's: ``decode_key_untrusted``
returns None for them. Assignments name topics by id (a topic deleted and created again is
another topic), so encoding and decoding take the name <-> id lookups.

Replay (``ConsumerGroupReplay``) keeps the latest value of each key (the same rule compaction
applies) and builds the groups at the end, so the order of records within a group's change does
not matter; a group without its metadata record (type 3) is not restored.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable

from broker.group.assignors import Assignment
from broker.group.consumer_group import (
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from broker.group.modern_records import LatestRecords, RecordTypes
from protocol.bounded import BoundedReader
from protocol.records import encode_batch

GROUP_METADATA = 3
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_MEMBER = 8
_GROUP_KEYS = (GROUP_METADATA, TARGET_METADATA)
_MEMBER_KEYS = (MEMBER_METADATA, TARGET_MEMBER, CURRENT_MEMBER)

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

TopicIdOf = Callable[[str], "uuid.UUID | None"]
TopicNameOf = Callable[[uuid.UUID], "str | None"]


# -- encoding -------------------------------------------------------------------------------------


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _str16(value: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    return _INT16.pack(len(data)) + data


def _cstr(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    data = value.encode("utf-8")
    return _uvarint(len(data) + 1) + data


def _ctopics(assignment: Assignment, topic_id: TopicIdOf,
             epochs: dict[tuple[str, int], int] | None = None) -> bytes:
    """TopicPartitions; with ``epochs``, each topic's AssignmentEpochs (tag 0, one per
    partition, in the same order)."""
    items = []
    for topic, indexes in sorted(assignment.items()):
        tid = topic_id(topic)
        if tid is None or not indexes:
            continue
        ordered = sorted(indexes)
        tags = b"\x00"
        if epochs is not None:
            values = _uvarint(len(ordered) + 1) + b"".join(
                _INT32.pack(epochs.get((topic, i), -1)) for i in ordered)
            tags = b"\x01" + b"\x00" + _uvarint(len(values)) + values
        items.append(tid.bytes + _uvarint(len(ordered) + 1)
                     + b"".join(_INT32.pack(i) for i in ordered) + tags)
    return _uvarint(len(items) + 1) + b"".join(items)


def _classic_tag(classic: ClassicMetadata | None) -> bytes:
    """The member metadata value's tagged fields: ClassicMemberMetadata (tag 0) for a member
    that speaks the classic protocol: session_timeout_ms int32, supported_protocols
    [name str, metadata bytes]."""
    if classic is None:
        return b"\x00"
    body = _INT32.pack(classic.session_timeout_ms) + _uvarint(len(classic.protocols) + 1)
    for name, metadata in classic.protocols:
        body += _cstr(name) + _uvarint(len(metadata) + 1) + metadata + b"\x00"
    body += b"\x00"
    return b"\x01" + b"\x00" + _uvarint(len(body)) + body


def _decode_classic_untrusted(data: bytes) -> ClassicMetadata:
    r = _Reader(data)
    session = r.i32()
    protocols = []
    for _ in range(r.compact_count()):
        name = r.compact_string() or ""
        protocols.append((name, r.take(r.compact_count())))
        r.tagged_fields()
    return ClassicMetadata(session, tuple(protocols))


def encode_key(record_type: int, group_id: str, member_id: str | None = None) -> bytes:
    key = _INT16.pack(record_type) + _str16(group_id)
    return key if member_id is None else key + _str16(member_id)


def _value(body: bytes) -> bytes:
    return _INT16.pack(0) + body + b"\x00"  # version 0, then the empty tagged-field section


def group_records(
    group: ConsumerGroup, topic_id: TopicIdOf
) -> list[tuple[bytes, bytes | None]]:
    """The records of what changed in ``group`` since the last call (its dirty flags), in
    Kafka's order: removed members' tombstones, member metadata, the group epoch, target
    assignments, the target's epoch, current assignments. Clears the flags."""
    gid = group.group_id
    out: list[tuple[bytes, bytes | None]] = []
    for member_id in sorted(group.removed_members):
        if member_id in group.members:
            continue
        for record_type in (CURRENT_MEMBER, TARGET_MEMBER, MEMBER_METADATA):
            out.append((encode_key(record_type, gid, member_id), None))
    dirty = [group.members[m] for m in sorted(group.dirty_members) if m in group.members]
    for m in dirty:
        names = m.subscribed_topic_names
        out.append((encode_key(MEMBER_METADATA, gid, m.member_id), _INT16.pack(0)
            + _cstr(m.instance_id) + _cstr(m.rack_id) + _cstr(m.client_id) + _cstr(m.client_host)
            + _uvarint(len(names) + 1) + b"".join(_cstr(n) for n in names)
            + _cstr(m.subscribed_topic_regex) + _INT32.pack(m.rebalance_timeout_ms)
            + _cstr(m.server_assignor) + _classic_tag(m.classic)))
    if group.dirty_group or dirty or group.removed_members:
        out.append((encode_key(GROUP_METADATA, gid), _value(_INT32.pack(group.group_epoch))))
    for m in dirty:
        out.append((encode_key(TARGET_MEMBER, gid, m.member_id),
                    _value(_ctopics(group.target.get(m.member_id, {}), topic_id))))
    if group.dirty_group or dirty:
        stamp = group.assignment_timestamp_ms
        tags = b"\x01\x00\x08" + struct.pack(">q", stamp) if stamp else b"\x00"
        out.append((encode_key(TARGET_METADATA, gid), _INT16.pack(0)
                    + _INT32.pack(group.assignment_epoch) + tags))
    for m in dirty:
        out.append((encode_key(CURRENT_MEMBER, gid, m.member_id), _value(
            _INT32.pack(m.member_epoch) + _INT32.pack(m.previous_member_epoch)
            + bytes([int(m.state) & 0xFF]) + _ctopics(m.assigned, topic_id, m.assignment_epochs)
            + _ctopics(m.pending_revocation, topic_id, m.assignment_epochs))))
    group.dirty_group = False
    group.dirty_members.clear()
    group.removed_members.clear()
    return out


def deleted_group_records(group_id: str) -> list[tuple[bytes, bytes | None]]:
    """Tombstones of a deleted (empty) group."""
    return [(encode_key(TARGET_METADATA, group_id), None),
            (encode_key(GROUP_METADATA, group_id), None)]


def converted_group_records(group_id: str, member_ids: Iterable[str]
                            ) -> list[tuple[bytes, bytes | None]]:
    """Tombstones of every record of a group that became a classic group (its members' and
    the group's, in Kafka's order: members first)."""
    out: list[tuple[bytes, bytes | None]] = []
    for member_id in sorted(set(member_ids)):
        for record_type in (CURRENT_MEMBER, TARGET_MEMBER, MEMBER_METADATA):
            out.append((encode_key(record_type, group_id, member_id), None))
    return out + deleted_group_records(group_id)


def build_batch(records: Iterable[tuple[bytes, bytes | None]], now_ms: int) -> bytearray:
    return bytearray(encode_batch([(key, value, (), now_ms) for key, value in records]))


# -- decoding -------------------------------------------------------------------------------------


class _Reader(BoundedReader):
    """Kafka's primitives (protocol/bounded.py) plus the assignment shape of these records."""

    __slots__ = ()

    def __init__(self, data: bytes) -> None:
        super().__init__(data, "consumer group record")

    def topics(self, topic_name: TopicNameOf,
               epochs: dict[tuple[str, int], int] | None = None) -> Assignment:
        out: dict[str, frozenset[int]] = {}
        for _ in range(self.compact_count(min_size=18)):
            tid = self.uuid()
            ordered = [self.i32() for _ in range(self.compact_count(min_size=4))]
            tagged = self.tagged_fields().get(0)
            name = topic_name(tid)
            if name is None or not ordered:
                continue
            out[name] = frozenset(ordered)
            if epochs is not None and tagged is not None:
                values = _Reader(tagged)
                n = values.compact_count(min_size=4)
                if n == len(ordered):
                    for index in ordered:
                        epochs[(name, index)] = values.i32()
        return out


def decode_key_untrusted(key: bytes | None) -> tuple[int, str, str | None] | None:
    """``(record type, group id, member id or None)``, or None for a record of another kind.
    Raises CorruptFrameError."""
    if key is None or len(key) < 2:
        return None
    reader = _Reader(key)
    record_type = reader.i16()
    if record_type in _GROUP_KEYS:
        return record_type, reader.string(), None
    if record_type in _MEMBER_KEYS:
        return record_type, reader.string(), reader.string()
    return None


def _group_epoch_untrusted(value: bytes) -> int:
    reader = _Reader(value)
    reader.i16()
    return reader.i32()


def _assignment_timestamp_untrusted(value: bytes | None) -> int:
    """The target-assignment metadata's tag 0 (KIP-1263: when the target was computed); 0
    when absent."""
    if value is None:
        return 0
    reader = _Reader(value)
    reader.i16()
    reader.i32()
    stamp = reader.tagged_fields().get(0)
    return struct.unpack(">q", stamp)[0] if stamp is not None and len(stamp) == 8 else 0


_TYPES = RecordTypes(GROUP_METADATA, TARGET_METADATA, MEMBER_METADATA, TARGET_MEMBER,
                     CURRENT_MEMBER)


class ConsumerGroupReplay:
    """Collects the records of ``__consumer_offsets`` at start (``modern_records.py``'s rule:
    each key's latest value); ``groups()`` builds the groups."""

    def __init__(self) -> None:
        self._records: LatestRecords[int] = LatestRecords(
            _TYPES, decode_key_untrusted, _group_epoch_untrusted, "consumer group record")

    def apply_untrusted(self, key: bytes | None, value: bytes | None) -> bool:
        """Take one record; False if it is not a consumer-group record. Raises
        CorruptFrameError."""
        return self._records.apply_untrusted(key, value)

    def groups(self, topic_name: TopicNameOf, now_ms: int) -> list[ConsumerGroup]:
        """The groups, members' sessions starting at ``now_ms``. Raises CorruptFrameError."""
        out = []
        for group_id, state in self._records.groups.items():
            if state.metadata is None:
                continue
            group = ConsumerGroup(
                group_id, group_epoch=state.metadata, assignment_epoch=state.assignment_epoch,
                assignment_timestamp_ms=_assignment_timestamp_untrusted(state.target_metadata))
            for member_id, value in state.members.items():
                r = _Reader(value)
                r.i16()
                m = ConsumerMember(member_id)
                m.instance_id, m.rack_id = r.compact_string(), r.compact_string()
                m.client_id, m.client_host = r.compact_string() or "", r.compact_string() or ""
                m.subscribed_topic_names = tuple(
                    r.compact_string() or "" for _ in range(r.compact_count()))
                m.subscribed_topic_regex = r.compact_string()
                m.rebalance_timeout_ms = r.i32()
                m.server_assignor = r.compact_string()
                classic = r.tagged_fields().get(0)
                if classic is not None:
                    m.classic = _decode_classic_untrusted(classic)
                m.last_heartbeat_ms = now_ms
                current = state.currents.get(member_id)
                if current is not None:
                    c = _Reader(current)
                    c.i16()
                    m.member_epoch, m.previous_member_epoch = c.i32(), c.i32()
                    try:
                        m.state = MemberState(c.i8())
                    except ValueError:
                        m.state = MemberState.STABLE
                    if m.state is MemberState.UNKNOWN:
                        m.state = MemberState.STABLE
                    m.assigned = c.topics(topic_name, m.assignment_epochs)
                    m.pending_revocation = c.topics(topic_name, m.assignment_epochs)
                    if m.state is MemberState.UNREVOKED_PARTITIONS:
                        m.revocation_deadline_ms = now_ms + m.rebalance_timeout_ms
                group.members[member_id] = m
            for member_id, value in state.targets.items():
                if member_id in group.members:
                    t = _Reader(value)
                    t.i16()
                    group.target[member_id] = t.topics(topic_name)
            out.append(group)
        return out
