"""Kafka 4.4 as the performance anchor: minibroker and a one-node Apache Kafka on the same machine,
the same disk, the same client (confluent-kafka) with the same settings.

    .venv/bin/python bench/kafka_anchor.py               # 2 runs of each pair, ~20 min here
    .venv/bin/python bench/kafka_anchor.py --txn-only -X retry.backoff.ms=10   # transactions only
    .venv/bin/python bench/kafka_anchor.py --txn-only --pair durable   # issue 29's durable anchor
    .venv/bin/python bench/kafka_anchor.py --report bench/results/kafka-anchor-<ts>.json

Kafka runs through the reference harness (tests/kafka_ref: Kafka 4.4.0's jars from Maven Central,
a one-node KRaft broker, 1 GiB heap as bin/kafka-server-start.sh gives it, Kafka's default of 50
partitions for its internal topics). Two pairs, each started fresh per run:

- durable: minibroker ``--flush always`` (acks=all answered after fdatasync) vs Kafka with
  ``log.flush.interval.messages=1`` (an fsync per appended batch, flushed before the high watermark
  moves);
- default: minibroker ``--flush never`` vs Kafka as shipped (the page cache).

Runs alternate minibroker and Kafka in the same window (run 1: both pairs, both brokers; run 2:
again). On each fresh broker, every workload runs once untimed first (the JVM's JIT warm-up, the
page cache, Python's imports; discarded), then timed:

- produce: 100 B and 1 KiB values, 3 partitions, acks=all, idempotent, linger.ms=5 (the default
  batching of bench/produce.py); records/s, MB/s, the broker's CPU seconds per MB;
- consume: the 1 KiB topic from the start with one consumer (fetch defaults); MB/s;
- end-to-end latency: one record every 2 ms (linger.ms=0) to a consumer polling all the time; the
  time from before produce() to the consumer's poll returning it, p50/p99;
- transactions: one producer back to back (one 1 KiB record each, linger.ms=0), and 10 and 50
  producers at once (threads); transactions/s and the broker's CPU ms per transaction;
- memory: the broker's peak and current resident set (VmHWM, VmRSS) at the end.

Then, once per broker in the default pair: 100,000 one-record transactions (50 producers), a clean
stop, and the time to start again (process launch to Metadata served, and to the first
``init_transactions()`` of a new transactional id), twice.

Writes bench/results/kafka-anchor-<ts>.json and prints a markdown table (medians over the runs).
The machine is shared: say so beside the figures.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as common  # noqa: E402  (bench/ is not a package)
import transactions as txn_bench  # noqa: E402

from tests.kafka_ref.harness import KAFKA_VERSION, KafkaCluster, unavailable  # noqa: E402

PARTITIONS = 3
KAFKA_HEAP = "1g"
DURABLE_KAFKA = {"log.flush.interval.messages": 1}


def log(message: str) -> None:
    click.echo(f"[{time.strftime('%H:%M:%S')}] {message}", err=True)


# -- the two brokers, behind one small interface ---------------------------------------------------


class Minibroker:
    """``minibroker serve`` on a free port with a data dir that survives a restart."""

    def __init__(self, work: Path, flush_never: bool) -> None:
        self.spec = common.minibroker_spec(flush_never)
        self.label = self.spec.label
        self.port = common.free_port()
        self.data_dir = Path(tempfile.mkdtemp(prefix="minibroker-", dir=work))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> float:
        began = time.perf_counter()
        with open(self.data_dir.with_suffix(".log"), "ab") as out:
            self.proc = subprocess.Popen(self.spec.command(self.port, self.data_dir),
                                         cwd=common.REPO_ROOT, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT)
        wait_serving(self.bootstrap, self.proc.poll, 120)
        return time.perf_counter() - began

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def cpu_seconds(self) -> float:
        return common.cpu_seconds(self.pid)

    def memory(self) -> common.Memory:
        return common.memory(self.pid)


class Kafka:
    """A one-node KRaft Kafka 4.4 through the reference harness."""

    def __init__(self, work: Path, durable: bool) -> None:
        self.label = "Kafka 4.4 (flush every message)" if durable else "Kafka 4.4 (default)"
        self.cluster = KafkaCluster(Path(tempfile.mkdtemp(prefix="kafka-", dir=work)), 1,
                                    config=DURABLE_KAFKA if durable else {}, heap=KAFKA_HEAP)
        self.formatted = False

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def pid(self) -> int:
        proc = self.cluster.nodes[0].proc
        assert proc is not None
        return proc.pid

    def start(self) -> float:
        if not self.formatted:
            self.cluster.format()  # not timed: a one-time step of a new cluster
            self.formatted = True
        began = time.perf_counter()
        node = self.cluster.nodes[0]
        self.cluster.start_node(node.node_id, wait=False)
        wait_serving(self.bootstrap, lambda: node.proc.poll() if node.proc else 1, 180)
        return time.perf_counter() - began

    def stop(self) -> None:
        self.cluster.stop(60)

    def cpu_seconds(self) -> float:
        return common.cpu_seconds(self.pid)

    def memory(self) -> common.Memory:
        return common.memory(self.pid)


Broker = Minibroker | Kafka


def wait_serving(bootstrap: str, exited: Callable[[], int | None], timeout: float) -> None:
    """Until the broker answers Metadata (ApiVersions + Metadata v1 over a raw connection)."""
    from protocol.api_keys import ApiKey
    from tests.raw_client import RawConnection

    port = int(bootstrap.rsplit(":", 1)[1])
    deadline = time.monotonic() + timeout
    while True:
        if exited() is not None:
            raise RuntimeError(f"the broker on {bootstrap} exited while starting")
        try:
            with RawConnection(port, timeout=5.0) as conn:
                meta = conn.request(ApiKey.METADATA, 1, {"topics": None})
            if meta["brokers"]:
                return
        except (OSError, AssertionError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{bootstrap} did not serve within {timeout} s")
        time.sleep(0.02)


# -- workloads ------------------------------------------------------------------------------------


def produce(broker: Broker, topic: str, value_size: int, records: int) -> dict:
    run = common.produce_records(broker.bootstrap, topic, records, value_size, PARTITIONS,
                                 cpu_probe=broker.cpu_seconds)
    mb = records * value_size / common.MB
    return {"records_per_s": run.records_per_s, "mb_per_s": run.mb_per_s,
            "cpu_s_per_mb": run.broker_cpu_s / mb if run.broker_cpu_s is not None else None,
            "elapsed_s": run.elapsed_s}


def consume(broker: Broker, topic: str, records: int) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"anchor-{time.time()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = size = 0
    cpu_before = broker.cpu_seconds()
    began = time.perf_counter()
    deadline = time.monotonic() + 300
    try:
        while got < records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumed {got} of {records}")
            for message in consumer.consume(1000, 1.0):
                if message.error() is None:
                    got += 1
                    size += len(message.value())
    finally:
        elapsed = time.perf_counter() - began
        consumer.close()
    cpu = common.settled_cpu_seconds(broker.cpu_seconds, quiet_s=0.2) - cpu_before
    return {"records": got, "mb_per_s": size / common.MB / elapsed,
            "records_per_s": got / elapsed, "cpu_s_per_mb": cpu / (size / common.MB)}


def latency(broker: Broker, topic: str, records: int, interval_s: float = 0.002) -> dict:
    """Produce one record every ``interval_s``; the consumer's receipt time minus the send time."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 0})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"lat-{time.time()}",
                         "enable.auto.commit": False})
    from confluent_kafka import OFFSET_END

    consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
    consumer.consume(1, 1.0)  # connected, positioned at the end
    samples: list[float] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set() or len(samples) < records:
            message = consumer.poll(0.1)  # one at a time: consume(n) waits for n or its timeout
            if message is not None and message.error() is None:
                sent = int.from_bytes(message.value()[:8], "big") / 1e9
                samples.append(time.perf_counter() - sent)
            if done.is_set() and time.perf_counter() > stop_by:
                break

    stop_by = float("inf")
    reader = threading.Thread(target=read)
    reader.start()
    pad = b"x" * 92
    try:
        next_at = time.perf_counter()
        for _ in range(records):
            now = time.perf_counter()
            if now < next_at:
                time.sleep(next_at - now)
            producer.produce(topic, int(time.perf_counter() * 1e9).to_bytes(8, "big") + pad,
                             partition=0)
            producer.poll(0)
            next_at += interval_s
        producer.flush(30)
    finally:
        stop_by = time.perf_counter() + 10
        done.set()
        reader.join(30)
        consumer.close()
    ms = sorted(s * 1000 for s in samples)
    return {"records": len(ms), "p50_ms": pct(ms, 0.5), "p99_ms": pct(ms, 0.99)}


