"""The broker's one clock: wall-clock milliseconds, injected by the composition root.

Domain code never reads a clock: it takes ``now_ms`` as an argument. The composition root
(``broker/app.py``) builds one ``Clock`` and hands it to the services and the server, which read it
once per request or timer. Tests pass a ``ManualClock`` (set and advanced by the test) or a
``TrioClock`` (follows trio's clock, so ``autojump_clock`` drives it) instead of patching objects.

Waiting for a deadline given on this clock (the group service's rebalance timers) sleeps for the
difference ``deadline_ms - now_ms()`` on trio's clock: a duration, never a mix of two time bases.
"""

from __future__ import annotations

import time
from typing import Protocol

import trio


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch (what records and timers are stamped with)."""
        ...


class WallClock:
    """The production clock: the system's wall clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when the test moves it."""

    def __init__(self, now_ms: int) -> None:
        self._now = now_ms

    def now_ms(self) -> int:
        return self._now

    def set(self, now_ms: int) -> None:
        self._now = now_ms

    def advance(self, ms: int) -> None:
        self._now += ms


class TrioClock:
    """``start_ms`` plus the trio time elapsed since construction (call inside ``trio.run``):
    with pytest-trio's ``autojump_clock`` timers then run in virtual time."""

    def __init__(self, start_ms: int) -> None:
        self._start_ms = start_ms
        self._origin = trio.current_time()

    def now_ms(self) -> int:
        return self._start_ms + int((trio.current_time() - self._origin) * 1000)
