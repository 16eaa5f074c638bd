"""Kafka's own Java tools against minibroker (this tree, and another checkout as "before") and a
one-node Kafka 4.4, in one run.

Tools (Kafka 4.4.0's jars through tests/kafka_ref: the same harness as bench/kafka_anchor.py):
ProducerPerformance (1 KiB and 100 B records, acks=all, the Java client's defaults: batch.size
16 KiB, linger.ms 5), ConsumerPerformance (the 1 KiB topic from the start, fetch defaults) and
EndToEndLatency (100 B, acks=all, one record at a time). Transactions: ProducerPerformance with
``--transactional-id`` and ``--transaction-duration-ms`` (1 KiB records, a commit every
``--txn-ms``, default 100 ms), and back-to-back one-record transactions from one producer of
Kafka's Java client (bench/java/TxnLoop.java: initTransactions, then per transaction
beginTransaction, send one 100 B record, optionally sendOffsetsToTransaction (``--txn-offsets``),
commitTransaction; compiled with javac against the harness's kafka-clients jar on first use and
cached by its source's hash under the user's cache directory).

Pairs, each broker started fresh for every run, the brokers of a run in turns (the order rotates
from run to run):

- durable: minibroker's default (acks=all answered after fdatasync) vs Kafka with
  ``log.flush.interval.messages=1``;
- page-cache: minibroker ``--flush never`` vs Kafka's defaults.

On each fresh broker a short ProducerPerformance and ConsumerPerformance run first, untimed (the
JIT, the page cache, Python's imports). Figures per cell: the median of ``--runs`` runs and the
range. The primary figures are CPU-time ones, from /proc/<pid>/stat of the broker: broker CPU ms
per produced and per consumed MB and per back-to-back transaction (read around the timed
transactions alone: TxnLoop waits for the bench after its warm-up); throughput and latency are
printed too, noisy on a shared machine. Peak RSS (VmHWM) at the end of each run.

    .venv/bin/python bench/java_tools.py --base b5d367c --runs 3
    .venv/bin/python bench/java_tools.py --cells consume,e2e --pair durable --runs 3

``--base`` is another checkout (a directory) or a commit of this repository, which is exported
once (``git archive``) into the user's cache directory (``~/.cache/minibroker-bench/trees/<commit>/``,
outside the repository, whose tests scan bench/): its broker runs as "minibroker before",
with this benchmark's code. ``--cells`` times a subset of the tools (produce1k, produce100,
consume, e2e, txnproduce, txnloop; consume produces its topic untimed when produce1k is not among
them), ``--warmup`` the untimed records first (with a transaction cell, also one untimed
TxnLoop of ``--txn-warmup`` transactions, so that Kafka creates its transaction log before the
timed part).

Writes bench/results/java-tools-<ts>.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import queue
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as common  # noqa: E402  (bench/ is not a package)
import kafka_anchor  # noqa: E402

from tests.kafka_ref.harness import (  # noqa: E402
    TOOLS_LOG4J,
    classpath,
    java_command,
    unavailable,
)

PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
END_TO_END = "org.apache.kafka.tools.EndToEndLatency"
# The perf tools run long enough for the JIT: a normal JVM, not the harness's quick-start options.
TOOL_JVM = ["-Xmx512m"]
PARTITIONS = 3
TXN_LOOP = "TxnLoop"
TXN_LOOP_SOURCE = Path(__file__).resolve().parent / "java" / "TxnLoop.java"
TXN_RECORD_SIZE = 100  # the back-to-back loop's one record per transaction


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


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def consume(broker, topic: str, records: int) -> dict:
    """ConsumerPerformance: its fetch rate, broker CPU per MB, and the tool's own CPU seconds
    beside the broker's (the one child reaped meanwhile is the tool: on 2 cores its JVM, not the
    broker, sets the rate)."""
    before, tool_before = broker.cpu_seconds(), _children_cpu_seconds()
    out = tool(CONSUMER_PERF, "--bootstrap-server", broker.bootstrap, "--topic", topic,
               "--messages", str(records), "--timeout", "60000")
    tool_cpu = _children_cpu_seconds() - tool_before
    cpu = common.settled_cpu_seconds(broker.cpu_seconds) - before
    header, row = out.strip().splitlines()[-2:]
    values = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")],
                      strict=False))
    mb = float(values["data.consumed.in.MB"]) * 1024 * 1024 / common.MB  # the tool's MiB
    return {"fetch_mb_per_s": float(values["fetch.MB.sec"]), "mb": mb,
            "cpu_ms_per_mb": cpu / mb * 1000 if mb else float("nan"),
            "cpu_s": cpu, "tool_cpu_s": tool_cpu}


def end_to_end(broker, topic: str, records: int) -> dict:
    out = tool(END_TO_END, "--bootstrap-server", broker.bootstrap, "--topic", topic,
               "--num-records", str(records), "--producer-acks", "all", "--record-size", "100")
    match = re.search(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99.9th = ([\d.]+)", out)
    if match is None:
        raise RuntimeError(f"EndToEndLatency said: {out[-500:]}")
    return {"e2e_p50_ms": float(match[1]), "e2e_p99_ms": float(match[2]),
            "e2e_p999_ms": float(match[3])}


def transactional_produce(broker, topic: str, records: int, size: int, txn_ms: int,
                          transactional_id: str) -> dict:
    """ProducerPerformance committing a transaction every ``txn_ms``."""
    before = broker.cpu_seconds()
    out = tool(PRODUCER_PERF, "--topic", topic, "--num-records", str(records), "--record-size",
               str(size), "--throughput", "-1", "--transactional-id", transactional_id,
               "--transaction-duration-ms", str(txn_ms), "--producer-props",
               f"bootstrap.servers={broker.bootstrap}", "acks=all")
    cpu = common.settled_cpu_seconds(broker.cpu_seconds) - before
    last = out.strip().splitlines()[-1]
    match = re.search(r"([\d.]+) records/sec \(([\d.]+) MB/sec\).*?([\d.]+) ms 99th", last)
    if match is None:
        raise RuntimeError(f"ProducerPerformance (transactional) said: {last}")
    mb = records * size / common.MB
    return {"records_per_s": float(match[1]), "p99_ms": float(match[3]),
            "cpu_ms_per_mb": cpu / mb * 1000}


def user_cache_dir() -> Path:
    """Where compiled bench programs are kept between runs ($XDG_CACHE_HOME or ~/.cache)."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "minibroker-bench"


