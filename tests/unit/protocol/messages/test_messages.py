"""Message schemas: round trips, golden bytes, kafka-python as referee, bad input, broker fast paths.

Values for every registered schema are generated from the schema itself (``_values``); what makes
the layouts trustworthy is not the round trip but the golden bytes assembled with ``struct`` here
and the two independent referees from kafka-python 3.0.12: its hand-written 2.x protocol classes
(``kafka.protocol.old``, compared byte for byte) and its classes generated from Kafka's JSON
schemas (which decode our bytes and must find the same values under Kafka's field names).
"""

from __future__ import annotations

import importlib
import pkgutil
import struct
import warnings

import pytest
from construct import Container, ListContainer, Struct
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import primitives as P
from protocol.api_keys import ApiKey, VersionRange
from protocol.errors import CorruptFrameError, ErrorCode
from protocol.messages import (
    SCHEMAS,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from protocol.messages.api_versions import ADVERTISED, API_VERSIONS_FALLBACK_BODY, IMPLEMENTED
from protocol.messages.fetch import FetchResponseV4, encode_fetch_response_v4_parts
from protocol.messages.produce import (
    ProducePartition,
    ProduceRequest,
    ProduceRequestV3,
    ProduceResponseV3,
    ProduceTopic,
    decode_produce_request_v3_untrusted,
    encode_produce_response_v3,
)

with warnings.catch_warnings():  # kafka-python's import trips a DeprecationWarning
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol.old as kafka_old
    from kafka.protocol.api_message import ApiMessage
    from kafka.protocol.old.api import Request as OldRequest
    from kafka.protocol.old.api import Response as OldResponse
    from kafka.protocol.old.types import Array as OldArray
    from kafka.protocol.old.types import Schema as OldSchema

KEYS = sorted(SCHEMAS)
DIRECTIONS = ("request", "response")
CASES = [(key, version, d) for key, version in KEYS for d in DIRECTIONS]


def _case_id(case) -> str:
    key, version, direction = case
    return f"{ApiKey(key).name}-v{version}-{direction}"


def _encode(key: int, version: int, direction: str, value) -> bytes:
    return (encode_request if direction == "request" else encode_response)(key, version, value)


def _decode(key: int, version: int, direction: str, data, offset: int = 0):
    return (decode_request if direction == "request" else decode_response)(
        key, version, data, offset
    )


def _construct(key: int, version: int, direction: str):
    compiled = getattr(SCHEMAS[(key, version)], direction)
    return compiled.defersubcon  # the Struct it was compiled from


def plain(value):
    """Containers -> dicts, ListContainers -> lists (construct's internal ``_`` keys dropped)."""
    if isinstance(value, Container | dict):
        return {k: plain(v) for k, v in value.items() if not str(k).startswith("_")}
    if isinstance(value, ListContainer | list):
        return [plain(v) for v in value]
    return value


# -- values generated from a schema -------------------------------------------------------------

_INTS = {
    id(P.Int8): 8,
    id(P.Int16): 16,
    id(P.Int32): 32,
    id(P.Int64): 64,
}
_text = st.text(max_size=6)
_binary = st.binary(max_size=12)
_LEAVES = {
    id(P.Bool): st.booleans(),
    id(P.String): _text,
    id(P.NullableString): st.none() | _text,
    id(P.Bytes): _binary,
    id(P.NullableBytes): st.none() | _binary,
    id(P.CompactString): _text,
    id(P.CompactNullableString): st.none() | _text,
    id(P.TaggedFields): st.dictionaries(st.integers(0, 300), st.binary(max_size=4), max_size=2),
}


def _values(con) -> st.SearchStrategy:
    """A strategy for values of a construct built from protocol.primitives."""
    if isinstance(con, Struct):
        return st.fixed_dictionaries({sc.name: _values(sc.subcon) for sc in con.subcons})
    if id(con) in _INTS:
        bits = _INTS[id(con)]
        return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if id(con) in _LEAVES:
        return _LEAVES[id(con)]
    if isinstance(con, P._Array):
        items = st.lists(_values(con.subcon), max_size=3)
        return st.none() | items if con.nullable else items
    raise TypeError(f"no strategy for {con!r}")


STRATEGIES = {case: _values(_construct(*case)) for case in CASES}


# -- the table of versions ------------------------------------------------------------------------


def test_advertised_table_is_protocol_md_section_2() -> None:
    expected = {
        ApiKey.PRODUCE: 3,
        ApiKey.FETCH: 4,
        ApiKey.LIST_OFFSETS: 2,
        ApiKey.METADATA: 4,
        ApiKey.OFFSET_COMMIT: 2,
        ApiKey.OFFSET_FETCH: 2,
        ApiKey.FIND_COORDINATOR: 1,
        ApiKey.JOIN_GROUP: 2,
        ApiKey.HEARTBEAT: 0,
        ApiKey.LEAVE_GROUP: 0,
        ApiKey.SYNC_GROUP: 0,
        ApiKey.DESCRIBE_GROUPS: 0,
        ApiKey.LIST_GROUPS: 5,
        ApiKey.API_VERSIONS: 0,
        ApiKey.CREATE_TOPICS: 2,
        ApiKey.DELETE_TOPICS: 1,
        ApiKey.INIT_PRODUCER_ID: 3,
        ApiKey.ADD_PARTITIONS_TO_TXN: 0,
        ApiKey.ADD_OFFSETS_TO_TXN: 0,
        ApiKey.END_TXN: 0,
        ApiKey.TXN_OFFSET_COMMIT: 0,
        # Admin APIs beyond PROTOCOL.md section 2, for `minibroker transactions` (issue 3).
        ApiKey.DESCRIBE_TRANSACTIONS: 0,
        ApiKey.LIST_TRANSACTIONS: 1,
        # Admin APIs (issue 11): every version of Kafka's range, all implemented.
        ApiKey.DELETE_RECORDS: 2,
        ApiKey.DESCRIBE_CONFIGS: 4,
        ApiKey.ALTER_CONFIGS: 2,
        ApiKey.DESCRIBE_LOG_DIRS: 4,
        ApiKey.CREATE_PARTITIONS: 3,
        ApiKey.DELETE_GROUPS: 2,
        ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
        ApiKey.OFFSET_DELETE: 0,
        ApiKey.DESCRIBE_CLUSTER: 2,
        ApiKey.DESCRIBE_PRODUCERS: 0,
    }
    assert ADVERTISED == {key: VersionRange(0, pin) for key, pin in expected.items()}
    assert ApiKey.WRITE_TXN_MARKERS not in ADVERTISED


def test_implemented_is_exactly_the_registered_schemas() -> None:
    assert set(SCHEMAS) == set(IMPLEMENTED)
    assert (ApiKey.INIT_PRODUCER_ID, 0) in IMPLEMENTED
    assert (ApiKey.INIT_PRODUCER_ID, 3) in IMPLEMENTED
    assert (ApiKey.WRITE_TXN_MARKERS, 0) in IMPLEMENTED
    for key, version in IMPLEMENTED:
        if key in ADVERTISED:
            assert ADVERTISED[key].min <= version <= ADVERTISED[key].max


def test_api_versions_fallback_body() -> None:
    assert API_VERSIONS_FALLBACK_BODY == struct.pack(">hihhh", 35, 1, 18, 0, 0)
    # The client parses it with the v0 schema.
    decoded = decode_response(ApiKey.API_VERSIONS, 0, API_VERSIONS_FALLBACK_BODY)
    assert decoded.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert plain(decoded.api_keys) == [{"api_key": 18, "min_version": 0, "max_version": 0}]


# -- round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(case, data) -> None:
    value = data.draw(STRATEGIES[case])
    encoded = _encode(*case, value)
    decoded = _decode(*case, encoded)
    assert plain(decoded) == value
    assert _encode(*case, decoded) == encoded
    # A body inside a larger frame: decoding starts at the offset and ignores what follows
    # (as Kafka does).
    assert plain(_decode(*case, b"HDR" + encoded + b"tail", 3)) == value


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_truncation_is_corrupt(case, data) -> None:
    encoded = _encode(*case, data.draw(STRATEGIES[case]))
    for cut in range(len(encoded)):
        with pytest.raises(CorruptFrameError):
            _decode(*case, encoded[:cut])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@settings(max_examples=60)
@given(blob=st.binary(max_size=80))
def test_random_bytes_raise_only_corrupt_frame(case, blob: bytes) -> None:
    try:
        _decode(*case, blob)
    except CorruptFrameError:
        pass


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@settings(max_examples=60)
@given(data=st.data())
def test_mutated_messages_raise_only_corrupt_frame(case, data) -> None:
    encoded = bytearray(_encode(*case, data.draw(STRATEGIES[case])))
    if not encoded:
        return
    for _ in range(data.draw(st.integers(1, 4))):
        encoded[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(st.integers(0, 255))
    try:
        _decode(*case, bytes(encoded))
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
        # JoinGroup v2 response with members count -2
        (
            ApiKey.JOIN_GROUP,
            2,
            "response",
            struct.pack(">ihi", 0, 0, 1) + b"\x00\x00" * 3 + struct.pack(">i", -2),
        ),
        # SyncGroup v0 response with a null (non-nullable) assignment
        (ApiKey.SYNC_GROUP, 0, "response", struct.pack(">hi", 0, -1)),
        # InitProducerId v3 with a varint longer than 5 bytes in the tagged fields
        (
            ApiKey.INIT_PRODUCER_ID,
            3,
            "request",
            b"\x00" + struct.pack(">iqh", 1, -1, -1) + b"\xff" * 6 + b"\x00",
        ),
    ]
    for key, version, direction, data in bad:
        with pytest.raises(CorruptFrameError):
            _decode(key, version, direction, data)


# -- golden bytes, assembled by hand ------------------------------------------------------------


def _str(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def test_golden_produce_v3_request() -> None:
    batch = bytes(range(70))
    value = {
        "transactional_id": "txn-α",
        "acks": -1,
        "timeout_ms": 30_000,
        "topic_data": [
            {
                "name": "orders",
                "partition_data": [
                    {"index": 2, "records": batch},
                    {"index": 5, "records": None},
                ],
            }
        ],
    }
    golden = (
        _str("txn-α")
        + struct.pack(">hi", -1, 30_000)
        + struct.pack(">i", 1)
        + _str("orders")
        + struct.pack(">i", 2)
        + struct.pack(">i", 2)
        + _bytes(batch)
        + struct.pack(">ii", 5, -1)
    )
    assert encode_request(ApiKey.PRODUCE, 3, value) == golden
    assert plain(decode_request(ApiKey.PRODUCE, 3, golden)) == value
    null_id = dict(value, transactional_id=None, topic_data=[])
    assert encode_request(ApiKey.PRODUCE, 3, null_id) == b"\xff\xff" + struct.pack(
        ">hii", -1, 30_000, 0
    )


def test_golden_produce_v3_response() -> None:
    golden = (
        struct.pack(">i", 1)
        + _str("orders")
        + struct.pack(">i", 1)
        + struct.pack(">ihqq", 2, 0, 1234, -1)
        + struct.pack(">i", 0)
    )
    value = {
        "responses": [
            {
                "name": "orders",
                "partition_responses": [
                    {"index": 2, "error_code": 0, "base_offset": 1234, "log_append_time_ms": -1}
                ],
            }
        ],
        "throttle_time_ms": 0,
    }
    assert encode_response(ApiKey.PRODUCE, 3, value) == golden
    assert encode_produce_response_v3([("orders", [(2, 0, 1234, -1)])]) == golden


def test_golden_fetch_v4_response() -> None:
    golden = (
        struct.pack(">i", 7)  # throttle_time_ms
        + struct.pack(">i", 1)
        + _str("t")
        + struct.pack(">i", 2)
        + struct.pack(">ihqq", 0, 0, 10, 8)
        + struct.pack(">i", 1)
        + struct.pack(">qq", 1000, 3)
        + _bytes(b"abc")
        + struct.pack(">ihqq", 1, 1, -1, -1)
        + struct.pack(">i", -1)  # aborted_transactions null
        + struct.pack(">i", 0)  # records: empty, never null
    )
    value = {
        "throttle_time_ms": 7,
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": 10,
                        "last_stable_offset": 8,
                        "aborted_transactions": [{"producer_id": 1000, "first_offset": 3}],
                        "records": b"abc",
                    },
                    {
                        "partition_index": 1,
                        "error_code": 1,
                        "high_watermark": -1,
                        "last_stable_offset": -1,
                        "aborted_transactions": None,
                        "records": b"",
                    },
                ],
            }
        ],
    }
    assert encode_response(ApiKey.FETCH, 4, value) == golden
    decoded = decode_response(ApiKey.FETCH, 4, golden)
    assert plain(decoded) == value
    assert type(decoded.responses[0].partitions[0].records) is bytes
    parts = encode_fetch_response_v4_parts(
        7, [("t", [(0, 0, 10, 8, [(1000, 3)], b"abc"), (1, 1, -1, -1, None, b"")])]
    )
    assert b"".join(parts) == golden


