"""The transactional write protocol without Spark: the task side (``write_task``) and the driver
side (``end_transactions``, ``fence``) against the broker, with crashes placed exactly where a
Spark run can only hit them by chance."""

from __future__ import annotations

import pytest

from client import Producer
from client.errors import KafkaClientError
from tests.spark.helpers import consume_all, create_topic, no_open_transactions

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from spark_connector.options import parse_write_options  # noqa: E402
from spark_connector.writer import end_transactions, fence, write_task  # noqa: E402


def batches(values: list[bytes], size: int = 7):
    for i in range(0, len(values), size):
        yield pa.RecordBatch.from_pydict({"value": values[i : i + size]})


def options(bootstrap: str, topic: str, name: str):
    return parse_write_options(
        {"bootstrap.servers": bootstrap, "topic": topic, "progresstopic": name + "-progress"}
    )


def values(label: str, n: int = 20) -> list[bytes]:
    return [b"%s-%d" % (label.encode(), i) for i in range(n)]


def test_task_transaction_stays_open_until_the_driver_commits(bootstrap, name):
    create_topic(bootstrap, name, 2)
    opts = options(bootstrap, name, name)
    message = write_task(opts, f"{name}-job-0", 0, batches(values("a")))
    assert message.records == 20 and message.handle is not None
    assert consume_all(bootstrap, name) == []  # written, not committed
    end_transactions(opts, [message], commit=True)
    end_transactions(opts, [message], commit=True)  # a repeated commit is harmless
    assert sorted(r.value for r in consume_all(bootstrap, name)) == sorted(values("a"))
    # An empty task opens nothing.
    empty = write_task(opts, f"{name}-job-1", 1, iter([pa.RecordBatch.from_pydict({"value": pa.array([], pa.binary())})]))
    assert empty.handle is None and empty.records == 0


def test_a_killed_attempt_is_fenced_by_the_next_one(bootstrap, name):
    create_topic(bootstrap, name, 1)
    opts = options(bootstrap, name, name)
    transactional_id = f"{name}-job-0"
    # The first attempt dies after sending: it never aborts (nor returns a handle).
    zombie = Producer(opts.producer_config(transactional_id))
    zombie.init_transactions()
    zombie.begin_transaction()
    for value in values("zombie"):
        zombie.send(name, value)
    zombie.flush()
    assert not no_open_transactions(bootstrap, name)

    message = write_task(opts, transactional_id, 0, batches(values("retry")))
    end_transactions(opts, [message], commit=True)
    assert sorted(r.value for r in consume_all(bootstrap, name)) == sorted(values("retry"))
    assert no_open_transactions(bootstrap, name)
    with pytest.raises(KafkaClientError):  # the zombie is fenced: it can no longer commit
        zombie.commit_transaction()
    zombie.close(0)


def test_abort_ends_reported_transactions_and_fences_unreported_ones(bootstrap, name):
    create_topic(bootstrap, name, 1)
    opts = options(bootstrap, name, name)
    reported = write_task(opts, f"{name}-job-0", 0, batches(values("reported")))
    killed = Producer(opts.producer_config(f"{name}-job-1"))
    killed.init_transactions()
    killed.begin_transaction()
    killed.send(name, b"killed")
    killed.flush()
    # Spark's abort: a message for the task that finished, None for the one that was killed.
    end_transactions(opts, [reported, None], commit=False)
    fence(opts, [f"{name}-job-1"])
    assert consume_all(bootstrap, name) == []
    assert no_open_transactions(bootstrap, name)
    killed.close(0)


def test_stream_batch_is_written_once_however_often_it_is_replayed(bootstrap, name):
    create_topic(bootstrap, name, 2)
    opts = options(bootstrap, name, name)
    create_topic(bootstrap, opts.progress_topic, 1)  # StreamWriter() creates it in a real query
    query = f"{name}-q"

    def run(partition: int, batch_id: int, label: str):
        transactional_id = f"{query}-{partition}"
        return write_task(
            opts, transactional_id, partition, batches(values(label)), (transactional_id, batch_id), query
        )

    # Batch 0 of two writer partitions; the driver crashes after committing partition 0 only.
    first = [run(0, 0, "b0p0"), run(1, 0, "b0p1")]
    end_transactions(opts, first[:1], commit=True)
    # Spark replays batch 0: partition 0 is committed (skipped); partition 1 fences its open
    # transaction and writes again.
    replay = [run(0, 0, "b0p0"), run(1, 0, "b0p1")]
    assert replay[0].skipped and replay[0].handle is None
    assert not replay[1].skipped and replay[1].handle is not None
    end_transactions(opts, replay, commit=True)
    # A commit that Spark calls again after a full commit: every partition skips.
    again = [run(0, 0, "b0p0"), run(1, 0, "b0p1")]
    assert all(m.skipped for m in again)
    end_transactions(opts, again, commit=True)
    # The next batch is written normally; an abort after a partial commit tolerates the committed one.
    nxt = [run(0, 1, "b1p0"), run(1, 1, "b1p1")]
    end_transactions(opts, nxt[:1], commit=True)
    end_transactions(opts, nxt, commit=False)
    retry = [run(0, 1, "b1p0"), run(1, 1, "b1p1")]
    assert [m.skipped for m in retry] == [True, False]
    end_transactions(opts, retry, commit=True)

    expected = values("b0p0") + values("b0p1") + values("b1p0") + values("b1p1")
    assert sorted(r.value for r in consume_all(bootstrap, name)) == sorted(expected)
    assert no_open_transactions(bootstrap, name)