def clients_jar() -> str:
    """The kafka-clients jar on the reference harness's classpath."""
    for entry in classpath().split(os.pathsep):
        if Path(entry).name.startswith("kafka-clients-") and entry.endswith(".jar"):
            return entry
    raise RuntimeError("no kafka-clients jar on the reference Kafka's classpath")


def txn_loop_classes() -> Path:
    """bench/java/TxnLoop.java compiled (javac, into a fresh directory, then renamed into place),
    cached under the user's cache directory by the hash of the source and the jar's name."""
    jar = clients_jar()
    digest = hashlib.sha256(TXN_LOOP_SOURCE.read_bytes() + Path(jar).name.encode()).hexdigest()
    target = user_cache_dir() / f"txnloop-{digest[:16]}"
    if (target / f"{TXN_LOOP}.class").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix="txnloop-build-", dir=target.parent))
    try:
        done = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "-cp", jar, "-d",
                               str(build), str(TXN_LOOP_SOURCE)],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"javac failed on {TXN_LOOP_SOURCE}:\n{done.stdout}{done.stderr}")
        try:
            build.rename(target)
        except OSError:  # another run compiled it meanwhile: keep that one
            pass
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return target


class LineReader:
    """A child's stdout read line by line in a thread, so that the bench can wait with a timeout."""

    def __init__(self, stream) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self.thread.start()

    def _pump(self, stream) -> None:
        for line in stream:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(
                    f"TxnLoop did not print {prefix!r} within {timeout:.0f} s") from None
            if line is None:
                raise EOFError(f"TxnLoop exited before printing {prefix!r}")
            if line.startswith(prefix):
                return line


