"""Messages declared once, with each field's version range, in the shape of Kafka's JSON schemas;
the codec of every version follows from the declaration (flexible versions included).

    FIND_COORDINATOR = declare(ApiKey.FIND_COORDINATOR, valid="0-5", flexible="3+",
        request=[F("key", "string", "0-3"), F("key_type", "int8", "1+"), ...],
        response=[F("throttle_time_ms", "int32", "1+"), ...])

Field types: ``uint16 int8 int16 int32 int64 bool string bytes records uuid``, ``[]<type>`` for arrays of
those, ``[]`` with ``fields=[...]`` for arrays of structs and ``struct`` with ``fields=[...]`` for
one struct. ``versions``, ``nullable`` are
Kafka's version ranges (``"0+"``, ``"1-3"``, ``"3"``, ``"none"``). ``tag=N`` makes a field a
tagged field (flexible versions only: written only when it differs from its default). ``default``
is Kafka's default (otherwise 0, false, "", b"", the zero UUID, an empty array; null for
``records``).

What follows for each version (KIP-482):
- non-flexible: INT16-length strings, INT32-length bytes and arrays (-1 = null);
- flexible: compact strings/bytes/arrays (unsigned varint length + 1, 0 = null) and, at the end of
  every struct, the tagged-field section: the declared tagged fields are decoded by name, unknown
  tags are kept as ``tagged_fields`` ({tag: raw bytes}) and ignored.
- Decoding a version gives every declared field: those the version does not carry get their
  default, so handlers read ``request.producer_id`` whatever the version. Encoding takes a dict
  (or Container); a missing field is written as its default, fields the version does not carry
  are ignored.

The codec of each (api_key, version) is a construct ``Compiled`` (straight-line Python generated
once, on first use, by ``KafkaStruct._emitparse`` / ``_emitbuild``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from construct import Construct, Container, Int16ub, ListContainer

from protocol.api_keys import FIRST_FLEXIBLE_VERSION, ApiKey
from protocol.messages._registry import register
from protocol.primitives import (
    ZERO_UUID,
    Array,
    Bool,
    Bytes,
    CompactArray,
    CompactBytes,
    CompactNullableArray,
    CompactNullableBytes,
    CompactNullableString,
    CompactString,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    NullableArray,
    NullableBytes,
    NullableString,
    String,
    Uuid,
    read_tagged_into,
    write_tagged_from,
)

MAX_VERSION = 1 << 15
_MISSING: Any = object()


def parse_range(text: str) -> tuple[int, int]:
    """Kafka's version range: ``"none"`` -> empty, ``"3+"``, ``"1-3"``, ``"2"``."""
    if text == "none":
        return (1, 0)
    if text.endswith("+"):
        return (int(text[:-1]), MAX_VERSION)
    low, _, high = text.partition("-")
    return (int(low), int(high or low))


def in_range(version: int, text: str) -> bool:
    low, high = parse_range(text)
    return low <= version <= high


class _NullableStruct(Construct):
    """A struct that may be null (Kafka's nullable struct field): an INT8 marker, -1 for null,
    1 followed by the struct otherwise."""

    def __init__(self, subcon: Construct) -> None:
        super().__init__()
        self.subcon = subcon

    def _parse(self, stream, context, path):
        if Int8._parsereport(stream, context, path) < 0:
            return None
        return self.subcon._parsereport(stream, context, path)

    def _build(self, obj, stream, context, path):
        Int8._build(-1 if obj is None else 1, stream, context, path)
        if obj is not None:
            self.subcon._build(obj, stream, context, path)
        return obj

    def _emitparse(self, code):
        fid = code.allocateId()
        code.append(f"""
            def parse_knullable_{fid}(io, this):
                if {Int8._compileparse(code)} < 0:
                    return None
                return {self.subcon._compileparse(code)}
        """)
        return f"parse_knullable_{fid}(io, this)"

    def _emitbuild(self, code):
        fid = code.allocateId()
        code.append(f"""
            def build_knullable_marker_{fid}(obj, io, this):
                return {Int8._compilebuild(code)}
            def build_knullable_body_{fid}(obj, io, this):
                return {self.subcon._compilebuild(code)}
            def build_knullable_{fid}(obj, io, this):
                build_knullable_marker_{fid}(-1 if obj is None else 1, io, this)
                if obj is not None:
                    build_knullable_body_{fid}(obj, io, this)
                return obj
        """)
        return f"build_knullable_{fid}(obj, io, this)"


