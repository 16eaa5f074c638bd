"""Log compaction: internal logs bounded by live state, start time, cleaner throughput.

    .venv/bin/python bench/compaction.py growth --transactions 2000,200000
    .venv/bin/python bench/compaction.py cleaner          # cleaner MB/s and produce during it

growth (issue 13's table): N transactions from 4 transactional ids (one thread each, our client),
each writing one keyed record to a compacted topic and a consumer offset (its partition of topic
``source``) in the transaction (AddOffsetsToTxn + TxnOffsetCommit, one group), plus one plain
OffsetCommit per transaction in the same group. Then it waits until the cleaner has nothing left to do, reports the bytes on disk of
``__transaction_state`` and ``__consumer_offsets`` (every file of their partition directories),
kills the broker with SIGKILL and times the restart (process start to "listening"), next to an
empty broker's start measured in the same run. ``--baseline`` adds the same run with
``log.cleaner.enable=false`` (what main did before compaction) for the smallest N.

cleaner: a compacted topic of ``--mb`` MB (1 KiB values over ``--keys`` keys, so most records are
superseded) written with the cleaner off; then the broker restarts with the cleaner on and a
producer writes to another topic meanwhile: the cleaner's MB/s (bytes read / seconds, from its
log line) and the producer's records/s during the cleaning versus the same producer with the
cleaner off, alternated in one run.

Writes bench/results/compaction-<ts>.json.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common  # noqa: E402  (bench/ is not a package)

DATA_TOPIC = "growth"
GROUP = "growth-group"
IDS = 4
_LISTENING = re.compile(r"listening on [^:]+:(\d+)")
_CLEANED = re.compile(r"cleaned (\S+): (\d+) -> (\d+) bytes, (\d+) records removed, ([\d.]+) s")


def log(message: str) -> None:
    click.echo(message, err=True)


class Broker:
    """A minibroker subprocess with a properties file; start time measured to "listening"."""

    def __init__(self, data_dir: Path, props: dict[str, str], flush: str) -> None:
        self.data_dir = data_dir
        self.props = props
        self.flush = flush
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.line_times: list[float] = []  # time.perf_counter() when each line arrived
        self.port = 0
        self.start_s = 0.0

    def start(self) -> Broker:
        config = self.data_dir.parent / (self.data_dir.name + ".properties")
        config.write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))
        cmd = [sys.executable, "-c", "from broker.cli import main; main()", "serve", "--host",
               "127.0.0.1", "--port", str(self.port), "--data-dir", str(self.data_dir),
               "--config", str(config), "--flush", self.flush]
        started = time.perf_counter()
        self.lines = []
        self.line_times = []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, cwd=common.REPO_ROOT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        ready = threading.Event()

        def pump(stream) -> None:
            for line in stream:
                self.line_times.append(time.perf_counter())
                self.lines.append(line)
                m = _LISTENING.search(line)
                if m and not ready.is_set():
                    self.port = int(m.group(1))
                    self.start_s = time.perf_counter() - started
                    ready.set()
            ready.set()

        threading.Thread(target=pump, args=(self.proc.stdout,), daemon=True).start()
        if not ready.wait(120) or self.proc.poll() is not None:
            raise RuntimeError("broker did not start:\n" + "".join(self.lines[-20:]))
        return self

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cleanings(self) -> list[tuple[str, int, int, float]]:
        out = []
        for line in self.lines:
            m = _CLEANED.search(line)
            if m:
                out.append((m.group(1), int(m.group(2)), int(m.group(3)), float(m.group(5))))
        return out


def topic_bytes(data_dir: Path, topic: str) -> int:
    total = 0
    for d in data_dir.glob(f"{topic}-*"):
        if d.is_dir():
            total += sum(f.stat().st_size for f in d.iterdir() if f.is_file())
    return total


def run_transactions(bootstrap: str, n: int, ids: int = IDS) -> float:
    """``n`` transactions split over ``ids`` threads; returns transactions/s."""
    from client import Admin, Consumer, Producer

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(DATA_TOPIC, 1, configs={"cleanup.policy": "compact",
                                                   "segment.bytes": str(64 * 1024)},
                           exist_ok=True)
        admin.create_topic("source", ids, exist_ok=True)  # the offsets committed are on it
    errors: list[BaseException] = []

    def worker(index: int, count: int) -> None:
        try:
            producer = Producer({"bootstrap.servers": bootstrap,
                                 "transactional.id": f"growth-{index}", "linger.ms": 0})
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                                 "enable.auto.commit": False})
            with producer, consumer:
                producer.init_transactions()
                for i in range(count):
                    producer.begin_transaction()
                    producer.send(DATA_TOPIC, b"v%d" % i, key=b"key-%d" % index)
                    producer.send_offsets_to_transaction({("source", index): i + 1}, GROUP)
                    producer.commit_transaction()
                    consumer.commit({("source", index): i + 1})
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k, n // ids + (k < n % ids)))
               for k in range(ids)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return n / (time.perf_counter() - started)


def wait_cleaner_idle(broker: Broker, quiet_s: float) -> None:
    """Until no "cleaned" line appeared for ``quiet_s`` seconds."""
    seen = -1
    last_change = time.monotonic()
    while time.monotonic() - last_change < quiet_s:
        count = len(broker.cleanings())
        if count != seen:
            seen, last_change = count, time.monotonic()
        time.sleep(0.1)


def growth_run(work: Path, n: int, cleaner: bool, flush: str) -> dict:
    props = {"log.cleaner.enable": str(cleaner).lower(), "log.cleaner.backoff.ms": "200",
             "group.initial.rebalance.delay.ms": "0"}
    data = work / f"data-{n}-{'on' if cleaner else 'off'}"
    broker = Broker(data, props, flush).start()
    try:
        rate = run_transactions(broker.bootstrap, n)
        if cleaner:
            # Writes stopped: idle active segments roll after the internal topics'
            # max.compaction.lag.ms, finished markers go delete.retention.ms after their first
            # cleaning; then until the cleaner is quiet.
            from broker.log.cleaner import (
                INTERNAL_DELETE_RETENTION_MS,
                INTERNAL_MAX_COMPACTION_LAG_MS,
            )

            time.sleep((INTERNAL_MAX_COMPACTION_LAG_MS + INTERNAL_DELETE_RETENTION_MS) / 1000 + 1)
            wait_cleaner_idle(broker, 2.0)
        sizes = {t: topic_bytes(data, t) for t in ("__transaction_state", "__consumer_offsets",
                                                   DATA_TOPIC)}
        cleanings = len(broker.cleanings())
    finally:
        broker.kill9()
    starts = []
    for _ in range(3):
        again = Broker(data, props, flush).start()
        starts.append(again.start_s)
        again.kill9()
    return {"transactions": n, "cleaner": cleaner, "transactions_per_s": rate, "bytes": sizes,
            "cleanings": cleanings, "start_after_kill9_s": common.median(starts),
            "start_samples_s": starts}


def empty_start(work: Path, flush: str) -> float:
    starts = []
    for i in range(3):
        b = Broker(work / f"empty-{i}", {}, flush).start()
        starts.append(b.start_s)
        b.kill9()
    return common.median(starts)


@click.group()
def main() -> None:
    """Compaction benchmarks."""


@main.command()
@click.option("--transactions", default="2000,200000", show_default=True)
@click.option("--flush", type=click.Choice(["always", "never"]), default="never", show_default=True)
@click.option("--baseline/--no-baseline", default=True, show_default=True,
              help="Also run the smallest N with the cleaner off.")
@click.option("--keep", is_flag=True, help="Keep the data directories (bench/.cache).")
def growth(transactions: str, flush: str, baseline: bool, keep: bool) -> None:
    counts = [int(x) for x in transactions.split(",")]
    load = os.getloadavg()
    runs = []
    with common.work_directory("compaction", keep) as work:
        empty = empty_start(work, flush)
        if baseline:
            log(f"baseline: {counts[0]} transactions, cleaner off")
            runs.append(growth_run(work, counts[0], False, flush))
        for n in counts:
            log(f"{n} transactions, cleaner on")
            runs.append(growth_run(work, n, True, flush))
            log(f"  {runs[-1]}")
        empty_after = empty_start(work, flush)
    mib = 1024 * 1024
    headers = ["", *(f"{r['transactions']:,} txns{'' if r['cleaner'] else ' (no cleaner)'}"
                     for r in runs)]
    rows = [
        ["`__transaction_state` on disk",
         *(f"{r['bytes']['__transaction_state'] / mib:.2f} MiB" for r in runs)],
        ["`__consumer_offsets` on disk",
         *(f"{r['bytes']['__consumer_offsets'] / mib:.2f} MiB" for r in runs)],
        [f"`{DATA_TOPIC}` (compacted data topic) on disk",
         *(f"{r['bytes'][DATA_TOPIC] / mib:.2f} MiB" for r in runs)],
        [f"start after kill -9 (empty broker: {empty:.2f} s / {empty_after:.2f} s)",
         *(f"{r['start_after_kill9_s']:.2f} s" for r in runs)],
        ["transactions/s while writing", *(f"{r['transactions_per_s']:.0f}" for r in runs)],
        ["cleanings", *(str(r["cleanings"]) for r in runs)],
    ]
    click.echo(common.markdown_table(headers, rows))
    click.echo(f"\nload average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; flush={flush}")
    path = common.write_results_json("compaction", {
        "kind": "growth", "empty_start_s": [empty, empty_after], "runs": runs,
        "load_average": load, "flush": flush,
    })
    log(f"wrote {path}")


def _fill(bootstrap: str, topic: str, mb: int, keys: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    value = b"x" * 1024
    total = mb * 1_000_000 // len(value)
    for i in range(total):
        while True:
            try:
                producer.produce(topic, key=b"key-%d" % (i % keys), value=value)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush()


def _produce_samples(bootstrap: str, topic: str, seconds: float) -> list[tuple[float, int]]:
    """Produce 1 KiB records for ``seconds``; ``(time.perf_counter(), records acknowledged)``
    sampled every 50 ms."""
    from confluent_kafka import Producer

    acked = [0]

    def delivered(err, msg) -> None:
        if err is None:
            acked[0] += 1

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    value = b"y" * 1024
    samples = [(time.perf_counter(), 0)]
    deadline = time.perf_counter() + seconds
    next_sample = time.perf_counter() + 0.05
    while time.perf_counter() < deadline:
        try:
            producer.produce(topic, value=value, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
        if time.perf_counter() >= next_sample:
            samples.append((time.perf_counter(), acked[0]))
            next_sample += 0.05
    producer.flush()
    samples.append((time.perf_counter(), acked[0]))
    return samples


def _rate(samples: list[tuple[float, int]], start: float, end: float) -> float:
    inside = [(t, n) for t, n in samples if start <= t <= end]
    if len(inside) < 2:
        return float("nan")
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


@main.command()
@click.option("--mb", default=200, show_default=True, help="Size of the compacted topic.")
@click.option("--keys", default=1000, show_default=True)
@click.option("--flush", type=click.Choice(["always", "never"]), default="never", show_default=True)
@click.option("--io-max", type=float, default=None,
              help="log.cleaner.io.max.bytes.per.second for the cleaning run.")
@click.option("--keep", is_flag=True)
def cleaner(mb: int, keys: int, flush: str, io_max: float | None, keep: bool) -> None:
    load = os.getloadavg()
    with common.work_directory("compaction-cleaner", keep) as work:
        data = work / "data"
        off = {"log.cleaner.enable": "false"}
        broker = Broker(data, off, flush).start()
        try:
            common.create_topic(broker.bootstrap, "other", 1)
            from client import Admin

            with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
                admin.create_topic("compacted", 1, configs={
                    "cleanup.policy": "compact", "segment.bytes": str(16 * 1024 * 1024)})
            log(f"writing {mb} MB to the compacted topic")
            _fill(broker.bootstrap, "compacted", mb, keys)
            log("producer rate with the cleaner off")
            off_samples = _produce_samples(broker.bootstrap, "other", 10)
            rate_off = _rate(off_samples, off_samples[0][0] + 1, off_samples[-1][0])
        finally:
            broker.stop()
        on = {"log.cleaner.backoff.ms": "100"}
        if io_max is not None:
            on["log.cleaner.io.max.bytes.per.second"] = str(io_max)
        broker = Broker(data, on, flush).start()
        try:
            samples = _produce_samples(broker.bootstrap, "other", 30)
            deadline = time.monotonic() + 600
            while not any(c[0] == "compacted-0" for c in broker.cleanings()):
                if time.monotonic() > deadline:
                    raise RuntimeError("the cleaner did not run")
                time.sleep(0.2)
            cleaned = [c for c in broker.cleanings() if c[0] == "compacted-0"]
            index = next(i for i, line in enumerate(broker.lines) if "cleaned compacted-0" in line)
            clean_end = broker.line_times[index]
            clean_start = clean_end - cleaned[0][3]
            rate_on = _rate(samples, clean_start, clean_end)
            cpu = common.cpu_seconds(broker.proc.pid)
        finally:
            broker.stop()
    read = sum(c[1] for c in cleaned)
    written = sum(c[2] for c in cleaned)
    seconds = sum(c[3] for c in cleaned)
    rows = [
        ["cleaner throughput (bytes read / cleaning time)", f"{read / seconds / 1e6:.1f} MB/s"],
        ["bytes read -> written", f"{read / 1e6:.1f} MB -> {written / 1e6:.2f} MB"],
        ["cleaning time", f"{seconds:.1f} s"],
        ["produce, cleaner off (1 KiB, acks=all, 10 s)", f"{rate_off:.0f} records/s"],
        ["produce during the cleaning (same producer)",
         f"{rate_on:.0f} records/s ({rate_on / rate_off:.2f}x)"],
        ["broker CPU s (cleaner run)", f"{cpu:.1f}"],
    ]
    click.echo(common.markdown_table(["", "value"], rows))
    click.echo(f"\nload average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; flush={flush}; "
               f"io max {io_max or 'unlimited'}")
    path = common.write_results_json("compaction", {
        "kind": "cleaner", "io_max": io_max, "mb": mb, "keys": keys, "read": read, "written": written,
        "seconds": seconds, "rate_off": rate_off, "rate_on": rate_on, "load_average": load,
    })
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