def test_golden_fetch_v4_request() -> None:
    golden = (
        struct.pack(">iiiib", -1, 500, 1, 52_428_800, 1)
        + struct.pack(">i", 1)
        + _str("t")
        + struct.pack(">i", 1)
        + struct.pack(">iqi", 3, 42, 1_048_576)
    )
    decoded = decode_request(ApiKey.FETCH, 4, golden)
    assert decoded.isolation_level == 1
    assert decoded.topics[0].topic == "t"
    part = decoded.topics[0].partitions[0]
    assert (part.partition, part.fetch_offset, part.partition_max_bytes) == (3, 42, 1_048_576)
    assert encode_request(ApiKey.FETCH, 4, decoded) == golden


def test_golden_metadata_v4_response() -> None:
    golden = (
        struct.pack(">i", 0)
        + struct.pack(">i", 1)
        + struct.pack(">i", 1)
        + _str("localhost")
        + struct.pack(">i", 9092)
        + b"\xff\xff"  # rack null
        + _str("cluster-1")
        + struct.pack(">i", 1)  # controller_id
        + struct.pack(">i", 1)
        + struct.pack(">h", 0)
        + _str("orders")
        + b"\x00"  # is_internal
        + struct.pack(">i", 1)
        + struct.pack(">hii", 0, 0, 1)
        + struct.pack(">ii", 1, 1)  # replica_nodes [1]
        + struct.pack(">ii", 1, 1)  # isr_nodes [1]
    )
    value = {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}],
        "cluster_id": "cluster-1",
        "controller_id": 1,
        "topics": [
            {
                "error_code": 0,
                "name": "orders",
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": 0,
                        "leader_id": 1,
                        "replica_nodes": [1],
                        "isr_nodes": [1],
                    }
                ],
            }
        ],
    }
    assert encode_response(ApiKey.METADATA, 4, value) == golden
    assert plain(decode_response(ApiKey.METADATA, 4, golden)) == value
    # topics=null asks for all topics
    assert encode_request(
        ApiKey.METADATA, 4, {"topics": None, "allow_auto_topic_creation": True}
    ) == struct.pack(">i?", -1, True)