def txn_loop(broker, topic: str, transactions: int, warmup: int, transactional_id: str,
             group: str | None = None, timeout: float = 900) -> dict:
    """Back-to-back one-record transactions from one Java producer (bench/java/TxnLoop.java);
    the broker's CPU is read after its warm-up and after the timed transactions."""
    command = ["java", *TOOL_JVM, f"-Dlog4j2.configurationFile={TOOLS_LOG4J}", "-cp",
               f"{txn_loop_classes()}{os.pathsep}{classpath()}", TXN_LOOP,
               "--bootstrap", broker.bootstrap, "--topic", topic,
               "--transactional-id", transactional_id, "--transactions", str(transactions),
               "--warmup", str(warmup), "--record-size", str(TXN_RECORD_SIZE)]
    if group is not None:
        command += ["--group", group]
    with tempfile.TemporaryFile(mode="w+") as stderr:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=stderr, text=True)
        reader = LineReader(proc.stdout)
        try:
            assert proc.stdin is not None
            try:
                reader.expect("ready", timeout)
                before = common.settled_cpu_seconds(broker.cpu_seconds)
                proc.stdin.write("go\n")
                proc.stdin.flush()
                result = reader.expect("result ", timeout)
                cpu = common.settled_cpu_seconds(broker.cpu_seconds) - before
                proc.stdin.write("close\n")
                proc.stdin.flush()
                code = proc.wait(timeout=60)
            except (TimeoutError, EOFError, OSError) as exc:
                stderr.seek(0)
                raise RuntimeError(f"{exc}: {stderr.read()[-2000:]}") from exc
            if code != 0:
                stderr.seek(0)
                raise RuntimeError(f"TxnLoop exited {code}: {stderr.read()[-2000:]}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.thread.join(timeout=10)  # the child is gone: its stdout is at its end
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
    values = {k: float(v) for k, v in (kv.split("=", 1) for kv in result.split()[1:])}
    return {"txn_per_s": values["transactions"] / values["seconds"],
            "commit_p50_ms": values["commit_p50_ms"], "commit_p99_ms": values["commit_p99_ms"],
            "commit_p999_ms": values["commit_p999_ms"], "txn_p99_ms": values["txn_p99_ms"],
            "cpu_ms_per_txn": cpu / values["transactions"] * 1000}


CELLS = ("produce1k", "produce100", "consume", "e2e", "txnproduce", "txnloop")
TXN_CELLS = ("txnproduce", "txnloop")


class TxnSettings:
    """The transaction cells' sizes (from the command line)."""

    def __init__(self, records: int = 100_000, txn_ms: int = 100, transactions: int = 1_000,
                 warmup: int = 100, offsets: bool = False) -> None:
        self.records = records  # txnproduce: 1 KiB records
        self.txn_ms = txn_ms  # txnproduce: --transaction-duration-ms
        self.transactions = transactions  # txnloop: timed transactions
        self.warmup = warmup  # txnloop: untimed transactions first
        self.offsets = offsets  # txnloop: sendOffsetsToTransaction in each transaction


def cell_failed(broker, cell: str, exc: Exception) -> str:
    """A transaction cell's client failed (a fatal error of the Java client): the run goes on
    without that cell's figures; the broker's log is kept in bench/.cache/ and the failure is
    printed under the tables and kept in the results."""
    log_path = (broker.running.log_path if isinstance(broker, Mini)
                else broker.cluster.nodes[0].log)
    kept = common.CACHE_DIR / f"failed-{cell}-{common.timestamp()}-{Path(log_path).name}"
    try:
        shutil.copyfile(log_path, kept)
    except OSError:
        kept = Path("(no broker log)")
    message = f"{cell} failed: {str(exc)[-1500:]} (broker log: {kept})"
    log(message)
    return message


def one_run(broker, records_1k: int, records_100: int, e2e: int,
            cells: tuple[str, ...] = CELLS, warmup: int = 20_000,
            txn: TxnSettings | None = None) -> dict:
    txn = txn or TxnSettings()
    broker.start()
    out: dict = {}
    try:
        for topic in ("warm", "t1k", "t100", "e2e", "ttx", "txn"):
            common.create_topic(broker.bootstrap, topic,
                                1 if topic in ("e2e", "txn") else PARTITIONS)
        if warmup:
            produce(broker, "warm", warmup, 1024)  # untimed: JIT, page cache, imports
            consume(broker, "warm", warmup)
            if any(c in cells for c in TXN_CELLS):
                # untimed: Kafka creates its transaction log on the first transactional id
                txn_loop(broker, "warm", 1, txn.warmup, "bench-warm")
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
                    "consume_cpu_ms_per_mb": c["cpu_ms_per_mb"],
                    "consume_broker_cpu_s": c["cpu_s"], "consume_tool_cpu_s": c["tool_cpu_s"]}
        if "e2e" in cells:
            out |= end_to_end(broker, "e2e", e2e)
        if "txnproduce" in cells:
            try:
                t = transactional_produce(broker, "ttx", txn.records, 1024, txn.txn_ms,
                                          "bench-perf")
            except RuntimeError as exc:
                out.setdefault("failures", []).append(cell_failed(broker, "txnproduce", exc))
            else:
                out |= {"txn_produce_records_per_s": t["records_per_s"],
                        "txn_produce_p99_ms": t["p99_ms"],
                        "txn_produce_cpu_ms_per_mb": t["cpu_ms_per_mb"]}
        if "txnloop" in cells:
            try:
                loop = txn_loop(broker, "txn", txn.transactions, txn.warmup, "bench-loop",
                                "bench-group" if txn.offsets else None)
            except RuntimeError as exc:
                out.setdefault("failures", []).append(cell_failed(broker, "txnloop", exc))
            else:
                out |= {"txn_loop_txn_per_s": loop["txn_per_s"],
                        "txn_loop_cpu_ms_per_txn": loop["cpu_ms_per_txn"],
                        "txn_loop_commit_p50_ms": loop["commit_p50_ms"],
                        "txn_loop_commit_p99_ms": loop["commit_p99_ms"],
                        "txn_loop_commit_p999_ms": loop["commit_p999_ms"],
                        "txn_loop_txn_p99_ms": loop["txn_p99_ms"]}
        out["peak_rss_mb"] = broker.memory().hwm_mb
    finally:
        broker.stop()
    return out