def pct(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def transactions(broker: Broker, seconds: float, producers: int) -> dict:
    result = txn_bench.concurrent_back_to_back(broker, seconds, producers).rate  # type: ignore[arg-type]
    return {"transactions_per_s": result.transactions_per_s,
            "cpu_ms_per_transaction": result.broker_cpu_ms_per_transaction}


def create_topics(broker: Broker) -> None:
    for topic in ("p100", "p1k", "lat", txn_bench.TOPIC):
        common.create_topic(broker.bootstrap, topic, PARTITIONS)


def one_run(broker: Broker, settings: dict) -> dict:
    """A fresh broker: start, each workload once untimed then timed, memory, stop."""
    out: dict = {"label": broker.label}
    out["start_s"] = broker.start()
    try:
        create_topics(broker)
        records_100, records_1k = settings["records_100"], settings["records_1k"]
        if settings.get("txn_only"):
            for timed in (False, True):
                t1, t10, t50 = (transactions(broker, settings["txn_seconds"], n) for n in (1, 10, 50))
                if timed:
                    out.update(txn_1=t1, txn_10=t10, txn_50=t50)
                log(f"  {broker.label} {'timed' if timed else 'warm-up'}: txn 1/10/50 "
                    f"{t1['transactions_per_s']:.0f}/{t10['transactions_per_s']:.0f}/"
                    f"{t50['transactions_per_s']:.0f} per s")
            return out
        for timed in (False, True):  # the first pass warms the JIT, the caches: discarded
            p100 = produce(broker, "p100", 100, records_100)
            p1k = produce(broker, "p1k", 1024, records_1k)
            # the warm-up pass wrote records_1k + 300 records, the timed one as many again
            c = consume(broker, "p1k", records_1k)
            lat = latency(broker, "lat", settings["latency_records"])
            t1 = transactions(broker, settings["txn_seconds"], 1)
            t10 = transactions(broker, settings["txn_seconds"], 10)
            t50 = transactions(broker, settings["txn_seconds"], 50)
            if timed:
                out.update(produce_100=p100, produce_1k=p1k, consume=c, latency=lat,
                           txn_1=t1, txn_10=t10, txn_50=t50)
            log(f"  {broker.label} {'timed' if timed else 'warm-up'}: produce 100 B "
                f"{p100['records_per_s']:,.0f}/s, 1 KiB {p1k['mb_per_s']:.1f} MB/s, consume "
                f"{c['mb_per_s']:.1f} MB/s, e2e p50 {lat['p50_ms']:.1f} ms, txn 1/10/50 "
                f"{t1['transactions_per_s']:.0f}/{t10['transactions_per_s']:.0f}/"
                f"{t50['transactions_per_s']:.0f} per s")
        mem = broker.memory()
        out["rss_mb"], out["peak_rss_mb"] = mem.rss_mb, mem.hwm_mb
    finally:
        broker.stop()
    return out


def history_start(broker: Broker, transactions_total: int, restarts: int) -> dict:
    """Fill with ``transactions_total`` one-record transactions (50 producers), stop, start again
    ``restarts`` times: time to Metadata, and to a new producer's init_transactions()."""
    from confluent_kafka import Producer

    broker.start()
    began = time.perf_counter()
    try:
        common.create_topic(broker.bootstrap, txn_bench.TOPIC, PARTITIONS)
        done = 0
        while done < transactions_total:
            result = txn_bench.concurrent_back_to_back(broker, 10, 50).rate  # type: ignore[arg-type]
            done += result.transactions
            log(f"  {broker.label}: {done:,} transactions written")
    finally:
        broker.stop()
    fill_s = time.perf_counter() - began
    starts = []
    for i in range(restarts):
        serve_s = broker.start()
        try:
            t0 = time.perf_counter()
            producer = Producer({"bootstrap.servers": broker.bootstrap,
                                 "transactional.id": f"after-restart-{i}"})
            producer.init_transactions(120)
            init_s = serve_s + time.perf_counter() - t0
            mem = broker.memory()
        finally:
            broker.stop()
        starts.append({"serve_s": serve_s, "init_transactions_s": init_s, "rss_mb": mem.rss_mb})
        log(f"  {broker.label}: restart with {done:,} transactions: serving in {serve_s:.1f} s, "
            f"init_transactions after {init_s:.1f} s")
    return {"label": broker.label, "transactions": done, "fill_s": fill_s, "restarts": starts}


# -- report ---------------------------------------------------------------------------------------


def med(runs: list[dict], *path: str) -> float | None:
    values = []
    for run in runs:
        value = run
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, (int, float)):
            values.append(float(value))
    return statistics.median(values) if values else None


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


