"""The trio producer: idempotent by default, transactional with ``transactional.id``.

Usage::

    async with AsyncProducer({"bootstrap.servers": "127.0.0.1:9092"}) as producer:
        future = await producer.send("topic", b"value", key=b"key")
        metadata = await future.wait()

Theory of operation
-------------------
``send`` appends to the accumulator (``client/accumulator.py``) and returns at once; no request is
made per record. One sender task loops: it asks the accumulator which partitions have a batch due
(full, ``linger.ms`` passed, flushed, or a retry whose backoff ended), drains at most one batch per
partition into each Produce request for the partition's leader, keeps up to
``max.in.flight.requests.per.connection`` requests unanswered per connection, and sleeps until
woken (a batch opened or filled, a response arrived) or until the next deadline. Responses are
handled by a callback in the connection's reader task: success finishes the batch, retriable errors
put it back in sequence order (see the accumulator), other errors fail it.

Idempotence: the producer id comes from InitProducerId (any broker; the transaction coordinator
when transactional) before the first batch is drained. A batch given up after it was sent leaves a
hole in its partition's sequence: an idempotent producer then waits until nothing is in flight and
takes a new producer id (all sequences restart at 0); a transactional one enters ABORTABLE_ERROR
and bumps its epoch (InitProducerId v3 with its id and epoch, KIP-360) after the abort.

Transactions (``client/transaction_manager.py`` holds the state table): a partition's first record
in a transaction queues an AddPartitionsToTxn, sent by a helper task; the sender drains a partition
only once the coordinator added it. ``commit_transaction`` flushes, then sends EndTxn(commit);
``abort_transaction`` drops batches never sent, waits for the others, then sends EndTxn(abort).
``transaction_handle`` flushes and hands the open transaction to another process
(``AsyncAdmin.end_transaction``).

Thread safety: ``append`` may be called from other threads (the blocking ``Producer``); it only
touches the accumulator (locked) and wakes the sender through the trio token.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, TypeVar

import trio

from client._loop import require_trio
from client.accumulator import (
    RECORD_OVERHEAD,
    Accumulator,
    DeliveryCallback,
    DeliveryFuture,
    Headers,
    ProducerBatch,
)
from client.aio._tasks import EngineTasks
from client.aio.cluster import GROUP, TRANSACTION, Cluster, is_metadata_error
from client.clock import Clock, WallClock
from client.config import ClientConfig, producer_config
from client.errors import (
    BrokerConnectionError,
    IllegalStateError,
    InvalidTxnStateError,
    KafkaClientError,
    KafkaTimeoutError,
    MessageTooLargeError,
    OutOfOrderSequenceNumberError,
    TransactionAbortableError,
    TransactionAbortedError,
    UnknownProducerIdError,
    error_for,
    for_code,
)
from client.partitioner import StickyPartitioner, partition_for_key
from client.retry import retry
from client.structs import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    RecordMetadata,
    TopicPartition,
    TransactionHandle,
    offset_and_metadata,
)
from client.transaction_manager import TransactionManager, TxnState
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import encode_request
from protocol.records import Compression

log = logging.getLogger("client.producer")

Serializer = Callable[[Any], "bytes | str | None"]
T = TypeVar("T")


class AsyncProducer:
    """A Kafka producer on trio (see the module docstring)."""

    def __init__(
        self, config: Mapping[str, Any] | ClientConfig, *, clock: Clock | None = None
    ) -> None:
        cfg = config if isinstance(config, ClientConfig) else producer_config(config)
        self.config = cfg
        self.clock: Clock = clock or WallClock()
        self._now_ns = self.clock.now_ns  # record timestamps, linger, delivery
        self.transactional_id: str | None = cfg["transactional.id"]
        self._idempotent: bool = cfg["enable.idempotence"]
        self._acks: int = cfg["acks"]
        self._max_in_flight: int = cfg["max.in.flight.requests.per.connection"]
        self._max_request_size: int = cfg["max.request.size"]
        self._buffer_memory: int = cfg["buffer.memory"]
        self._delivery_timeout_ms: int = cfg["delivery.timeout.ms"]
        self._retries: int = cfg["retries"]
        self._request_timeout_ms: int = cfg["request.timeout.ms"]
        self._max_block: float = cfg["max.block.ms"] / 1000
        self._compression = Compression[cfg["compression.type"].upper()]
        self._key_serializer: Serializer | None = cfg["key.serializer"]
        self._value_serializer: Serializer | None = cfg["value.serializer"]
        self._serializing = self._key_serializer is not None or self._value_serializer is not None
        self._tm = TransactionManager(self.transactional_id)
        # The state in which send() needs no further check (the common case, tested first).
        self._send_state = (
            TxnState.UNINITIALIZED if self.transactional_id is None else TxnState.IN_TRANSACTION
        )
        self._acc = Accumulator(
            batch_size=cfg["batch.size"],
            linger_ms=cfg["linger.ms"],
            max_in_flight=self._max_in_flight,
            idempotent=self._idempotent,
            transactional=self.transactional_id is not None,
        )
        self._sticky = StickyPartitioner(cfg["batch.size"])
        self._txn_lock = threading.Lock()  # guards the transaction manager's partition sets
        self._cluster = Cluster(cfg)
        self._tasks = EngineTasks("AsyncProducer")
        self._loop_thread: int | None = None
        self._wakeup = trio.Event()
        self._space = trio.Event()  # set (and replaced) when buffered bytes drop
        self._node_in_flight: dict[int, int] = {}
        self._needs_producer_reset = False
        self._metadata_wanted = False
        self._metadata_attempts = 0  # sender passes in a row that waited for metadata
        self._adding_partitions: trio.Event | None = None  # set when the add task finishes
        self._closed = False
        self._sender_done = trio.Event()

    # -- lifecycle ---------------------------------------------------------------------------------

    async def __aenter__(self) -> AsyncProducer:
        """Start the sender (in a nursery owned by the task that enters the ``async with``)."""
        require_trio("AsyncProducer", "Producer")
        nursery = await self._tasks.open()
        self._cluster.start(nursery)
        self._loop_thread = threading.get_ident()
        nursery.start_soon(self._run_sender)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await self.close(None if exc_info[0] is None else 0)
        finally:
            self._tasks.cancel()
            await self._cluster.aclose()
            await self._tasks.aclose()

    async def close(self, timeout: float | None = None) -> None:
        """Send what is buffered (waiting up to ``timeout`` seconds, None: no limit); later sends
        fail. The ``async with`` block's exit then stops the sender and closes connections.

        With ``timeout=0`` records not yet delivered fail. An open transaction is left to the
        coordinator's timeout, as in Kafka."""
        if self._closed or not self._tasks.running:
            return
        self._closed = True
        if timeout is None or timeout > 0:
            with trio.move_on_after(math.inf if timeout is None else timeout):
                try:
                    await self.flush()
                except KafkaClientError:
                    pass
        self._fail_everything(IllegalStateError("Producer closed while send in progress"))

    # -- sending -------------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
        timestamp: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> DeliveryFuture:
        """Queue a record; the future completes when the broker acknowledged it.

        Waits for the topic's metadata the first time and while ``buffer.memory`` is full.
        ``on_delivery(error, metadata)`` runs on the producer's trio loop.
        """
        check_topic(topic)
        count = self._cluster.partition_count(topic)
        if count is None:
            count = await self.wait_for_topic(topic)
        if self._acc.buffered_bytes >= self._buffer_memory:
            deadline = trio.current_time() + self._max_block
            while self._acc.buffered_bytes >= self._buffer_memory:
                self._tm.raise_if_fatal()
                with trio.move_on_at(deadline):
                    await self._space.wait()
                if trio.current_time() >= deadline:
                    raise KafkaTimeoutError(
                        f"Failed to allocate buffer within the configured max blocking time "
                        f"{self._max_block * 1000:.0f} ms (buffer.memory)"
                    )
        return self.append(topic, value, key, partition, headers, timestamp, on_delivery, count)

    async def send_and_wait(
        self, topic: str, value: bytes | str | None = None, **kwargs: Any
    ) -> RecordMetadata:
        future = await self.send(topic, value, **kwargs)
        return await future.wait()

    async def wait_for_topic(self, topic: str) -> int:
        """Partition count of ``topic`` (asking the broker, which may auto-create it)."""
        return await self._cluster.wait_for_topic(topic, self._max_block, allow_auto_create=True)

    # -- the thread-safe surface: what the blocking ``Producer`` calls from the application's
    # thread (everything else runs on the loop thread) ------------------------------------------

    def partition_count(self, topic: str) -> int | None:
        """The cached partition count of ``topic`` (None: not known yet). Thread-safe."""
        return self._cluster.partition_count(topic)

    @property
    def accumulator(self) -> Accumulator:
        """The record buffer; thread-safe by its own lock (``buffered_bytes``, ``space``,
        ``incomplete_batches``)."""
        return self._acc

    def raise_if_fatal(self) -> None:
        """Raise the producer's fatal error, if it has one. Thread-safe."""
        self._tm.raise_if_fatal()

    def wake_sender(self) -> None:
        """Make the sender task look at the buffer now. Thread-safe."""
        self._wake_sender()

    def append(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        headers: Headers | None,
        timestamp: int | None,
        on_delivery: DeliveryCallback | None,
        count: int,
    ) -> DeliveryFuture:
        """The part of ``send`` that never waits, for ``topic`` of ``count`` partitions.
        Thread-safe (the blocking ``Producer`` calls it from the application's thread)."""
        tm = self._tm
        if tm.state is not self._send_state:
            tm.check_send()
        if self._closed:
            raise IllegalStateError("Cannot send after the producer is closed.")
        # Every argument is checked here, before anything is buffered: a bad one raises
        # TypeError/ValueError to the caller and the producer stays usable.
        # (One test for the common case, bytes and no serializer: this runs for every record.)
        if value.__class__ is not bytes or key is not None or self._serializing:
            key, value = self._record_key_value(key, value)
        size = RECORD_OVERHEAD
        if value is not None:
            size += len(value)
        if key is not None:
            size += len(key)
        if headers:
            headers = _check_headers(headers)
            for h_key, h_value in headers:
                size += len(h_key) + (len(h_value) if h_value is not None else 0) + 10
        else:
            headers = ()
        if timestamp is not None and (timestamp.__class__ is not int or timestamp < 0):
            raise TypeError(
                f"timestamp must be a non-negative int (ms) or None, not {_show(timestamp)}"
            )
        if size > self._max_request_size:
            raise MessageTooLargeError(
                f"The message is {size} bytes when serialized which is larger than "
                f"{self._max_request_size}, which is the value of the max.request.size configuration."
            )
        if partition is None:
            if key is None:
                partition = self._sticky.partition(topic, count, size)
            else:
                partition = partition_for_key(key, count)
        elif partition.__class__ is not int:
            raise TypeError(f"partition must be an int or None, not {_show(partition)}")
        elif not 0 <= partition < count:
            raise ValueError(
                f"Invalid partition given with record: {partition} is not in the range [0...{count})."
            )
        now = self._now_ns() // 1_000_000
        if timestamp is None:
            timestamp = now
        tp = (topic, partition)
        wake = False
        if self.transactional_id is not None and not tm.is_partition_added(tp):
            with self._txn_lock:
                wake = tm.add_partition(TopicPartition(topic, partition))
        future, opened = self._acc.append(
            tp, key, value, headers, timestamp, size, now, on_delivery
        )
        if wake or opened:
            self._wake_sender()
        return future

    def _record_key_value(self, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        if value is not None and (
            value.__class__ is not bytes or self._value_serializer is not None
        ):
            value = _record_bytes("value", value, self._value_serializer)
        if key is not None and (key.__class__ is not bytes or self._key_serializer is not None):
            key = _record_bytes("key", key, self._key_serializer)
        return key, value

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

    def _wake_sender(self) -> None:
        if threading.get_ident() == self._loop_thread:
            self._wakeup.set()
        elif self._tasks.token is not None:
            try:
                self._tasks.token.run_sync_soon(self._set_wakeup)
            except trio.RunFinishedError:
                pass

    def _set_wakeup(self) -> None:
        self._wakeup.set()

    # -- the sender ----------------------------------------------------------------------------------

    async def _run_sender(self) -> None:
        try:
            while True:
                wait = await self._sender_step()
                with trio.move_on_after(wait):
                    await self._wakeup.wait()
                self._wakeup = trio.Event()
        except Exception as exc:  # a bug: fail loudly instead of hanging every caller
            log.exception("producer sender failed")
            if self._tm.state is not TxnState.FATAL_ERROR:
                self._tm.fatal_error(exc)
            self._fail_everything(exc)
            raise
        finally:
            self._sender_done.set()

    async def _sender_step(self) -> float:
        """One pass: send what is due; returns how long to sleep if nobody wakes us."""
        acc, tm, cluster = self._acc, self._tm, self._cluster
        if tm.state in (TxnState.FATAL_ERROR, TxnState.ABORTABLE_ERROR):
            self._fail_unsent(tm.last_error)
        if tm.state is TxnState.FATAL_ERROR:
            self._fail_everything(tm.last_error)
            return math.inf
        now = self._now_ns() // 1_000_000
        for batch in acc.expire(now, self._delivery_timeout_ms):
            batch.finish(
                -1,
                KafkaTimeoutError(
                    f"Expiring {batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition}: "
                    f"{now - batch.created_ms} ms has passed since batch creation"
                ),
            )
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
                await self._init_idempotent_producer_id()
                return 0
        if (
            self.transactional_id is not None
            and tm.pending_partitions
            and self._adding_partitions is None
        ):
            self._adding_partitions = trio.Event()
            self._tasks.start_soon(self._add_partitions_to_txn)
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
            return self._cluster.backoff.seconds(self._metadata_attempts - 1)
        self._metadata_attempts = 0
        if next_ms is None:
            return math.inf
        return max(next_ms - self._now_ns() // 1_000_000, 0) / 1000

    def _drain(self, states: list, now: int) -> list[tuple[int, list[ProducerBatch]]]:
        """Group due batches into Produce requests: at most one batch per partition per request,
        at most ``max_in_flight`` unanswered requests per broker."""
        acc, cluster, tm = self._acc, self._cluster, self._tm
        transactional = self.transactional_id is not None
        by_node: dict[int, list] = {}
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
            topics: dict[str, list[dict]] = {}
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
            and not self._closed
            and batch.attempts <= self._retries
            and now < batch.created_ms + self._delivery_timeout_ms
            and self._tm.state is not TxnState.FATAL_ERROR
        ):
            self._acc.retry(batch, now + self._cluster.backoff.ms(batch.attempts - 1))
            return
        if retriable and now >= batch.created_ms + self._delivery_timeout_ms:
            error = KafkaTimeoutError(
                f"Expiring {batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition}: "
                f"{now - batch.created_ms} ms has passed since batch creation"
            )
        self._fail_batch(batch, error)

    def _fail_batch(self, batch: ProducerBatch, error: BaseException) -> None:
        gap = self._acc.fail(batch)
        batch.finish(-1, error)
        self._batch_released()
        fatal = isinstance(error, KafkaClientError) and error.fatal
        if fatal:
            if self._tm.state is not TxnState.FATAL_ERROR:
                self._tm.fatal_error(error)
        elif self.transactional_id is not None:
            if gap:
                self._tm.needs_epoch_bump = True
            if self._tm.state is not TxnState.ABORTING_TRANSACTION:  # aborting already
                with self._txn_lock:
                    self._tm.abortable_error(error)
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

    def _fail_everything(self, error: BaseException | None) -> None:
        error = error or IllegalStateError("producer stopped")
        for batch in self._acc.incomplete_batches():
            if not batch.done:
                self._acc.fail(batch)
                batch.finish(-1, error)
        self._batch_released()

    # -- producer ids ----------------------------------------------------------------------------

    async def _init_idempotent_producer_id(self) -> None:
        async def attempt() -> Any:
            conn = await self._cluster.any_connection()
            response = await conn.request(
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": None,
                    "transaction_timeout_ms": self.config["transaction.timeout.ms"],
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )
            if response.error_code:
                raise error_for(response.error_code, "InitProducerId")
            return response

        try:
            response = await retry(
                attempt,
                backoff=self._cluster.backoff,
                timeout=self._max_block,
                what="InitProducerId",
            )
        except KafkaClientError as exc:
            if exc.retriable:
                await trio.sleep(self._cluster.backoff.seconds(0))
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
        await self._init_idempotent_producer_id()
        if not self._tm.has_producer_id:
            self._needs_producer_reset = True

    @property
    def _txn_id(self) -> str:
        return self._tm.require_transactional()

    async def _init_transactional_producer_id(self, bump: bool) -> None:
        tm = self._tm

        async def attempt() -> Any:
            response = await self._cluster.coordinator_request(
                TRANSACTION,
                self._txn_id,
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": self._txn_id,
                    "transaction_timeout_ms": self.config["transaction.timeout.ms"],
                    "producer_id": tm.producer_id if bump else -1,
                    "producer_epoch": tm.producer_epoch if bump else -1,
                },
            )
            if response.error_code:
                raise error_for(response.error_code, f"InitProducerId for {self._txn_id}")
            return response

        try:
            response = await self._coordinator_retry(attempt, "InitProducerId")
        except KafkaClientError as exc:
            if not exc.retriable:
                tm.fatal_error(exc)
            raise
        tm.init_done(response.producer_id, response.producer_epoch)
        self._acc.set_producer(response.producer_id, response.producer_epoch)

    async def _coordinator_retry(self, attempt: Callable[[], Awaitable[T]], what: str) -> T:
        """A coordinator call, retried until max.block.ms (``client/retry.py``)."""
        return await retry(
            attempt, backoff=self._cluster.backoff, timeout=self._max_block, what=what
        )

    # -- transactions ----------------------------------------------------------------------------

    async def init_transactions(self) -> None:
        """Get the producer id and epoch for ``transactional.id``: fences older producers with the
        same id and makes the coordinator finish (abort) their open transaction."""
        self._tm.begin_init()
        await self._init_transactional_producer_id(bump=False)
        self._tm.tv2 = await self._coordinator_speaks_tv2()

    async def _coordinator_speaks_tv2(self) -> bool:
        """Transaction version 2 when the coordinator finalizes ``transaction.version`` >= 2 and
        speaks EndTxn v5 and Produce v12 (as the Java client decides); version 1 otherwise."""
        try:
            node = await self._cluster.coordinator(TRANSACTION, self._txn_id)
            conn = await self._cluster.connection(node)
            level = await conn.finalized_feature("transaction.version")
        except KafkaClientError as exc:
            log.debug("transaction version unknown (%s): using version 1", exc)
            return False
        return (level >= 2 and conn.supports_version(ApiKey.END_TXN, 5)
                and conn.supports_version(ApiKey.PRODUCE, 12))

    def begin_transaction(self) -> None:
        """Start a transaction (local: the coordinator learns of it with the first partition)."""
        with self._txn_lock:
            self._tm.begin_transaction()

    async def _add_partitions_to_txn(self) -> None:
        tm = self._tm
        try:
            while tm.pending_partitions and tm.state in (
                TxnState.IN_TRANSACTION,
                TxnState.COMMITTING_TRANSACTION,
                TxnState.ABORTING_TRANSACTION,
            ):
                with self._txn_lock:
                    pending = sorted(tm.pending_partitions)
                topics: dict[str, list[int]] = {}
                for tp in pending:
                    topics.setdefault(tp.topic, []).append(tp.partition)

                async def attempt(topics: dict[str, list[int]] = topics) -> None:
                    response = await self._cluster.coordinator_request(
                        TRANSACTION,
                        self._txn_id,
                        ApiKey.ADD_PARTITIONS_TO_TXN,
                        {
                            "transactional_id": self._txn_id,
                            "producer_id": tm.producer_id,
                            "producer_epoch": tm.producer_epoch,
                            "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
                        },
                    )
                    codes = {
                        (r.name, p.partition_index): p.error_code
                        for r in response.results
                        for p in r.results
                    }
                    worst = _worst_error(codes.values())
                    if worst:
                        if worst in (
                            ErrorCode.NOT_COORDINATOR,
                            ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        ):
                            self._cluster.forget_coordinator(TRANSACTION, self._txn_id)
                        raise error_for(worst, "AddPartitionsToTxn")

                try:
                    await self._coordinator_retry(attempt, "AddPartitionsToTxn")
                except KafkaClientError as exc:
                    with self._txn_lock:
                        tm.classify(exc)
                    self._wakeup.set()
                    return
                with self._txn_lock:
                    tm.partitions_added(pending)
                self._wakeup.set()
        finally:
            done, self._adding_partitions = self._adding_partitions, None
            if done is not None:
                done.set()

    async def _wait_for_added_partitions(self) -> None:
        while self._adding_partitions is not None:
            await self._adding_partitions.wait()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[Any, int | OffsetAndMetadata],
        group: str | ConsumerGroupMetadata,
    ) -> None:
        """Commit consumer offsets as part of the transaction (AddOffsetsToTxn once per group,
        then TxnOffsetCommit to the group coordinator). Offsets are "next record to read"."""
        tm = self._tm
        tm.require_transactional()
        group_id = group if isinstance(group, str) else group.group_id
        if tm.add_group(group_id):

            async def add_offsets() -> None:
                response = await self._cluster.coordinator_request(
                    TRANSACTION,
                    self._txn_id,
                    ApiKey.ADD_OFFSETS_TO_TXN,
                    {
                        "transactional_id": self._txn_id,
                        "producer_id": tm.producer_id,
                        "producer_epoch": tm.producer_epoch,
                        "group_id": group_id,
                    },
                )
                if response.error_code:
                    raise error_for(response.error_code, "AddOffsetsToTxn")

            await self._txn_call(add_offsets, "AddOffsetsToTxn")
            tm.group_added(group_id)

        topics: dict[str, list[dict]] = {}
        for tp, value in offsets.items():
            topic, partition = tp
            offset, metadata = offset_and_metadata(value)
            topics.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "committed_offset": offset,
                    "committed_metadata": metadata,
                }
            )

        async def commit_offsets() -> None:
            response = await self._cluster.coordinator_request(
                GROUP,
                group_id,
                ApiKey.TXN_OFFSET_COMMIT,
                {
                    "transactional_id": self._txn_id,
                    "group_id": group_id,
                    "producer_id": tm.producer_id,
                    "producer_epoch": tm.producer_epoch,
                    "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
                },
            )
            worst = _worst_error(p.error_code for t in response.topics for p in t.partitions)
            if worst:
                if worst in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    self._cluster.forget_coordinator(GROUP, group_id)
                raise error_for(worst, "TxnOffsetCommit")

        await self._txn_call(commit_offsets, "TxnOffsetCommit")

    async def _txn_call(self, attempt: Any, what: str) -> None:
        """A coordinator call inside a transaction: errors make it abortable or fatal."""
        try:
            await self._coordinator_retry(attempt, what)
        except KafkaClientError as exc:
            with self._txn_lock:
                self._tm.classify(exc)
            if self._tm.state is TxnState.ABORTABLE_ERROR:
                raise TransactionAbortableError(f"{what} failed: {exc}") from exc
            raise

    async def commit_transaction(self) -> None:
        """Flush, then commit: every record of the transaction becomes visible atomically."""
        tm = self._tm
        with self._txn_lock:
            tm.begin_commit()
        await self._wait_for_added_partitions()
        await self.flush()
        await self._wait_for_added_partitions()
        if tm.state is TxnState.ABORTABLE_ERROR:
            raise TransactionAbortableError(
                "Cannot commit transaction since a previous operation failed; abort it."
            ) from tm.last_error
        tm.raise_if_fatal()
        if not tm.is_empty_transaction:
            await self._end_txn(commit=True)
        if tm.needs_epoch_bump:
            with self._txn_lock:
                tm.begin_epoch_bump()
            await self._init_transactional_producer_id(bump=True)
        else:
            with self._txn_lock:
                tm.transaction_completed()

    async def abort_transaction(self) -> None:
        """Abort: records never sent are dropped, sent ones wait for their answer, then the
        coordinator writes ABORT markers. Records of the transaction stay invisible to
        read_committed consumers."""
        tm = self._tm
        with self._txn_lock:
            tm.begin_abort()
        dropped = self._acc.abort_unsent()
        for batch in dropped:
            batch.finish(-1, TransactionAbortedError("Failing batch since transaction was aborted"))
        if dropped:
            self._batch_released()
        await self._wait_for_added_partitions()
        await self.flush()
        tm.raise_if_fatal()
        if not tm.is_empty_transaction:
            await self._end_txn(commit=False)
        if tm.needs_epoch_bump:
            with self._txn_lock:
                tm.begin_epoch_bump()
            await self._init_transactional_producer_id(bump=True)
        else:
            with self._txn_lock:
                tm.transaction_completed()

    async def _end_txn(self, commit: bool) -> None:
        """EndTxn, retried until it is answered. Version 2 (v5): the answer carries the producer
        id and epoch of the next transaction; every sequence restarts at 0. Version 1: when an
        attempt timed out, the request may still arrive late and would act on the next
        transaction (same producer id and epoch: KAFKA-17754), so the epoch is bumped
        (InitProducerId, KIP-360) before the next transaction, which fences it - Jepsen's
        mitigation, built in."""
        tm = self._tm
        tv2 = tm.tv2
        timed_out = False

        async def attempt() -> Any:
            nonlocal timed_out
            try:
                response = await self._cluster.coordinator_request(
                    TRANSACTION,
                    self._txn_id,
                    ApiKey.END_TXN,
                    {
                        "transactional_id": self._txn_id,
                        "producer_id": tm.producer_id,
                        "producer_epoch": tm.producer_epoch,
                        "committed": commit,
                    },
                    max_version=5 if tv2 else 4,
                )
            except KafkaTimeoutError:
                timed_out = True
                raise
            if response.error_code:
                raise error_for(response.error_code, "EndTxn")
            return response

        try:
            response = await self._coordinator_retry(attempt, "EndTxn")
        except KafkaClientError as exc:
            if exc.retriable:
                raise  # timed out: the call may be repeated
            with self._txn_lock:
                if exc.fatal or isinstance(exc, InvalidTxnStateError):
                    tm.fatal_error(exc)
                else:
                    tm.abortable_error(exc)
            raise
        if tv2 and response.producer_id >= 0:
            with self._txn_lock:
                tm.epoch_bumped(response.producer_id, response.producer_epoch)
            self._acc.set_producer(response.producer_id, response.producer_epoch)
        elif timed_out:
            tm.needs_epoch_bump = True

    async def transaction_handle(self) -> TransactionHandle:
        """Flush and hand the open transaction over: the returned handle lets another process
        commit or abort it (``AsyncAdmin.end_transaction``). This producer can then only be
        closed; the transaction stays open until ended or until ``transaction.timeout.ms``."""
        tm = self._tm
        tm.require_transactional()
        if tm.state is not TxnState.IN_TRANSACTION:
            tm.check_send()  # raises the reason
        await self._wait_for_added_partitions()
        await self.flush()
        await self._wait_for_added_partitions()
        if tm.state is TxnState.ABORTABLE_ERROR:
            raise TransactionAbortableError(
                "the transaction cannot commit; abort it"
            ) from tm.last_error
        tm.raise_if_fatal()
        with self._txn_lock:
            handle = TransactionHandle(
                self._txn_id, tm.producer_id, tm.producer_epoch, tm.is_empty_transaction
            )
            tm.handoff()
        return handle

    # -- introspection ---------------------------------------------------------------------------

    @property
    def producer_id(self) -> int:
        return self._tm.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._tm.producer_epoch

    @property
    def transaction_state(self) -> TxnState:
        return self._tm.state


