"""An exactly-once streaming pipeline: minibroker -> Spark Structured Streaming -> minibroker.

    minibroker serve --data-dir ./data                            # terminal 1: 127.0.0.1:9092
    python examples/streaming_pipeline.py --demo 10000 --available-now   # terminal 2

The job reads the topic ``order-events`` (read_committed: aborted and still-open transactions are never
seen), keeps the orders of at least 100, adds a tax-inclusive amount, and writes them, keyed by
customer, to ``large-orders`` with the connector's exactly-once sink. Stop it at any moment
(Ctrl-C, kill -9 of the driver) and start it again with the same ``--checkpoint``: it continues
where it stopped, and ``large-orders`` never holds an order twice.

``--demo N`` first creates the topics and produces N orders in one transaction (and one aborted
transaction, whose order must never come out), unless ``order-events`` already holds committed
orders:
rerunning the same command after a crash does not produce the demo input twice (a crash in the
middle of producing it leaves nothing visible, and the rerun produces it whole). A source topic
holding records that are not JSON orders (the README tour's ``orders`` holds ``alice:10`` lines)
is refused with one line, instead of a job that writes nothing.
The checkpoint goes to ``./checkpoints/`` (ignored by git) unless ``--checkpoint`` says otherwise.
``--available-now`` processes what is there and exits; without it the query runs until
interrupted.

Spark binds to 127.0.0.1 unless ``SPARK_LOCAL_IP`` says otherwise: the example talks to a broker
on this machine and has no reason to listen on the network.
"""

from __future__ import annotations

import json
import os
import random
import sys

import click


@click.command()
@click.option("--bootstrap", default="127.0.0.1:9092", show_default=True, help="Broker host:port.")
@click.option("--source", default="order-events", show_default=True,
              help="Topic to read: JSON orders {id, customer, amount}.")
@click.option("--sink", default="large-orders", show_default=True, help="Topic to write.")
@click.option("--checkpoint", default="./checkpoints/large-orders", show_default=True, help="Spark checkpoint dir.")
@click.option("--demo", type=int, default=0, help="Produce this many demo orders first.")
@click.option("--available-now", is_flag=True, help="Process what is there, then stop.")
@click.option("--max-per-trigger", type=int, default=5000, show_default=True, help="Records per micro-batch.")
def main(bootstrap, source, sink, checkpoint, demo, available_now, max_per_trigger) -> None:
    if demo:
        produce_demo_orders(bootstrap, source, sink, demo)

    # Spark's Python workers must run this interpreter (it has pyarrow and the connector).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import spark_connector

    spark = (
        SparkSession.builder.appName("large-orders")
        .master("local[2]")
        .config("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # A wrong option is one line (the connector's message), not the worker's traceback.
        .config("spark.sql.execution.pyspark.udf.hideTraceback.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")

    def read_orders():
        return (
            spark.readStream.format("minibroker")
            .option("bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(max_per_trigger))
            .load()  # isolation.level defaults to read_committed
        )

    try:
        # PySpark registers format "minibroker" by itself when its workers find the
        # pyspark_minibroker module (an installed package, or this repository as the working
        # directory); registering it again would replace it and log that it did.
        orders = read_orders()
    except Exception as exc:  # Spark 4.x raises a Py4JJavaError (SparkClassNotFoundException)
        if "DATA_SOURCE_NOT_FOUND" not in str(exc):
            raise
        spark_connector.register(spark)
        orders = read_orders()
    schema = "id long, customer string, amount double"
    large = (
        orders.select(F.from_json(F.col("value").cast("string"), schema).alias("order"))
        .select("order.*")
        .where(F.col("amount") >= 100)
        .select(
            F.col("customer").alias("key"),
            F.to_json(
                F.struct("id", "customer", "amount", F.round(F.col("amount") * 1.2, 2).alias("with_tax"))
            ).alias("value"),
        )
    )
    writer = (
        large.writeStream.format("minibroker")
        .option("bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    click.echo(f"query {query.id} running: {source} -> {sink} (checkpoint {checkpoint})")
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    last = query.lastProgress
    if last is not None:
        click.echo(f"stopped after micro-batch {last['batchId']}")
    spark.stop()


def produce_demo_orders(bootstrap: str, source: str, sink: str, count: int) -> None:
    from client import Admin, Consumer, Producer

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(source, 2, exist_ok=True)
        admin.create_topic(sink, 2, exist_ok=True)
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed"}) as consumer:
        present = sum(consumer.end_offsets(consumer.partitions_for(source)).values())
    if present:
        if not holds_orders(bootstrap, source):
            raise click.ClickException(
                f"{source} holds {present} record(s) that are not JSON orders "
                '({"id": ..., "customer": ..., "amount": ...}): give another --source'
            )
        click.echo(f"{source} already holds orders (up to offset total {present}): not producing the demo again")
        return
    rng = random.Random(7)
    # One transaction: the demo input is there whole or not at all, whatever the moment of a crash
    # (a rerun's init_transactions aborts the half-written one).
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": f"demo-orders-{source}"}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(count):
            order = {"id": i, "customer": f"c{rng.randrange(50)}", "amount": round(rng.uniform(1, 200), 2)}
            producer.send(source, json.dumps(order).encode())
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(source, json.dumps({"id": -1, "customer": "ghost", "amount": 999}).encode())
        producer.abort_transaction()  # never visible to the job
    click.echo(f"produced {count} orders to {source} (and one aborted)")


def holds_orders(bootstrap: str, source: str) -> bool:
    """Whether the first committed records of ``source`` are JSON orders."""
    from client import Consumer

    conf = {"bootstrap.servers": bootstrap, "isolation.level": "read_committed"}
    with Consumer(conf) as consumer:
        tps = consumer.partitions_for(source)
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        records = consumer.poll(5.0)
    for record in records[:20]:
        try:
            order = json.loads(record.value)
        except (TypeError, ValueError):
            return False
        if not isinstance(order, dict) or not {"id", "customer", "amount"} <= set(order):
            return False
    return bool(records)


if __name__ == "__main__":
    main()
