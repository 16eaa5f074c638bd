"""Option parsing and pure planning (no SparkSession): errors name the option; ranges split and
micro-batches are bounded deterministically."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_connector.options import (
    DEFAULT_MAX_RECORDS_PER_PARTITION,
    EARLIEST,
    LATEST,
    OptionError,
    check_options,
    parse_duration_ms,
    parse_read_options,
    parse_write_options,
)
from spark_connector.planning import (
    OffsetRange,
    offsets_behind_latest,
    offsets_from_json,
    offsets_to_json,
    rate_limit,
    split_ranges,
)
from spark_connector.retry import call_with_retries

BASE = {"bootstrap.servers": "127.0.0.1:9092"}


def read(streaming: bool = False, **options: str):
    return parse_read_options({**BASE, **{k.lower(): v for k, v in options.items()}}, streaming)


def test_read_defaults_mirror_spark_kafka_source():
    batch = read(subscribe="a, b,a")
    assert batch.subscribe == ("a", "b")
    assert batch.starting_offsets == "earliest" and batch.ending_offsets == "latest"
    assert batch.isolation_level == "read_committed"
    assert batch.fail_on_data_loss is True and batch.include_headers is False
    assert batch.max_records_per_partition == DEFAULT_MAX_RECORDS_PER_PARTITION
    assert read(streaming=True, subscribe="a").starting_offsets == "latest"
    conf = batch.consumer_config()
    assert conf["isolation.level"] == "read_committed" and conf["enable.auto.commit"] is False


def test_offsets_json_and_assign():
    opts = read(
        assign='{"a": [1, 0], "b": [2]}',
        startingOffsets='{"a": {"0": 5, "1": -2}, "b": {"2": 7}}',
        endingOffsets='{"a": {"0": 9, "1": -1}, "b": {"2": -1}}',
    )
    assert opts.assign == (("a", 0), ("a", 1), ("b", 2))
    assert opts.starting_offsets == {("a", 0): 5, ("a", 1): EARLIEST, ("b", 2): 7}
    assert opts.ending_offsets == {("a", 0): 9, ("a", 1): LATEST, ("b", 2): LATEST}


def test_client_settings_pass_through_by_role():
    opts = read(subscribe="a", **{"kafka.max.poll.records": "7", "kafka.client.id": "me"})
    assert opts.consumer_config()["max.poll.records"] == "7"
    assert opts.client_config("admin") == {"bootstrap.servers": BASE["bootstrap.servers"], "client.id": "me"}
    w = parse_write_options({**BASE, "topic": "t", "kafka.linger.ms": "20", "kafka.client.id": "me"})
    assert w.producer_config("x")["linger.ms"] == "20"
    assert "linger.ms" not in w.admin_config()
    # kafka.bootstrap.servers is Spark's spelling of the same option
    assert parse_read_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a"}, False).bootstrap_servers == "h:1"


@pytest.mark.parametrize(
    ("options", "streaming", "named"),
    [
        ({"subscribe": "a", "subscribepattern": "a.*"}, False, "subscribe"),
        ({}, False, "assign"),
        ({"subscribe": "a", "maxoffsetspertrigger": "0"}, True, "maxOffsetsPerTrigger"),
        ({"subscribe": "a", "maxoffsetspertrigger": "many"}, True, "maxOffsetsPerTrigger"),
        ({"subscribe": "a", "startingoffsets": "latest"}, False, "startingOffsets"),
        ({"subscribe": "a", "endingoffsets": "earliest"}, False, "endingOffsets"),
        ({"subscribe": "a", "endingoffsets": "latest"}, True, "endingOffsets"),
        ({"subscribe": "a", "startingoffsets": '{"a": {"0": "x"}}'}, False, "startingOffsets"),
        ({"subscribe": "a", "startingoffsets": "{nope"}, False, "startingOffsets"),
        ({"subscribe": "a", "endingoffsets": '{"a": {"0": -2}}'}, False, "endingOffsets"),
        ({"subscribe": "a", "failondataloss": "maybe"}, False, "failOnDataLoss"),
        ({"subscribe": "a", "isolation.level": "dirty"}, False, "isolation.level"),
        ({"subscribe": "a", "kafka.group.id": " "}, False, "kafka.group.id"),
        ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, False, "kafka.enable.auto.commit"),
        ({"subscribe": "a", "startingtimestamp": "yesterday"}, False, "startingTimestamp"),
        ({"subscribe": "a", "startingtimestamp": "-5"}, True, "startingTimestamp"),
        ({"subscribe": "a", "endingtimestamp": "5"}, True, "endingTimestamp"),
        ({"subscribe": "a", "endingoffsetsbytimestamp": '{"a": {"0": 5}}'}, True, "endingOffsetsByTimestamp"),
        ({"subscribe": "a", "startingoffsetsbytimestamp": '{"a": {"0": -1}}'}, False, "startingOffsetsByTimestamp"),
        ({"subscribe": "a", "startingoffsetsbytimestamp": '{"a": 5}'}, False, "startingOffsetsByTimestamp"),
        ({"subscribe": "a", "startingoffsetsbytimestampstrategy": "earliest"}, False, "startingOffsetsByTimestampStrategy"),
        ({"subscribe": "a", "minoffsetspertrigger": "5"}, False, "minOffsetsPerTrigger"),
        ({"subscribe": "a", "minoffsetspertrigger": "0"}, True, "minOffsetsPerTrigger"),
        ({"subscribe": "a", "maxtriggerdelay": "soon"}, True, "maxTriggerDelay"),
        ({"subscribe": "a", "fetchoffset.numretries": "-1"}, False, "fetchOffset.numRetries"),
        ({"subscribe": "a", "fetchoffset.retryintervalms": "x"}, False, "fetchOffset.retryIntervalMs"),
        ({"subscribe": "a", "groupidprefix": "has space"}, False, "groupIdPrefix"),
        ({"subscribe": "a", "kafka.linger.ms": "5"}, False, "kafka.linger.ms"),
        ({"subscribe": "a", "kafka.max.poll.recrds": "5"}, False, "kafka.max.poll.records"),
        ({"subscribe": "a", "kafka.max.poll.records": "-1"}, False, "max.poll.records"),
        ({"subscribe": "a", "maxoffsetpertrigger": "5"}, True, "maxOffsetsPerTrigger"),
        ({"subscribe": "a", "topic": "b"}, False, "topic"),
        ({"subscribepattern": "("}, False, "subscribePattern"),
        ({"assign": '{"a": [-1]}'}, False, "assign"),
        ({"subscribe": "bad/name"}, False, "subscribe"),
    ],
)
def test_bad_read_options_name_the_option(options, streaming, named):
    with pytest.raises(OptionError, match=named.replace(".", r"\.")):
        parse_read_options({**BASE, **options}, streaming)


def test_missing_bootstrap_servers():
    with pytest.raises(OptionError, match="bootstrap.servers"):
        parse_read_options({"subscribe": "a"}, False)
    with pytest.raises(OptionError, match="bootstrap.servers"):
        parse_write_options({"bootstrap.servers": "nohost", "topic": "a"})


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"topic": "a", "subscribe": "b"}, "subscribe"),
        ({"topic": "a", "transactionalidprefix": "has space"}, "transactionalIdPrefix"),
        ({"topic": "a", "kafka.transactional.id": "x"}, "kafka.transactional.id"),
        ({"topic": "a", "kafka.fetch.min.bytes": "1"}, "kafka.fetch.min.bytes"),
        ({"topic": "a", "kafka.acks": "1"}, "acks"),
        ({"topic": "a", "isolation.level": "read_committed"}, "isolation.level"),
        ({"topic": "a", "progresstopic": ""}, "progressTopic"),
        ({"topic": "a", "includeheaders": "sometimes"}, "includeHeaders"),
        ({"topic": "a", "kafka.group.id": "g"}, "kafka.group.id"),
    ],
)
def test_bad_write_options_name_the_option(options, named):
    with pytest.raises(OptionError, match=named.replace(".", r"\.")):
        parse_write_options({**BASE, **options})


def test_split_ranges_caps_size_and_meets_min_partitions():
    ranges = [OffsetRange("a", 0, 0, 10), OffsetRange("a", 1, 5, 5), OffsetRange("b", 0, 3, 4)]
    assert split_ranges(ranges, 4) == [
        OffsetRange("a", 0, 0, 4),
        OffsetRange("a", 0, 4, 7),
        OffsetRange("a", 0, 7, 10),
        OffsetRange("b", 0, 3, 4),
    ]
    pieces = split_ranges(ranges, 100, min_partitions=4)
    assert pieces == [
        OffsetRange("a", 0, 0, 3),
        OffsetRange("a", 0, 3, 5),
        OffsetRange("a", 0, 5, 10),
        OffsetRange("b", 0, 3, 4),
    ]
    # Deterministic: the same input gives the same plan (a replayed micro-batch reads the same).
    assert split_ranges(list(reversed(ranges)), 100, min_partitions=4) == pieces
    # A range that may start before the log start keeps its flag on the first piece only.
    flagged = split_ranges([OffsetRange("n", 0, 0, 4, True)], 2)
    assert [r.from_beginning for r in flagged] == [True, False]


def test_rate_limit_is_proportional_and_exact():
    start = {("a", 0): 0, ("a", 1): 100}
    latest = {("a", 0): 300, ("a", 1): 200, ("b", 0): 50}  # b-0 is new: starts at 0
    end = rate_limit(start, latest, 90)
    assert sum(end[tp] - start.get(tp, 0) for tp in end) == 90
    assert end == {("a", 0): 60, ("a", 1): 120, ("b", 0): 10}
    assert rate_limit(start, latest, 1000) == latest
    # A tiny limit still moves forward.
    assert sum(v - start.get(tp, 0) for tp, v in rate_limit(start, latest, 1).items()) == 1


def test_offsets_json_round_trip():
    offsets = {("b", 1): 5, ("a", 10): 7, ("a", 2): 0}
    data = offsets_to_json(offsets)
    assert data == {"a": {"2": 0, "10": 7}, "b": {"1": 5}}
    assert offsets_from_json(data) == offsets


def test_pyspark_finds_the_auto_registration_module():
    """PySpark registers the ``DefaultSource`` of every top-level ``pyspark_*`` module it finds on
    the workers' path; from the repository root that includes ``pyspark_minibroker``."""
    root = Path(__file__).resolve().parents[2]
    code = (
        "from pkgutil import iter_modules; import importlib;"
        "names = [m.name for m in iter_modules() if m.name.startswith('pyspark_')];"
        "print(names, importlib.import_module('pyspark_minibroker').DefaultSource.name())"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    pytest.importorskip("pyspark")
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "'pyspark_minibroker'" in out and out.strip().endswith("minibroker")


def test_spark_kafka_options_with_their_defaults_and_meaning():
    opts = read(streaming=True, subscribe="a")
    assert opts.min_offsets_per_trigger is None and opts.max_trigger_delay_ms == 15 * 60 * 1000
    assert (opts.fetch_offset_num_retries, opts.fetch_offset_retry_interval_ms) == (3, 10)
    assert opts.starting_timestamp_strategy == "error"
    # Reads carry a group id (kafka.group.id, else groupIdPrefix-<random>, shared by the tasks)
    # but never commit to it.
    assert opts.group_id.startswith("spark-kafka-source-")
    assert opts.consumer_config()["group.id"] == opts.group_id == opts.consumer_config()["group.id"]
    assert opts.consumer_config()["enable.auto.commit"] is False
    assert read(subscribe="a", groupIdPrefix="etl").group_id.startswith("etl-")
    assert read(subscribe="a", **{"kafka.group.id": "mine"}).consumer_config()["group.id"] == "mine"

    opts = read(
        streaming=True, subscribe="a", startingTimestamp="1700000000000", minOffsetsPerTrigger="50",
        maxTriggerDelay="30s", **{"fetchOffset.numRetries": "5", "fetchOffset.retryIntervalMs": "200"},
    )
    assert opts.starting_timestamp == 1_700_000_000_000 and opts.min_offsets_per_trigger == 50
    assert opts.max_trigger_delay_ms == 30_000
    assert (opts.fetch_offset_num_retries, opts.fetch_offset_retry_interval_ms) == (5, 200)
    batch = read(
        subscribe="a",
        startingOffsetsByTimestamp='{"a": {"0": 10, "1": 20}}',
        endingOffsetsByTimestamp='{"a": {"0": 30, "1": 40}}',
        startingOffsetsByTimestampStrategy="LATEST",
    )
    assert batch.starting_offsets_by_timestamp == {("a", 0): 10, ("a", 1): 20}
    assert batch.ending_offsets_by_timestamp == {("a", 0): 30, ("a", 1): 40}
    assert batch.starting_timestamp_strategy == "latest"
    # The sink accepts the source's includeHeaders (Spark's sink does; headers go out whenever
    # the data has a headers column).
    assert parse_write_options({**BASE, "topic": "t", "includeheaders": "true"}).topic == "t"


@pytest.mark.parametrize(
    ("text", "ms"), [("15m", 900_000), ("30s", 30_000), ("250ms", 250), ("2h", 7_200_000), ("1d", 86_400_000), ("42", 42)]
)
def test_durations_as_spark_writes_them(text, ms):
    assert parse_duration_ms(text, "maxTriggerDelay") == ms


def test_definition_time_check_accepts_any_use_and_names_the_option():
    check_options({**BASE, "subscribe": "a", "startingOffsets".lower(): "latest"})  # fine for a stream
    check_options({**BASE, "topic": "t"})  # a write
    with pytest.raises(OptionError, match="maxOffsetsPerTrigger"):
        check_options({**BASE, "subscribe": "a", "maxoffsetspertrigger": "-3"})
    with pytest.raises(OptionError, match="transactionalIdPrefix"):
        check_options({**BASE, "topic": "t", "transactionalidprefix": "a b"})


def test_retries_ride_through_retriable_errors_within_the_timeout():
    from client.errors import BrokerConnectionError, InvalidTxnStateError

    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    def clock() -> float:
        return now[0]

    failures = iter([BrokerConnectionError("down")] * 4)

    def flaky() -> str:
        for exc in failures:
            raise exc
        return "up"

    assert call_with_retries(flaky, "probe", timeout_s=10, clock=clock, sleep=sleep) == "up"
    assert slept == [0.1, 0.2, 0.4, 0.8]  # doubling backoff

    def down() -> None:
        raise BrokerConnectionError("down")

    now[0], slept[:] = 0.0, []
    with pytest.raises(BrokerConnectionError):
        call_with_retries(down, "probe", timeout_s=3, clock=clock, sleep=sleep)
    assert 2.0 <= now[0] <= 3.0  # gave up at the timeout, not before, not after

    calls = []

    def unknown() -> None:
        calls.append(1)
        raise InvalidTxnStateError("not retriable")

    with pytest.raises(InvalidTxnStateError):
        call_with_retries(unknown, "probe", clock=clock, sleep=sleep)
    assert len(calls) == 1  # not retriable: raised at once
    calls.clear()
    with pytest.raises(InvalidTxnStateError):
        call_with_retries(unknown, "probe", attempts=3, interval_s=0.01, clock=clock, sleep=sleep)
    assert len(calls) == 4  # fetchOffset.numRetries: 3 more attempts


def test_offsets_behind_latest_from_a_query_progress():
    progress = {
        "endOffset": '{"t": {"0": 10, "1": 7}}',
        "latestOffset": {"t": {"0": 15, "1": 7, "2": 4}},  # partition 2 is new: 4 behind
    }
    assert offsets_behind_latest(progress) == {
        "minOffsetsBehindLatest": 0.0, "maxOffsetsBehindLatest": 5.0, "avgOffsetsBehindLatest": 3.0
    }
    assert offsets_behind_latest({"endOffset": '{"t": {"0": 1}}', "latestOffset": None}) is None


# -- issue 27 item 8: short errors, did-you-mean, failing fast -------------------------------------


@pytest.mark.parametrize("value, hint", [("earlest", "earliest"), ("latst", "latest"),
                                         ("EARLIEST ", None)])
def test_a_misspelt_starting_offsets_gets_a_did_you_mean(value, hint):
    if hint is None:
        assert read(True, subscribe="t", startingOffsets=value).starting_offsets == "earliest"
        return
    with pytest.raises(OptionError, match=f"did you mean '{hint}'") as raised:
        read(True, subscribe="t", startingOffsets=value)
    assert "JSON" in str(raised.value)  # it says what else is allowed


def test_option_errors_leave_the_parsing_frames_out():
    """Spark prints the worker's traceback inside its message: the data source re-raises option
    errors from its own frame, so only that frame and the message are left."""
    import traceback

    from spark_connector.source import MinibrokerDataSource

    try:
        MinibrokerDataSource({**BASE, "subscribe": "t", "startingoffsets": "earlest"})
    except OptionError as exc:
        frames = traceback.extract_tb(exc.__traceback__)
    assert [f.name for f in frames] == ["test_option_errors_leave_the_parsing_frames_out",
                                        "__init__"]


def test_a_broker_that_is_down_fails_the_first_planning_fast():
    import socket
    import time

    from client import Admin
    from client.errors import BrokerConnectionError
    from spark_connector.reader import _topic_partitions

    with socket.socket() as s:  # a free port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    opts = parse_read_options({"bootstrap.servers": f"127.0.0.1:{port}", "subscribe": "t",
                               "connecttimeoutms": "300"}, False)
    assert opts.connect_timeout_ms == 300
    assert read(subscribe="t").connect_timeout_ms == 10_000  # the default
    with Admin({"bootstrap.servers": f"127.0.0.1:{port}"}) as admin:
        started = time.monotonic()
        with pytest.raises(BrokerConnectionError, match="connectTimeoutMs=300"):
            _topic_partitions(opts, admin, streaming=False, first=True)
    assert time.monotonic() - started < 5