def test_golden_api_versions_v0() -> None:
    assert encode_request(ApiKey.API_VERSIONS, 0, {}) == b""
    value = {
        "error_code": 0,
        "api_keys": [
            {"api_key": int(k), "min_version": r.min, "max_version": r.max}
            for k, r in sorted(ADVERTISED.items())
        ],
    }
    golden = struct.pack(">hi", 0, len(ADVERTISED)) + b"".join(
        struct.pack(">hhh", k, r.min, r.max) for k, r in sorted(ADVERTISED.items())
    )
    assert encode_response(ApiKey.API_VERSIONS, 0, value) == golden
    assert plain(decode_response(ApiKey.API_VERSIONS, 0, golden)) == value


def test_golden_init_producer_id_v3() -> None:
    request = bytes([len("tx-1") + 1]) + b"tx-1" + struct.pack(">iqh", 60_000, 5, 2) + b"\x00"
    value = {
        "transactional_id": "tx-1",
        "transaction_timeout_ms": 60_000,
        "producer_id": 5,
        "producer_epoch": 2,
    }
    assert encode_request(ApiKey.INIT_PRODUCER_ID, 3, value) == request
    assert plain(decode_request(ApiKey.INIT_PRODUCER_ID, 3, request)) == {
        **value,
        "tagged_fields": {},
    }
    # null transactional_id is compact length 0; -1/-1 = no producer yet
    null_id = dict(value, transactional_id=None, producer_id=-1, producer_epoch=-1)
    assert encode_request(ApiKey.INIT_PRODUCER_ID, 3, null_id) == (
        b"\x00" + struct.pack(">iqh", 60_000, -1, -1) + b"\x00"
    )
    response = struct.pack(">ihqh", 0, 0, 5, 3) + b"\x00"
    assert (
        encode_response(
            ApiKey.INIT_PRODUCER_ID,
            3,
            {"throttle_time_ms": 0, "error_code": 0, "producer_id": 5, "producer_epoch": 3},
        )
        == response
    )
    # Unknown tagged fields from a newer peer are skipped (kept as raw bytes).
    with_tags = struct.pack(">ihqh", 0, 0, 5, 3) + b"\x01" + b"\x07\x02hi"
    assert decode_response(ApiKey.INIT_PRODUCER_ID, 3, with_tags).tagged_fields == {7: b"hi"}


