"""bench/java_tools.py's transaction cells and ``--base <commit>``, on a small scale: the
back-to-back loop of Kafka's Java client (bench/java/TxnLoop.java, compiled into a cache under
tmp_path) and ProducerPerformance in transactions against minibroker, every transaction committed
(read back read_committed), and a commit exported as the "before" tree (outside bench/)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.broker_process import BrokerProcess

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import _common as common  # noqa: E402
import java_tools  # noqa: E402

pytestmark = [pytest.mark.xdist_group("kafka_ref"), pytest.mark.slow]


class Broker:
    """What java_tools' cells use of a broker: its address and its CPU seconds."""

    def __init__(self, process: BrokerProcess) -> None:
        self.process = process

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

    def cpu_seconds(self) -> float:
        assert self.process.proc is not None
        return common.cpu_seconds(self.process.proc.pid)


def committed(bootstrap: str, topic: str, partitions: int) -> int:
    """How many records of ``topic`` a read_committed consumer sees up to the stable end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen, at_eof = 0, set()
    deadline = time.monotonic() + 60
    try:
        while len(at_eof) < partitions and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error():
                at_eof.add(message.partition())
            else:
                seen += 1
    finally:
        consumer.close()
    return seen


def test_txn_cells_against_minibroker(kafka_ref, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with BrokerProcess(tmp_path / "data") as process:
        broker = Broker(process)
        common.create_topic(broker.bootstrap, "loop", 1)
        common.create_topic(broker.bootstrap, "perf", 3)

        loop = java_tools.txn_loop(broker, "loop", 40, 5, "bench-test", timeout=120)
        assert loop["txn_per_s"] > 0
        assert 0 < loop["commit_p50_ms"] <= loop["commit_p99_ms"] <= loop["commit_p999_ms"]
        assert loop["cpu_ms_per_txn"] >= 0
        assert committed(broker.bootstrap, "loop", 1) == 45  # warm-up and timed, all committed
        assert list((tmp_path / "cache" / "minibroker-bench").glob("txnloop-*/TxnLoop.class"))

        perf = java_tools.transactional_produce(broker, "perf", 3_000, 1024, 50, "bench-perf")
        assert perf["records_per_s"] > 0 and perf["cpu_ms_per_mb"] > 0
        assert committed(broker.bootstrap, "perf", 3) == 3_000


def test_base_is_a_directory_or_a_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # not under bench/
    head = subprocess.run(["git", "-C", str(common.REPO_ROOT), "rev-parse", "HEAD~1"],
                          capture_output=True, text=True, check=True).stdout.strip()
    tree, commit = java_tools.base_tree("HEAD~1")
    assert tree == tmp_path / "cache" / "minibroker-bench" / "trees" / head
    assert commit == head[:7] and (tree / "broker" / "cli.py").is_file()
    assert java_tools.base_tree("HEAD~1") == (tree, commit)  # exported once
    assert java_tools.base_tree(str(tree), tmp_path / "other")[0] == tree  # used as it is
    assert not (tmp_path / "other").exists()
    with pytest.raises(SystemExit, match="neither a directory nor a commit"):
        java_tools.base_tree("no-such-commit-here")
