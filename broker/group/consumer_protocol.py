"""The classic consumer's embedded protocol (protocol type "consumer"): the subscription a member
sends in JoinGroup and the assignment SyncGroup hands back, as the group coordinator reads and
writes them when a group changes protocol (KIP-848's migration). Pure: bytes in, values out.

Layouts (Kafka's ``ConsumerProtocolSubscription.json`` / ``ConsumerProtocolAssignment.json``;
not flexible: int16-length strings, int32-length bytes and arrays, -1 = null)::

    subscription  version int16
                  topics [str]
                  user_data bytes?
                  owned_partitions [topic str, partitions [int32]]   (v1+)
                  generation_id int32                                (v2+)
                  rack_id str?                                       (v3+)
    assignment    version int16
                  assigned_partitions [topic str, partitions [int32]]
                  user_data bytes?

A newer version than Kafka knows is read with the newest layout (its fields are only appended).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.group.assignors import Assignment
from protocol.errors import CorruptFrameError

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: Assignment
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptFrameError("embedded consumer protocol is truncated")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return bytes(chunk)

    def i16(self) -> int:
        return _I16.unpack(self.take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self.take(4))[0]

    def count(self) -> int:
        n = self.i32()
        if n < 0:
            return 0
        if n > len(self.data):
            raise CorruptFrameError(f"bad array length {n} in embedded consumer protocol")
        return n

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptFrameError(f"bad string in embedded consumer protocol: {exc}") from None

    def skip_bytes(self) -> None:
        n = self.i32()
        if n > 0:
            self.take(n)

    def partitions(self) -> Assignment:
        out: dict[str, frozenset[int]] = {}
        for _ in range(self.count()):
            topic = self.string() or ""
            indexes = frozenset(self.i32() for _ in range(self.count()))
            if indexes:
                out[topic] = out.get(topic, frozenset()) | indexes
        return out


def decode_subscription_untrusted(data: bytes) -> Subscription:
    """Raises CorruptFrameError."""
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise CorruptFrameError(f"embedded consumer protocol version {version}")
    topics = tuple(r.string() or "" for _ in range(r.count()))
    r.skip_bytes()
    owned: Assignment = {}
    rack_id = None
    if version >= 1 and r.pos < len(data):
        owned = r.partitions()
        if version >= 2:
            r.i32()
        if version >= 3:
            rack_id = r.string()
    return Subscription(version, topics, owned, rack_id)


def decode_assignment_untrusted(data: bytes) -> Assignment:
    """The assigned partitions (an empty ``data``: none). Raises CorruptFrameError."""
    return decode_assignment_with_user_data_untrusted(data)[0]


def decode_assignment_with_user_data_untrusted(data: bytes) -> tuple[Assignment, bool]:
    """The assigned partitions and whether the assignment carries user data (a custom
    assignor's, which a consumer group could not keep). Raises CorruptFrameError."""
    if not data:
        return {}, False
    r = _Reader(data)
    if r.i16() < 0:
        raise CorruptFrameError("negative embedded consumer protocol version")
    partitions = r.partitions()
    user_data = False
    if r.pos < len(data):
        n = r.i32()
        user_data = n > 0
        if n > 0:
            r.take(n)
    return partitions, user_data


def protocol_version(metadata: bytes) -> int:
    """The version a member's subscription is written in (the one its assignment is written
    in too); 0 if unreadable."""
    return max(_I16.unpack_from(metadata)[0], 0) if len(metadata) >= 2 else 0


def encode_assignment(assignment: Assignment, version: int = 0) -> bytes:
    """An assignment in ``version``'s layout (every version has the same fields), no user data."""
    out = bytearray(_I16.pack(min(max(version, 0), 3)))
    out += _I32.pack(len(assignment))
    for topic, indexes in sorted(assignment.items()):
        name = topic.encode("utf-8")
        out += _I16.pack(len(name)) + name + _I32.pack(len(indexes))
        for index in sorted(indexes):
            out += _I32.pack(index)
    out += _I32.pack(-1)
    return bytes(out)