def test_golden_init_producer_id_v0() -> None:
    assert encode_request(
        ApiKey.INIT_PRODUCER_ID, 0, {"transactional_id": None, "transaction_timeout_ms": 60_000}
    ) == b"\xff\xff" + struct.pack(">i", 60_000)


def test_golden_end_txn_v0() -> None:
    request = _str("tx-1") + struct.pack(">qhb", 5, 2, 1)
    value = {"transactional_id": "tx-1", "producer_id": 5, "producer_epoch": 2, "committed": True}
    assert encode_request(ApiKey.END_TXN, 0, value) == request
    assert plain(decode_request(ApiKey.END_TXN, 0, request)) == value
    abort = _str("tx-1") + struct.pack(">qhb", 5, 2, 0)
    assert decode_request(ApiKey.END_TXN, 0, abort).committed is False
    response = struct.pack(">ih", 0, 51)
    assert encode_response(ApiKey.END_TXN, 0, {"throttle_time_ms": 0, "error_code": 51}) == response
    assert decode_response(ApiKey.END_TXN, 0, response).error_code == 51


def test_golden_write_txn_markers_v0() -> None:
    request = (
        struct.pack(">i", 1)
        + struct.pack(">qh?", 9, 1, True)
        + struct.pack(">i", 1)
        + _str("t")
        + struct.pack(">iii", 2, 0, 4)
        + struct.pack(">i", 3)  # coordinator_epoch
    )
    value = {
        "markers": [
            {
                "producer_id": 9,
                "producer_epoch": 1,
                "transaction_result": True,
                "topics": [{"name": "t", "partition_indexes": [0, 4]}],
                "coordinator_epoch": 3,
            }
        ]
    }
    assert encode_request(ApiKey.WRITE_TXN_MARKERS, 0, value) == request


