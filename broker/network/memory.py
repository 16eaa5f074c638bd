"""Memory given back while serving: the collector's settings once start is done, and after
connections close a young-generation collection and the C heap trimmed (``server.py`` calls
``closed_connection`` per close and runs ``release_memory``)."""

from __future__ import annotations

import gc
from collections.abc import Callable

import trio

# Young-generation threshold of the cyclic garbage collector while serving (Python's default:
# 700). Each request allocates a few dozen containers that reference counting frees; at the
# default the collector ran about every dozen requests and, through the full collections, kept
# walking every object recovery built (indexes, producer states, partitions): 3.8% of the broker's
# CPU samples at 50 transactional producers (perf, cpu-clock), 1.0% with this and ``gc.freeze``.
# The garbage cycles it collects (exceptions with their tracebacks, finished coroutines) wait at
# most this many allocations more: a few MB.
GC_YOUNG_THRESHOLD = 20_000


# Connections closed since the last collection. A closed connection leaves garbage cycles
# (its task's coroutine frames, exceptions and their tracebacks) that reference counting does
# not free; with the young threshold raised (below) and a connection's objects promoted while it
# lived, they waited for a collection that a quiet broker does not run soon, and the C heap kept
# the freed pages: 1,000 closed connections kept about 45 MB. A collection of the two young
# generations frees them (measured: +2.4 MB left of 1,000 connections' +33 MB) and, unlike a full
# one, does not walk what the broker built since start.
_COLLECT_AFTER_CLOSES = 32
_closes = 0


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("c")
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None  # not glibc


_malloc_trim = _load_malloc_trim()


def _trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc keeps them otherwise: the receive
    buffers and messages of 1,000 closed connections stayed in the broker's RSS)."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def closed_connection() -> None:
    global _closes
    _closes += 1


async def release_memory() -> None:
    """Once a second: after at least ``_COLLECT_AFTER_CLOSES`` connections closed, a collection
    of the young generations and the heap trimmed, so that what they held goes back to the
    system."""
    global _closes
    while True:
        await trio.sleep(1.0)
        if _closes >= _COLLECT_AFTER_CLOSES:
            _closes = 0
            gc.collect(1)
            _trim_heap()


def settle_garbage_collector() -> None:
    """After recovery, before serving: what start built is kept for good (``gc.freeze``: the
    collector no longer walks it), and young collections run less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