@dataclass(frozen=True)
class F:
    """One field of a message (Kafka's JSON schema field, snake_case name)."""

    name: str
    type: str
    versions: str = "0+"
    nullable: str = "none"
    fields: Sequence[F] = ()
    tag: int | None = None
    default: Any = _MISSING

    def default_for(self, version: int) -> Any:
        if self.default is not _MISSING:
            return self.default
        if self.type.startswith("[]"):
            return ()
        if self.type == "struct":
            return None  # absent (a tagged struct is written only when given)
        return _TYPE_DEFAULTS[self.type]


_TYPE_DEFAULTS: dict[str, Any] = {
    "uint16": 0, "int8": 0, "int16": 0, "int32": 0, "int64": 0, "float64": 0.0, "bool": False,
    "string": "",
    "bytes": b"",
    "records": None, "uuid": ZERO_UUID,
}
_FIXED = {"uint16": Int16ub, "int8": Int8, "int16": Int16, "int32": Int32, "int64": Int64,
          "float64": Float64, "bool": Bool, "uuid": Uuid}


def _leaf(type_: str, nullable: bool, flexible: bool) -> Construct:
    if type_ in _FIXED:
        return _FIXED[type_]
    if type_ == "string":
        if flexible:
            return CompactNullableString if nullable else CompactString
        return NullableString if nullable else String
    if type_ in ("bytes", "records"):
        nullable = nullable or type_ == "records"
        if flexible:
            return CompactNullableBytes if nullable else CompactBytes
        return NullableBytes if nullable else Bytes
    raise ValueError(f"unknown field type {type_!r}")


def _field_construct(f: F, version: int, flexible: bool) -> Construct:
    nullable = in_range(version, f.nullable)
    if f.type == "struct":
        struct = struct_for(f.fields, version, flexible)
        return _NullableStruct(struct) if nullable else struct
    if not f.type.startswith("[]"):
        return _leaf(f.type, nullable, flexible)
    if f.fields:
        item = struct_for(f.fields, version, flexible)
    else:
        item = _leaf(f.type[2:], False, flexible)
    if flexible:
        return CompactNullableArray(item) if nullable else CompactArray(item)
    return NullableArray(item) if nullable else Array(item)


def struct_for(fields: Sequence[F], version: int, flexible: bool) -> KafkaStruct:
    """The construct of ``fields`` at ``version``."""
    members, absent, tagged = [], [], []
    for f in fields:
        default = f.default_for(version)
        if not in_range(version, f.versions):
            absent.append((f.name, default))
        elif f.tag is not None:
            if not flexible:
                raise ValueError(f"tagged field {f.name} in non-flexible version {version}")
            tagged.append((f.tag, f.name, _field_construct(f, version, flexible), default))
        else:
            members.append((f.name, _field_construct(f, version, flexible), default))
    return KafkaStruct(members, absent, sorted(tagged, key=lambda t: t[0]) if flexible else None)


def _literal(value: Any) -> str:
    """Source text of a default value (a fresh object for mutable ones)."""
    if value == () or isinstance(value, list):
        if value:
            raise ValueError("non-empty array defaults are not supported")
        return "ListContainer()"
    if isinstance(value, uuid.UUID):
        return "_kp.ZERO_UUID" if value == ZERO_UUID else f"_kp.uuid.UUID({str(value)!r})"
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return repr(value)
    raise ValueError(f"unsupported default {value!r}")


_IMPORT = "from protocol import primitives as _kp"


