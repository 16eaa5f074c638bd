"""Kafka's primitive wire types as construct classes, plus varint helpers.

Non-flexible encodings (every pinned version but InitProducerId v3):

    INT8/16/32/64   big-endian two's complement
    BOOLEAN         INT8, 0 = false, anything else = true
    STRING          INT16 length N, then N bytes of UTF-8          (NULLABLE_STRING: N = -1 is null)
    BYTES           INT32 length N, then N bytes                   (NULLABLE_BYTES:  N = -1 is null)
    ARRAY[T]        INT32 count N, then N times T                  (nullable:        N = -1 is null)

Flexible ("compact") encodings, used by InitProducerId v3 and request header v2 / response header v1:

    UNSIGNED_VARINT LEB128, 7 bits a byte, low group first
    COMPACT_STRING  UNSIGNED_VARINT N+1, then N bytes (0 = null for the nullable form)
    COMPACT_ARRAY   UNSIGNED_VARINT N+1, then N times T (0 = null)
    TAGGED_FIELDS   UNSIGNED_VARINT count, then (tag, size, bytes) each; we keep none and write 0x00

Every class here implements ``_emitparse``/``_emitbuild`` so that ``Struct.compile()`` turns a whole
message into straight-line Python. Decoders are fed untrusted bytes: they may raise construct, struct,
Unicode or our own errors; ``protocol.messages.decode`` turns all of them into ``CorruptFrameError``.
"""

from __future__ import annotations

import struct
import uuid
from io import BytesIO

from construct import Construct, Float64b, Int8sb, Int16sb, Int32sb, Int32ub, Int64sb, ListContainer

from protocol.errors import CorruptFrameError

Int8 = Int8sb
Int16 = Int16sb
Int32 = Int32sb
UInt32 = Int32ub
Int64 = Int64sb
Float64 = Float64b  # Kafka's float64 (DescribeClientQuotas' quota values)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


# -- helpers shared by the interpreted and the compiled paths ---------------------------------------


def _read_exact(io, n: int) -> bytes:
    data = io.read(n)
    if len(data) != n:
        raise CorruptFrameError(f"expected {n} bytes, got {len(data)}")
    return data


def _read_i16(io) -> int:
    return _I16.unpack(_read_exact(io, 2))[0]


def _read_i32(io) -> int:
    return _I32.unpack(_read_exact(io, 4))[0]


def read_bool(io) -> bool:
    # Not construct's Flag: its compiled parser reads a missing byte as True.
    return _read_exact(io, 1) != b"\x00"


def write_bool(io, obj) -> None:
    io.write(b"\x01" if obj else b"\x00")


def read_string(io, nullable: bool) -> str | None:
    n = _read_i16(io)
    if n < 0:
        if n == -1 and nullable:
            return None
        raise CorruptFrameError(f"invalid string length {n}")
    return _read_exact(io, n).decode("utf-8")


def write_string(io, obj: str | None, nullable: bool) -> None:
    if obj is None:
        if not nullable:
            raise ValueError("null for a non-nullable string")
        io.write(b"\xff\xff")
        return
    data = obj.encode("utf-8")
    io.write(_I16.pack(len(data)))
    io.write(data)


def read_bytes(io, nullable: bool) -> bytes | None:
    n = _read_i32(io)
    if n < 0:
        if n == -1 and nullable:
            return None
        raise CorruptFrameError(f"invalid bytes length {n}")
    return _read_exact(io, n)


def write_bytes(io, obj: bytes | None, nullable: bool) -> None:
    if obj is None:
        if not nullable:
            raise ValueError("null for non-nullable bytes")
        io.write(b"\xff\xff\xff\xff")
        return
    io.write(_I32.pack(len(obj)))
    io.write(obj)


def read_array_count(io, nullable: bool) -> int | None:
    n = _read_i32(io)
    if n < 0:
        if n == -1 and nullable:
            return None
        raise CorruptFrameError(f"invalid array length {n}")
    return n


def write_array_count(io, obj, nullable: bool) -> None:
    if obj is None:
        if not nullable:
            raise ValueError("null for a non-nullable array")
        io.write(b"\xff\xff\xff\xff")
        return
    io.write(_I32.pack(len(obj)))


# -- unsigned varints (flexible versions) -----------------------------------------------------------

_UVARINT1 = tuple(bytes((n,)) for n in range(0x80))


def encode_uvarint(value: int) -> bytes:
    if 0 <= value < 0x80:  # one byte: counts, lengths, tags (most of what is encoded)
        return _UVARINT1[value]
    if value < 0:
        raise ValueError("unsigned varint must be >= 0")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(io) -> int:
    result = 0
    for shift in range(0, 35, 7):
        b = io.read(1)
        if not b:
            raise CorruptFrameError("truncated varint")
        byte = b[0]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
    raise CorruptFrameError("unsigned varint longer than 5 bytes")


