"""The record accumulator: per-partition batching, sequence numbers and in-flight ordering.

Pure state, no I/O and no clock (callers pass ``now_ms``); shared by the application threads that
call ``send()`` and the sender task that drains it, so every public method takes ``self.lock``.

Theory of operation
-------------------
``append`` adds ``(key, value, headers, timestamp)`` to the partition's *open* batch: a plain list,
nothing is encoded yet. A batch closes when the next record would take it over ``batch.size``, or
when the sender drains it (``linger.ms`` passed, or a flush). ``drain_one`` hands the sender the
next batch of a partition and only then, in drain order, gives it its sequence number (idempotent
producer), and the sender encodes it once (``encode``); a retry resends the very same bytes.

Ordering with idempotence (seeds: the broker keeps the last 5 batches per producer and partition,
and accepts a batch only if its sequence follows the last one it appended):

- At most ``max_in_flight`` (<= 5) batches of a partition are unanswered at once, so a resent batch
  is always one the broker still remembers (answered as a duplicate) or the next it expects.
- A retriable failure puts the batch back at the front of the partition's queue, in sequence order,
  and the partition enters *retrying*: one batch in flight at a time until every batch that already
  had a sequence number has been acknowledged. Later batches that failed because an earlier one did
  (OUT_OF_ORDER_SEQUENCE_NUMBER while not the first unacknowledged batch) are retried the same way.
- A sequence number wraps from INT32_MAX to 0 (``increment_sequence``).
- ``reset_sequences`` (UNKNOWN_PRODUCER_ID: the broker forgot us; or a new producer id / epoch)
  renumbers a partition's unacknowledged batches from 0 once nothing of it is in flight.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import trio

from client.errors import KafkaTimeoutError
from client.structs import RecordMetadata, TopicPartition
from protocol.records import HEADER_SIZE, NO_SEQUENCE, Compression, encode_batch

log = logging.getLogger("client.producer")

SEQUENCE_MODULUS = 1 << 31  # sequences are non-negative int32 and wrap to 0 after INT32_MAX

# Bytes a record adds to a batch beyond its key, value and headers: length, attributes,
# timestamp delta, offset delta, key length, value length and header count varints, at most.
RECORD_OVERHEAD = 21
BATCH_OVERHEAD = HEADER_SIZE

Headers = Sequence[tuple[str, bytes | None]]
DeliveryCallback = Callable[[BaseException | None, RecordMetadata | None], Any]


def increment_sequence(sequence: int, count: int) -> int:
    """``sequence + count`` with Kafka's wrap-around at INT32_MAX."""
    return (sequence + count) % SEQUENCE_MODULUS


def record_size(key: bytes | None, value: bytes | None, headers: Headers | None) -> int:
    size = RECORD_OVERHEAD
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    if headers:
        for h_key, h_value in headers:
            size += len(h_key) + (len(h_value) if h_value is not None else 0) + 10
    return size


class ProducerBatch:
    """Records for one partition, sent (and retried) as one RecordBatch."""

    __slots__ = (
        "tp",
        "records",
        "size",
        "created_ms",
        "callbacks",
        "base_sequence",
        "producer_id",
        "producer_epoch",
        "transactional",
        "payload",
        "attempts",
        "retry_at_ms",
        "done",
        "base_offset",
        "log_append_time",
        "error",
        "event",
        "waiters",
    )

    def __init__(self, tp: TopicPartition, created_ms: int) -> None:
        self.tp = tp
        self.records: list[tuple[bytes | None, bytes | None, Headers, int]] = []
        self.size = BATCH_OVERHEAD
        self.created_ms = created_ms
        self.callbacks: list[tuple[int, DeliveryCallback]] | None = None
        self.base_sequence = NO_SEQUENCE
        self.producer_id = -1
        self.producer_epoch = -1
        self.transactional = False
        self.payload: bytes | None = None
        self.attempts = 0
        self.retry_at_ms = 0
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self.event = threading.Event()
        self.waiters: list[Callable[[], Any]] = []

    @property
    def record_count(self) -> int:
        return len(self.records)

    @property
    def last_sequence(self) -> int:
        return increment_sequence(self.base_sequence, len(self.records) - 1)

    def encode(self, compression: Compression) -> bytes:
        """The batch's bytes, built on first use and then kept: retries resend the same bytes."""
        if self.payload is None:
            self.payload = encode_batch(
                self.records,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence,
                transactional=self.transactional,
                compression=compression,
            )
        return self.payload

    def finish(
        self, base_offset: int, error: BaseException | None, log_append_time: int = -1
    ) -> None:
        """Record the outcome, wake waiters and run delivery callbacks (once)."""
        if self.done:
            return
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.error = error
        self.done = True
        self.event.set()
        waiters, self.waiters = self.waiters, []
        for wake in waiters:
            wake()
        if self.callbacks:
            for index, callback in self.callbacks:
                metadata = None if error is not None else self.metadata(index)
                try:
                    callback(error, metadata)
                except Exception:  # a user callback must not kill the sender
                    log.exception("delivery callback failed")

    def metadata(self, index: int) -> RecordMetadata:
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        timestamp = self.log_append_time if self.log_append_time >= 0 else self.records[index][3]
        return RecordMetadata(self.tp.topic, self.tp.partition, offset, timestamp)

    def __repr__(self) -> str:
        return (
            f"<ProducerBatch {self.tp.topic}-{self.tp.partition} records={len(self.records)} "
            f"seq={self.base_sequence} attempts={self.attempts}>"
        )


