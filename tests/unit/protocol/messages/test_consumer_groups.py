"""ConsumerGroupHeartbeat and ConsumerGroupDescribe codecs: golden bytes laid out by hand from
Kafka's schemas (flexible from v0: compact strings and arrays, a tagged-field section per struct),
including the nullable Assignment struct (an INT8 marker) and ConsumerGroupDescribe v1's member
type (KIP-1099)."""

from __future__ import annotations

import uuid

import pytest

from protocol.api_keys import ApiKey
from protocol.messages import decode_request, decode_response, encode_request, encode_response

TID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def _cstr(s: str | None) -> bytes:
    return b"\x00" if s is None else bytes([len(s) + 1]) + s.encode()


def _heartbeat_response(assignment: bytes) -> bytes:
    return (b"\x00\x00\x00\x00" + b"\x00\x00" + _cstr(None) + _cstr("m1")
            + b"\x00\x00\x00\x03" + b"\x00\x00\x13\x88" + assignment + b"\x00")


@pytest.mark.parametrize("version", [0, 1])
def test_describe_request(version):
    data = encode_request(ApiKey.CONSUMER_GROUP_DESCRIBE, version,
                          {"group_ids": ["g", "h"], "include_authorized_operations": True})
    assert data == b"\x03" + _cstr("g") + _cstr("h") + b"\x01" + b"\x00"
    assert list(decode_request(ApiKey.CONSUMER_GROUP_DESCRIBE, version, data).group_ids) == \
        ["g", "h"]


@pytest.mark.parametrize("version", [0, 1])
def test_heartbeat_response_with_and_without_assignment(version):
    body = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": "m1",
            "member_epoch": 3, "heartbeat_interval_ms": 5000, "assignment": None}
    assert encode_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, body) == \
        _heartbeat_response(b"\xff")
    body["assignment"] = {"topic_partitions": [{"topic_id": TID, "partitions": [0, 2]}]}
    # marker 1, one topic (2), id, two partitions (3), tags, the struct's tags
    expected = _heartbeat_response(b"\x01" + b"\x02" + TID.bytes + b"\x03"
                                   + b"\x00\x00\x00\x00\x00\x00\x00\x02" + b"\x00" + b"\x00")
    data = encode_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, body)
    assert data == expected
    decoded = decode_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, data)
    assert decoded.assignment.topic_partitions[0].topic_id == TID
    assert list(decoded.assignment.topic_partitions[0].partitions) == [0, 2]


@pytest.mark.parametrize("version", [0, 1])
def test_heartbeat_request_regex_from_v1(version):
    request = {"group_id": "g", "member_id": "m", "member_epoch": 0, "instance_id": None,
               "rack_id": None, "rebalance_timeout_ms": 300000,
               "subscribed_topic_names": ["t"], "subscribed_topic_regex": "t.*",
               "server_assignor": None, "topic_partitions": []}
    data = encode_request(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, request)
    expected = (_cstr("g") + _cstr("m") + b"\x00\x00\x00\x00" + _cstr(None) + _cstr(None)
                + (300000).to_bytes(4, "big") + b"\x02" + _cstr("t")
                + (_cstr("t.*") if version >= 1 else b"") + _cstr(None) + b"\x01" + b"\x00")
    assert data == expected
    decoded = decode_request(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, data)
    assert decoded.subscribed_topic_regex == ("t.*" if version >= 1 else None)
    assert list(decoded.topic_partitions) == []


@pytest.mark.parametrize("version", [0, 1])
def test_describe_response_member_type_from_v1(version):
    assignment = {"topic_partitions": [{"topic_id": TID, "topic_name": "t", "partitions": [1]}]}
    body = {"throttle_time_ms": 0, "groups": [{
        "error_code": 0, "error_message": None, "group_id": "g", "group_state": "Stable",
        "group_epoch": 2, "assignment_epoch": 2, "assignor_name": "uniform",
        "members": [{"member_id": "m", "instance_id": None, "rack_id": None,
                     "member_epoch": 2, "client_id": "c", "client_host": "/h",
                     "subscribed_topic_names": ["t"], "subscribed_topic_regex": None,
                     "assignment": assignment, "target_assignment": assignment,
                     "member_type": 1}],
        "authorized_operations": -(2**31)}]}
    described = (b"\x02" + TID.bytes + _cstr("t") + b"\x02" + b"\x00\x00\x00\x01" + b"\x00"
                 + b"\x00")
    member = (_cstr("m") + _cstr(None) + _cstr(None) + b"\x00\x00\x00\x02" + _cstr("c")
              + _cstr("/h") + b"\x02" + _cstr("t") + _cstr(None) + described + described
              + (b"\x01" if version >= 1 else b"") + b"\x00")
    expected = (b"\x00\x00\x00\x00" + b"\x02" + b"\x00\x00" + _cstr(None) + _cstr("g")
                + _cstr("Stable") + b"\x00\x00\x00\x02" * 2 + _cstr("uniform") + b"\x02"
                + member + b"\x80\x00\x00\x00" + b"\x00" + b"\x00")
    data = encode_response(ApiKey.CONSUMER_GROUP_DESCRIBE, version, body)
    assert data == expected
    decoded = decode_response(ApiKey.CONSUMER_GROUP_DESCRIBE, version, data)
    assert decoded.groups[0].members[0].member_type == (1 if version >= 1 else -1)
