"""One home for the broker's internal topics and the keys that place records in them.

``__consumer_offsets`` holds committed offsets (``broker/group/``); a group's partition there is
the one AddOffsetsToTxn adds to a transaction and TxnOffsetCommit writes to, so both ask
``offsets_partition`` here. ``__transaction_state`` holds the transaction coordinator's log
(``broker/txn/txn_log.py``). Clients may read neither's data through Produce, CreateTopics or
DeleteTopics, and Metadata reports them as internal.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.hashing import partition_for

TopicPartition = tuple[str, int]

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


def offsets_partition_count(topics: Mapping[str, int], configured: int) -> int:
    """Partitions of ``__consumer_offsets``: the topic's if it exists, else
    ``offsets.topic.num.partitions`` (the count it will be created with)."""
    return topics.get(CONSUMER_OFFSETS_TOPIC) or configured


def offsets_partition(group_id: str, partition_count: int) -> TopicPartition:
    """The ``__consumer_offsets`` partition that holds ``group_id``'s offsets."""
    return CONSUMER_OFFSETS_TOPIC, partition_for(group_id, partition_count)
