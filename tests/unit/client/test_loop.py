"""The background trio loop behind the blocking facades."""

from __future__ import annotations

import threading

import pytest
import trio

from client._loop import LoopThread
from client.errors import IllegalStateError, KafkaTimeoutError


class Engine:
    def __init__(self, fail_on_enter: bool = False) -> None:
        self.fail_on_enter = fail_on_enter
        self.entered = self.exited = False
        self.thread: threading.Thread | None = None

    async def __aenter__(self) -> Engine:
        if self.fail_on_enter:
            raise ValueError("cannot start")
        self.entered = True
        self.thread = threading.current_thread()
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.exited = True

    async def add(self, a: int, b: int) -> int:
        await trio.sleep(0)
        return a + b

    async def slow(self) -> None:
        await trio.sleep(10)

    async def boom(self) -> None:
        raise KeyError("inside")

    def where(self) -> threading.Thread:
        return threading.current_thread()


def test_calls_run_on_the_loop_thread_and_stop_exits_the_engine():
    engine = Engine()
    loop = LoopThread(engine, "test-loop")
    loop.start()
    try:
        assert engine.entered and engine.thread is not threading.current_thread()
        assert loop.call(engine.add, 2, 3) == 5
        assert loop.call_sync(engine.where) is engine.thread
        with pytest.raises(KeyError):
            loop.call(engine.boom)
        with pytest.raises(KafkaTimeoutError):
            loop.call(engine.slow, timeout=0.05)
    finally:
        loop.stop()
    assert engine.exited
    with pytest.raises(IllegalStateError, match="closed"):
        loop.call(engine.add, 1, 1)
    loop.stop()  # idempotent


def test_calls_from_several_threads():
    engine = Engine()
    loop = LoopThread(engine, "test-loop")
    loop.start()
    results = []
    try:
        threads = [
            threading.Thread(target=lambda i=i: results.append(loop.call(engine.add, i, i)))
            for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        loop.stop()
    assert sorted(results) == [2 * i for i in range(8)]


def test_blocking_call_from_the_loop_thread_is_refused():
    engine = Engine()
    loop = LoopThread(engine, "test-loop")
    loop.start()
    try:

        def nested() -> None:
            loop.call(engine.add, 1, 2)  # would deadlock: the loop is busy running us

        with pytest.raises(IllegalStateError, match="own thread"):
            loop.call_sync(nested)
    finally:
        loop.stop()


def test_startup_error_is_raised_in_the_caller():
    loop = LoopThread(Engine(fail_on_enter=True), "test-loop")
    with pytest.raises(ValueError, match="cannot start"):
        loop.start()