# -- kafka-python as the referee ----------------------------------------------------------------


def _old_classes() -> dict[tuple[int, int, str], type]:
    """kafka-python's hand-written 2.x protocol classes by (api_key, version, direction)."""
    found = {}
    for info in pkgutil.iter_modules(kafka_old.__path__):
        module = importlib.import_module(f"{kafka_old.__name__}.{info.name}")
        for obj in vars(module).values():
            if not isinstance(obj, type) or not hasattr(obj, "SCHEMA"):
                continue
            if issubclass(obj, OldRequest):
                direction = "request"
            elif issubclass(obj, OldResponse):
                direction = "response"
            else:
                continue
            if isinstance(obj.API_KEY, int) and isinstance(obj.API_VERSION, int):
                found[(obj.API_KEY, obj.API_VERSION, direction)] = obj
    return found


def _json_classes() -> dict[tuple[int, str], type]:
    """kafka-python's classes generated from Kafka's JSON message schemas."""
    found = {}
    for package in ("producer", "consumer", "metadata", "admin"):
        module = importlib.import_module(f"kafka.protocol.{package}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage:
                found[(obj.API_KEY, obj.type)] = obj
    return found


with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    OLD = _old_classes()
    JSON = _json_classes()

# kafka-python's hand-written DescribeLogDirsRequest_v0 declares "partitions" as one int32 where
# Kafka's schema has []int32, and its CreatePartitionsRequest v0/v1 nest count and assignments in
# a sub-struct (same bytes, other shape): the JSON-generated classes referee those cases instead.
OLD_WRONG = {
    (ApiKey.DESCRIBE_LOG_DIRS, 0, "request"),
    (ApiKey.CREATE_PARTITIONS, 0, "request"),
    (ApiKey.CREATE_PARTITIONS, 1, "request"),
}
OLD_CASES = [c for c in CASES if c in OLD and c not in OLD_WRONG]


def test_every_case_has_a_kafka_python_referee() -> None:
    # The old classes stop at InitProducerId v1 and have no WriteTxnMarkers nor most admin APIs;
    # the classes generated from Kafka's JSON schemas referee those.
    assert {c[:2] for c in CASES if c not in OLD_CASES} >= {
        (ApiKey.INIT_PRODUCER_ID, 3), (ApiKey.WRITE_TXN_MARKERS, 0),
        (ApiKey.DESCRIBE_TRANSACTIONS, 0), (ApiKey.LIST_TRANSACTIONS, 0),
    }
    assert [c for c in CASES if c not in OLD_CASES and (c[0], c[2]) not in JSON] == []


def _positional(con, value, theirs):
    """Our value as the nested tuples kafka-python's old ``Schema`` ``theirs`` takes.

    Goes by position, not by name (kafka-python's old names differ here and there).
    """
    if isinstance(con, Struct):
        if not isinstance(theirs, OldSchema):  # e.g. Metadata's topics: [name] vs [String]
            (only,) = con.subcons
            return _positional(only.subcon, value[only.name], theirs)
        assert len(con.subcons) == len(theirs.fields)
        return tuple(
            _positional(sc.subcon, value[sc.name], field)
            for sc, field in zip(con.subcons, theirs.fields, strict=True)
        )
    if isinstance(con, P._Array):
        assert isinstance(theirs, OldArray)
        return (
            None if value is None else [_positional(con.subcon, v, theirs.array_of) for v in value]
        )
    return value


@pytest.mark.parametrize("case", OLD_CASES, ids=_case_id)
@settings(max_examples=40)
@given(data=st.data())
def test_same_bytes_as_kafka_python_old_classes(case, data) -> None:
    con = _construct(*case)
    value = data.draw(STRATEGIES[case])
    ours = _encode(*case, value)
    theirs = OLD[case](*_positional(con, value, OLD[case].SCHEMA)).encode()
    assert ours == theirs
    # and kafka-python reads our bytes back to the same values
    assert OLD[case].decode(ours).encode() == ours


# Kafka renamed some fields after the versions we pin (KIP-890, KIP-848); the bytes are the same.
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
        "error_code": "partition_error_code",
    },
}


