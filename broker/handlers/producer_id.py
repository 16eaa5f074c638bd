"""InitProducerId v0 and v3.

Without a transactional.id (idempotent producers): a fresh producer id, epoch 0, from a counter
reserved on disk in blocks, so an id is never handed out twice, even across a kill -9.

With a transactional.id: the transaction coordinator (``broker/txn/``) allocates and persists the
id's producer id on first use, and bumps the epoch (fencing older instances, aborting an ongoing
transaction first) on later calls; v3's producer_id/producer_epoch let a producer bump its own
epoch after an abortable error (KIP-360). The answer waits until the change is durable.
"""

from __future__ import annotations

from broker.context import Broker
from broker.dispatcher import handles, reply
from broker.txn.manager import InitResult
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID


def _response(result: InitResult) -> dict:
    return {
        "throttle_time_ms": 0,
        "error_code": result.error_code,
        "producer_id": result.producer_id,
        "producer_epoch": result.producer_epoch,
        "tagged_fields": {},  # v3 only; ignored by the v0 schema
    }


@handles(ApiKey.INIT_PRODUCER_ID, 0, 3)
def init_producer_id(broker: Broker, header, request):
    if request.transactional_id is None:
        return _response(InitResult(ErrorCode.NONE, broker.producer_ids.next_id(), 0))
    expected = None
    if header.api_version >= 3:
        producer_id, producer_epoch = request.producer_id, request.producer_epoch
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            # Kafka: either both or neither of producer_id and producer_epoch must be set.
            return _response(InitResult(ErrorCode.INVALID_REQUEST))
        if producer_id != NO_PRODUCER_ID:
            expected = (producer_id, producer_epoch)
    result = broker.transactions.init_producer_id(
        request.transactional_id, request.transaction_timeout_ms, expected, broker.clock.now_ms()
    )
    return reply(result, _response)
