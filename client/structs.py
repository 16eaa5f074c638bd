"""Small value types shared by the producer, the consumer and the admin client."""

from __future__ import annotations

import uuid
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


def offset_and_metadata(value: int | OffsetAndMetadata) -> tuple[int, str | None]:
    """A committed offset as given to ``commit`` or ``send_offsets_to_transaction`` (a plain
    offset, or with metadata) as ``(offset, metadata)``."""
    if isinstance(value, OffsetAndMetadata):
        return value.offset, value.metadata
    return value, None


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
    topic_id: uuid.UUID | None = None  # Metadata v10+ (KIP-516); None from older brokers


class GroupListing(NamedTuple):
    group_id: str
    protocol_type: str
    state: str = ""  # "" when the broker does not say (ListGroups below v4)
    type: str = ""  # "classic", "consumer", ... ("" below ListGroups v5)


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


class ShareMemberDescription(NamedTuple):
    """A member of a share group (ShareGroupDescribe): its partitions are shared with the other
    members that are assigned them."""
    member_id: str
    client_id: str
    client_host: str
    member_epoch: int
    assignment: tuple[TopicPartition, ...]


class ShareGroupDescription(NamedTuple):
    """A share group (KIP-932) as ShareGroupDescribe answers it."""
    group_id: str
    state: str  # Empty, Stable, Dead
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMemberDescription, ...]


class SharePartitionOffset(NamedTuple):
    """A share group's start offset in one partition (DescribeShareGroupOffsets); -1 for the
    leader epoch or the lag when the broker does not say."""
    start_offset: int
    leader_epoch: int = -1
    lag: int = -1


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


class ConfigResource(NamedTuple):
    """A config resource: ``type`` "topic", "broker" or "client_metrics" (Kafka's resource
    types 2, 4 and 16); ``name`` the topic, the broker's node id as a string, or the client
    metrics subscription (KIP-714)."""

    type: str
    name: str

    @property
    def type_code(self) -> int:
        return RESOURCE_TYPES[self.type]


RESOURCE_TYPES = {"topic": 2, "broker": 4, "client_metrics": 16}
# Kafka's ConfigSource values
CONFIG_SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
}


class ConfigSynonym(NamedTuple):
    name: str
    value: str | None
    source: str


class ConfigEntry(NamedTuple):
    """One config of a resource as DescribeConfigs reports it; ``source`` is Kafka's name
    (``DYNAMIC_TOPIC_CONFIG``, ``STATIC_BROKER_CONFIG``, ``DEFAULT_CONFIG``, ...)."""

    name: str
    value: str | None
    source: str
    read_only: bool
    is_sensitive: bool
    synonyms: tuple[ConfigSynonym, ...] = ()
    documentation: str | None = None

    @property
    def is_default(self) -> bool:
        return self.source == "DEFAULT_CONFIG"


class AlterConfigOp(NamedTuple):
    """One IncrementalAlterConfigs operation: ``op`` "set", "delete", "append" or "subtract"."""

    name: str
    op: str
    value: str | None = None


ALTER_OPS = {"set": 0, "delete": 1, "append": 2, "subtract": 3}


class ProducerState(NamedTuple):
    """An active producer of a partition (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no open transaction here


class LogDirDescription(NamedTuple):
    path: str
    error_code: int
    partitions: dict[TopicPartition, int]  # partition -> size in bytes
    total_bytes: int = -1
    usable_bytes: int = -1


class HangingTransaction(NamedTuple):
    """An open transaction on a partition, older than the longest allowed timeout, that no
    coordinator runs there: its LSO is stuck until it is aborted."""

    partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    transactional_id: str | None  # None: no coordinator knows this producer
    age_ms: int  # since its producer last wrote to the partition


# ACLs: Kafka's names, lower-case (the wire codes are in client/aio/admin/security.py).
ACL_RESOURCE_TYPES = {"any": 1, "topic": 2, "group": 3, "cluster": 4, "transactional_id": 5}
ACL_PATTERN_TYPES = {"any": 1, "match": 2, "literal": 3, "prefixed": 4}
ACL_OPERATIONS = {"any": 1, "all": 2, "read": 3, "write": 4, "create": 5, "delete": 6,
                  "alter": 7, "describe": 8, "cluster_action": 9, "describe_configs": 10,
                  "alter_configs": 11, "idempotent_write": 12}
ACL_PERMISSIONS = {"any": 1, "deny": 2, "allow": 3}


class AclBinding(NamedTuple):
    """``principal`` from ``host`` is ``permission`` (allow/deny) ``operation`` on the resources
    of ``resource_type`` named ``name`` (``pattern_type`` literal: that name, ``*`` = all;
    prefixed: every name starting with it). The cluster resource is named ``kafka-cluster``."""

    resource_type: str
    name: str
    principal: str
    operation: str
    permission: str = "allow"
    pattern_type: str = "literal"
    host: str = "*"


class AclBindingFilter(NamedTuple):
    """What ``describe_acls`` / ``delete_acls`` match: None and ``any`` match everything;
    pattern type ``match``: every binding that applies to the named resource."""

    resource_type: str = "any"
    name: str | None = None
    principal: str | None = None
    operation: str = "any"
    permission: str = "any"
    pattern_type: str = "any"
    host: str | None = None