def _rename(value, renames: dict[str, str], inner_results: bool = False):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "tagged_fields":  # kafka-python keeps unknown tags out of to_dict()
                continue
            name = renames.get(k, k)
            if inner_results and k == "results":
                name = "results_by_partition"
            out[name] = _rename(
                v, renames, inner_results or name == "results_by_topic_v3_and_below"
            )
        return out
    if isinstance(value, list):
        return [_rename(v, renames, inner_results) for v in value]
    return value


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@settings(max_examples=40)
@given(data=st.data())
def test_kafka_json_schemas_decode_our_bytes(case, data) -> None:
    key, version, direction = case
    value = data.draw(STRATEGIES[case])
    if case[:2] == (ApiKey.INIT_PRODUCER_ID, 3):
        value = dict(value, tagged_fields={})  # kafka-python rejects tags it does not know
    decoded = (
        JSON[(key, direction)].decode(_encode(*case, value), version=version).to_dict(json=False)
    )
    expected = _rename(value, JSON_RENAMES.get((key, direction), {}))
    if (key, direction) == (ApiKey.DESCRIBE_CLUSTER, "response"):
        # kafka-python turns the bit field into a set of operation names
        operations = decoded.pop("authorized_operations")
        bits = expected.pop("cluster_authorized_operations")
        assert bits == -(1 << 31) or len(operations) == bin(bits & 0xFFFFFFFF).count("1")
    assert decoded == expected


def test_kafka_python_encodes_init_producer_id_v3_like_us() -> None:
    cls = JSON[(ApiKey.INIT_PRODUCER_ID, "request")]
    for tid, pid, epoch in (("tx-1", 5, 2), (None, -1, -1), ("é" * 40, 1 << 40, 32767)):
        theirs = cls[3](
            transactional_id=tid,
            transaction_timeout_ms=60_000,
            producer_id=pid,
            producer_epoch=epoch,
        ).encode()
        value = {
            "transactional_id": tid,
            "transaction_timeout_ms": 60_000,
            "producer_id": pid,
            "producer_epoch": epoch,
        }
        assert encode_request(ApiKey.INIT_PRODUCER_ID, 3, value) == theirs
    response = JSON[(ApiKey.INIT_PRODUCER_ID, "response")][3](
        throttle_time_ms=1, error_code=59, producer_id=7, producer_epoch=0
    ).encode()
    assert plain(decode_response(ApiKey.INIT_PRODUCER_ID, 3, response)) == {
        "throttle_time_ms": 1,
        "error_code": 59,
        "producer_id": 7,
        "producer_epoch": 0,
        "tagged_fields": {},
    }


