"""Transaction APIs: AddPartitionsToTxn v0 (24), AddOffsetsToTxn v0 (25), EndTxn v0 (26),
WriteTxnMarkers v0 (27), TxnOffsetCommit v0 (28).

AddPartitionsToTxn v0 (to the transaction coordinator, before transactional Produce)
Request:  transactional_id STRING, producer_id INT64, producer_epoch INT16,
          topics [name STRING, partitions [INT32]]
Response: throttle_time_ms INT32, results [name STRING, results [partition_index INT32, error_code INT16]]

AddOffsetsToTxn v0 (to the transaction coordinator: the group's offsets partition joins the txn)
Request:  transactional_id STRING, producer_id INT64, producer_epoch INT16, group_id STRING
Response: throttle_time_ms INT32, error_code INT16

EndTxn v0 (to the transaction coordinator)
Request:  transactional_id STRING, producer_id INT64, producer_epoch INT16,
          committed BOOLEAN (true = commit, false = abort)
Response: throttle_time_ms INT32, error_code INT16

WriteTxnMarkers v0 (broker-internal: coordinator -> partition leader; not advertised)
Request:  markers [producer_id INT64, producer_epoch INT16, transaction_result BOOLEAN (true = commit),
                   topics [name STRING, partition_indexes [INT32]], coordinator_epoch INT32]
Response: markers [producer_id INT64,
                   topics [name STRING, partitions [partition_index INT32, error_code INT16]]]

TxnOffsetCommit v0 (to the *group* coordinator; the offsets stay pending until the marker)
Request:  transactional_id STRING, group_id STRING, producer_id INT64, producer_epoch INT16,
          topics [name STRING, partitions [partition_index INT32, committed_offset INT64,
                                           committed_metadata NULLABLE_STRING]]
Response: throttle_time_ms INT32, topics [name STRING, partitions [partition_index INT32, error_code INT16]]

Field names follow Kafka's schemas before KIP-890 renamed the v0-3 AddPartitionsToTxn fields
(``V3AndBelowTransactionalId`` ...): the bytes are the same.
"""

from construct import Struct

from protocol.api_keys import ApiKey
from protocol.messages._registry import register
from protocol.primitives import Array, Bool, Int16, Int32, Int64, NullableString, String

AddPartitionsToTxnRequestV0 = Struct(
    "transactional_id" / String,
    "producer_id" / Int64,
    "producer_epoch" / Int16,
    "topics" / Array(Struct("name" / String, "partitions" / Array(Int32))),
)

AddPartitionsToTxnResponseV0 = Struct(
    "throttle_time_ms" / Int32,
    "results" / Array(
        Struct(
            "name" / String,
            "results" / Array(Struct("partition_index" / Int32, "error_code" / Int16)),
        )
    ),
)

ADD_PARTITIONS_TO_TXN_V0 = register(
    ApiKey.ADD_PARTITIONS_TO_TXN, 0, AddPartitionsToTxnRequestV0, AddPartitionsToTxnResponseV0
)

AddOffsetsToTxnRequestV0 = Struct(
    "transactional_id" / String,
    "producer_id" / Int64,
    "producer_epoch" / Int16,
    "group_id" / String,
)

AddOffsetsToTxnResponseV0 = Struct(
    "throttle_time_ms" / Int32,
    "error_code" / Int16,
)

ADD_OFFSETS_TO_TXN_V0 = register(
    ApiKey.ADD_OFFSETS_TO_TXN, 0, AddOffsetsToTxnRequestV0, AddOffsetsToTxnResponseV0
)

EndTxnRequestV0 = Struct(
    "transactional_id" / String,
    "producer_id" / Int64,
    "producer_epoch" / Int16,
    "committed" / Bool,
)

EndTxnResponseV0 = Struct(
    "throttle_time_ms" / Int32,
    "error_code" / Int16,
)

END_TXN_V0 = register(ApiKey.END_TXN, 0, EndTxnRequestV0, EndTxnResponseV0)

WriteTxnMarkersRequestV0 = Struct(
    "markers" / Array(
        Struct(
            "producer_id" / Int64,
            "producer_epoch" / Int16,
            "transaction_result" / Bool,
            "topics" / Array(Struct("name" / String, "partition_indexes" / Array(Int32))),
            "coordinator_epoch" / Int32,
        )
    ),
)

WriteTxnMarkersResponseV0 = Struct(
    "markers" / Array(
        Struct(
            "producer_id" / Int64,
            "topics" / Array(
                Struct(
                    "name" / String,
                    "partitions" / Array(
                        Struct("partition_index" / Int32, "error_code" / Int16)
                    ),
                )
            ),
        )
    ),
)

WRITE_TXN_MARKERS_V0 = register(
    ApiKey.WRITE_TXN_MARKERS, 0, WriteTxnMarkersRequestV0, WriteTxnMarkersResponseV0
)

TxnOffsetCommitRequestV0 = Struct(
    "transactional_id" / String,
    "group_id" / String,
    "producer_id" / Int64,
    "producer_epoch" / Int16,
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

TxnOffsetCommitResponseV0 = Struct(
    "throttle_time_ms" / Int32,
    "topics" / Array(
        Struct(
            "name" / String,
            "partitions" / Array(Struct("partition_index" / Int32, "error_code" / Int16)),
        )
    ),
)

TXN_OFFSET_COMMIT_V0 = register(
    ApiKey.TXN_OFFSET_COMMIT, 0, TxnOffsetCommitRequestV0, TxnOffsetCommitResponseV0
)