FIGURES = [
    ("consume_cpu_ms_per_mb", "consume: broker CPU ms per MB", ".2f"),
    ("consume_fetch_mb_per_s", "ConsumerPerformance fetch MB/s (noisy)", ".0f"),
    ("consume_broker_cpu_s", "consume: broker CPU s while ConsumerPerformance ran", ".2f"),
    ("consume_tool_cpu_s", "consume: ConsumerPerformance's own CPU s (its JVM's whole run)",
     ".2f"),
    ("produce_1k_cpu_ms_per_mb", "produce 1 KiB: broker CPU ms per MB", ".2f"),
    ("produce_1k_records_per_s", "produce 1 KiB records/s (noisy)", ".0f"),
    ("produce_1k_p99_ms", "produce 1 KiB p99 ms", ".0f"),
    ("produce_100_records_per_s", "produce 100 B records/s (noisy)", ".0f"),
    ("produce_100_p99_ms", "produce 100 B p99 ms", ".0f"),
    ("e2e_p50_ms", "EndToEndLatency 100 B p50 ms", ".1f"),
    ("e2e_p99_ms", "EndToEndLatency p99 ms", ".1f"),
    ("e2e_p999_ms", "EndToEndLatency p99.9 ms", ".1f"),
    ("txn_produce_cpu_ms_per_mb", "transactional produce 1 KiB: broker CPU ms per MB", ".2f"),
    ("txn_produce_records_per_s", "transactional produce 1 KiB records/s (noisy)", ".0f"),
    ("txn_produce_p99_ms", "transactional produce 1 KiB p99 ms", ".0f"),
    ("txn_loop_cpu_ms_per_txn", "back-to-back transactions: broker CPU ms per txn", ".2f"),
    ("txn_loop_txn_per_s", "back-to-back transactions txn/s (noisy)", ".0f"),
    ("txn_loop_commit_p50_ms", "back-to-back commitTransaction p50 ms", ".1f"),
    ("txn_loop_commit_p99_ms", "back-to-back commitTransaction p99 ms", ".1f"),
    ("txn_loop_commit_p999_ms", "back-to-back commitTransaction p99.9 ms", ".1f"),
    ("peak_rss_mb", "peak RSS MB", ".0f"),
]


