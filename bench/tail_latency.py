"""Durable tail latency under a background load of large batches: this tree against another.

Each run starts a fresh durable broker (default flush: acks=all waits for fdatasync). A background
confluent-kafka producer keeps writing large batches (``--bg-batch`` bytes of 10 KiB records,
acks=all, to its own topic) for the whole run. Meanwhile, one after the other (never at once):

- ``--produce`` acks=all produce requests of one 100 B record each (confluent-kafka, produce then
  flush: the latency of one request);
- ``--txns`` transactions of one 100 B record each, timing commit_transaction (EndTxn and its
  markers).

p50 / p99 / p999 of both, per run; then medians over the runs of each tree. The machine is
shared: runs alternate base / this tree.

    .venv/bin/python bench/tail_latency.py --base bench/.cache/base --runs 3
    .venv/bin/python bench/tail_latency.py --base bench/.cache/base --runs 3 --model-disk serial

``--model-disk serial|parallel``: the storage layer alone, in-process (no clients, no network,
the data in /dev/shm), its fdatasync replaced by a sleep of ``--model-latency-ms`` plus bytes at
``--model-mb-per-s``, one at a time (serial: one device queue) or all at once (parallel). Two
tasks keep appending 1 MB batches to ``bg`` and waiting for their commits; one task times an
acks=all append of one 100 B record to ``fg``, then an "EndTxn": a transactional batch tied to
the ``txn`` partition, the Prepare record committed with it, then the marker (answered). What
the flusher's scheduling costs, without this machine's disk and CPU noise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def background(bootstrap: str, stop: threading.Event, batch: int, counter: list[int]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": batch, "enable.idempotence": True,
                         "queue.buffering.max.kbytes": 65536})
    value = b"b" * 10_240
    while not stop.is_set():
        try:
            producer.produce("bg", value)
            counter[0] += 1
        except BufferError:
            producer.poll(0.005)
    producer.flush(30)


def one_run(tree: Path | None, produce: int, txns: int, bg_batch: int) -> dict:
    from confluent_kafka import Producer

    spec = common.minibroker_spec(False, tree)
    with common.work_directory("tail") as work, common.RunningBroker(spec, work) as broker:
        common.create_topic(broker.bootstrap, "bg", 1)
        common.create_topic(broker.bootstrap, "fg", 1)
        fg = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
                       "enable.idempotence": True})
        txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tail",
                        "linger.ms": 0})
        txn.init_transactions(30)
        for _ in range(20):  # warm-up
            fg.produce("fg", b"w" * 100)
            fg.flush(10)
        stop, counter = threading.Event(), [0]
        thread = threading.Thread(target=background,
                                  args=(broker.bootstrap, stop, bg_batch, counter))
        thread.start()
        try:
            time.sleep(1.0)  # the background load settles
            cpu0, bg0, t0 = broker.cpu_seconds(), counter[0], time.perf_counter()
            produce_ms = []
            for _ in range(produce):
                started = time.perf_counter()
                fg.produce("fg", b"p" * 100)
                fg.flush(30)
                produce_ms.append((time.perf_counter() - started) * 1000)
            commit_ms = []
            for _ in range(txns):
                txn.begin_transaction()
                txn.produce("fg", b"t" * 100)
                txn.flush(30)
                started = time.perf_counter()
                txn.commit_transaction(30)
                commit_ms.append((time.perf_counter() - started) * 1000)
            elapsed = time.perf_counter() - t0
            bg_mb = (counter[0] - bg0) * 10_240 / common.MB
            cpu = broker.cpu_seconds() - cpu0
        finally:
            stop.set()
            thread.join()
    return {
        "produce_p50": percentile(produce_ms, 0.5), "produce_p99": percentile(produce_ms, 0.99),
        "produce_p999": percentile(produce_ms, 0.999),
        "endtxn_p50": percentile(commit_ms, 0.5), "endtxn_p99": percentile(commit_ms, 0.99),
        "endtxn_p999": percentile(commit_ms, 0.999),
        "bg_mb_per_s": bg_mb / elapsed, "broker_cpu_s": cpu,
        # The broker's CPU per MB of the background load (almost all of its work): the figure
        # a shared machine disturbs least.
        "cpu_ms_per_bg_mb": cpu * 1000 / bg_mb if bg_mb else float("nan"),
    }



# -- the model disk ----------------------------------------------------------------------------

MODEL_WORKER = r'''
import json, os, sys, tempfile, threading, time
import trio
import broker
from broker.log.manager import LogManager
from broker.log.partition import FlushTicket, Partition
from broker.log.topic_config import LogConfig
from broker.storage import DataArrived, FlushScheduler, Storage
from protocol.records import encode_batch

model, seconds, latency_ms, mb_per_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
# "serial": one device queue, first come first served (a sync waits for those before it)
device = threading.Condition()
queue = []
real_begin = Partition.begin_flush

def begin(self, *args, **kwargs):
    size = self.unsynced_bytes
    ticket = real_begin(self, *args, **kwargs)
    if ticket is not None:
        ticket.model_bytes = size
    return ticket

def sync(self):
    cost = latency_ms / 1000 + getattr(self, "model_bytes", 0) / (mb_per_s * 1e6)
    if model == "serial":
        me = object()
        with device:
            queue.append(me)
            device.wait_for(lambda: queue[0] is me)
        time.sleep(cost)
        with device:
            queue.pop(0)
            device.notify_all()
    else:
        time.sleep(cost)
    if self.owned:
        for fd in self.fds:
            os.close(fd)
    self.fds = []

Partition.begin_flush = begin
FlushTicket.sync = sync
NOW = 1_700_000_000_000

def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")

async def main(root):
    logs = LogManager(root, LogConfig(), NOW)
    for name in ("bg", "fg", "txn"):
        logs.create_topic(name, 1, None, NOW)
    arrived = DataArrived()
    s = Storage(logs, FlushScheduler(arrived), arrived, durable=True)
    bg, fg, txn = (s.partition(n, 0) for n in ("bg", "fg", "txn"))
    big = encode_batch([(None, b"b" * 10_240, (), NOW)] * 100)
    small = encode_batch([(None, b"p" * 100, (), NOW)])
    produce_ms, endtxn_ms, bg_mb = [], [], [0.0]
    stop = trio.Event()

    async def background():  # a producer with requests in flight: 1 MB batches
        while not stop.is_set():
            _, commit = s.append(bg, bytearray(big), NOW)
            if commit is not None:
                await commit.wait()
            bg_mb[0] += len(big) / 1e6

    async with trio.open_nursery() as nursery:
        nursery.start_soon(s.flusher.run)
        for _ in range(2):
            nursery.start_soon(background)
        await trio.sleep(0.5)
        cpu0, t0 = time.process_time(), time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            started = time.perf_counter()  # one acks=all Produce of one record
            _, commit = s.append(fg, bytearray(small), NOW)
            if commit is not None:
                await commit.wait()
            produce_ms.append((time.perf_counter() - started) * 1000)
            await trio.sleep(0.002)
            # EndTxn: a transactional batch (tied to the transaction log), then the Prepare
            # record committed with it, then the markers (answered: synced at once if idle)
            s.append(fg, bytearray(small), NOW, transactional=True)
            s.sync_together(fg, txn)
            started = time.perf_counter()
            txn.append_untrusted(bytearray(small), NOW)
            await s.commit([txn, fg]).wait()
            fg.append_untrusted(bytearray(small), NOW)
            await s.commit([fg], answered=True).wait()
            endtxn_ms.append((time.perf_counter() - started) * 1000)
            await trio.sleep(0.002)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        stop.set()
        await trio.sleep(0.2)
        nursery.cancel_scope.cancel()
    s.close()
    print(json.dumps({
        "produce_p50": pct(produce_ms, .5), "produce_p99": pct(produce_ms, .99),
        "produce_p999": pct(produce_ms, .999), "endtxn_p50": pct(endtxn_ms, .5),
        "endtxn_p99": pct(endtxn_ms, .99), "endtxn_p999": pct(endtxn_ms, .999),
        "bg_mb_per_s": bg_mb[0] / elapsed, "cpu_ms_per_bg_mb": cpu * 1000 / max(bg_mb[0], 1e-9),
        "fg_rounds_per_s": len(endtxn_ms) / elapsed, "rounds": s.flusher.rounds,
        "partition_syncs": s.flusher.partition_syncs, "cpu_s": cpu,
        "cpu_ms_per_sync": cpu * 1000 / max(s.flusher.partition_syncs, 1),
        "broker": broker.__file__}))

base = "/dev/shm" if os.path.isdir("/dev/shm") else None
with tempfile.TemporaryDirectory(prefix="tail-model-", dir=base) as root:
    trio.run(main, __import__("pathlib").Path(root))
'''


def model_run(tree: Path, model: str, seconds: float, latency_ms: float, mb_per_s: float) -> dict:
    """One in-process run of ``tree``'s storage layer on the model disk (no clients, no
    network): fdatasync replaced by a sleep of ``latency_ms`` + bytes / ``mb_per_s``, one at a
    time (``serial``: one device queue) or all at once (``parallel``); the data in /dev/shm."""
    import json
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", MODEL_WORKER, model, str(seconds),
                           str(latency_ms), str(mb_per_s)], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=seconds + 120, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not result.pop("broker").startswith(str(tree.resolve())):
        raise RuntimeError(f"the model run did not use {tree}'s broker")
    return result


FIGURES = ("produce_p50", "produce_p99", "produce_p999", "endtxn_p50", "endtxn_p99",
           "endtxn_p999", "bg_mb_per_s", "cpu_ms_per_bg_mb")
# The model's foreground loop is closed (the next request once the last is answered): a tree
# with shorter waits does more of them, and its CPU per background MB grows with them; CPU per
# partition fdatasync is the figure to compare.
MODEL_FIGURES = ("fg_rounds_per_s", "cpu_ms_per_sync")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the checkout to compare with")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--produce", type=int, default=2000)
    parser.add_argument("--txns", type=int, default=1000)
    parser.add_argument("--bg-batch", type=int, default=1 << 20)
    parser.add_argument("--model-disk", choices=("serial", "parallel"),
                        help="the storage layer alone on a model disk (see model_run)")
    parser.add_argument("--model-seconds", type=float, default=8.0)
    parser.add_argument("--model-latency-ms", type=float, default=0.5)
    parser.add_argument("--model-mb-per-s", type=float, default=100.0)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"base": [], "this": []}
    figures = FIGURES + MODEL_FIGURES if args.model_disk else FIGURES
    for run in range(args.runs):
        for name, tree in (("base", args.base), ("this", common.REPO_ROOT)):
            if args.model_disk:
                r = model_run(tree, args.model_disk, args.model_seconds, args.model_latency_ms,
                              args.model_mb_per_s)
            else:
                r = one_run(tree, args.produce, args.txns, args.bg_batch)
            results[name].append(r)
            print(f"run {run + 1} {name}: " + ", ".join(f"{k} {r[k]:.2f}" for k in figures),
                  flush=True)
    rows = []
    for name, runs in results.items():
        cells = []
        for key in figures:
            values = [r[key] for r in runs]
            cells.append(f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})")
        rows.append([name, *cells])
    print(common.markdown_table(["tree", "produce p50 ms", "p99", "p999", "EndTxn p50 ms", "p99",
                                 "p999", "background MB/s", "broker CPU ms per bg MB",
                                 *(["foreground loops/s", "CPU ms per partition sync"]
                                   if args.model_disk else [])], rows))
    common.write_results_json("tail_latency", {"args": vars(args) | {"base": str(args.base)},
                                               "results": results})


if __name__ == "__main__":
    main()
