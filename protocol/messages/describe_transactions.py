"""DescribeTransactions v0 (api key 65, KIP-664): the coordinator's view of transactional ids.

Flexible from v0: request header v2, response header v1, compact strings and arrays, and tagged
fields at the end of every struct. Fields as in Kafka's ``DescribeTransactionsRequest.json`` /
``DescribeTransactionsResponse.json``.

Request:  transactional_ids COMPACT_ARRAY[COMPACT_STRING], tagged_fields
Response: throttle_time_ms INT32,
          transaction_states COMPACT_ARRAY[
            error_code INT16, transactional_id COMPACT_STRING, transaction_state COMPACT_STRING,
            transaction_timeout_ms INT32, transaction_start_time_ms INT64, producer_id INT64,
            producer_epoch INT16,
            topics COMPACT_ARRAY[topic COMPACT_STRING, partitions COMPACT_ARRAY[INT32], tagged_fields],
            tagged_fields],
          tagged_fields

``transaction_state`` is the state's name (``Ongoing``, ``PrepareCommit``, ...); an unknown id
answers TRANSACTIONAL_ID_NOT_FOUND (105). ``transaction_start_time_ms`` is -1 when no transaction
has started.
"""

from construct import Struct

from protocol.api_keys import ApiKey
from protocol.messages._registry import register
from protocol.primitives import CompactArray, CompactString, Int16, Int32, Int64, TaggedFields

DescribeTransactionsRequestV0 = Struct(
    "transactional_ids" / CompactArray(CompactString),
    "tagged_fields" / TaggedFields,
)

DescribeTransactionsResponseV0 = Struct(
    "throttle_time_ms" / Int32,
    "transaction_states" / CompactArray(
        Struct(
            "error_code" / Int16,
            "transactional_id" / CompactString,
            "transaction_state" / CompactString,
            "transaction_timeout_ms" / Int32,
            "transaction_start_time_ms" / Int64,
            "producer_id" / Int64,
            "producer_epoch" / Int16,
            "topics" / CompactArray(
                Struct(
                    "topic" / CompactString,
                    "partitions" / CompactArray(Int32),
                    "tagged_fields" / TaggedFields,
                )
            ),
            "tagged_fields" / TaggedFields,
        )
    ),
    "tagged_fields" / TaggedFields,
)

DESCRIBE_TRANSACTIONS_V0 = register(
    ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequestV0, DescribeTransactionsResponseV0
)
