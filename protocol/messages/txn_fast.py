"""Hand-written codecs of the transaction requests the broker decodes and the responses it encodes
once or more per transaction: AddPartitionsToTxn v0-3, AddOffsetsToTxn v0-4, EndTxn v0-5 and
TxnOffsetCommit v0-5 (docs/design.md section 9).

The declarations in ``protocol/messages/txn.py`` stay the specification: ``install()`` registers
these functions with the schema of each version (``_registry.Schema.fast_request`` /
``fast_response``), so ``decode_request`` and ``encode_response`` use them for every caller, and
tests check them against the declared codecs byte for byte and value for value.

- Decoders (``decode_*_untrusted(frame, offset, version)``) walk the frame with
  ``struct.unpack_from`` and return what the declared codec returns: a construct ``Container`` with
  the same keys in the same order (the fields a version lacks at their defaults, ``tagged_fields``
  in every struct of a flexible version); arrays are plain lists (``ListContainer`` is a list
  subclass, equal to them); each struct is a Container subclass whose fields are properties
  (``_records``: attribute reads cost a tenth). They accept exactly what the declared codec
  accepts, the request array-element budget (``MAX_REQUEST_ARRAY_ELEMENTS``) included, and raise
  only ``CorruptFrameError``; nothing allocated exceeds the frame's size or the budget.
- Encoders (``encode_*(obj, version)``) take what the declared codec takes (a dict or Container,
  a missing field as its default, fields the version lacks ignored) and return the same bytes.
  They return None for what they leave to the declared codec (raw ``tagged_fields`` to write);
  ``encode_response`` also falls back to it when they raise, so invalid values fail as they always
  did.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from construct import Container

from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError
from protocol.messages._registry import MAX_REQUEST_ARRAY_ELEMENTS, register_fast
from protocol.messages.produce import uvarint_at
from protocol.primitives import encode_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I16_I32 = struct.Struct(">hi")
_I32_I16 = struct.Struct(">ih")
_I64_I16 = struct.Struct(">qh")
_I64_I16_I32 = struct.Struct(">qhi")
_I64_I16_BOOL = struct.Struct(">qhB")
_I32_I64 = struct.Struct(">iq")
_I32_I64_I32 = struct.Struct(">iqi")
_I32_I16_I64_I16 = struct.Struct(">ihqh")

_I32_I16_NO_TAGS = struct.Struct(">ihx")  # partition_index, error_code, empty tag section
_VARINT1 = [bytes((i,)) for i in range(0x80)]  # the unsigned varints of one byte

_DECODE_ERRORS = (struct.error, IndexError)


def _records(name: str, fields: str) -> tuple[type[Container], type[Container]]:
    """Two ``Container`` subclasses (non-flexible versions, flexible versions: with
    ``tagged_fields``) whose fields read as attributes at the speed of a property. A Container
    finds them in ``__getattr__``, which Python calls only after a failed lookup: about 0.6 us a
    read on this machine, 0.07 us through the property, and the handlers read a request's fields
    about 20 times per transaction. Everything else is Container's (item access, equality,
    attribute assignment, AttributeError for a field the message lacks)."""

    def record(class_name: str, names: list[str]) -> type[Container]:
        namespace: dict[str, Any] = {"__slots__": (), "__module__": __name__}
        for field in names:
            namespace[field] = property(itemgetter(field))
        return type(class_name, (Container,), namespace)

    names = fields.split()
    return record(name, names), record(f"{name}Flexible", [*names, "tagged_fields"])


AddPartitionsToTxnTopic, AddPartitionsToTxnTopicFlexible = _records(
    "AddPartitionsToTxnTopic", "name partitions")
AddPartitionsToTxnRequest, AddPartitionsToTxnRequestFlexible = _records(
    "AddPartitionsToTxnRequest", "transactional_id producer_id producer_epoch topics")
AddOffsetsToTxnRequest, AddOffsetsToTxnRequestFlexible = _records(
    "AddOffsetsToTxnRequest", "transactional_id producer_id producer_epoch group_id")
EndTxnRequest, EndTxnRequestFlexible = _records(
    "EndTxnRequest", "transactional_id producer_id producer_epoch committed")
TxnOffsetCommitPartition, TxnOffsetCommitPartitionFlexible = _records(
    "TxnOffsetCommitPartition",
    "partition_index committed_offset committed_leader_epoch committed_metadata")
TxnOffsetCommitTopic, TxnOffsetCommitTopicFlexible = _records(
    "TxnOffsetCommitTopic", "name partitions")
TxnOffsetCommitRequest, TxnOffsetCommitRequestFlexible = _records(
    "TxnOffsetCommitRequest",
    "transactional_id group_id producer_id producer_epoch generation_id member_id"
    " group_instance_id topics")


def _truncated(exc: Exception) -> CorruptFrameError:
    return CorruptFrameError(f"truncated message: {exc}")


# -- primitives over (frame, position) --------------------------------------------------------------


def _string_at(frame, pos: int, end: int) -> tuple[str, int]:
    """A non-nullable STRING (INT16 length)."""
    (n,) = _I16.unpack_from(frame, pos)
    pos += 2
    if n < 0:
        raise CorruptFrameError(f"invalid string length {n}")
    if pos + n > end:
        raise CorruptFrameError("string runs past the end of the frame")
    return str(frame[pos : pos + n], "utf-8"), pos + n


def _nullable_string_at(frame, pos: int, end: int) -> tuple[str | None, int]:
    (n,) = _I16.unpack_from(frame, pos)
    pos += 2
    if n < 0:
        if n == -1:
            return None, pos
        raise CorruptFrameError(f"invalid string length {n}")
    if pos + n > end:
        raise CorruptFrameError("string runs past the end of the frame")
    return str(frame[pos : pos + n], "utf-8"), pos + n


def _compact_string_at(frame, pos: int, end: int) -> tuple[str, int]:
    n = frame[pos]
    if n < 0x80:  # one byte: shorter than 127 bytes
        pos += 1
    else:
        n, pos = uvarint_at(frame, pos)
    if n == 0:
        raise CorruptFrameError("null for a non-nullable compact string")
    n += pos - 1
    if n > end:
        raise CorruptFrameError("string runs past the end of the frame")
    return str(frame[pos:n], "utf-8"), n


def _compact_nullable_string_at(frame, pos: int, end: int) -> tuple[str | None, int]:
    n = frame[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = uvarint_at(frame, pos)
    if n == 0:
        return None, pos
    n += pos - 1
    if n > end:
        raise CorruptFrameError("string runs past the end of the frame")
    return str(frame[pos:n], "utf-8"), n


def _tagged_fields_at(frame, pos: int, end: int) -> tuple[dict[int, bytes], int]:
    """A tagged-field section none of whose tags is declared: ``({tag: raw bytes}, position)``
    (a repeated tag keeps its last value, as the declared codec does)."""
    if pos < end and frame[pos] == 0:  # what clients send
        return {}, pos + 1
    count, pos = uvarint_at(frame, pos)
    fields: dict[int, bytes] = {}
    for _ in range(count):
        tag, pos = uvarint_at(frame, pos)
        size, pos = uvarint_at(frame, pos)
        if pos + size > end:
            raise CorruptFrameError("tagged field runs past the end of the frame")
        fields[tag] = bytes(frame[pos : pos + size])
        pos += size
    return fields, pos


def _array_count(frame, pos: int, left: int) -> tuple[int, int, int]:
    """An INT32-counted, non-nullable array's count: ``(count, position, budget left)``."""
    (n,) = _I32.unpack_from(frame, pos)
    if n < 0:
        raise CorruptFrameError(f"invalid array length {n}")
    if n > left:
        raise CorruptFrameError("too many array elements in one request")
    return n, pos + 4, left - n


