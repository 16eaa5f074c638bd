"""Batch reads and writes through Spark (local[2]) against a broker subprocess."""

from __future__ import annotations

import datetime

import pytest

from client import Producer
from tests.spark.helpers import (
    consume_all,
    create_topic,
    end_offsets,
    no_open_transactions,
    produce,
)

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")


def reader(spark, bootstrap, **options):
    r = spark.read.format("minibroker").option("bootstrap.servers", bootstrap)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def test_batch_read_returns_committed_records_only(spark, bootstrap, name):
    create_topic(bootstrap, name, 2)
    committed = [b"c-%d" % i for i in range(40)]
    produce(bootstrap, name, committed[:20], transactional_id=f"{name}-a")
    produce(bootstrap, name, [b"aborted-%d" % i for i in range(10)], transactional_id=f"{name}-b", abort=True)
    produce(bootstrap, name, committed[20:])  # not transactional
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{name}-open"}) as open_txn:
        open_txn.init_transactions()
        open_txn.begin_transaction()
        for i in range(6):
            open_txn.send(name, b"open-%d" % i, partition=i % 2, headers=[("h", b"v")])
        open_txn.flush()
        produce(bootstrap, name, [b"after-open-%d" % i for i in range(4)])  # behind the open one

        df = reader(spark, bootstrap, subscribe=name, includeHeaders="true")
        assert df.columns == [
            "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"
        ]
        assert df.rdd.getNumPartitions() == 2  # one Spark partition per topic partition
        rows = df.collect()
        assert sorted(r.value for r in rows) == sorted(committed)
        assert all(r.key == r.value and r.topic == name and r.headers is None for r in rows)  # as Spark
        assert all(isinstance(r.timestamp, datetime.datetime) and r.timestampType == 0 for r in rows)
        for partition in (0, 1):
            offsets = [r.offset for r in rows if r.partition == partition]
            assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)

        dirty = reader(spark, bootstrap, subscribe=name, includeHeaders="true", **{"isolation.level": "read_uncommitted"})
        values = {r.value: r for r in dirty.collect()}
        assert {b"aborted-%d" % i for i in range(10)} | {b"open-%d" % i for i in range(6)} <= set(values)
        assert [(h.key, h.value) for h in values[b"open-0"].headers] == [("h", b"v")]
        open_txn.commit_transaction()

    # Committed now: the open transaction's records and the ones behind it become readable.
    later = reader(spark, bootstrap, subscribe=name).select("value").collect()
    expected = committed + [b"open-%d" % i for i in range(6)] + [b"after-open-%d" % i for i in range(4)]
    assert sorted(r.value for r in later) == sorted(expected)


def test_batch_read_offset_ranges_assign_pattern_split_and_schema(spark, bootstrap, name):
    create_topic(bootstrap, name, 2)
    create_topic(bootstrap, name + "x", 1)
    produce(bootstrap, name, [b"%d" % i for i in range(100)])  # 50 per partition
    produce(bootstrap, name + "x", [b"x%d" % i for i in range(10)])

    ranged = reader(
        spark, bootstrap, subscribe=name,
        startingOffsets=f'{{"{name}": {{"0": 10, "1": -2}}}}',
        endingOffsets=f'{{"{name}": {{"0": 20, "1": 5}}}}',
    )
    got = sorted((r.partition, r.offset) for r in ranged.collect())
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]

    assigned = reader(spark, bootstrap, assign=f'{{"{name}": [1]}}')
    assert {r.partition for r in assigned.collect()} == {1}

    pattern = reader(spark, bootstrap, subscribePattern=f"{name}x?")
    assert pattern.count() == 110

    split = reader(spark, bootstrap, subscribe=name, maxRecordsPerPartition="20")
    assert split.rdd.getNumPartitions() == 6  # 50 -> 17 + 17 + 16, twice
    assert sorted(int(r.value) for r in split.select("value").collect()) == list(range(100))
    assert reader(spark, bootstrap, subscribe=name, minPartitions="5").rdd.getNumPartitions() == 5

    projected = (
        spark.read.format("minibroker").schema("offset long, value binary")
        .option("bootstrap.servers", bootstrap).option("subscribe", name + "x").load()
    )
    assert projected.columns == ["offset", "value"]
    assert sorted(r.offset for r in projected.collect()) == list(range(10))


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"subscribe": "t", "maxRecordsPerPartition": "zero"}, "maxRecordsPerPartition"),
        ({"subscribe": "t", "assign": '{"t": [0]}'}, "assign"),
        ({"subscribe": "t", "startingTimestamp": "noon"}, "startingTimestamp"),
        ({"subscribe": "t", "startingOffsetz": "earliest"}, "startingOffsets"),
    ],
)
def test_bad_options_fail_at_load_naming_the_option(spark, bootstrap, options, named):
    # load() itself raises (the query is never run), for batch and streaming reads
    with pytest.raises(Exception, match=named.replace(".", r"\.")):
        reader(spark, bootstrap, **options)
    stream = spark.readStream.format("minibroker").option("bootstrap.servers", bootstrap)
    for key, value in options.items():
        stream = stream.option(key, value)
    with pytest.raises(Exception, match=named.replace(".", r"\.")):
        stream.load()


