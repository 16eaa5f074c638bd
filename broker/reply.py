"""Reply types: what a service returns when its answer is not a plain value now.

- ``Deferred(async_fn)``: the result comes later (acks=all fsync, long-poll fetch, a rebalance,
  the markers of EndTxn); the connection awaits it in request order;
- ``AnswerFirst(value, finish)``: answer ``value`` at once, then run ``finish()`` (the fsync of a
  change already decided) right after the answer is sent and before anything else runs;
- ``NO_RESPONSE``: no answer at all (Produce with acks=0).

They sit below the dispatcher so that the services (``broker/txn``, ``broker/group``) can return
them without importing the shell; the handlers turn results into responses with
``reply(result, encode)`` and the dispatcher and server await or send them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
U = TypeVar("U")

NO_RESPONSE = object()


class Deferred(Generic[T]):
    """A result that needs waiting for; a reply of this type is awaited by the connection in
    request order.

    ``hold``: the connection reads no further request until it returns (Kafka mutes a channel
    while its request is processed), and the request's frame keeps its share of
    ``queued.max.request.bytes`` until then: a Produce whose appends wait for a worker thread
    (``broker/storage/ordered_appends.py``)."""

    __slots__ = ("hold", "wait")

    def __init__(self, wait: Callable[[], Awaitable[T]],
                 hold: Callable[[], Awaitable[None]] | None = None) -> None:
        self.wait = wait
        self.hold = hold

    def then(self, fn: Callable[[T], U]) -> Deferred[U]:
        """The deferred result of ``fn`` applied to this one's."""
        wait = self.wait

        async def mapped() -> U:
            return fn(await wait())

        return Deferred(mapped, self.hold)


class AnswerFirst(Generic[T]):
    """A result to answer at once, with ``finish``: work the answer does not depend on (making
    a decided change durable) that must be done before anything else sees the broker.

    The connection sends the answer and calls ``finish()`` straight after, with no checkpoint
    between: no other request, on any connection, is read or handled before ``finish`` ends,
    unless the send had to wait for the socket (the services then guard the state themselves).
    The peer learns the outcome one fsync earlier, while it prepares its next request. An answer
    that must wait behind an earlier deferred reply has ``finish`` run first, then waits.
    """

    __slots__ = ("finish", "value")

    def __init__(self, value: T, finish: Callable[[], None]) -> None:
        self.value = value
        self.finish = finish


class _Waitable(Protocol):
    async def wait(self) -> Any: ...


def after(events: Iterable[_Waitable], value: T) -> Deferred[T]:
    """``value``, once every event is set (e.g. the group-commit fsyncs a reply waits for)."""
    pending = list(events)

    async def wait() -> T:
        for event in pending:
            await event.wait()
        return value

    return Deferred(wait)


def reply(
    result: T | Deferred[T] | AnswerFirst[T], encode: Callable[[T], U]
) -> U | Deferred[U] | AnswerFirst[U]:
    """``encode(result)`` now, or once a deferred result is there."""
    if isinstance(result, Deferred):
        return result.then(encode)
    if isinstance(result, AnswerFirst):
        try:
            value = encode(result.value)
        except BaseException:
            result.finish()  # the change is decided: make it durable even if the answer fails
            raise
        return AnswerFirst(value, result.finish)
    return encode(result)
