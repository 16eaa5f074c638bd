"""broker/clock.py: the one clock the composition root injects."""

from __future__ import annotations

import time

import trio

from broker.clock import ManualClock, TrioClock, WallClock


def test_wall_clock_is_the_system_time_in_ms() -> None:
    before = time.time_ns() // 1_000_000
    now = WallClock().now_ms()
    assert before <= now <= time.time_ns() // 1_000_000


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(1_000)
    assert clock.now_ms() == clock.now_ms() == 1_000
    clock.advance(250)
    assert clock.now_ms() == 1_250
    clock.set(5)
    assert clock.now_ms() == 5


async def test_trio_clock_follows_virtual_time(autojump_clock) -> None:
    clock = TrioClock(1_700_000_000_000)
    assert clock.now_ms() == 1_700_000_000_000
    await trio.sleep(3.5)
    assert clock.now_ms() == 1_700_000_003_500
