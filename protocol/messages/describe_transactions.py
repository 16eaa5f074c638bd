"""DescribeTransactions (api key 65, KIP-664): the coordinator's view of transactional ids.

Flexible from v0 (its only version). ``transaction_state`` is the state's name (``Ongoing``,
``PrepareCommit``, ...); an unknown id answers TRANSACTIONAL_ID_NOT_FOUND (105).
``transaction_start_time_ms`` is -1 when no transaction has started.
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

DESCRIBE_TRANSACTIONS = declare(
    ApiKey.DESCRIBE_TRANSACTIONS, valid="0", flexible="0+",
    request=[F("transactional_ids", "[]string")],
    response=[
        F("throttle_time_ms", "int32"),
        F("transaction_states", "[]", fields=[
            F("error_code", "int16"),
            F("transactional_id", "string"),
            F("transaction_state", "string"),
            F("transaction_timeout_ms", "int32"),
            F("transaction_start_time_ms", "int64"),
            F("producer_id", "int64"),
            F("producer_epoch", "int16"),
            F("topics", "[]", fields=[F("topic", "string"), F("partitions", "[]int32")]),
        ]),
    ],
)
