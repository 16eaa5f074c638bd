"""The Spark connector, unchanged, against the three-node Kafka 4.4 cluster (replication 3, min ISR
2): the batch, sink-protocol, stream-reader and exactly-once streaming tests of this suite run
there as they are (``bootstrap`` is the cluster's in this module), and the broker-restart tests run
with a Kafka node killed -9 in the middle of the run (restarted a few seconds later)."""

from __future__ import annotations

import threading
import time

import pytest

from client import Admin
from tests.spark import (
    test_batch,
    test_restarts,
    test_sink_protocol,
    test_stream_reader,
    test_streaming,
)

pytestmark = [pytest.mark.xdist_group("kafka_three"), pytest.mark.slow]


@pytest.fixture
def bootstrap(kafka_three):
    return kafka_three.bootstrap


# Batch reads and writes, failed and retried write tasks.
test_batch_read_returns_committed_records_only = test_batch.test_batch_read_returns_committed_records_only
test_batch_read_offset_ranges_assign_pattern_split_and_schema = (
    test_batch.test_batch_read_offset_ranges_assign_pattern_split_and_schema)
test_timestamps_select_the_range_and_missing_headers_are_null = (
    test_batch.test_timestamps_select_the_range_and_missing_headers_are_null)
test_batch_write_then_read_back = test_batch.test_batch_write_then_read_back
test_failed_write_job_leaves_nothing_visible = test_batch.test_failed_write_job_leaves_nothing_visible
test_retried_write_task_writes_its_rows_once = test_batch.test_retried_write_task_writes_its_rows_once
# The exactly-once sink's protocol (task-side transactions finished by the driver) on Kafka.
test_task_transaction_stays_open_until_the_driver_commits = (
    test_sink_protocol.test_task_transaction_stays_open_until_the_driver_commits)
test_a_killed_attempt_is_fenced_by_the_next_one = test_sink_protocol.test_a_killed_attempt_is_fenced_by_the_next_one
test_abort_ends_reported_transactions_and_fences_unreported_ones = (
    test_sink_protocol.test_abort_ends_reported_transactions_and_fences_unreported_ones)
test_stream_batch_is_written_once_however_often_it_is_replayed = (
    test_sink_protocol.test_stream_batch_is_written_once_however_often_it_is_replayed)
# The streaming source's planning, and the exactly-once pipeline through stops, a crash in the
# middle of the sink's commit and a replayed committed batch.
test_micro_batches_are_bounded_deterministic_and_complete = (
    test_stream_reader.test_micro_batches_are_bounded_deterministic_and_complete)
test_trigger_available_now_stops_at_what_was_there = test_stream_reader.test_trigger_available_now_stops_at_what_was_there
test_a_range_ending_in_a_transaction_marker_finishes = (
    test_stream_reader.test_a_range_ending_in_a_transaction_marker_finishes)
test_pipeline_is_exactly_once_across_restarts_and_replays = (
    test_streaming.test_pipeline_is_exactly_once_across_restarts_and_replays)


class KillOneNode:
    """``bounce()``: kill -9 the Kafka node leading ``topic``'s partition 0, restart it ``down_for``
    seconds later in a thread (the run goes on with two nodes meanwhile); ``join()`` at the end."""

    def __init__(self, cluster, topic: str, down_for: float = 5.0) -> None:
        self.cluster, self.topic, self.down_for = cluster, topic, down_for
        self.victim: int | None = None
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def bounce(self) -> None:
        with Admin({"bootstrap.servers": self.cluster.bootstrap}) as admin:
            (description,) = admin.describe_topics([self.topic])
        self.victim = next(p.leader for p in description.partitions if p.partition == 0)
        self.cluster.kill9(self.victim)
        self.thread = threading.Thread(target=self._restart)
        self.thread.start()

    def _restart(self) -> None:
        try:
            time.sleep(self.down_for)
            assert self.victim is not None
            self.cluster.start_node(self.victim)
        except BaseException as exc:  # reported by join()
            self.error = exc

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join(180)
        elif self.victim is not None and self.cluster.node(self.victim).proc is None:
            self.cluster.start_node(self.victim)
        if self.error is not None:
            raise self.error


def test_streaming_query_rides_through_a_kafka_node_killed(spark, kafka_three, name, tmp_path):
    killer = KillOneNode(kafka_three, name + "-out")
    try:
        test_restarts.check_streaming_query_rides_through(spark, kafka_three.bootstrap, name, tmp_path,
                                                          killer.bounce)
    finally:
        killer.join()
    assert killer.victim is not None


def test_batch_write_rides_through_a_kafka_node_killed(spark, kafka_three, name):
    killer = KillOneNode(kafka_three, name)
    try:
        test_restarts.check_batch_write_rides_through(spark, kafka_three.bootstrap, name, killer.bounce)
    finally:
        killer.join()
    assert killer.victim is not None
