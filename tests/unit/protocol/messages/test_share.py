"""Share-group messages (KIP-932) against bytes written out by hand from Kafka 4.4's schemas
(kafka-python, the other messages' referee, has no share-group classes)."""

from __future__ import annotations

import struct
import uuid

from protocol.api_keys import ApiKey
from protocol.messages import decode_request, decode_response, encode_request, encode_response

TID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    data = s.encode()
    return bytes([len(data) + 1]) + data


def test_heartbeat_request_v1() -> None:
    body = (_cstr("g") + _cstr("m") + struct.pack(">i", 0) + _cstr(None)
            + b"\x02" + _cstr("t") + b"\x00")
    decoded = decode_request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, body)
    assert (decoded.group_id, decoded.member_id, decoded.member_epoch) == ("g", "m", 0)
    assert decoded.rack_id is None and list(decoded.subscribed_topic_names) == ["t"]
    assert encode_request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, decoded) == body
    # null subscriptions (unchanged since the last heartbeat)
    null = _cstr("g") + _cstr("m") + struct.pack(">i", 3) + _cstr(None) + b"\x00" + b"\x00"
    assert decode_request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, null).subscribed_topic_names is None


def test_heartbeat_response_v1_nullable_assignment() -> None:
    head = struct.pack(">ih", 0, 0) + _cstr(None) + _cstr("m") + struct.pack(">ii", 2, 5000)
    with_assignment = head + b"\x01" + b"\x02" + TID.bytes + b"\x02" + struct.pack(">i", 0) \
        + b"\x00" + b"\x00" + b"\x00"
    value = {"member_id": "m", "member_epoch": 2, "heartbeat_interval_ms": 5000,
             "assignment": {"topic_partitions": [{"topic_id": TID, "partitions": [0]}]}}
    assert encode_response(ApiKey.SHARE_GROUP_HEARTBEAT, 1, value) == with_assignment
    decoded = decode_response(ApiKey.SHARE_GROUP_HEARTBEAT, 1, with_assignment)
    assert decoded.assignment.topic_partitions[0].topic_id == TID
    without = head + b"\xff" + b"\x00"
    assert encode_response(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {**value, "assignment": None}) \
        == without
    assert decode_response(ApiKey.SHARE_GROUP_HEARTBEAT, 1, without).assignment is None


def test_share_fetch_request_v1_and_v2() -> None:
    partition = struct.pack(">i", 0) + b"\x02" + struct.pack(">qq", 5, 7) + b"\x02\x01" \
        + b"\x00" + b"\x00"
    topics = b"\x02" + TID.bytes + b"\x02" + partition + b"\x00"
    head = _cstr("g") + _cstr("m") + struct.pack(">iiiiii", 1, 500, 1, 1 << 20, 100, 100)
    v1 = head + topics + b"\x01" + b"\x00"
    decoded = decode_request(ApiKey.SHARE_FETCH, 1, v1)
    batch = decoded.topics[0].partitions[0].acknowledgement_batches[0]
    assert (batch.first_offset, batch.last_offset, list(batch.acknowledge_types)) == (5, 7, [1])
    assert decoded.max_records == 100 and decoded.share_session_epoch == 1
    assert encode_request(ApiKey.SHARE_FETCH, 1, decoded) == v1
    v2 = head + b"\x01" + b"\x00" + topics + b"\x01" + b"\x00"  # acquire mode 1, is_renew_ack
    decoded2 = decode_request(ApiKey.SHARE_FETCH, 2, v2)
    assert decoded2.share_acquire_mode == 1 and decoded2.is_renew_ack is False
    assert encode_request(ApiKey.SHARE_FETCH, 2, decoded2) == v2


def test_share_fetch_response_v1() -> None:
    records = b"R" * 3
    partition = (struct.pack(">ih", 0, 0) + _cstr(None) + struct.pack(">h", 0) + _cstr(None)
                 + struct.pack(">ii", 0, 0) + b"\x00" + b"\x04" + records
                 + b"\x02" + struct.pack(">qqh", 0, 9, 1) + b"\x00" + b"\x00")
    body = (struct.pack(">ih", 0, 0) + _cstr(None) + struct.pack(">i", 30000) + b"\x02"
            + TID.bytes + b"\x02" + partition + b"\x00" + b"\x01" + b"\x00")
    value = {"acquisition_lock_timeout_ms": 30000, "responses": [{"topic_id": TID, "partitions": [
        {"partition_index": 0, "current_leader": {"leader_id": 0, "leader_epoch": 0},
         "records": records,
         "acquired_records": [{"first_offset": 0, "last_offset": 9, "delivery_count": 1}]}]}]}
    assert encode_response(ApiKey.SHARE_FETCH, 1, value) == body
    assert decode_response(ApiKey.SHARE_FETCH, 1, body).responses[0].partitions[0] \
        .acquired_records[0].last_offset == 9


def test_share_acknowledge_response_v2_has_the_lock_timeout() -> None:
    v1 = encode_response(ApiKey.SHARE_ACKNOWLEDGE, 1, {"acquisition_lock_timeout_ms": 7})
    v2 = encode_response(ApiKey.SHARE_ACKNOWLEDGE, 2, {"acquisition_lock_timeout_ms": 7})
    assert len(v2) == len(v1) + 4
    assert decode_response(ApiKey.SHARE_ACKNOWLEDGE, 2, v2).acquisition_lock_timeout_ms == 7