# -- Produce fast path ----------------------------------------------------------------------------

_produce_requests = _values(ProduceRequestV3)


def _expected_fast(value) -> ProduceRequest:
    return ProduceRequest(
        value["transactional_id"],
        value["acks"],
        value["timeout_ms"],
        [
            ProduceTopic(
                t["name"], [ProducePartition(p["index"], p["records"]) for p in t["partition_data"]]
            )
            for t in value["topic_data"]
        ],
    )


def _fast_as_plain(request: ProduceRequest) -> ProduceRequest:
    topics = [
        ProduceTopic(
            t.name,
            [
                ProducePartition(p.index, None if p.records is None else bytes(p.records))
                for p in t.partitions
            ],
        )
        for t in request.topics
    ]
    return request._replace(topics=topics)


@settings(max_examples=200)
@given(value=_produce_requests, prefix=st.binary(max_size=8), suffix=st.binary(max_size=8))
def test_fast_produce_decoder_agrees_with_schema(value, prefix: bytes, suffix: bytes) -> None:
    frame = bytearray(prefix + ProduceRequestV3.build(value) + suffix)
    fast = decode_produce_request_v3_untrusted(frame, len(prefix))
    assert _fast_as_plain(fast) == _expected_fast(value)
    assert _expected_fast(plain(decode_request(ApiKey.PRODUCE, 3, frame, len(prefix)))) == (
        _expected_fast(value)
    )


def test_fast_produce_records_are_writable_views_into_the_frame() -> None:
    batch = bytes(300_000)
    value = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}],
    }
    frame = bytearray(b"header" + ProduceRequestV3.build(value))
    request = decode_produce_request_v3_untrusted(frame, 6)
    records = request.topics[0].partitions[0].records
    assert isinstance(records, memoryview)
    assert records.obj is frame and not records.readonly
    records[0:8] = struct.pack(">q", 1234)  # the broker patches baseOffset in place
    start = len(frame) - len(batch)
    assert frame[start : start + 8] == struct.pack(">q", 1234)


def _agree_on(frame: bytes, offset: int = 0) -> None:
    """Both Produce decoders accept ``frame`` with equal results, or both reject it."""
    try:
        slow = _expected_fast(plain(decode_request(ApiKey.PRODUCE, 3, frame, offset)))
    except CorruptFrameError:
        slow = None
    try:
        fast = _fast_as_plain(decode_produce_request_v3_untrusted(bytearray(frame), offset))
    except CorruptFrameError:
        fast = None
    assert fast == slow


@settings(max_examples=100, deadline=None)
@given(value=_produce_requests)
def test_fast_produce_decoder_rejects_the_same_truncations(value) -> None:
    encoded = ProduceRequestV3.build(value)
    for cut in range(len(encoded)):
        with pytest.raises(CorruptFrameError):
            decode_produce_request_v3_untrusted(bytearray(encoded[:cut]), 0)
        _agree_on(encoded[:cut])


