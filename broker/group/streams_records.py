"""Streams-group (KIP-1071) records in ``__consumer_offsets``: what survives a restart of a
Streams-protocol group. Pure: no I/O, no clock.

Kafka 4.4's record types and layouts (``StreamsGroup*Key/Value.json`` of the group coordinator,
read from its generated classes): a key is an int16 record type and non-flexible strings; a
value is an int16 version (0) and a flexible body (compact strings and arrays, a tagged-field
section at the end of every struct, empty here)::

    type 17 StreamsGroupMetadata        key: group    value: epoch int32, metadata_hash int64,
            tagged field 1 LastAssignmentConfigs [key str, value str] (the assignment configs
            the target was computed with; absent: none)
    type 19 StreamsGroupMemberMetadata  key: group, member
            value: instance_id str?, rack_id str?, client_id str, client_host str,
                   rebalance_timeout_ms int32, topology_epoch int32, process_id str,
                   user_endpoint {host str, port uint16}? (int8 -1 null / 1 present),
                   client_tags [key str, value str]
    type 20 StreamsGroupTargetAssignmentMetadata  key: group  value: assignment_epoch int32
    type 21 StreamsGroupTargetAssignmentMember    key: group, member
            value: active_tasks, standby_tasks, warmup_tasks: [subtopology_id str, [int32]]
    type 22 StreamsGroupCurrentMemberAssignment   key: group, member
            value: member_epoch int32, previous_member_epoch int32, state int8,
                   active, standby, warmup tasks, then the same three pending revocation
    type 23 StreamsGroupTopology        key: group
            value: epoch int32, subtopologies [subtopology_id str, source_topics [str],
                   source_topic_regex [str], state_changelog_topics [TopicInfo],
                   repartition_sink_topics [str], repartition_source_topics [TopicInfo],
                   copartition_groups [[int16], [int16], [int16]]]
            TopicInfo: name str, partitions int32, replication_factor int16,
                       topic_configs [key str, value str]

A null value is a tombstone. Replay keeps the latest value of each key (compaction's rule) and
builds the groups at the end; a group without its metadata record (17) is not restored.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.group.consumer_records import _cstr, _uvarint, encode_key
from broker.group.modern_records import LatestRecords, RecordTypes
from broker.group.streams_assignor import Tasks, TaskSet
from broker.group.streams_model import (
    MemberState,
    StreamsGroup,
    StreamsMember,
)
from broker.group.streams_topology import (
    CopartitionGroup,
    Subtopology,
    TopicInfo,
    Topology,
)
from protocol.bounded import BoundedReader

GROUP_METADATA = 17
MEMBER_METADATA = 19
TARGET_METADATA = 20
TARGET_MEMBER = 21
CURRENT_MEMBER = 22
TOPOLOGY = 23
LAST_ASSIGNMENT_CONFIGS_TAG = 1  # a tagged field of the group metadata value
_GROUP_KEYS = (GROUP_METADATA, TARGET_METADATA, TOPOLOGY)
_MEMBER_KEYS = (MEMBER_METADATA, TARGET_MEMBER, CURRENT_MEMBER)
_ALL_KEYS = frozenset(_GROUP_KEYS + _MEMBER_KEYS)

_INT16 = struct.Struct(">h")
_UINT16 = struct.Struct(">H")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


def _value(body: bytes) -> bytes:
    return _INT16.pack(0) + body + b"\x00"


def _array(items: list[bytes]) -> bytes:
    return _uvarint(len(items) + 1) + b"".join(items)


def _strings(values: tuple[str, ...]) -> bytes:
    return _array([_cstr(v) for v in values])


def _int16s(values: tuple[int, ...]) -> bytes:
    return _array([_INT16.pack(v) for v in values])


def _tasks(tasks: Tasks) -> bytes:
    return _array([_cstr(s) + _array([_INT32.pack(p) for p in sorted(parts)]) + b"\x00"
                   for s, parts in sorted(tasks.items())])


def _task_set(tasks: TaskSet) -> bytes:
    return _tasks(tasks.active) + _tasks(tasks.standby) + _tasks(tasks.warmup)


def _key_values(pairs: tuple[tuple[str, str], ...]) -> bytes:
    return _array([_cstr(k) + _cstr(v) + b"\x00" for k, v in pairs])


def _topic_info(t: TopicInfo) -> bytes:
    return (_cstr(t.name) + _INT32.pack(t.partitions) + _INT16.pack(t.replication_factor)
            + _key_values(t.configs) + b"\x00")


def encode_topology(topology: Topology) -> bytes:
    subs = []
    for s in topology.subtopologies:
        subs.append(
            _cstr(s.subtopology_id) + _strings(s.source_topics) + _strings(s.source_topic_regex)
            + _array([_topic_info(t) for t in s.state_changelog_topics])
            + _strings(s.repartition_sink_topics)
            + _array([_topic_info(t) for t in s.repartition_source_topics])
            + _array([_int16s(g.source_topics) + _int16s(g.source_topic_regex)
                      + _int16s(g.repartition_source_topics) + b"\x00"
                      for g in s.copartition_groups])
            + b"\x00")
    return _value(_INT32.pack(topology.epoch) + _array(subs))


def group_records(group: StreamsGroup) -> list[tuple[bytes, bytes | None]]:
    """The records of what changed in ``group`` since the last call (its dirty flags), in
    Kafka's order; clears the flags."""
    gid = group.group_id
    out: list[tuple[bytes, bytes | None]] = []
    for member_id in sorted(group.removed_members):
        if member_id in group.members:
            continue
        for record_type in (CURRENT_MEMBER, TARGET_MEMBER, MEMBER_METADATA):
            out.append((encode_key(record_type, gid, member_id), None))
    if group.dirty_topology and group.topology is not None:
        out.append((encode_key(TOPOLOGY, gid), encode_topology(group.topology)))
    dirty = [group.members[m] for m in sorted(group.dirty_members) if m in group.members]
    for m in dirty:
        endpoint = (b"\xff" if m.user_endpoint is None
                    else b"\x01" + _cstr(m.user_endpoint[0]) + _UINT16.pack(m.user_endpoint[1])
                    + b"\x00")
        out.append((encode_key(MEMBER_METADATA, gid, m.member_id), _value(
            _cstr(m.instance_id) + _cstr(m.rack_id) + _cstr(m.client_id) + _cstr(m.client_host)
            + _INT32.pack(m.rebalance_timeout_ms) + _INT32.pack(m.topology_epoch)
            + _cstr(m.process_id) + endpoint + _key_values(m.client_tags))))
    if group.dirty_group or dirty or group.removed_members or group.dirty_topology:
        out.append((encode_key(GROUP_METADATA, gid), _group_metadata(group)))
    for m in dirty:
        out.append((encode_key(TARGET_MEMBER, gid, m.member_id),
                    _value(_task_set(group.target.get(m.member_id, TaskSet())))))
    if group.dirty_group or dirty:
        out.append((encode_key(TARGET_METADATA, gid),
                    _value(_INT32.pack(group.assignment_epoch))))
    for m in dirty:
        out.append((encode_key(CURRENT_MEMBER, gid, m.member_id), _value(
            _INT32.pack(m.member_epoch) + _INT32.pack(m.previous_member_epoch)
            + bytes([int(m.state) & 0xFF]) + _task_set(m.assigned)
            + _task_set(m.pending_revocation))))
    group.dirty_group = False
    group.dirty_topology = False
    group.dirty_members.clear()
    group.removed_members.clear()
    return out


