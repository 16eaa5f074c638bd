"""The producer's sender and transactions against a scripted broker (no real broker): retries,
ordering of retried batches, the sequence rules of an idempotent producer, and the KIP-360 epoch
bump of a transactional one. Time is trio's MockClock (autojump); the producer's clock follows it.

Each test reads what the client really sent: the record batches' producer id, epoch and base
sequence, decoded from the Produce requests with the protocol's codecs.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from client.aio import AsyncProducer
from client.errors import (
    IllegalStateError,
    KafkaTimeoutError,
    MessageTooLargeError,
    OutOfOrderSequenceNumberError,
    TransactionAbortableError,
    UnknownProducerIdError,
)
from client.transaction_manager import TxnState
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import BatchHeader, parse_header_untrusted
from tests.unit.client.aio.scripted_broker import (
    DISCONNECT,
    SILENCE,
    Delay,
    Request,
    ScriptedBroker,
    produce_answer,
)

CONFIG: dict[str, Any] = {
    "bootstrap.servers": "broker0:9092",
    "linger.ms": 0,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
}


def producer(broker: ScriptedBroker, clock: Any, **config: Any) -> AsyncProducer:
    return AsyncProducer({**CONFIG, **config}, clock=clock, open_stream=broker.open_stream)


def sent_batches(request: Request) -> list[tuple[int, BatchHeader]]:
    """(partition, batch header) of every batch in a Produce request."""
    return [
        (p.index, parse_header_untrusted(bytes(p.records)))
        for t in request.body.topic_data
        for p in t.partition_data
    ]


def sequences(broker: ScriptedBroker) -> list[list[tuple[int, int, int]]]:
    """Per Produce request: (producer id, epoch, base sequence) of each batch."""
    return [
        [(h.producer_id, h.producer_epoch, h.base_sequence) for _, h in sent_batches(r)]
        for r in broker.requests(ApiKey.PRODUCE)
    ]


async def test_a_retriable_error_is_retried_after_the_backoff_with_the_same_sequence(
    broker, clock, autojump_clock
):
    broker.topics["t"] = [0]
    broker.script(
        ApiKey.PRODUCE,
        lambda r: produce_answer(r, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        then=lambda r: produce_answer(r, base_offset=7),
    )
    async with producer(broker, clock) as p:
        metadata = await p.send_and_wait("t", b"v")
    assert metadata.offset == 7
    produces = broker.requests(ApiKey.PRODUCE)
    assert sequences(broker) == [[(1000, 0, 0)], [(1000, 0, 0)]]  # the same batch again
    # NOT_LEADER means stale metadata: asked again before the retry; the retry waited the backoff.
    metadata_times = [r for r in broker.received if r.api_key == ApiKey.METADATA]
    assert len(metadata_times) >= 2
    assert len(produces) == 2


async def test_batches_failed_behind_a_retried_one_are_resent_in_sequence_order(
    broker, clock, autojump_clock
):
    """Three batches in flight on one partition; the first fails retriably, the later two are
    answered OUT_OF_ORDER_SEQUENCE_NUMBER (the echo of the first failure): all three are resent,
    one at a time, in sequence order, and each record lands once."""
    broker.topics["t"] = [0]
    first_round: list[Request] = []

    async def produce(request: Request) -> Any:
        if len(first_round) < 3:
            first_round.append(request)
            if len(first_round) == 1:
                return Delay(0.05, produce_answer(request, ErrorCode.NOT_ENOUGH_REPLICAS))
            return produce_answer(request, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        (_, header), = sent_batches(request)
        return produce_answer(request, base_offset=header.base_sequence)

    broker.on(ApiKey.PRODUCE, produce)
    async with producer(broker, clock, **{"batch.size": 200}) as p:
        futures = [await p.send("t", b"x" * 120) for _ in range(3)]  # one batch each
        results = [await f.wait() for f in futures]
    assert [m.offset for m in results] == [0, 1, 2]
    sent = sequences(broker)
    assert sent[:3] == [[(1000, 0, 0)], [(1000, 0, 1)], [(1000, 0, 2)]]
    assert sent[3:] == [[(1000, 0, 0)], [(1000, 0, 1)], [(1000, 0, 2)]]


async def test_out_of_order_for_the_first_unacknowledged_batch_is_a_fatal_gap(
    broker, clock, autojump_clock
):
    """The broker lost data before our first unacknowledged batch (seeds: fatal): that batch
    fails with OutOfOrderSequenceNumberError, and so does the producer: later sends raise."""
    broker.topics["t"] = [0]
    broker.on(ApiKey.PRODUCE, lambda r: produce_answer(r, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER))
    async with producer(broker, clock) as p:
        with pytest.raises(OutOfOrderSequenceNumberError):
            await p.send_and_wait("t", b"lost")
        with pytest.raises(IllegalStateError, match="error state"):
            await p.send("t", b"next")
    assert sequences(broker) == [[(1000, 0, 0)]]


async def test_a_batch_given_up_after_it_was_sent_makes_a_new_producer_id(
    broker, clock, autojump_clock
):
    """A batch that failed after it was sent (a non-retriable error) leaves a hole in its
    partition's sequence: once nothing is in flight the idempotent producer takes a new
    producer id, and its next batch starts again at sequence 0."""
    broker.topics["t"] = [0]
    broker.script(
        ApiKey.PRODUCE,
        lambda r: produce_answer(r, ErrorCode.MESSAGE_TOO_LARGE),
        then=lambda r: produce_answer(r, base_offset=3),
    )
    async with producer(broker, clock) as p:
        with pytest.raises(MessageTooLargeError):
            await p.send_and_wait("t", b"lost")
        assert (await p.send_and_wait("t", b"next")).offset == 3
        assert p.producer_id == 1001
    assert sequences(broker) == [[(1000, 0, 0)], [(1001, 0, 0)]]
    assert len(broker.requests(ApiKey.INIT_PRODUCER_ID)) == 2


async def test_unknown_producer_id_renumbers_the_partition_from_zero(
    broker, clock, autojump_clock
):
    """The broker forgot our producer (its state expired): the idempotent producer resends the
    first unacknowledged batch with sequence 0, keeping its producer id."""
    broker.topics["t"] = [0]
    broker.script(
        ApiKey.PRODUCE,
        lambda r: produce_answer(r, base_offset=0),
        lambda r: produce_answer(r, ErrorCode.UNKNOWN_PRODUCER_ID),
        then=lambda r: produce_answer(r, base_offset=1),
    )
    async with producer(broker, clock) as p:
        await p.send_and_wait("t", b"a")
        assert (await p.send_and_wait("t", b"b")).offset == 1
    assert sequences(broker) == [[(1000, 0, 0)], [(1000, 0, 1)], [(1000, 0, 0)]]


async def test_a_lost_connection_resends_and_a_duplicate_counts_as_delivered(
    broker, clock, autojump_clock
):
    """The connection drops with the Produce unanswered; the batch is resent (same sequence) on a
    new connection, and the broker, which had appended it, answers DUPLICATE_SEQUENCE_NUMBER:
    the record is delivered once (its offset is unknown: -1)."""
    broker.topics["t"] = [0]
    broker.script(
        ApiKey.PRODUCE,
        DISCONNECT,
        then=lambda r: produce_answer(r, ErrorCode.DUPLICATE_SEQUENCE_NUMBER),
    )
    async with producer(broker, clock) as p:
        metadata = await p.send_and_wait("t", b"v")
    assert metadata.offset == -1
    produces = broker.requests(ApiKey.PRODUCE)
    assert [r.connection for r in produces] == [1, 2]  # bootstrap is 0; then a new one
    assert sequences(broker) == [[(1000, 0, 0)], [(1000, 0, 0)]]


async def test_delivery_timeout_fails_a_batch_the_broker_keeps_refusing(
    broker, clock, autojump_clock
):
    broker.topics["t"] = [0]
    broker.on(ApiKey.PRODUCE, lambda r: produce_answer(r, ErrorCode.NOT_ENOUGH_REPLICAS))
    async with producer(broker, clock, **{"delivery.timeout.ms": 3000,
                                          "request.timeout.ms": 1000}) as p:
        start = trio.current_time()
        with pytest.raises(KafkaTimeoutError, match="Expiring 1 record"):
            await p.send_and_wait("t", b"v")
        assert 3.0 <= trio.current_time() - start < 4.5
    # backoff 100, 200, 400, 800, 1000, ... ms (20% jitter): a handful of attempts in 3 s
    assert 4 <= len(broker.requests(ApiKey.PRODUCE)) <= 8


# -- transactions ---------------------------------------------------------------------------------


def end_txn(request: Request) -> dict[str, Any]:
    return {"error_code": 0}


def add_partitions(request: Request) -> dict[str, Any]:
    return {"results": [
        {"name": t.name, "results": [{"partition_index": p, "error_code": 0} for p in t.partitions]}
        for t in request.body.topics
    ]}


async def test_an_unknown_producer_id_in_a_transaction_bumps_the_epoch_after_the_abort(
    broker, clock, autojump_clock
):
    """KIP-360: a transactional batch answered UNKNOWN_PRODUCER_ID leaves the broker's sequence
    state unknown: the transaction can only abort, and the abort is followed by InitProducerId
    with the current producer id and epoch, which bumps the epoch; the next transaction's batches
    carry the new epoch from sequence 0."""
    broker.topics["t"] = [0]
    broker.on(ApiKey.ADD_PARTITIONS_TO_TXN, add_partitions)
    broker.on(ApiKey.END_TXN, end_txn)
    broker.script(
        ApiKey.PRODUCE,
        lambda r: produce_answer(r, ErrorCode.UNKNOWN_PRODUCER_ID),
        then=lambda r: produce_answer(r, base_offset=10),
    )
    async with producer(broker, clock, **{"transactional.id": "tx"}) as p:
        await p.init_transactions()
        p.begin_transaction()
        future = await p.send("t", b"doomed")
        with pytest.raises(UnknownProducerIdError):
            await future.wait()
        assert p.transaction_state is TxnState.ABORTABLE_ERROR
        with pytest.raises(TransactionAbortableError):
            await p.commit_transaction()
        await p.abort_transaction()
        assert (p.producer_id, p.producer_epoch) == (1000, 1)
        p.begin_transaction()
        await p.send_and_wait("t", b"next")
        await p.commit_transaction()
    inits = broker.requests(ApiKey.INIT_PRODUCER_ID)
    assert [(r.body.producer_id, r.body.producer_epoch) for r in inits] == [(-1, -1), (1000, 0)]
    assert [r.body.committed for r in broker.requests(ApiKey.END_TXN)] == [False, True]
    assert sequences(broker) == [[(1000, 0, 0)], [(1000, 1, 0)]]


async def test_an_end_txn_that_timed_out_is_followed_by_an_epoch_bump(
    broker, clock, autojump_clock
):
    """Transaction version 1: an EndTxn attempt that got no answer may still arrive late and end
    the next transaction (KAFKA-17754); once the retry succeeds, the producer bumps its epoch
    before the next transaction, so the late copy is fenced."""
    broker.topics["t"] = [0]
    broker.on(ApiKey.ADD_PARTITIONS_TO_TXN, add_partitions)
    broker.on(ApiKey.PRODUCE, lambda r: produce_answer(r))
    broker.script(ApiKey.END_TXN, SILENCE, then=end_txn)
    async with producer(broker, clock, **{"transactional.id": "tx",
                                          "request.timeout.ms": 1000}) as p:
        await p.init_transactions()
        p.begin_transaction()
        await p.send_and_wait("t", b"v")
        await p.commit_transaction()
        assert p.transaction_state is TxnState.READY
        assert (p.producer_id, p.producer_epoch) == (1000, 1)
    assert len(broker.requests(ApiKey.END_TXN)) == 2
    assert len(broker.requests(ApiKey.INIT_PRODUCER_ID)) == 2


async def test_concurrent_transactions_is_retried_soon(broker, clock, autojump_clock):
    """AddPartitionsToTxn answered CONCURRENT_TRANSACTIONS (the last EndTxn's markers are still
    being written) is retried after 20 ms, not after the retry backoff."""
    broker.topics["t"] = [0]
    busy = {"results": [{"name": "t", "results": [
        {"partition_index": 0, "error_code": ErrorCode.CONCURRENT_TRANSACTIONS}]}]}
    broker.script(ApiKey.ADD_PARTITIONS_TO_TXN, busy, busy, then=add_partitions)
    broker.on(ApiKey.PRODUCE, lambda r: produce_answer(r))
    broker.on(ApiKey.END_TXN, end_txn)
    times: list[float] = []
    handler = broker.handlers[int(ApiKey.ADD_PARTITIONS_TO_TXN)]

    def timed(request: Request) -> Any:
        times.append(trio.current_time())
        return handler(request)

    broker.on(ApiKey.ADD_PARTITIONS_TO_TXN, timed)
    async with producer(broker, clock, **{"transactional.id": "tx"}) as p:
        await p.init_transactions()
        p.begin_transaction()
        await p.send_and_wait("t", b"v")
        await p.commit_transaction()
    gaps = [round((b - a) * 1000) for a, b in zip(times, times[1:], strict=False)]
    assert gaps == [20, 20]
