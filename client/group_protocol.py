"""The consumer's embedded protocol inside JoinGroup / SyncGroup, and the partition assignors.

Kafka's "consumer" protocol type carries two opaque byte strings (big-endian, non-flexible
encodings as in the wire protocol)::

    Subscription v0  (JoinGroup protocols[].metadata, one per member)
      version      int16    0 (later versions append fields; readers ignore what follows)
      topics       [string]
      user_data    nullable bytes

    Assignment v0    (SyncGroup assignments[].assignment, from the leader to each member)
      version      int16
      partitions   [topic string, partitions [int32]]
      user_data    nullable bytes

The group leader (the member the coordinator names in the JoinGroup response) runs the assignor
over every member's subscription and sends the result in its SyncGroup. Assignors are pure
functions ``(members: {member_id: [topics]}, partition_counts: {topic: n}) -> {member_id:
[TopicPartition]}``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from client.structs import TopicPartition
from protocol.bounded import BoundedReader
from protocol.errors import CorruptFrameError

PROTOCOL_TYPE = "consumer"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    return _I16.pack(len(data)) + data


def encode_subscription(topics: Sequence[str], user_data: bytes | None = None) -> bytes:
    parts = [_I16.pack(0), _I32.pack(len(topics))]
    parts.extend(_string(t) for t in sorted(topics))
    parts.append(_I32.pack(-1) if user_data is None else _I32.pack(len(user_data)) + user_data)
    return b"".join(parts)


def encode_assignment(
    partitions: Sequence[TopicPartition], user_data: bytes | None = None
) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    parts = [_I16.pack(0), _I32.pack(len(by_topic))]
    for topic in sorted(by_topic):
        parts.append(_string(topic))
        indexes = sorted(by_topic[topic])
        parts.append(_I32.pack(len(indexes)))
        parts.extend(_I32.pack(i) for i in indexes)
    parts.append(_I32.pack(-1) if user_data is None else _I32.pack(len(user_data)) + user_data)
    return b"".join(parts)


def decode_subscription_untrusted(data: bytes) -> list[str]:
    """The topics of a Subscription (any version; fields after the topics are ignored)."""
    reader = BoundedReader(bytes(data), "consumer protocol data")
    if reader.i16() < 0:
        raise CorruptFrameError("negative subscription version")
    return [reader.string() for _ in range(reader.count(min_size=2))]


def decode_assignment_untrusted(data: bytes) -> list[TopicPartition]:
    """The partitions of an Assignment; an empty byte string means no partitions."""
    if not data:
        return []
    reader = BoundedReader(bytes(data), "consumer protocol data")
    if reader.i16() < 0:
        raise CorruptFrameError("negative assignment version")
    result: list[TopicPartition] = []
    for _ in range(reader.count(min_size=2)):
        topic = reader.string()
        n = reader.count(min_size=4)
        result.extend(TopicPartition(topic, reader.i32()) for _ in range(n))
    return result


# -- assignors ----------------------------------------------------------------------------------


def range_assign(
    members: Mapping[str, Sequence[str]], partition_counts: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """Kafka's RangeAssignor: per topic, members sorted by id take contiguous ranges; the first
    ``partitions % members`` members get one partition more."""
    result: dict[str, list[TopicPartition]] = {m: [] for m in members}
    topics = sorted({t for subscribed in members.values() for t in subscribed})
    for topic in topics:
        count = partition_counts.get(topic, 0)
        consumers = sorted(m for m, subscribed in members.items() if topic in subscribed)
        if not consumers or count <= 0:
            continue
        per_member, extra = divmod(count, len(consumers))
        for i, member in enumerate(consumers):
            start = i * per_member + min(i, extra)
            length = per_member + (1 if i < extra else 0)
            result[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
    return result


def roundrobin_assign(
    members: Mapping[str, Sequence[str]], partition_counts: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """Kafka's RoundRobinAssignor: all partitions in (topic, partition) order dealt to the sorted
    members in turn, skipping members not subscribed to the partition's topic."""
    result: dict[str, list[TopicPartition]] = {m: [] for m in members}
    consumers = sorted(members)
    if not consumers:
        return result
    subscribed = {m: set(t) for m, t in members.items()}
    topics = sorted({t for ts in members.values() for t in ts})
    turn = 0
    for topic in topics:
        for partition in range(partition_counts.get(topic, 0)):
            for _ in range(len(consumers)):
                member = consumers[turn % len(consumers)]
                turn += 1
                if topic in subscribed[member]:
                    result[member].append(TopicPartition(topic, partition))
                    break
    return result


ASSIGNORS = {"range": range_assign, "roundrobin": roundrobin_assign}
