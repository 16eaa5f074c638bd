"""Zero-copy Fetch (broker/log/file_slice.py): the answers a plaintext connection gets, with
the records sent by sendfile from the segment files, are byte for byte the answers of the copying
path (the same request handled outside a connection, records read into memory), over many fetch
shapes: versions, isolation levels, request and partition limits, offsets inside batches, aborted
and open transactions, a compacted topic; and a send still waiting for the peer survives the
deletion of the segment it reads.

The broker runs in-process (its ``Broker`` object is at hand for the copying path) on a loopback
port; the records are written by our trio producer over the socket, the fetches are raw frames.
"""

from __future__ import annotations

import functools
import random
import socket
import struct
import time

import trio

from broker.app import build_broker, build_dispatcher
from broker.config import build_config
from broker.log.cleaner import clean_now
from broker.log.file_slice import MIN_SLICE_BYTES, FileSlice
from broker.network import server
from broker.network.dispatcher import encode_reply
from client.aio import AsyncProducer
from protocol.api_keys import ApiKey
from protocol.headers import RequestHeader, encode_request_header, parse_response_header_untrusted
from protocol.messages import decode_response, encode_request
from protocol.records import decode_batches_untrusted

VERSIONS = (4, 5, 7, 11, 12)


def fetch_frame(version: int, correlation_id: int, isolation: int, max_bytes: int,
                partitions: list[tuple[str, int, int, int]]) -> bytes:
    """A Fetch request frame (size prefix included); ``partitions``: (topic, index, offset,
    partition_max_bytes), grouped by topic in order."""
    topics: list[dict] = []
    for topic, index, offset, limit in partitions:
        if not topics or topics[-1]["topic"] != topic:
            topics.append({"topic": topic, "partitions": []})
        topics[-1]["partitions"].append({
            "partition": index, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": limit,
        })
    body = encode_request(ApiKey.FETCH, version, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
        "isolation_level": isolation, "session_id": 0, "session_epoch": -1, "topics": topics,
        "forgotten_topics_data": [], "rack_id": "",
    })
    header = encode_request_header(RequestHeader(ApiKey.FETCH, version, correlation_id, "zc"))
    return struct.pack(">i", len(header) + len(body)) + header + body


def copied_answer(broker, frame: bytes) -> bytes:
    """The answer of the copying path: the request handled here, outside any connection (no
    FileSlice is made), its chunks joined."""
    header, result = build_dispatcher(broker).dispatch(bytearray(frame[4:]))
    chunks = encode_reply(header, result)
    assert chunks is not None and not any(isinstance(c, FileSlice) for c in chunks)
    return b"".join(chunks)


async def receive_answer(stream: trio.SocketStream) -> bytes:
    data = bytearray()
    while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
        chunk = await stream.receive_some(1 << 20)
        assert chunk, "broker closed the connection"
        data += chunk
    assert len(data) == 4 + struct.unpack_from(">i", data)[0]
    return bytes(data)


def decode_answer(answer: bytes, version: int):
    frame = bytearray(answer[4:])
    _, offset = parse_response_header_untrusted(frame, ApiKey.FETCH, version)
    return decode_response(ApiKey.FETCH, version, frame, offset)


async def start_broker(nursery: trio.Nursery, tmp_path, **settings):
    config = build_config(settings, port=0, data_dir=tmp_path / "data")
    broker = build_broker(config)
    port = await nursery.start(functools.partial(server.serve, config, broker=broker,
                                                 dispatcher=build_dispatcher(broker)))
    return broker, port


