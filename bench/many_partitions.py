"""Many partitions: disk per partition, event-loop stalls, shutdown and start times (issue 36).

    .venv/bin/python bench/many_partitions.py                       # this checkout, both cases
    .venv/bin/python bench/many_partitions.py --tree ../base --tree . --turns 2   # in turns

disk: a fresh durable broker; CreateTopics of one topic with ``--small`` (300) partitions, then one
tiny record (60 bytes) produced to every partition (confluent-kafka, acks=all, linger 50 ms: one
Produce request). Reported: the disk use of each partition directory as ``du`` counts it (blocks
actually allocated, ``st_blocks`` * 512, the directory's own blocks included), its largest and
mean; and the event loop's longest stall while the CreateTopics and the Produce ran.

Stalls are measured inside the broker: it is started through a few lines (``_PROBE``) that add a
trio instrument to its ``trio.run`` and write every task step longer than 5 ms (the event loop ran
nothing else meanwhile) as a JSON line ``[monotonic start, seconds, task name]`` to a file; the
bench keeps the steps that began inside its measurement window. CLOCK_MONOTONIC is the machine's,
so the two processes' clocks agree.

restart: a fresh durable broker; one topic of ``--partitions`` (10,000) partitions (created in
requests of at most 10,000, Kafka's limit per request), one record produced to each. Then:
SIGTERM -> exit (seconds from the signal to the process' end), a clean start (seconds from the
process' start to its "listening" line, recovery included), one more record to every partition
(every partition changed since the clean point) and kill -9 -> start (the unclean start with
everything changed), then kill -9 at once -> start (an unclean start with nothing written since
the previous start), then SIGTERM -> exit again. Every start is followed by a check that every
partition's high watermark is what was acknowledged (one ListOffsets through our client; the producer is
idempotent, so a retry cannot add a record); the checks are reported ("ok", or what differed).

Writes bench/results/many_partitions-<ts>.json.
"""

from __future__ import annotations

import json
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

_LISTENING = re.compile(r"listening on [^:]+:(\d+)")
_UNCLEAN = re.compile(r"partitions recovered, (\d+) after an unclean shutdown")
KAFKA_MAX_PARTITIONS_PER_REQUEST = 10_000
STALL_THRESHOLD_S = 0.005

# Started with ``python -c``: the tree's broker (cwd) with a trio instrument that logs long task
# steps to $MB_STALL_FILE. Nothing here depends on the tree's code but broker.cli.main.
_PROBE = r"""
import json, os, sys, time, trio
_out = open(os.environ["MB_STALL_FILE"], "a", buffering=1)
class _Stalls(trio.abc.Instrument):
    def before_task_step(self, task):
        self._t = time.monotonic()
    def after_task_step(self, task):
        took = time.monotonic() - self._t
        if took > float(os.environ["MB_STALL_THRESHOLD"]):
            _out.write(json.dumps([self._t, took, task.name]) + "\n")
_run = trio.run
def _probed_run(*args, **kwargs):
    kwargs.setdefault("instruments", []).append(_Stalls())
    return _run(*args, **kwargs)
trio.run = _probed_run
from broker.cli import main
sys.argv[0] = "minibroker"
main()
"""


def log(message: str) -> None:
    click.echo(message, err=True)


