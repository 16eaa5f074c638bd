"""The generated codecs (``protocol/messages/_codegen.py``) against the declared codecs, the
specification, for every version of every API of ``FAST_APIS``: the same values from the same
bytes, the same rejections of truncated, mutated and hostile bytes (the array-element budget
included), the same bytes from the same responses (tagged fields included). For the responses
that carry records (``RECORDS_APIS``: Fetch), the same for the parts encoder (records passed
through as chunks, unread) and the response decoder (records as views)."""

from __future__ import annotations

import functools
import os
import struct

import pytest
from construct import Container
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
from protocol.messages._codegen import (
    _NAMESPACE,
    FAST_APIS,
    RECORDS_APIS,
    _Source,
    request_decoder,
    response_decoder,
    response_encoder,
    response_parts_encoder,
)
from protocol.messages._declare import APIS
from protocol.messages._registry import (
    MAX_REQUEST_ARRAY_ELEMENTS,
    decode_request_declared,
    decode_response_declared,
    encode_response_declared,
)
from protocol.messages.api_versions import SERVED
from tests.unit.protocol.messages.test_messages import values_for

KEYS = FAST_APIS
CASES = [(key, v) for key in KEYS for v in APIS[key].versions]


def _n(examples: int) -> int:
    """Examples per (api, version): about 140 of them, each run by six properties, on a shared
    2-core machine; ``HYPOTHESIS_EXAMPLES_SCALE`` (say 8) runs the full counts."""
    return max(4, examples * int(os.environ.get("HYPOTHESIS_EXAMPLES_SCALE", "1")) // 8)


def _id(case) -> str:
    key, version = case
    return f"{ApiKey(key).name}-v{version}"


def _flexible(key: int, version: int) -> bool:
    return APIS[ApiKey(key)].is_flexible(version)


def test_every_served_version_has_both_generated_codecs() -> None:
    for key in KEYS:
        served = SERVED[key].versions
        for v in range(served.min, served.max + 1):
            schema = SCHEMAS[(key, v)]
            assert schema.fast_request is not None and schema.fast_response is not None
    for key, version in CASES:  # every declared version generates (and compiles)
        request_decoder(key, version)
        response_encoder(key, version)
    for key in RECORDS_APIS:
        served = SERVED[key].versions
        for v in range(served.min, served.max + 1):
            schema = SCHEMAS[(key, v)]
            assert schema.fast_response_parts is not None
            assert schema.fast_response_decoder is not None


@functools.cache
def _generated(make, key: int, version: int):
    """The generated codec itself (not the registry, which falls back to the declared one)."""
    return make(key, version)[0]


# -- values -----------------------------------------------------------------------------------------

_tags = st.dictionaries(
    st.integers(0, 40) | st.integers(0, 2**35 - 1), st.binary(max_size=6), max_size=3)


def _with_tags(value, data):
    """``value`` (a generated message of a flexible version) with unknown tagged fields drawn
    into some of its structs: the declared encoder writes ``tagged_fields`` raw."""
    if isinstance(value, dict):
        out = {k: _with_tags(v, data) for k, v in value.items()}
        if data.draw(st.booleans()):
            out["tagged_fields"] = data.draw(_tags)
        return out
    if isinstance(value, list):
        return [_with_tags(v, data) for v in value]
    return value


def _draw(data, key: int, version: int, direction: str):
    value = data.draw(values_for(key, version, direction))
    if _flexible(key, version) and data.draw(st.booleans()):
        value = _with_tags(value, data)
    return value


def _same(fast, declared) -> None:
    """Equal, with the same keys in the same order and the same leaf types (arrays are lists, the
    declared codec's ListContainer a list subclass); structs are Containers whose every field
    reads as an attribute through a property."""
    if isinstance(declared, Container):
        assert isinstance(fast, Container)
        assert list(fast) == list(declared)
        for k in declared:
            if hasattr(Container, k):  # a field named like a dict method stays an item
                continue
            assert isinstance(getattr(type(fast), k, None), property), k
            assert getattr(fast, k) is fast[k]
        assert not hasattr(fast, "not_a_field")
        for k in declared:
            _same(fast[k], declared[k])
    elif isinstance(declared, dict):  # tagged_fields
        assert type(fast) is dict
        assert list(fast) == list(declared)
        for k in declared:
            _same(fast[k], declared[k])
    elif isinstance(declared, list):
        assert isinstance(fast, list)
        assert len(fast) == len(declared)
        for a, b in zip(fast, declared, strict=True):
            _same(a, b)
    elif isinstance(fast, memoryview):  # a records field: a view into the frame
        assert type(declared) is bytes
        assert fast.tobytes() == declared
    else:
        assert type(fast) is type(declared)
        assert fast == declared


def _outcome(decode, key: int, version: int, data, offset: int = 0):
    try:
        if decode.__name__ == "decode":  # a generated decoder: (frame, offset, version)
            return decode(data, offset, version)
        return decode(key, version, data, offset)
    except CorruptFrameError:
        return CorruptFrameError


def _agree(key: int, version: int, data, offset: int = 0, which: str = "request"):
    if which == "request":
        declared = _outcome(decode_request_declared, key, version, bytes(data), offset)
        fast = _outcome(decode_request, key, version, bytearray(data), offset)
    else:
        declared = _outcome(decode_response_declared, key, version, bytes(data), offset)
        fast = _outcome(_generated(response_decoder, key, version), key, version,
                        bytearray(data), offset)
    if declared is CorruptFrameError:
        assert fast is CorruptFrameError
    else:
        assert fast is not CorruptFrameError, declared
        _same(fast, declared)
    return declared


# -- requests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=_id)
@settings(max_examples=_n(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), prefix=st.binary(max_size=6), suffix=st.binary(max_size=6))
def test_fast_request_decoder_agrees_with_declared(case, data, prefix, suffix) -> None:
    key, version = case
    body = encode_request(key, version, _draw(data, key, version, "request"))
    assert _agree(key, version, prefix + body + suffix, len(prefix)) is not CorruptFrameError
    for cut in range(len(body)):
        assert _agree(key, version, body[:cut]) is CorruptFrameError


_mutations = st.lists(
    st.tuples(st.sampled_from(("set", "insert", "delete")), st.integers(0, 10_000),
              st.integers(0, 255) | st.sampled_from((0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF))),
    min_size=1, max_size=4,
)


@pytest.mark.parametrize("case", CASES, ids=_id)
@settings(max_examples=_n(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), mutations=_mutations)
def test_fast_request_decoder_agrees_on_mutated_bytes(case, data, mutations) -> None:
    key, version = case
    body = bytearray(encode_request(key, version, _draw(data, key, version, "request")))
    for op, where, byte in mutations:
        at = where % (len(body) + 1)
        if op == "insert":
            body[at:at] = bytes([byte])
        elif at < len(body):
            if op == "set":
                body[at] = byte
            else:
                del body[at]
    _agree(key, version, body)


@pytest.mark.parametrize("case", CASES, ids=_id)
@settings(max_examples=_n(40), deadline=None)
@given(blob=st.binary(max_size=80))
def test_fast_request_decoder_agrees_on_random_bytes(case, blob: bytes) -> None:
    _agree(*case, blob)


def _str(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def _cstr(s: str) -> bytes:
    raw = s.encode()
    return bytes([len(raw) + 1]) + raw


HOSTILE = [
    # null (-1) and negative (-2) lengths where the declaration is not nullable
    (ApiKey.END_TXN, 0, b"\xff\xff" + struct.pack(">qh?", 1, 0, True)),
    (ApiKey.END_TXN, 1, b"\xff\xfe" + struct.pack(">qh?", 1, 0, True)),
    (ApiKey.END_TXN, 3, b"\x00" + struct.pack(">qh?", 1, 0, True) + b"\x00"),
    (ApiKey.ADD_OFFSETS_TO_TXN, 0, _str("t") + struct.pack(">qh", 1, 0) + b"\xff\xff"),
    (ApiKey.ADD_OFFSETS_TO_TXN, 4, _cstr("t") + struct.pack(">qh", 1, 0) + b"\x00\x00"),
    (ApiKey.ADD_PARTITIONS_TO_TXN, 0, _str("t") + struct.pack(">qhi", 1, 0, -1)),
    (ApiKey.ADD_PARTITIONS_TO_TXN, 2, _str("t") + struct.pack(">qhi", 1, 0, -(2**31))),
    (ApiKey.ADD_PARTITIONS_TO_TXN, 1,
     _str("t") + struct.pack(">qhi", 1, 0, 1) + _str("a") + struct.pack(">i", -1)),
    (ApiKey.ADD_PARTITIONS_TO_TXN, 3, _cstr("t") + struct.pack(">qh", 1, 0) + b"\x00\x00"),
    (ApiKey.ADD_PARTITIONS_TO_TXN, 3,
     _cstr("t") + struct.pack(">qh", 1, 0) + b"\x02" + b"\x00" + b"\x01\x00\x00"),
    (ApiKey.ADD_PARTITIONS_TO_TXN, 3,
     _cstr("t") + struct.pack(">qh", 1, 0) + b"\x02" + _cstr("a") + b"\x00\x00\x00"),
    (ApiKey.TXN_OFFSET_COMMIT, 0,
     _str("t") + _str("g") + struct.pack(">qhi", 1, 0, 1) + _str("a") + struct.pack(">i", 1)
     + struct.pack(">iq", 0, 5) + b"\xff\xfe"),
    (ApiKey.TXN_OFFSET_COMMIT, 3,  # a null member id
     _cstr("t") + _cstr("g") + struct.pack(">qhi", 1, 0, 1) + b"\x00" + b"\x00" + b"\x01\x00"),
    # counts the element budget refuses at once, without reading (or allocating) them
    (ApiKey.ADD_PARTITIONS_TO_TXN, 0, _str("t") + struct.pack(">qhi", 1, 0, 2**31 - 1)),
    (ApiKey.ADD_PARTITIONS_TO_TXN, 3,
     _cstr("t") + struct.pack(">qh", 1, 0) + b"\x02" + _cstr("a") + b"\xff\xff\xff\xff\x0f"),
    (ApiKey.TXN_OFFSET_COMMIT, 2,
     _str("t") + _str("g") + struct.pack(">qhi", 1, 0, 1) + _str("a") + struct.pack(">i", 50_000)),
    # varints longer than 5 bytes, a tagged field running past the end, invalid UTF-8
    (ApiKey.END_TXN, 5, b"\xff" * 6 + struct.pack(">qh?", 1, 0, True) + b"\x00"),
    (ApiKey.END_TXN, 4, _cstr("t") + struct.pack(">qh?", 1, 0, True) + b"\x01\x05\x10ab"),
    (ApiKey.END_TXN, 3, _cstr("t") + struct.pack(">qh?", 1, 0, True) + b"\x80" * 5 + b"\x01"),
    (ApiKey.END_TXN, 0, b"\x00\x02\xc3\x28" + struct.pack(">qh?", 1, 0, True)),
    (ApiKey.ADD_OFFSETS_TO_TXN, 3, b"\x03\xed\xa0" + struct.pack(">qh", 1, 0) + _cstr("g") + b"\0"),
]


@pytest.mark.parametrize("key, version, data", HOSTILE)
def test_fast_request_decoder_rejects_what_the_declared_one_rejects(key, version, data) -> None:
    assert _agree(key, version, data) is CorruptFrameError
    with pytest.raises(CorruptFrameError):
        decode_request(key, version, data)


@pytest.mark.parametrize("size", [0, 1, 126, 127, 128, 16_382, 16_383, 16_384, None])
def test_record_lengths_read_inline_agree_with_the_declared_decoder(size) -> None:
    # the generated decoder reads one- and two-byte compact lengths itself (a small batch's);
    # null, three-byte lengths and every truncation go through its helper
    records = None if size is None else os.urandom(size)
    body = encode_request(ApiKey.PRODUCE, 9, {
        "transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": records}]}]})
    decoded = _agree(ApiKey.PRODUCE, 9, body)
    assert decoded.topic_data[0].partition_data[0].records == records
    assert decoded.transactional_id is None
    # cut short in the length, at the records' first and last bytes
    records_end = len(body) - 3  # then the partition's, topic's and request's empty tag sections
    records_start = records_end - (size or 0)
    for end in {*range(records_start - 3, records_start + 2), records_end - 1, records_end}:
        assert _agree(ApiKey.PRODUCE, 9, body[:end]) is CorruptFrameError


