"""The connector rides through a broker restart (about the 1.4 s of a real one): a streaming
query and a batch write both finish, with exactly the expected output.

Each test runs its own broker subprocess (the suite's shared one must not restart under the
other tests) and restarts it on the same port while Spark is reading and writing.
"""

from __future__ import annotations

import threading
import time

import pytest

import spark_connector
from tests.broker_process import BrokerProcess
from tests.spark.helpers import (
    consume_all,
    create_topic,
    end_offsets,
    no_open_transactions,
    produce,
)

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

pytestmark = pytest.mark.slow

PROPERTIES = "num.partitions=2\ngroup.initial.rebalance.delay.ms=0\n"


@pytest.fixture
def own_broker(tmp_path):
    with BrokerProcess.configured(tmp_path, PROPERTIES) as broker:
        yield broker


def restart(broker: BrokerProcess, down_for: float = 1.4) -> None:
    broker.stop()
    time.sleep(down_for)
    broker.restart()


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)


def test_streaming_query_rides_through_a_broker_restart(spark, own_broker, name, tmp_path):
    check_streaming_query_rides_through(spark, own_broker.bootstrap, name, tmp_path,
                                        lambda: restart(own_broker))


def check_streaming_query_rides_through(spark, bootstrap: str, name: str, tmp_path, bounce) -> None:
    """A streaming query (minibroker -> minibroker connector) keeps going through ``bounce()`` (a
    broker restart here, a Kafka node killed -9 in tests/spark/test_on_kafka.py), exactly once."""
    source, sink = name + "-in", name + "-out"
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, sink, 2)
    first = [b"a%d" % i for i in range(300)]
    produce(bootstrap, source, first, transactional_id=name + "-p1")
    stream = (
        spark.readStream.format("minibroker").option("bootstrap.servers", bootstrap)
        .option("subscribe", source).option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "60").load()
    )
    query = (
        stream.select("key", "value").writeStream.format("minibroker")
        .option("bootstrap.servers", bootstrap).option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds").start()
    )
    try:
        wait_for(lambda: sum(end_offsets(bootstrap, sink).values()) > 0, 120, "no micro-batch committed")
        bounce()
        second = [b"b%d" % i for i in range(300)]
        produce(bootstrap, source, second, transactional_id=name + "-p2")

        def done() -> bool:
            assert query.exception() is None, query.exception()
            assert query.isActive
            return len(consume_all(bootstrap, sink)) >= len(first) + len(second)

        wait_for(done, 180, "the query did not catch up after the restart")
        # Spark's Kafka source metrics, from the offsets Spark records for this source
        behind = spark_connector.offsets_behind_latest(query.lastProgress["sources"][0])
        assert behind is not None and 0 <= behind["minOffsetsBehindLatest"] <= behind["maxOffsetsBehindLatest"]
    finally:
        query.stop()
    assert sorted(r.value for r in consume_all(bootstrap, sink)) == sorted(first + second)
    assert no_open_transactions(bootstrap, sink)


def test_batch_write_rides_through_a_broker_restart(spark, own_broker, name):
    check_batch_write_rides_through(spark, own_broker.bootstrap, name, lambda: restart(own_broker))


def check_batch_write_rides_through(spark, bootstrap: str, name: str, bounce) -> None:
    """A batch write keeps going through ``bounce()`` while its tasks produce, exactly once."""
    from pyspark.sql.functions import col, udf

    from tests.spark.helpers import slow_identity

    create_topic(bootstrap, name, 2)
    expected = [b"v%d" % i for i in range(3000)]
    slow = udf(slow_identity, "binary", useArrow=False)
    rdd = spark.sparkContext.parallelize([(v,) for v in expected], 2)
    df = spark.createDataFrame(rdd, "value binary").select(slow(col("value")).alias("value"))
    restarted: list[float] = []
    problems: list[BaseException] = []
    finished = threading.Event()

    def restart_while_producing() -> None:
        # Spark's save() must run in the thread that registered the format, so the restart runs
        # here: once the tasks are producing (records past the high watermark, uncommitted).
        try:
            wait_for(
                lambda: finished.is_set() or sum(end_offsets(bootstrap, name, "read_uncommitted").values()) > 0,
                120,
                "the write tasks produced nothing",
            )
            if not finished.is_set():
                bounce()
                restarted.append(time.monotonic())
        except BaseException as exc:  # reported in the test's thread
            problems.append(exc)

    restarter = threading.Thread(target=restart_while_producing)
    restarter.start()
    try:
        (
            df.write.format("minibroker").option("bootstrap.servers", bootstrap)
            .option("topic", name).option("kafka.linger.ms", "5").mode("append").save()
        )
        saved = time.monotonic()
    finally:
        finished.set()
        restarter.join(120)
    assert not problems, problems
    assert restarted and restarted[0] < saved, "the write ended before the restart: the test proves nothing"
    assert sorted(r.value for r in consume_all(bootstrap, name)) == sorted(expected)
    assert no_open_transactions(bootstrap, name)