class Broker:
    """A minibroker subprocess of ``tree`` on ``data_dir``, with the stall probe."""

    def __init__(self, tree: Path, data_dir: Path, stall_file: Path) -> None:
        self.tree = tree
        self.data_dir = data_dir
        self.stall_file = stall_file
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.port = 0
        # Of the last start: CPU seconds (user + system, /proc/<pid>/stat) at its "listening"
        # line, and the partitions it scanned (loaded "after an unclean shutdown").
        self.start_cpu_s = 0.0
        self.scanned = 0

    def start(self, timeout_s: float = 600.0) -> float:
        """Start; seconds from the spawn to the "listening" line."""
        cmd = [sys.executable, "-c", _PROBE, "serve", "--host", "127.0.0.1", "--port",
               str(self.port), "--data-dir", str(self.data_dir)]
        self.lines = []
        started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=self.tree,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "MB_STALL_FILE": str(self.stall_file),
                 "MB_STALL_THRESHOLD": str(STALL_THRESHOLD_S)})
        ready = threading.Event()
        took = [0.0]

        def pump(stream) -> None:
            for line in stream:
                self.lines.append(line)
                m = _LISTENING.search(line)
                if m and not ready.is_set():
                    took[0] = time.monotonic() - started
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=pump, args=(self.proc.stdout,), daemon=True).start()
        if not ready.wait(timeout_s) or self.proc.poll() is not None:
            self.kill9()
            raise RuntimeError("broker did not start:\n" + "".join(self.lines[-20:]))
        self.start_cpu_s = _cpu_seconds(self.proc.pid)
        self.scanned = 0
        for line in self.lines:
            m = _UNCLEAN.search(line)
            if m:
                self.scanned = int(m.group(1))
        return took[0]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def sigterm(self, timeout_s: float = 300.0) -> float:
        """SIGTERM; seconds until the process has exited."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise RuntimeError(f"no exit within {timeout_s} s of SIGTERM") from None
        took = time.monotonic() - started
        if self.proc.returncode != 0:
            raise RuntimeError(f"exit status {self.proc.returncode}:\n" + "".join(self.lines[-20:]))
        return took

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stalls_between(stall_file: Path, start: float, end: float) -> list[tuple[float, str]]:
    """(seconds, task) of the steps longer than the threshold that began in [start, end]."""
    out = []
    try:
        text = stall_file.read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        try:
            began, took, task = json.loads(line)
        except ValueError:
            continue  # a line cut by kill -9
        if start <= began <= end:
            out.append((took, task))
    return sorted(out, reverse=True)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """One CreateTopics (Kafka refuses more than 10,000 partitions in one), then CreatePartitions
    up to ``partitions``; waits for each answer."""
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 300_000})
    first = min(partitions, KAFKA_MAX_PARTITIONS_PER_REQUEST)
    admin.create_topics([NewTopic(topic, first, 1)],
                        request_timeout=600)[topic].result(timeout=600)
    count = first
    while count < partitions:
        count = min(partitions, count + KAFKA_MAX_PARTITIONS_PER_REQUEST)
        admin.create_partitions([NewPartitions(topic, count)],
                                request_timeout=600)[topic].result(timeout=600)


def produce_one_each(bootstrap: str, topic: str, partitions: int) -> None:
    """One 60-byte record to every partition, acks=all; raises on any delivery error."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 50,
                         "batch.num.messages": 100_000, "queue.buffering.max.messages": 200_000,
                         "enable.idempotence": True, "topic.metadata.refresh.interval.ms": -1,
                         # A slow broker must not make librdkafka resend (duplicates).
                         "request.timeout.ms": 900_000, "message.timeout.ms": 900_000,
                         "socket.timeout.ms": 300_000})
    value = b"v" * 60
    for p in range(partitions):
        producer.produce(topic, value, partition=p, on_delivery=delivered)
        producer.poll(0)
    remaining = producer.flush(300)
    if remaining or errors:
        raise RuntimeError(f"{remaining} undelivered, errors: {errors[:3]}")


def check_end_offsets(bootstrap: str, topic: str, partitions: int, expected: int) -> str:
    """"ok" if every partition's high watermark is ``expected`` (one ListOffsets, our client),
    else what differs."""
    from client import Admin

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        found = admin.list_offsets({(topic, p): -1 for p in range(partitions)},
                                   read_committed=False)
    wrong = sorted((tp.partition, off) for tp, (off, _) in found.items() if off != expected)
    if wrong or len(found) != partitions:
        return (f"{len(found)} partitions answered, {len(wrong)} high watermarks differ from "
                f"{expected}: {wrong[:3]}")
    return "ok"


def du_partitions(data_dir: Path, topic: str) -> list[int]:
    """Bytes allocated (st_blocks * 512) per partition directory of ``topic``, itself included."""
    sizes = []
    for d in data_dir.glob(f"{topic}-*"):
        if not d.is_dir():
            continue
        total = d.stat().st_blocks * 512
        for f in d.iterdir():
            total += f.stat().st_blocks * 512
        sizes.append(total)
    return sizes


def disk_case(tree: Path, work: Path, small: int) -> dict:
    data = work / "data-disk"
    stall_file = work / "stalls-disk.jsonl"
    broker = Broker(tree, data, stall_file)
    broker.start()
    try:
        time.sleep(0.5)  # let start-up tasks settle
        began = time.monotonic()
        create_topic(broker.bootstrap, "t", small)
        created = time.monotonic()
        produce_one_each(broker.bootstrap, "t", small)
        ended = time.monotonic()
        time.sleep(0.3)
        sizes = du_partitions(data, "t")
        stalls = stalls_between(stall_file, began, ended)
    finally:
        broker.sigterm()
    return {
        "partitions": small,
        "du_max_kib": max(sizes) / 1024,
        "du_mean_kib": sum(sizes) / len(sizes) / 1024,
        "du_total_mib": sum(sizes) / (1 << 20),
        "create_s": created - began,
        "produce_s": ended - created,
        "longest_stall_ms": 1000 * stalls[0][0] if stalls else 0.0,
        "longest_stall_task": stalls[0][1] if stalls else "",
        "stalls_over_50ms": sum(1 for s, _ in stalls if s > 0.05),
        "longest_stalls_ms": [round(1000 * s, 1) for s, _ in stalls[:5]],
    }


