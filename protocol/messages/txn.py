"""Transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26), WriteTxnMarkers
(27), TxnOffsetCommit (28).

AddPartitionsToTxn (to the transaction coordinator, before transactional Produce): v1 = v0
(throttling); v2 may answer PRODUCER_FENCED (KIP-588); v3 flexible; v4+ are the broker-to-broker
batched form (KIP-890: several transactions, verify_only) and not declared here. Field names are
those of v0-3 (Kafka renamed them ``v3_and_below_*``; the bytes are the same).
AddOffsetsToTxn (the group's offsets partition joins the transaction): v1 = v0; v2
PRODUCER_FENCED; v3 flexible; v4 may answer TRANSACTION_ABORTABLE (KIP-890).
EndTxn: v1 = v0; v2 PRODUCER_FENCED; v3 flexible; v4 TRANSACTION_ABORTABLE; v5 answers the
producer id and epoch (transaction version 2, KIP-890 part 2).
WriteTxnMarkers (broker-internal): v1 flexible.
TxnOffsetCommit (to the *group* coordinator; the offsets stay pending until the marker): v1 = v0;
v2 committed_leader_epoch; v3 flexible, with the consumer's generation, member id and instance id
(KIP-447 fencing); v4 TRANSACTION_ABORTABLE.
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

ADD_PARTITIONS_TO_TXN = declare(
    ApiKey.ADD_PARTITIONS_TO_TXN, valid="0-3", flexible="3+",
    request=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("topics", "[]", fields=[F("name", "string"), F("partitions", "[]int32")]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]", fields=[
            F("name", "string"),
            F("results", "[]", fields=[F("partition_index", "int32"), F("error_code", "int16")]),
        ]),
    ],
)

ADD_OFFSETS_TO_TXN = declare(
    ApiKey.ADD_OFFSETS_TO_TXN, valid="0-4", flexible="3+",
    request=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("group_id", "string"),
    ],
    response=[F("throttle_time_ms", "int32"), F("error_code", "int16")],
)

END_TXN = declare(
    ApiKey.END_TXN, valid="0-5", flexible="3+",
    request=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("committed", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("producer_id", "int64", "5+", default=-1),
        F("producer_epoch", "int16", "5+", default=-1),
    ],
)

WRITE_TXN_MARKERS = declare(
    ApiKey.WRITE_TXN_MARKERS, valid="0-1", flexible="1+",
    request=[
        F("markers", "[]", fields=[
            F("producer_id", "int64"),
            F("producer_epoch", "int16"),
            F("transaction_result", "bool"),
            F("topics", "[]", fields=[F("name", "string"), F("partition_indexes", "[]int32")]),
            F("coordinator_epoch", "int32"),
        ]),
    ],
    response=[
        F("markers", "[]", fields=[
            F("producer_id", "int64"),
            F("topics", "[]", fields=[
                F("name", "string"),
                F("partitions", "[]", fields=[
                    F("partition_index", "int32"), F("error_code", "int16"),
                ]),
            ]),
        ]),
    ],
)

TXN_OFFSET_COMMIT = declare(
    ApiKey.TXN_OFFSET_COMMIT, valid="0-5", flexible="3+",
    request=[
        F("transactional_id", "string"),
        F("group_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("generation_id", "int32", "3+", default=-1),
        F("member_id", "string", "3+"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
        F("topics", "[]", fields=[
            F("name", "string"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"),
                F("committed_offset", "int64"),
                F("committed_leader_epoch", "int32", "2+", default=-1),
                F("committed_metadata", "string", nullable="0+"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]", fields=[
            F("name", "string"),
            F("partitions", "[]", fields=[F("partition_index", "int32"), F("error_code", "int16")]),
        ]),
    ],
)