def _compact_array_count(frame, pos: int, left: int) -> tuple[int, int, int]:
    """A compact, non-nullable array's count: ``(count, position, budget left)``."""
    n, pos = uvarint_at(frame, pos)
    if n == 0:
        raise CorruptFrameError("null for a non-nullable compact array")
    n -= 1
    if n > left:
        raise CorruptFrameError("too many array elements in one request")
    return n, pos, left - n


def _int32s_at(frame, pos: int, end: int, n: int) -> tuple[list[int], int]:
    """``n`` INT32s (an ``[]int32`` array's elements)."""
    stop = pos + 4 * n
    if stop > end:
        raise CorruptFrameError("array runs past the end of the frame")
    if n == 1:
        return [_I32.unpack_from(frame, pos)[0]], stop
    return list(struct.unpack_from(f">{n}i", frame, pos)), stop


# -- AddPartitionsToTxn v0-3 ------------------------------------------------------------------------

ADD_PARTITIONS_FIRST_FLEXIBLE = 3


def decode_add_partitions_to_txn_request_untrusted(frame, offset: int, version: int) -> Container:
    try:
        if version >= ADD_PARTITIONS_FIRST_FLEXIBLE:
            return _add_partitions_flexible(frame, offset)
        return _add_partitions(frame, offset)
    except _DECODE_ERRORS as exc:
        raise _truncated(exc) from None
    except UnicodeDecodeError as exc:
        raise CorruptFrameError(f"string is not UTF-8: {exc}") from None


