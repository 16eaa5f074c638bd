"""FindCoordinator v1 (api key 10): which broker coordinates a group or a transactional id.

Request:  key STRING, key_type INT8 (0 = group, 1 = transaction)
Response: throttle_time_ms INT32, error_code INT16, error_message NULLABLE_STRING,
          node_id INT32, host STRING, port INT32

The broker answers the same node_id / host / port as in Metadata, for both key types.
"""

from construct import Struct

from protocol.api_keys import ApiKey
from protocol.messages._registry import register
from protocol.primitives import Int8, Int16, Int32, NullableString, String

FindCoordinatorRequestV1 = Struct(
    "key" / String,
    "key_type" / Int8,
)

FindCoordinatorResponseV1 = Struct(
    "throttle_time_ms" / Int32,
    "error_code" / Int16,
    "error_message" / NullableString,
    "node_id" / Int32,
    "host" / String,
    "port" / Int32,
)

FIND_COORDINATOR_V1 = register(
    ApiKey.FIND_COORDINATOR, 1, FindCoordinatorRequestV1, FindCoordinatorResponseV1
)
