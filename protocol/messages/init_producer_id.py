"""InitProducerId v0 and v3 (api key 22): get a producer id and epoch, or bump the epoch.

v0
Request:  transactional_id NULLABLE_STRING, transaction_timeout_ms INT32
Response: throttle_time_ms INT32, error_code INT16, producer_id INT64, producer_epoch INT16

v3 (flexible: compact strings, tagged fields at the end of each struct; request header v2,
response header v1)
Request:  transactional_id COMPACT_NULLABLE_STRING, transaction_timeout_ms INT32,
          producer_id INT64, producer_epoch INT16, tagged_fields TAGGED_FIELDS
Response: throttle_time_ms INT32, error_code INT16, producer_id INT64, producer_epoch INT16,
          tagged_fields TAGGED_FIELDS

A null transactional_id asks for an idempotent (non-transactional) producer id. In v3 the client
sends its current producer_id / producer_epoch (-1 / -1 for none) so that the coordinator can bump
the epoch of that producer after an abortable error (KIP-360). ``tagged_fields`` decodes to a dict
``{tag: raw bytes}``; it may be left out when encoding (none are sent).
"""

from construct import Struct

from protocol.api_keys import ApiKey
from protocol.messages._registry import register
from protocol.primitives import (
    CompactNullableString,
    Int16,
    Int32,
    Int64,
    NullableString,
    TaggedFields,
)

InitProducerIdRequestV0 = Struct(
    "transactional_id" / NullableString,
    "transaction_timeout_ms" / Int32,
)

InitProducerIdResponseV0 = Struct(
    "throttle_time_ms" / Int32,
    "error_code" / Int16,
    "producer_id" / Int64,
    "producer_epoch" / Int16,
)

INIT_PRODUCER_ID_V0 = register(
    ApiKey.INIT_PRODUCER_ID, 0, InitProducerIdRequestV0, InitProducerIdResponseV0
)

InitProducerIdRequestV3 = Struct(
    "transactional_id" / CompactNullableString,
    "transaction_timeout_ms" / Int32,
    "producer_id" / Int64,
    "producer_epoch" / Int16,
    "tagged_fields" / TaggedFields,
)

InitProducerIdResponseV3 = Struct(
    "throttle_time_ms" / Int32,
    "error_code" / Int16,
    "producer_id" / Int64,
    "producer_epoch" / Int16,
    "tagged_fields" / TaggedFields,
)

INIT_PRODUCER_ID_V3 = register(
    ApiKey.INIT_PRODUCER_ID, 3, InitProducerIdRequestV3, InitProducerIdResponseV3
)
