"""The producer's sender (Kafka's ``Sender``, aiokafka's ``Sender``): the task that turns the
accumulator's batches into Produce requests and settles their answers.

Theory of operation
-------------------
One task loops (``run``): it asks the accumulator which partitions have a batch due (full,
``linger.ms`` passed, flushed, or a retry whose backoff ended), drains at most one batch per
partition into each Produce request for the partition's leader, keeps up to
``max.in.flight.requests.per.connection`` requests unanswered per broker, and sleeps until woken
(a batch opened or filled, a response arrived) or until the next deadline. Responses are settled
by a callback in the connection's reader task (no task per request): success finishes the batch,
retriable errors put it back in sequence order (``Accumulator.retry``, after the retry backoff of
``client/retry.py``, for its attempt), other errors fail it.

Sequence and epoch bookkeeping (seeds: the broker keeps the last 5 batches per producer and
partition): the accumulator numbers batches as they are drained; this module decides what an
answer means for the sequence.

- DUPLICATE_SEQUENCE_NUMBER: the broker has the batch already: success (offset unknown).
- OUT_OF_ORDER_SEQUENCE_NUMBER for the first unacknowledged batch of its partition: the broker
  lost data before it, a real gap: the batch fails with ``OutOfOrderSequenceNumberError``. For a
  later batch it is the echo of an earlier batch's failure: retried behind it.
- UNKNOWN_PRODUCER_ID (the broker's state of us expired): an idempotent producer renumbers the
  partition from 0 (``request_sequence_reset``); a transactional one fails the batch and needs an
  epoch bump.
- A batch given up after it was sent leaves a hole in its partition's sequence: an idempotent
  producer then waits until nothing is in flight and takes a new producer id (every sequence
  restarts at 0); a transactional one marks the transaction abortable and sets
  ``needs_epoch_bump``, so that the abort is followed by InitProducerId with its id and epoch
  (KIP-360; ``client/aio/transactions.py``).

The producer id of an idempotent producer comes from InitProducerId (any broker), asked here
before the first batch is drained; a transactional producer's comes from ``init_transactions``.
In a transaction the sender drains a partition only once the coordinator added it; partitions
waiting for AddPartitionsToTxn are handed to ``on_partitions_pending`` (the transactions' task).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import trio

from client.accumulator import Accumulator, PartitionState, ProducerBatch
from client.aio.cluster import Cluster, is_metadata_error
from client.config import ClientConfig
from client.errors import (
    BrokerConnectionError,
    IllegalStateError,
    KafkaClientError,
    KafkaTimeoutError,
    OutOfOrderSequenceNumberError,
    TransactionAbortableError,
    TransactionAbortedError,
    UnknownProducerIdError,
    error_for,
)
from client.retry import Backoff, retry
from client.transaction_manager import TransactionManager, TxnState
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import encode_request
from protocol.records import Compression

log = logging.getLogger("client.producer")


class Sender:
    """Drains the accumulator into Produce requests and settles their answers (see the module
    docstring). ``wake`` and ``flush`` are its surface for the producer; ``run`` is its task."""

    def __init__(
        self,
        config: ClientConfig,
        accumulator: Accumulator,
        cluster: Cluster,
        transaction_manager: TransactionManager,
        now_ns: Callable[[], int],
        on_partitions_pending: Callable[[], None] | None = None,
    ) -> None:
        self._acc = accumulator
        self._cluster = cluster
        self._tm = transaction_manager
        self._now_ns = now_ns  # batches' ages (delivery timeout, retry backoff)
        self._on_partitions_pending = on_partitions_pending
        self._backoff: Backoff = cluster.backoff
        self.transactional_id: str | None = config["transactional.id"]
        self._transaction_timeout_ms: int = config["transaction.timeout.ms"]
        self._idempotent: bool = config["enable.idempotence"]
        self._acks: int = config["acks"]
        self._max_in_flight: int = config["max.in.flight.requests.per.connection"]
        self._max_request_size: int = config["max.request.size"]
        self._delivery_timeout_ms: int = config["delivery.timeout.ms"]
        self._retries: int = config["retries"]
        self._request_timeout_ms: int = config["request.timeout.ms"]
        self._max_block: float = config["max.block.ms"] / 1000
        self._compression = Compression[config["compression.type"].upper()]
        self._wakeup = trio.Event()
        self._space = trio.Event()  # set (and replaced) when buffered bytes drop
        self._node_in_flight: dict[int, int] = {}
        self._needs_producer_reset = False
        self._metadata_wanted = False
        self._metadata_attempts = 0  # passes in a row that waited for metadata
        self._loop_thread: int | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self.closed = False  # the producer is closing: no more retries

    # -- the producer's surface ----------------------------------------------------------------

    def start(self) -> None:
        """Called on the loop thread before ``run`` starts: where ``wake`` sends its wake-up."""
        self._loop_thread = threading.get_ident()
        self._token = trio.lowlevel.current_trio_token()

    def wake(self) -> None:
        """Make the sender look at the buffer now. Thread-safe."""
        if threading.get_ident() == self._loop_thread:
            self._wakeup.set()
        elif self._token is not None:
            try:
                self._token.run_sync_soon(self._wakeup.set)
            except trio.RunFinishedError:
                pass

    async def flush(self, timeout: float | None = None) -> None:
        """Send every buffered record now and wait until each one is acknowledged or failed."""
        batches = self._acc.incomplete_batches()
        self._wakeup.set()
        with trio.move_on_after(math.inf if timeout is None else timeout) as scope:
            for batch in batches:
                if not batch.done:
                    event = trio.Event()
                    batch.waiters.append(event.set)
                    await event.wait()
        if scope.cancelled_caught:
            raise KafkaTimeoutError(f"flush did not finish within {timeout} s")

    async def wait_for_space(self, deadline: float) -> None:
        """Wait until buffered bytes drop (or trio time ``deadline``)."""
        with trio.move_on_at(deadline):
            await self._space.wait()

    def producer_changed(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id or epoch (InitProducerId, EndTxn v5): sequences restart at 0."""
        self._acc.set_producer(producer_id, producer_epoch)

    def abort_unsent(self) -> None:
        """Fail the batches never sent (a transaction is aborted); sent ones stay in flight."""
        dropped = self._acc.abort_unsent()
        for batch in dropped:
            batch.finish(-1, TransactionAbortedError("Failing batch since transaction was aborted"))
        if dropped:
            self._batch_released()

    def fail_everything(self, error: BaseException | None) -> None:
        """Fail every batch not finished (the producer closes without waiting, or a fatal
        error)."""
        error = error or IllegalStateError("producer stopped")
        for batch in self._acc.incomplete_batches():
            if not batch.done:
                self._acc.fail(batch)
                batch.finish(-1, error)
        self._batch_released()

    # -- the task ------------------------------------------------------------------------------

    async def run(self) -> None:
        """The sender task (until cancelled); a bug in it fails every batch instead of leaving
        every caller waiting."""
        try:
            while True:
                wait = await self.step()
                with trio.move_on_after(wait):
                    await self._wakeup.wait()
                self._wakeup = trio.Event()
        except Exception as exc:  # a bug: fail loudly instead of hanging every caller
            log.exception("producer sender failed")
            if self._tm.state is not TxnState.FATAL_ERROR:
                self._tm.fatal_error(exc)
            self.fail_everything(exc)
            raise

    async def step(self) -> float:
        """One pass: send what is due; returns how long to sleep if nobody wakes us."""
        acc, tm, cluster = self._acc, self._tm, self._cluster
        if tm.state in (TxnState.FATAL_ERROR, TxnState.ABORTABLE_ERROR):
            self._fail_unsent(tm.last_error)
        if tm.state is TxnState.FATAL_ERROR:
            self.fail_everything(tm.last_error)
            return math.inf
        now = self._now_ns() // 1_000_000
        for batch in acc.expire(now, self._delivery_timeout_ms):
            batch.finish(-1, _expired(batch, now))
            self._batch_released()
        if self._idempotent:
            if self._needs_producer_reset:
                if acc.in_flight_count():
                    return math.inf  # woken by the last response
                await self._reset_producer_id()
                return 0
            if not tm.has_producer_id:
                if self.transactional_id is not None:
                    return math.inf  # init_transactions() sets it
                if not acc.has_unsent():
                    return math.inf
                await self._init_producer_id()
                return 0
        if tm.pending_partitions and self._on_partitions_pending is not None:
            self._on_partitions_pending()
        if self._metadata_wanted or (cluster.metadata_is_stale() and cluster.partition_leaders):
            self._metadata_wanted = False
            try:
                await cluster.refresh_metadata([], allow_auto_create=False)
            except KafkaClientError as exc:
                log.info("metadata refresh failed: %s", exc)
                self._metadata_wanted = True

        states, next_ms = acc.ready_partitions(now)
        requests: list[tuple[int, list[ProducerBatch]]] = []
        if states:
            requests = self._drain(states, now)
        for node, batches in requests:
            await self._send_produce(node, batches)
        if self._metadata_wanted:
            self._metadata_attempts += 1
            return self._backoff.seconds(self._metadata_attempts - 1)
        self._metadata_attempts = 0
        if next_ms is None:
            return math.inf
        return max(next_ms - self._now_ns() // 1_000_000, 0) / 1000

    # -- requests --------------------------------------------------------------------------------

    def _drain(self, states: list[PartitionState], now: int) -> list[tuple[int, list[ProducerBatch]]]:
        """Group due batches into Produce requests: at most one batch per partition per request,
        at most ``max_in_flight`` unanswered requests per broker."""
        acc, cluster, tm = self._acc, self._cluster, self._tm
        transactional = self.transactional_id is not None
        by_node: dict[int, list[PartitionState]] = {}
        for state in states:
            if transactional and not tm.is_partition_added(state.tp):
                continue
            node = cluster.leader_for(state.tp)
            if node is None:
                self._metadata_wanted = True
                continue
            by_node.setdefault(node, []).append(state)
        requests = []
        for node, node_states in by_node.items():
            in_flight = self._node_in_flight.get(node, 0)
            while in_flight < self._max_in_flight:
                batches: list[ProducerBatch] = []
                size = 0
                for state in node_states:
                    if size >= self._max_request_size:
                        break
                    batch = acc.drain_one(state, now)
                    if batch is not None:
                        batches.append(batch)
                        size += batch.size
                if not batches:
                    break
                in_flight += 1
                requests.append((node, batches))
            self._node_in_flight[node] = in_flight
        return requests

    async def _send_produce(self, node: int, batches: list[ProducerBatch]) -> None:
        try:
            conn = await self._cluster.connection(node)
            version = conn.version(ApiKey.PRODUCE)
            if self.transactional_id is not None:
                # v12 is transaction version 2 (partitions join with their first batch); a
                # version-1 transaction must not use it (KIP-890).
                version = min(version, 12 if self._tm.tv2 else 11)
            topics: dict[str, list[dict[str, Any]]] = {}
            for batch in batches:
                topics.setdefault(batch.tp.topic, []).append(
                    {"index": batch.tp.partition, "records": batch.encode(self._compression)}
                )
            body = encode_request(
                ApiKey.PRODUCE,
                version,
                {
                    "transactional_id": self.transactional_id,
                    "acks": self._acks,
                    "timeout_ms": self._request_timeout_ms,
                    "topic_data": [{"name": t, "partition_data": p} for t, p in topics.items()],
                },
            )
            if self._acks == 0:
                await conn.send(ApiKey.PRODUCE, version, body, expect_response=False)
                self._on_produce_response(node, batches, None, None)
            else:
                await conn.send(
                    ApiKey.PRODUCE,
                    version,
                    body,
                    callback=partial(self._on_produce_response, node, batches),
                )
        except KafkaClientError as exc:
            self._on_produce_response(node, batches, None, exc)

    # -- answers ---------------------------------------------------------------------------------

    def _on_produce_response(
        self, node: int, batches: list[ProducerBatch], response: Any, error: BaseException | None
    ) -> None:
        """Runs in the connection's reader task (or the sender): settle each batch's outcome."""
        self._node_in_flight[node] = max(self._node_in_flight.get(node, 1) - 1, 0)
        now = self._now_ns() // 1_000_000
        # Batches failed meanwhile (a fatal error, close(0)) are settled already.
        batches = [b for b in batches if not b.done]
        if error is not None:
            if isinstance(error, BrokerConnectionError | KafkaTimeoutError):
                self._metadata_wanted = True
            for batch in batches:
                self._retry_or_fail(batch, error, now)
        elif response is None:  # acks=0: nothing comes back
            for batch in batches:
                self._acc.complete(batch)
                batch.finish(-1, None)
                self._batch_released()
        else:
            results: dict[tuple[str, int], Any] = {}
            for topic in response.responses:
                for p in topic.partition_responses:
                    results[(topic.name, p.index)] = p
            for batch in batches:
                p = results.get(batch.tp)
                if p is None:
                    self._retry_or_fail(
                        batch,
                        error_for(
                            ErrorCode.UNKNOWN_SERVER_ERROR, "partition missing in Produce response"
                        ),
                        now,
                    )
                else:
                    self._settle(batch, p.error_code, p.base_offset, p.log_append_time_ms, now)
        self._wakeup.set()

    def _settle(
        self, batch: ProducerBatch, code: int, base_offset: int, log_append_time: int, now: int
    ) -> None:
        acc, tm = self._acc, self._tm
        if code == ErrorCode.NONE or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
            acc.complete(batch)
            offset = base_offset if code == ErrorCode.NONE else -1
            batch.finish(offset, None, log_append_time)
            self._batch_released()
            return
        error = error_for(code, f"Produce to {batch.tp.topic}-{batch.tp.partition}")
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            if acc.is_first_unacked(batch):
                # The broker is missing data before this batch: a real gap (seeds: fatal).
                self._fail_batch(
                    batch,
                    OutOfOrderSequenceNumberError(
                        f"The broker received an out of order sequence number for {batch.tp.topic}-"
                        f"{batch.tp.partition}: expected {batch.base_sequence} to follow its last"
                    ),
                )
                return
            self._retry_or_fail(batch, error, now, retriable=True)  # an earlier batch failed
            return
        if code == ErrorCode.UNKNOWN_PRODUCER_ID:
            if self.transactional_id is None and acc.is_first_unacked(batch):
                # The broker forgot us on this partition (its state expired): start again at 0.
                acc.request_sequence_reset(batch.tp)
                self._retry_or_fail(batch, error, now, retriable=True)
            elif self.transactional_id is None:
                self._retry_or_fail(batch, error, now, retriable=True)
            else:
                tm.needs_epoch_bump = True
                self._fail_batch(
                    batch, UnknownProducerIdError("the broker no longer knows this producer")
                )
            return
        if is_metadata_error(error):
            self._metadata_wanted = True
        self._retry_or_fail(batch, error, now)

    def _retry_or_fail(
        self, batch: ProducerBatch, error: BaseException, now: int, retriable: bool | None = None
    ) -> None:
        if retriable is None:
            retriable = isinstance(error, KafkaClientError) and error.retriable
        if (
            retriable
            and not self.closed
            and batch.attempts <= self._retries
            and now < batch.created_ms + self._delivery_timeout_ms
            and self._tm.state is not TxnState.FATAL_ERROR
        ):
            self._acc.retry(batch, now + self._backoff.ms(batch.attempts - 1))
            return
        if retriable and now >= batch.created_ms + self._delivery_timeout_ms:
            error = _expired(batch, now)
        self._fail_batch(batch, error)

    def _fail_batch(self, batch: ProducerBatch, error: BaseException) -> None:
        tm = self._tm
        gap = self._acc.fail(batch)
        batch.finish(-1, error)
        self._batch_released()
        fatal = isinstance(error, KafkaClientError) and error.fatal
        if fatal:
            if tm.state is not TxnState.FATAL_ERROR:
                tm.fatal_error(error)
        elif self.transactional_id is not None:
            if gap:
                tm.needs_epoch_bump = True
            if tm.state is not TxnState.ABORTING_TRANSACTION:  # aborting already
                with tm.lock:
                    tm.abortable_error(error)
        elif gap and self._idempotent:
            self._needs_producer_reset = True

    def _batch_released(self) -> None:
        event, self._space = self._space, trio.Event()
        event.set()

    def _fail_unsent(self, error: BaseException | None) -> None:
        """Fail every batch never sent (after a fatal error, or in a doomed transaction)."""
        dropped = self._acc.abort_unsent()
        if not dropped:
            return
        if error is not None and not (isinstance(error, KafkaClientError) and error.fatal):
            wrapped: BaseException = TransactionAbortableError(
                "Failing batch since transaction was aborted or cannot commit"
            )
            wrapped.__cause__ = error
        else:
            wrapped = error or TransactionAbortedError("transaction aborted")
        for batch in dropped:
            batch.finish(-1, wrapped)
        self._batch_released()

    # -- the producer id of an idempotent producer ----------------------------------------------

    async def _init_producer_id(self) -> None:
        async def attempt() -> Any:
            conn = await self._cluster.any_connection()
            response = await conn.request(
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": None,
                    "transaction_timeout_ms": self._transaction_timeout_ms,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )
            if response.error_code:
                raise error_for(response.error_code, "InitProducerId")
            return response

        try:
            response = await retry(
                attempt, backoff=self._backoff, timeout=self._max_block, what="InitProducerId"
            )
        except KafkaClientError as exc:
            if exc.retriable:
                await trio.sleep(self._backoff.seconds(0))
                return  # try again on the next pass
            self._tm.fatal_error(exc)
            return
        self._tm.set_idempotent_producer(response.producer_id, response.producer_epoch)
        self._acc.set_producer(response.producer_id, response.producer_epoch)
        log.debug("producer id %d epoch %d", response.producer_id, response.producer_epoch)

    async def _reset_producer_id(self) -> None:
        """After a sequence gap: a new producer id, every sequence from 0 (nothing in flight)."""
        self._tm.producer_id = -1
        self._needs_producer_reset = False
        await self._init_producer_id()
        if not self._tm.has_producer_id:
            self._needs_producer_reset = True


def _expired(batch: ProducerBatch, now: int) -> KafkaTimeoutError:
    return KafkaTimeoutError(
        f"Expiring {batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition}: "
        f"{now - batch.created_ms} ms has passed since batch creation"
    )