def _add_partitions(frame, offset: int) -> Container:
    end = len(frame)
    transactional_id, pos = _string_at(frame, offset, end)
    producer_id, producer_epoch = _I64_I16.unpack_from(frame, pos)
    count, pos, left = _array_count(frame, pos + 10, MAX_REQUEST_ARRAY_ELEMENTS)
    topics = []
    for _ in range(count):
        name, pos = _string_at(frame, pos, end)
        n, pos, left = _array_count(frame, pos, left)
        partitions, pos = _int32s_at(frame, pos, end, n)
        topic = AddPartitionsToTxnTopic()
        topic["name"] = name
        topic["partitions"] = partitions
        topics.append(topic)
    r = AddPartitionsToTxnRequest()
    r["transactional_id"] = transactional_id
    r["producer_id"] = producer_id
    r["producer_epoch"] = producer_epoch
    r["topics"] = topics
    return r


def _add_partitions_flexible(frame, offset: int) -> Container:
    end = len(frame)
    transactional_id, pos = _compact_string_at(frame, offset, end)
    producer_id, producer_epoch = _I64_I16.unpack_from(frame, pos)
    count, pos, left = _compact_array_count(frame, pos + 10, MAX_REQUEST_ARRAY_ELEMENTS)
    topics = []
    for _ in range(count):
        name, pos = _compact_string_at(frame, pos, end)
        n = frame[pos] - 1
        if 0 <= n < 0x7F and n <= left:  # a one-byte count within the budget
            pos += 1
            left -= n
        else:
            n, pos, left = _compact_array_count(frame, pos, left)
        if n == 1:  # what clients send: one partition per topic and request
            partitions = [_I32.unpack_from(frame, pos)[0]]
            pos += 4
        else:
            partitions, pos = _int32s_at(frame, pos, end, n)
        topic = AddPartitionsToTxnTopicFlexible()
        topic["name"] = name
        topic["partitions"] = partitions
        if frame[pos] == 0:  # no tagged fields: what clients send
            topic["tagged_fields"] = {}
            pos += 1
        else:
            topic["tagged_fields"], pos = _tagged_fields_at(frame, pos, end)
        topics.append(topic)
    r = AddPartitionsToTxnRequestFlexible()
    r["transactional_id"] = transactional_id
    r["producer_id"] = producer_id
    r["producer_epoch"] = producer_epoch
    r["topics"] = topics
    r["tagged_fields"] = {} if frame[pos] == 0 else _tagged_fields_at(frame, pos, end)[0]
    return r


ErrorsByTopic = Sequence[tuple[str, Sequence[tuple[int, int]]]]
"""``[(topic, [(partition_index, error_code), ...]), ...]``: an answer's results, as
``encode_errors_by_topic`` takes them."""

_I32_I32 = struct.Struct(">ii")


