"""The records of ``__share_group_state``, in the shapes of Kafka's share coordinator.

Key: ``int16 type`` then, non-flexible, ``group_id string, topic_id uuid, partition int32``;
type 0 is a ShareSnapshot (the whole state of a share partition), type 1 a ShareUpdate (a delta;
never written here, read as a snapshot of what it carries). Value: ``int16 version`` (0) then the
flexible struct: ``snapshot_epoch, state_epoch, leader_epoch int32, start_offset int64,
create_timestamp, write_timestamp int64, state_batches [first_offset int64, last_offset int64,
delivery_state int8, delivery_count int16]`` (ShareUpdate has no state epoch and timestamps).
A null value (tombstone) deletes the share partition's state (DeleteShareGroupOffsets,
DeleteGroups).

The topic is compacted, so the latest snapshot of each key is what a replay keeps.
"""

from __future__ import annotations

import io
import struct
import uuid
from typing import Any, NamedTuple

from broker.share.partition_state import StateBatch
from protocol.errors import CorruptFrameError
from protocol.messages._declare import F, struct_for

SHARE_GROUP_STATE_TOPIC = "__share_group_state"
SNAPSHOT_KEY = 0
UPDATE_KEY = 1

_KEY_FIELDS = [F("group_id", "string"), F("topic_id", "uuid"), F("partition", "int32")]
_BATCHES = F("state_batches", "[]", fields=[
    F("first_offset", "int64"), F("last_offset", "int64"),
    F("delivery_state", "int8"), F("delivery_count", "int16"),
])
_SNAPSHOT_FIELDS = [
    F("snapshot_epoch", "int32"), F("state_epoch", "int32"), F("leader_epoch", "int32"),
    F("start_offset", "int64"),
    F("delivery_complete_count", "int32", tag=0, default=-1),
    F("create_timestamp", "int64"), F("write_timestamp", "int64"), _BATCHES,
]
_UPDATE_FIELDS = [
    F("snapshot_epoch", "int32"), F("leader_epoch", "int32"), F("start_offset", "int64"),
    F("delivery_complete_count", "int32", tag=0, default=-1), _BATCHES,
]
_KEY = struct_for(_KEY_FIELDS, 0, False).compile()
_SNAPSHOT = struct_for(_SNAPSHOT_FIELDS, 0, True).compile()
_UPDATE = struct_for(_UPDATE_FIELDS, 0, True).compile()
_INT16 = struct.Struct(">h")


class StateKey(NamedTuple):
    group_id: str
    topic_id: uuid.UUID
    partition: int


class Snapshot(NamedTuple):
    start_offset: int
    state_epoch: int
    batches: list[StateBatch]


def encode_key(key: StateKey) -> bytes:
    return _INT16.pack(SNAPSHOT_KEY) + _KEY.build(key._asdict())


def encode_snapshot(snapshot: Snapshot, now_ms: int) -> bytes:
    return _INT16.pack(0) + _SNAPSHOT.build({
        "snapshot_epoch": 0, "state_epoch": snapshot.state_epoch, "leader_epoch": 0,
        "start_offset": snapshot.start_offset, "create_timestamp": now_ms,
        "write_timestamp": now_ms,
        "state_batches": [b._asdict() | {"delivery_state": b.state} for b in snapshot.batches],
    })


def _parse(con: Any, data: bytes, offset: int) -> Any:
    stream = io.BytesIO(data)
    stream.seek(offset)
    try:
        return con.parse_stream(stream)
    except CorruptFrameError:
        raise
    except Exception as exc:  # construct, struct, unicode: the one failure mode
        raise CorruptFrameError(f"undecodable share state record: {exc}") from exc


def decode_key_untrusted(data: bytes | None) -> StateKey | None:
    """The key of a record of ``__share_group_state``; None for a type this broker does not
    read. Raises CorruptFrameError."""
    if data is None or len(data) < 2:
        raise CorruptFrameError("share state record without a key")
    (kind,) = _INT16.unpack_from(data, 0)
    if kind not in (SNAPSHOT_KEY, UPDATE_KEY):
        return None
    parsed = _parse(_KEY, data, 2)
    return StateKey(parsed.group_id, parsed.topic_id, parsed.partition)


def decode_value_untrusted(key_data: bytes, data: bytes | None) -> Snapshot | None:
    """The state a record carries (None: a tombstone). Raises CorruptFrameError."""
    if data is None:
        return None
    if len(data) < 2:
        raise CorruptFrameError("share state value is truncated")
    (kind,) = _INT16.unpack_from(key_data, 0)
    parsed = _parse(_SNAPSHOT if kind == SNAPSHOT_KEY else _UPDATE, data, 2)
    return Snapshot(
        parsed.start_offset, getattr(parsed, "state_epoch", 0),
        [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
         for b in parsed.state_batches],
    )