def _add_partitions(version: int, counts: list[int]) -> dict:
    return {"transactional_id": "t", "producer_id": 1, "producer_epoch": 0,
            "topics": [{"name": f"t{i}", "partitions": list(range(n))}
                       for i, n in enumerate(counts)]}


def _txn_offsets(version: int, counts: list[int]) -> dict:
    return {"transactional_id": "t", "group_id": "g", "producer_id": 1, "producer_epoch": 0,
            "member_id": "m", "topics": [
                {"name": f"t{i}", "partitions": [
                    {"partition_index": p, "committed_offset": p, "committed_metadata": None}
                    for p in range(n)]}
                for i, n in enumerate(counts)]}


@pytest.mark.parametrize("key, version, build", [
    (ApiKey.ADD_PARTITIONS_TO_TXN, 0, _add_partitions),
    (ApiKey.ADD_PARTITIONS_TO_TXN, 3, _add_partitions),
    (ApiKey.TXN_OFFSET_COMMIT, 2, _txn_offsets),
    (ApiKey.TXN_OFFSET_COMMIT, 5, _txn_offsets),
])
def test_the_element_budget_holds_for_all_arrays_together(key, version, build) -> None:
    # two topics: the budget counts the topics and every partition of both
    half = MAX_REQUEST_ARRAY_ELEMENTS // 2
    fits = encode_request(key, version, build(version, [half - 1, half - 1]))
    assert len(_agree(key, version, fits).topics[1].partitions) == half - 1
    over = encode_request(key, version, build(version, [half - 1, half]))
    assert _agree(key, version, over) is CorruptFrameError