async def write_shapes(bootstrap: str, rng: random.Random) -> None:
    """Records of many sizes in ``plain`` (2 partitions, batches from a few bytes to 64 KiB),
    committed, aborted and one still open transaction between plain batches in ``txn``, keyed
    records with repeats in ``compacted``."""
    common = {"bootstrap.servers": bootstrap, "linger.ms": 2}
    async with AsyncProducer({**common, "batch.size": 65536}) as plain:
        for _ in range(12):
            for _ in range(rng.randrange(1, 40)):
                size = rng.choice((10, 200, 1500, 6000))
                await plain.send("plain", rng.randbytes(size), partition=rng.randrange(2))
            await plain.flush()
        async with AsyncProducer({**common, "transactional.id": "zc-txn",
                                  "batch.size": 65536}) as txn:
            await txn.init_transactions()
            for round_ in range(8):
                txn.begin_transaction()
                for _ in range(rng.randrange(1, 12)):
                    await txn.send("txn", rng.randbytes(rng.choice((100, 3000))), partition=0)
                await txn.flush()
                for _ in range(rng.randrange(1, 6)):
                    await plain.send("txn", rng.randbytes(rng.choice((100, 9000))), partition=0)
                await plain.flush()
                if round_ % 3 == 1:
                    await txn.abort_transaction()
                else:
                    await txn.commit_transaction()
            txn.begin_transaction()  # left open: the LSO stays below the high watermark
            await txn.send("txn", rng.randbytes(20_000), partition=0)
            await txn.flush()
            await plain.send("txn", rng.randbytes(30_000), partition=0)
            for i in range(300):
                key = b"k%d" % rng.randrange(40)
                await plain.send("compacted", rng.randbytes(rng.choice((50, 800))), key=key,
                                 partition=0)
                if i % 50 == 49:
                    await plain.flush()
            await plain.flush()


async def test_sendfile_answers_equal_the_copied_answers(tmp_path):
    rng = random.Random(37)
    async with trio.open_nursery() as nursery:
        broker, port = await start_broker(nursery, tmp_path)
        broker.logs.create_topic("plain", 2)
        broker.logs.create_topic("txn", 1)
        broker.logs.create_topic("compacted", 1, {"cleanup.policy": "compact",
                                                  "segment.bytes": "40000"})
        await write_shapes(f"127.0.0.1:{port}", rng)
        compacted = broker.partition("compacted", 0)
        assert clean_now(compacted, broker.clock.now_ms()) is not None
        txn = broker.partition("txn", 0)
        assert txn.last_stable_offset < txn.high_watermark  # the open transaction

        ends = {(t, i): broker.partition(t, i).high_watermark
                for t, i in (("plain", 0), ("plain", 1), ("txn", 0), ("compacted", 0))}
        starts = {key: broker.partition(*key).log_start_offset for key in ends}
        made_before = FileSlice.made
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        correlation = 0
        sliced = aborted_seen = 0
        for version in VERSIONS:
            for isolation in (0, 1):
                for max_bytes in (1, 70_000, 1 << 26):
                    for partition_max in (1, 40_000, 1 << 20):
                        # Offsets: the start, somewhere inside (not on a batch boundary), the end.
                        picks = []
                        for key, end in ends.items():
                            offset = rng.choice((starts[key], rng.randrange(starts[key], end),
                                                 end))
                            picks.append((*key, offset, partition_max))
                        rng.shuffle(picks)
                        picks.sort(key=lambda p: p[0])  # a topic's partitions together
                        correlation += 1
                        frame = fetch_frame(version, correlation, isolation, max_bytes, picks)
                        expected = copied_answer(broker, frame)
                        await stream.send_all(frame)
                        got = await receive_answer(stream)
                        assert got == expected, (version, isolation, max_bytes, picks)
                        answer = decode_answer(got, version)
                        for topic in answer.responses:
                            for part in topic.partitions:
                                if len(part.records) >= MIN_SLICE_BYTES:
                                    sliced += 1
                                if part.aborted_transactions:
                                    aborted_seen += 1
        await stream.aclose()
        # The answers did go through sendfile, and every duplicated descriptor was closed.
        assert sliced and FileSlice.made - made_before >= sliced
        assert aborted_seen
        assert FileSlice.pinned == 0
        nursery.cancel_scope.cancel()
    broker.close()