def encode_errors_by_topic(results: ErrorsByTopic, flexible: bool,
                           throttle_time_ms: int = 0) -> bytes:
    """The answer of AddPartitionsToTxn and of TxnOffsetCommit (their fields have the same
    types and order) from plain tuples, no tagged fields: what the handler of
    AddPartitionsToTxn calls, and ``_encode_errors_by_topic`` for the message as a dict."""
    if flexible:
        n = len(results) + 1
        parts = [_I32.pack(throttle_time_ms), _VARINT1[n] if n < 0x80 else encode_uvarint(n)]
        for name, partitions in results:
            encoded = name.encode("utf-8")
            n = len(encoded) + 1
            parts.append(_VARINT1[n] if n < 0x80 else encode_uvarint(n))
            parts.append(encoded)
            n = len(partitions) + 1
            parts.append(_VARINT1[n] if n < 0x80 else encode_uvarint(n))
            for partition_index, error_code in partitions:
                parts.append(_I32_I16_NO_TAGS.pack(partition_index, error_code))
            parts.append(b"\x00")
        parts.append(b"\x00")
    else:
        parts = [_I32_I32.pack(throttle_time_ms, len(results))]
        for name, partitions in results:
            encoded = name.encode("utf-8")
            parts.append(_I16.pack(len(encoded)))
            parts.append(encoded)
            parts.append(_I32.pack(len(partitions)))
            for partition_index, error_code in partitions:
                parts.append(_I32_I16.pack(partition_index, error_code))
    return b"".join(parts)


def _encode_errors_by_topic(obj: Any, flexible: bool, topics_key: str,
                            partitions_key: str) -> bytes | None:
    """``{"throttle_time_ms", topics_key: [{"name", partitions_key: [{"partition_index",
    "error_code"}]}]}``: ``encode_errors_by_topic`` of the message as a dict (None: tagged
    fields to write, left to the declared codec)."""
    results: list[tuple[str, list[tuple[int, int]]]] = []
    for topic in obj.get(topics_key, ()):
        if flexible and topic.get("tagged_fields"):
            return None
        partitions = []
        for p in topic.get(partitions_key, ()):
            if flexible and p.get("tagged_fields"):
                return None
            partitions.append((p.get("partition_index", 0), p.get("error_code", 0)))
        results.append((topic.get("name", ""), partitions))
    if flexible and obj.get("tagged_fields"):
        return None
    return encode_errors_by_topic(results, flexible, obj.get("throttle_time_ms", 0))


def encode_add_partitions_to_txn_response(obj: Any, version: int) -> bytes | None:
    """``{"throttle_time_ms", "results": [{"name", "results": [{"partition_index",
    "error_code"}]}]}``"""
    return _encode_errors_by_topic(obj, version >= ADD_PARTITIONS_FIRST_FLEXIBLE, "results",
                                   "results")


# -- AddOffsetsToTxn v0-4 ---------------------------------------------------------------------------

ADD_OFFSETS_FIRST_FLEXIBLE = 3


def decode_add_offsets_to_txn_request_untrusted(frame, offset: int, version: int) -> Container:
    try:
        end = len(frame)
        if version >= ADD_OFFSETS_FIRST_FLEXIBLE:
            r = AddOffsetsToTxnRequestFlexible()
            r["transactional_id"], pos = _compact_string_at(frame, offset, end)
            r["producer_id"], r["producer_epoch"] = _I64_I16.unpack_from(frame, pos)
            r["group_id"], pos = _compact_string_at(frame, pos + 10, end)
            r["tagged_fields"] = _tagged_fields_at(frame, pos, end)[0]
        else:
            r = AddOffsetsToTxnRequest()
            r["transactional_id"], pos = _string_at(frame, offset, end)
            r["producer_id"], r["producer_epoch"] = _I64_I16.unpack_from(frame, pos)
            r["group_id"] = _string_at(frame, pos + 10, end)[0]
        return r
    except _DECODE_ERRORS as exc:
        raise _truncated(exc) from None
    except UnicodeDecodeError as exc:
        raise CorruptFrameError(f"string is not UTF-8: {exc}") from None


def encode_add_offsets_to_txn_response(obj: Any, version: int) -> bytes | None:
    """``{"throttle_time_ms", "error_code"}``"""
    data = _I32_I16.pack(obj.get("throttle_time_ms", 0), obj.get("error_code", 0))
    if version >= ADD_OFFSETS_FIRST_FLEXIBLE:
        if obj.get("tagged_fields"):
            return None
        return data + b"\x00"
    return data