def read_compact_length(io) -> int:
    """Length of a compact string/bytes/array: -1 for null, else N."""
    return read_uvarint(io) - 1


def read_compact_string(io, nullable: bool) -> str | None:
    n = read_compact_length(io)
    if n < 0:
        if nullable:
            return None
        raise CorruptFrameError("null for a non-nullable compact string")
    return _read_exact(io, n).decode("utf-8")


def write_compact_string(io, obj: str | None, nullable: bool) -> None:
    if obj is None:
        if not nullable:
            raise ValueError("null for a non-nullable compact string")
        io.write(b"\x00")
        return
    data = obj.encode("utf-8")
    io.write(encode_uvarint(len(data) + 1))
    io.write(data)


def read_compact_bytes(io, nullable: bool) -> bytes | None:
    n = read_compact_length(io)
    if n < 0:
        if nullable:
            return None
        raise CorruptFrameError("null for non-nullable compact bytes")
    return _read_exact(io, n)


def write_compact_bytes(io, obj: bytes | None, nullable: bool) -> None:
    if obj is None:
        if not nullable:
            raise ValueError("null for non-nullable compact bytes")
        io.write(b"\x00")
        return
    io.write(encode_uvarint(len(obj) + 1))
    io.write(obj)


def read_tagged_fields(io) -> dict[int, bytes]:
    """Reads and returns tagged fields (tag -> raw bytes); none are interpreted by us."""
    fields: dict[int, bytes] = {}
    for _ in range(read_uvarint(io)):
        tag = read_uvarint(io)
        fields[tag] = _read_exact(io, read_uvarint(io))
    return fields


def write_tagged_fields(io, obj) -> None:
    fields = obj or {}
    io.write(encode_uvarint(len(fields)))
    for tag in sorted(fields):
        io.write(encode_uvarint(tag))
        io.write(encode_uvarint(len(fields[tag])))
        io.write(fields[tag])


def read_tagged_into(io, result, known: dict) -> dict[int, bytes]:
    """Read a tagged-field section: each tag in ``known`` (tag -> (name, parse function)) is
    decoded into ``result[name]``; the unknown ones are returned (tag -> raw bytes)."""
    unknown: dict[int, bytes] = {}
    for _ in range(read_uvarint(io)):
        tag = read_uvarint(io)
        data = _read_exact(io, read_uvarint(io))
        entry = known.get(tag)
        if entry is None:
            unknown[tag] = data
        else:
            result[entry[0]] = entry[1](BytesIO(data), None)
    return unknown


def write_tagged_from(io, obj, known) -> None:
    """Write a tagged-field section: each ``(tag, name, default, build function)`` of ``known``
    whose value in ``obj`` differs from its default, plus ``obj["tagged_fields"]`` (raw)."""
    fields = dict(obj.get("tagged_fields") or {})
    for tag, name, default, build in known:
        value = obj.get(name, default)
        if isinstance(default, list | tuple):  # an empty array is the default of arrays
            is_default = value is not None and len(value) == 0
        else:
            is_default = value == default
        if not is_default:
            out = BytesIO()
            build(value, out, None)
            fields[tag] = out.getvalue()
    io.write(encode_uvarint(len(fields)))
    for tag in sorted(fields):
        io.write(encode_uvarint(tag))
        io.write(encode_uvarint(len(fields[tag])))
        io.write(fields[tag])


ZERO_UUID = uuid.UUID(int=0)


def read_uuid(io) -> uuid.UUID:
    return uuid.UUID(bytes=_read_exact(io, 16))


def write_uuid(io, obj) -> None:
    data = obj.bytes if isinstance(obj, uuid.UUID) else bytes(obj)
    if len(data) != 16:
        raise ValueError("a UUID is 16 bytes")
    io.write(data)


# -- construct classes ------------------------------------------------------------------------------

_IMPORT = "from protocol import primitives as _kp"


class _Leaf(Construct):
    """A construct whose parse/build are functions of this module taking one constant argument."""

    def __init__(self, reader: str, writer: str, nullable: bool | None = None):
        super().__init__()
        self._reader = reader
        self._writer = writer
        self._args = () if nullable is None else (nullable,)
        self._argsrc = "".join(f", {a!r}" for a in self._args)

    def _parse(self, stream, context, path):
        return globals()[self._reader](stream, *self._args)

    def _build(self, obj, stream, context, path):
        globals()[self._writer](stream, obj, *self._args)
        return obj

    def _emitparse(self, code):
        code.append(_IMPORT)
        return f"_kp.{self._reader}(io{self._argsrc})"

    def _emitbuild(self, code):
        code.append(_IMPORT)
        return f"(_kp.{self._writer}(io, obj{self._argsrc}), obj)[1]"