def check_topic(topic: Any) -> None:
    if topic.__class__ is not str or not topic:
        raise TypeError(f"topic must be a non-empty str, not {_show(topic)}")


def _show(obj: Any) -> str:
    """``type (repr)`` of a bad argument, the repr cut short."""
    text = repr(obj)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(obj).__name__} ({text})"


def _record_bytes(what: str, data: Any, serializer: Serializer | None) -> bytes | None:
    """A record's key or value as bytes: run through the configured serializer, str encoded
    as UTF-8; anything else is a TypeError naming the value (nothing has been buffered)."""
    if serializer is not None:
        data = serializer(data)
        if data is None or data.__class__ is bytes:
            return data
    if data.__class__ is str:
        return data.encode()
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    hint = "" if serializer is not None else f"; set {what}.serializer to send other types"
    source = f"{what}.serializer returned" if serializer is not None else f"{what} is"
    raise TypeError(f"record {what} must be bytes, str or None: {source} {_show(data)}{hint}")


def _check_headers(headers: Any) -> tuple[tuple[str, bytes | None], ...]:
    """Headers as ``((str key, bytes or None value), ...)``; a TypeError names a bad one."""
    if isinstance(headers, Mapping):
        headers = headers.items()
    out = []
    try:
        pairs = list(headers)
    except TypeError:
        raise TypeError(
            f"headers must be a list of (str, bytes) pairs or a dict, not {_show(headers)}"
        ) from None
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(f"each header must be a (str key, bytes value) pair, not {_show(pair)}")
        h_key, h_value = pair
        if h_key.__class__ is not str:
            raise TypeError(f"header key must be a str, not {_show(h_key)}")
        if h_value is not None and h_value.__class__ is not bytes:
            if h_value.__class__ is str:
                h_value = h_value.encode()
            elif isinstance(h_value, bytearray | memoryview):
                h_value = bytes(h_value)
            else:
                raise TypeError(
                    f"header {h_key!r} value must be bytes, str or None, not {_show(h_value)}"
                )
        out.append((h_key, h_value))
    return tuple(out)


# Worst first: fatal codes, then abortable ones, then retriable ones; NONE and
# OPERATION_NOT_ATTEMPTED (another partition failed) last.
def _worst_error(codes: Any) -> int:
    worst = 0
    rank = -1
    for code in codes:
        if code in (ErrorCode.NONE, ErrorCode.OPERATION_NOT_ATTEMPTED):
            continue
        cls = for_code(code)
        r = 3 if cls.fatal else (1 if cls.retriable else 2)
        if r > rank:
            worst, rank = code, r
    return worst
