"""One home for the broker's internal topics and the keys that place records in them.

Kafka places a consumer group in ``__consumer_offsets`` and a transactional id in
``__transaction_state`` at partition ``Utils.abs(key.hashCode()) % partitions``, where ``hashCode``
is Java's ``String.hashCode`` (``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, in int32
arithmetic) and ``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0 instead of leaving it negative.
Using the same function (``partition_for``) keeps a data directory's layout what a Kafka user
would predict.

``__consumer_offsets`` holds committed offsets (``broker/group/``); a group's partition there is
the one AddOffsetsToTxn adds to a transaction and TxnOffsetCommit writes to, so both ask
``offsets_partition`` here. ``__transaction_state`` holds the transaction coordinator's log
(``broker/txn/txn_log.py``). Clients may read neither's data through Produce, CreateTopics or
DeleteTopics, and Metadata reports them as internal.
"""

from __future__ import annotations

import struct

TopicPartition = tuple[str, int]

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


def offsets_partition_count(existing: int | None, configured: int) -> int:
    """Partitions of ``__consumer_offsets``: the topic's (``existing``) if it exists, else
    ``offsets.topic.num.partitions`` (the count it will be created with)."""
    return existing or configured


def offsets_partition(group_id: str, partition_count: int) -> TopicPartition:
    """The ``__consumer_offsets`` partition that holds ``group_id``'s offsets."""
    return CONSUMER_OFFSETS_TOPIC, partition_for(group_id, partition_count)


_UINT32 = 0xFFFFFFFF
_INT32_MIN = -(1 << 31)


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()`` of ``s``: a signed 32-bit int."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for unit in struct.unpack(f">{len(data) // 2}H", data):
        h = (31 * h + unit) & _UINT32
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, n: int) -> int:
    """Partition of ``key`` among ``n`` partitions: ``Utils.abs(hashCode) % n`` as in Kafka."""
    if n <= 0:
        raise ValueError(f"partition count must be positive, not {n}")
    h = java_string_hash(key)
    return (0 if h == _INT32_MIN else abs(h)) % n
