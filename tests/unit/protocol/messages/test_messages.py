"""Message codecs: every declared (api, version) round-trips, survives bad input, and agrees with
two independent referees; golden bytes; the broker's and the client's fast paths.

Values are generated from the declarations (``protocol.messages._declare``). What makes the layouts
trustworthy is not the round trip but the referees: kafka-python 3.0.12's classes generated from
Kafka's JSON schemas (every version of Kafka 4's ranges: they decode our bytes to the same values
and encode those values to the same bytes), its hand-written 2.x classes (``kafka.protocol.old``)
for the versions below Kafka 4's baseline, and golden bytes assembled with ``struct`` here.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError, ErrorCode
from protocol.messages import (
    SCHEMAS,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_parts,
)
from protocol.messages._declare import APIS, F, in_range
from protocol.messages.api_versions import (
    ADVERTISED,
    API_VERSIONS_FALLBACK_BODY,
    IMPLEMENTED,
    SERVED,
)
from tests.kafka_python_classes import json_classes, old_classes

DIRECTIONS = ("request", "response")
CASES = [
    (api.api_key, version, d) for api in APIS.values() for version in api.versions for d in DIRECTIONS
]


def _case_id(case) -> str:
    key, version, direction = case
    return f"{ApiKey(key).name}-v{version}-{direction}"


def _encode(key: int, version: int, direction: str, value) -> bytes:
    return (encode_request if direction == "request" else encode_response)(key, version, value)


def _decode(key: int, version: int, direction: str, data, offset: int = 0):
    return (decode_request if direction == "request" else decode_response)(
        key, version, data, offset
    )


def _fields(key: int, direction: str) -> tuple[F, ...]:
    api = APIS[ApiKey(key)]
    return api.request if direction == "request" else api.response


# -- values generated from a declaration ----------------------------------------------------------

_text = st.text(max_size=6)
_binary = st.binary(max_size=12)
_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _leaf_values(type_: str, nullable: bool) -> st.SearchStrategy:
    if type_ in _INT_BITS:
        bits = _INT_BITS[type_]
        values = st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    elif type_ == "uint16":
        values = st.integers(0, 0xFFFF)
    elif type_ == "bool":
        values = st.booleans()
    elif type_ == "string":
        values = _text
    elif type_ in ("bytes", "records"):
        values = _binary
        nullable = nullable or type_ == "records"
    elif type_ == "uuid":
        values = st.uuids()
    elif type_ == "float64":
        values = st.floats(allow_nan=False)
    else:
        raise TypeError(type_)
    return st.none() | values if nullable else values


def _field_values(f: F, version: int, flexible: bool) -> st.SearchStrategy:
    nullable = in_range(version, f.nullable)
    if f.type == "struct":
        return _struct_values(f.fields, version, flexible)
    if not f.type.startswith("[]"):
        return _leaf_values(f.type, nullable)
    item = (_struct_values(f.fields, version, flexible) if f.fields
            else _leaf_values(f.type[2:], False))
    items = st.lists(item, max_size=3)
    return st.none() | items if nullable else items


def _struct_values(fields, version: int, flexible: bool) -> st.SearchStrategy:
    present = {}
    for f in fields:
        if not in_range(version, f.versions):
            continue
        values = _field_values(f, version, flexible)
        if f.tag is not None:
            values = st.just(f.default_for(version)) | values
        present[f.name] = values
    return st.fixed_dictionaries(present)


def values_for(key: int, version: int, direction: str) -> st.SearchStrategy:
    return _struct_values(_fields(key, direction), version, APIS[ApiKey(key)].is_flexible(version))


def project(value, fields, version: int):
    """``value`` restricted to the fields ``version`` carries (decoded messages hold every
    declared field, the absent ones at their defaults, plus the unknown tagged fields)."""
    if value is None:
        return None
    out = {}
    for f in fields:
        if not in_range(version, f.versions):
            continue
        v = value[f.name]
        if f.type == "struct":
            v = None if v is None else project(v, f.fields, version)
        elif f.fields and v is not None:
            v = [project(item, f.fields, version) for item in v]
        elif f.type.startswith("[]") and v is not None:
            v = list(v)
        elif f.tag is not None and v == () and f.type.startswith("[]"):
            v = []
        out[f.name] = v
    return out


def normalized(value, fields, version: int):
    """A generated value as the codec returns it (tuple defaults as lists, bytes as bytes)."""
    return project(value, fields, version)


STRATEGIES = {case: values_for(*case) for case in CASES}


# -- the table of versions --------------------------------------------------------------------------

# Kafka 4.0's supported ranges (its KIP-896 lower bounds) for the APIs we serve.
KAFKA_4 = {
    ApiKey.PRODUCE: (3, 12), ApiKey.FETCH: (4, 17), ApiKey.LIST_OFFSETS: (1, 10),
    ApiKey.METADATA: (0, 13), ApiKey.OFFSET_COMMIT: (2, 9), ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 6), ApiKey.JOIN_GROUP: (2, 9), ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5), ApiKey.SYNC_GROUP: (0, 5), ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5), ApiKey.API_VERSIONS: (0, 4), ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6), ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5), ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5), ApiKey.TXN_OFFSET_COMMIT: (0, 5), ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2), ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_CONFIGS: (1, 4), ApiKey.ALTER_CONFIGS: (0, 2), ApiKey.DESCRIBE_LOG_DIRS: (1, 5),
    ApiKey.CREATE_PARTITIONS: (0, 3), ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1), ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1), ApiKey.DESCRIBE_CLUSTER: (0, 2), ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.LIST_CONFIG_RESOURCES: (0, 1),
    ApiKey.WRITE_TXN_MARKERS: (1, 2), ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2), ApiKey.DESCRIBE_ACLS: (1, 3), ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3), ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1), ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: (0, 0),
    ApiKey.PUSH_TELEMETRY: (0, 0),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1), ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    ApiKey.SHARE_FETCH: (1, 2), ApiKey.SHARE_ACKNOWLEDGE: (1, 2),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1), ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.STREAMS_GROUP_HEARTBEAT: (0, 1), ApiKey.STREAMS_GROUP_DESCRIBE: (0, 1),
}


def test_served_ranges_cover_kafka_4s_lower_bounds() -> None:
    for key, served in SERVED.items():
        assert served.versions.min <= KAFKA_4[key][0], key.name
        assert served.versions.max <= KAFKA_4[key][1], key.name
        assert served.why, key.name


def test_served_versions_have_codecs() -> None:
    assert ADVERTISED == {k: s.versions for k, s in SERVED.items()}
    assert IMPLEMENTED <= {(ApiKey(k), v) for k, v in SCHEMAS}
    for key, served in SERVED.items():
        for v in range(served.versions.min, served.versions.max + 1):
            assert (key, v) in IMPLEMENTED


def test_transaction_version_2_apis_are_served_together() -> None:
    # A client of transaction version 2 needs all of them (KIP-890 part 2): Produce v12 adds
    # partitions, EndTxn v5 bumps the epoch, TxnOffsetCommit v5 adds the group.
    assert ADVERTISED[ApiKey.PRODUCE].max == 12
    assert ADVERTISED[ApiKey.END_TXN].max == 5
    assert ADVERTISED[ApiKey.TXN_OFFSET_COMMIT].max == 5
    assert ADVERTISED[ApiKey.INIT_PRODUCER_ID].max == 5
    # v4+ is the brokers' batched verification form: clients never send it.
    assert ADVERTISED[ApiKey.ADD_PARTITIONS_TO_TXN].max == 3


def test_api_versions_fallback_body() -> None:
    # What a client that asked for a newer ApiVersions gets: a v0 body with our range.
    decoded = decode_response(ApiKey.API_VERSIONS, 0, API_VERSIONS_FALLBACK_BODY)
    assert decoded.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [
        (ApiKey.API_VERSIONS, 0, 4)
    ]


# -- properties of every codec ---------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(case, data) -> None:
    key, version, direction = case
    value = data.draw(STRATEGIES[case])
    encoded = _encode(*case, value)
    decoded = _decode(*case, encoded)
    fields = _fields(key, direction)
    assert project(decoded, fields, version) == normalized(value, fields, version)
    assert _encode(*case, decoded) == encoded
    # decoding stops at the end of the message: trailing bytes are ignored, an offset is honoured
    assert project(_decode(*case, b"xy" + encoded + b"z", 2), fields, version) == project(
        decoded, fields, version
    )


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_truncation_is_corrupt(case, data) -> None:
    encoded = _encode(*case, data.draw(STRATEGIES[case]))
    for cut in range(len(encoded)):
        with pytest.raises(CorruptFrameError):
            _decode(*case, encoded[:cut])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@settings(max_examples=15, deadline=None)
@given(blob=st.binary(max_size=64))
def test_random_bytes_raise_only_corrupt_frame(case, blob: bytes) -> None:
    try:
        _decode(*case, blob)
    except CorruptFrameError:
        pass


def test_invalid_lengths_and_utf8_are_corrupt() -> None:
    bad = [
        # EndTxn v0 request with a null (non-nullable) transactional_id
        (ApiKey.END_TXN, 0, "request", b"\xff\xff" + struct.pack(">qh?", 1, 0, True)),
        # ... with a -2 string length
        (ApiKey.END_TXN, 0, "request", b"\xff\xfe" + struct.pack(">qh?", 1, 0, True)),
        # ... with invalid UTF-8
        (ApiKey.END_TXN, 0, "request", b"\x00\x02\xc3\x28" + struct.pack(">qh?", 1, 0, True)),
        # DeleteTopics v1 with a null (non-nullable) array
        (ApiKey.DELETE_TOPICS, 1, "request", struct.pack(">ii", -1, 1000)),
        # SyncGroup v0 response with a null (non-nullable) assignment
        (ApiKey.SYNC_GROUP, 0, "response", struct.pack(">hi", 0, -1)),
        # InitProducerId v3 with a varint longer than 5 bytes in the tagged fields
        (ApiKey.INIT_PRODUCER_ID, 3, "request",
         b"\x00" + struct.pack(">iqh", 1, -1, -1) + b"\xff" * 6 + b"\x00"),
        # a tagged field whose size runs past the end
        (ApiKey.HEARTBEAT, 4, "response", struct.pack(">ih", 0, 0) + b"\x01\x05\x10ab"),
        # a compact array with a null (non-nullable) count
        (ApiKey.DESCRIBE_GROUPS, 5, "request", b"\x00\x00\x00"),
    ]
    for key, version, direction, data in bad:
        with pytest.raises(CorruptFrameError):
            _decode(key, version, direction, data)


def test_absent_fields_decode_as_their_defaults() -> None:
    # JoinGroup v0 has no rebalance timeout nor instance id; InitProducerId v0 no producer id.
    join = decode_request(ApiKey.JOIN_GROUP, 0, encode_request(ApiKey.JOIN_GROUP, 0, {
        "group_id": "g", "session_timeout_ms": 10, "member_id": "", "protocol_type": "consumer",
        "protocols": [],
    }))
    assert (join.rebalance_timeout_ms, join.group_instance_id, join.reason) == (-1, None, None)
    init = decode_request(ApiKey.INIT_PRODUCER_ID, 0, encode_request(
        ApiKey.INIT_PRODUCER_ID, 0, {"transactional_id": None, "transaction_timeout_ms": 5}))
    assert (init.producer_id, init.producer_epoch) == (-1, -1)
    # a field left out when encoding is written as its default
    assert encode_request(ApiKey.FETCH, 4, {"max_wait_ms": 1, "min_bytes": 1}) == struct.pack(
        ">iiiibi", -1, 1, 1, 0x7FFFFFFF, 0, 0
    )


def test_tagged_fields_known_and_unknown() -> None:
    # ApiVersions v3 response: finalized_features_epoch is tag 1 (written only when not -1)
    value = {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}
    plain_bytes = encode_response(ApiKey.API_VERSIONS, 3, value)
    assert plain_bytes == struct.pack(">h", 0) + b"\x01" + struct.pack(">i", 0) + b"\x00"
    tagged = encode_response(ApiKey.API_VERSIONS, 3, dict(value, finalized_features_epoch=7))
    assert tagged == plain_bytes[:-1] + b"\x01\x01\x08" + struct.pack(">q", 7)
    decoded = decode_response(ApiKey.API_VERSIONS, 3, tagged)
    assert decoded.finalized_features_epoch == 7 and decoded.tagged_fields == {}
    # an unknown tag is kept raw and skipped
    unknown = plain_bytes[:-1] + b"\x01\x09\x02hi"
    assert decode_response(ApiKey.API_VERSIONS, 3, unknown).tagged_fields == {9: b"hi"}


# -- golden bytes, assembled by hand ----------------------------------------------------------------


def _str(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return bytes([len(raw) + 1]) + raw


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def test_golden_produce_v3_request() -> None:
    batch = bytes(range(70))
    value = {
        "transactional_id": "txn-α", "acks": -1, "timeout_ms": 30_000,
        "topic_data": [{"name": "orders", "partition_data": [
            {"index": 2, "records": batch}, {"index": 5, "records": None},
        ]}],
    }
    golden = (
        _str("txn-α") + struct.pack(">hi", -1, 30_000) + struct.pack(">i", 1) + _str("orders")
        + struct.pack(">i", 2) + struct.pack(">i", 2) + _bytes(batch) + struct.pack(">ii", 5, -1)
    )
    assert encode_request(ApiKey.PRODUCE, 3, value) == golden
    fields = _fields(ApiKey.PRODUCE, "request")
    assert project(decode_request(ApiKey.PRODUCE, 3, golden), fields, 3) == value


def test_golden_produce_v9_request_and_response() -> None:
    # flexible: compact strings/arrays/records, a tagged-field section after every struct
    batch = b"\x01\x02\x03"
    golden = (
        _cstr("t1") + struct.pack(">hi", 1, 1000) + b"\x02" + _cstr("orders") + b"\x02"
        + struct.pack(">i", 0) + b"\x04" + batch + b"\x00" + b"\x00" + b"\x00"
    )
    value = {"transactional_id": "t1", "acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": "orders", "partition_data": [{"index": 0, "records": batch}]}]}
    assert encode_request(ApiKey.PRODUCE, 9, value) == golden
    fast = decode_request(ApiKey.PRODUCE, 9, bytearray(golden))
    assert bytes(fast.topic_data[0].partition_data[0].records) == batch
    response = (
        b"\x02" + _cstr("orders") + b"\x02" + struct.pack(">ihqqq", 0, 0, 42, -1, 0)
        + b"\x01" + b"\x00" + b"\x00" + b"\x00" + struct.pack(">i", 0) + b"\x00"
    )
    assert encode_response(ApiKey.PRODUCE, 9, {"responses": [{"name": "orders", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 42, "log_start_offset": 0}]}]}) == response
    decoded = decode_response(ApiKey.PRODUCE, 9, response)
    p = decoded.responses[0].partition_responses[0]
    assert (p.base_offset, p.log_start_offset, p.error_message, list(p.record_errors)) == (
        42, 0, None, [])


def test_golden_fetch_v4_response() -> None:
    golden = (
        struct.pack(">i", 7) + struct.pack(">i", 1) + _str("t") + struct.pack(">i", 2)
        + struct.pack(">ihqq", 0, 0, 10, 8) + struct.pack(">i", 1) + struct.pack(">qq", 1000, 3)
        + _bytes(b"abc")
        + struct.pack(">ihqq", 1, 1, -1, -1) + struct.pack(">i", -1)  # aborted null
        + struct.pack(">i", 0)  # records: empty, never null
    )
    parts = encode_response_parts(ApiKey.FETCH, 4, {"throttle_time_ms": 7, "responses": [
        {"topic": "t", "partitions": [
            {"partition_index": 0, "high_watermark": 10, "last_stable_offset": 8,
             "aborted_transactions": [{"producer_id": 1000, "first_offset": 3}],
             "records": b"abc"},
            {"partition_index": 1, "error_code": 1, "high_watermark": -1,
             "last_stable_offset": -1, "aborted_transactions": None, "records": b""}]}]})
    assert b"".join(parts) == golden
    decoded = decode_response(ApiKey.FETCH, 4, golden)
    assert decoded.responses[0].partitions[0].records == b"abc"
    assert decoded.responses[0].partitions[1].aborted_transactions is None


def test_golden_fetch_v12_response() -> None:
    golden = (
        struct.pack(">ihi", 0, 0, 0) + b"\x02" + _cstr("t") + b"\x02"
        + struct.pack(">ihqqq", 0, 0, 10, 10, 2) + b"\x02" + struct.pack(">qq", 9, 3) + b"\x00"
        + struct.pack(">i", -1) + b"\x04abc" + b"\x00" + b"\x00" + b"\x00"
    )
    parts = encode_response_parts(ApiKey.FETCH, 12, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "high_watermark": 10, "last_stable_offset": 10,
         "log_start_offset": 2, "aborted_transactions": [{"producer_id": 9, "first_offset": 3}],
         "records": b"abc"}]}]})
    assert b"".join(parts) == golden
    p = decode_response(ApiKey.FETCH, 12, golden).responses[0].partitions[0]
    assert (p.log_start_offset, p.aborted_transactions, bytes(p.records)) == (
        2, [{"producer_id": 9, "first_offset": 3, "tagged_fields": {}}], b"abc")
    # a tagged field (the current leader, tag 1) goes in the partition's tag section
    parts = encode_response_parts(ApiKey.FETCH, 12, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "high_watermark": 10, "last_stable_offset": 10,
         "log_start_offset": 2, "aborted_transactions": [{"producer_id": 9, "first_offset": 3}],
         "records": b"abc", "current_leader": {"leader_id": 1, "leader_epoch": 4}}]}]})
    leader = struct.pack(">ii", 1, 4) + b"\x00"  # leader_id, leader_epoch, its own tags
    assert b"".join(parts) == golden[:-3] + b"\x01\x01\x09" + leader + b"\x00\x00"


def test_golden_api_versions_v3() -> None:
    request = _cstr("librdkafka") + _cstr("2.16.0") + b"\x00"
    decoded = decode_request(ApiKey.API_VERSIONS, 3, request)
    assert (decoded.client_software_name, decoded.client_software_version) == (
        "librdkafka", "2.16.0")
    response = encode_response(ApiKey.API_VERSIONS, 3, {
        "error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}],
        "throttle_time_ms": 0,
    })
    assert response == struct.pack(">h", 0) + b"\x02" + struct.pack(">hhh", 18, 0, 4) + b"\x00" + (
        struct.pack(">i", 0) + b"\x00")


def test_golden_init_producer_id_v3() -> None:
    request = _cstr("tx-1") + struct.pack(">iqh", 60_000, 5, 2) + b"\x00"
    value = {"transactional_id": "tx-1", "transaction_timeout_ms": 60_000, "producer_id": 5,
             "producer_epoch": 2}
    assert encode_request(ApiKey.INIT_PRODUCER_ID, 3, value) == request
    decoded = decode_request(ApiKey.INIT_PRODUCER_ID, 3, request)
    assert project(decoded, _fields(ApiKey.INIT_PRODUCER_ID, "request"), 3) == value
    assert decoded.tagged_fields == {}
    with_tags = struct.pack(">ihqh", 0, 0, 5, 3) + b"\x01" + b"\x07\x02hi"
    assert decode_response(ApiKey.INIT_PRODUCER_ID, 3, with_tags).tagged_fields == {7: b"hi"}


def test_golden_find_coordinator_v4() -> None:
    request = b"\x01" + b"\x03" + _cstr("g1") + _cstr("g2") + b"\x00"
    decoded = decode_request(ApiKey.FIND_COORDINATOR, 4, request)
    assert (decoded.key_type, list(decoded.coordinator_keys)) == (1, ["g1", "g2"])


def test_golden_end_txn_v0() -> None:
    request = _str("tx-1") + struct.pack(">qhb", 5, 2, 1)
    value = {"transactional_id": "tx-1", "producer_id": 5, "producer_epoch": 2, "committed": True}
    assert encode_request(ApiKey.END_TXN, 0, value) == request
    response = struct.pack(">ih", 0, 51)
    assert decode_response(ApiKey.END_TXN, 0, response).error_code == 51


# -- kafka-python as the referee ------------------------------------------------------------------


OLD = old_classes()
JSON = json_classes()


def _json_class(case):
    key, version, direction = case
    cls = JSON.get((key, direction))
    if cls is None:
        return None
    low, high = cls.valid_versions
    return cls if low <= version <= high else None


JSON_CASES = [c for c in CASES if _json_class(c) is not None]
# kafka-python's old class is wrong here (partitions as one INT32, Kafka's schema has an array):
# golden bytes below instead.
OLD_CLASS_WRONG = {(ApiKey.DESCRIBE_LOG_DIRS, 0, "request")}
# below Kafka 4's baseline kafka-python's JSON classes stop; its old classes take over
OLD_ONLY_CASES = [
    c for c in CASES if _json_class(c) is None and c in OLD and c not in OLD_CLASS_WRONG
]


# Served versions no kafka-python class covers: golden bytes below instead.
GOLDEN_ONLY = {(ApiKey.WRITE_TXN_MARKERS, 0),
               # KIP-848's APIs (kafka-python has no class): golden bytes in
               # test_consumer_groups.py
               (ApiKey.CONSUMER_GROUP_HEARTBEAT, 0), (ApiKey.CONSUMER_GROUP_HEARTBEAT, 1),
               (ApiKey.CONSUMER_GROUP_DESCRIBE, 0), (ApiKey.CONSUMER_GROUP_DESCRIBE, 1),
               # share groups: golden bytes in tests/unit/protocol/messages/test_share.py
               (ApiKey.SHARE_GROUP_HEARTBEAT, 1), (ApiKey.SHARE_GROUP_DESCRIBE, 1),
               (ApiKey.SHARE_FETCH, 1), (ApiKey.SHARE_FETCH, 2),
               (ApiKey.SHARE_ACKNOWLEDGE, 1), (ApiKey.SHARE_ACKNOWLEDGE, 2),
               (ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0), (ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1),
               (ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0), (ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0),
               # KIP-1071's APIs (kafka-python has no class): Kafka 4.4's golden bytes in
               # test_streams_groups.py
               (ApiKey.STREAMS_GROUP_HEARTBEAT, 0), (ApiKey.STREAMS_GROUP_HEARTBEAT, 1),
               (ApiKey.STREAMS_GROUP_DESCRIBE, 0), (ApiKey.STREAMS_GROUP_DESCRIBE, 1),
               # KIP-714's APIs: golden bytes in test_telemetry.py
               (ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0), (ApiKey.PUSH_TELEMETRY, 0)}


def test_every_served_version_has_a_referee() -> None:
    for key, version in IMPLEMENTED:
        for direction in DIRECTIONS:
            case = (key, version, direction)
            if key in APIS and (key, version) not in GOLDEN_ONLY and case not in OLD_CLASS_WRONG:
                assert case in JSON_CASES or case in OLD_ONLY_CASES, _case_id(case)


def test_golden_describe_log_dirs_v0_request() -> None:
    request = struct.pack(">i", 1) + _str("t") + struct.pack(">iii", 2, 0, 3)
    decoded = decode_request(ApiKey.DESCRIBE_LOG_DIRS, 0, request)
    assert decoded.topics[0].topic == "t" and list(decoded.topics[0].partitions) == [0, 3]
    assert encode_request(ApiKey.DESCRIBE_LOG_DIRS, 0, decoded) == request
    assert decode_request(ApiKey.DESCRIBE_LOG_DIRS, 0, struct.pack(">i", -1)).topics is None


def test_golden_write_txn_markers_v0() -> None:
    request = (
        struct.pack(">i", 1) + struct.pack(">qh?", 9, 1, True) + struct.pack(">i", 1) + _str("t")
        + struct.pack(">iii", 2, 0, 4) + struct.pack(">i", 3)  # coordinator_epoch
    )
    value = {"markers": [{"producer_id": 9, "producer_epoch": 1, "transaction_result": True,
                          "topics": [{"name": "t", "partition_indexes": [0, 4]}],
                          "coordinator_epoch": 3}]}
    assert encode_request(ApiKey.WRITE_TXN_MARKERS, 0, value) == request
    response = (struct.pack(">i", 1) + struct.pack(">q", 9) + struct.pack(">i", 1) + _str("t")
                + struct.pack(">i", 1) + struct.pack(">ih", 0, 0))
    decoded = decode_response(ApiKey.WRITE_TXN_MARKERS, 0, response)
    assert decoded.markers[0].topics[0].partitions[0].partition_index == 0


# Kafka's names where ours differ (KIP-890, KIP-848 renamed fields; the bytes are the same).
JSON_RENAMES = {
    (ApiKey.OFFSET_COMMIT, "request"): {"generation_id": "generation_id_or_member_epoch"},
    (ApiKey.ADD_PARTITIONS_TO_TXN, "request"): {
        "transactional_id": "v3_and_below_transactional_id",
        "producer_id": "v3_and_below_producer_id",
        "producer_epoch": "v3_and_below_producer_epoch",
        "topics": "v3_and_below_topics",
    },
    (ApiKey.ADD_PARTITIONS_TO_TXN, "response"): {
        "results": "results_by_topic_v3_and_below",
        "results.results": "results_by_partition",
        "error_code": "partition_error_code",
    },
}


# kafka-python turns authorized-operations bit fields into sets: compared as bytes only.
_BYTES_ONLY = {"authorized_operations", "topic_authorized_operations",
               "cluster_authorized_operations"}


def _kafka_name(f: F, path: str, renames) -> str:
    return renames.get(path + f.name, renames.get(f.name, f.name))


def _untagged(value, fields, version, renames, path=""):
    """A value without its tagged fields and bit fields (compared through the bytes), with
    Kafka's field names."""
    if value is None:
        return None
    out = {}
    for f in fields:
        if not in_range(version, f.versions) or f.tag is not None or f.name in _BYTES_ONLY:
            continue
        v = value[f.name]
        inner = f"{path}{f.name}."
        if f.type == "struct":
            v = _untagged(v, f.fields, version, renames, inner)
        elif f.fields and v is not None:
            v = [_untagged(i, f.fields, version, renames, inner) for i in v]
        elif f.type.startswith("[]") and v is not None:
            v = list(v)
        out[_kafka_name(f, path, renames)] = v
    return out