# -- EndTxn v0-5 ------------------------------------------------------------------------------------

END_TXN_FIRST_FLEXIBLE = 3
END_TXN_WITH_PRODUCER = 5  # the answer carries the producer id and epoch (transaction version 2)


def decode_end_txn_request_untrusted(frame, offset: int, version: int) -> Container:
    try:
        end = len(frame)
        if version >= END_TXN_FIRST_FLEXIBLE:
            r = EndTxnRequestFlexible()
            r["transactional_id"], pos = _compact_string_at(frame, offset, end)
            producer_id, producer_epoch, committed = _I64_I16_BOOL.unpack_from(frame, pos)
            r["producer_id"] = producer_id
            r["producer_epoch"] = producer_epoch
            r["committed"] = committed != 0
            pos += 11
            r["tagged_fields"] = {} if frame[pos] == 0 else _tagged_fields_at(frame, pos, end)[0]
        else:
            r = EndTxnRequest()
            r["transactional_id"], pos = _string_at(frame, offset, end)
            producer_id, producer_epoch, committed = _I64_I16_BOOL.unpack_from(frame, pos)
            r["producer_id"] = producer_id
            r["producer_epoch"] = producer_epoch
            r["committed"] = committed != 0
        return r
    except _DECODE_ERRORS as exc:
        raise _truncated(exc) from None
    except UnicodeDecodeError as exc:
        raise CorruptFrameError(f"string is not UTF-8: {exc}") from None


def encode_end_txn_response(obj: Any, version: int) -> bytes | None:
    """``{"throttle_time_ms", "error_code"}``, v5+ also ``"producer_id", "producer_epoch"``
    (-1 when absent)."""
    if version >= END_TXN_FIRST_FLEXIBLE and obj.get("tagged_fields"):
        return None
    return encode_end_txn_answer(version, obj.get("error_code", 0), obj.get("producer_id", -1),
                                 obj.get("producer_epoch", -1), obj.get("throttle_time_ms", 0))


def encode_end_txn_answer(version: int, error_code: int, producer_id: int = -1,
                          producer_epoch: int = -1, throttle_time_ms: int = 0) -> bytes:
    """``encode_end_txn_response`` from the fields (what the EndTxn handler calls)."""
    if version >= END_TXN_WITH_PRODUCER:
        data = _I32_I16_I64_I16.pack(throttle_time_ms, error_code, producer_id, producer_epoch)
    else:
        data = _I32_I16.pack(throttle_time_ms, error_code)
    if version >= END_TXN_FIRST_FLEXIBLE:
        return data + b"\x00"
    return data


# -- TxnOffsetCommit v0-5 ---------------------------------------------------------------------------

TXN_OFFSET_COMMIT_FIRST_FLEXIBLE = 3
TXN_OFFSET_COMMIT_LEADER_EPOCH = 2  # the first version with committed_leader_epoch


def decode_txn_offset_commit_request_untrusted(frame, offset: int, version: int) -> Container:
    try:
        if version >= TXN_OFFSET_COMMIT_FIRST_FLEXIBLE:
            return _txn_offset_commit_flexible(frame, offset)
        return _txn_offset_commit(frame, offset, version >= TXN_OFFSET_COMMIT_LEADER_EPOCH)
    except _DECODE_ERRORS as exc:
        raise _truncated(exc) from None
    except UnicodeDecodeError as exc:
        raise CorruptFrameError(f"string is not UTF-8: {exc}") from None


