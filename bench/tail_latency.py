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
    }


FIGURES = ("produce_p50", "produce_p99", "produce_p999", "endtxn_p50", "endtxn_p99",
           "endtxn_p999", "bg_mb_per_s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the checkout to compare with")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--produce", type=int, default=2000)
    parser.add_argument("--txns", type=int, default=1000)
    parser.add_argument("--bg-batch", type=int, default=1 << 20)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"base": [], "this": []}
    for run in range(args.runs):
        for name, tree in (("base", args.base), ("this", common.REPO_ROOT)):
            r = one_run(tree, args.produce, args.txns, args.bg_batch)
            results[name].append(r)
            print(f"run {run + 1} {name}: " + ", ".join(f"{k} {r[k]:.1f}" for k in FIGURES),
                  flush=True)
    rows = []
    for name, runs in results.items():
        cells = []
        for key in FIGURES:
            values = [r[key] for r in runs]
            cells.append(f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})")
        rows.append([name, *cells])
    print(common.markdown_table(["tree", "produce p50 ms", "p99", "p999", "EndTxn p50 ms", "p99",
                                 "p999", "background MB/s"], rows))
    common.write_results_json("tail_latency", {"args": vars(args) | {"base": str(args.base)},
                                               "results": results})


if __name__ == "__main__":
    main()