@settings(max_examples=300)
@given(data=st.data())
def test_fast_produce_decoder_agrees_on_mutations(data) -> None:
    encoded = bytearray(ProduceRequestV3.build(data.draw(_produce_requests)))
    for _ in range(data.draw(st.integers(1, 3))):
        encoded[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(st.integers(0, 255))
    _agree_on(bytes(encoded))


@settings(max_examples=300)
@given(blob=st.binary(max_size=60))
def test_fast_produce_decoder_agrees_on_random_bytes(blob: bytes) -> None:
    _agree_on(blob)


def test_fast_produce_decoder_bad_inputs() -> None:
    head = struct.pack(">hhii", -1, 1, 1000, 1) + _str("t") + struct.pack(">i", 1)
    for frame in (
        b"\xff\xfe" + struct.pack(">hii", 1, 1000, 0),  # transactional_id length -2
        struct.pack(">hhii", -1, 1, 1000, -1),  # topic count -1
        struct.pack(">hhii", -1, 1, 1000, 1) + b"\xff\xff" + struct.pack(">i", 0),  # null name
        struct.pack(">hhii", -1, 1, 1000, 1) + _str("t") + struct.pack(">i", -5),
        head + struct.pack(">ii", 0, -2),  # records length -2
        head + struct.pack(">ii", 0, 10) + b"short",  # records past the end
        struct.pack(">h", 2) + b"\xc3\x28" + struct.pack(">hii", 1, 1000, 0),  # bad UTF-8
    ):
        with pytest.raises(CorruptFrameError):
            decode_produce_request_v3_untrusted(bytearray(frame), 0)
        _agree_on(frame)
    ok = head + struct.pack(">ii", 0, -1)  # null records decode as None
    assert decode_produce_request_v3_untrusted(bytearray(ok), 0).topics[0].partitions[0] == (
        ProducePartition(0, None)
    )


_produce_responses = st.lists(
    st.tuples(
        _text,
        st.lists(
            st.tuples(
                st.integers(-(2**31), 2**31 - 1),
                st.integers(-(2**15), 2**15 - 1),
                st.integers(-(2**63), 2**63 - 1),
                st.integers(-(2**63), 2**63 - 1),
            ),
            max_size=3,
        ),
    ),
    max_size=3,
)


@settings(max_examples=200)
@given(responses=_produce_responses, throttle=st.integers(0, 2**31 - 1))
def test_fast_produce_response_matches_schema(responses, throttle: int) -> None:
    value = {
        "responses": [
            {
                "name": name,
                "partition_responses": [
                    {
                        "index": index,
                        "error_code": error,
                        "base_offset": base,
                        "log_append_time_ms": append_time,
                    }
                    for index, error, base, append_time in partitions
                ],
            }
            for name, partitions in responses
        ],
        "throttle_time_ms": throttle,
    }
    assert encode_produce_response_v3(responses, throttle) == ProduceResponseV3.build(value)


# -- Fetch fast path ------------------------------------------------------------------------------

_fetch_partitions = st.tuples(
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**15), 2**15 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.none()
    | st.lists(
        st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1)), max_size=3
    ),
    st.binary(max_size=40) | st.binary(max_size=40).map(lambda b: memoryview(bytearray(b))),
)
_fetch_topics = st.lists(st.tuples(_text, st.lists(_fetch_partitions, max_size=3)), max_size=3)


@settings(max_examples=200)
@given(topics=_fetch_topics, throttle=st.integers(0, 2**31 - 1))
def test_fetch_parts_decode_to_the_same_values(topics, throttle: int) -> None:
    parts = encode_fetch_response_v4_parts(throttle, topics)
    body = b"".join(parts)
    assert sum(len(p) for p in parts) == len(body)
    decoded = plain(FetchResponseV4.parse(body))
    assert decoded == {
        "throttle_time_ms": throttle,
        "responses": [
            {
                "topic": name,
                "partitions": [
                    {
                        "partition_index": index,
                        "error_code": error,
                        "high_watermark": hw,
                        "last_stable_offset": lso,
                        "aborted_transactions": None
                        if aborted is None
                        else [{"producer_id": p, "first_offset": f} for p, f in aborted],
                        "records": bytes(records),
                    }
                    for index, error, hw, lso, aborted, records in partitions
                ],
            }
            for name, partitions in topics
        ],
    }
    # every non-empty records buffer is one of the parts, as it is
    for _, partitions in topics:
        for *_, records in partitions:
            if len(records):
                assert any(p is records for p in parts)


def test_fetch_parts_keep_large_records_uncopied_and_never_send_null() -> None:
    big = memoryview(bytearray(3 * 1024 * 1024))
    parts = encode_fetch_response_v4_parts(
        0, [("t", [(0, 0, 5, 5, [], big), (1, 0, 0, 0, None, b""), (2, 0, 0, 0, None, None)])]
    )
    assert sum(1 for p in parts if p is big) == 1
    assert max(len(p) for p in parts if p is not big) < 200
    decoded = FetchResponseV4.parse(b"".join(parts))
    assert [p.records for p in decoded.responses[0].partitions[1:]] == [b"", b""]
    # aborted_transactions null, records a 0-length field (a null would not parse above either)
    assert b"".join(parts).endswith(struct.pack(">ii", -1, 0))
    # memoryviews of wider items are counted in bytes
    wide = memoryview(bytearray(b"12345678")).cast("I")
    parts = encode_fetch_response_v4_parts(0, [("t", [(0, 0, 0, 0, None, wide)])])
    body = b"".join(parts)
    assert sum(len(p) for p in parts) == len(body)
    assert FetchResponseV4.parse(body).responses[0].partitions[0].records == b"12345678"
