"""A trio loop in a background thread: what the blocking facades run their engine on.

The thread's main task enters the engine's ``async with`` and waits until ``stop()``; every
blocking call is ``trio.from_thread.run`` with the loop's token, so the facades may be used from
several threads at once (calls are serialised onto the loop). Calling a blocking method from the
loop thread itself (say, from a delivery callback) would deadlock and raises instead.

asyncio: the engines run on trio and refuse to start under asyncio (``require_trio``) with a
message saying what to use instead. The blocking facades work from any thread, but a blocking call
made from a thread that runs an asyncio event loop stalls that loop: the first such call warns
(``RuntimeWarning``) and names the way out (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import math
import threading
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from client.errors import IllegalStateError, KafkaTimeoutError

T = TypeVar("T")


def asyncio_running() -> bool:
    """Whether the calling thread is running an asyncio event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def require_trio(engine: str, facade: str) -> None:
    """Refuse to start the trio engine ``engine`` inside asyncio, naming what works there."""
    if asyncio_running():
        raise IllegalStateError(
            f"{engine} runs on trio and cannot be used from asyncio. Under asyncio use the "
            f"blocking client.{facade} from a worker thread (await asyncio.to_thread(...)), "
            f"or run this code with trio.run()."
        )


class LoopThread:
    """Runs ``async with engine:`` on a trio loop in a daemon thread until ``stop()``."""

    def __init__(self, engine: Any, name: str) -> None:
        self._engine = engine
        self._started = threading.Event()
        self._startup_error: BaseException | None = None
        self.token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._stopped = False
        self._warned_asyncio = False

    def start(self) -> None:
        self._thread.start()
        self._started.wait()
        if self._startup_error is not None:
            self._thread.join()
            raise self._startup_error

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            if not self._started.is_set():
                self._startup_error = exc
        finally:
            self._started.set()

    async def _main(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with self._engine:
            self._started.set()
            await self._stop.wait()

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any, timeout: float | None = None) -> T:
        """Run ``await fn(*args)`` on the loop and return its result (or raise its exception)."""
        self._check_callable()
        if timeout is None:
            return trio.from_thread.run(fn, *args, trio_token=self.token)

        async def bounded() -> T:
            with trio.move_on_after(timeout if timeout >= 0 else math.inf):
                return await fn(*args)
            raise KafkaTimeoutError(f"{getattr(fn, '__name__', 'call')} timed out after {timeout} s")

        return trio.from_thread.run(bounded, trio_token=self.token)

    def call_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run the synchronous ``fn(*args)`` on the loop thread."""
        self._check_callable()
        return trio.from_thread.run_sync(fn, *args, trio_token=self.token)

    def _check_callable(self) -> None:
        if self._stopped:
            raise IllegalStateError("the client is closed")
        if self.in_loop_thread:
            raise IllegalStateError(
                "blocking client methods cannot be called from the client's own thread "
                "(a callback); use the Async* API there"
            )
        if not self._warned_asyncio and asyncio_running():
            self._warned_asyncio = True
            warnings.warn(
                f"a blocking {self._thread.name} call from inside a running asyncio event "
                "loop stalls that loop until it returns; call it through "
                "`await asyncio.to_thread(...)` (or loop.run_in_executor)",
                RuntimeWarning,
                stacklevel=4,
            )

    def stop(self) -> None:
        """Leave the engine's ``async with`` and wait for the thread to end."""
        if self._stopped:
            return
        self._stopped = True
        if self.in_loop_thread:
            raise IllegalStateError("cannot close the client from its own thread")
        stop = self._stop
        if stop is not None:  # None: the loop never started
            try:
                trio.from_thread.run_sync(stop.set, trio_token=self.token)
            except trio.RunFinishedError:
                pass
        self._thread.join()
