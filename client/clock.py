"""The client's clock for what is stamped in wall-clock milliseconds (record timestamps, linger
and delivery deadlines of the accumulator). The engine takes one (``AsyncProducer(config,
clock=...)``), so that tests drive it instead of patching; durations it waits for are trio's.
Same shape as the broker's ``broker.clock.Clock``, which the client does not import."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...


class WallClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000
