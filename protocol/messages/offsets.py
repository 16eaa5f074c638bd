"""Committed consumer offsets: OffsetCommit v2 (api key 8) and OffsetFetch v2 (api key 9).

OffsetCommit v2
Request:  group_id STRING, generation_id INT32, member_id STRING, retention_time_ms INT64,
          topics [name STRING, partitions [partition_index INT32, committed_offset INT64,
                                           committed_metadata NULLABLE_STRING]]
Response: topics [name STRING, partitions [partition_index INT32, error_code INT16]]

generation_id -1 with an empty member_id commits for a group that has no members (manual
assignment); retention_time_ms -1 keeps the broker default.

OffsetFetch v2
Request:  group_id STRING, topics [name STRING, partition_indexes [INT32]] (null = all partitions)
Response: topics [name STRING, partitions [partition_index INT32, committed_offset INT64,
                                           metadata NULLABLE_STRING, error_code INT16]],
          error_code INT16

A partition without a committed offset answers committed_offset -1.
"""

from construct import Struct

from protocol.api_keys import ApiKey
from protocol.messages._registry import register
from protocol.primitives import Array, Int16, Int32, Int64, NullableArray, NullableString, String

OffsetCommitRequestV2 = Struct(
    "group_id" / String,
    "generation_id" / Int32,
    "member_id" / String,
    "retention_time_ms" / Int64,
    "topics" / Array(
        Struct(
            "name" / String,
            "partitions" / Array(
                Struct(
                    "partition_index" / Int32,
                    "committed_offset" / Int64,
                    "committed_metadata" / NullableString,
                )
            ),
        )
    ),
)

OffsetCommitResponseV2 = Struct(
    "topics" / Array(
        Struct(
            "name" / String,
            "partitions" / Array(Struct("partition_index" / Int32, "error_code" / Int16)),
        )
    ),
)

OFFSET_COMMIT_V2 = register(ApiKey.OFFSET_COMMIT, 2, OffsetCommitRequestV2, OffsetCommitResponseV2)

OffsetFetchRequestV2 = Struct(
    "group_id" / String,
    "topics" / NullableArray(Struct("name" / String, "partition_indexes" / Array(Int32))),
)

OffsetFetchResponseV2 = Struct(
    "topics" / Array(
        Struct(
            "name" / String,
            "partitions" / Array(
                Struct(
                    "partition_index" / Int32,
                    "committed_offset" / Int64,
                    "metadata" / NullableString,
                    "error_code" / Int16,
                )
            ),
        )
    ),
    "error_code" / Int16,
)

OFFSET_FETCH_V2 = register(ApiKey.OFFSET_FETCH, 2, OffsetFetchRequestV2, OffsetFetchResponseV2)
