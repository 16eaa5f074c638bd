"""The reference Kafka: Apache Kafka 4.4.0's jars, a one-node or three-node KRaft cluster on loopback
ports, Kafka's command-line tools and the test programs in ``tests/kafka_ref/java/``.

Kafka is a referee for the tests and an anchor for the benchmarks, never a dependency of the
product: only tests/ and bench/ import this module.

- :func:`unavailable` says why Java or Maven is missing (None when both are there).
- :func:`classpath` fetches the jars once (``fetch.sh``: Maven into its local repository, never
  into the project) and returns their classpath, cached in ``build/kafka_ref/`` by the pom's hash.
- :func:`programs_classpath` adds the test programs, compiled once with javac (cached by hash).
- :class:`KafkaCluster` formats and starts KRaft nodes (each broker and controller at once), waits
  until every broker serves Metadata, stops them by their own process handles, and keeps each node's
  ``server.log`` in its work directory (:meth:`KafkaCluster.log_tail` for a failure's report).
- :func:`run_tool` runs one of Kafka's tools (``org.apache.kafka.tools.TopicCommand``, ...) or a
  test program in a fresh JVM and returns its exit code, stdout and stderr.

Concurrent users (pytest-xdist workers, a benchmark) share the caches under a file lock.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.process_guard import popen

KAFKA_VERSION = "4.4.0"
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
POM = HERE / "pom.xml"
JAVA_SOURCES = HERE / "java"
TOOLS_LOG4J = HERE / "log4j2-tools.properties"
BROKER_LOG4J = HERE / "log4j2-broker.properties"

# A tool or test program runs for seconds: C1 only, serial GC and a small heap start it sooner.
TOOL_JVM_OPTS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss1m"]
# What Kafka's bin/kafka-server-start.sh gives the broker (KAFKA_JVM_PERFORMANCE_OPTS), heap aside.
BROKER_JVM_OPTS = [
    "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true",
]


def cache_dir() -> Path:
    """Where the classpath file and the compiled test programs are kept (not the jars)."""
    path = Path(os.environ.get("MINIBROKER_KAFKA_REF_CACHE") or REPO / "build" / "kafka_ref")
    path.mkdir(parents=True, exist_ok=True)
    return path


def unavailable() -> str | None:
    """Why the reference Kafka cannot run here (no Java 17+, no javac, no Maven), or None."""
    java = shutil.which("java")
    if java is None:
        return "no java on PATH (the reference Kafka 4.4 needs Java 17 or later)"
    if shutil.which("javac") is None:
        return "no javac on PATH (the Kafka test programs are compiled at test time; install a JDK)"
    if shutil.which("mvn") is None:
        return "no mvn on PATH (Kafka's jars are fetched from Maven Central with Maven)"
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if match is None:
        return f"cannot read the Java version from `java -version`: {out.strip()[:200]}"
    major = int(match.group(1)) if match.group(1) != "1" else int(match.group(2) or 0)
    if major < 17:
        return f"java on PATH is version {major}; Kafka 4.4 needs 17 or later"
    return None


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path`` (created if missing) for the block: the caches shared by
    pytest-xdist workers and benchmarks are built by one of them at a time."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def classpath() -> str:
    """The reference Kafka's classpath; the first call on a machine fetches the jars (fetch.sh)."""
    path = cache_dir() / f"classpath-{_digest(POM.read_bytes())}.txt"
    with file_lock(cache_dir() / "fetch.lock"):
        if path.exists():
            cp = path.read_text().strip()
            if cp and all(Path(p).exists() for p in cp.split(os.pathsep)):
                return cp
        tmp = path.with_suffix(".tmp")
        done = subprocess.run(["bash", str(HERE / "fetch.sh"), str(tmp)], capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise RuntimeError(f"fetching Kafka {KAFKA_VERSION}'s jars failed (exit {done.returncode}):\n"
                               + (done.stdout + done.stderr)[-4000:])
        tmp.replace(path)
        return path.read_text().strip()


def programs_classpath() -> str:
    """The test programs (tests/kafka_ref/java/*.java, compiled once) ahead of Kafka's classpath."""
    cp = classpath()
    sources = sorted(JAVA_SOURCES.glob("*.java"))
    key = _digest(cp.encode(), *(s.name.encode() + s.read_bytes() for s in sources))
    out = cache_dir() / f"classes-{key}"
    with file_lock(cache_dir() / "javac.lock"):
        if not (out / ".done").exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            if sources:
                done = subprocess.run(
                    ["javac", "-nowarn", "-encoding", "UTF-8", "-cp", cp, "-d", str(out),
                     *map(str, sources)],
                    capture_output=True, text=True)
                if done.returncode != 0:
                    raise RuntimeError("javac failed on tests/kafka_ref/java:\n" + done.stdout
                                       + done.stderr)
            (out / ".done").touch()
    return f"{out}{os.pathsep}{cp}"


def java_command(main_class: str, *args: str, jvm_opts: Iterable[str] = TOOL_JVM_OPTS,
                 programs: bool = True) -> list[str]:
    """The command line that runs ``main_class`` on Kafka's classpath, after the test programs'
    (compiled first) unless ``programs`` is false."""
    cp = programs_classpath() if programs else classpath()
    return ["java", *jvm_opts, f"-Dlog4j2.configurationFile={TOOLS_LOG4J}", "-cp", cp,
            main_class, *args]


def run_tool(main_class: str, *args: str, input: str | None = None, timeout: float = 120.0,
             jvm_opts: Iterable[str] = TOOL_JVM_OPTS, programs: bool = True,
             ) -> subprocess.CompletedProcess[str]:
    """Run a Kafka tool or test program to its end; exit code, stdout and stderr as text."""
    return subprocess.run(java_command(main_class, *args, jvm_opts=jvm_opts, programs=programs),
                          input=input, capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def new_cluster_id() -> str:
    """A KRaft cluster id as Kafka makes them (URL-safe base64 of 16 random bytes, no padding)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):  # would read as an option on the command line
            return cid


@dataclass
class KafkaNode:
    node_id: int
    port: int
    controller_port: int
    dir: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0  # how often it was started (its server.log keeps every run's lines)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.dir / "server.log"

    @property
    def properties(self) -> Path:
        return self.dir / "server.properties"


class KafkaCluster:
    """A KRaft Kafka of 1 or 3 nodes on loopback ports, each node broker and controller at once.

    One node: every replication factor 1 and min ISR 1 (Kafka's defaults break transactions on one
    node), formatted with ``--standalone``. Three nodes: replication factor 3 and min ISR 2 for every
    topic and internal topic, a static quorum of the three controllers. ``config`` adds or replaces
    broker properties; ``features`` are given to the storage tool (``{"transaction.version": 1}``).
    ``listener`` is the clients' listener's security protocol (``SASL_PLAINTEXT``: give the SASL
    settings in ``config``; readiness is then read from the log, not asked with Metadata);
    ``format_args`` go to the storage tool (``["--add-scram", "SCRAM-SHA-256=[name=u,password=p]"]``).
    """

    def __init__(self, workdir: Path, nodes: int = 1, *, config: Mapping[str, object] | None = None,
                 features: Mapping[str, int] | None = None, heap: str = "512m",
                 jvm_opts: Iterable[str] = (), listener: str = "PLAINTEXT",
                 format_args: Iterable[str] = ()) -> None:
        if nodes < 1:
            raise ValueError("a cluster has at least one node")
        self.workdir = Path(workdir)
        self.cluster_id = new_cluster_id()
        self.config = dict(config or {})
        self.features = dict(features or {})
        self.heap = heap
        self.jvm_opts = list(jvm_opts)
        self.listener = listener
        self.format_args = list(format_args)
        self.nodes = [
            KafkaNode(i, free_port(), free_port(), self.workdir / f"node{i}") for i in range(nodes)
        ]

    # -- addresses ----------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        """Node ids count from 0, as minibroker's single node is 0."""
        return self.nodes[node_id]

    # -- configuration ------------------------------------------------------------------------
    def node_properties(self, node: KafkaNode) -> dict[str, object]:
        n = len(self.nodes)
        rf, min_isr = (1, 1) if n == 1 else (min(n, 3), 2)
        props: dict[str, object] = {
            "process.roles": "broker,controller",
            "node.id": node.node_id,
            "listeners": f"{self.listener}://127.0.0.1:{node.port},"
                         f"CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"{self.listener}://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": self.listener,
            "listener.security.protocol.map": f"{self.listener}:{self.listener},CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.dir / "data"),
            "num.partitions": 1,
            "default.replication.factor": rf,
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": 0,
        }
        if min_isr != 1:  # else left at its default, so that topic descriptions do not list it
            props["min.insync.replicas"] = min_isr
        if n == 1:
            props["controller.quorum.bootstrap.servers"] = f"127.0.0.1:{node.controller_port}"
        else:
            props["controller.quorum.voters"] = ",".join(
                f"{m.node_id}@127.0.0.1:{m.controller_port}" for m in self.nodes)
        props.update(self.config)
        return props

    def _write_properties(self, node: KafkaNode) -> None:
        node.dir.mkdir(parents=True, exist_ok=True)
        lines = [f"{key}={value}" for key, value in self.node_properties(node).items()]
        node.properties.write_text("\n".join(lines) + "\n")

    # -- life cycle ---------------------------------------------------------------------------
    def format(self) -> None:
        """Write each node's server.properties and format its log directory (in parallel)."""
        for node in self.nodes:
            self._write_properties(node)

        def format_one(node: KafkaNode) -> None:
            args = ["format", "-t", self.cluster_id, "-c", str(node.properties)]
            if len(self.nodes) == 1:
                args.insert(1, "--standalone")
            for name, level in self.features.items():
                args += ["--feature", f"{name}={level}"]
            args += self.format_args
            done = run_tool("kafka.tools.StorageTool", *args, programs=False)
            if done.returncode != 0:
                raise RuntimeError(f"formatting Kafka node {node.node_id} failed:\n"
                                   f"{done.stdout}{done.stderr}")

        with ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(format_one, self.nodes))

    def start(self, timeout: float = 120.0) -> KafkaCluster:
        """Format (first time only), start every node and wait until every broker serves."""
        if not all((node.dir / "data" / "meta.properties").exists() for node in self.nodes):
            self.format()
        for node in self.nodes:
            self.start_node(node.node_id, wait=False)
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def start_node(self, node_id: int, *, wait: bool = True, timeout: float = 120.0) -> None:
        """Start one (formatted, stopped) node; with ``wait``, until the cluster serves again."""
        node = self.node(node_id)
        if node.proc is not None and node.proc.poll() is None:
            raise RuntimeError(f"Kafka node {node_id} is already running")
        cmd = [
            "java", f"-Xms{self.heap}", f"-Xmx{self.heap}", *BROKER_JVM_OPTS, *self.jvm_opts,
            f"-Dlog4j2.configurationFile={BROKER_LOG4J}", f"-Dkafka.logs.dir={node.dir}",
            "-cp", classpath(), "kafka.Kafka", str(node.properties),
        ]
        node.starts += 1
        with open(node.log, "ab") as log:
            node.proc = popen(cmd, what=f"reference Kafka node {node_id} in {node.dir}",
                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until every running node answers Metadata listing every running broker."""
        deadline = time.monotonic() + timeout
        running = [node for node in self.nodes if node.proc is not None]
        while True:
            for node in running:
                assert node.proc is not None
                if node.proc.poll() is not None:
                    raise RuntimeError(f"Kafka node {node.node_id} exited with {node.proc.returncode}"
                                       f" while starting:\n{self.log_tail()}")
            if all(self._serves(node, len(running)) if self.listener == "PLAINTEXT"
                   else self._started(node) for node in running):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kafka ({len(running)} nodes) did not serve within {timeout} s:\n"
                                   + self.log_tail())
            time.sleep(0.25)

    @staticmethod
    def _started(node: KafkaNode) -> bool:
        """The node logged that it started, since it last started (a secured listener's probe)."""
        try:
            text = node.log.read_text(errors="replace")
        except FileNotFoundError:
            return False
        return text.count("Kafka Server started") >= node.starts

    @staticmethod
    def _serves(node: KafkaNode, brokers: int) -> bool:
        from protocol.api_keys import ApiKey
        from tests.raw_client import RawConnection

        try:
            with RawConnection(node.port, timeout=5.0) as conn:
                meta = conn.request(ApiKey.METADATA, 1, {"topics": None})
        except (OSError, AssertionError, ValueError):
            return False
        return len(meta["brokers"]) >= brokers and meta["controller_id"] >= 0

    def stop_node(self, node_id: int, timeout: float = 30.0) -> int | None:
        """SIGTERM (a controlled shutdown), SIGKILL after ``timeout``; returns the exit status."""
        node = self.node(node_id)
        proc, node.proc = node.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # in case a test left it stopped
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def kill9(self, node_id: int) -> None:
        node = self.node(node_id)
        proc, node.proc = node.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def signal(self, node_id: int, sig: int) -> None:
        """Send ``sig`` (SIGSTOP, SIGCONT) to a running node by its own handle."""
        proc = self.node(node_id).proc
        assert proc is not None and proc.poll() is None, f"Kafka node {node_id} is not running"
        proc.send_signal(sig)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every node (in parallel: a three-node cluster's last brokers wait on its quorum)."""
        running = [node.node_id for node in self.nodes if node.proc is not None]
        if running:
            with ThreadPoolExecutor(len(running)) as pool:
                list(pool.map(lambda i: self.stop_node(i, timeout), running))

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for node in self.nodes:
            try:
                text = node.log.read_text(errors="replace").splitlines()[-lines:]
            except FileNotFoundError:
                text = ["(no log)"]
            parts.append(f"--- Kafka node {node.node_id}: {node.log} (last {lines} lines)")
            parts.extend(text)
        return "\n".join(parts)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
