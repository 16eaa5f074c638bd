"""Bad input over real sockets: the broker answers with the Kafka error code or drops that one
connection, keeps serving everyone else, keeps memory bounded and stored data intact."""

from __future__ import annotations

import os
import struct
import time

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import encode_batch, parse_header_untrusted
from tests.broker_process import BrokerProcess
from tests.raw_client import RawConnection

MAX_MESSAGE_BYTES = 10_000
TOPIC = "intact"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("bad-input")
    proc = BrokerProcess.configured(
        data,
        f"auto.create.topics.enable=false\nmessage.max.bytes={MAX_MESSAGE_BYTES}\n"
        "socket.request.max.bytes=1048576\n",
    )
    proc.start()
    with RawConnection(proc.port) as conn:
        created = conn.request(ApiKey.CREATE_TOPICS, 2, _create_topics_body(TOPIC, 1))
        assert created.topics[0].error_code == ErrorCode.NONE
        reply = produce(conn, TOPIC, 0, encode_batch([(b"k", b"original", [], 1000)]))
        assert reply.error_code == ErrorCode.NONE
    try:
        yield proc
    finally:
        proc.stop()


def _create_topics_body(name: str, partitions: int) -> dict:
    return {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ],
        "timeout_ms": 5000,
        "validate_only": False,
    }


def produce(conn: RawConnection, topic: str, partition: int, records: bytes, acks: int = -1):
    body = {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }
    response = conn.request(ApiKey.PRODUCE, 3, body)
    return response.responses[0].partition_responses[0]


def fetch_all(conn: RawConnection, topic: str, partition: int = 0) -> bytes:
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
    }
    response = conn.request(ApiKey.FETCH, 4, body)
    part = response.responses[0].partitions[0]
    assert part.error_code == ErrorCode.NONE
    return part.records


def assert_still_serving(broker: BrokerProcess) -> None:
    """Another connection works and the stored record is unchanged."""
    assert broker.proc is not None and broker.proc.poll() is None, "broker died"
    with RawConnection(broker.port) as conn:
        records = fetch_all(conn, TOPIC)
    from protocol.records import decode_records_untrusted

    assert [r.value for r in decode_records_untrusted(records)][0] == b"original"


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_truncated_frame_then_close(broker):
    with RawConnection(broker.port) as conn:
        conn.send_raw(struct.pack(">i", 100) + b"\x00\x03\x00\x04")
    assert_still_serving(broker)


@pytest.mark.parametrize("seed", range(5))
def test_garbage_bytes_close_only_that_connection(broker, seed):
    rng = __import__("random").Random(seed)
    garbage = bytes(rng.getrandbits(8) for _ in range(2000))
    with RawConnection(broker.port) as conn:
        conn.send_raw(struct.pack(">i", len(garbage)) + garbage)
        assert conn.read_frame() is None  # closed
    assert_still_serving(broker)


def test_frame_over_limit_is_refused_before_buffering(broker):
    before = rss_kb(broker.proc.pid)
    with RawConnection(broker.port) as conn:
        conn.send_raw(struct.pack(">i", 500 * 1024 * 1024) + b"\x00" * 1000)
        assert conn.read_frame() is None
    assert rss_kb(broker.proc.pid) - before < 20_000
    assert_still_serving(broker)


def test_negative_frame_size(broker):
    with RawConnection(broker.port) as conn:
        conn.send_raw(struct.pack(">i", -5))
        assert conn.read_frame() is None
    assert_still_serving(broker)


def test_unknown_api_key_closes_connection(broker):
    with RawConnection(broker.port) as conn:
        conn.send_request(999, 0, b"")
        assert conn.read_frame() is None
    assert_still_serving(broker)


def test_unsupported_version_closes_connection(broker):
    with RawConnection(broker.port) as conn:
        conn.send_request(ApiKey.PRODUCE, 2, b"\x00" * 20)  # below the served range (3+)
        assert conn.read_frame() is None
    assert_still_serving(broker)


def test_api_versions_above_ours_gets_the_v0_fallback(broker):
    with RawConnection(broker.port) as conn:
        conn.send_request(ApiKey.API_VERSIONS, 5, b"\x00garbage-we-never-parse")
        frame = conn.read_frame()
        error_code, count = struct.unpack_from(">hi", frame, 4)
        assert error_code == ErrorCode.UNSUPPORTED_VERSION
        assert count == 1 and struct.unpack_from(">hhh", frame, 10) == (ApiKey.API_VERSIONS, 0, 4)
        versions = conn.request(ApiKey.API_VERSIONS, 0, b"")
        assert versions.error_code == ErrorCode.NONE
        advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert advertised[ApiKey.PRODUCE] == (3, 12)
        assert advertised[ApiKey.API_VERSIONS] == (0, 4)
        assert advertised[ApiKey.WRITE_TXN_MARKERS] == (0, 1)


