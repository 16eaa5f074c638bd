"""The accumulator: batching, sequence numbering and wrap-around, in-flight ordering on retries."""

from __future__ import annotations

import pytest

from client.accumulator import (
    SEQUENCE_MODULUS,
    Accumulator,
    PartitionState,
    increment_sequence,
    record_size,
)
from client.errors import KafkaTimeoutError
from client.structs import TopicPartition
from protocol.records import INT32_MAX, NO_SEQUENCE, Compression, decode_batches_untrusted

TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def make(**kw) -> Accumulator:
    kw.setdefault("batch_size", 1000)
    kw.setdefault("linger_ms", 5)
    acc = Accumulator(**kw)
    acc.set_producer(7, 0)
    return acc


def add(acc: Accumulator, tp=TP, value=b"v" * 10, now=0, n=1, callback=None):
    futures = []
    for _ in range(n):
        size = record_size(None, value, None)
        fut, _ = acc.append(tp, None, value, (), now, size, now, callback)
        futures.append(fut)
    return futures


def drain_all(acc: Accumulator, now: int):
    out = []
    states, _ = acc.ready_partitions(now)
    for state in states:
        while (batch := acc.drain_one(state, now)) is not None:
            out.append(batch)
    return out


def test_increment_sequence_wraps_at_int32_max():
    assert increment_sequence(0, 5) == 5
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 2, 5) == 2
    assert increment_sequence(INT32_MAX, 0) == INT32_MAX
    assert SEQUENCE_MODULUS == INT32_MAX + 1


def test_batch_not_sendable_before_linger_then_sendable():
    acc = make(linger_ms=10)
    add(acc, now=100, n=3)
    states, next_ms = acc.ready_partitions(105)
    assert states == [] and next_ms == 110
    states, _ = acc.ready_partitions(110)
    assert [s.tp for s in states] == [TP]


def test_full_batch_closes_and_is_sendable_at_once():
    acc = make(batch_size=250, linger_ms=1000)
    add(acc, value=b"x" * 50, n=3)  # 61 + 3 * 71 > 250: the third opens a second batch
    state = acc.partitions[TP]
    assert len(state.ready) == 1 and state.open is not None
    states, _ = acc.ready_partitions(0)
    assert states == [state]
    first = acc.drain_one(state, 0)
    assert first is not None and first.record_count == 2
    assert acc.drain_one(state, 0) is None  # the open batch still lingers


def test_record_bigger_than_batch_size_gets_its_own_batch():
    acc = make(batch_size=100)
    add(acc, value=b"x" * 500)
    add(acc, value=b"y")
    state = acc.partitions[TP]
    assert [b.record_count for b in state.ready] == [1]
    assert state.open.record_count == 1


def test_sequences_assigned_in_drain_order_per_partition():
    acc = make(batch_size=200, linger_ms=0)
    for _ in range(3):
        add(acc, value=b"x" * 30, n=2)  # two 51-byte records per batch
    add(acc, tp=TP1, n=4)
    batches = drain_all(acc, 0)
    seqs = {(b.tp, b.base_sequence, b.record_count) for b in batches}
    assert (TP1, 0, 4) in seqs
    ours = sorted((b.base_sequence, b.record_count) for b in batches if b.tp == TP)
    assert ours[0][0] == 0
    for (seq, count), (next_seq, _) in zip(ours, ours[1:], strict=False):
        assert next_seq == seq + count
    assert all(b.producer_id == 7 and b.producer_epoch == 0 for b in batches)


def test_encoded_batch_carries_producer_and_sequence():
    acc = make(linger_ms=0, transactional=True)
    add(acc, n=3)
    (batch,) = drain_all(acc, 0)
    ((header, records),) = list(decode_batches_untrusted(batch.encode(Compression.NONE)))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 0, 0)
    assert header.is_transactional
    assert [r.value for r in records] == [b"v" * 10] * 3
    assert batch.encode(Compression.NONE) is batch.payload  # encoded once, resent as is


def test_sequence_wraps_around_across_batches():
    acc = make(linger_ms=0, batch_size=1000)
    acc.partitions[TP] = PartitionState(TP)
    acc.partitions[TP].next_sequence = INT32_MAX - 1
    add(acc, value=b"x" * 10, n=4)  # one batch of 4 records: INT32_MAX-1, INT32_MAX, 0, 1
    (batch,) = drain_all(acc, 0)
    assert batch.base_sequence == INT32_MAX - 1
    assert batch.last_sequence == 1
    ((header, _),) = list(decode_batches_untrusted(batch.encode(Compression.NONE)))
    assert header.last_sequence == 1
    add(acc, n=1)
    (batch2,) = drain_all(acc, 0)
    assert batch2.base_sequence == 2


def test_at_most_max_in_flight_batches_per_partition():
    acc = make(batch_size=80, linger_ms=0, max_in_flight=5)
    add(acc, value=b"x" * 10, n=8)  # one record per batch
    sent = drain_all(acc, 0)
    assert len(sent) == 5
    assert acc.ready_partitions(0)[0] == []  # in-flight limit reached
    acc.complete(sent[0])
    sent[0].finish(100, None)
    more = drain_all(acc, 0)
    assert len(more) == 1 and more[0].base_sequence == 5


