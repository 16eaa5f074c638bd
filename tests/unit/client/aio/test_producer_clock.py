"""The producer takes its wall clock as a collaborator: record timestamps and the batches'
creation times (linger, delivery timeout) come from it, never from ``time`` directly."""

from __future__ import annotations

from client.aio.producer import AsyncProducer


class _FixedClock:
    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ns(self) -> int:
        return self.now * 1_000_000 + 999_999  # the producer keeps whole milliseconds


def test_records_and_batches_take_the_injected_clock() -> None:
    clock = _FixedClock(1_234_567)
    producer = AsyncProducer({"bootstrap.servers": "127.0.0.1:9"}, clock=clock)
    producer.append("t", b"first", None, 0, None, None, None, 1)
    clock.now = 1_234_999
    producer.append("t", b"second", None, 0, None, 42, None, 1)  # an explicit timestamp stays
    (batch,) = producer.accumulator.incomplete_batches()
    assert batch.created_ms == 1_234_567
    assert [record[3] for record in batch.records] == [1_234_567, 42]
