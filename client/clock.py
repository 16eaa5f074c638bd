"""The client's clock for what is stamped in wall-clock time (record timestamps, linger and
delivery deadlines of the accumulator, in milliseconds). The engine takes one
(``AsyncProducer(config, clock=...)``), so that tests drive it instead of patching; durations it
waits for are trio's.

It counts nanoseconds (the broker's ``broker.clock.Clock`` counts milliseconds; the client does not
import it) because the producer reads it for every record: ``WallClock.now_ns`` is
``time.time_ns`` itself, a C function, where a Python method returning milliseconds cost 4-7% of
the producer's records/s with 100-byte values (bench/clients.py)."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ns(self) -> int: ...


class WallClock:
    now_ns = staticmethod(time.time_ns)