def test_decoded_values_are_what_the_handlers_read() -> None:
    v0 = decode_request(ApiKey.TXN_OFFSET_COMMIT, 0, encode_request(
        ApiKey.TXN_OFFSET_COMMIT, 0, _txn_offsets(0, [1])))
    # the fields v0 lacks at the declaration's defaults, read as the groups handler does
    assert (v0.get("generation_id", 0), v0.get("member_id"), v0.get("group_instance_id", 1)) == (
        -1, "", None)
    assert v0.topics[0].partitions[0].committed_leader_epoch == -1
    v0.topics = []  # the handlers narrow the topics in place (groups._split_topics)
    assert v0.topics == [] and v0["topics"] == []
    assert not hasattr(v0, "tagged_fields")  # a non-flexible version has none
    end = decode_request(ApiKey.END_TXN, 3, encode_request(ApiKey.END_TXN, 3, {
        "transactional_id": "tx", "producer_id": 7, "producer_epoch": 2, "committed": True}))
    assert (end.transactional_id, end.producer_id, end.producer_epoch, end.committed) == (
        "tx", 7, 2, True)
    assert end.tagged_fields == {}
    # any nonzero byte is true, as in the declared codec
    odd = _cstr("tx") + struct.pack(">qhB", 7, 2, 0x80) + b"\x00"
    assert decode_request(ApiKey.END_TXN, 3, odd).committed is True


