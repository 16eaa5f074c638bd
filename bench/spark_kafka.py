"""The same Spark batch read of a minibroker topic through Spark's own Kafka connector
(``format("kafka")``, spark-sql-kafka-0-10 4.2.0, read_committed) and through ours
(``format("minibroker")``), side by side in one Spark 4.2.0 session.

    .venv/bin/python bench/spark_kafka.py [--records 200000] [--value-size 100] [--runs 3]

The connector's version must be PySpark's; Maven Central serves it up to 4.2.0 while the project's
venv has PySpark 4.3, so the read runs in the tests' own PySpark 4.2.0 venv
(tests/spark_kafka/env.py; built once under build/spark_kafka/) as a subprocess
(tests/spark_kafka/job.py). One minibroker (``--flush never``), a topic of 2 partitions written
with confluent-kafka; each read is ``count(*)`` and ``sum(length(value))`` over the whole topic
(local[2]); the formats alternate, one warm-up read of each is discarded. Writes
bench/results/spark-kafka-<ts>.json.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as common  # noqa: E402  (bench/ is not a package)

from tests.spark_kafka import env  # noqa: E402

TOPIC = "spark-read"
PARTITIONS = 2


@click.command()
@click.option("--records", default=200_000, show_default=True)
@click.option("--value-size", default=100, show_default=True)
@click.option("--runs", default=3, show_default=True, help="Timed reads of each format.")
def main(records: int, value_size: int, runs: int) -> None:
    reason = env.unavailable()
    if reason:
        raise SystemExit(f"Spark's Kafka connector cannot run here: {reason}")
    interpreter = env.python()
    jars = ",".join(env.jars(interpreter))
    with common.work_directory("spark-kafka") as work, \
            common.RunningBroker(common.minibroker_spec(flush_never=True), work) as broker:
        common.create_topic(broker.bootstrap, TOPIC, PARTITIONS)
        common.produce_records(broker.bootstrap, TOPIC, records, value_size, PARTITIONS)
        total = records + common.WARMUP_RECORDS
        done = subprocess.run(
            [str(interpreter), str(env.HERE / "job.py"), "bench", "--bootstrap", broker.bootstrap,
             "--jars", jars, "--source", TOPIC, "--runs", str(runs)],
            capture_output=True, text=True, timeout=3600, env=env.environment(interpreter))
        if done.returncode != 0:
            raise SystemExit(done.stdout[-2000:] + done.stderr[-4000:])
        result = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(n == total for n in result["records"].values()), result["records"]
    mb = total * value_size / common.MB
    rows = []
    for name, label in (("kafka", 'format("kafka") (Spark\'s, 4.2.0)'),
                        ("minibroker", 'format("minibroker") (ours)')):
        seconds = result["seconds"][name]
        middle = statistics.median(seconds)
        rows.append([label, ", ".join(f"{s:.2f}" for s in seconds), f"{middle:.2f}",
                     f"{total / middle:,.0f}", f"{mb / middle:.1f}"])
    payload = {"records": total, "value_size": value_size, "partitions": PARTITIONS, "runs": runs,
               "spark": result["spark"], "seconds": result["seconds"], "cpus": os.cpu_count(),
               "load": os.getloadavg()}
    path = common.write_results_json("spark-kafka", payload)
    click.echo(common.markdown_table(
        ["read of the whole topic", "runs, s", "median, s", "records/s", "MB/s"], rows))
    click.echo(f"\n{total:,} records of {value_size} B in {PARTITIONS} partitions, local[2], "
               f"load average {os.getloadavg()[0]:.1f}; {path}", err=True)


if __name__ == "__main__":
    main()
