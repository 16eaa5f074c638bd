"""InitProducerId v0-4 (v1 = v0; v2 flexible; v3 carries producer id and epoch; v4 answers
PRODUCER_FENCED instead of INVALID_PRODUCER_EPOCH, KIP-588).

Without a transactional.id (idempotent producers): a fresh producer id, epoch 0, from a counter
reserved on disk in blocks, so an id is never handed out twice, even across a kill -9.

With a transactional.id: the transaction coordinator (``broker/txn/``) allocates and persists the
id's producer id on first use, and bumps the epoch (fencing older instances, aborting an ongoing
transaction first) on later calls; v3's producer_id/producer_epoch let a producer bump its own
epoch after an abortable error (KIP-360). The answer waits until the change is durable.
"""

from __future__ import annotations

from broker.handlers.authz import allowed, any_allowed
from broker.handlers.context import Broker
from broker.handlers.marks import handles
from broker.reply import reply
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from broker.txn.manager import InitResult
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID


def _response(result: InitResult, version: int) -> dict:
    code = result.error_code
    if code == ErrorCode.INVALID_PRODUCER_EPOCH and version >= 4:
        code = ErrorCode.PRODUCER_FENCED  # KIP-588: v4+ says so
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "producer_id": result.producer_id,
        "producer_epoch": result.producer_epoch,
    }


@handles(ApiKey.INIT_PRODUCER_ID)
def init_producer_id(broker: Broker, header, request):
    version = header.api_version
    if request.transactional_id is None:
        # An idempotent producer: IdempotentWrite on the cluster (the seeds' rule), or, as in
        # Kafka since 3.0 (KIP-679), Write on any topic.
        if not (allowed(broker, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
                or any_allowed(broker, Operation.WRITE, ResourceType.TOPIC)):
            return _response(InitResult(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), version)
        return _response(InitResult(ErrorCode.NONE, broker.producer_ids.next_id(), 0), version)
    if not allowed(broker, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                   request.transactional_id):
        return _response(InitResult(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), version)
    expected = None
    if header.api_version >= 3:
        producer_id, producer_epoch = request.producer_id, request.producer_epoch
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            # Kafka: either both or neither of producer_id and producer_epoch must be set.
            return _response(InitResult(ErrorCode.INVALID_REQUEST), version)
        if producer_id != NO_PRODUCER_ID:
            expected = (producer_id, producer_epoch)
    result = broker.transactions.init_producer_id(
        request.transactional_id, request.transaction_timeout_ms, expected, broker.clock.now_ms()
    )
    return reply(result, lambda r: _response(r, version))
