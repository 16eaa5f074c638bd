"""Writing: transactional batch writes and the exactly-once streaming sink.

Theory of operation (docs/spark.md has the observed API facts and the design):

Every writing task owns one transaction. It produces its rows inside it and does not commit: it
flushes, hands the transaction over (``Producer.transaction_handle()``: transactional_id,
producer_id, producer_epoch) and returns the handle in its commit message. The driver's
``commit(messages)`` ends every handed-over transaction with EndTxn(commit) (``Admin.
end_transaction``); ``abort(messages)`` ends them with EndTxn(abort). EndTxn names the transaction
by id and epoch, so any connection may send it: no broker extension is involved.

The transactional.id of a task is deterministic: ``<prefix>-<job>-<partition>`` for a batch job
(``job`` is made once per write in ``writer()``), ``<prefix>-<query id>-<partition>`` for a stream
(the same for every micro-batch and every restart). ``init_transactions()`` in a retried task
therefore fences the attempt before it and aborts its open transaction.

Exactly-once for streams. Spark may call a sink's commit for a micro-batch more than once (it
replays the last batch after a crash, even one whose commit already ran). So every streaming task
also commits, inside its own transaction, its progress: offset ``batch_id + 1`` of partition 0 of
the progress topic in the consumer group ``<prefix>-<query id>-<partition>``
(``send_offsets_to_transaction``). Data and progress become visible atomically. A task first
fences (``init_transactions``: an older attempt's transaction is aborted, or finished if its commit
had begun), then reads its progress: if it is already past this batch, the batch is committed for
this partition and the task writes nothing ("skipped"). A replay thus writes exactly the
partitions whose transactions never committed.

(The first design keyed progress by partition ``p`` of a progress topic in one group per query; one
group per (query, partition) and a single-partition progress topic does the same without requiring
the progress topic to have as many partitions as the widest micro-batch.)

Batch jobs have no replays to detect; a driver crash in the middle of ``commit`` can leave a batch
job partly visible.
"""

from __future__ import annotations

import itertools
import json
import logging
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from client import Admin, OffsetAndMetadata, Producer, TransactionHandle
from client.errors import BrokerConnectionError, InvalidTxnStateError, KafkaClientError
from spark_connector.options import OptionError, WriteOptions
from spark_connector.retry import call_with_retries

log = logging.getLogger("spark_connector.writer")

PROGRESS_PARTITION = 0
FENCE_THREADS = 16

_HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


@dataclass
class TxnCommitMessage(WriterCommitMessage):
    """What a writing task hands to the driver.

    ``handle`` is ``TransactionHandle.to_dict()`` of the task's open transaction, or None when the
    task wrote nothing (no rows, or ``skipped``: a replayed streaming batch already committed for
    this partition).
    """

    partition: int
    transactional_id: str | None
    handle: dict | None
    records: int
    skipped: bool = False
    query_id: str | None = None


# -- input schema ----------------------------------------------------------------------------------


def check_input_schema(schema: StructType, opts: WriteOptions) -> None:
    """The columns the sink reads, as Spark's Kafka sink has them: value (required, binary or
    string), key (binary or string), topic (string; required without the topic option),
    partition (int), headers (array<struct<key: string, value: binary>>). Others are ignored."""
    fields = {f.name: f.dataType for f in schema.fields}
    expected = {
        "value": (BinaryType(), StringType()),
        "key": (BinaryType(), StringType()),
        "topic": (StringType(),),
        "partition": (IntegerType(),),
        "headers": (_HEADERS_TYPE,),
    }
    if "value" not in fields:
        raise OptionError(f"the data to write needs a 'value' column (binary or string); it has {sorted(fields)}")
    if opts.topic is None and "topic" not in fields:
        raise OptionError("give the option 'topic' or a 'topic' column to say where rows go")
    for name, types in expected.items():
        if name in fields and not any(_same_type(fields[name], t) for t in types):
            wanted = " or ".join(t.simpleString() for t in types)
            raise OptionError(f"column {name!r} must be {wanted}, not {fields[name].simpleString()}")


def _same_type(actual: Any, wanted: Any) -> bool:
    # Nullability does not matter to us.
    return actual.simpleString() == wanted.simpleString()


# -- the task side ---------------------------------------------------------------------------------


