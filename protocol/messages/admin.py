"""CreateTopics (api key 19) and DeleteTopics (api key 20).

CreateTopics: v1 validate_only and error_message; v2 throttle_time_ms; v3-4 (no change); v5
flexible, the created topic's partitions, replication factor and configs (KIP-525); v6 (no
change); v7 topic ids. num_partitions / replication_factor are -1 when ``assignments`` gives the
replicas explicitly. Clients send CreateTopics to Metadata's controller_id.

DeleteTopics: v1 throttle_time_ms; v2-3 (no change); v4 flexible; v5 error_message; v6 topics by
name or id.
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

CREATE_TOPICS = declare(
    ApiKey.CREATE_TOPICS, valid="0-7", flexible="5+",
    request=[
        F("topics", "[]", fields=[
            F("name", "string"),
            F("num_partitions", "int32"),
            F("replication_factor", "int16"),
            F("assignments", "[]", fields=[
                F("partition_index", "int32"), F("broker_ids", "[]int32"),
            ]),
            F("configs", "[]", fields=[F("name", "string"), F("value", "string", nullable="0+")]),
        ]),
        F("timeout_ms", "int32", default=60000),
        F("validate_only", "bool", "1+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        F("topics", "[]", fields=[
            F("name", "string"),
            F("topic_id", "uuid", "7+"),
            F("error_code", "int16"),
            F("error_message", "string", "1+", nullable="0+", default=None),
            F("topic_config_error_code", "int16", "5+", tag=0),
            F("num_partitions", "int32", "5+", default=-1),
            F("replication_factor", "int16", "5+", default=-1),
            F("configs", "[]", "5+", nullable="5+", fields=[
                F("name", "string"),
                F("value", "string", nullable="0+"),
                F("read_only", "bool"),
                F("config_source", "int8", default=-1),
                F("is_sensitive", "bool"),
            ]),
        ]),
    ],
)

DELETE_TOPICS = declare(
    ApiKey.DELETE_TOPICS, valid="0-6", flexible="4+",
    request=[
        F("topics", "[]", "6+", fields=[
            F("name", "string", nullable="0+", default=None), F("topic_id", "uuid"),
        ]),
        F("topic_names", "[]string", "0-5"),
        F("timeout_ms", "int32"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("responses", "[]", fields=[
            F("name", "string", nullable="6+"),
            F("topic_id", "uuid", "6+"),
            F("error_code", "int16"),
            F("error_message", "string", "5+", nullable="5+", default=None),
        ]),
    ],
)
