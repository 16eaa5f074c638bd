"""Shared pieces of the engine's unit tests: the scripted broker and a clock on trio's time."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from tests.unit.client.aio.scripted_broker import ScriptedBroker

EPOCH_NS = 1_700_000_000_000_000_000  # the wall clock's reading at trio time 0


class TrioClock:
    """The client's Clock on trio's (mock) time: record timestamps and batch ages move with the
    autojump clock, so a retry backoff or a linger deadline passes without real waiting."""

    def now_ns(self) -> int:
        return EPOCH_NS + int(trio.current_time() * 1e9)

    def monotonic_ns(self) -> int:
        return int(trio.current_time() * 1e9)


@pytest.fixture
def clock() -> TrioClock:
    return TrioClock()


@pytest.fixture
async def broker() -> AsyncIterator[ScriptedBroker]:
    """A scripted broker (node 0 at broker0:9092) serving until the test ends."""
    scripted = ScriptedBroker()
    async with trio.open_nursery() as nursery:
        scripted.nursery = nursery
        yield scripted
        nursery.cancel_scope.cancel()
