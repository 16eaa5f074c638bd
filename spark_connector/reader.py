"""Reading: batch (``DataSourceReader``) and micro-batch streaming (``DataSourceStreamReader``).

Both plan the same way: the partitions of the subscribed topics, an exact offset range per
partition fixed at planning time (the end is the last stable offset under read_committed, the high
watermark under read_uncommitted), split into Spark tasks by ``planning.split_ranges``. A task
reads its range with our consumer (``client.Consumer``), which under read_committed already drops
transaction markers and aborted records; the task stops once its position reaches the range end,
which may lie past the last record it returned (a marker or aborted data ends the range).

Facts of PySpark's API this relies on (docs/spark.md): the batch reader is pickled before
``partitions()`` runs, so every fact a task needs travels in its ``RangePartition``; a stream
reader's planning methods run on one long-lived instance (it keeps its clients) and ``read()``
on a pickled copy (which must not carry them).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from client import Admin, Consumer, ConsumerRecord
from client.errors import BrokerConnectionError, UnknownTopicOrPartitionError
from spark_connector.options import EARLIEST, LATEST, OptionError, ReadOptions
from spark_connector.planning import (
    OffsetRange,
    Offsets,
    TopicPartition,
    offsets_from_json,
    offsets_to_json,
    rate_limit,
    split_ranges,
)
from spark_connector.retry import DEFAULT_TIMEOUT_S, call_with_retries

log = logging.getLogger("spark_connector.reader")

ROWS_PER_ARROW_BATCH = 8192
# Short: when a range ends in transaction markers or aborted records, poll() returns nothing (it
# waits for records) although the position has already moved past them.
POLL_WAIT_S = 0.05
# With no progress for this long, a task checks whether its records were deleted under it.
DATA_LOSS_CHECK_S = 2.0


class DataLossError(RuntimeError):
    """Records the plan counted on are gone (retention, a deleted or recreated topic), and
    ``failOnDataLoss`` is true."""


class RangePartition(InputPartition):
    """One Spark task: the records ``[start, end)`` of a topic partition (see ``OffsetRange``)."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__(tuple(r))
        self.range = r


# -- planning against the broker ----------------------------------------------------------------


def _topic_partitions(
    opts: ReadOptions, admin: Admin, streaming: bool, first: bool = False
) -> list[TopicPartition]:
    """The partitions the options select, sorted. A batch read of a topic that does not exist is
    an error; a stream simply sees no partitions until the topic appears.

    ``first``: the reader has not reached the broker yet, so it gives up after connectTimeoutMs
    (a broker that is down, or a wrong address, fails the query in seconds); later calls ride
    through restarts for default.api.timeout.ms, as Kafka's clients do."""
    timeout_s = opts.connect_timeout_ms / 1000 if first else DEFAULT_TIMEOUT_S
    try:
        return call_with_retries(lambda: _select(opts, admin, streaming),
                                 "listing the partitions to read", timeout_s=timeout_s)
    except BrokerConnectionError as exc:
        if not first:
            raise
        raise BrokerConnectionError(
            f"{exc} (no broker at {opts.bootstrap_servers} answered within "
            f"connectTimeoutMs={opts.connect_timeout_ms})"
        ) from None


def _select(opts: ReadOptions, admin: Admin, streaming: bool) -> list[TopicPartition]:
    if opts.assign is not None:
        topics = sorted({t for t, _ in opts.assign})
        counts = _partition_counts(admin, topics, "assign")
        for topic, partition in opts.assign:
            if partition >= counts[topic]:
                raise OptionError(
                    f"option 'assign': topic {topic!r} has {counts[topic]} partitions, "
                    f"there is no partition {partition}"
                )
        return sorted(opts.assign)
    if opts.subscribe is not None and not streaming:
        counts = _partition_counts(admin, list(opts.subscribe), "subscribe")
    else:
        topics = [t for t in admin.list_topics() if opts.topic_matches(t)]
        counts = _partition_counts(admin, topics, "subscribe") if topics else {}
    return sorted((t, p) for t, n in counts.items() for p in range(n))