class DeliveryFuture:
    """The outcome of one ``send()``: where the record landed, or why it did not."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self._batch = batch
        self._index = index

    def done(self) -> bool:
        return self._batch.done

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Block until delivered (or failed): the record's metadata, or its exception raised."""
        batch = self._batch
        if not batch.done and not batch.event.wait(timeout):
            raise KafkaTimeoutError(f"record not delivered within {timeout} s")
        if batch.error is not None:
            raise batch.error
        return batch.metadata(self._index)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        batch = self._batch
        if not batch.done and not batch.event.wait(timeout):
            raise KafkaTimeoutError(f"record not delivered within {timeout} s")
        return batch.error

    async def wait(self) -> RecordMetadata:
        """Trio: wait for the outcome (on the producer's own trio loop)."""
        batch = self._batch
        if not batch.done:
            event = trio.Event()
            batch.waiters.append(event.set)
            await event.wait()
        return self.result(0)

    def __repr__(self) -> str:
        state = "pending" if not self._batch.done else ("failed" if self._batch.error else "done")
        return f"<DeliveryFuture {self._batch.tp.topic}-{self._batch.tp.partition} {state}>"


class PartitionState:
    """Batches of one partition: the open one, closed ones waiting, and those in flight."""

    __slots__ = (
        "tp",
        "open",
        "ready",
        "in_flight",
        "next_sequence",
        "last_acked_sequence",
        "retrying",
        "reset_pending",
    )

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.open: ProducerBatch | None = None
        self.ready: deque[ProducerBatch] = deque()
        self.in_flight: deque[ProducerBatch] = deque()
        self.next_sequence = 0
        self.last_acked_sequence = -1
        self.retrying = False
        self.reset_pending = False

    def has_data(self) -> bool:
        return self.open is not None or bool(self.ready)

    def is_empty(self) -> bool:
        return self.open is None and not self.ready and not self.in_flight


