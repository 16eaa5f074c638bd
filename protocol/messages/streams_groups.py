"""The Streams rebalance protocol (KIP-1071): StreamsGroupHeartbeat (88), StreamsGroupDescribe (89).

Both flexible from v0, at Kafka 4.4's versions (0-1, read from Kafka 4.4's generated message
classes):
- StreamsGroupHeartbeat v1 (KIP-1331) has the same request; its response moves
  AcceptableRecoveryLag after TaskOffsetIntervalMs and makes it an int64 (v0: an int32 before it),
  and adds TopologyDescriptionRequired.
- StreamsGroupDescribe v1 (KIP-1331) asks for the topology description; its response adds
  TopologyDescription (null: not stored here), TopologyDescriptionStatus and AssignorName.

The member sends its topology (``Topology``) when it joins (member epoch 0); the nullable task
lists are null when unchanged since the last heartbeat. Tasks are (subtopology id, partition).
Layouts and the meaning of each field: Kafka's StreamsGroupHeartbeatRequest.json and friends
(clients/src/main/resources/common/message).
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

_KEY_VALUE = [F("key", "string"), F("value", "string")]
_TOPIC_INFO = [
    F("name", "string"),
    F("partitions", "int32"),
    F("replication_factor", "int16"),
    F("topic_configs", "[]", fields=_KEY_VALUE),
]
_TASK_IDS = [F("subtopology_id", "string"), F("partitions", "[]int32")]
_TASK_OFFSET = [F("subtopology_id", "string"), F("partition", "int32"), F("offset", "int64")]
_ENDPOINT = [F("host", "string"), F("port", "uint16")]

STREAMS_GROUP_HEARTBEAT = declare(
    ApiKey.STREAMS_GROUP_HEARTBEAT, valid="0-1", flexible="0+",
    request=[
        F("group_id", "string"),
        F("member_id", "string"),
        F("member_epoch", "int32"),
        F("endpoint_information_epoch", "int32"),
        F("instance_id", "string", nullable="0+", default=None),
        F("rack_id", "string", nullable="0+", default=None),
        F("rebalance_timeout_ms", "int32", default=-1),
        F("topology", "struct", nullable="0+", default=None, fields=[
            F("epoch", "int32"),
            F("subtopologies", "[]", fields=[
                F("subtopology_id", "string"),
                F("source_topics", "[]string"),
                F("source_topic_regex", "[]string"),
                F("state_changelog_topics", "[]", fields=_TOPIC_INFO),
                F("repartition_sink_topics", "[]string"),
                F("repartition_source_topics", "[]", fields=_TOPIC_INFO),
                F("copartition_groups", "[]", fields=[
                    F("source_topics", "[]int16"),
                    F("source_topic_regex", "[]int16"),
                    F("repartition_source_topics", "[]int16"),
                ]),
            ]),
        ]),
        F("active_tasks", "[]", nullable="0+", default=None, fields=_TASK_IDS),
        F("standby_tasks", "[]", nullable="0+", default=None, fields=_TASK_IDS),
        F("warmup_tasks", "[]", nullable="0+", default=None, fields=_TASK_IDS),
        F("process_id", "string", nullable="0+", default=None),
        F("user_endpoint", "struct", nullable="0+", default=None, fields=_ENDPOINT),
        F("client_tags", "[]", nullable="0+", default=None, fields=_KEY_VALUE),
        F("task_offsets", "[]", nullable="0+", default=None, fields=_TASK_OFFSET),
        F("task_end_offsets", "[]", nullable="0+", default=None, fields=_TASK_OFFSET),
        F("shutdown_application", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("member_id", "string"),
        F("member_epoch", "int32"),
        F("heartbeat_interval_ms", "int32"),
        F("acceptable_recovery_lag_legacy", "int32", "0"),
        F("task_offset_interval_ms", "int32"),
        F("acceptable_recovery_lag", "int64", "1+", default=-1),
        F("status", "[]", nullable="0+", default=None, fields=[
            F("status_code", "int8"),
            F("status_detail", "string"),
        ]),
        F("active_tasks", "[]", nullable="0+", default=None, fields=_TASK_IDS),
        F("standby_tasks", "[]", nullable="0+", default=None, fields=_TASK_IDS),
        F("warmup_tasks", "[]", nullable="0+", default=None, fields=_TASK_IDS),
        F("topology_description_required", "bool", "1+"),
        F("endpoint_information_epoch", "int32"),
        F("partitions_by_user_endpoint", "[]", nullable="0+", default=None, fields=[
            F("user_endpoint", "struct", fields=_ENDPOINT),
            F("active_partitions", "[]", fields=[F("topic", "string"),
                                                 F("partitions", "[]int32")]),
            F("standby_partitions", "[]", fields=[F("topic", "string"),
                                                  F("partitions", "[]int32")]),
        ]),
    ],
)

_NODE = [
    F("name", "string"),
    F("node_type", "int8"),
    F("source_topics", "[]string"),
    F("sink_topic", "string", nullable="0+", default=None),
    F("stores", "[]string"),
    F("successors", "[]string"),
]
_ASSIGNMENT = [
    F("active_tasks", "[]", fields=_TASK_IDS),
    F("standby_tasks", "[]", fields=_TASK_IDS),
    F("warmup_tasks", "[]", fields=_TASK_IDS),
]

STREAMS_GROUP_DESCRIBE = declare(
    ApiKey.STREAMS_GROUP_DESCRIBE, valid="0-1", flexible="0+",
    request=[
        F("group_ids", "[]string"),
        F("include_authorized_operations", "bool"),
        F("include_topology_description", "bool", "1+"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("groups", "[]", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
            F("group_id", "string"),
            F("group_state", "string"),
            F("group_epoch", "int32"),
            F("assignment_epoch", "int32"),
            F("topology", "struct", nullable="0+", default=None, fields=[
                F("epoch", "int32"),
                F("subtopologies", "[]", nullable="0+", default=None, fields=[
                    F("subtopology_id", "string"),
                    F("source_topics", "[]string"),
                    F("repartition_sink_topics", "[]string"),
                    F("state_changelog_topics", "[]", fields=_TOPIC_INFO),
                    F("repartition_source_topics", "[]", fields=_TOPIC_INFO),
                ]),
            ]),
            F("members", "[]", fields=[
                F("member_id", "string"),
                F("member_epoch", "int32"),
                F("instance_id", "string", nullable="0+", default=None),
                F("rack_id", "string", nullable="0+", default=None),
                F("client_id", "string"),
                F("client_host", "string"),
                F("topology_epoch", "int32"),
                F("process_id", "string"),
                F("user_endpoint", "struct", nullable="0+", default=None, fields=_ENDPOINT),
                F("client_tags", "[]", fields=_KEY_VALUE),
                F("task_offsets", "[]", fields=_TASK_OFFSET),
                F("task_end_offsets", "[]", fields=_TASK_OFFSET),
                F("assignment", "struct", fields=_ASSIGNMENT),
                F("target_assignment", "struct", fields=_ASSIGNMENT),
                F("is_classic", "bool"),
            ]),
            F("authorized_operations", "int32", default=-(2**31)),
            F("topology_description", "struct", "1+", nullable="1+", default=None, fields=[
                F("subtopologies", "[]", fields=[
                    F("subtopology_id", "string"),
                    F("nodes", "[]", fields=_NODE),
                ]),
                F("global_stores", "[]", fields=[
                    F("source", "struct", fields=_NODE),
                    F("processor", "struct", fields=_NODE),
                ]),
            ]),
            F("topology_description_status", "int8", "1+"),
            F("assignor_name", "string", "1+", nullable="1+", default=None),
        ]),
    ],
)
