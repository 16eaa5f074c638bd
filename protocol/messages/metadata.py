"""Metadata v4 (api key 3): topics and partitions, brokers, controller.

Request:  topics [name STRING] (null = all topics), allow_auto_topic_creation BOOLEAN
Response: throttle_time_ms INT32, brokers [node_id INT32, host STRING, port INT32, rack NULLABLE_STRING],
          cluster_id NULLABLE_STRING, controller_id INT32,
          topics [error_code INT16, name STRING, is_internal BOOLEAN,
                  partitions [error_code INT16, partition_index INT32, leader_id INT32,
                              replica_nodes [INT32], isr_nodes [INT32]]]
"""

from construct import Struct

from protocol.api_keys import ApiKey
from protocol.messages._registry import register
from protocol.primitives import Array, Bool, Int16, Int32, NullableArray, NullableString, String

MetadataRequestV4 = Struct(
    "topics" / NullableArray(Struct("name" / String)),
    "allow_auto_topic_creation" / Bool,
)

MetadataResponseV4 = Struct(
    "throttle_time_ms" / Int32,
    "brokers" / Array(
        Struct("node_id" / Int32, "host" / String, "port" / Int32, "rack" / NullableString)
    ),
    "cluster_id" / NullableString,
    "controller_id" / Int32,
    "topics" / Array(
        Struct(
            "error_code" / Int16,
            "name" / String,
            "is_internal" / Bool,
            "partitions" / Array(
                Struct(
                    "error_code" / Int16,
                    "partition_index" / Int32,
                    "leader_id" / Int32,
                    "replica_nodes" / Array(Int32),
                    "isr_nodes" / Array(Int32),
                )
            ),
        )
    ),
)

METADATA_V4 = register(ApiKey.METADATA, 4, MetadataRequestV4, MetadataResponseV4)
