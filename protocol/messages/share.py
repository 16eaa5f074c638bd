"""Share groups (KIP-932, "queues for Kafka"): ShareGroupHeartbeat (76), ShareGroupDescribe (77),
ShareFetch (78), ShareAcknowledge (79), DescribeShareGroupOffsets (90, v1 adds the lag),
AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92), at the versions Kafka 4.4 serves.

All four are flexible from their first version. v0 of each was Kafka 4.0's early access, removed in
4.1; v1 is the stable KIP-932 version. ShareFetch v2 and ShareAcknowledge v2 (KIP-1206, KIP-1222)
add the acquire mode, ``is_renew_ack`` and the acknowledge type 4 (Renew), and ShareAcknowledge v2
answers the acquisition lock timeout.

Topics are named by id (uuid) in all four, as the assignment of a ShareGroupHeartbeat is.
Acknowledge types: 0 Gap, 1 Accept, 2 Release, 3 Reject, 4 Renew (v2+); an acknowledgement batch
carries one type for every offset of ``[first_offset, last_offset]`` or one type per offset.
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

_TOPIC_PARTITIONS = [F("topic_id", "uuid"), F("partitions", "[]int32")]

SHARE_GROUP_HEARTBEAT = declare(
    ApiKey.SHARE_GROUP_HEARTBEAT, valid="1", flexible="0+",
    request=[
        F("group_id", "string"),
        F("member_id", "string"),
        F("member_epoch", "int32"),
        F("rack_id", "string", nullable="0+", default=None),
        F("subscribed_topic_names", "[]string", nullable="0+", default=None),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("member_id", "string", nullable="0+", default=None),
        F("member_epoch", "int32"),
        F("heartbeat_interval_ms", "int32"),
        F("assignment", "struct", nullable="0+", fields=[
            F("topic_partitions", "[]", fields=_TOPIC_PARTITIONS),
        ]),
    ],
)

SHARE_GROUP_DESCRIBE = declare(
    ApiKey.SHARE_GROUP_DESCRIBE, valid="1", flexible="0+",
    request=[
        F("group_ids", "[]string"),
        F("include_authorized_operations", "bool"),
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
            F("assignor_name", "string"),
            F("members", "[]", fields=[
                F("member_id", "string"),
                F("rack_id", "string", nullable="0+", default=None),
                F("member_epoch", "int32"),
                F("client_id", "string"),
                F("client_host", "string"),
                F("subscribed_topic_names", "[]string"),
                F("assignment", "struct", fields=[
                    F("topic_partitions", "[]", fields=[
                        F("topic_id", "uuid"), F("topic_name", "string"),
                        F("partitions", "[]int32"),
                    ]),
                ]),
            ]),
            F("authorized_operations", "int32", default=-(2**31)),
        ]),
    ],
)

_ACK_BATCH = [
    F("first_offset", "int64"),
    F("last_offset", "int64"),
    F("acknowledge_types", "[]int8"),
]
_LEADER = [F("leader_id", "int32"), F("leader_epoch", "int32")]
_NODE_ENDPOINTS = F("node_endpoints", "[]", fields=[
    F("node_id", "int32"), F("host", "string"), F("port", "int32"),
    F("rack", "string", nullable="0+", default=None),
])

SHARE_FETCH = declare(
    ApiKey.SHARE_FETCH, valid="1-2", flexible="0+",
    request=[
        F("group_id", "string", nullable="0+", default=None),
        F("member_id", "string", nullable="0+"),
        F("share_session_epoch", "int32"),
        F("max_wait_ms", "int32"),
        F("min_bytes", "int32"),
        F("max_bytes", "int32", default=0x7FFFFFFF),
        F("max_records", "int32", "1+"),
        F("batch_size", "int32", "1+"),
        F("share_acquire_mode", "int8", "2+"),
        F("is_renew_ack", "bool", "2+"),
        F("topics", "[]", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"),
                F("partition_max_bytes", "int32", "0"),
                F("acknowledgement_batches", "[]", fields=_ACK_BATCH),
            ]),
        ]),
        F("forgotten_topics_data", "[]", fields=_TOPIC_PARTITIONS),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("acquisition_lock_timeout_ms", "int32", "1+"),
        F("responses", "[]", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
                F("acknowledge_error_code", "int16"),
                F("acknowledge_error_message", "string", nullable="0+", default=None),
                F("current_leader", "struct", fields=_LEADER),
                F("records", "records", nullable="0"),
                F("acquired_records", "[]", fields=[
                    F("first_offset", "int64"),
                    F("last_offset", "int64"),
                    F("delivery_count", "int16"),
                ]),
            ]),
        ]),
        _NODE_ENDPOINTS,
    ],
)

SHARE_ACKNOWLEDGE = declare(
    ApiKey.SHARE_ACKNOWLEDGE, valid="1-2", flexible="0+",
    request=[
        F("group_id", "string", nullable="0+", default=None),
        F("member_id", "string", nullable="0+"),
        F("share_session_epoch", "int32"),
        F("is_renew_ack", "bool", "2+"),
        F("topics", "[]", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"),
                F("acknowledgement_batches", "[]", fields=_ACK_BATCH),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("acquisition_lock_timeout_ms", "int32", "2+"),
        F("responses", "[]", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
                F("current_leader", "struct", fields=_LEADER),
            ]),
        ]),
        _NODE_ENDPOINTS,
    ],
)

_ERROR = [F("error_code", "int16"), F("error_message", "string", nullable="0+", default=None)]

DESCRIBE_SHARE_GROUP_OFFSETS = declare(
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, valid="0-1", flexible="0+",
    request=[
        F("groups", "[]", fields=[
            F("group_id", "string"),
            F("topics", "[]", nullable="0+", fields=[
                F("topic_name", "string"), F("partitions", "[]int32"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("groups", "[]", fields=[
            F("group_id", "string"),
            F("topics", "[]", fields=[
                F("topic_name", "string"),
                F("topic_id", "uuid"),
                F("partitions", "[]", fields=[
                    F("partition_index", "int32"),
                    F("start_offset", "int64"),
                    F("leader_epoch", "int32"),
                    F("lag", "int64", "1+", default=-1),
                    *_ERROR,
                ]),
            ]),
            *_ERROR,
        ]),
    ],
)

ALTER_SHARE_GROUP_OFFSETS = declare(
    ApiKey.ALTER_SHARE_GROUP_OFFSETS, valid="0", flexible="0+",
    request=[
        F("group_id", "string"),
        F("topics", "[]", fields=[
            F("topic_name", "string"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"), F("start_offset", "int64"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        *_ERROR,
        F("responses", "[]", fields=[
            F("topic_name", "string"),
            F("topic_id", "uuid"),
            F("partitions", "[]", fields=[F("partition_index", "int32"), *_ERROR]),
        ]),
    ],
)

DELETE_SHARE_GROUP_OFFSETS = declare(
    ApiKey.DELETE_SHARE_GROUP_OFFSETS, valid="0", flexible="0+",
    request=[
        F("group_id", "string"),
        F("topics", "[]", fields=[F("topic_name", "string")]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        *_ERROR,
        F("responses", "[]", fields=[F("topic_name", "string"), F("topic_id", "uuid"), *_ERROR]),
    ],
)