def _non_empty(batches: Iterator[Any]) -> Iterator[Any] | None:
    """``batches`` from its first non-empty batch on, or None if there is none."""
    for batch in batches:
        if batch.num_rows:
            return itertools.chain([batch], batches)
    return None


def _column(batch: Any, name: str) -> list | None:
    """A pyarrow RecordBatch column as a Python list, None if the batch has no such column."""
    index = batch.schema.get_field_index(name)
    return None if index < 0 else batch.column(index).to_pylist()


def _send_all(producer: Producer, batches: Iterator[Any], topic_option: str | None) -> int:
    send = producer.send
    count = 0
    for batch in batches:
        rows = batch.num_rows
        if not rows:
            continue
        values = _column(batch, "value")
        keys = _column(batch, "key") or itertools.repeat(None, rows)
        partitions = _column(batch, "partition") or itertools.repeat(None, rows)
        headers = _column(batch, "headers")
        headers = (
            [None if h is None else [(x["key"], x["value"]) for x in h] for h in headers]
            if headers
            else itertools.repeat(None, rows)
        )
        if topic_option is not None:
            topics = itertools.repeat(topic_option, rows)
        else:
            topics = _column(batch, "topic")
            if None in topics:
                raise ValueError("a row has a null topic and the option 'topic' is not set")
        for topic, value, key, partition, header in zip(
            topics, values, keys, partitions, headers, strict=True
        ):
            send(topic, value, key, partition, header)
        count += rows
    return count


def write_task(
    opts: WriteOptions,
    transactional_id: str,
    partition: int,
    iterator: Iterator[Any],
    progress: tuple[str, int] | None = None,
    query_id: str | None = None,
) -> TxnCommitMessage:
    """Write one task's rows in a transaction left open for the driver (see the module docstring).

    ``progress`` = (group, batch_id) for a streaming task: skip the rows if the group's progress
    is past ``batch_id`` already, else commit ``batch_id + 1`` with the rows."""
    batches = _non_empty(iter(iterator))
    if batches is None:
        return TxnCommitMessage(partition, transactional_id, None, 0, query_id=query_id)
    producer = Producer(opts.producer_config(transactional_id))
    try:
        producer.init_transactions()  # fences every earlier attempt of this task
        if progress is not None:
            group, batch_id = progress
            done = _progress(opts, group)
            if done > batch_id:
                for _ in batches:  # leave Spark's input stream consumed
                    pass
                log.info("%s: batch %d already committed (progress %d); skipping", group, batch_id, done)
                return TxnCommitMessage(partition, transactional_id, None, 0, True, query_id)
        producer.begin_transaction()
        try:
            count = _send_all(producer, batches, opts.topic)
            if progress is not None:
                group, batch_id = progress
                meta = json.dumps({"batch_id": batch_id, "query_id": query_id, "partition": partition})
                producer.send_offsets_to_transaction(
                    {(opts.progress_topic, PROGRESS_PARTITION): OffsetAndMetadata(batch_id + 1, meta)},
                    group,
                )
            handle = producer.transaction_handle()
        except BaseException:
            try:
                producer.abort_transaction()
            except Exception as exc:  # fenced or broken: the broker aborts it (fencing, timeout)
                log.info("could not abort %s after a failure: %s", transactional_id, exc)
            raise
    finally:
        producer.close(0)
    return TxnCommitMessage(partition, transactional_id, handle.to_dict(), count, query_id=query_id)


def _progress(opts: WriteOptions, group: str) -> int:
    """The next batch id the group's progress says to write (0 if it has none)."""
    with Admin(opts.admin_config()) as admin:
        committed = call_with_retries(
            lambda: admin.list_group_offsets(group, [(opts.progress_topic, PROGRESS_PARTITION)]),
            f"reading the sink progress of {group}",
        )
    found = committed.get((opts.progress_topic, PROGRESS_PARTITION))
    return 0 if found is None else found.offset


# -- the driver side -------------------------------------------------------------------------------

# Progress topics known to exist, per (bootstrap servers, topic): Spark makes a new stream writer
# for every micro-batch, in a Python worker it reuses, so this keeps the check to once per worker.
_progress_topics: set[tuple[str, str]] = set()


def ensure_progress_topic(opts: WriteOptions) -> None:
    """Create the one-partition progress topic unless this process already saw it."""
    key = (opts.bootstrap_servers, opts.progress_topic)
    if key in _progress_topics:
        return
    with Admin(opts.admin_config()) as admin:
        call_with_retries(
            lambda: admin.create_topic(opts.progress_topic, 1, exist_ok=True),
            f"creating the progress topic {opts.progress_topic}",
        )
    _progress_topics.add(key)