ROWS: list[tuple] = [
    ("produce 100 B, records/s", ("produce_100", "records_per_s"), 0),
    ("produce 1 KiB, MB/s", ("produce_1k", "mb_per_s"), 1),
    ("produce 1 KiB, broker CPU ms per MB", ("produce_1k", "cpu_s_per_mb"), 1, 1000),
    ("consume 1 KiB, MB/s", ("consume", "mb_per_s"), 1),
    ("end-to-end latency p50, ms (500 records/s)", ("latency", "p50_ms"), 1),
    ("end-to-end latency p99, ms", ("latency", "p99_ms"), 1),
    ("transactions/s, 1 producer back to back", ("txn_1", "transactions_per_s"), 0),
    ("transactions/s, 10 producers", ("txn_10", "transactions_per_s"), 0),
    ("transactions/s, 50 producers", ("txn_50", "transactions_per_s"), 0),
    ("broker CPU ms per transaction (1 producer)", ("txn_1", "cpu_ms_per_transaction"), 2),
    ("broker CPU ms per transaction (50 producers)", ("txn_50", "cpu_ms_per_transaction"), 2),
    ("start, empty, s", ("start_s",), 1),
    ("RSS at the end, MB", ("rss_mb",), 0),
    ("peak RSS, MB", ("peak_rss_mb",), 0),
]


