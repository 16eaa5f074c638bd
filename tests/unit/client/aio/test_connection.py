"""BrokerConnection.send reports each request's outcome exactly once (no broker needed: the
stream under the connection is a stand-in whose writes fail)."""

from __future__ import annotations

import pytest
import trio

from client.aio.connection import BrokerConnection
from client.errors import BrokerConnectionError
from protocol.api_keys import ApiKey


class BrokenStream:
    async def send_all(self, data: bytes) -> None:
        raise trio.BrokenResourceError("peer went away")


class StalledStream:
    """``send_all`` waits until released, then fails as a socket closed meanwhile would."""

    def __init__(self) -> None:
        self.entered = trio.Event()
        self.release = trio.Event()

    async def send_all(self, data: bytes) -> None:
        self.entered.set()
        await self.release.wait()
        raise trio.ClosedResourceError("socket closed")


def connection(stream: object) -> BrokerConnection:
    conn = BrokerConnection("127.0.0.1", 9)
    conn._stream = stream  # type: ignore[assignment]
    return conn


async def test_a_failed_write_raises_and_never_calls_back():
    outcomes = []
    conn = connection(BrokenStream())
    with pytest.raises(BrokerConnectionError):
        await conn.send(ApiKey.PRODUCE, 9, b"", callback=lambda r, e: outcomes.append(e))
    assert outcomes == []
    assert conn.closed and conn.in_flight == 0


async def test_a_request_failed_by_a_concurrent_close_is_reported_once():
    """The connection fails (another task saw it die) while this request's bytes are being
    written: the callback reports the failure, so ``send`` must not raise it a second time (the
    producer would retry the same batch twice and wedge the partition)."""
    outcomes = []
    stream = StalledStream()
    conn = connection(stream)
    returned = []

    async def sender() -> None:
        pending = await conn.send(ApiKey.PRODUCE, 9, b"", callback=lambda r, e: outcomes.append(e))
        returned.append(pending)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        await stream.entered.wait()
        conn._fail(BrokerConnectionError("reader saw the connection close"))
        stream.release.set()
    assert len(outcomes) == 1 and isinstance(outcomes[0], BrokerConnectionError)
    assert len(returned) == 1 and returned[0] is not None