async def test_a_pending_send_survives_the_deletion_of_its_segment(tmp_path):
    """A client that does not read: the answer waits in the broker while the topic is deleted
    (its segment files closed and unlinked); what arrives afterwards is still the answer."""
    async with trio.open_nursery() as nursery:
        broker, port = await start_broker(nursery, tmp_path)
        broker.logs.create_topic("big", 1)
        async with AsyncProducer({"bootstrap.servers": f"127.0.0.1:{port}",
                                  "batch.size": 1 << 20, "linger.ms": 5}) as producer:
            for _ in range(80):
                await producer.send("big", random.randbytes(100_000), partition=0)
            await producer.flush()
        frame = fetch_frame(12, 1, 0, 1 << 26, [("big", 0, 0, 1 << 26)])
        expected = copied_answer(broker, frame)
        assert len(expected) > 7_000_000  # more than the socket buffers hold
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.setblocking(False)
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(raw))
        await stream.socket.connect(("127.0.0.1", port))
        await stream.send_all(frame)
        with trio.fail_after(10):
            while not FileSlice.pinned:  # the answer is being sent and must wait for us
                await trio.sleep(0.01)
        await trio.sleep(0.2)
        broker.logs.delete_topic("big")
        assert not (tmp_path / "data" / "big-0").exists()
        with trio.fail_after(30):
            got = await receive_answer(stream)
        assert got == expected
        await stream.aclose()
        await trio.sleep(0.05)
        assert FileSlice.pinned == 0
        batches = list(decode_batches_untrusted(decode_answer(got, 12).responses[0].partitions[0].records))
        assert sum(len(records) for _, records in batches) == 80
        nursery.cancel_scope.cancel()
    broker.close()


def _real_clients_data(bootstrap: str) -> tuple[list[bytes], list[bytes]]:
    """Transactions of ~60 KiB batches (sent with sendfile), every third aborted, between plain
    idempotent batches; ``(committed values in order, every value in order)``."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("zc", num_partitions=1, replication_factor=1)])["zc"].result(15)
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                      "linger.ms": 5, "batch.size": 1 << 20})
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "zc-real",
                    "linger.ms": 5, "batch.size": 1 << 20})
    txn.init_transactions(30)
    committed: list[bytes] = []
    every: list[bytes] = []
    rng = random.Random(7)
    for round_ in range(9):
        txn.begin_transaction()
        values = [b"t%d-%d-" % (round_, i) + rng.randbytes(900) for i in range(60)]
        for value in values:
            txn.produce("zc", value, partition=0)
        txn.flush(30)
        between = [b"p%d-%d-" % (round_, i) + rng.randbytes(2000) for i in range(20)]
        for value in between:
            plain.produce("zc", value, partition=0)
        assert plain.flush(30) == 0
        if round_ % 3 == 2:
            txn.abort_transaction(30)
        else:
            txn.commit_transaction(30)
            committed += values
        committed += between
        every += values + between
    return committed, every


def _consume_confluent(bootstrap: str, isolation: str, expected: int) -> list[bytes]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "zc",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([CTopicPartition("zc", 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def _consume_kafka_python(bootstrap: str, isolation: str, expected: int) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, isolation_level=isolation)
    consumer.assign([KTopicPartition("zc", 0)])
    consumer.seek_to_beginning()
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=500).values():
                got += [m.value for m in messages]
    finally:
        consumer.close()
    return got


def _consume_ours(bootstrap: str, isolation: str, expected: int) -> list[bytes]:
    from client.consumer import Consumer as OurConsumer

    got: list[bytes] = []
    with OurConsumer({"bootstrap.servers": bootstrap, "isolation.level": isolation,
                      "enable.auto.commit": False}) as consumer:
        consumer.assign([("zc", 0)])
        consumer.seek(("zc", 0), 0)
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(0.5)]
    return got


def test_real_clients_read_what_was_written_through_sendfile(broker_proc):
    """confluent-kafka, kafka-python and our consumer, read_committed and read_uncommitted, over
    answers whose records leave by sendfile (batches of ~60 KiB): exactly the committed records
    (or every record) in order."""
    bootstrap = broker_proc.bootstrap
    committed, every = _real_clients_data(bootstrap)
    for consume in (_consume_confluent, _consume_kafka_python, _consume_ours):
        assert consume(bootstrap, "read_committed", len(committed)) == committed, consume
        assert consume(bootstrap, "read_uncommitted", len(every)) == every, consume
