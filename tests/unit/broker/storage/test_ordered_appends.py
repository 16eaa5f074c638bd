"""OrderedAppends: appends run in submission order per partition whatever order their worker
thread checks finish in; a failed check skips its append and holds up nothing."""

from __future__ import annotations

import threading
import weakref

import trio

from broker.storage.ordered_appends import OrderedAppends


async def test_appends_run_in_submission_order_per_partition():
    appends = OrderedAppends(threads=2)
    release_first = threading.Event()
    ran: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(appends.run)
        await trio.sleep(0.01)
        assert appends.running
        slow = appends.submit("p", lambda: release_first.wait(10), lambda: ran.append("slow"))
        fast = appends.submit("p", lambda: None, lambda: ran.append("fast"))
        checked_now = appends.submit("p", None, lambda: ran.append("checked-now"))
        other = appends.submit("q", lambda: None, lambda: ran.append("other partition"))
        await other.done.wait()
        await trio.sleep(0.05)  # the fast check is done, but its turn has not come
        assert ran == ["other partition"] and "p" in appends.queues
        release_first.set()
        await appends.wait([slow, fast, checked_now])
        assert ran == ["other partition", "slow", "fast", "checked-now"]
        assert appends.queues == {}
        nursery.cancel_scope.cancel()


async def test_a_failed_check_skips_its_append_only():
    appends = OrderedAppends(threads=1)
    ran: list[str] = []

    def refuse() -> None:
        raise ValueError("bad records")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(appends.run)
        await trio.sleep(0.01)
        bad = appends.submit("p", refuse, lambda: ran.append("bad"))
        good = appends.submit("p", None, lambda: ran.append("good"))
        await appends.wait([bad, good])
        assert isinstance(bad.error, ValueError) and good.error is None
        assert ran == ["good"]
        # With nothing waiting, an append that needs no check runs at once.
        now = appends.submit("p", None, lambda: ran.append("now"))
        assert now.done.is_set() and ran == ["good", "now"]
        nursery.cancel_scope.cancel()


async def test_a_failed_check_keeps_nothing_its_frames_held():
    # The error stays with its entry until the request is answered; what the check had read (a
    # gzip bomb's inflated parts) must not stay with it.
    appends = OrderedAppends(threads=1)
    held: list[weakref.ref] = []

    class Inflated:
        pass

    def refuse() -> None:
        parts = Inflated()
        held.append(weakref.ref(parts))
        try:
            raise ValueError("inflates beyond the limit")
        except ValueError as exc:
            raise RuntimeError("refused") from exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(appends.run)
        await trio.sleep(0.01)
        bad = appends.submit("p", refuse, lambda: None)
        await appends.wait([bad])
        assert isinstance(bad.error, RuntimeError)
        assert isinstance(bad.error.__cause__, ValueError)  # the chain and tracebacks stay
        assert bad.error.__traceback__ is not None
        assert held[0]() is None  # but not the check's locals
        nursery.cancel_scope.cancel()
