"""Replay of the member-epoch protocols' records in ``__consumer_offsets`` (the consumer
protocol's, ``consumer_records.py``, and the Streams protocol's, ``streams_records.py``): the rule
both follow. Pure: no I/O, no clock.

Both write, per group, a metadata record (the group epoch), a target-assignment metadata record
(the assignment epoch) and maybe other group-level records (the Streams topology), and per member
a metadata, a target-assignment and a current-assignment record. ``LatestRecords`` keeps the
latest value of each key (compaction's rule), so the order of records within a group's change
does not matter; a tombstone of the metadata record forgets the group, one of a member record
that record, one of another group-level record its value. Each protocol's module then builds
its groups from ``LatestRecords.groups`` (a group without its metadata record is not restored).
"""

from __future__ import annotations

from collections.abc import Callable, Set
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from protocol.bounded import BoundedReader
from protocol.errors import CorruptFrameError

Metadata = TypeVar("Metadata")

# (record type, group id, member id or None), or None for a record of another kind
KeyDecoder = Callable[[bytes | None], tuple[int, str, str | None] | None]


@dataclass(frozen=True)
class RecordTypes:
    """One protocol's record types."""

    group_metadata: int
    target_metadata: int
    member_metadata: int
    target_member: int
    current_member: int
    other_group_types: Set[int] = frozenset()  # group-level records kept as they are


@dataclass
class GroupRecords(Generic[Metadata]):
    """The latest values of one group's records."""

    metadata: Metadata | None = None  # the parsed metadata value; None: none seen
    assignment_epoch: int = 0
    target_metadata: bytes | None = None  # its latest value, for fields a protocol adds
    other: dict[int, bytes] = field(default_factory=dict)  # other group-level type -> value
    members: dict[str, bytes] = field(default_factory=dict)
    targets: dict[str, bytes] = field(default_factory=dict)
    currents: dict[str, bytes] = field(default_factory=dict)


def assignment_epoch_untrusted(value: bytes, what: str) -> int:
    """A target-assignment metadata value's epoch (int16 version, then int32)."""
    reader = BoundedReader(value, what)
    reader.i16()
    return reader.i32()


class LatestRecords(Generic[Metadata]):
    """Collects one protocol's records; ``groups`` holds what replay keeps of each group.
    ``parse_metadata`` reads a metadata value at once (a corrupt one is skipped like any
    corrupt record)."""

    def __init__(self, types: RecordTypes, decode_key: KeyDecoder,
                 parse_metadata: Callable[[bytes], Metadata], what: str) -> None:
        self._types = types
        self._decode_key = decode_key
        self._parse_metadata = parse_metadata
        self._what = what
        self.groups: dict[str, GroupRecords[Metadata]] = {}

    def apply_untrusted(self, key: bytes | None, value: bytes | None) -> bool:
        """Take one record; False if it is not of this protocol. Raises CorruptFrameError."""
        decoded = self._decode_key(key)
        if decoded is None:
            return False
        record_type, group_id, member_id = decoded
        types = self._types
        if record_type == types.group_metadata:
            if value is None:
                self.groups.pop(group_id, None)
            else:
                metadata = self._parse_metadata(value)
                self.groups.setdefault(group_id, GroupRecords()).metadata = metadata
            return True
        state = self.groups.setdefault(group_id, GroupRecords())
        if record_type == types.target_metadata:
            if value is not None:
                state.assignment_epoch = assignment_epoch_untrusted(value, self._what)
                state.target_metadata = bytes(value)
            return True
        if record_type in types.other_group_types:
            if value is None:
                state.other.pop(record_type, None)
            else:
                state.other[record_type] = bytes(value)
            return True
        if record_type == types.member_metadata:
            table = state.members
        elif record_type == types.target_member:
            table = state.targets
        elif record_type == types.current_member:
            table = state.currents
        else:
            return False
        if member_id is None:
            raise CorruptFrameError(f"{self._what} without a member id")
        if value is None:
            table.pop(member_id, None)
        else:
            table[member_id] = bytes(value)
        return True