def test_api_versions_v3_checks_the_client_software_name(broker):
    def body(name: str, version: str) -> bytes:
        return (bytes([len(name) + 1]) + name.encode() + bytes([len(version) + 1])
                + version.encode() + b"\x00")

    with RawConnection(broker.port) as conn:
        good = conn.request(ApiKey.API_VERSIONS, 3, body("librdkafka", "2.16.0"))
        assert good.error_code == ErrorCode.NONE and len(good.api_keys) > 10
        bad = conn.request(ApiKey.API_VERSIONS, 3, body("bad name!", "1"))
        assert bad.error_code == ErrorCode.INVALID_REQUEST and list(bad.api_keys) == []


def test_wrong_crc_is_corrupt_message(broker):
    batch = bytearray(encode_batch([(None, b"x" * 50, [], 1)]))
    batch[-1] ^= 0xFF
    with RawConnection(broker.port) as conn:
        assert produce(conn, TOPIC, 0, bytes(batch)).error_code == ErrorCode.CORRUPT_MESSAGE
    assert_still_serving(broker)


def test_wrong_magic(broker):
    batch = bytearray(encode_batch([(None, b"x", [], 1)]))
    batch[16] = 1
    with RawConnection(broker.port) as conn:
        code = produce(conn, TOPIC, 0, bytes(batch)).error_code
    assert code == ErrorCode.INVALID_RECORD  # as Kafka answers a Produce v3+ of magic 0 or 1
    assert_still_serving(broker)


def test_truncated_batch_inside_request(broker):
    batch = encode_batch([(None, b"x" * 100, [], 1)])
    with RawConnection(broker.port) as conn:
        assert produce(conn, TOPIC, 0, batch[:-10]).error_code == ErrorCode.CORRUPT_MESSAGE
    assert_still_serving(broker)


def test_batch_over_message_max_bytes(broker):
    batch = encode_batch([(None, os.urandom(MAX_MESSAGE_BYTES), [], 1)])
    assert parse_header_untrusted(batch).size > MAX_MESSAGE_BYTES
    with RawConnection(broker.port) as conn:
        assert produce(conn, TOPIC, 0, batch).error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert_still_serving(broker)


def test_invalid_acks(broker):
    with RawConnection(broker.port) as conn:
        reply = produce(conn, TOPIC, 0, encode_batch([(None, b"x", [], 1)]), acks=2)
        assert reply.error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert_still_serving(broker)


def test_unknown_topic_with_auto_create_off(broker):
    with RawConnection(broker.port) as conn:
        meta = conn.request(
            ApiKey.METADATA, 4, {"topics": [{"name": "nope"}], "allow_auto_topic_creation": True}
        )
        assert meta.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        reply = produce(conn, "nope", 0, encode_batch([(None, b"x", [], 1)]))
        assert reply.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        reply = produce(conn, TOPIC, 7, encode_batch([(None, b"x", [], 1)]))
        assert reply.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("name", ["", ".", "..", "bad name", "a" * 250, "ünïcode", "a/b"])
def test_invalid_topic_names(broker, name):
    with RawConnection(broker.port) as conn:
        created = conn.request(ApiKey.CREATE_TOPICS, 2, _create_topics_body(name, 1))
        assert created.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert_still_serving(broker)


def test_create_topic_errors(broker):
    with RawConnection(broker.port) as conn:
        again = conn.request(ApiKey.CREATE_TOPICS, 2, _create_topics_body(TOPIC, 1))
        assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        zero = conn.request(ApiKey.CREATE_TOPICS, 2, _create_topics_body("zero", 0))
        assert zero.topics[0].error_code == ErrorCode.INVALID_PARTITIONS
        body = _create_topics_body("rf3", 1)
        body["topics"][0]["replication_factor"] = 3
        rf = conn.request(ApiKey.CREATE_TOPICS, 2, body)
        assert rf.topics[0].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
        body = _create_topics_body("cfg", 1)
        body["topics"][0]["configs"] = [{"name": "no.such.config", "value": "1"}]
        cfg = conn.request(ApiKey.CREATE_TOPICS, 2, body)
        assert cfg.topics[0].error_code == ErrorCode.INVALID_CONFIG


def test_connection_reset_by_peer(broker):
    """An RST (SO_LINGER 0) while the broker reads or replies costs only that connection."""
    import socket

    for payload in (struct.pack(">i", 100) + b"\x00\x03", b""):
        with RawConnection(broker.port) as conn:
            conn.send_request(ApiKey.API_VERSIONS, 0, b"")
            conn.send_raw(payload)
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    time.sleep(0.3)  # let the broker meet the resets before we look
    assert_still_serving(broker)


def test_produce_to_an_internal_topic_is_refused(broker):
    with RawConnection(broker.port) as conn:
        reply = produce(conn, "__consumer_offsets", 0, encode_batch([(b"k", b"forged", [], 1)]))
        assert reply.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_transactional_batch_without_a_transactional_id_is_refused(broker):
    """Kafka's handleProduceRequest: transactional batches with no id to authorize refuse the
    request on every partition (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), nothing written."""
    batch = encode_batch([(None, b"x", [], 1)], producer_id=5, producer_epoch=0,
                         base_sequence=0, transactional=True)
    with RawConnection(broker.port) as conn:
        end = fetch_all(conn, TOPIC)
        assert produce(conn, TOPIC, 0, batch).error_code == \
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert fetch_all(conn, TOPIC) == end
    assert_still_serving(broker)