def end_transactions(opts: WriteOptions, messages: list[Any], commit: bool) -> None:
    """EndTxn for every handed-over transaction in ``messages``. Aborting tolerates transactions
    that a failed ``commit`` already committed, and fenced ones (the broker aborted them)."""
    open_ones = [m for m in messages if isinstance(m, TxnCommitMessage) and m.handle is not None]
    if not open_ones:
        return
    with Admin(opts.admin_config()) as admin:
        for m in open_ones:
            handle = TransactionHandle.from_dict(m.handle)
            if commit:
                admin.end_transaction(handle, commit=True)
                continue
            try:
                admin.end_transaction(handle, commit=False)
            except InvalidTxnStateError:
                log.warning("%s was already committed; cannot abort it", handle.transactional_id)


def fence(opts: WriteOptions, transactional_ids: list[str]) -> None:
    """Abort whatever transactions these ids have open (killed tasks never reported theirs).

    The ids are fenced in parallel, each within the producer's max.block.ms. When no broker
    answers at all, fencing is skipped at once: a job failing because the cluster is unreachable
    then fails in about one max.block.ms, not one more per task; whatever transaction a killed
    task had opened ends at its transaction.timeout.ms."""
    if not transactional_ids:
        return
    try:
        with Admin(opts.admin_config()) as admin:
            admin.list_topics()
    except BrokerConnectionError as exc:
        log.warning(
            "no broker reachable to fence %s (their transactions end at their timeout): %s",
            ", ".join(transactional_ids), exc,
        )
        return

    def fence_one(transactional_id: str) -> None:
        try:
            with Producer(opts.producer_config(transactional_id)) as producer:
                producer.init_transactions()
        except KafkaClientError as exc:
            log.warning("could not fence %s (its transaction times out instead): %s", transactional_id, exc)

    with ThreadPoolExecutor(max_workers=min(len(transactional_ids), FENCE_THREADS)) as pool:
        list(pool.map(fence_one, transactional_ids))


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("minibroker")``: one transaction per task, committed by the driver."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_input_schema(schema, opts)
        self.opts = opts
        self.job_id = uuid.uuid4().hex  # made once; the pickled copies in the tasks share it

    def transactional_id(self, partition: int) -> str:
        return f"{self.opts.transactional_id_prefix}-{self.job_id}-{partition}"

    def write(self, iterator: Iterator[Any]) -> TxnCommitMessage:
        partition = TaskContext.get().partitionId()
        return write_task(self.opts, self.transactional_id(partition), partition, iterator)

    def commit(self, messages: list[Any]) -> None:
        end_transactions(self.opts, messages, commit=True)

    def abort(self, messages: list[Any]) -> None:
        end_transactions(self.opts, messages, commit=False)
        # Spark lists a message per task, None for the ones that failed or were killed.
        fence(self.opts, [self.transactional_id(i) for i, m in enumerate(messages) if m is None])


class StreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("minibroker")``: exactly-once micro-batches (module docstring)."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_input_schema(schema, opts)
        self.opts = opts
        ensure_progress_topic(opts)

    def write(self, iterator: Iterator[Any]) -> TxnCommitMessage:
        context = TaskContext.get()
        partition = context.partitionId()
        query_id = context.getLocalProperty("sql.streaming.queryId")
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        if not query_id or batch_id is None:
            raise RuntimeError("the streaming sink runs outside a streaming query (no query id or batch id)")
        name = f"{self.opts.transactional_id_prefix}-{query_id}-{partition}"
        return write_task(self.opts, name, partition, iterator, (name, int(batch_id)), query_id)

    def commit(self, messages: list[Any], batchId: int) -> None:
        end_transactions(self.opts, messages, commit=True)

    def abort(self, messages: list[Any], batchId: int) -> None:
        end_transactions(self.opts, messages, commit=False)
        query_ids = {m.query_id for m in messages if isinstance(m, TxnCommitMessage)}
        if len(query_ids) == 1:
            (query_id,) = query_ids
            prefix = self.opts.transactional_id_prefix
            fence(self.opts, [f"{prefix}-{query_id}-{i}" for i, m in enumerate(messages) if m is None])
