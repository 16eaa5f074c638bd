"""send() checks its arguments: a bad one raises a TypeError naming it, nothing is buffered and
the producer stays usable (issue 15); serializers; the clients under asyncio."""

from __future__ import annotations

import asyncio
import json
import time
import warnings

import pytest
import trio

from client import Consumer, Producer
from client.aio import AsyncAdmin, AsyncConsumer, AsyncProducer
from client.errors import IllegalStateError


def read_all(bootstrap: str, topic: str, expected: int) -> list:
    records: list = []
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([(topic, 0)])
        deadline = time.monotonic() + 30
        while len(records) < expected and time.monotonic() < deadline:
            records.extend(consumer.poll(0.2))
    return records


@pytest.mark.parametrize("transactional", [False, True])
def test_bad_values_raise_typeerror_and_the_producer_stays_usable(broker_proc, transactional):
    bootstrap = broker_proc.bootstrap
    topic = f"checks-{transactional}"
    config = {"bootstrap.servers": bootstrap, "linger.ms": 1}
    if transactional:
        config["transactional.id"] = "checks-tx"
    with Producer(config) as producer:
        if transactional:
            producer.init_transactions()
            producer.begin_transaction()
        producer.send(topic, b"first", partition=0).result(30)
        bad_calls = [
            (
                dict(value={"a": 1}),
                r"value must be bytes, str or None: value is dict \(\{'a': 1\}\)",
            ),
            (dict(value=b"v", key=42), r"key must be bytes.*int \(42\)"),
            (dict(value=b"v", headers=[("h", 3.5)]), r"header 'h' value.*float"),
            (dict(value=b"v", headers=[(b"h", b"x")]), r"header key must be a str.*bytes"),
            (dict(value=b"v", partition="0"), r"partition must be an int.*str"),
            (dict(value=b"v", timestamp=1.5), r"timestamp must be.*float"),
        ]
        for kwargs, message in bad_calls:
            with pytest.raises(TypeError, match=message):
                producer.send(topic, **kwargs)
        with pytest.raises(TypeError, match="topic must be a non-empty str"):
            producer.send(None, b"v")
        # Still usable: later sends (bytes, str, bytearray, a header dict) are delivered.
        producer.send(topic, "second", partition=0)
        producer.send(topic, bytearray(b"third"), headers={"h": "x"}, partition=0)
        producer.flush(30)
        if transactional:
            producer.commit_transaction()
    records = read_all(bootstrap, topic, 3)
    assert [r.value for r in records] == [b"first", b"second", b"third"]
    assert list(records[2].headers) == [("h", b"x")]


def test_serializers(broker_proc):
    bootstrap = broker_proc.bootstrap
    config = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 1,
        "key.serializer": lambda k: str(k).encode(),
        "value.serializer": lambda v: json.dumps(v).encode(),
    }
    with Producer(config) as producer:
        producer.send("ser", {"a": 1}, key=7, partition=0)
        producer.send("ser", None, key=8, partition=0)  # None stays a tombstone
        producer.flush(30)
    with Producer({**config, "value.serializer": lambda v: v}) as producer:
        with pytest.raises(TypeError, match=r"value.serializer returned dict"):
            producer.send("ser", {"a": 1}, partition=0)
        producer.send("ser", b"raw", partition=0).result(30)
    records = read_all(bootstrap, "ser", 3)
    assert [(r.key, r.value) for r in records] == [
        (b"7", b'{"a": 1}'),
        (b"8", None),
        (None, b"raw"),
    ]


@pytest.mark.parametrize("engine", [AsyncProducer, AsyncConsumer, AsyncAdmin])
def test_trio_engines_refuse_asyncio_with_a_clear_message(engine):
    async def main() -> None:
        async with engine({"bootstrap.servers": "127.0.0.1:1"}):
            pass

    with pytest.raises(IllegalStateError, match=r"runs on trio.*asyncio.*asyncio.to_thread"):
        asyncio.run(main())


def test_trio_engine_still_starts_under_trio(broker_proc):
    async def main() -> int:
        async with AsyncProducer({"bootstrap.servers": broker_proc.bootstrap}) as producer:
            future = await producer.send("under-trio", b"x", partition=0)
            return (await future.wait()).offset

    assert trio.run(main) == 0


def test_blocking_facade_inside_asyncio_warns_once(broker_proc):
    async def main() -> None:
        with Producer({"bootstrap.servers": broker_proc.bootstrap}) as producer:
            with pytest.warns(RuntimeWarning, match="stalls that loop.*asyncio.to_thread"):
                producer.send("facade", b"x", partition=0)  # new topic: a blocking metadata call
            producer.flush(30)
        # From a worker thread there is nothing to warn about.
        producer = Producer({"bootstrap.servers": broker_proc.bootstrap})
        await asyncio.to_thread(producer.send, "facade", b"y", partition=0)
        await asyncio.to_thread(producer.flush, 30)
        await asyncio.to_thread(producer.close)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any other warning fails the test
        asyncio.run(main())