def test_bad_write_options_fail_at_save(spark, bootstrap, name):
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="transactionalIdPrefix"):
        (
            df.write.format("minibroker").option("bootstrap.servers", bootstrap)
            .option("topic", name).option("transactionalIdPrefix", "not ok").mode("append").save()
        )


def test_timestamps_select_the_range_and_missing_headers_are_null(spark, bootstrap, name):
    # Records of November 2023 are past Kafka's 7-day retention: its retention check (every 5 min)
    # deleted them in the middle of this test on the Kafka cluster (tests/spark/test_on_kafka.py).
    create_topic(bootstrap, name, 2, configs={"retention.ms": "-1"})
    base = 1_700_000_000_000
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(20):  # record i of partition p at base + 1000 * i
            for p in (0, 1):
                headers = [("h", b"%d" % i)] if i % 2 else None
                producer.send(name, b"%d-%d" % (p, i), partition=p, timestamp=base + 1000 * i, headers=headers)
        producer.flush()

    def values(**options):
        return sorted(r.value for r in reader(spark, bootstrap, subscribe=name, **options).collect())

    expected = sorted(b"%d-%d" % (p, i) for p in (0, 1) for i in range(5, 12))
    assert values(startingTimestamp=str(base + 5000), endingTimestamp=str(base + 12_000)) == expected
    by_ts = values(
        startingOffsetsByTimestamp=f'{{"{name}": {{"0": {base + 5000}, "1": {base + 15_500}}}}}',
        endingOffsetsByTimestamp=f'{{"{name}": {{"0": {base + 7000}, "1": {base + 99_000_000}}}}}',
    )
    assert by_ts == sorted([b"0-5", b"0-6"] + [b"1-%d" % i for i in range(16, 20)])
    # startingTimestamp wins over startingOffsets, as in Spark
    assert values(startingTimestamp=str(base + 18_000), startingOffsets="earliest") == [
        b"0-18", b"0-19", b"1-18", b"1-19"
    ]
    late = str(base + 99_000_000)  # after every record
    with pytest.raises(Exception, match="no record at or after"):
        values(startingTimestamp=late)
    assert values(startingTimestamp=late, startingOffsetsByTimestampStrategy="latest") == []

    rows = reader(spark, bootstrap, assign=f'{{"{name}": [0]}}', includeHeaders="true").collect()
    headers = {r.value: r.headers for r in rows}
    assert headers[b"0-0"] is None  # Spark's Kafka source gives null, not []
    assert [(h.key, bytes(h.value)) for h in headers[b"0-1"]] == [("h", b"1")]


def test_batch_read_of_a_missing_topic_or_partition_fails_fast(spark, bootstrap, name):
    with pytest.raises(Exception, match="does not exist"):
        reader(spark, bootstrap, subscribe=name + "-missing").collect()
    create_topic(bootstrap, name, 1)
    with pytest.raises(Exception, match="no partition 3"):
        reader(spark, bootstrap, assign=f'{{"{name}": [3]}}').collect()


def test_batch_write_then_read_back(spark, bootstrap, name):
    create_topic(bootstrap, name, 3)
    rows = [
        (f"k{i}".encode(), f"v{i}", name, i % 3, [(f"h{i}", b"x")]) for i in range(300)
    ]
    df = spark.createDataFrame(
        rows, "key binary, value string, topic string, partition int, headers array<struct<key:string,value:binary>>"
    ).repartition(4)
    df.write.format("minibroker").option("bootstrap.servers", bootstrap).mode("append").save()

    written = consume_all(bootstrap, name)
    assert sorted(r.value for r in written) == sorted(f"v{i}".encode() for i in range(300))
    for r in written:
        i = int(r.value[1:])
        assert r.key == f"k{i}".encode() and r.partition == i % 3 and r.headers == ((f"h{i}", b"x"),)
    assert no_open_transactions(bootstrap, name)

    # The topic option overrides a topic column; read back through the connector itself.
    other = name + "-o"
    create_topic(bootstrap, other, 2)
    df.select("value", "topic").write.format("minibroker").option("bootstrap.servers", bootstrap).option(
        "topic", other
    ).mode("append").save()
    back = reader(spark, bootstrap, subscribe=other).selectExpr("cast(value as string) v").collect()
    assert sorted(r.v for r in back) == sorted(f"v{i}" for i in range(300))


