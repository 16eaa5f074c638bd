"""Request headers v1/v2 and response headers v0/v1: golden bytes, kafka-python, bad input."""

from __future__ import annotations

import importlib
import struct
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.api_keys import (
    FIRST_FLEXIBLE_VERSION,
    ApiKey,
    is_flexible,
    request_header_version,
    response_header_version,
)
from protocol.errors import CorruptFrameError
from protocol.headers import (
    RequestHeader,
    encode_request_header,
    encode_response_head,
    encode_response_header,
    parse_request_header_untrusted,
    parse_response_header_untrusted,
)

with warnings.catch_warnings():  # kafka-python's import trips a DeprecationWarning
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.api_message import ApiMessage
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
    from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

V1 = RequestHeader(ApiKey.PRODUCE, 3, 7, "rdkafka")
V1_BYTES = struct.pack(">hhih", 0, 3, 7, 7) + b"rdkafka"
V2 = RequestHeader(ApiKey.INIT_PRODUCER_ID, 3, 0x01020304, "client-é")
V2_BYTES = struct.pack(">hhih", 22, 3, 0x01020304, 9) + "client-é".encode() + b"\x00"


def test_request_header_v1_golden() -> None:
    assert request_header_version(ApiKey.PRODUCE, 3) == 1
    assert encode_request_header(V1) == V1_BYTES
    assert parse_request_header_untrusted(V1_BYTES + b"body") == (V1, len(V1_BYTES))


def test_request_header_v1_null_client_id() -> None:
    header = RequestHeader(ApiKey.METADATA, 4, -5, None)
    data = struct.pack(">hhih", 3, 4, -5, -1)
    assert encode_request_header(header) == data
    assert parse_request_header_untrusted(data) == (header, 10)


def test_request_header_v2_golden() -> None:
    assert request_header_version(ApiKey.INIT_PRODUCER_ID, 3) == 2
    assert encode_request_header(V2) == V2_BYTES
    assert parse_request_header_untrusted(V2_BYTES + b"body") == (V2, len(V2_BYTES))


def test_request_header_v2_skips_tagged_fields() -> None:
    # client_id stays a non-compact INT16 string in v2; then one tagged field (tag 3, 2 bytes).
    data = struct.pack(">hhih", 18, 3, 1, 3) + b"abc" + b"\x01\x03\x02hi"
    header, offset = parse_request_header_untrusted(data + b"BODY")
    assert header == RequestHeader(ApiKey.API_VERSIONS, 3, 1, "abc")
    assert offset == len(data)


def test_unknown_api_key_is_returned_for_the_caller_to_reject() -> None:
    for key in (99, -1):
        data = struct.pack(">hhih", key, 0, 1, 0)
        assert parse_request_header_untrusted(data) == (RequestHeader(key, 0, 1, ""), 10)


def test_response_header_v0_and_v1_golden() -> None:
    assert encode_response_header(ApiKey.PRODUCE, 3, 7) == b"\x00\x00\x00\x07"
    assert encode_response_header(ApiKey.INIT_PRODUCER_ID, 3, 7) == b"\x00\x00\x00\x07\x00"
    assert encode_response_header(ApiKey.INIT_PRODUCER_ID, 0, 7) == b"\x00\x00\x00\x07"
    # ApiVersions responses always use header v0, even to a flexible (v3) request
    assert encode_response_header(ApiKey.API_VERSIONS, 3, 7) == b"\x00\x00\x00\x07"
    assert parse_response_header_untrusted(b"\x00\x00\x00\x07body", ApiKey.PRODUCE, 3) == (7, 4)
    assert parse_response_header_untrusted(
        b"\x00\x00\x00\x07\x00body", ApiKey.INIT_PRODUCER_ID, 3
    ) == (7, 5)
    assert parse_response_header_untrusted(
        b"\xff\xff\xff\xff\x01\x00\x01Xbody", ApiKey.INIT_PRODUCER_ID, 3
    ) == (-1, 8)


def test_response_head_is_size_prefix_and_header() -> None:
    # What the broker sends before a body: the frame size (header + body) and the header.
    for key in [*ApiKey, 99]:
        for version in range(0, 16):
            for body_size in (0, 1, 70_000):
                header = encode_response_header(key, version, -7)
                assert encode_response_head(key, version, -7, body_size) == (
                    struct.pack(">i", len(header) + body_size) + header
                ), (key, version)


def test_request_header_bad_client_id_lengths() -> None:
    with pytest.raises(CorruptFrameError):
        parse_request_header_untrusted(struct.pack(">hhih", 0, 3, 7, -2))
    with pytest.raises(CorruptFrameError):
        parse_request_header_untrusted(struct.pack(">hhih", 0, 3, 7, 4) + b"abc")
    with pytest.raises(CorruptFrameError):
        parse_request_header_untrusted(struct.pack(">hhi", 0, 3, 7) + b"\x00")
    with pytest.raises(CorruptFrameError):
        parse_request_header_untrusted(struct.pack(">hhih", 0, 3, 7, 2) + b"\xff\xfe")
    header, offset = parse_request_header_untrusted(bytearray(V1_BYTES))
    assert (header, offset) == (V1, len(V1_BYTES)) and type(header) is RequestHeader


def test_header_versions() -> None:
    assert response_header_version(ApiKey.API_VERSIONS, 3) == 0
    assert request_header_version(ApiKey.API_VERSIONS, 3) == 2
    assert request_header_version(ApiKey.API_VERSIONS, 0) == 1
    assert response_header_version(ApiKey.INIT_PRODUCER_ID, 3) == 1
    assert not is_flexible(ApiKey.INIT_PRODUCER_ID, 1)
    assert not is_flexible(99, 100)


