"""DescribeTopicPartitions (api key 75, KIP-966): Metadata's partition view with eligible leader
replicas, paged by a cursor; what Kafka 4's ``kafka-topics.sh --describe`` asks. Flexible from v0
(its only version). An empty topic list means every topic; the answer is sorted by topic name and
holds at most ``response_partition_limit`` partitions, ``next_cursor`` naming where to go on."""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

_CURSOR = [F("topic_name", "string"), F("partition_index", "int32")]

DESCRIBE_TOPIC_PARTITIONS = declare(
    ApiKey.DESCRIBE_TOPIC_PARTITIONS, valid="0", flexible="0+",
    request=[
        F("topics", "[]", fields=[F("name", "string")]),
        F("response_partition_limit", "int32", default=2000),
        F("cursor", "struct", nullable="0+", default=None, fields=_CURSOR),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]", fields=[
            F("error_code", "int16"),
            F("name", "string", nullable="0+"),
            F("topic_id", "uuid"),
            F("is_internal", "bool"),
            F("partitions", "[]", fields=[
                F("error_code", "int16"),
                F("partition_index", "int32"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32", default=-1),
                F("replica_nodes", "[]int32"),
                F("isr_nodes", "[]int32"),
                F("eligible_leader_replicas", "[]int32", nullable="0+", default=None),
                F("last_known_elr", "[]int32", nullable="0+", default=None),
                F("offline_replicas", "[]int32"),
            ]),
            F("topic_authorized_operations", "int32", default=-(2**31)),
        ]),
        F("next_cursor", "struct", nullable="0+", default=None, fields=_CURSOR),
    ],
)
