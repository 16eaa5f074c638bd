"""The thread pool that loads, creates and closes partitions at once (``manager.py``): their
fsyncs overlap (the journal commits them together)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from broker.log.partition import Partition
from broker.log.segment import fsync_dir

# Threads that load, create and close partitions at once (their fsyncs overlap). Measured on this
# VM (bench/many_partitions.py): see bench/README.md.
_FILE_THREADS = 16
_FILE_POOL = concurrent.futures.ThreadPoolExecutor(_FILE_THREADS, thread_name_prefix="logs")


def close_without_fsync(partition: Partition) -> bool:
    """``Partition.close(fsync=False)``: True if it wrote anything left to sync."""
    return partition.close(fsync=False)


def sync_directory_files(directory: Path) -> None:
    """fsync every file of a partition directory, then the directory (the fallback of a close
    without per-file fsyncs where the file system cannot be synced at once)."""
    for name in os.listdir(directory):
        fd = os.open(directory / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_dir(directory)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection meanwhile: loading, or collecting every partition's clean point,
    builds many objects that all live on (or are dropped at once), and the collector would walk
    every partition's again and again (0.2-0.5 s at 10,000 partitions); the server freezes them
    after."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def in_threads(fn: Callable, items: list) -> list:
    """``[fn(item) for item in items]`` run by the file thread pool (one item: inline); the
    first exception is raised once every call has ended."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    # In chunks, a few per thread: a future per item cost 50 us each of the calling thread's
    # time (half a second at 10,000 partitions).
    size = max(1, -(-len(items) // (4 * _FILE_THREADS)))
    chunks = [items[i:i + size] for i in range(0, len(items), size)]
    futures = [_FILE_POOL.submit(_run_chunk, fn, chunk) for chunk in chunks]
    concurrent.futures.wait(futures)
    results: list = []
    errors = []
    for future in futures:
        done, error = future.result()
        results.extend(done)
        if error is not None:
            errors.append(error)
    if errors:
        raise errors[0]
    return results


def _run_chunk(fn: Callable, chunk: list) -> tuple[list, BaseException | None]:
    """``fn`` over ``chunk``, every item even after one failed: (results, the first error)."""
    out, first = [], None
    for item in chunk:
        try:
            out.append(fn(item))
        except BaseException as exc:  # noqa: BLE001  (handed to the caller, which raises it)
            if first is None:
                first = exc
    return out, first
