"""ListOffsets (api key 2): the offset of a timestamp, or the earliest / latest offset.

v0 answers a list of offsets (``old_style_offsets``, up to ``max_num_offsets``); v1 one
(timestamp, offset); v2 isolation_level; v3 throttle-on-quota; v4 leader epochs; v5 (no change:
OFFSET_NOT_AVAILABLE); v6 flexible; v7 timestamp -3 (max timestamp, KIP-734); v8 -4 (earliest
local, KIP-405); v9 -5 (latest tiered, KIP-1005); v10 timeout_ms.

timestamp -1 asks for the latest offset (the last stable offset under read_committed,
isolation_level 1), -2 for the earliest. Clients send replica_id -1.
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

LIST_OFFSETS = declare(
    ApiKey.LIST_OFFSETS, valid="0-10", flexible="6+",
    request=[
        F("replica_id", "int32"),
        F("isolation_level", "int8", "2+"),
        F("topics", "[]", fields=[
            F("name", "string"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"),
                F("current_leader_epoch", "int32", "4+", default=-1),
                F("timestamp", "int64"),
                F("max_num_offsets", "int32", "0", default=1),
            ]),
        ]),
        F("timeout_ms", "int32", "10+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        F("topics", "[]", fields=[
            F("name", "string"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("old_style_offsets", "[]int64", "0"),
                F("timestamp", "int64", "1+", default=-1),
                F("offset", "int64", "1+", default=-1),
                F("leader_epoch", "int32", "4+", default=-1),
            ]),
        ]),
    ],
)
