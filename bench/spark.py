"""Spark connector throughput: batch read and batch write on local[2], 1 KiB values, beside
Spark's own floor for the same row count in the same run.

    .venv/bin/python bench/spark.py              # 200,000 records of 1 KiB (about 205 MB)
    .venv/bin/python bench/spark.py --quick      # 20,000 records, one run: a smoke test
    .venv/bin/python bench/spark.py --durable    # the broker fsyncs acks=all writes

What is timed (each figure is the median of --repeat runs; MB = 10^6 bytes of values):

- read: ``spark.read.format("minibroker")`` of a 2-partition topic (read_committed, its records
  written by confluent-kafka beforehand) into the ``noop`` sink: planning, the two read tasks,
  and the rows reaching the JVM.
- write: ``spark.range(n)`` with a 1 KiB binary value column, ``write.format("minibroker")`` to a
  2-partition topic: one transaction per task, committed by the driver.
- baselines: Spark's built-in ``rate-micro-batch`` source (one micro-batch of n rows, a 1 KiB
  value column added) into ``noop``; and the write's input DataFrame into ``noop``. These are what
  Spark itself costs on this machine, with no broker or Python data source involved.

One broker subprocess and one SparkSession (local[2], as the tests) serve the whole run; one
untimed run of each case comes first, so that JVM and Python worker start-up and the JIT's
warm-up are not counted. The broker shares
the machine's two cores with Spark. Prints a markdown table, writes bench/results/spark-<ts>.json.
Target (issue 5): batch read >= 50 MB/s.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402  (bench/ is not a package)

VALUE_SIZE = 1024
PARTITIONS = 2
READ_TARGET_MB_S = 50.0


def log(message: str) -> None:
    click.echo(message, err=True)


def start_spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = common.LOOPBACK
    from pyspark.sql import SparkSession

    import spark_connector

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("minibroker-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", common.LOOPBACK)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)
    return spark


def fill_topic(bootstrap: str, topic: str, records: int) -> None:
    """``records`` values of 1 KiB, spread over the partitions, written by confluent-kafka."""
    import confluent_kafka

    common.create_topic(bootstrap, topic, PARTITIONS)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 262_144,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    value = b"v" * VALUE_SIZE
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records not delivered while filling {topic}")


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def read_run(spark, bootstrap: str, topic: str) -> None:
    (
        spark.read.format("minibroker")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .write.format("noop")
        .mode("overwrite")
        .save()
    )


def write_input(spark, records: int):
    return spark.range(0, records, 1, PARTITIONS).selectExpr(
        f"cast(repeat('x', {VALUE_SIZE}) as binary) as value"
    )


def write_run(spark, bootstrap: str, topic: str, records: int) -> None:
    (
        write_input(spark, records)
        .write.format("minibroker")
        .option("bootstrap.servers", bootstrap)
        .option("topic", topic)
        .mode("append")
        .save()
    )


def noop_input_run(spark, records: int) -> None:
    write_input(spark, records).write.format("noop").mode("overwrite").save()


def rate_run(spark, records: int, checkpoint: Path) -> None:
    query = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", records)
        .option("numPartitions", PARTITIONS)
        .load()
        .selectExpr("timestamp", "value", f"cast(repeat('x', {VALUE_SIZE}) as binary) as payload")
        .writeStream.format("noop")
        .trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    query.awaitTermination()
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    if rows != records:
        raise RuntimeError(f"rate-micro-batch produced {rows} rows, expected {records}")


def figure(label: str, runs: list[float], records: int) -> dict:
    elapsed = common.median(runs)
    return {
        "label": label,
        "records": records,
        "elapsed_s": elapsed,
        "records_per_s": records / elapsed,
        "mb_per_s": records * VALUE_SIZE / elapsed / common.MB,
        "runs_s": runs,
    }


@click.command()
@click.option("--records", type=int, default=None, help="Rows per run (default 200,000; --quick 20,000).")
@click.option("--repeat", type=int, default=None, help="Runs per figure (median reported; default 3).")
@click.option("--quick", is_flag=True, help="Small volume, one run: a smoke test.")
@click.option("--durable", is_flag=True, help="The broker fsyncs acks=all writes (default: page cache).")
def main(records: int | None, repeat: int | None, quick: bool, durable: bool) -> None:
    records = records or (20_000 if quick else 200_000)
    repeat = repeat or (1 if quick else 3)
    reason = common.minibroker_unavailable_reason()
    if reason:
        raise click.ClickException(f"minibroker does not start: {reason}")
    with common.work_directory("spark") as work, common.RunningBroker(
        common.minibroker_spec(flush_never=not durable), work
    ) as broker:
        bootstrap = broker.bootstrap
        log(f"broker on {bootstrap}; filling the read topic with {records} x {VALUE_SIZE} B")
        fill_topic(bootstrap, "bench-read", records)
        log("starting Spark (local[2])")
        spark = start_spark()
        try:
            checkpoints = Path(tempfile.mkdtemp(prefix="rate-", dir=work))
            # Warm-up at full size: the first runs in a fresh JVM are up to twice as slow.
            log("warm-up")
            read_run(spark, bootstrap, "bench-read")
            write_run(spark, bootstrap, "bench-warmup-out", records)
            rate_run(spark, records, checkpoints / "warmup")
            noop_input_run(spark, records)

            runs: dict[str, list[float]] = {"read": [], "write": [], "rate": [], "noop": []}
            for i in range(repeat):
                runs["rate"].append(timed(lambda i=i: rate_run(spark, records, checkpoints / f"r{i}")))
                runs["read"].append(timed(lambda: read_run(spark, bootstrap, "bench-read")))
                runs["noop"].append(timed(lambda: noop_input_run(spark, records)))
                runs["write"].append(timed(lambda i=i: write_run(spark, bootstrap, f"bench-write-{i}", records)))
                log(
                    f"run {i + 1}/{repeat}: "
                    + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in runs.items())
                )
            written = _count(spark, bootstrap, "bench-write-0")
            if written != records:
                raise RuntimeError(f"the write benchmark's topic holds {written} records, not {records}")
        finally:
            spark.stop()

    figures = [
        figure("minibroker batch read -> noop", runs["read"], records),
        figure("baseline: rate-micro-batch -> noop", runs["rate"], records),
        figure("minibroker batch write (range -> minibroker)", runs["write"], records),
        figure("baseline: range -> noop", runs["noop"], records),
    ]
    table = common.markdown_table(
        ["case", "records/s", "MB/s", "elapsed s (median)"],
        [
            [f["label"], f"{f['records_per_s']:,.0f}", f"{f['mb_per_s']:.1f}", f"{f['elapsed_s']:.2f}"]
            for f in figures
        ],
    )
    mode = "durable" if durable else "flush never"
    click.echo(
        f"Spark connector, local[2], {records:,} records of {VALUE_SIZE} B, {PARTITIONS} partitions, "
        f"broker {mode}, median of {repeat}\n"
    )
    click.echo(table)
    read_mb = figures[0]["mb_per_s"]
    verdict = "met" if read_mb >= READ_TARGET_MB_S else "NOT met"
    click.echo(f"\nTarget batch read >= {READ_TARGET_MB_S:.0f} MB/s: {verdict} ({read_mb:.1f} MB/s)")
    payload = {
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "pyspark": _pyspark_version(),
            "records": records,
            "value_size": VALUE_SIZE,
            "partitions": PARTITIONS,
            "repeat": repeat,
            "durable": durable,
        },
        "results": figures,
    }
    log(f"results written to {common.write_results_json('spark', payload)}")


def _count(spark, bootstrap: str, topic: str) -> int:
    return (
        spark.read.format("minibroker").option("bootstrap.servers", bootstrap).option("subscribe", topic).load().count()
    )


def _pyspark_version() -> str:
    import pyspark

    return pyspark.__version__


if __name__ == "__main__":
    main()
