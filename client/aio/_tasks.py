"""The nursery an engine's background tasks live in, from its ``async with`` entry to its exit.

``AsyncProducer``, ``AsyncConsumer`` and ``AsyncAdmin`` each own one: the sender, the fetch
manager, heartbeats, commits and every connection's reader task run in it, so leaving the
``async with`` block cancels and waits for all of them (structured concurrency; STYLE.md 10).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import trio

from client.errors import IllegalStateError


class EngineTasks:
    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._stack: AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None
        self.token: trio.lowlevel.TrioToken | None = None  # of the loop the engine runs on

    @property
    def running(self) -> bool:
        return self._stack is not None

    @property
    def nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise IllegalStateError(f"{self._owner} is not started: use it in `async with`")
        return self._nursery

    async def open(self) -> trio.Nursery:
        """Open the nursery (in the task that enters the engine's ``async with``)."""
        if self._stack is not None:
            raise IllegalStateError(f"{self._owner} already started")
        stack = AsyncExitStack()
        nursery = await stack.enter_async_context(trio.open_nursery())
        self._stack, self._nursery = stack, nursery
        self.token = trio.lowlevel.current_trio_token()
        return nursery

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        self.nursery.start_soon(fn, *args)

    def cancel(self) -> None:
        """Cancel every task (the exit then waits for them in ``aclose``)."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def aclose(self) -> None:
        """Wait for the cancelled tasks and close the nursery."""
        stack, self._stack = self._stack, None
        if stack is not None:
            try:
                await stack.aclose()
            finally:
                self._nursery = None
