"""FindCoordinator (api key 10): which broker coordinates a group or a transactional id.

v1 adds key_type (0 = group, 1 = transaction), throttle_time_ms and error_message; v2 is v1; v3
flexible; v4 batches the keys (``coordinator_keys`` -> one ``coordinators`` entry each, KIP-699);
v5 may answer TRANSACTION_ABORTABLE; v6 adds key type 2 (share groups, KIP-932).

The broker answers the same node_id / host / port as in Metadata, for both key types.
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

FIND_COORDINATOR = declare(
    ApiKey.FIND_COORDINATOR, valid="0-6", flexible="3+",
    request=[
        F("key", "string", "0-3"),
        F("key_type", "int8", "1+"),
        F("coordinator_keys", "[]string", "4+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "0-3"),
        F("error_message", "string", "1-3", nullable="1-3", default=None),
        F("node_id", "int32", "0-3"),
        F("host", "string", "0-3"),
        F("port", "int32", "0-3"),
        F("coordinators", "[]", "4+", fields=[
            F("key", "string"),
            F("node_id", "int32"),
            F("host", "string"),
            F("port", "int32"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
        ]),
    ],
)
