"""The trio producer: idempotent by default, transactional with ``transactional.id``.

Usage::

    async with AsyncProducer({"bootstrap.servers": "127.0.0.1:9092"}) as producer:
        future = await producer.send("topic", b"value", key=b"key")
        metadata = await future.wait()

Kafka's producer in four parts (as aiokafka splits it), joined here:

- ``client/accumulator.py``: the record buffer, per-partition batches, sequence numbers and the
  in-flight ordering rules (pure state, locked: ``send`` may run in other threads);
- ``client/aio/sender.py``: the task that drains batches into Produce requests, keeps the
  in-flight requests, retries, and settles sequence and epoch bookkeeping (including the
  producer id of an idempotent producer);
- ``client/transaction_manager.py`` (the state table) and ``client/aio/transactions.py`` (its
  coordinator calls: init_transactions, AddPartitionsToTxn, offsets, EndTxn, KIP-360 epoch
  bumps);
- this module: configuration, the one send path and the public API.

The send path: ``send`` checks the topic, waits for its metadata the first time and while
``buffer.memory`` is full, then ``append`` checks the record, picks its partition, stamps it with
the injected clock and appends it to the accumulator, waking the sender when a batch opened or
filled. No request is made per record. The blocking ``Producer`` runs the same steps: ``append``
in the application's thread (it only touches the accumulator, under its lock, and wakes the
sender through the trio token), the two waits on the loop (``wait_for_topic``,
``wait_for_buffer``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import trio

from client._loop import require_trio
from client.accumulator import (
    RECORD_OVERHEAD,
    Accumulator,
    DeliveryCallback,
    DeliveryFuture,
    Headers,
)
from client.aio._tasks import EngineTasks
from client.aio.cluster import Cluster
from client.aio.connection import OpenStream
from client.aio.sender import Sender
from client.aio.transactions import Transactions
from client.clock import Clock, WallClock
from client.config import ClientConfig, producer_config
from client.errors import (
    IllegalStateError,
    KafkaClientError,
    KafkaTimeoutError,
    MessageTooLargeError,
)
from client.partitioner import StickyPartitioner, partition_for_key
from client.structs import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    RecordMetadata,
    TopicPartition,
    TransactionHandle,
)
from client.transaction_manager import TransactionManager, TxnState

Serializer = Callable[[Any], "bytes | str | None"]


class AsyncProducer:
    """A Kafka producer on trio (see the module docstring)."""

    def __init__(
        self,
        config: Mapping[str, Any] | ClientConfig,
        *,
        clock: Clock | None = None,
        open_stream: OpenStream | None = None,
    ) -> None:
        """``clock``: the time the producer reads (default: the wall clock); ``open_stream``:
        how its connections open (default: TCP; tests pass an in-memory broker's)."""
        cfg = config if isinstance(config, ClientConfig) else producer_config(config)
        self.config = cfg
        self.clock: Clock = clock or WallClock()
        self._now_ns = self.clock.now_ns  # record timestamps, linger, delivery
        self.transactional_id: str | None = cfg["transactional.id"]
        self._max_request_size: int = cfg["max.request.size"]
        self._buffer_memory: int = cfg["buffer.memory"]
        self._max_block: float = cfg["max.block.ms"] / 1000
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
            max_in_flight=cfg["max.in.flight.requests.per.connection"],
            idempotent=cfg["enable.idempotence"],
            transactional=self.transactional_id is not None,
        )
        self._sticky = StickyPartitioner(cfg["batch.size"])
        self._cluster = Cluster(cfg, open_stream=open_stream)
        self._tasks = EngineTasks("AsyncProducer")
        self._sender = Sender(cfg, self._acc, self._cluster, self._tm, self._now_ns,
                              on_partitions_pending=self._add_pending_partitions)
        self._txns = Transactions(cfg, self._cluster, self._tm, self._sender, self._tasks)
        self._closed = False

    def _add_pending_partitions(self) -> None:
        self._txns.add_pending_partitions()

    # -- lifecycle ---------------------------------------------------------------------------------

    async def __aenter__(self) -> AsyncProducer:
        """Start the sender (in a nursery owned by the task that enters the ``async with``)."""
        require_trio("AsyncProducer", "Producer")
        nursery = await self._tasks.open()
        self._cluster.start(nursery)
        self._sender.start()
        nursery.start_soon(self._sender.run)
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
        self._closed = self._sender.closed = True
        if timeout is None or timeout > 0:
            with trio.move_on_after(math.inf if timeout is None else timeout):
                try:
                    await self.flush()
                except KafkaClientError:
                    pass
        self._sender.fail_everything(IllegalStateError("Producer closed while send in progress"))

    # -- the send path -------------------------------------------------------------------------------

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
            await self.wait_for_buffer()
        return self.append(topic, value, key, partition, headers, timestamp, on_delivery, count)

    async def send_and_wait(
        self, topic: str, value: bytes | str | None = None, **kwargs: Any
    ) -> RecordMetadata:
        future = await self.send(topic, value, **kwargs)
        return await future.wait()

    async def wait_for_topic(self, topic: str) -> int:
        """Partition count of ``topic`` (asking the broker, which may auto-create it)."""
        return await self._cluster.wait_for_topic(topic, self._max_block, allow_auto_create=True)

    async def wait_for_buffer(self) -> None:
        """Wait while ``buffer.memory`` is full, up to ``max.block.ms``."""
        deadline = trio.current_time() + self._max_block
        while self._acc.buffered_bytes >= self._buffer_memory:
            self._tm.raise_if_fatal()
            await self._sender.wait_for_space(deadline)
            if trio.current_time() >= deadline:
                raise KafkaTimeoutError(
                    f"Failed to allocate buffer within the configured max blocking time "
                    f"{self._max_block * 1000:.0f} ms (buffer.memory)"
                )

    async def flush(self, timeout: float | None = None) -> None:
        """Send every buffered record now and wait until each one is acknowledged or failed."""
        await self._sender.flush(timeout)

    # -- the thread-safe surface: what the blocking ``Producer`` calls from the application's
    # thread (everything else runs on the loop thread) ------------------------------------------

    def partition_count(self, topic: str) -> int | None:
        """The cached partition count of ``topic`` (None: not known yet). Thread-safe."""
        return self._cluster.partition_count(topic)

    @property
    def accumulator(self) -> Accumulator:
        """The record buffer; thread-safe by its own lock (``buffered_bytes``,
        ``incomplete_batches``)."""
        return self._acc

    def raise_if_fatal(self) -> None:
        """Raise the producer's fatal error, if it has one. Thread-safe."""
        self._tm.raise_if_fatal()

    def wake_sender(self) -> None:
        """Make the sender task look at the buffer now. Thread-safe."""
        self._sender.wake()

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
            with tm.lock:
                wake = tm.add_partition(TopicPartition(topic, partition))
        future, opened = self._acc.append(
            tp, key, value, headers, timestamp, size, now, on_delivery
        )
        if wake or opened:
            self._sender.wake()
        return future

    def _record_key_value(self, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        if value is not None and (
            value.__class__ is not bytes or self._value_serializer is not None
        ):
            value = _record_bytes("value", value, self._value_serializer)
        if key is not None and (key.__class__ is not bytes or self._key_serializer is not None):
            key = _record_bytes("key", key, self._key_serializer)
        return key, value

    # -- transactions (client/aio/transactions.py) -----------------------------------------------

    async def init_transactions(self) -> None:
        """Get the producer id and epoch for ``transactional.id``: fences older producers with the
        same id and makes the coordinator finish (abort) their open transaction."""
        await self._txns.init_transactions()

    def begin_transaction(self) -> None:
        """Start a transaction (local: the coordinator learns of it with the first partition)."""
        self._txns.begin_transaction()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[Any, int | OffsetAndMetadata],
        group: str | ConsumerGroupMetadata,
    ) -> None:
        """Commit consumer offsets as part of the transaction (AddOffsetsToTxn once per group,
        then TxnOffsetCommit to the group coordinator). Offsets are "next record to read"."""
        await self._txns.send_offsets_to_transaction(offsets, group)

    async def commit_transaction(self) -> None:
        """Flush, then commit: every record of the transaction becomes visible atomically."""
        await self._txns.commit_transaction()

    async def abort_transaction(self) -> None:
        """Abort: records never sent are dropped, sent ones wait for their answer, then the
        coordinator writes ABORT markers. Records of the transaction stay invisible to
        read_committed consumers."""
        await self._txns.abort_transaction()

    async def transaction_handle(self) -> TransactionHandle:
        """Flush and hand the open transaction over: the returned handle lets another process
        commit or abort it (``AsyncAdmin.end_transaction``). This producer can then only be
        closed; the transaction stays open until ended or until ``transaction.timeout.ms``."""
        return await self._txns.transaction_handle()

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