class KafkaStruct(Construct):
    """A struct of a Kafka message at one version: fields in order, the defaults of the fields this
    version does not carry, and (flexible versions) the tagged-field section."""

    def __init__(
        self,
        members: list[tuple[str, Construct, Any]],
        absent: list[tuple[str, Any]],
        tagged: list[tuple[int, str, Construct, Any]] | None,
    ) -> None:
        super().__init__()
        self.members = members
        self.absent = absent
        self.tagged = tagged

    # The interpreted paths (used by construct only when not compiled; kept for completeness).
    def _parse(self, stream, context, path):
        result = Container()
        for name, con, _ in self.members:
            result[name] = con._parsereport(stream, context, path)
        for name, default in self.absent:
            result[name] = ListContainer() if default == () else default
        if self.tagged is not None:
            for _, name, _, default in self.tagged:
                result[name] = ListContainer() if default == () else default
            known = {tag: (name, lambda io, con=con: con._parse(io, context, path))
                     for tag, name, con, _ in self.tagged}
            result["tagged_fields"] = read_tagged_into(stream, result, known)
        return result

    def _build(self, obj, stream, context, path):
        for name, con, default in self.members:
            con._build(obj.get(name, default), stream, context, path)
        if self.tagged is not None:
            known = [(tag, name, default, lambda v, io, con=con: con._build(v, io, context, path))
                     for tag, name, con, default in self.tagged]
            write_tagged_from(stream, obj, known)
        return obj

    def _emitparse(self, code):
        code.append(_IMPORT)
        fid = code.allocateId()
        lines = [f"def parse_kstruct_{fid}(io, this):", "    r = Container()"]
        for name, con, _ in self.members:
            lines.append(f"    r[{name!r}] = {con._compileparse(code)}")
        for name, default in self.absent:
            lines.append(f"    r[{name!r}] = {_literal(default)}")
        if self.tagged is not None:
            entries = []
            for tag, name, con, default in self.tagged:
                code.append(f"""
                    def parse_ktag_{fid}_{tag}(io, this):
                        return {con._compileparse(code)}
                """)
                entries.append(f"{tag}: ({name!r}, parse_ktag_{fid}_{tag})")
                lines.append(f"    r[{name!r}] = {_literal(default)}")
            code.append(f"KTAGS_{fid} = {{{', '.join(entries)}}}")
            lines.append(f"    r['tagged_fields'] = _kp.read_tagged_into(io, r, KTAGS_{fid})")
        lines.append("    return r")
        code.append("\n".join(lines))
        return f"parse_kstruct_{fid}(io, this)"

    def _emitbuild(self, code):
        code.append(_IMPORT)
        fid = code.allocateId()
        lines = [f"def build_kstruct_{fid}(obj, io, this):", "    objdict = obj"]
        for name, con, default in self.members:
            lines.append(f"    obj = objdict.get({name!r}, {_literal(default)})")
            lines.append(f"    {con._compilebuild(code)}")
        if self.tagged is not None:
            entries = []
            for tag, name, con, default in self.tagged:
                code.append(f"""
                    def build_ktag_{fid}_{tag}(obj, io, this):
                        return {con._compilebuild(code)}
                """)
                entries.append(f"({tag}, {name!r}, {_literal(default)}, build_ktag_{fid}_{tag})")
            code.append(f"KBTAGS_{fid} = [{', '.join(entries)}]")
            lines.append(f"    _kp.write_tagged_from(io, objdict, KBTAGS_{fid})")
        lines.append("    return objdict")
        code.append("\n".join(lines))
        return f"build_kstruct_{fid}(obj, io, this)"


@dataclass(frozen=True)
class Api:
    """One API's declaration: the versions we have a codec for and the two field lists."""

    api_key: ApiKey
    valid: tuple[int, int]
    flexible: str
    request: Sequence[F]
    response: Sequence[F]

    @property
    def versions(self) -> range:
        return range(self.valid[0], self.valid[1] + 1)

    def is_flexible(self, version: int) -> bool:
        return in_range(version, self.flexible)

    def request_struct(self, version: int) -> KafkaStruct:
        return struct_for(self.request, version, self.is_flexible(version))

    def response_struct(self, version: int) -> KafkaStruct:
        return struct_for(self.response, version, self.is_flexible(version))


APIS: dict[ApiKey, Api] = {}


def declare(
    api_key: int, valid: str, flexible: str, request: Sequence[F], response: Sequence[F]
) -> list[int]:
    """Register the request and response codecs of every version in ``valid``; returns them.

    ``flexible`` must agree with ``protocol.api_keys.FIRST_FLEXIBLE_VERSION`` (which decides the
    header versions)."""
    key = ApiKey(api_key)
    first = FIRST_FLEXIBLE_VERSION.get(key)
    if (first is None) != (flexible == "none") or (first is not None and flexible != f"{first}+"):
        raise ValueError(f"{key.name}: flexible {flexible!r} disagrees with FIRST_FLEXIBLE_VERSION")
    api = Api(key, parse_range(valid), flexible, tuple(request), tuple(response))
    APIS[key] = api
    for version in api.versions:
        register(
            key, version,
            lambda v=version: api.request_struct(v),
            lambda v=version: api.response_struct(v),
        )
    return list(api.versions)
