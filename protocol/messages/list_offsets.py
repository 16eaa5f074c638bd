"""ListOffsets v2 (api key 2): the offset of a timestamp, or the earliest / latest offset.

Request:  replica_id INT32, isolation_level INT8,
          topics [name STRING, partitions [partition_index INT32, timestamp INT64]]
Response: throttle_time_ms INT32,
          topics [name STRING, partitions [partition_index INT32, error_code INT16, timestamp INT64,
                                           offset INT64]]

timestamp -1 asks for the latest offset (the last stable offset under read_committed,
isolation_level 1), -2 for the earliest. Clients send replica_id -1.
"""

from construct import Struct

from protocol.api_keys import ApiKey
from protocol.messages._registry import register
from protocol.primitives import Array, Int8, Int16, Int32, Int64, String

ListOffsetsRequestV2 = Struct(
    "replica_id" / Int32,
    "isolation_level" / Int8,
    "topics" / Array(
        Struct(
            "name" / String,
            "partitions" / Array(Struct("partition_index" / Int32, "timestamp" / Int64)),
        )
    ),
)

ListOffsetsResponseV2 = Struct(
    "throttle_time_ms" / Int32,
    "topics" / Array(
        Struct(
            "name" / String,
            "partitions" / Array(
                Struct(
                    "partition_index" / Int32,
                    "error_code" / Int16,
                    "timestamp" / Int64,
                    "offset" / Int64,
                )
            ),
        )
    ),
)

LIST_OFFSETS_V2 = register(ApiKey.LIST_OFFSETS, 2, ListOffsetsRequestV2, ListOffsetsResponseV2)
