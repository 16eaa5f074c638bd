"""Runs in the PySpark 4.2.0 venv of tests/spark_kafka/env.py (never imported by the product's
tests): Spark's own Kafka connector, ``format("kafka")``, against a broker, and the same read side
by side with ``format("minibroker")``. Prints one JSON object on its last stdout line.

    python job.py check --bootstrap B --jars J1,J2 --source T --out-batch T2 --out-stream T3 --checkpoint DIR
    python job.py bench --bootstrap B --jars J1,J2 --source T --runs N
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def session(jars: str):
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("spark-kafka-connector-vs-minibroker")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def kafka_read(spark, bootstrap: str, topic: str, stream: bool = False):
    reader = spark.readStream if stream else spark.read
    return (
        reader.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
    )


def minibroker_read(spark, bootstrap: str, topic: str):
    return (
        spark.read.format("minibroker")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )


def check(args) -> dict:
    spark = session(args.jars)
    out: dict = {"spark": spark.version}
    # Batch read (read_committed): every committed value, none of the aborted ones.
    batch = kafka_read(spark, args.bootstrap, args.source)
    rows = batch.selectExpr("partition", "offset", "cast(value as string) v").collect()
    out["batch_read"] = sorted(r.v for r in rows)
    out["batch_read_partitions"] = sorted({r.partition for r in rows})
    # Batch write: the values read, upper-cased, to out_batch (Spark's own non-transactional sink).
    batch.selectExpr("key", "upper(cast(value as string)) as value").write.format("kafka").option(
        "kafka.bootstrap.servers", args.bootstrap).option("topic", args.out_batch).save()
    # Streaming read (read_committed) into streaming write, until everything available is done.
    query = (
        kafka_read(spark, args.bootstrap, args.source, stream=True)
        .selectExpr("key", "concat(cast(value as string), '!') as value")
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.out_stream)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    out["stream_rows"] = sum(p["numInputRows"] for p in query.recentProgress)
    # Streaming read collected in memory (what the stream saw, read_committed).
    memory = (
        kafka_read(spark, args.bootstrap, args.source, stream=True)
        .selectExpr("cast(value as string) v")
        .writeStream.format("memory").queryName("seen")
        .trigger(availableNow=True).start()
    )
    memory.awaitTermination(300)
    out["stream_read"] = sorted(r.v for r in spark.sql("select v from seen").collect())
    spark.stop()
    return out


def bench(args) -> dict:
    """The same read (every record's value length summed: the values must be fetched and decoded)
    through both connectors, alternating, ``runs`` timed runs each after one warm-up run each."""
    spark = session(args.jars)
    reads = {
        "kafka": lambda: kafka_read(spark, args.bootstrap, args.source),
        "minibroker": lambda: minibroker_read(spark, args.bootstrap, args.source),
    }
    results: dict[str, list[float]] = {name: [] for name in reads}
    counts: dict[str, int] = {}
    for run in range(args.runs + 1):
        for name, make in reads.items():
            began = time.perf_counter()
            (row,) = make().selectExpr("count(*) n", "sum(length(value)) bytes").collect()
            elapsed = time.perf_counter() - began
            counts[name] = row.n
            if run > 0:  # the first run of each warms the JVM and the Python workers
                results[name].append(elapsed)
    spark.stop()
    return {"spark": spark.version, "seconds": results, "records": counts}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["check", "bench"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--out-batch")
    parser.add_argument("--out-stream")
    parser.add_argument("--checkpoint")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    result = check(args) if args.mode == "check" else bench(args)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