def _partition_counts(admin: Admin, topics: list[str], option: str) -> dict[str, int]:
    counts = {}
    for topic in topics:
        try:
            (description,) = admin.describe_topics([topic])
        except UnknownTopicOrPartitionError:
            raise OptionError(f"option {option!r}: topic {topic!r} does not exist") from None
        counts[topic] = len(description.partitions)
    return counts


def _lookup(opts: ReadOptions, consumer: Consumer, tps: Sequence[TopicPartition], earliest: bool) -> Offsets:
    """The first (``earliest``) or latest offsets of ``tps``; retried as Spark's offset lookups
    (``fetchOffset.numRetries``) and through broker restarts."""
    if not tps:
        return {}
    lookup = consumer.beginning_offsets if earliest else consumer.end_offsets
    found = call_with_retries(
        lambda: lookup(tps),
        "looking up offsets",
        attempts=opts.fetch_offset_num_retries,
        interval_s=opts.fetch_offset_retry_interval_ms / 1000,
    )
    return {(tp.topic, tp.partition): offset for tp, offset in found.items()}


def _for_times(opts: ReadOptions, consumer: Consumer, times: dict[TopicPartition, int]) -> dict[TopicPartition, int | None]:
    found = call_with_retries(
        lambda: consumer.offsets_for_times(times),
        "looking up offsets by timestamp",
        attempts=opts.fetch_offset_num_retries,
        interval_s=opts.fetch_offset_retry_interval_ms / 1000,
    )
    return {(tp.topic, tp.partition): offset for tp, offset in found.items()}


def _every_partition(
    spec: dict[TopicPartition, int], name: str, tps: Sequence[TopicPartition], what: str = "a value"
) -> dict[TopicPartition, int]:
    """``spec`` for exactly the partitions ``tps``; an option naming others, or not all of them,
    is refused (Spark's rule for its per-partition offset and timestamp options)."""
    missing = sorted(set(tps) - set(spec))
    extra = sorted(set(spec) - set(tps))
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            parts.append("not read by this source " + ", ".join(f"{t}-{p}" for t, p in extra))
        raise OptionError(f"option {name!r} must give {what} for every partition read ({'; '.join(parts)})")
    return {tp: spec[tp] for tp in tps}


def _starting_offsets(
    opts: ReadOptions, consumer: Consumer, tps: Sequence[TopicPartition], begin: Offsets, end: Offsets
) -> Offsets:
    """Where a read starts: startingTimestamp, else startingOffsetsByTimestamp, else
    startingOffsets (Spark's precedence). A partition with no record at or after its time fails
    the read (strategy ``error``) or starts at its latest offset (``latest``)."""
    if opts.starting_timestamp is not None:
        name, times = "startingTimestamp", dict.fromkeys(tps, opts.starting_timestamp)
    elif opts.starting_offsets_by_timestamp is not None:
        name = "startingOffsetsByTimestamp"
        times = _every_partition(opts.starting_offsets_by_timestamp, name, tps)
    else:
        return _resolve(opts.starting_offsets, "startingOffsets", tps, begin, end)
    found = _for_times(opts, consumer, times)
    result = {}
    for tp in tps:
        offset = found.get(tp)
        if offset is None or offset > end[tp]:
            if opts.starting_timestamp_strategy == "error":
                raise OptionError(
                    f"option {name!r}: {tp[0]}-{tp[1]} has no record at or after {times[tp]} "
                    f"(startingOffsetsByTimestampStrategy=error; 'latest' starts such partitions at their end)"
                )
            offset = end[tp]
        result[tp] = offset
    return result


def _ending_offsets(
    opts: ReadOptions, consumer: Consumer, tps: Sequence[TopicPartition], begin: Offsets, end: Offsets
) -> Offsets:
    """Where a batch read ends: endingTimestamp, else endingOffsetsByTimestamp, else
    endingOffsets; a partition with no record at or after its time ends at its latest offset."""
    if opts.ending_timestamp is not None:
        times = dict.fromkeys(tps, opts.ending_timestamp)
    elif opts.ending_offsets_by_timestamp is not None:
        times = _every_partition(opts.ending_offsets_by_timestamp, "endingOffsetsByTimestamp", tps)
    else:
        return _resolve(opts.ending_offsets, "endingOffsets", tps, begin, end)
    found = _for_times(opts, consumer, times)
    return {tp: end[tp] if found.get(tp) is None else min(found[tp], end[tp]) for tp in tps}


