"""AsyncAdmin.end_transaction against a scripted transaction coordinator (no real broker): the
tolerance rules of ending a handed-over transaction, and its retries. Time is trio's MockClock."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from client.aio import AsyncAdmin
from client.errors import ClusterAuthorizationFailedError, KafkaTimeoutError, ProducerFencedError
from client.structs import TransactionHandle
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.unit.client.aio.scripted_broker import ScriptedBroker

HANDLE = TransactionHandle("tx", 1000, 3, False)


def admin(broker: ScriptedBroker, clock: Any) -> AsyncAdmin:
    return AsyncAdmin({"bootstrap.servers": "broker0:9092", "retry.backoff.ms": 100},
                      clock=clock, open_stream=broker.open_stream)


async def test_end_transaction_retries_until_the_coordinator_has_loaded(
    broker, clock, autojump_clock
):
    broker.script(
        ApiKey.END_TXN,
        {"error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS},
        {"error_code": ErrorCode.CONCURRENT_TRANSACTIONS},
        {"error_code": 0},
    )
    async with admin(broker, clock) as a:
        await a.end_transaction(HANDLE, commit=True)
    ends = broker.requests(ApiKey.END_TXN)
    assert [(r.body.producer_id, r.body.producer_epoch, r.body.committed) for r in ends] == [
        (1000, 3, True)] * 3
    gaps = [round((b.time - a.time) * 1000) for a, b in zip(ends, ends[1:], strict=False)]
    assert 80 <= gaps[0] <= 120 and gaps[1] == 20  # the backoff, then CONCURRENT_TRANSACTIONS'


async def test_a_fenced_handle_counts_as_aborted_but_not_as_committed(
    broker, clock, autojump_clock
):
    broker.on(ApiKey.END_TXN, lambda r: {"error_code": ErrorCode.PRODUCER_FENCED})
    async with admin(broker, clock) as a:
        await a.end_transaction(HANDLE, commit=False)  # fenced means aborted: what was asked
        with pytest.raises(ProducerFencedError):
            await a.end_transaction(HANDLE, commit=True)
        await a.end_transaction(TransactionHandle("tx", 1000, 3, True), commit=True)  # empty
    assert len(broker.requests(ApiKey.END_TXN)) == 2


async def test_end_transaction_gives_up_at_its_timeout(broker, clock, autojump_clock):
    broker.on(ApiKey.END_TXN, lambda r: {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE})
    async with admin(broker, clock) as a:
        start = trio.current_time()
        with pytest.raises(KafkaTimeoutError, match="EndTxn for tx did not succeed within 5.0 s"):
            await a.end_transaction(HANDLE, commit=True, timeout=5.0)
        assert trio.current_time() - start <= 5.0
    # COORDINATOR_NOT_AVAILABLE: the coordinator is looked up again before each retry
    assert len(broker.requests(ApiKey.FIND_COORDINATOR)) == len(broker.requests(ApiKey.END_TXN))


async def test_list_transactions_waits_for_a_coordinator_still_loading(
    broker, clock, autojump_clock
):
    """A broker whose coordinator is loading its log answers ListTransactions with
    COORDINATOR_LOAD_IN_PROGRESS (a Kafka node just restarted): asked again after the backoff, as
    Kafka's admin client does; any other error is raised at once."""
    broker.script(
        ApiKey.LIST_TRANSACTIONS,
        {"error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS},
        {"error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS},
        {"error_code": 0, "transaction_states": [
            {"transactional_id": "tx", "producer_id": 1000, "transaction_state": "Ongoing"}]},
        {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED},
    )
    async with admin(broker, clock) as a:
        listed = await a.list_transactions()
        assert [(t.transactional_id, t.producer_id, t.state) for t in listed] == [
            ("tx", 1000, "Ongoing")]
        with pytest.raises(ClusterAuthorizationFailedError):
            await a.list_transactions()
    asked = broker.requests(ApiKey.LIST_TRANSACTIONS)
    assert len(asked) == 4
    gaps = [round((b.time - a.time) * 1000) for a, b in zip(asked, asked[1:3], strict=False)]
    assert 80 <= gaps[0] <= 120 and 160 <= gaps[1] <= 240  # the backoff, doubling
