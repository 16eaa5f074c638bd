"""Many partitions in-process: wall, CPU and file-system calls of each start and close phase.

    .venv/bin/python bench/many_partitions_calls.py [--partitions 10000] [--tree DIR]

The restart phases of ``many_partitions.py`` without the network, so that each is measured on
its own and its calls counted: the tree's broker is built in this process (``build_broker``) on
a fresh data dir under bench/.cache/; one idempotent 60-byte batch is appended to each of
``--partitions`` partitions and settled, then: close (every partition changed), clean start,
close (nothing changed), one more batch each and close (every partition changed), one more
batch each and a simulated kill -9 (descriptors dropped, nothing written), the unclean start,
its recovery points (``prepare_recovery_points``, where the tree has it: what ``serve`` runs
once it listens), a kill -9 again and a start (nothing changed), close. Each phase prints wall
seconds, CPU seconds of the process (all threads) and how often each ``os`` file function (and
``io.open``, ``syncfs``) was called. ``--tree``: run another checkout's broker (its directory
goes first on ``sys.path``). The machine may be shared: CPU and counts say more than wall.
"""

from __future__ import annotations

import argparse
import collections
import io
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

COUNTED = ["open", "fsync", "fdatasync", "listdir", "unlink", "replace", "rename", "mkdir",
           "ftruncate", "pread", "pwrite", "write", "stat", "fstat", "scandir"]
NOW = 1_700_000_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    counts: collections.Counter[str] = collections.Counter()

    def wrap(module: object, name: str, label: str) -> None:
        real = getattr(module, name)

        def counted(*a: object, **k: object) -> object:
            counts[label] += 1
            return real(*a, **k)

        setattr(module, name, counted)

    for name in COUNTED:
        wrap(os, name, name)
    wrap(io, "open", "io.open")
    import builtins

    builtins.open = io.open  # type: ignore[assignment]  (pathlib's read_bytes and the like)
    import broker.storage.syncfs as syncfs
    from broker.app import build_broker
    from broker.clock import ManualClock
    from broker.config import build_config
    from protocol.records import encode_batch

    wrap(syncfs, "syncfs", "syncfs")
    cache = Path(__file__).resolve().parent / ".cache"
    cache.mkdir(exist_ok=True)
    data = Path(tempfile.mkdtemp(prefix="many-partitions-calls-", dir=cache)) / "data"
    config = build_config({}, port=0, data_dir=data)
    n = args.partitions

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def phase(label: str, fn):  # type: ignore[no-untyped-def]
        counts.clear()
        t0, c0 = time.perf_counter(), cpu()
        out = fn()
        print(f"{label}: wall {time.perf_counter() - t0:.2f} s, cpu {cpu() - c0:.2f} s, "
              f"calls {dict(sorted(counts.items()))}", flush=True)
        return out

    def start():  # type: ignore[no-untyped-def]
        return build_broker(config, clock=ManualClock(NOW))

    def append_each(b) -> None:  # type: ignore[no-untyped-def]
        for i in range(n):
            p = b.logs.partition("t", i)
            p.append_untrusted(bytearray(encode_batch(
                [(b"k", b"v" * 60, (), NOW)], producer_id=1000, producer_epoch=0,
                base_sequence=p.log_end_offset)), NOW)
        b.storage.settle()

    def kill9(b) -> None:  # type: ignore[no-untyped-def]
        for p in b.logs.all_partitions():
            p.txn_index.close(sync=False)
            for seg in p.segments:
                seg.close()
        b.storage._lock.release()

    def scanned(b) -> str:  # type: ignore[no-untyped-def]
        return f"  ({sum(not r.clean for r in b.logs.recovered)} partitions scanned)"

    try:
        b = start()
        b.logs.create_topic("t", n)
        append_each(b)
        phase("close, every partition changed (first close)", b.close)
        b = phase("clean start", start)
        print(scanned(b))
        phase("close, nothing changed", b.close)
        b = start()
        append_each(b)
        phase("close, every partition changed", b.close)
        b = start()
        append_each(b)
        kill9(b)
        b = phase("start after kill -9, every partition changed", start)
        print(scanned(b))
        prepare = getattr(b.storage, "prepare_recovery_points", None)
        if prepare is not None:
            def points() -> None:
                pending = prepare()
                if pending is not None:
                    pending.write()
                    pending.commit()
            phase("its recovery points once listening (event loop + worker thread)", points)
        kill9(b)
        b = phase("start after kill -9, nothing changed", start)
        print(scanned(b))
        phase("close after that", b.close)
    finally:
        shutil.rmtree(data.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