def _group_metadata(group: StreamsGroup) -> bytes:
    body = _INT16.pack(0) + _INT32.pack(group.group_epoch) + _INT64.pack(0)
    if not group.last_assignment_configs:
        return body + b"\x00"
    configs = _key_values(tuple(sorted(group.last_assignment_configs.items())))
    return body + b"\x01" + _uvarint(LAST_ASSIGNMENT_CONFIGS_TAG) + _uvarint(len(configs)) \
        + configs


def deleted_group_records(group_id: str) -> list[tuple[bytes, bytes | None]]:
    """Tombstones of a deleted (empty) group."""
    return [(encode_key(TARGET_METADATA, group_id), None),
            (encode_key(TOPOLOGY, group_id), None),
            (encode_key(GROUP_METADATA, group_id), None)]


# -- decoding -------------------------------------------------------------------------------------


class _Reader(BoundedReader):
    """Kafka's primitives (protocol/bounded.py) with these records' names for them."""

    __slots__ = ()

    def __init__(self, data: bytes) -> None:
        super().__init__(data, "streams group record")

    def cstr(self) -> str | None:
        return self.compact_string()

    def str16(self) -> str:
        return self.string()

    def ccount(self) -> int:
        return self.compact_count()

    def skip_tags(self) -> None:
        self.tagged_fields()


def _read_strings(r: _Reader) -> tuple[str, ...]:
    return tuple(r.cstr() or "" for _ in range(r.ccount()))


def _read_int16s(r: _Reader) -> tuple[int, ...]:
    return tuple(r.i16() for _ in range(r.ccount()))


def _read_key_values(r: _Reader) -> tuple[tuple[str, str], ...]:
    out = []
    for _ in range(r.ccount()):
        k, v = r.cstr() or "", r.cstr() or ""
        r.skip_tags()
        out.append((k, v))
    return tuple(out)


def _read_topic_info(r: _Reader) -> TopicInfo:
    name, partitions, rf = r.cstr() or "", r.i32(), r.i16()
    configs = _read_key_values(r)
    r.skip_tags()
    return TopicInfo(name, partitions, rf, configs)


def _read_tasks(r: _Reader) -> Tasks:
    out: dict[str, frozenset[int]] = {}
    for _ in range(r.ccount()):
        sub = r.cstr() or ""
        parts = frozenset(r.i32() for _ in range(r.ccount()))
        r.skip_tags()
        if parts:
            out[sub] = parts
    return out


