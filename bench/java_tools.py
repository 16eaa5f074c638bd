"""Kafka's own Java tools against minibroker (this tree, and another checkout as "before") and a
one-node Kafka 4.4, in one run.

Tools (Kafka 4.4.0's jars through tests/kafka_ref: the same harness as bench/kafka_anchor.py):
ProducerPerformance (1 KiB and 100 B records, acks=all, the Java client's defaults: batch.size
16 KiB, linger.ms 5), ConsumerPerformance (the 1 KiB topic from the start, fetch defaults) and
EndToEndLatency (100 B, acks=all, one record at a time).

Pairs, each broker started fresh for every run, the brokers of a run in turns (the order rotates
from run to run):

- durable: minibroker's default (acks=all answered after fdatasync) vs Kafka with
  ``log.flush.interval.messages=1``;
- page-cache: minibroker ``--flush never`` vs Kafka's defaults.

On each fresh broker a short ProducerPerformance and ConsumerPerformance run first, untimed (the
JIT, the page cache, Python's imports). Figures per cell: the median of ``--runs`` runs and the
range. The primary figures are CPU-time ones, from /proc/<pid>/stat of the broker: broker CPU ms
per produced and per consumed MB; throughput and latency are printed too, noisy on a shared
machine. Peak RSS (VmHWM) at the end of each run.

    .venv/bin/python bench/java_tools.py --base bench/.cache/base --runs 3
    .venv/bin/python bench/java_tools.py --cells consume,e2e --pair durable --runs 3

``--cells`` times a subset of the tools (produce1k, produce100, consume, e2e; consume produces
its topic untimed when produce1k is not among them), ``--warmup`` the untimed records first.

Writes bench/results/java-tools-<ts>.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as common  # noqa: E402  (bench/ is not a package)
import kafka_anchor  # noqa: E402

from tests.kafka_ref.harness import java_command, unavailable  # noqa: E402

PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
END_TO_END = "org.apache.kafka.tools.EndToEndLatency"
# The perf tools run long enough for the JIT: a normal JVM, not the harness's quick-start options.
TOOL_JVM = ["-Xmx512m"]
PARTITIONS = 3


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def tool(main: str, *args: str, timeout: float = 600) -> str:
    done = subprocess.run(java_command(main, *args, jvm_opts=TOOL_JVM, programs=False),
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{main} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


class Mini:
    def __init__(self, work: Path, flush_never: bool, tree: Path | None, label: str) -> None:
        self.label = label
        self.running = common.RunningBroker(common.minibroker_spec(flush_never, tree), work)

    def start(self) -> None:
        self.running.__enter__()

    def stop(self) -> None:
        self.running.stop()

    @property
    def bootstrap(self) -> str:
        return self.running.bootstrap

    def cpu_seconds(self) -> float:
        return self.running.cpu_seconds()

    def memory(self) -> common.Memory:
        return self.running.memory()


def produce(broker, topic: str, records: int, size: int) -> dict:
    before = broker.cpu_seconds()
    out = tool(PRODUCER_PERF, "--topic", topic, "--num-records", str(records), "--record-size",
               str(size), "--throughput", "-1", "--producer-props",
               f"bootstrap.servers={broker.bootstrap}", "acks=all")
    cpu = common.settled_cpu_seconds(broker.cpu_seconds) - before
    last = out.strip().splitlines()[-1]
    match = re.search(r"([\d.]+) records/sec \(([\d.]+) MB/sec\).*?([\d.]+) ms 99th", last)
    if match is None:
        raise RuntimeError(f"ProducerPerformance said: {last}")
    mb = records * size / common.MB
    return {"records_per_s": float(match[1]), "p99_ms": float(match[3]),
            "cpu_ms_per_mb": cpu / mb * 1000}


def consume(broker, topic: str, records: int) -> dict:
    before = broker.cpu_seconds()
    out = tool(CONSUMER_PERF, "--bootstrap-server", broker.bootstrap, "--topic", topic,
               "--messages", str(records), "--timeout", "60000")
    cpu = common.settled_cpu_seconds(broker.cpu_seconds) - before
    header, row = out.strip().splitlines()[-2:]
    values = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")],
                      strict=False))
    mb = float(values["data.consumed.in.MB"]) * 1024 * 1024 / common.MB  # the tool's MiB
    return {"fetch_mb_per_s": float(values["fetch.MB.sec"]), "mb": mb,
            "cpu_ms_per_mb": cpu / mb * 1000 if mb else float("nan")}


def end_to_end(broker, topic: str, records: int) -> dict:
    out = tool(END_TO_END, "--bootstrap-server", broker.bootstrap, "--topic", topic,
               "--num-records", str(records), "--producer-acks", "all", "--record-size", "100")
    match = re.search(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99.9th = ([\d.]+)", out)
    if match is None:
        raise RuntimeError(f"EndToEndLatency said: {out[-500:]}")
    return {"e2e_p50_ms": float(match[1]), "e2e_p99_ms": float(match[2]),
            "e2e_p999_ms": float(match[3])}


CELLS = ("produce1k", "produce100", "consume", "e2e")


def one_run(broker, records_1k: int, records_100: int, e2e: int,
            cells: tuple[str, ...] = CELLS, warmup: int = 20_000) -> dict:
    broker.start()
    out: dict = {}
    try:
        for topic in ("warm", "t1k", "t100", "e2e"):
            common.create_topic(broker.bootstrap, topic, PARTITIONS if topic != "e2e" else 1)
        if warmup:
            produce(broker, "warm", warmup, 1024)  # untimed: JIT, page cache, imports
            consume(broker, "warm", warmup)
        if "produce1k" in cells:
            p1k = produce(broker, "t1k", records_1k, 1024)
            out |= {"produce_1k_records_per_s": p1k["records_per_s"],
                    "produce_1k_p99_ms": p1k["p99_ms"],
                    "produce_1k_cpu_ms_per_mb": p1k["cpu_ms_per_mb"]}
        if "produce100" in cells:
            p100 = produce(broker, "t100", records_100, 100)
            out |= {"produce_100_records_per_s": p100["records_per_s"],
                    "produce_100_p99_ms": p100["p99_ms"]}
        if "consume" in cells:
            if "produce1k" not in cells:
                produce(broker, "t1k", records_1k, 1024)  # untimed: what the consumer reads
            c = consume(broker, "t1k", records_1k)
            out |= {"consume_fetch_mb_per_s": c["fetch_mb_per_s"],
                    "consume_cpu_ms_per_mb": c["cpu_ms_per_mb"]}
        if "e2e" in cells:
            out |= end_to_end(broker, "e2e", e2e)
        out["peak_rss_mb"] = broker.memory().hwm_mb
    finally:
        broker.stop()
    return out


FIGURES = [
    ("consume_cpu_ms_per_mb", "consume: broker CPU ms per MB", ".2f"),
    ("consume_fetch_mb_per_s", "ConsumerPerformance fetch MB/s (noisy)", ".0f"),
    ("produce_1k_cpu_ms_per_mb", "produce 1 KiB: broker CPU ms per MB", ".2f"),
    ("produce_1k_records_per_s", "produce 1 KiB records/s (noisy)", ".0f"),
    ("produce_1k_p99_ms", "produce 1 KiB p99 ms", ".0f"),
    ("produce_100_records_per_s", "produce 100 B records/s (noisy)", ".0f"),
    ("e2e_p50_ms", "EndToEndLatency 100 B p50 ms", ".1f"),
    ("e2e_p99_ms", "EndToEndLatency p99 ms", ".1f"),
    ("e2e_p999_ms", "EndToEndLatency p99.9 ms", ".1f"),
    ("peak_rss_mb", "peak RSS MB", ".0f"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another checkout: minibroker before")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pair", choices=("durable", "page-cache", "both"), default="both")
    parser.add_argument("--records-1k", type=int, default=300_000)
    parser.add_argument("--records-100", type=int, default=1_000_000)
    parser.add_argument("--e2e", type=int, default=2_000)
    parser.add_argument("--no-kafka", action="store_true")
    parser.add_argument("--cells", default=",".join(CELLS),
                        help=f"which tools to time, comma-separated, of {','.join(CELLS)}")
    parser.add_argument("--warmup", type=int, default=20_000,
                        help="records produced and consumed untimed first on each broker")
    args = parser.parse_args()
    cells = tuple(c.strip() for c in args.cells.split(",") if c.strip())
    unknown = sorted(set(cells) - set(CELLS))
    if unknown or not cells:
        parser.error(f"--cells: unknown {', '.join(unknown) or '(none given)'}; "
                     f"choose from {','.join(CELLS)}")
    reason = None if args.no_kafka else unavailable()
    if reason:
        sys.exit(f"the reference Kafka cannot run here: {reason}")
    pairs = ["durable", "page-cache"] if args.pair == "both" else [args.pair]
    results: dict[str, dict[str, list[dict]]] = {pair: {} for pair in pairs}
    with common.work_directory("java-tools") as work:
        for run in range(args.runs):
            for pair in pairs:
                never = pair == "page-cache"
                work_run = Path(tempfile.mkdtemp(prefix=f"{pair}-{run}-", dir=work))
                brokers = [Mini(work_run, never, None, "minibroker")]
                if args.base is not None:
                    brokers.append(Mini(work_run, never, args.base, "minibroker before"))
                if not args.no_kafka:
                    brokers.append(kafka_anchor.Kafka(work_run, durable=not never))
                shift = run % len(brokers)
                for broker in brokers[shift:] + brokers[:shift]:
                    label = "Kafka 4.4" if isinstance(broker, kafka_anchor.Kafka) else broker.label
                    log(f"run {run + 1} {pair}: {label}")
                    r = one_run(broker, args.records_1k, args.records_100, args.e2e, cells,
                                args.warmup)
                    results[pair].setdefault(label, []).append(r)
                    log("  " + ", ".join(f"{k} {r[k]:{f}}" for k, _, f in FIGURES if k in r))
    for pair, by_broker in results.items():
        labels = list(by_broker)
        rows = []
        for key, title, fmt in FIGURES:
            if not all(key in r for runs in by_broker.values() for r in runs):
                continue  # a cell not run
            row = []
            for label in labels:
                values = [r[key] for r in by_broker[label]]
                row.append(f"{statistics.median(values):{fmt}} "
                           f"({min(values):{fmt}}-{max(values):{fmt}})")
            rows.append([title, *row])
        print(f"\n{pair} pair, median (range) of {args.runs} runs:\n")
        print(common.markdown_table(["figure", *labels], rows))
    path = common.write_results_json("java-tools", {
        "args": {**vars(args), "base": str(args.base)}, "results": results,
        "commit": common.tree_commit(common.REPO_ROOT)})
    log(f"results in {path}")


if __name__ == "__main__":
    main()
