"""Messages declared once, with each field's version range, in the shape of Kafka's JSON schemas;
the construct Struct of every version follows (flexible versions included).

    DESCRIBE_GROUPS = declare(ApiKey.X, valid="0-5", flexible="3+",
        request=[F("groups", "[]string", "0+")],
        response=[F("throttle_time_ms", "int32", "1+"), ...])

Field types: ``int8 int16 int32 int64 bool string bytes``, ``[]<type>`` for arrays of those, and
``[]`` with ``fields=[...]`` for arrays of structs. ``versions`` and ``nullable`` are Kafka's
version ranges (``"0+"``, ``"1-3"``, ``"3"``, ``"none"``). In flexible versions strings, bytes and
arrays take their compact forms and every struct ends with tagged fields (empty on write,
ignored on read), as KIP-482 says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from construct import Construct, Struct

from protocol.messages._registry import register
from protocol.primitives import (
    Array,
    Bool,
    Bytes,
    CompactArray,
    CompactBytes,
    CompactNullableArray,
    CompactNullableBytes,
    CompactNullableString,
    CompactString,
    Int8,
    Int16,
    Int32,
    Int64,
    NullableArray,
    NullableBytes,
    NullableString,
    String,
    TaggedFields,
)


def parse_range(text: str) -> tuple[int, int]:
    """Kafka's version range: ``"none"`` -> empty, ``"3+"``, ``"1-3"``, ``"2"``."""
    if text == "none":
        return (1, 0)
    if text.endswith("+"):
        return (int(text[:-1]), 1 << 15)
    low, _, high = text.partition("-")
    return (int(low), int(high or low))


def in_range(version: int, text: str) -> bool:
    low, high = parse_range(text)
    return low <= version <= high


@dataclass(frozen=True)
class F:
    name: str
    type: str
    versions: str = "0+"
    nullable: str = "none"
    fields: Sequence[F] = field(default_factory=tuple)


_FIXED = {"int8": Int8, "int16": Int16, "int32": Int32, "int64": Int64, "bool": Bool}


def _leaf(type_: str, nullable: bool, flexible: bool) -> Construct:
    if type_ in _FIXED:
        return _FIXED[type_]
    if type_ == "string":
        if flexible:
            return CompactNullableString if nullable else CompactString
        return NullableString if nullable else String
    if type_ == "bytes":
        if flexible:
            return CompactNullableBytes if nullable else CompactBytes
        return NullableBytes if nullable else Bytes
    raise ValueError(f"unknown field type {type_!r}")


def _struct(fields: Sequence[F], version: int, flexible: bool) -> Construct:
    members = []
    for f in fields:
        if not in_range(version, f.versions):
            continue
        nullable = in_range(version, f.nullable)
        if f.type.startswith("[]"):
            item = (
                _struct(f.fields, version, flexible)
                if f.fields
                else _leaf(f.type[2:], False, flexible)
            )
            if flexible:
                con = CompactNullableArray(item) if nullable else CompactArray(item)
            else:
                con = NullableArray(item) if nullable else Array(item)
        else:
            con = _leaf(f.type, nullable, flexible)
        members.append(f.name / con)
    if flexible:
        members.append("tagged_fields" / TaggedFields)
    return Struct(*members)


def declare(
    api_key: int, valid: str, flexible: str, request: Sequence[F], response: Sequence[F]
) -> list[int]:
    """Register the request and response Structs of every version in ``valid``; returns them."""
    low, high = parse_range(valid)
    versions = list(range(low, high + 1))
    for version in versions:
        flex = in_range(version, flexible)
        register(api_key, version, _struct(request, version, flex), _struct(response, version, flex))
    return versions