def _resolve(
    spec: Any, name: str, tps: Sequence[TopicPartition], begin: Offsets, end: Offsets
) -> Offsets:
    """startingOffsets / endingOffsets -> an offset for every partition in ``tps``."""
    if spec == "earliest":
        return {tp: begin[tp] for tp in tps}
    if spec == "latest":
        return {tp: end[tp] for tp in tps}
    resolved = {}
    for tp, offset in _every_partition(spec, name, tps, "an offset").items():
        resolved[tp] = begin[tp] if offset == EARLIEST else end[tp] if offset == LATEST else offset
    return resolved


def _clients(opts: ReadOptions) -> tuple[Admin, Consumer]:
    conf = opts.consumer_config()
    admin = Admin(opts.client_config("admin"))
    try:
        return admin, Consumer(conf)
    except BaseException:
        admin.close()
        raise


# -- reading one range ---------------------------------------------------------------------------


def read_range(opts: ReadOptions, r: OffsetRange, schema: StructType) -> Iterator[Any]:
    """The records of ``r`` as pyarrow RecordBatches shaped like ``schema``."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    tp = (r.topic, r.partition)
    poll_timeout = opts.poll_timeout_ms / 1000
    with Consumer(opts.consumer_config()) as consumer:
        consumer.assign([tp])
        start = r.start
        first = _lookup(opts, consumer, [tp], earliest=True)[tp]
        if start < first:
            start = _lost(opts, r, start, first, "the log now starts at")
        if start >= r.end:
            return
        consumer.seek(tp, start)
        position = start
        pending: list[ConsumerRecord] = []
        idle_since = checked_at = time.monotonic()
        while position < r.end:
            records = consumer.poll(POLL_WAIT_S)
            now = time.monotonic()
            if records:
                if records[-1].offset >= r.end:
                    records = [x for x in records if x.offset < r.end]
                    position = r.end
                else:
                    position = records[-1].offset + 1
                pending.extend(records)
                if len(pending) >= ROWS_PER_ARROW_BATCH:
                    yield _to_arrow(pending, r, arrow_schema, pa)
                    pending = []
                idle_since = checked_at = now
                continue
            # Nothing returned: markers or aborted records may still have moved the position.
            moved = consumer.position(tp)
            if moved > position:
                position = moved
                idle_since = checked_at = now
                continue
            if now - checked_at >= DATA_LOSS_CHECK_S:
                checked_at = now
                first = _lookup(opts, consumer, [tp], earliest=True)[tp]
                last = _lookup(opts, consumer, [tp], earliest=False)[tp]
                if first > position:
                    position = _lost(opts, r, position, first, "the log now starts at")
                    consumer.seek(tp, position)
                    continue
                if last < r.end:
                    _lost(opts, r, position, last, "the partition now ends at")
                    break
            if now - idle_since > poll_timeout:
                raise TimeoutError(
                    f"no records of {r.topic}-{r.partition} at offset {position} (range ends at "
                    f"{r.end}) for {poll_timeout:.0f} s (kafkaConsumer.pollTimeoutMs)"
                )
        if pending:
            yield _to_arrow(pending, r, arrow_schema, pa)


def _lost(opts: ReadOptions, r: OffsetRange, at: int, now: int, what: str) -> int:
    """Records from ``at`` are gone (``what`` ``now``): raise, or log and go on from ``now``."""
    if r.from_beginning and at == r.start:
        return now  # a partition new to the stream: it simply starts later than offset 0
    message = (
        f"records of {r.topic}-{r.partition} from offset {at} are lost: {what} {now} "
        f"(planned range [{r.start}, {r.end}))"
    )
    if opts.fail_on_data_loss:
        raise DataLossError(
            message + ". Set the option failOnDataLoss to false to skip lost records instead."
        )
    log.warning("%s; skipping them (failOnDataLoss=false)", message)
    return now


def _to_arrow(records: list[ConsumerRecord], r: OffsetRange, arrow_schema: Any, pa: Any) -> Any:
    n = len(records)
    _, _, offsets, timestamps, keys, values, headers, timestamp_types = zip(*records, strict=True)
    columns = []
    for f in arrow_schema:
        name, kind = f.name, f.type
        if name == "value":
            columns.append(pa.array(values, kind))
        elif name == "key":
            columns.append(pa.array(keys, kind))
        elif name == "topic":
            columns.append(pa.repeat(pa.scalar(r.topic, kind), n))
        elif name == "partition":
            columns.append(pa.repeat(pa.scalar(r.partition, kind), n))
        elif name == "offset":
            columns.append(pa.array(offsets, kind))
        elif name == "timestamp":
            columns.append(pa.array([t * 1000 for t in timestamps], kind))  # ms -> us
        elif name == "timestampType":
            columns.append(pa.array(timestamp_types, kind))
        else:  # headers: null for a record that has none, as Spark's Kafka source gives them
            columns.append(pa.array([h or None for h in headers], kind))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema)


def _read_partition(opts: ReadOptions, partition: InputPartition, schema: StructType) -> Iterator[Any]:
    # When partitions() plans no range at all, Spark still runs one task with a plain
    # InputPartition: it reads nothing.
    r = getattr(partition, "range", None)
    return iter(()) if r is None else read_range(opts, r, schema)


# -- batch ---------------------------------------------------------------------------------------


class BatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> list[RangePartition]:
        opts = self.opts
        admin, consumer = _clients(opts)
        try:
            tps = _topic_partitions(opts, admin, streaming=False, first=True)
            begin = _lookup(opts, consumer, tps, earliest=True)
            end = _lookup(opts, consumer, tps, earliest=False)
            starts = _starting_offsets(opts, consumer, tps, begin, end)
            ends = _ending_offsets(opts, consumer, tps, begin, end)
        finally:
            consumer.close()
            admin.close()
        ranges = []
        for tp in tps:
            start, stop = starts[tp], ends[tp]
            if stop > end[tp]:
                raise OptionError(
                    f"option 'endingOffsets': {tp[0]}-{tp[1]} ends at {end[tp]} "
                    f"({opts.isolation_level}), cannot read up to {stop}"
                )
            if start > stop:
                raise OptionError(
                    f"startingOffsets ({start}) is after endingOffsets ({stop}) for {tp[0]}-{tp[1]}"
                )
            ranges.append(OffsetRange(tp[0], tp[1], start, stop))
        pieces = split_ranges(ranges, opts.max_records_per_partition, opts.min_partitions)
        return [RangePartition(r) for r in pieces]

    def read(self, partition: RangePartition) -> Iterator[Any]:
        return _read_partition(self.opts, partition, self.schema)


# -- streaming -------------------------------------------------------------------------------------


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the subscribed partitions. Offsets are Spark's Kafka offset JSON,
    ``{"topic": {"0": 42}}`` (the next offset to read per partition).

    ``trigger(availableNow=True)`` reads what was there when the query started, in micro-batches
    of at most maxOffsetsPerTrigger records, then stops."""

    def __init__(
        self, opts: ReadOptions, schema: StructType, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.opts = opts
        self.schema = schema
        self._clock = clock  # seconds; drives maxTriggerDelay
        self._admin: Admin | None = None
        self._consumer: Consumer | None = None
        self._reached = False  # the broker answered this reader once (connectTimeoutMs)
        self._latest: Offsets | None = None
        self._available_now: Offsets | None = None
        self._last_batch_at: float | None = None

    def __getstate__(self) -> dict:
        # read() runs on a pickled copy; clients hold threads and sockets and stay here.
        state = dict(self.__dict__)
        state["_admin"] = state["_consumer"] = None
        return state

    def _partitions(self, admin: Admin) -> list[TopicPartition]:
        tps = _topic_partitions(self.opts, admin, streaming=True, first=not self._reached)
        self._reached = True
        return tps

    def _open(self) -> tuple[Admin, Consumer]:
        if self._consumer is None:
            self._admin, self._consumer = _clients(self.opts)
        return self._admin, self._consumer

    def initialOffset(self) -> dict:
        opts = self.opts
        admin, consumer = self._open()
        tps = self._partitions(admin)
        begin = _lookup(opts, consumer, tps, earliest=True)
        end = _lookup(opts, consumer, tps, earliest=False)
        return offsets_to_json(_starting_offsets(opts, consumer, tps, begin, end))

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        limit = self.opts.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict, limit: Any) -> dict:
        """The end of the next micro-batch: the latest offsets (LSO under read_committed), at
        most ``limit`` (``ReadMaxRows``) offsets past ``start``. With minOffsetsPerTrigger, fewer
        new offsets than that give no batch (``start`` again) until maxTriggerDelay has passed
        since the last batch."""
        opts = self.opts
        admin, consumer = self._open()
        begun = offsets_from_json(start)
        current = self._partitions(admin)
        gone = sorted(set(begun) - set(current))
        if gone:
            names = ", ".join(f"{t}-{p}" for t, p in gone)
            if self.opts.fail_on_data_loss:
                raise DataLossError(
                    f"partitions the stream was reading no longer exist: {names}. Set the option "
                    "failOnDataLoss to false to go on without them."
                )
            log.warning("partitions %s no longer exist; going on without them", names)
        latest = _lookup(opts, consumer, current, earliest=False)
        if self._available_now is not None:
            target = self._available_now
            # Partitions that appeared after the start are left for a later run.
            latest = {
                tp: min(o, target.get(tp, begun.get(tp, 0)))
                for tp, o in latest.items()
                if tp in target or tp in begun
            }
        self._latest = latest
        end = dict(latest)
        for tp, offset in begun.items():
            if tp in latest and latest[tp] < offset:
                # The partition is behind where we were: it was truncated or recreated.
                _lost(
                    self.opts, OffsetRange(tp[0], tp[1], offset, offset), offset, latest[tp],
                    "the partition now ends at",
                )
        max_rows = getattr(limit, "max_rows", None)  # ReadMaxRows; other limits read everything
        if max_rows is not None:
            moving = {tp: latest[tp] for tp in latest if latest[tp] >= begun.get(tp, 0)}
            end.update(rate_limit(begun, moving, int(max_rows)))
        if self._too_few(begun, end):
            return start
        self._last_batch_at = self._clock()
        return offsets_to_json(end)

    def _too_few(self, begun: Offsets, end: Offsets) -> bool:
        """minOffsetsPerTrigger / maxTriggerDelay, as Spark's Kafka source: hold the batch back
        while it would have fewer new offsets than the minimum and the last batch is recent
        (never under trigger(availableNow=True), which must finish)."""
        minimum = self.opts.min_offsets_per_trigger
        if minimum is None or self._available_now is not None:
            return False
        now = self._clock()
        if self._last_batch_at is None:
            self._last_batch_at = now  # the delay counts from the query's first trigger
        new = sum(max(offset - begun.get(tp, 0), 0) for tp, offset in end.items())
        if new >= minimum:
            return False
        waited_ms = (now - self._last_batch_at) * 1000
        if waited_ms >= self.opts.max_trigger_delay_ms and new > 0:
            return False
        return True

    def prepareForTriggerAvailableNow(self) -> None:
        admin, consumer = self._open()
        tps = self._partitions(admin)
        self._available_now = _lookup(self.opts, consumer, tps, earliest=False)

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else offsets_to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        begun = offsets_from_json(start)
        ranges = [
            OffsetRange(tp[0], tp[1], begun.get(tp, 0), stop, tp not in begun)
            for tp, stop in offsets_from_json(end).items()
        ]
        pieces = split_ranges(ranges, self.opts.max_records_per_partition, self.opts.min_partitions)
        return [RangePartition(r) for r in pieces]

    def read(self, partition: RangePartition) -> Iterator[Any]:
        return _read_partition(self.opts, partition, self.schema)

    def commit(self, end: dict) -> None:
        """Nothing to release: offsets live in Spark's checkpoint (so a repeated call is fine)."""

    def stop(self) -> None:
        consumer, admin = self._consumer, self._admin
        self._consumer = self._admin = None
        if consumer is not None:
            consumer.close()
        if admin is not None:
            admin.close()