def base_tree(base: str, trees: Path | None = None) -> tuple[Path, str]:
    """``--base``: a directory is a checkout used as it is; anything else a commit of this
    repository, exported once with ``git archive`` into ``trees``/<commit>/ (by default
    trees/ of the user's cache directory: not under bench/, whose files the suite scans).
    Returns the tree and the commit it is at."""
    if Path(base).is_dir():
        return Path(base).resolve(), common.tree_commit(Path(base))
    found = subprocess.run(["git", "-C", str(common.REPO_ROOT), "rev-parse", "--verify",
                            "--quiet", f"{base}^{{commit}}"], capture_output=True, text=True,
                           timeout=30)
    if found.returncode != 0:
        raise SystemExit(f"--base {base}: neither a directory nor a commit of this repository")
    commit = found.stdout.strip()
    trees = trees if trees is not None else user_cache_dir() / "trees"
    target = trees / commit
    if (target / "broker" / "cli.py").exists():
        return target, commit[:7]
    trees.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f"{commit[:7]}-", dir=trees))
    try:
        archive = subprocess.Popen(["git", "-C", str(common.REPO_ROOT), "archive", commit],
                                   stdout=subprocess.PIPE)
        unpacked = subprocess.run(["tar", "-x", "-C", str(build)], stdin=archive.stdout,
                                  capture_output=True, text=True, timeout=300)
        assert archive.stdout is not None
        archive.stdout.close()
        if archive.wait(timeout=300) != 0 or unpacked.returncode != 0:
            raise SystemExit(f"--base {base}: git archive | tar failed: {unpacked.stderr}")
        try:
            build.rename(target)
        except OSError:  # another run exported it meanwhile
            pass
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return target, commit[:7]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="minibroker before: another checkout (a directory) or "
                        "a commit of this repository (exported into ~/.cache/minibroker-bench/trees/)")
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
    parser.add_argument("--records-txn", type=int, default=100_000,
                        help="txnproduce: 1 KiB records produced in transactions")
    parser.add_argument("--txn-ms", type=int, default=100,
                        help="txnproduce: ProducerPerformance's --transaction-duration-ms")
    parser.add_argument("--txns", type=int, default=1_000,
                        help="txnloop: timed back-to-back transactions")
    parser.add_argument("--txn-warmup", type=int, default=100,
                        help="txnloop: untimed transactions first (in the same producer)")
    parser.add_argument("--txn-offsets", action="store_true",
                        help="txnloop: sendOffsetsToTransaction in every transaction")
    args = parser.parse_args()
    cells = tuple(c.strip() for c in args.cells.split(",") if c.strip())
    unknown = sorted(set(cells) - set(CELLS))
    if unknown or not cells:
        parser.error(f"--cells: unknown {', '.join(unknown) or '(none given)'}; "
                     f"choose from {','.join(CELLS)}")
    reason = None if args.no_kafka else unavailable()
    if reason:
        sys.exit(f"the reference Kafka cannot run here: {reason}")
    base, base_commit = base_tree(args.base) if args.base is not None else (None, None)
    if base is not None:
        log(f"minibroker before: {base} ({base_commit})")
    if any(c in cells for c in TXN_CELLS):
        txn_loop_classes()  # compiled before the first broker starts
    txn = TxnSettings(args.records_txn, args.txn_ms, args.txns, args.txn_warmup,
                      args.txn_offsets)
    pairs = ["durable", "page-cache"] if args.pair == "both" else [args.pair]
    results: dict[str, dict[str, list[dict]]] = {pair: {} for pair in pairs}
    with common.work_directory("java-tools") as work:
        for run in range(args.runs):
            for pair in pairs:
                never = pair == "page-cache"
                work_run = Path(tempfile.mkdtemp(prefix=f"{pair}-{run}-", dir=work))
                brokers: list[Mini | kafka_anchor.Kafka] = [
                    Mini(work_run, never, None, "minibroker")]
                if base is not None:
                    brokers.append(Mini(work_run, never, base, "minibroker before"))
                if not args.no_kafka:
                    brokers.append(kafka_anchor.Kafka(work_run, durable=not never))
                shift = run % len(brokers)
                for broker in brokers[shift:] + brokers[:shift]:
                    label = "Kafka 4.4" if isinstance(broker, kafka_anchor.Kafka) else broker.label
                    log(f"run {run + 1} {pair}: {label}")
                    r = one_run(broker, args.records_1k, args.records_100, args.e2e, cells,
                                args.warmup, txn)
                    results[pair].setdefault(label, []).append(r)
                    log("  " + ", ".join(f"{k} {r[k]:{f}}" for k, _, f in FIGURES if k in r))
    for pair, by_broker in results.items():
        labels = list(by_broker)
        rows = []
        for key, title, fmt in FIGURES:
            if not any(key in r for runs in by_broker.values() for r in runs):
                continue  # a cell not run
            row = []
            for label in labels:
                values = [r[key] for r in by_broker[label] if key in r]
                if not values:
                    row.append("failed")
                    continue
                missing = len(by_broker[label]) - len(values)
                row.append(f"{statistics.median(values):{fmt}} "
                           f"({min(values):{fmt}}-{max(values):{fmt}})"
                           + (f" [{len(values)} of {len(by_broker[label])} runs]"
                              if missing else ""))
            rows.append([title, *row])
        print(f"\n{pair} pair, median (range) of {args.runs} runs"
              + (f", minibroker before = {base_commit}" if base_commit else "")
              + (f", transactional produce commits every {args.txn_ms} ms"
                 if "txnproduce" in cells else "")
              + (f", {args.txns} back-to-back transactions"
                 + (" with sendOffsetsToTransaction" if args.txn_offsets else "")
                 if "txnloop" in cells else "") + ":\n")
        print(common.markdown_table(["figure", *labels], rows))
        for label in labels:
            for failure in (f for r in by_broker[label] for f in r.get("failures", [])):
                print(f"\n{label}: {failure}")
    path = common.write_results_json("java-tools", {
        "args": vars(args), "base_commit": base_commit, "results": results,
        "commit": common.tree_commit(common.REPO_ROOT)})
    log(f"results in {path}")


if __name__ == "__main__":
    main()
