"""The reference-Kafka harness itself: skip or fail without Java, one node, three nodes, the CLI."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from protocol.api_keys import ApiKey
from tests.kafka_ref.harness import REPO, KafkaCluster, run_tool, unavailable
from tests.process_guard import popen
from tests.raw_client import RawConnection

# The session's one-node Kafka and the three-node cluster each serve one xdist group
# (tests/kafka_ref/fixtures.py).
KAFKA_REF_GROUP = pytest.mark.xdist_group("kafka_ref")

TOPICS = "org.apache.kafka.tools.TopicCommand"


def test_unavailable_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "no java on PATH" in unavailable()


@pytest.mark.parametrize("ci, outcome", [("true", "errors"), ("", "skipped")])
def test_without_java_skipped_but_under_ci_failed(pytester, monkeypatch, ci, outcome):
    pytester.makeconftest("from tests.kafka_ref.fixtures import kafka_ref  # noqa: F401\n")
    pytester.makepyfile(textwrap.dedent("""
        def test_needs_kafka(kafka_ref):
            pass
    """))
    monkeypatch.setenv("PATH", str(pytester.path))
    monkeypatch.setenv("CI", ci)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rsE")
    result.assert_outcomes(**{outcome: 1})
    result.stdout.fnmatch_lines(["*no java on PATH*"])


@KAFKA_REF_GROUP
def test_one_node_serves_with_replication_one(kafka_one):
    assert len(kafka_one.nodes) == 1
    with RawConnection(kafka_one.nodes[0].port) as conn:
        meta = conn.request(ApiKey.METADATA, 1, {"topics": None})
    assert [b["node_id"] for b in meta["brokers"]] == [0]
    done = run_tool(TOPICS, "--bootstrap-server", kafka_one.bootstrap, "--create", "--topic",
                    "harness-one", "--partitions", "2")
    assert done.returncode == 0, done.stderr
    done = run_tool(TOPICS, "--bootstrap-server", kafka_one.bootstrap, "--describe", "--topic",
                    "harness-one")
    assert "PartitionCount: 2\tReplicationFactor: 1" in done.stdout, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.xdist_group("kafka_three")
def test_three_nodes_replicate_and_survive_a_kill(kafka_three):
    bootstrap = kafka_three.bootstrap
    done = run_tool(TOPICS, "--bootstrap-server", bootstrap, "--create", "--topic", "harness-three")
    assert done.returncode == 0, done.stderr
    done = run_tool(TOPICS, "--bootstrap-server", bootstrap, "--describe", "--topic", "harness-three")
    assert "ReplicationFactor: 3\tConfigs: min.insync.replicas=2" in done.stdout, done.stdout
    kafka_three.kill9(2)
    try:
        done = run_tool(TOPICS, "--bootstrap-server", kafka_three.node(1).address, "--describe",
                        "--topic", "harness-three")
        assert done.returncode == 0, done.stderr
    finally:
        kafka_three.start_node(2)
    assert all(node.proc is not None and node.proc.poll() is None for node in kafka_three.nodes)


@pytest.mark.slow
@KAFKA_REF_GROUP
def test_cli_prints_bootstrap_and_stops_on_sigterm(kafka_ref, tmp_path):
    proc = popen([sys.executable, "-m", "tests.kafka_ref", "start", "--nodes", "1", "--dir",
                  str(tmp_path / "k")], what="python -m tests.kafka_ref start", cwd=REPO,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                 env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        bootstrap = proc.stdout.readline().strip()
        if not bootstrap.startswith("127.0.0.1:"):
            # An empty line is the end of stdout: the command is exiting (wait for it, so that
            # its stderr can be read to the end; poll() may not see the exit yet).
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
            pytest.fail(f"start printed {bootstrap!r} and exited with {proc.returncode}:\n"
                        + (proc.stderr.read() if proc.returncode is not None else "(still running)"))
        with RawConnection(int(bootstrap.rsplit(":", 1)[1])) as conn:
            assert conn.request(ApiKey.METADATA, 1, {"topics": None})["brokers"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == 0
    assert (tmp_path / "k" / "node0" / "server.log").stat().st_size > 0


@KAFKA_REF_GROUP
def test_start_failure_reports_the_log(kafka_ref, tmp_path):
    cluster = KafkaCluster(tmp_path, 1, config={"log.dirs": "/proc/version/nope"})
    with pytest.raises(RuntimeError, match="Kafka node 0"):
        cluster.start(timeout=60)
    assert all(node.proc is None for node in cluster.nodes)