def _read_task_set(r: _Reader) -> TaskSet:
    return TaskSet(_read_tasks(r), _read_tasks(r), _read_tasks(r))


def decode_topology_untrusted(value: bytes) -> Topology:
    r = _Reader(value)
    r.i16()
    epoch = r.i32()
    subs = []
    for _ in range(r.ccount()):
        sid = r.cstr() or ""
        sources, regex = _read_strings(r), _read_strings(r)
        changelogs = tuple(_read_topic_info(r) for _ in range(r.ccount()))
        sinks = _read_strings(r)
        repartitions = tuple(_read_topic_info(r) for _ in range(r.ccount()))
        groups = []
        for _ in range(r.ccount()):
            groups.append(CopartitionGroup(_read_int16s(r), _read_int16s(r), _read_int16s(r)))
            r.skip_tags()
        r.skip_tags()
        subs.append(Subtopology(sid, sources, regex, changelogs, sinks, repartitions,
                                tuple(groups)))
    return Topology(epoch, tuple(subs))


def decode_key_untrusted(key: bytes | None) -> tuple[int, str, str | None] | None:
    """``(record type, group id, member id or None)``, or None for a record of another kind."""
    if key is None or len(key) < 2:
        return None
    record_type = _INT16.unpack_from(key)[0]
    if record_type not in _ALL_KEYS:  # the common case at replay: offsets, other groups
        return None
    reader = _Reader(key)
    reader.i16()
    if record_type in _GROUP_KEYS:
        return record_type, reader.str16(), None
    if record_type in _MEMBER_KEYS:
        return record_type, reader.str16(), reader.str16()
    return None


@dataclass(frozen=True)
class _Metadata:
    epoch: int
    last_assignment_configs: dict[str, str]


def _metadata_untrusted(value: bytes) -> _Metadata:
    reader = _Reader(value)
    reader.i16()
    epoch = reader.i32()
    configs: dict[str, str] = {}
    if reader.left >= 8:  # older writers of this module stopped here
        reader.i64()
        tagged = reader.tagged_fields().get(LAST_ASSIGNMENT_CONFIGS_TAG)
        if tagged is not None:
            configs = dict(_read_key_values(_Reader(tagged)))
    return _Metadata(epoch, configs)


_TYPES = RecordTypes(GROUP_METADATA, TARGET_METADATA, MEMBER_METADATA, TARGET_MEMBER,
                     CURRENT_MEMBER, frozenset({TOPOLOGY}))


class StreamsGroupReplay:
    """Collects the streams-group records of ``__consumer_offsets`` (``modern_records.py``'s
    rule: each key's latest value); ``groups()`` builds them."""

    def __init__(self) -> None:
        self._records: LatestRecords[_Metadata] = LatestRecords(
            _TYPES, decode_key_untrusted, _metadata_untrusted, "streams group record")

    def apply_untrusted(self, key: bytes | None, value: bytes | None) -> bool:
        """Take one record; False if it is not a streams-group record. Raises
        CorruptFrameError."""
        return self._records.apply_untrusted(key, value)

    def groups(self, now_ms: int) -> list[StreamsGroup]:
        """The groups, members' sessions starting at ``now_ms``. Raises CorruptFrameError."""
        out = []
        for group_id, state in self._records.groups.items():
            if state.metadata is None:
                continue
            group = StreamsGroup(
                group_id, group_epoch=state.metadata.epoch,
                assignment_epoch=state.assignment_epoch,
                last_assignment_configs=dict(state.metadata.last_assignment_configs))
            topology = state.other.get(TOPOLOGY)
            if topology is not None:
                group.topology = decode_topology_untrusted(topology)
            for member_id, value in state.members.items():
                r = _Reader(value)
                r.i16()
                m = StreamsMember(member_id)
                m.instance_id, m.rack_id = r.cstr(), r.cstr()
                m.client_id, m.client_host = r.cstr() or "", r.cstr() or ""
                m.rebalance_timeout_ms, m.topology_epoch = r.i32(), r.i32()
                m.process_id = r.cstr() or ""
                if r.i8() >= 0:
                    host = r.cstr() or ""
                    port = struct.unpack(">H", r.take(2))[0]
                    r.skip_tags()
                    m.user_endpoint = (host, port)
                m.client_tags = _read_key_values(r)
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
                    m.assigned = _read_task_set(c)
                    m.pending_revocation = _read_task_set(c)
                    if m.state is MemberState.UNREVOKED_TASKS:
                        m.revocation_deadline_ms = now_ms + m.rebalance_timeout_ms
                group.members[member_id] = m
            for member_id, value in state.targets.items():
                if member_id in group.members:
                    t = _Reader(value)
                    t.i16()
                    group.target[member_id] = _read_task_set(t)
            out.append(group)
        return out
