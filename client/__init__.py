"""minibroker's Python client: a trio engine (``client.aio``) with blocking facades.

``Producer`` (idempotent by default, transactional with ``transactional.id``), ``Consumer``
(assign or subscribe, read_committed by default) and ``Admin`` take Kafka-style configuration
dicts and speak only the pinned Kafka protocol subset, so they also work against Kafka itself.
"""

from client.admin import Admin
from client.consumer import Consumer
from client.producer import Producer
from client.structs import (
    AclBinding,
    AclBindingFilter,
    AlterConfigOp,
    ConfigResource,
    ConsumerGroupMetadata,
    ConsumerRecord,
    NewTopic,
    OffsetAndMetadata,
    RecordMetadata,
    TopicPartition,
    TransactionHandle,
)

__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "Admin",
    "AlterConfigOp",
    "ConfigResource",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "NewTopic",
    "OffsetAndMetadata",
    "Producer",
    "RecordMetadata",
    "TopicPartition",
    "TransactionHandle",
]