def _txn_offset_commit(frame, offset: int, leader_epoch: bool) -> Container:
    end = len(frame)
    r = TxnOffsetCommitRequest()
    r["transactional_id"], pos = _string_at(frame, offset, end)
    r["group_id"], pos = _string_at(frame, pos, end)
    r["producer_id"], r["producer_epoch"] = _I64_I16.unpack_from(frame, pos)
    count, pos, left = _array_count(frame, pos + 10, MAX_REQUEST_ARRAY_ELEMENTS)
    topics = []
    for _ in range(count):
        topic = TxnOffsetCommitTopic()
        topic["name"], pos = _string_at(frame, pos, end)
        n, pos, left = _array_count(frame, pos, left)
        partitions = []
        for _ in range(n):
            p = TxnOffsetCommitPartition()
            if leader_epoch:
                p["partition_index"], p["committed_offset"], p["committed_leader_epoch"] = (
                    _I32_I64_I32.unpack_from(frame, pos))
                p["committed_metadata"], pos = _nullable_string_at(frame, pos + 16, end)
            else:
                p["partition_index"], p["committed_offset"] = _I32_I64.unpack_from(frame, pos)
                p["committed_metadata"], pos = _nullable_string_at(frame, pos + 12, end)
                p["committed_leader_epoch"] = -1
            partitions.append(p)
        topic["partitions"] = partitions
        topics.append(topic)
    r["topics"] = topics
    r["generation_id"] = -1
    r["member_id"] = ""
    r["group_instance_id"] = None
    return r


def _txn_offset_commit_flexible(frame, offset: int) -> Container:
    end = len(frame)
    r = TxnOffsetCommitRequestFlexible()
    r["transactional_id"], pos = _compact_string_at(frame, offset, end)
    r["group_id"], pos = _compact_string_at(frame, pos, end)
    r["producer_id"], r["producer_epoch"], r["generation_id"] = _I64_I16_I32.unpack_from(
        frame, pos)
    r["member_id"], pos = _compact_string_at(frame, pos + 14, end)
    r["group_instance_id"], pos = _compact_nullable_string_at(frame, pos, end)
    count, pos, left = _compact_array_count(frame, pos, MAX_REQUEST_ARRAY_ELEMENTS)
    topics = []
    for _ in range(count):
        topic = TxnOffsetCommitTopicFlexible()
        topic["name"], pos = _compact_string_at(frame, pos, end)
        n, pos, left = _compact_array_count(frame, pos, left)
        partitions = []
        for _ in range(n):
            p = TxnOffsetCommitPartitionFlexible()
            p["partition_index"], p["committed_offset"], p["committed_leader_epoch"] = (
                _I32_I64_I32.unpack_from(frame, pos))
            p["committed_metadata"], pos = _compact_nullable_string_at(frame, pos + 16, end)
            p["tagged_fields"], pos = _tagged_fields_at(frame, pos, end)
            partitions.append(p)
        topic["partitions"] = partitions
        topic["tagged_fields"], pos = _tagged_fields_at(frame, pos, end)
        topics.append(topic)
    r["topics"] = topics
    r["tagged_fields"] = _tagged_fields_at(frame, pos, end)[0]
    return r


def encode_txn_offset_commit_response(obj: Any, version: int) -> bytes | None:
    """``{"throttle_time_ms", "topics": [{"name", "partitions": [{"partition_index",
    "error_code"}]}]}`` (the layout of AddPartitionsToTxn's answer under other names)."""
    return _encode_errors_by_topic(obj, version >= TXN_OFFSET_COMMIT_FIRST_FLEXIBLE, "topics",
                                   "partitions")


# -- registration ---------------------------------------------------------------------------------

FAST_CODECS = {
    ApiKey.ADD_PARTITIONS_TO_TXN: (range(0, 4), decode_add_partitions_to_txn_request_untrusted,
                                   encode_add_partitions_to_txn_response),
    ApiKey.ADD_OFFSETS_TO_TXN: (range(0, 5), decode_add_offsets_to_txn_request_untrusted,
                                encode_add_offsets_to_txn_response),
    ApiKey.END_TXN: (range(0, 6), decode_end_txn_request_untrusted, encode_end_txn_response),
    ApiKey.TXN_OFFSET_COMMIT: (range(0, 6), decode_txn_offset_commit_request_untrusted,
                               encode_txn_offset_commit_response),
}


def install() -> None:
    """Register the functions above with the declared schemas (``protocol/messages/txn.py``
    calls this once its declarations are registered)."""
    for key, (versions, decode, encode) in FAST_CODECS.items():
        for version in versions:
            register_fast(key, version, decode_request=decode, encode_response=encode)
