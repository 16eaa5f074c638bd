"""InitProducerId (api key 22): get a producer id and epoch, or bump the epoch.

v1 = v0 (throttling on quota); v2 flexible; v3 adds producer_id / producer_epoch so that a producer
can bump its own epoch after an abortable error (KIP-360; -1 / -1 for none); v4 may answer
PRODUCER_FENCED (KIP-588); v5 is transaction version 2 (KIP-890 part 2).

A null transactional_id asks for an idempotent (non-transactional) producer id.
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

INIT_PRODUCER_ID = declare(
    ApiKey.INIT_PRODUCER_ID, valid="0-5", flexible="2+",
    request=[
        F("transactional_id", "string", nullable="0+"),
        F("transaction_timeout_ms", "int32"),
        F("producer_id", "int64", "3+", default=-1),
        F("producer_epoch", "int16", "3+", default=-1),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("producer_id", "int64", default=-1),
        F("producer_epoch", "int16"),
    ],
)