class Accumulator:
    """Per-partition batches of one producer (see the module docstring)."""

    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: int,
        max_in_flight: int = 5,
        idempotent: bool = True,
        transactional: bool = False,
    ) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.max_in_flight = max_in_flight
        self.idempotent = idempotent
        self.transactional = transactional
        self.lock = threading.Lock()
        # Keyed by TopicPartition; a plain (topic, partition) tuple finds the same entry.
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self.buffered_bytes = 0  # bytes of batches not yet finished
        self.producer_id = -1
        self.producer_epoch = -1

    # -- application side -------------------------------------------------------------------------

    def append(
        self,
        tp: tuple[str, int],
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        timestamp: int,
        size: int,
        now_ms: int,
        callback: DeliveryCallback | None = None,
    ) -> tuple[DeliveryFuture, bool]:
        """Add one record; ``(future, wake)`` where ``wake`` says the sender should look now
        (a batch was opened, so a linger deadline starts, or a batch filled up). ``tp`` may be a
        plain ``(topic, partition)`` tuple: it equals the ``TopicPartition`` key."""
        with self.lock:
            state = self.partitions.get(tp)
            if state is None:
                tp = TopicPartition(*tp)
                state = self.partitions[tp] = PartitionState(tp)
            batch = state.open
            wake = False
            if batch is not None and batch.records and batch.size + size > self.batch_size:
                state.ready.append(batch)
                batch = None
                wake = True
            if batch is None:
                batch = state.open = ProducerBatch(state.tp, now_ms)
                wake = True
            index = len(batch.records)
            batch.records.append((key, value, headers, timestamp))
            batch.size += size
            self.buffered_bytes += size
            if callback is not None:
                if batch.callbacks is None:
                    batch.callbacks = []
                batch.callbacks.append((index, callback))
            return DeliveryFuture(batch, index), wake

    def incomplete_batches(self, close_open: bool = True) -> list[ProducerBatch]:
        """Every batch not finished yet; with ``close_open`` the open batches are closed first (so
        they are sent without waiting for linger.ms, and later appends go to new batches): what
        ``flush`` waits for."""
        with self.lock:
            batches: list[ProducerBatch] = []
            for state in self.partitions.values():
                if close_open and state.open is not None:
                    state.ready.append(state.open)
                    state.open = None
                batches.extend(state.in_flight)
                batches.extend(state.ready)
                if state.open is not None:
                    batches.append(state.open)
            return batches

    # -- sender side --------------------------------------------------------------------------------

    def ready_partitions(self, now_ms: int) -> tuple[list[PartitionState], int | None]:
        """Partitions with a batch that may be sent now, and the earliest time another one will
        be (a linger deadline or retry backoff), or None."""
        sendable: list[PartitionState] = []
        next_ms: int | None = None
        linger = self.linger_ms
        with self.lock:
            for state in self.partitions.values():
                if state.ready:
                    due = state.ready[0].retry_at_ms
                elif state.open is not None:
                    due = state.open.created_ms + linger
                else:
                    continue
                if len(state.in_flight) >= self.max_in_flight or (
                    state.in_flight and (state.retrying or state.reset_pending)
                ):
                    continue  # woken again when a response comes back
                if due <= now_ms:
                    sendable.append(state)
                elif next_ms is None or due < next_ms:
                    next_ms = due
        return sendable, next_ms

    def drain_one(self, state: PartitionState, now_ms: int) -> ProducerBatch | None:
        """Take the next batch of ``state`` to send, giving it its sequence number; None if the
        partition may not send now. The caller encodes and sends it, then reports the outcome
        with ``complete`` / ``retry`` / ``fail``."""
        with self.lock:
            if len(state.in_flight) >= self.max_in_flight:
                return None
            if state.in_flight and (state.retrying or state.reset_pending):
                return None
            if state.reset_pending:
                self._renumber(state)
            if state.ready:
                batch = state.ready[0]
                if batch.retry_at_ms > now_ms:
                    return None
                state.ready.popleft()
            elif state.open is not None and state.open.created_ms + self.linger_ms <= now_ms:
                batch = state.open
                state.open = None
            else:
                return None
            if self.idempotent and batch.base_sequence == NO_SEQUENCE:
                batch.producer_id = self.producer_id
                batch.producer_epoch = self.producer_epoch
                batch.transactional = self.transactional
                batch.base_sequence = state.next_sequence
                state.next_sequence = increment_sequence(state.next_sequence, len(batch.records))
            batch.attempts += 1
            state.in_flight.append(batch)
            return batch

    def is_first_unacked(self, batch: ProducerBatch) -> bool:
        """True if ``batch`` carries the sequence the broker expects next from us (so an
        OUT_OF_ORDER_SEQUENCE_NUMBER for it is a real gap, not the echo of an earlier failure)."""
        with self.lock:
            state = self.partitions[batch.tp]
            return batch.base_sequence == increment_sequence(state.last_acked_sequence, 1)

    def complete(self, batch: ProducerBatch) -> None:
        """The broker acknowledged ``batch`` (the caller then calls ``batch.finish``)."""
        with self.lock:
            state = self.partitions[batch.tp]
            _remove(state.in_flight, batch)
            if batch.base_sequence != NO_SEQUENCE:
                state.last_acked_sequence = batch.last_sequence
            if state.retrying and not any(
                b.base_sequence != NO_SEQUENCE for b in _chain(state.in_flight, state.ready)
            ):
                state.retrying = False
            self.buffered_bytes -= batch.size - BATCH_OVERHEAD

    def retry(self, batch: ProducerBatch, retry_at_ms: int) -> None:
        """Put a failed batch back in front of the partition's queue, in sequence order."""
        with self.lock:
            state = self.partitions[batch.tp]
            _remove(state.in_flight, batch)
            batch.retry_at_ms = retry_at_ms
            state.retrying = True
            # Sequenced batches go first, ascending: they were sent before any unsequenced one.
            position = 0
            for queued in state.ready:
                if queued.base_sequence == NO_SEQUENCE or _seq_before(
                    batch.base_sequence, queued.base_sequence, state.last_acked_sequence
                ):
                    break
                position += 1
            state.ready.insert(position, batch)

    def fail(self, batch: ProducerBatch) -> bool:
        """Give up on ``batch``. True if it had been sent with a sequence number: the partition's
        sequence then has a gap and the producer needs a new id or epoch (``reset_producer``)."""
        with self.lock:
            state = self.partitions[batch.tp]
            if not _remove(state.in_flight, batch):
                _remove(state.ready, batch)
            self.buffered_bytes -= batch.size - BATCH_OVERHEAD
            return batch.base_sequence != NO_SEQUENCE and batch.attempts > 0

    def request_sequence_reset(self, tp: TopicPartition) -> None:
        """The broker no longer knows our producer on ``tp`` (UNKNOWN_PRODUCER_ID for the first
        unacknowledged batch): renumber the partition's batches from 0 once none is in flight."""
        with self.lock:
            self.partitions[tp].reset_pending = True

    def set_producer(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id / epoch: every partition starts again at sequence 0. Call only when
        nothing is in flight; batches waiting for a retry are renumbered and re-encoded."""
        with self.lock:
            self.producer_id = producer_id
            self.producer_epoch = producer_epoch
            for state in self.partitions.values():
                self._renumber(state)

    def abort_unsent(self) -> list[ProducerBatch]:
        """Drop every batch never sent (transaction abort); the caller fails them. Batches that
        have a sequence number stay: they are resent and end up in the aborted transaction."""
        dropped: list[ProducerBatch] = []
        with self.lock:
            for state in self.partitions.values():
                if state.open is not None:
                    dropped.append(state.open)
                    state.open = None
                kept = deque(b for b in state.ready if b.base_sequence != NO_SEQUENCE)
                dropped.extend(b for b in state.ready if b.base_sequence == NO_SEQUENCE)
                state.ready = kept
            for batch in dropped:
                self.buffered_bytes -= batch.size - BATCH_OVERHEAD
        return dropped

    def in_flight_count(self) -> int:
        with self.lock:
            return sum(len(s.in_flight) for s in self.partitions.values())

    def has_unsent(self) -> bool:
        with self.lock:
            return any(s.has_data() for s in self.partitions.values())

    def is_empty(self) -> bool:
        with self.lock:
            return all(s.is_empty() for s in self.partitions.values())

    def expire(self, now_ms: int, delivery_timeout_ms: int) -> list[ProducerBatch]:
        """Batches older than ``delivery.timeout.ms`` that were never sent: removed, to be failed.
        (A batch that was sent is only given up through ``fail``, which handles the gap.)"""
        expired: list[ProducerBatch] = []
        with self.lock:
            for state in self.partitions.values():
                keep: deque[ProducerBatch] = deque()
                for batch in state.ready:
                    if batch.attempts == 0 and batch.created_ms + delivery_timeout_ms <= now_ms:
                        expired.append(batch)
                    else:
                        keep.append(batch)
                state.ready = keep
                if state.open is not None and state.open.created_ms + delivery_timeout_ms <= now_ms:
                    expired.append(state.open)
                    state.open = None
            for batch in expired:
                self.buffered_bytes -= batch.size - BATCH_OVERHEAD
        return expired

    # -- internals ------------------------------------------------------------------------------

    def _renumber(self, state: PartitionState) -> None:
        """Give the partition's waiting sequenced batches new sequences from 0 (lock held, nothing
        in flight)."""
        sequence = 0
        for batch in state.ready:
            if batch.base_sequence == NO_SEQUENCE:
                break
            batch.base_sequence = sequence
            batch.producer_id = self.producer_id
            batch.producer_epoch = self.producer_epoch
            batch.payload = None  # re-encode with the new numbers
            sequence = increment_sequence(sequence, len(batch.records))
        state.next_sequence = sequence
        state.last_acked_sequence = -1
        state.reset_pending = False
        state.retrying = sequence != 0


def _remove(queue: deque[ProducerBatch], batch: ProducerBatch) -> bool:
    # Usually the head (responses come back in order); identity comparison, not equality.
    if queue and queue[0] is batch:
        queue.popleft()
        return True
    for i, queued in enumerate(queue):
        if queued is batch:
            del queue[i]
            return True
    return False


def _chain(*queues: deque[ProducerBatch]) -> Iterator[ProducerBatch]:
    for queue in queues:
        yield from queue


def _seq_before(a: int, b: int, last_acked: int) -> bool:
    """Is sequence ``a`` sent before ``b``? Distances from the last acknowledged sequence order
    them even across the wrap-around."""
    origin = increment_sequence(last_acked, 1)
    return (a - origin) % SEQUENCE_MODULUS < (b - origin) % SEQUENCE_MODULUS
