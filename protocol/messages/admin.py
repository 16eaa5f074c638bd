"""CreateTopics v2 (api key 19) and DeleteTopics v1 (api key 20).

CreateTopics v2
Request:  topics [name STRING, num_partitions INT32, replication_factor INT16,
                  assignments [partition_index INT32, broker_ids [INT32]],
                  configs [name STRING, value NULLABLE_STRING]],
          timeout_ms INT32, validate_only BOOLEAN
Response: throttle_time_ms INT32, topics [name STRING, error_code INT16, error_message NULLABLE_STRING]

num_partitions / replication_factor are -1 when ``assignments`` gives the replicas explicitly.
Clients send CreateTopics to Metadata's controller_id.

DeleteTopics v1
Request:  topic_names [STRING], timeout_ms INT32
Response: throttle_time_ms INT32, responses [name STRING, error_code INT16]
"""

from construct import Struct

from protocol.api_keys import ApiKey
from protocol.messages._registry import register
from protocol.primitives import Array, Bool, Int16, Int32, NullableString, String

CreateTopicsRequestV2 = Struct(
    "topics" / Array(
        Struct(
            "name" / String,
            "num_partitions" / Int32,
            "replication_factor" / Int16,
            "assignments" / Array(
                Struct("partition_index" / Int32, "broker_ids" / Array(Int32))
            ),
            "configs" / Array(Struct("name" / String, "value" / NullableString)),
        )
    ),
    "timeout_ms" / Int32,
    "validate_only" / Bool,
)

CreateTopicsResponseV2 = Struct(
    "throttle_time_ms" / Int32,
    "topics" / Array(
        Struct("name" / String, "error_code" / Int16, "error_message" / NullableString)
    ),
)

CREATE_TOPICS_V2 = register(
    ApiKey.CREATE_TOPICS, 2, CreateTopicsRequestV2, CreateTopicsResponseV2
)

DeleteTopicsRequestV1 = Struct(
    "topic_names" / Array(String),
    "timeout_ms" / Int32,
)

DeleteTopicsResponseV1 = Struct(
    "throttle_time_ms" / Int32,
    "responses" / Array(Struct("name" / String, "error_code" / Int16)),
)

DELETE_TOPICS_V1 = register(
    ApiKey.DELETE_TOPICS, 1, DeleteTopicsRequestV1, DeleteTopicsResponseV1
)