def report(results: dict) -> str:
    labels = [label for pair in results["pairs"].values() for label in pair]
    headers = ["", *labels]
    rows = []
    for name, path, digits, *scale in ROWS:
        row = [name]
        for pair in results["pairs"].values():
            for runs in pair.values():
                value = med(runs, *path)
                row.append(fmt(None if value is None else value * (scale or [1])[0], digits))
        rows.append(row)
    text = common.markdown_table(headers, rows)
    if results.get("history"):
        hist_rows = []
        for h in results["history"]:
            serve = statistics.median(r["serve_s"] for r in h["restarts"])
            init = statistics.median(r["init_transactions_s"] for r in h["restarts"])
            hist_rows.append([h["label"], f"{h['transactions']:,}", fmt(serve, 1), fmt(init, 1),
                              fmt(statistics.median(r["rss_mb"] for r in h["restarts"]))])
        text += "\n\n" + common.markdown_table(
            ["start with past transactions", "transactions", "serving, s", "first init_transactions, s",
             "RSS, MB"], hist_rows)
    return text


@click.command()
@click.option("--runs", default=2, show_default=True, help="Fresh-broker runs of each broker per pair.")
@click.option("--records-100", default=100_000, show_default=True)
@click.option("--records-1k", default=50_000, show_default=True)
@click.option("--latency-records", default=2_000, show_default=True)
@click.option("--txn-seconds", default=4.0, show_default=True)
@click.option("--history", "history_total", default=100_000, show_default=True,
              help="Past transactions for the start-time measurement (0: skip).")