def restart_case(tree: Path, work: Path, partitions: int, start_timeout_s: float) -> dict:
    data = work / "data-restart"
    stall_file = work / "stalls-restart.jsonl"
    broker = Broker(tree, data, stall_file)
    out: dict = {"partitions": partitions}

    def measured(key: str, value: float | str) -> None:
        out[key] = value
        log(f"  {key}: {value if isinstance(value, str) else round(value, 2)}")

    broker.start()
    try:
        t0 = time.monotonic()
        create_topic(broker.bootstrap, "t", partitions)
        measured("create_s", time.monotonic() - t0)
        t0 = time.monotonic()
        produce_one_each(broker.bootstrap, "t", partitions)
        measured("produce_s", time.monotonic() - t0)
        measured("sigterm_exit_s", broker.sigterm())
        measured("clean_start_s", broker.start(start_timeout_s))
        measured("clean_start_cpu_s", broker.start_cpu_s)
        checks = [check_end_offsets(broker.bootstrap, "t", partitions, 1)]
        produce_one_each(broker.bootstrap, "t", partitions)
        broker.kill9()
        measured("kill9_start_all_changed_s", broker.start(start_timeout_s))
        measured("kill9_start_all_changed_cpu_s", broker.start_cpu_s)
        measured("kill9_start_all_changed_scanned", broker.scanned)
        checks.append(check_end_offsets(broker.bootstrap, "t", partitions, 2))
        broker.kill9()
        measured("kill9_start_none_changed_s", broker.start(start_timeout_s))
        measured("kill9_start_none_changed_cpu_s", broker.start_cpu_s)
        measured("kill9_start_none_changed_scanned", broker.scanned)
        checks.append(check_end_offsets(broker.bootstrap, "t", partitions, 2))
        out["checks"] = checks  # "ok" each, or what differed (a lost or duplicated record)
        measured("sigterm_exit_after_recovery_s", broker.sigterm())
        out["du_mean_kib"] = sum(du_partitions(data, "t")) / partitions / 1024
    except RuntimeError as exc:  # e.g. a start longer than --start-timeout: keep what was measured
        measured("error", str(exc).splitlines()[0])
    finally:
        broker.kill9()
    return out


@click.command()
@click.option("--tree", "trees", multiple=True, type=click.Path(exists=True, file_okay=False,
              path_type=Path), help="Checkout whose broker runs (repeat to compare, in turns); "
              "default: this one.")
@click.option("--turns", default=1, show_default=True, help="Rounds over the trees.")
@click.option("--partitions", default=10_000, show_default=True, help="restart case.")
@click.option("--small", default=300, show_default=True, help="disk case.")
@click.option("--only", type=click.Choice(["disk", "restart"]), default=None)
@click.option("--start-timeout", default=600.0, show_default=True,
              help="Seconds a start may take before the restart case gives up.")
@click.option("--keep", is_flag=True, help="Keep the data dirs (bench/.cache/).")
def main(trees, turns, partitions, small, only, keep, start_timeout) -> None:
    trees = trees or (common.REPO_ROOT,)
    runs = []
    for turn in range(turns):
        for tree in trees:
            label = f"{tree.resolve().name}@{common.tree_commit(tree)}"
            with common.work_directory("many-partitions", keep=keep) as work:
                run = {"tree": label, "turn": turn + 1}
                if only in (None, "disk"):
                    log(f"turn {turn + 1} {label}: disk, {small} partitions")
                    run["disk"] = disk_case(tree, work, small)
                    log(f"  {run['disk']}")
                if only in (None, "restart"):
                    log(f"turn {turn + 1} {label}: restart, {partitions} partitions")
                    run["restart"] = restart_case(tree, work, partitions, start_timeout)
                    log(f"  {run['restart']}")
                runs.append(run)
    if only in (None, "disk"):
        print(common.markdown_table(
            ["tree", "turn", "du max KiB/partition", "du mean", "longest loop stall ms",
             "stalls > 50 ms", "create s", "produce s"],
            [[r["tree"], r["turn"], f"{r['disk']['du_max_kib']:.0f}",
              f"{r['disk']['du_mean_kib']:.0f}", f"{r['disk']['longest_stall_ms']:.0f} "
              f"({r['disk']['longest_stall_task'][:40]})", r["disk"]["stalls_over_50ms"],
              f"{r['disk']['create_s']:.2f}", f"{r['disk']['produce_s']:.2f}"] for r in runs]))
    if only in (None, "restart"):
        keys = ["create_s", "produce_s", "sigterm_exit_s", "clean_start_s",
                "kill9_start_all_changed_s", "kill9_start_none_changed_s",
                "sigterm_exit_after_recovery_s"]
        print(common.markdown_table(
            ["tree", "turn", *keys],
            [[r["tree"], r["turn"], *(f"{r['restart'][k]:.2f}" if k in r["restart"] else "-"
                                      for k in keys)] for r in runs]))
    path = common.write_results_json("many_partitions", {"runs": runs, "partitions": partitions,
                                                         "small": small})
    log(f"results: {path}")


if __name__ == "__main__":
    main()
