"""InitProducerId for idempotent producers (no transactional.id): a fresh producer id, epoch 0.

Producer ids come from a counter reserved on disk in blocks, so an id is never handed out twice,
even across a kill -9. Requests with a transactional.id belong to the transaction coordinator.
"""

from __future__ import annotations

from broker.core import Broker
from broker.dispatcher import handles
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode


@handles(ApiKey.INIT_PRODUCER_ID, 0, 3)
def init_producer_id(broker: Broker, header, request) -> dict:
    if request.transactional_id is None:
        producer_id, epoch, error = broker.producer_ids.next_id(), 0, ErrorCode.NONE
    else:
        producer_id, epoch, error = -1, -1, ErrorCode.COORDINATOR_NOT_AVAILABLE
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "producer_id": producer_id,
        "producer_epoch": epoch,
        "tagged_fields": {},  # v3 only; ignored by the v0 schema
    }