@click.option("--txn-only", is_flag=True,
              help="Only the transaction workloads (1/10/50 producers), on the default pair "
                   "unless --pair says otherwise.")
@click.option("--pair", "only_pair", type=click.Choice(["durable", "default"]), default=None,
              help="Only this pair [default: both; the default pair with --txn-only].")
@click.option("-X", "--client-config", multiple=True, metavar="KEY=VALUE",
              help="librdkafka setting for every transactional producer, on both brokers alike.")
@click.option("--quick", is_flag=True, help="Smoke run: 1 run, small counts, no history.")
@click.option("--report", "report_of", type=click.Path(exists=True, dir_okay=False),
              help="Only print the table of an earlier run's JSON.")
def main(runs, records_100, records_1k, latency_records, txn_seconds, history_total, txn_only,
         only_pair, client_config, quick, report_of) -> None:
    if report_of:
        click.echo(report(json.loads(Path(report_of).read_text())))
        return
    extra = dict(item.split("=", 1) for item in client_config)
    if extra:
        make_producer = txn_bench._producer
        txn_bench._producer = lambda bootstrap, tid, **more: make_producer(bootstrap, tid,
                                                                             **{**extra, **more})
    reason = unavailable()
    if reason:
        raise SystemExit(f"the reference Kafka cannot run here: {reason}")
    if quick:
        runs, records_100, records_1k, latency_records, txn_seconds, history_total = \
            1, 20_000, 10_000, 300, 1.0, 0
    settings = {"runs": runs, "records_100": records_100, "records_1k": records_1k,
                "latency_records": latency_records, "txn_seconds": txn_seconds,
                "history_transactions": history_total, "txn_only": txn_only,
                "pair": only_pair,
                "client_config": extra}
    results: dict = {"kafka_version": KAFKA_VERSION, "settings": settings,
                     "machine": {"cpus": os.cpu_count(), "load_before": os.getloadavg(),
                                 "host": socket.gethostname()},
                     "pairs": {"durable": {}, "default": {}}, "history": []}
    pairs = {only_pair} if only_pair else {"default"} if txn_only else {"durable", "default"}
    with common.work_directory("kafka-anchor") as work:
        for run in range(runs):
            for pair, durable in (("durable", True), ("default", False)):
                if pair not in pairs:
                    continue
                brokers: list[Broker] = [Minibroker(work, flush_never=not durable),
                                         Kafka(work, durable)]
                for broker in brokers:
                    log(f"run {run + 1}/{runs}, {pair}: {broker.label}")
                    out = one_run(broker, settings)
                    out["load"] = os.getloadavg()
                    results["pairs"][pair].setdefault(broker.label, []).append(out)
        if history_total and not txn_only and "default" in pairs:
            for broker in (Minibroker(work, flush_never=True), Kafka(work, durable=False)):
                log(f"start time with {history_total:,} past transactions: {broker.label}")
                results["history"].append(history_start(broker, history_total, 2))
    results["machine"]["load_after"] = os.getloadavg()
    path = common.write_results_json("kafka-anchor", results)
    click.echo(report(results))
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
