"""Committed consumer offsets: OffsetCommit (api key 8) and OffsetFetch (api key 9).

OffsetCommit: v1 generation/member and a per-partition commit_timestamp; v2-4 retention_time_ms
(v5 drops it); v3 throttle_time_ms; v6 committed_leader_epoch; v7 group_instance_id; v8 flexible;
v9 member epochs of the consumer protocol (KIP-848; for a classic group, the generation).
generation_id -1 with an empty member_id commits for a group that has no members (manual
assignment); retention_time_ms -1 keeps the broker default.

OffsetFetch: v1 = v0 (offsets from Kafka instead of ZooKeeper); v2 top-level error_code and null
topics = all partitions; v3 throttle_time_ms; v5 committed_leader_epoch; v6 flexible; v7
require_stable (KIP-447); v8 a batch of groups (KIP-709); v9 member id and epoch (KIP-848).
A partition without a committed offset answers committed_offset -1.
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

OFFSET_COMMIT = declare(
    ApiKey.OFFSET_COMMIT, valid="0-9", flexible="8+",
    request=[
        F("group_id", "string"),
        F("generation_id", "int32", "1+", default=-1),
        F("member_id", "string", "1+"),
        F("group_instance_id", "string", "7+", nullable="7+", default=None),
        F("retention_time_ms", "int64", "2-4", default=-1),
        F("topics", "[]", fields=[
            F("name", "string"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"),
                F("committed_offset", "int64"),
                F("committed_leader_epoch", "int32", "6+", default=-1),
                F("commit_timestamp", "int64", "1", default=-1),
                F("committed_metadata", "string", nullable="0+"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+"),
        F("topics", "[]", fields=[
            F("name", "string"),
            F("partitions", "[]", fields=[F("partition_index", "int32"), F("error_code", "int16")]),
        ]),
    ],
)

_FETCH_PARTITION = [
    F("partition_index", "int32"),
    F("committed_offset", "int64"),
    F("committed_leader_epoch", "int32", "5+", default=-1),
    F("metadata", "string", nullable="0+"),
    F("error_code", "int16"),
]

OFFSET_FETCH = declare(
    ApiKey.OFFSET_FETCH, valid="0-9", flexible="6+",
    request=[
        F("group_id", "string", "0-7"),
        F("topics", "[]", "0-7", nullable="2-7", fields=[
            F("name", "string"), F("partition_indexes", "[]int32"),
        ]),
        F("groups", "[]", "8+", fields=[
            F("group_id", "string"),
            F("member_id", "string", "9+", nullable="9+", default=None),
            F("member_epoch", "int32", "9+", default=-1),
            F("topics", "[]", nullable="0+", fields=[
                F("name", "string"), F("partition_indexes", "[]int32"),
            ]),
        ]),
        F("require_stable", "bool", "7+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+"),
        F("topics", "[]", "0-7", fields=[
            F("name", "string"), F("partitions", "[]", fields=_FETCH_PARTITION),
        ]),
        F("error_code", "int16", "2-7"),
        F("groups", "[]", "8+", fields=[
            F("group_id", "string"),
            F("topics", "[]", fields=[
                F("name", "string"), F("partitions", "[]", fields=_FETCH_PARTITION),
            ]),
            F("error_code", "int16"),
        ]),
    ],
)
