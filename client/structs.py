"""Small value types shared by the producer, the consumer and the admin client."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where a produced record landed. ``offset`` is -1 when the broker did not say (acks=0, or a
    duplicate the broker no longer remembers the offset of)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_type: int = 0  # 0 CreateTime, 1 LogAppendTime


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str | None = None


class ConsumerGroupMetadata(NamedTuple):
    """What ``send_offsets_to_transaction`` needs to know of a consumer's group membership."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""


class TransactionHandle(NamedTuple):
    """An open transaction that another process may finish (commit or abort) with EndTxn.

    Made by ``Producer.transaction_handle()``; finished by ``Admin.end_transaction(handle, commit)``.
    ``empty`` is True when the transaction never added a partition or offsets to the coordinator:
    there is nothing to end then, and ``end_transaction`` does nothing.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    empty: bool = False

    def to_dict(self) -> dict:
        return self._asdict()

    @classmethod
    def from_dict(cls, data: dict) -> TransactionHandle:
        return cls(
            str(data["transactional_id"]),
            int(data["producer_id"]),
            int(data["producer_epoch"]),
            bool(data.get("empty", False)),
        )


class NewTopic(NamedTuple):
    name: str
    num_partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1
    configs: dict[str, str] | None = None


class PartitionInfo(NamedTuple):
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0


class TopicDescription(NamedTuple):
    name: str
    partitions: tuple[PartitionInfo, ...]
    is_internal: bool = False


class GroupListing(NamedTuple):
    group_id: str
    protocol_type: str


class MemberDescription(NamedTuple):
    member_id: str
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...]


class GroupDescription(NamedTuple):
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    error_code: int = 0


class TransactionListing(NamedTuple):
    transactional_id: str
    producer_id: int
    state: str


class TransactionDescription(NamedTuple):
    """The transaction coordinator's view of a transactional id."""

    transactional_id: str
    state: str  # Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, ...
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int  # -1 when no transaction has started
    partitions: tuple[TopicPartition, ...]
