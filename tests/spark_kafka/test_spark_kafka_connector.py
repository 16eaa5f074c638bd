"""Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka-0-10 4.2.0 from Maven Central)
against minibroker: batch and streaming reads with ``kafka.isolation.level=read_committed``, batch
and streaming writes. It runs in its own PySpark 4.2.0 venv (tests/spark_kafka/env.py: the
connector must match its Spark, and the product's venv has PySpark 4.3), as a subprocess
(tests/spark_kafka/job.py); our client is the referee of what it read and wrote."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.spark.helpers import consume_all, create_topic, no_open_transactions, produce
from tests.spark_kafka import env

pytestmark = pytest.mark.slow

JOB = env.HERE / "job.py"


@pytest.fixture(scope="session")
def spark42():
    reason = env.unavailable()
    if reason is None:
        try:
            interpreter = env.python()
            return interpreter, ",".join(env.jars(interpreter))
        except RuntimeError as exc:  # pip or Maven could not fetch (no network, say)
            reason = str(exc)
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"Spark's Kafka connector cannot run under CI: {reason}", pytrace=False)
    pytest.skip(f"Spark's Kafka connector cannot run here: {reason}")


def run_job(spark42, *args: str, timeout: float = 900) -> dict:
    interpreter, jars = spark42
    done = subprocess.run([str(interpreter), str(JOB), *args, "--jars", jars], capture_output=True,
                          text=True, timeout=timeout, env=env.environment(interpreter))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_spark_kafka_connector_reads_and_writes_minibroker(spark42, broker_proc, tmp_path):
    bootstrap = broker_proc.bootstrap
    source, out_batch, out_stream = "sk-in", "sk-out-batch", "sk-out-stream"
    for topic in (source, out_batch, out_stream):
        create_topic(bootstrap, topic, 2)
    committed = [b"c%03d" % i for i in range(200)]
    produce(bootstrap, source, committed[:100], transactional_id="sk-p1")
    produce(bootstrap, source, [b"aborted-%d" % i for i in range(50)], transactional_id="sk-p2",
            abort=True)
    produce(bootstrap, source, committed[100:150], transactional_id="sk-p3")
    produce(bootstrap, source, committed[150:])  # not transactional

    out = run_job(spark42, "check", "--bootstrap", bootstrap, "--source", source,
                  "--out-batch", out_batch, "--out-stream", out_stream,
                  "--checkpoint", str(tmp_path / "checkpoint"))

    assert out["spark"] == env.SPARK_VERSION
    expected = sorted(v.decode() for v in committed)
    assert out["batch_read"] == expected  # read_committed: no aborted record
    assert out["batch_read_partitions"] == [0, 1]
    assert out["stream_read"] == expected
    assert out["stream_rows"] == len(committed)
    assert sorted(r.value.decode() for r in consume_all(bootstrap, out_batch)) == [
        v.upper() for v in expected]
    assert sorted(r.value.decode() for r in consume_all(bootstrap, out_stream)) == [
        v + "!" for v in expected]
    assert no_open_transactions(bootstrap, out_stream)
