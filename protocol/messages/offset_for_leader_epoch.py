"""OffsetForLeaderEpoch (api key 23): the end offset of a leader epoch, which a consumer asks after
a leader change to detect a truncated log (KIP-320) and a follower asks to truncate its own.
Kafka 4 serves v2-4 (KIP-896 removed v0-1); flexible from v4."""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

OFFSET_FOR_LEADER_EPOCH = declare(
    ApiKey.OFFSET_FOR_LEADER_EPOCH, valid="2-4", flexible="4+",
    request=[
        F("replica_id", "int32", versions="3+", default=-2),  # -1: a consumer
        F("topics", "[]", fields=[
            F("topic", "string"),
            F("partitions", "[]", fields=[
                F("partition", "int32"),
                F("current_leader_epoch", "int32", default=-1),
                F("leader_epoch", "int32"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]", fields=[
            F("topic", "string"),
            F("partitions", "[]", fields=[
                F("error_code", "int16"),
                F("partition", "int32"),
                F("leader_epoch", "int32", default=-1),
                F("end_offset", "int64", default=-1),
            ]),
        ]),
    ],
)
