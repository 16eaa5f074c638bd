"""The consumer group protocol (KIP-848): ConsumerGroupHeartbeat (68), ConsumerGroupDescribe (69).

ConsumerGroupHeartbeat: flexible from v0; v1 adds subscribed_topic_regex (RE2 syntax, resolved by
the broker) and has the member choose its own member id (KIP-1082; v0 members get one from the
coordinator). The request's nullable fields are null when unchanged since the last heartbeat; a
full request (joining, member_epoch 0) carries them all. Assignments name topics by id.
ConsumerGroupDescribe: flexible from v0; v1 adds the member type (KIP-1099: 0 classic, 1 consumer).

Layouts and the meaning of each field: Kafka's ConsumerGroupHeartbeatRequest.json and friends
(clients/src/main/resources/common/message).
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

_TOPIC_PARTITIONS = [F("topic_id", "uuid"), F("partitions", "[]int32")]

CONSUMER_GROUP_HEARTBEAT = declare(
    ApiKey.CONSUMER_GROUP_HEARTBEAT, valid="0-1", flexible="0+",
    request=[
        F("group_id", "string"),
        F("member_id", "string"),
        F("member_epoch", "int32"),
        F("instance_id", "string", nullable="0+", default=None),
        F("rack_id", "string", nullable="0+", default=None),
        F("rebalance_timeout_ms", "int32", default=-1),
        F("subscribed_topic_names", "[]string", nullable="0+", default=None),
        F("subscribed_topic_regex", "string", "1+", nullable="1+", default=None),
        F("server_assignor", "string", nullable="0+", default=None),
        F("topic_partitions", "[]", nullable="0+", default=None, fields=_TOPIC_PARTITIONS),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("member_id", "string", nullable="0+", default=None),
        F("member_epoch", "int32"),
        F("heartbeat_interval_ms", "int32"),
        F("assignment", "struct", nullable="0+", default=None, fields=[
            F("topic_partitions", "[]", fields=_TOPIC_PARTITIONS),
        ]),
    ],
)

_DESCRIBED_ASSIGNMENT = [
    F("topic_partitions", "[]", fields=[
        F("topic_id", "uuid"), F("topic_name", "string"), F("partitions", "[]int32"),
    ]),
]

CONSUMER_GROUP_DESCRIBE = declare(
    ApiKey.CONSUMER_GROUP_DESCRIBE, valid="0-1", flexible="0+",
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
                F("instance_id", "string", nullable="0+", default=None),
                F("rack_id", "string", nullable="0+", default=None),
                F("member_epoch", "int32"),
                F("client_id", "string"),
                F("client_host", "string"),
                F("subscribed_topic_names", "[]string"),
                F("subscribed_topic_regex", "string", nullable="0+", default=None),
                F("assignment", "struct", fields=_DESCRIBED_ASSIGNMENT),
                F("target_assignment", "struct", fields=_DESCRIBED_ASSIGNMENT),
                F("member_type", "int8", "1+", default=-1),
            ]),
            F("authorized_operations", "int32", default=-(2**31)),
        ]),
    ],
)