def test_retry_restores_sequence_order_and_limits_in_flight_to_one():
    acc = make(batch_size=80, linger_ms=0)
    add(acc, value=b"x" * 10, n=4)
    a, b, c, d = drain_all(acc, 0)
    # The connection broke: every batch in flight fails, reported in any order.
    for batch in (c, a, d, b):
        acc.retry(batch, retry_at_ms=10)
    state = acc.partitions[TP]
    assert [x.base_sequence for x in state.ready] == [0, 1, 2, 3]
    assert acc.drain_one(state, 5) is None  # backoff
    assert acc.drain_one(state, 10) is a
    assert acc.drain_one(state, 10) is None  # retrying: one at a time
    acc.complete(a)
    assert acc.drain_one(state, 10) is b
    acc.complete(b)
    assert acc.drain_one(state, 10) is c
    acc.complete(c)
    assert acc.drain_one(state, 10) is d
    acc.complete(d)
    assert not state.retrying
    # Normal pipelining resumes; the same bytes were resent, with unchanged sequences.
    add(acc, value=b"x" * 10, n=3)
    assert [x.base_sequence for x in drain_all(acc, 10)] == [4, 5, 6]


def test_new_batches_queue_behind_retried_ones():
    acc = make(batch_size=80, linger_ms=0)
    add(acc, value=b"x" * 10, n=2)
    a, b = drain_all(acc, 0)
    add(acc, value=b"x" * 10, n=2)  # two more batches: one closed (unsequenced), one open
    acc.retry(b, 0)
    acc.retry(a, 0)
    state = acc.partitions[TP]
    assert [x.base_sequence for x in state.ready] == [0, 1, NO_SEQUENCE]
    assert state.open is not None
    assert acc.drain_one(state, 0) is a


def test_first_unacked_detects_real_gaps():
    acc = make(batch_size=80, linger_ms=0)
    add(acc, value=b"x" * 10, n=3)
    a, b, c = drain_all(acc, 0)
    assert acc.is_first_unacked(a) and not acc.is_first_unacked(b)
    acc.complete(a)
    assert acc.is_first_unacked(b)


def test_fail_reports_a_sequence_gap_only_for_sent_batches():
    acc = make(batch_size=80, linger_ms=0)
    add(acc, value=b"x" * 10, n=1)
    (a,) = drain_all(acc, 0)
    assert acc.fail(a) is True
    add(acc, value=b"x" * 10, n=1, now=0)
    expired = acc.expire(now_ms=200_000, delivery_timeout_ms=120_000)
    assert len(expired) == 1 and expired[0].attempts == 0


def test_unknown_producer_id_renumbers_from_zero_once_nothing_in_flight():
    acc = make(batch_size=80, linger_ms=0)
    add(acc, value=b"x" * 10, n=3)
    a, b, c = drain_all(acc, 0)
    acc.complete(a)  # sequences 0 acked; the broker then forgets us
    acc.request_sequence_reset(TP)
    acc.retry(b, 0)
    state = acc.partitions[TP]
    assert acc.drain_one(state, 0) is None  # c still in flight
    acc.retry(c, 0)
    resent = acc.drain_one(state, 0)
    assert resent is b and b.base_sequence == 0 and b.payload is None
    acc.complete(b)
    assert acc.drain_one(state, 0) is c and c.base_sequence == 1


def test_set_producer_renumbers_waiting_batches():
    acc = make(batch_size=80, linger_ms=0)
    add(acc, value=b"x" * 10, n=2)
    a, b = drain_all(acc, 0)
    b.encode(Compression.NONE)
    acc.retry(a, 0)
    acc.retry(b, 0)
    acc.set_producer(8, 3)
    assert [(x.base_sequence, x.producer_id, x.producer_epoch, x.payload) for x in (a, b)] == [
        (0, 8, 3, None),
        (1, 8, 3, None),
    ]


def test_abort_unsent_keeps_sequenced_batches():
    acc = make(batch_size=80, linger_ms=0)
    add(acc, value=b"x" * 10, n=2)
    a, b = drain_all(acc, 0)
    acc.retry(b, 0)
    add(acc, value=b"x" * 10, n=2)
    dropped = acc.abort_unsent()
    assert len(dropped) == 2 and all(x.base_sequence == NO_SEQUENCE for x in dropped)
    assert list(acc.partitions[TP].ready) == [b]


def test_buffered_bytes_accounting():
    acc = make(linger_ms=0)
    add(acc, value=b"x" * 100, n=3)
    assert acc.buffered_bytes == 3 * record_size(None, b"x" * 100, None)
    (batch,) = drain_all(acc, 0)
    acc.complete(batch)
    assert acc.buffered_bytes == 0


def test_futures_and_callbacks():
    acc = make(linger_ms=0)
    seen = []
    futures = add(acc, n=3, now=42, callback=lambda err, md: seen.append((err, md)))
    (batch,) = drain_all(acc, 42)
    assert not futures[0].done()
    with pytest.raises(KafkaTimeoutError):
        futures[0].result(timeout=0)
    acc.complete(batch)
    batch.finish(1000, None)
    assert [f.result().offset for f in futures] == [1000, 1001, 1002]
    assert futures[2].result().timestamp == 42
    assert [md.offset for err, md in seen] == [1000, 1001, 1002]


def test_failed_future_raises():
    acc = make(linger_ms=0)
    (fut,) = add(acc)
    (batch,) = drain_all(acc, 0)
    acc.fail(batch)
    batch.finish(-1, KafkaTimeoutError("gone"))
    with pytest.raises(KafkaTimeoutError):
        fut.result()
    assert isinstance(fut.exception(), KafkaTimeoutError)


def test_flush_closes_open_batches():
    acc = make(linger_ms=10_000)
    add(acc, n=2)
    batches = acc.incomplete_batches()
    assert len(batches) == 1 and acc.partitions[TP].open is None
    add(acc, n=1)
    assert acc.partitions[TP].open is not None  # later sends go to a new batch
