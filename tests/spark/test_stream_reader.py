"""The streaming reader's planning and reading, driven directly (no SparkSession): Spark calls
these methods on a long-lived instance (planning) and a pickled copy (reading), which is what the
tests do too."""

from __future__ import annotations

import pickle
import time

import pytest

from client import Admin
from tests.spark.helpers import create_topic, produce

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402

from spark_connector.options import parse_read_options  # noqa: E402
from spark_connector.reader import DataLossError, StreamReader  # noqa: E402
from spark_connector.source import read_schema  # noqa: E402


def stream_reader(bootstrap: str, **options: str) -> StreamReader:
    raw = {"bootstrap.servers": bootstrap, **{k.lower(): v for k, v in options.items()}}
    return StreamReader(parse_read_options(raw, streaming=True), read_schema(True))


def read_all(reader: StreamReader, start: dict, end: dict) -> list[bytes]:
    copy = pickle.loads(pickle.dumps(reader))  # what the executors get
    values = []
    for partition in reader.partitions(start, end):
        for batch in copy.read(partition):
            values.extend(batch.column("value").to_pylist())
    return values


def test_micro_batches_are_bounded_deterministic_and_complete(bootstrap, name):
    create_topic(bootstrap, name, 2)
    produce(bootstrap, name, [b"a%d" % i for i in range(60)], transactional_id=name + "-1")
    produce(bootstrap, name, [b"x%d" % i for i in range(10)], transactional_id=name + "-2", abort=True)
    reader = stream_reader(bootstrap, subscribePattern=name + ".*", startingOffsets="earliest", maxOffsetsPerTrigger="25")
    try:
        assert isinstance(reader.getDefaultReadLimit(), ReadMaxRows)
        start = reader.initialOffset()
        assert start == {name: {"0": 0, "1": 0}}
        seen: list[bytes] = []
        for _ in range(10):
            end = reader.latestOffset(start, ReadMaxRows(25))
            if end == start:
                break
            plan = [p.range for p in reader.partitions(start, end)]
            assert plan == [p.range for p in reader.partitions(start, end)]  # a replay reads the same
            batch = read_all(reader, start, end)
            assert len(batch) <= 25
            seen.extend(batch)
            reader.commit(end)
            reader.commit(end)  # Spark repeats the last commit after a restart
            start = end
        assert sorted(seen) == sorted(b"a%d" % i for i in range(60))  # aborted ones skipped

        # A new matching topic is picked up from its first offset; ReadAllAvailable ignores the limit.
        create_topic(bootstrap, name + "-new", 1)
        produce(bootstrap, name + "-new", [b"n%d" % i for i in range(40)])
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end[name + "-new"] == {"0": 40}
        assert sorted(read_all(reader, start, end)) == sorted(b"n%d" % i for i in range(40))
        assert reader.reportLatestOffset() is not None
    finally:
        reader.stop()


def test_trigger_available_now_stops_at_what_was_there(bootstrap, name):
    create_topic(bootstrap, name, 1)
    produce(bootstrap, name, [b"%d" % i for i in range(30)])
    reader = stream_reader(bootstrap, subscribe=name, startingOffsets="earliest")
    try:
        start = reader.initialOffset()
        reader.prepareForTriggerAvailableNow()
        produce(bootstrap, name, [b"late"])
        end = reader.latestOffset(start, ReadMaxRows(20))
        assert end == {name: {"0": 20}}
        end = reader.latestOffset(end, ReadMaxRows(20))
        assert end == {name: {"0": 30}}
        assert reader.latestOffset(end, ReadMaxRows(20)) == end
    finally:
        reader.stop()


def test_a_range_ending_in_a_transaction_marker_finishes(bootstrap, name):
    create_topic(bootstrap, name, 1)
    produce(bootstrap, name, [b"%d" % i for i in range(10)], transactional_id=name + "-t")
    reader = stream_reader(bootstrap, subscribe=name, startingOffsets="earliest")
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == {name: {"0": 11}}  # ten records and the commit marker
        began = time.monotonic()
        assert read_all(reader, start, end) == [b"%d" % i for i in range(10)]
        assert time.monotonic() - began < 5
    finally:
        reader.stop()


def test_a_deleted_topic_is_data_loss_unless_allowed(bootstrap, name):
    create_topic(bootstrap, name, 1)
    produce(bootstrap, name, [b"x"])
    strict = stream_reader(bootstrap, subscribe=name, startingOffsets="earliest")
    lenient = stream_reader(bootstrap, subscribe=name, startingOffsets="earliest", failOnDataLoss="false")
    try:
        start = strict.initialOffset()
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            admin.delete_topics([name])
        with pytest.raises(DataLossError, match="failOnDataLoss"):
            strict.latestOffset(start, ReadAllAvailable())
        assert lenient.latestOffset(start, ReadAllAvailable()) == {}
    finally:
        strict.stop()
        lenient.stop()


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(bootstrap, name):
    create_topic(bootstrap, name, 1)
    now = [1000.0]
    raw = {
        "bootstrap.servers": bootstrap, "subscribe": name, "startingoffsets": "earliest",
        "minoffsetspertrigger": "10", "maxtriggerdelay": "30s",
    }
    reader = StreamReader(parse_read_options(raw, streaming=True), read_schema(False), clock=lambda: now[0])
    try:
        start = reader.initialOffset()
        produce(bootstrap, name, [b"a%d" % i for i in range(4)])
        assert reader.latestOffset(start, ReadAllAvailable()) == start  # 4 < 10: no batch yet
        now[0] += 29
        assert reader.latestOffset(start, ReadAllAvailable()) == start  # still inside the delay
        now[0] += 2  # 31 s since the first trigger: the delay is over, 4 offsets make a batch
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == {name: {"0": 4}}
        produce(bootstrap, name, [b"b%d" % i for i in range(12)])
        assert reader.latestOffset(end, ReadAllAvailable()) == {name: {"0": 16}}  # 12 >= 10: at once
        assert reader.latestOffset({name: {"0": 16}}, ReadAllAvailable()) == {name: {"0": 16}}
    finally:
        reader.stop()


def test_starting_timestamp_of_a_stream(bootstrap, name):
    create_topic(bootstrap, name, 1)
    from client import Producer

    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(10):
            producer.send(name, b"%d" % i, partition=0, timestamp=1_700_000_000_000 + i)
        producer.flush()
    reader = stream_reader(bootstrap, subscribe=name, startingTimestamp=str(1_700_000_000_000 + 6))
    try:
        start = reader.initialOffset()
        assert start == {name: {"0": 6}}
        end = reader.latestOffset(start, ReadAllAvailable())
        assert read_all(reader, start, end) == [b"6", b"7", b"8", b"9"]
    finally:
        reader.stop()
