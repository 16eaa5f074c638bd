"""ListTransactions v0 (api key 66, KIP-664): transactional ids known to the coordinator.

Flexible from v0 (request header v2, response header v1, compact forms, tagged fields at the end of
every struct). Fields as in Kafka's ``ListTransactionsRequest.json`` /
``ListTransactionsResponse.json`` at version 0 (v1 added a duration filter, v2 a pattern).

Request:  state_filters COMPACT_ARRAY[COMPACT_STRING], producer_id_filters COMPACT_ARRAY[INT64],
          tagged_fields
Response: throttle_time_ms INT32, error_code INT16,
          unknown_state_filters COMPACT_ARRAY[COMPACT_STRING],
          transaction_states COMPACT_ARRAY[transactional_id COMPACT_STRING, producer_id INT64,
                                           transaction_state COMPACT_STRING, tagged_fields],
          tagged_fields

Empty filters match everything; a state filter that names no state is echoed in
``unknown_state_filters``.
"""

from construct import Struct

from protocol.api_keys import ApiKey
from protocol.messages._registry import register
from protocol.primitives import CompactArray, CompactString, Int16, Int32, Int64, TaggedFields

ListTransactionsRequestV0 = Struct(
    "state_filters" / CompactArray(CompactString),
    "producer_id_filters" / CompactArray(Int64),
    "tagged_fields" / TaggedFields,
)

ListTransactionsResponseV0 = Struct(
    "throttle_time_ms" / Int32,
    "error_code" / Int16,
    "unknown_state_filters" / CompactArray(CompactString),
    "transaction_states" / CompactArray(
        Struct(
            "transactional_id" / CompactString,
            "producer_id" / Int64,
            "transaction_state" / CompactString,
            "tagged_fields" / TaggedFields,
        )
    ),
    "tagged_fields" / TaggedFields,
)

LIST_TRANSACTIONS_V0 = register(
    ApiKey.LIST_TRANSACTIONS, 0, ListTransactionsRequestV0, ListTransactionsResponseV0
)