Bool = _Leaf("read_bool", "write_bool")
String = _Leaf("read_string", "write_string", nullable=False)
NullableString = _Leaf("read_string", "write_string", nullable=True)
Bytes = _Leaf("read_bytes", "write_bytes", nullable=False)
NullableBytes = _Leaf("read_bytes", "write_bytes", nullable=True)
CompactString = _Leaf("read_compact_string", "write_compact_string", nullable=False)
CompactNullableString = _Leaf("read_compact_string", "write_compact_string", nullable=True)
CompactBytes = _Leaf("read_compact_bytes", "write_compact_bytes", nullable=False)
CompactNullableBytes = _Leaf("read_compact_bytes", "write_compact_bytes", nullable=True)
Uuid = _Leaf("read_uuid", "write_uuid")
TaggedFields = _Leaf("read_tagged_fields", "write_tagged_fields")
# Building may leave tagged fields out (None is written as "no tagged fields", 0x00).
TaggedFields.flagbuildnone = True


class _Array(Construct):
    """INT32-counted (or compact, UNSIGNED_VARINT N+1) array of ``subcon``."""

    def __init__(self, subcon: Construct, nullable: bool, compact: bool = False):
        super().__init__()
        self.subcon = subcon
        self.nullable = nullable
        self.compact = compact

    def _parse(self, stream, context, path):
        n = read_any_array_count(stream, self.nullable, self.compact)
        if n is None:
            return None
        return ListContainer([self.subcon._parsereport(stream, context, path) for _ in range(n)])

    def _build(self, obj, stream, context, path):
        write_any_array_count(stream, obj, self.nullable, self.compact)
        for item in obj or ():
            self.subcon._build(item, stream, context, path)
        return obj

    def _emitparse(self, code):
        code.append(_IMPORT)
        fname = f"parse_karray_{code.allocateId()}"
        code.append(f"""
            def {fname}(io, this):
                n = _kp.read_any_array_count(io, {self.nullable!r}, {self.compact!r})
                if n is None:
                    return None
                return ListContainer([{self.subcon._compileparse(code)} for _ in range(n)])
        """)
        return f"{fname}(io, this)"

    def _emitbuild(self, code):
        code.append(_IMPORT)
        fid = code.allocateId()
        code.append(f"""
            def build_kitem_{fid}(obj, io, this):
                return {self.subcon._compilebuild(code)}
            def build_karray_{fid}(obj, io, this):
                _kp.write_any_array_count(io, obj, {self.nullable!r}, {self.compact!r})
                for item in obj or ():
                    build_kitem_{fid}(item, io, this)
                return obj
        """)
        return f"build_karray_{fid}(obj, io, this)"


def read_any_array_count(io, nullable: bool, compact: bool) -> int | None:
    if not compact:
        n = read_array_count(io, nullable)
    else:
        n = read_compact_length(io)
        if n < 0:
            if not nullable:
                raise CorruptFrameError("null for a non-nullable compact array")
            return None
    if n is not None:
        # Untrusted requests carry an element budget (messages._registry): bounded work.
        left = getattr(io, "elements_left", None)
        if left is not None:
            if n > left:
                raise CorruptFrameError("too many array elements in one request")
            io.elements_left = left - n
    return n


def write_any_array_count(io, obj, nullable: bool, compact: bool) -> None:
    if not compact:
        write_array_count(io, obj, nullable)
    elif obj is None:
        if not nullable:
            raise ValueError("null for a non-nullable array")
        io.write(b"\x00")
    else:
        io.write(encode_uvarint(len(obj) + 1))


def Array(subcon: Construct) -> Construct:  # noqa: N802 - construct naming style
    return _Array(subcon, nullable=False)


def NullableArray(subcon: Construct) -> Construct:  # noqa: N802
    return _Array(subcon, nullable=True)


def CompactArray(subcon: Construct) -> Construct:  # noqa: N802
    return _Array(subcon, nullable=False, compact=True)


def CompactNullableArray(subcon: Construct) -> Construct:  # noqa: N802
    return _Array(subcon, nullable=True, compact=True)


# -- zig-zag varints (record fields) ------------------------------------------------------------------


def zigzag_encode(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def zigzag_decode(value: int) -> int:
    return (value >> 1) ^ -(value & 1)

