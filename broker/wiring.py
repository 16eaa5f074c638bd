"""The steps that join the group and transaction services: the one place that sees both.

Neither service imports the other. The composition root (``broker/app.py``) builds one
``CrossService``, passes its bound methods to the services as callbacks, and attaches the
services once they exist (they need the callbacks to be built, so the attachment comes second):

- ``markers_durable``: COMMIT/ABORT markers are durable on some partitions. For each
  ``__consumer_offsets`` partition among them, the group coordinator materialises (COMMIT) or drops
  (ABORT) the producer's pending TxnOffsetCommit offsets there. Called by ``MarkerWriter`` for
  EndTxn, timeouts, recovery and WriteTxnMarkers alike.
- ``verify_txn_produce``: the batch of a TxnOffsetCommit goes through the transaction
  coordinator's KIP-890 check, as a transactional Produce does.
- ``offsets_partition``: the ``__consumer_offsets`` partition AddOffsetsToTxn adds to a
  transaction, which is the group service's (``broker/log/topics.py`` has the mapping).
"""

from __future__ import annotations

from typing import Any

from broker.group.service import GroupService
from broker.log.partition import Partition
from broker.log.topics import CONSUMER_OFFSETS_TOPIC, TopicPartition
from broker.txn.manager import TransactionManager


class CrossService:
    def __init__(self) -> None:
        self._groups: GroupService | None = None
        self._transactions: TransactionManager | None = None

    def attach(self, groups: GroupService, transactions: TransactionManager) -> None:
        self._groups = groups
        self._transactions = transactions

    def markers_durable(
        self, partitions: list[TopicPartition], producer_id: int, commit: bool
    ) -> None:
        groups = self._groups
        assert groups is not None, "markers written before the group service was attached"
        for topic, index in partitions:
            if topic == CONSUMER_OFFSETS_TOPIC:
                groups.on_txn_marker(index, producer_id, commit)

    def verify_txn_produce(
        self, partition: Partition, records: Any, transactional_id: str | None
    ) -> None:
        transactions = self._transactions
        assert transactions is not None, "offsets committed before the transactions were attached"
        transactions.verify_produce(partition, records, transactional_id)

    def offsets_partition(self, group_id: str) -> TopicPartition:
        groups = self._groups
        assert groups is not None
        return groups.offsets_topic_partition(group_id)