def test_write_with_bad_input_columns_fails_fast(spark, bootstrap, name):
    df = spark.createDataFrame([(1, "x")], "value int, topic string")
    with pytest.raises(Exception, match="'value' must be binary or string"):
        df.write.format("minibroker").option("bootstrap.servers", bootstrap).mode("append").save()
    df = spark.createDataFrame([(b"x",)], "value binary")
    with pytest.raises(Exception, match="option 'topic'"):
        df.write.format("minibroker").option("bootstrap.servers", bootstrap).mode("append").save()


def _fail_late_in_partition_1(value: bytes, bootstrap: str, topic: str) -> bytes:
    """A UDF: partition 1 fails on its last row, once partition 0's task has written its 100 rows
    (so that it has handed its open transaction to the driver)."""
    import time

    from pyspark import TaskContext

    from tests.spark.helpers import end_offsets

    if TaskContext.get().partitionId() == 1 and value == b"v199":
        deadline = time.monotonic() + 60
        while sum(end_offsets(bootstrap, topic, "read_uncommitted").values()) < 100:
            if time.monotonic() > deadline:
                raise TimeoutError("partition 0 did not write")
            time.sleep(0.1)
        time.sleep(1)
        raise RuntimeError("boom: task failed on purpose")
    return value


def test_failed_write_job_leaves_nothing_visible(spark, bootstrap, name):
    from pyspark.sql.functions import col, udf

    create_topic(bootstrap, name, 2)
    fail = udf(lambda v: _fail_late_in_partition_1(v, bootstrap, name), "binary", useArrow=False)
    # parallelize slices the list in order: v0..v99 in partition 0, v100..v199 in partition 1
    rdd = spark.sparkContext.parallelize([(b"v%d" % i,) for i in range(200)], 2)
    df = spark.createDataFrame(rdd, "value binary").select(fail(col("value")).alias("value"))
    with pytest.raises(Exception, match="boom: task failed on purpose"):
        df.write.format("minibroker").option("bootstrap.servers", bootstrap).option(
            "topic", name
        ).mode("append").save()
    # The finished task's records were written (the high watermark moved) but never committed:
    # the driver's abort() ended its transaction, so nothing is visible and nothing blocks the LSO.
    assert sum(end_offsets(bootstrap, name, "read_uncommitted").values()) > 0
    assert consume_all(bootstrap, name) == []
    assert no_open_transactions(bootstrap, name)


def _too_large_in_first_attempt(value: bytes) -> bytes:
    """A UDF: in the first attempt of partition 0, row 4500 becomes larger than the producer's
    max.request.size, so that attempt fails inside the writer after it sent rows before it (its
    producer's sender thread runs while the writer works through the 4,500 rows)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context.partitionId() == 0 and context.attemptNumber() == 0 and value == b"0-4500":
        return b"x" * 200_000
    return value


def test_retried_write_task_writes_its_rows_once(spark_with_retries, bootstrap, name):
    from pyspark.sql.functions import col, udf

    spark = spark_with_retries
    create_topic(bootstrap, name, 2)
    fail = udf(_too_large_in_first_attempt, "binary", useArrow=False)
    expected = [b"%d-%d" % (p, i) for p in (0, 1) for i in range(5000)]
    rdd = spark.sparkContext.parallelize([(v,) for v in expected], 2)
    df = spark.createDataFrame(rdd, "value binary").select(fail(col("value")).alias("value"))
    (
        df.write.format("minibroker")
        .option("bootstrap.servers", bootstrap)
        .option("topic", name)
        .option("kafka.linger.ms", "0")
        .option("kafka.batch.size", "16384")
        .option("kafka.max.request.size", "100000")
        .mode("append")
        .save()
    )
    assert sorted(r.value for r in consume_all(bootstrap, name)) == sorted(expected)
    # The failed attempt did send records (they sit aborted in the log) ...
    assert sum(end_offsets(bootstrap, name, "read_uncommitted").values()) > len(expected) + 2
    # ... and nothing is left open.
    assert no_open_transactions(bootstrap, name)


MAX_BLOCK_MS = 10_000


def test_write_to_an_unreachable_broker_fails_within_about_one_max_block(spark, name):
    import socket
    import time

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    df = spark.createDataFrame([(b"v%d" % i,) for i in range(10)], "value binary").repartition(2)
    began = time.monotonic()
    with pytest.raises(Exception, match="max.block.ms|InitProducerId|no broker reachable|timed out"):
        (
            df.write.format("minibroker").option("bootstrap.servers", f"127.0.0.1:{port}")
            .option("topic", name).option("kafka.max.block.ms", str(MAX_BLOCK_MS)).mode("append").save()
        )
    elapsed = time.monotonic() - began
    # The two tasks time out together (one max.block.ms); the driver's abort does not then spend
    # another max.block.ms per task fencing them one after another, which made 3 x 10 s plus
    # Spark's own few seconds. Measured here: 1 s of max.block.ms gave 12.6 s in all, 8 s gave
    # 18.9 s (load average 8): about one max.block.ms plus Spark's overhead.
    assert elapsed < 3 * MAX_BLOCK_MS / 1000, elapsed
