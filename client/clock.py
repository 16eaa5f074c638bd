"""The client's one clock: every reading of time in the client goes through a ``Clock``
(``AsyncProducer``, ``AsyncConsumer`` and ``AsyncAdmin`` take one: ``clock=...``; the blocking
facades use their engine's), so that tests drive it instead of patching ``time``. Kafka's clients
do the same with ``org.apache.kafka.common.utils.Time`` (``milliseconds()`` and ``nanoseconds()``).

- ``now_ns``: wall-clock time, for what is stamped (record timestamps, a batch's creation time
  from which linger and delivery deadlines count, the age of a transaction);
- ``monotonic_ns``: for intervals measured outside the trio loop (the auto-commit interval, which
  the blocking consumer checks in the application's thread; a blocking call's own deadline).

Durations the engine waits for on its loop (sleeps, request deadlines, backoffs) are trio's
(``trio.current_time``), which tests drive with ``trio.testing.MockClock``.

It counts nanoseconds (the broker's ``broker.clock.Clock`` counts milliseconds; the client does not
import it) because the producer reads it for every record: ``WallClock.now_ns`` is
``time.time_ns`` itself, a C function, where a Python method returning milliseconds cost 4-7% of
the producer's records/s with 100-byte values (bench/clients.py)."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ns(self) -> int: ...

    def monotonic_ns(self) -> int: ...


class WallClock:
    now_ns = staticmethod(time.time_ns)
    monotonic_ns = staticmethod(time.monotonic_ns)


def monotonic_s(clock: Clock) -> float:
    """``clock``'s monotonic time in seconds (the blocking facades' deadlines)."""
    return clock.monotonic_ns() / 1e9