def _theirs(value, fields, version, renames, path=""):
    """kafka-python's to_dict() restricted the same way."""
    if value is None:
        return None
    out = {}
    for f in fields:
        if not in_range(version, f.versions) or f.tag is not None or f.name in _BYTES_ONLY:
            continue
        name = _kafka_name(f, path, renames)
        v = value.get(name)
        inner = f"{path}{f.name}."
        if f.type == "struct":
            v = _theirs(v, f.fields, version, renames, inner)
        elif f.fields and v is not None:
            v = [_theirs(i, f.fields, version, renames, inner) for i in v]
        out[name] = v
    return out


def _their_bytes(message) -> bytes:
    try:
        return message.encode()
    except AttributeError:  # some request classes want a header set first
        message.with_header()
        return message.encode()


@pytest.mark.parametrize("case", JSON_CASES, ids=_case_id)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_kafka_json_schemas_agree(case, data) -> None:
    key, version, direction = case
    fields = _fields(key, direction)
    renames = JSON_RENAMES.get((key, direction), {})
    value = data.draw(STRATEGIES[case])
    if (key, direction) == (ApiKey.API_VERSIONS, "response"):
        value = dict(value, error_code=0)  # an error answer is read as v0 (the fallback)
    ours = _encode(*case, value)
    decoded = _json_class(case).decode(ours, version=version)
    theirs = decoded.to_dict(json=False)
    assert _theirs(theirs, fields, version, renames) == _untagged(value, fields, version, renames)
    # their encoding of what they decoded (tagged fields included) is our bytes
    assert decoded.API_VERSION == version
    assert _their_bytes(decoded) == ours


@pytest.mark.parametrize("case", OLD_ONLY_CASES, ids=_case_id)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_kafka_python_old_classes_read_our_bytes(case, data) -> None:
    ours = _encode(*case, data.draw(STRATEGIES[case]))
    assert OLD[case].decode(ours).encode() == ours


# -- Produce: records as views ------------------------------------------------------------------


def test_fast_produce_records_are_writable_views_into_the_frame() -> None:
    for version in (3, 9):
        body = encode_request(ApiKey.PRODUCE, version, {
            "transactional_id": None, "acks": -1, "timeout_ms": 1,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"abcd"}]}],
        })
        frame = bytearray(body)
        records = decode_request(ApiKey.PRODUCE, version, frame).topic_data[0].partition_data[0].records
        records[0:1] = b"X"
        assert b"Xbcd" in frame