def test_first_flexible_versions_match_kafka_schemas() -> None:
    """kafka-python's classes carry Kafka's ``flexibleVersions``: an independent source."""
    theirs = {}
    for package in ("producer", "consumer", "metadata", "admin", "sasl"):
        module = importlib.import_module(f"kafka.protocol.{package}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage:
                if obj.is_request() and obj.API_KEY in FIRST_FLEXIBLE_VERSION:
                    theirs[obj.API_KEY] = next(v for v in range(100) if obj.flexible_version_q(v))
    # kafka-python has no classes for the share-group APIs (KIP-932), ConsumerGroupHeartbeat /
    # Describe (KIP-848) nor StreamsGroupHeartbeat / Describe (KIP-1071): Kafka 4.4's schemas say
    # "0+" (the share ones are checked against the Java client in
    # tests/kafka_ref/test_share_groups.py, the streams ones against Kafka 4.4's own bytes in
    # tests/unit/protocol/messages/test_streams_groups.py), nor the client telemetry APIs
    # (KIP-714, checked against Kafka 4.4's bytes in tests/unit/protocol/messages/test_telemetry.py).
    no_class = {ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: 0, ApiKey.PUSH_TELEMETRY: 0,
                ApiKey.CONSUMER_GROUP_HEARTBEAT: 0, ApiKey.CONSUMER_GROUP_DESCRIBE: 0,
                ApiKey.STREAMS_GROUP_HEARTBEAT: 0, ApiKey.STREAMS_GROUP_DESCRIBE: 0,
                ApiKey.SHARE_GROUP_HEARTBEAT: 0, ApiKey.SHARE_GROUP_DESCRIBE: 0,
                ApiKey.SHARE_FETCH: 0, ApiKey.SHARE_ACKNOWLEDGE: 0,
                ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: 0, ApiKey.ALTER_SHARE_GROUP_OFFSETS: 0,
                ApiKey.DELETE_SHARE_GROUP_OFFSETS: 0}
    ours = {int(k): v for k, v in FIRST_FLEXIBLE_VERSION.items() if k not in no_class}
    assert theirs == ours
    assert {k: FIRST_FLEXIBLE_VERSION[k] for k in no_class} == no_class


def test_same_bytes_as_kafka_python() -> None:
    cases = [
        (ProduceRequest[3], ApiKey.PRODUCE, 3, "rdkafka"),
        (MetadataRequest[4], ApiKey.METADATA, 4, "kafka-python"),
        (InitProducerIdRequest[3], ApiKey.INIT_PRODUCER_ID, 3, "c"),
        (ApiVersionsRequest[3], ApiKey.API_VERSIONS, 3, "x" * 300),
    ]
    for cls, key, version, client_id in cases:
        request = cls()
        request.with_header(correlation_id=123456, client_id=client_id)
        theirs = request.encode_header(flexible=cls.flexible_version_q(version))
        ours = encode_request_header(RequestHeader(key, version, 123456, client_id))
        assert ours == theirs
        assert parse_request_header_untrusted(theirs) == (
            RequestHeader(key, version, 123456, client_id),
            len(theirs),
        )


@pytest.mark.parametrize("good", [V1_BYTES, V2_BYTES])
def test_every_truncated_request_header_is_corrupt(good: bytes) -> None:
    for cut in range(len(good)):
        with pytest.raises(CorruptFrameError):
            parse_request_header_untrusted(good[:cut])


def test_every_truncated_response_header_is_corrupt() -> None:
    for data, key, version in (
        (b"\x00\x00\x00\x07", ApiKey.PRODUCE, 3),
        (b"\x00\x00\x00\x07\x00", ApiKey.INIT_PRODUCER_ID, 3),
        (b"\x00\x00\x00\x07\x01\x00\x01X", ApiKey.INIT_PRODUCER_ID, 3),
    ):
        for cut in range(len(data)):
            with pytest.raises(CorruptFrameError):
                parse_response_header_untrusted(data[:cut], key, version)


def test_garbage_request_headers_are_corrupt() -> None:
    for data in (
        struct.pack(">hhih", 0, 3, 1, -2),  # client_id length -2
        struct.pack(">hhih", 0, 3, 1, 5) + b"abc",  # client_id past the end
        struct.pack(">hhih", 0, 3, 1, 2) + b"\xc3\x28",  # client_id not UTF-8
        struct.pack(">hhih", 22, 3, 1, -1) + b"\x01\x00\x05ab",  # tagged field past the end
        struct.pack(">hhih", 22, 3, 1, -1) + b"\xff" * 6,  # varint over 5 bytes
    ):
        with pytest.raises(CorruptFrameError):
            parse_request_header_untrusted(data)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=40))
def test_random_request_headers_raise_only_corrupt_frame(data: bytes) -> None:
    try:
        header, offset = parse_request_header_untrusted(data)
    except CorruptFrameError:
        return
    assert 10 <= offset <= len(data)
    assert (
        encode_request_header(header) == data[:offset]
        or request_header_version(header.api_key, header.api_version) == 2
    )  # tagged fields are skipped, so a v2 header may not re-encode to the same bytes


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=12), key=st.sampled_from(list(ApiKey)), version=st.integers(0, 5))
def test_random_response_headers_raise_only_corrupt_frame(data: bytes, key, version: int) -> None:
    try:
        correlation_id, offset = parse_response_header_untrusted(data, key, version)
    except CorruptFrameError:
        return
    assert 4 <= offset <= len(data)