# -- responses --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=_id)
@settings(max_examples=_n(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_response_encoder_writes_the_declared_bytes(case, data) -> None:
    key, version = case
    value = _draw(data, key, version, "response")
    declared = encode_response_declared(key, version, value)
    assert _generated(response_encoder, key, version)(value, version) == declared
    assert encode_response(key, version, value) == declared


def _leave_out(value, data):
    """``value`` with some fields left out (written as their defaults) and some foreign ones."""
    if isinstance(value, dict):
        out = {k: v if k == "tagged_fields" else _leave_out(v, data)
               for k, v in value.items() if data.draw(st.booleans())}
        if data.draw(st.booleans()):
            out["not_a_field"] = 1
        return out
    if isinstance(value, list):
        return [_leave_out(v, data) for v in value]
    return value


@pytest.mark.parametrize("case", CASES, ids=_id)
@settings(max_examples=_n(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_response_encoder_defaults_missing_fields(case, data) -> None:
    key, version = case
    value = _leave_out(_draw(data, key, version, "response"), data)
    assert encode_response(key, version, value) == encode_response_declared(key, version, value)


_BAD_VALUES = [None, -(2**40), 2**40, 1.5, "1", b"x", [1], {}]


@pytest.mark.parametrize("case", CASES, ids=_id)
@settings(max_examples=_n(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_response_encoder_fails_as_the_declared_one(case, data) -> None:
    key, version = case
    value = data.draw(values_for(key, version, "response"))
    # one field, anywhere in the value, gets a value of a wrong type or out of range
    paths = []

    def walk(v, path):
        if isinstance(v, dict):
            for k, x in v.items():
                paths.append((*path, k))
                walk(x, (*path, k))
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, (*path, i))

    walk(value, ())
    path = data.draw(st.sampled_from(paths))
    target = value
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = data.draw(st.sampled_from(_BAD_VALUES))
    try:
        expected = encode_response_declared(key, version, value)
    except Exception as exc:  # noqa: BLE001 - whatever the declared codec raises
        with pytest.raises(type(exc)):
            encode_response(key, version, value)
    else:
        assert encode_response(key, version, value) == expected


def test_fields_a_struct_leaves_out_are_written_at_once_or_one_by_one() -> None:
    # a Produce partition answer without record errors and error message (constant bytes), and
    # with each of them given, even at its default
    base = {"index": 1, "error_code": 0, "base_offset": 7, "log_append_time_ms": -1,
            "log_start_offset": 0}
    errors = [{"batch_index": 0, "batch_index_error_message": "bad"}]
    for extra in ({}, {"record_errors": []}, {"error_message": None}, {"error_message": "x"},
                  {"record_errors": errors}, {"tagged_fields": {}}, {"tagged_fields": {9: b"z"}}):
        value = {"responses": [{"name": "t", "partition_responses": [{**base, **extra}]}],
                 "throttle_time_ms": 0}
        for version in (9, 10, 11):
            assert encode_response(ApiKey.PRODUCE, version, value) == \
                encode_response_declared(ApiKey.PRODUCE, version, value), (extra, version)
    assert "isdisjoint" in response_encoder(ApiKey.PRODUCE, 9)[1]


def test_generated_names_never_hide_the_helpers() -> None:
    # the 16th constant of a source was once named P16, hiding the int16 packer of string
    # lengths (Metadata v1's encoder wrote a topic name's length as one byte)
    src = _Source("names")
    names = [src.fresh(prefix) for prefix in ("P", "I", "S") for _ in range(40)]
    assert not set(names) & set(_NAMESPACE)


def test_handler_shaped_responses() -> None:
    # what broker/handlers/txn.py and groups.py return: plain dicts, ErrorCode members
    cases = [
        (ApiKey.ADD_PARTITIONS_TO_TXN, {"throttle_time_ms": 0, "results": [{"name": "t", "results": [
            {"partition_index": 0, "error_code": ErrorCode.NONE},
            {"partition_index": 1, "error_code": ErrorCode.PRODUCER_FENCED}]}]}),
        (ApiKey.ADD_OFFSETS_TO_TXN, {"throttle_time_ms": 0, "error_code": ErrorCode.NONE}),
        (ApiKey.END_TXN, {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_TXN_STATE}),
        (ApiKey.END_TXN, {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
                          "producer_id": 12, "producer_epoch": 3}),
        (ApiKey.TXN_OFFSET_COMMIT, {"throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [
            {"partition_index": 4, "error_code": ErrorCode.UNKNOWN_MEMBER_ID}]}]}),
    ]
    for key, value in cases:
        for version in APIS[key].versions:
            fast = encode_response(key, version, value)
            assert fast == encode_response_declared(key, version, value), (key, version)
    # golden bytes: EndTxn v5, producer id and epoch, no tags
    assert encode_response(ApiKey.END_TXN, 5, cases[3][1]) == struct.pack(
        ">ihqh", 0, 0, 12, 3) + b"\x00"
    assert encode_response(ApiKey.END_TXN, 5, cases[2][1]) == struct.pack(
        ">ihqh", 0, ErrorCode.INVALID_TXN_STATE, -1, -1) + b"\x00"


# -- responses that carry records: parts and views --------------------------------------------------

RECORDS_CASES = [(key, v) for key in RECORDS_APIS for v in APIS[key].versions]


class _Slice:
    """A chunk the parts encoder must pass through unread, as the broker's FileSlice: it has a
    length and no buffer."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)


def _chunked(value, data, chunks: list):
    """``value`` with each records value as bytes, a writable memoryview or a ``_Slice``."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "records" and isinstance(v, bytes):
                v = data.draw(st.sampled_from((bytes, lambda b: memoryview(bytearray(b)),
                                               _Slice)))(v)
                chunks.append(v)
            else:
                v = _chunked(v, data, chunks)
            out[k] = v
        return out
    if isinstance(value, list):
        return [_chunked(v, data, chunks) for v in value]
    return value


def _join(parts: list) -> bytes:
    return b"".join(p.data if isinstance(p, _Slice) else p for p in parts)


@pytest.mark.parametrize("case", RECORDS_CASES, ids=_id)
@settings(max_examples=_n(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_parts_encoder_writes_the_declared_bytes_records_as_they_are(case, data) -> None:
    # Hypothesis-drawn responses: tagged fields (declared: diverging epoch, current leader,
    # snapshot id; and unknown ones), null and empty records, null and listed aborted
    # transactions, preferred read replica, whatever the version carries
    key, version = case
    value = _draw(data, key, version, "response")
    chunks: list = []
    chunked = _chunked(value, data, chunks)
    parts = _generated(response_parts_encoder, key, version)(chunked, version)
    body = _join(parts)
    assert body == encode_response_declared(key, version, value)
    assert _join(encode_response_parts(key, version, chunked)) == body
    # every non-empty records value is one chunk, as it is; the fields between are bytes
    for chunk in chunks:
        assert sum(p is chunk for p in parts) == (1 if len(chunk) else 0)
    assert all(type(p) is bytes for p in parts if not any(p is c for c in chunks))
    assert all(len(p) for p in parts)
    # and back: the declared decoder and the generated one read the same response
    declared = decode_response_declared(key, version, body)
    _same(decode_response(key, version, body), declared)
    assert encode_response_declared(key, version, declared) == body


@pytest.mark.parametrize("case", RECORDS_CASES, ids=_id)
@settings(max_examples=_n(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), prefix=st.binary(max_size=6), suffix=st.binary(max_size=6))
def test_fast_response_decoder_agrees_with_declared(case, data, prefix, suffix) -> None:
    key, version = case
    body = encode_response_declared(key, version, _draw(data, key, version, "response"))
    decoded = _agree(key, version, prefix + body + suffix, len(prefix), "response")
    assert decoded is not CorruptFrameError
    for cut in range(len(body)):
        assert _agree(key, version, body[:cut], 0, "response") is CorruptFrameError


@pytest.mark.parametrize("case", RECORDS_CASES, ids=_id)
@settings(max_examples=_n(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), mutations=_mutations, blob=st.binary(max_size=80))
def test_fast_response_decoder_agrees_on_mutated_and_random_bytes(case, data, mutations,
                                                                   blob) -> None:
    key, version = case
    body = bytearray(encode_response_declared(key, version,
                                              _draw(data, key, version, "response")))
    for op, where, byte in mutations:
        at = where % (len(body) + 1)
        if op == "insert":
            body[at:at] = bytes([byte])
        elif at < len(body):
            if op == "set":
                body[at] = byte
            else:
                del body[at]
    _agree(key, version, body, 0, "response")
    _agree(key, version, blob, 0, "response")


def test_fetch_records_are_views_and_chunks_uncopied() -> None:
    big = memoryview(bytearray(3 * 1024 * 1024))
    for version in (4, 12):
        parts = encode_response_parts(ApiKey.FETCH, version, {"responses": [
            {"topic": "t", "partitions": [
                {"partition_index": 0, "high_watermark": 5, "records": big},
                {"partition_index": 1, "records": b""},
                {"partition_index": 2, "records": None}]}]})
        assert sum(1 for p in parts if p is big) == 1
        assert max(len(p) for p in parts if p is not big) < 200
        frame = bytearray(b"".join(parts))
        decoded = decode_response(ApiKey.FETCH, version, frame)
        records = [p.records for p in decoded.responses[0].partitions]
        assert [type(r) for r in records] == [memoryview, memoryview, type(None)]
        records[0][0:1] = b"X"  # a view into the frame, not a copy
        assert frame.count(b"X") == 1
    # a memoryview of wider items is sent as its bytes (len() of a chunk counts bytes)
    wide = memoryview(bytearray(b"12345678")).cast("I")
    parts = encode_response_parts(ApiKey.FETCH, 4, {"responses": [
        {"topic": "t", "partitions": [{"partition_index": 0, "records": wide}]}]})
    body = b"".join(parts)
    assert sum(len(p) for p in parts) == len(body)
    assert decode_response(ApiKey.FETCH, 4, body).responses[0].partitions[0].records == b"12345678"


def test_parts_encoder_fails_as_the_declared_one() -> None:
    bad = {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 2**40, "records": _Slice(b"abc")}]}]}
    with pytest.raises(Exception) as declared:  # noqa: PT011 - whatever the declared codec raises
        encode_response_declared(ApiKey.FETCH, 12, bad)
    with pytest.raises(declared.type):
        encode_response_parts(ApiKey.FETCH, 12, bad)

