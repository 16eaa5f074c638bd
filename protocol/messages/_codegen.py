"""The fast codecs, generated from the declarations (``_declare``): the one home of the request
path's speed-ups.

For a declared message at one version, ``request_decoder`` and ``response_encoder`` write the
source of one straight-line Python function (consecutive fixed-width fields read or written by one
``struct.Struct``, strings and counts read in place from the frame, no stream object) and compile
it. The declaration stays the one source of truth: nothing here knows a message, and
tests/unit/protocol/messages/test_codegen.py holds every generated codec to the declared
(construct) codec for every version, value for value, byte for byte and rejection for rejection.

``install`` registers them (``_registry.register_fast``) for the APIs of ``FAST_APIS``, generated
on first use of each (api_key, version); ``decode_request`` / ``encode_response`` then use them for
every caller, so handlers only ever call those two.

- A generated decoder ``(frame, offset, version) -> Container`` returns what the declared codec
  returns: the same keys in the same order (the fields a version lacks at their defaults,
  ``tagged_fields`` in each struct of a flexible version), arrays as lists, each struct an
  instance of a generated ``Container`` subclass whose fields are properties (a Container finds a
  field in ``__getattr__``, after a failed lookup: a tenth of the cost through a property). A
  ``records`` field is a ``memoryview`` into the frame (writable when the frame is a bytearray:
  the log patches a batch's baseOffset in place), equal to the declared codec's bytes. It accepts
  exactly what the declared codec accepts, the request array-element budget
  (``MAX_REQUEST_ARRAY_ELEMENTS``) included, and raises only ``CorruptFrameError``.
- A generated encoder ``(obj, version) -> bytes | None`` takes what the declared codec takes (a
  dict or Container, a missing field as its default, fields the version lacks ignored) and returns
  the same bytes; it returns None, leaving the value to the declared codec, when there are tagged
  fields to write (raw ``tagged_fields``, or a tagged field away from its default).
  ``encode_response`` also falls back to the declared codec when it raises, so invalid values fail
  as they always did.
"""

from __future__ import annotations

import keyword
import struct
import uuid
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from construct import Container

from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError
from protocol.messages._declare import APIS, Api, F, in_range
from protocol.messages._registry import MAX_REQUEST_ARRAY_ELEMENTS, SCHEMAS, register_fast
from protocol.primitives import encode_uvarint

# The APIs whose requests the broker decodes, and whose responses it encodes, with generated
# codecs: the request path of producers, consumers, transactions and groups.
FAST_APIS = (
    ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA, ApiKey.API_VERSIONS,
    ApiKey.FIND_COORDINATOR, ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT, ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP, ApiKey.CONSUMER_GROUP_HEARTBEAT,
)

# The APIs whose responses carry records: the broker encodes them as chunks for a gather-write
# (``encode_response_parts``: records sent as they are, a file slice with sendfile), the client
# decodes them with each records field a view into the frame (``decode_response``).
RECORDS_APIS = (ApiKey.FETCH,)

_FIXED = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "float64": "d", "bool": "B"}
_DECODE_ERRORS = (struct.error, IndexError, ValueError, OverflowError, TypeError, KeyError)


# -- helpers the generated decoders call (over (frame, position, end)) ------------------------------

_I8 = struct.Struct(">b").unpack_from
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from


def uvarint_at(frame, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos``: ``(value, position after it)``."""
    n = len(frame)
    if pos < n:
        first = frame[pos]
        if first < 0x80:  # one byte: counts, lengths, empty tag sections
            return first, pos + 1
        if pos + 1 < n and frame[pos + 1] < 0x80:  # two: a record batch's size up to 16 KiB
            return (first & 0x7F) | (frame[pos + 1] << 7), pos + 2
    result = 0
    for shift in range(0, 35, 7):
        if pos >= n:
            raise CorruptFrameError("truncated varint")
        byte = frame[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
    raise CorruptFrameError("unsigned varint longer than 5 bytes")


def _length(frame, pos: int, compact: bool, wide: bool) -> tuple[int, int]:
    """A string's (``wide``: bytes') length, -1 for null."""
    if compact:
        n, pos = uvarint_at(frame, pos)
        return n - 1, pos
    if wide:
        return _I32(frame, pos)[0], pos + 4
    return _I16(frame, pos)[0], pos + 2


def _bad_length(n: int, nullable: bool, compact: bool, what: str) -> None:
    if compact:
        raise CorruptFrameError(f"null for a non-nullable compact {what}")
    raise CorruptFrameError(f"invalid {what} length {n}")


def _string_at(frame, pos: int, end: int, compact: bool, nullable: bool) -> tuple[Any, int]:
    n, pos = _length(frame, pos, compact, False)
    if n < 0:
        if (n == -1 or compact) and nullable:
            return None, pos
        _bad_length(n, nullable, compact, "string")
    if pos + n > end:
        raise CorruptFrameError("string runs past the end of the frame")
    return str(frame[pos : pos + n], "utf-8"), pos + n


def _bytes_at(frame, pos: int, end: int, compact: bool, nullable: bool,
              view: memoryview | None) -> tuple[Any, int]:
    """Bytes (``view`` given: a slice of it, a ``records`` field)."""
    n, pos = _length(frame, pos, compact, True)
    if n < 0:
        if (n == -1 or compact) and nullable:
            return None, pos
        _bad_length(n, nullable, compact, "bytes")
    if pos + n > end:
        raise CorruptFrameError("bytes run past the end of the frame")
    if view is not None:
        return view[pos : pos + n], pos + n
    return bytes(frame[pos : pos + n]), pos + n


def _count_at(frame, pos: int, compact: bool, nullable: bool, left: float
              ) -> tuple[int | None, int, float]:
    """An array's count (None: null) and the element budget left."""
    if compact:
        n, pos = uvarint_at(frame, pos)
        n -= 1
    else:
        n = _I32(frame, pos)[0]
        pos += 4
    if n < 0:
        if (n == -1 or compact) and nullable:
            return None, pos, left
        if compact:
            raise CorruptFrameError("null for a non-nullable compact array")
        raise CorruptFrameError(f"invalid array length {n}")
    if n > left:
        raise CorruptFrameError("too many array elements in one request")
    return n, pos, left - n


def _fixed_array_at(frame, pos: int, end: int, n: int, code: str) -> tuple[list, int]:
    size = struct.calcsize(code)
    stop = pos + size * n
    if stop > end:
        raise CorruptFrameError("array runs past the end of the frame")
    values = list(struct.unpack_from(f">{n}{code}", frame, pos))
    if code == "B":
        values = [v != 0 for v in values]
    return values, stop


def _uuid_at(frame, pos: int, end: int) -> tuple[uuid.UUID, int]:
    if pos + 16 > end:
        raise CorruptFrameError("uuid runs past the end of the frame")
    return uuid.UUID(bytes=bytes(frame[pos : pos + 16])), pos + 16


def _tagged_at(frame, pos: int, end: int, r, known: dict) -> tuple[dict[int, bytes], int]:
    """A tagged-field section: the declared tags decoded into ``r``, the others returned raw (a
    repeated tag keeps its last value, as the declared codec does)."""
    if frame[pos] == 0:  # what clients send
        return {}, pos + 1
    count, pos = uvarint_at(frame, pos)
    unknown: dict[int, bytes] = {}
    for _ in range(count):
        tag, pos = uvarint_at(frame, pos)
        size, pos = uvarint_at(frame, pos)
        if pos + size > end:
            raise CorruptFrameError("tagged field runs past the end of the frame")
        data = bytes(frame[pos : pos + size])
        pos += size
        entry = known.get(tag)
        if entry is None:
            unknown[tag] = data
        else:
            r[entry[0]] = entry[1](data)
    return unknown, pos


# -- helpers the generated encoders call ------------------------------------------------------------

_P16 = struct.Struct(">h").pack
_P32 = struct.Struct(">i").pack
_UVARINT1 = tuple(bytes((n,)) for n in range(0x80))


def _uvarint(n: int) -> bytes:
    return _UVARINT1[n] if 0 <= n < 0x80 else encode_uvarint(n)


def _null(nullable: bool, compact: bool, wide: bool, what: str) -> bytes:
    if not nullable:
        raise ValueError(f"null for a non-nullable {what}")
    return b"\x00" if compact else b"\xff\xff\xff\xff" if wide else b"\xff\xff"


def _put_bytes(a, v, compact: bool, nullable: bool) -> None:
    if v is None:
        a(_null(nullable, compact, True, "bytes"))
        return
    a(_uvarint(len(v) + 1) if compact else _P32(len(v)))
    a(v)


def _put_uuid(a, v) -> None:
    data = v.bytes if isinstance(v, uuid.UUID) else bytes(v)
    if len(data) != 16:
        raise ValueError("a UUID is 16 bytes")
    a(data)


def _is_default(value, default) -> bool:
    if isinstance(default, list | tuple):  # an empty array is the default of arrays
        return value is not None and len(value) == 0
    return value == default


def _put_tagged(a, obj, known) -> None:
    """A tagged-field section: each ``(tag, name, default, writer)`` of ``known`` whose value in
    ``obj`` differs from its default, and ``obj["tagged_fields"]`` (raw), in tag order (a raw
    field of a declared tag gives way to the declared one, as in the declared codec)."""
    fields = dict(obj.get("tagged_fields") or {})
    for tag, name, default, write in known:
        value = obj.get(name, default)
        if not _is_default(value, default):
            fields[tag] = write(value)
    a(_uvarint(len(fields)))
    for tag in sorted(fields):
        data = fields[tag]
        a(_uvarint(tag))
        a(_uvarint(len(data)))
        a(data)


# -- the generated record types ---------------------------------------------------------------------


def record_type(name: str, fields: Sequence[str]) -> type[Container]:
    """A ``Container`` subclass whose ``fields`` read as properties; everything else is
    Container's (item access, equality, attribute assignment, AttributeError for a field the
    message lacks). A field named like a dict method (``values``) stays an item."""
    namespace: dict[str, Any] = {"__slots__": (), "__module__": __name__}
    for field in fields:
        if not hasattr(Container, field):
            namespace[field] = property(itemgetter(field))
    return type(name, (Container,), namespace)


# -- the generator ----------------------------------------------------------------------------------

_NAMESPACE: dict[str, Any] = {
    "CorruptFrameError": CorruptFrameError, "uvarint_at": uvarint_at, "_I8": _I8,
    "_string_at": _string_at, "_bytes_at": _bytes_at, "_count_at": _count_at,
    "_fixed_array_at": _fixed_array_at, "_uuid_at": _uuid_at, "_tagged_at": _tagged_at,
    "_put_bytes": _put_bytes,
    "_put_uuid": _put_uuid, "_is_default": _is_default, "_uvarint": _uvarint,
    "_put_tagged": _put_tagged,
    "UVARINT1": _UVARINT1, "P16": _P16, "P32": _P32, "I32": _I32,
    "MAX_REQUEST_ARRAY_ELEMENTS": MAX_REQUEST_ARRAY_ELEMENTS, "INFINITE": float("inf"),
    "ZERO_UUID": uuid.UUID(int=0), "uuid": uuid, "DECODE_ERRORS": _DECODE_ERRORS,
}


class _Source:
    """The lines of one generated module and the constants they name."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.lines: list[str] = []
        self.tail: list[str] = []  # module-level tables naming generated functions: last
        self.names: dict[str, Any] = {}
        self._ids = 0

    def fresh(self, prefix: str) -> str:
        """A new name, never one of the helpers' (a constant ``P16`` must not hide ``P16``)."""
        while True:
            self._ids += 1
            name = f"{prefix}{self._ids}"
            if name not in _NAMESPACE:
                return name

    def constant(self, prefix: str, value: Any) -> str:
        name = self.fresh(prefix)
        self.names[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def function(self, header: str, body: Callable[[], None]) -> None:
        """A module-level function (``header`` its ``def`` line) whose body ``body`` emits at
        indent 1, put before the function being written."""
        lines, self.lines = self.lines, []
        self.emit(0, header)
        body()
        self.lines = self.lines + lines

    @property
    def text(self) -> str:
        return "\n".join(self.lines + self.tail)

    def compile(self, function: str) -> Callable:
        namespace = {**_NAMESPACE, **self.names}
        code = compile(self.text + "\n", f"<generated {self.title}>", "exec")
        exec(code, namespace)  # noqa: S102 - our own generated source
        return namespace[function]


def _default(src: _Source, f: F, version: int) -> str:
    value = f.default_for(version)
    if value == () or isinstance(value, list):
        return "[]"
    if isinstance(value, uuid.UUID):
        return src.constant("UUID", value)
    return repr(value)


def _runs(fields: list[tuple[F, bool]]) -> list[list[tuple[F, bool]]]:
    """The fields in order, consecutive fixed-width non-nullable ones grouped."""
    runs: list[list[tuple[F, bool]]] = []
    for f, nullable in fields:
        fixed = f.type in _FIXED
        if fixed and runs and runs[-1][0][0].type in _FIXED:
            runs[-1].append((f, nullable))
        else:
            runs.append([(f, nullable)])
    return runs


class _Decoder:
    def __init__(self, api: Api, version: int, src: _Source) -> None:
        self.api = api
        self.version = version
        self.flexible = api.is_flexible(version)
        self.src = src

    def struct(self, fields: Sequence[F], path: str, indent: int, target: str) -> None:
        """Lines that decode a struct of ``fields`` at ``pos`` into the new local ``target``."""
        v, e = self.version, self.src.emit
        members, absent, tagged = [], [], []
        for f in fields:
            if not in_range(v, f.versions):
                absent.append(f)
            elif f.tag is not None:
                tagged.append(f)
            else:
                members.append((f, in_range(v, f.nullable)))
        names = [f.name for f in fields if in_range(v, f.versions) and f.tag is None]
        names += [f.name for f in absent] + [f.name for f in sorted(tagged, key=_tag_of)]
        if self.flexible:
            names.append("tagged_fields")
        suffix = "Flexible" if self.flexible else ""
        cls = self.src.constant("R", record_type(f"{path}V{v}{suffix}", names))
        values: list[tuple[str, str]] = []
        for run in _runs(members):
            if run[0][0].type in _FIXED:
                fmt = "".join(_FIXED[f.type] for f, _ in run)
                unpack = self.src.constant("S", struct.Struct(">" + fmt).unpack_from)
                locals_ = [self.src.fresh("v") for _ in run]
                e(indent, f"{', '.join(locals_)}{',' if len(run) == 1 else ''} = "
                          f"{unpack}(frame, pos)")
                e(indent, f"pos += {struct.calcsize('>' + fmt)}")
                for (f, _), local in zip(run, locals_, strict=True):
                    values.append((f.name, f"{local} != 0" if f.type == "bool" else local))
            else:
                f, nullable = run[0]
                local = self.src.fresh("v")
                self.field(f, nullable, f"{path}{_camel(f.name)}", indent, local)
                values.append((f.name, local))
        items = [*values, *((f.name, _default(self.src, f, v)) for f in absent)]
        entries = []
        if self.flexible:
            for f in sorted(tagged, key=_tag_of):
                items.append((f.name, _default(self.src, f, v)))
                entries.append(f"{f.tag}: ({f.name!r}, {self.tag_parser(f, path)})")
            items.append(("tagged_fields", "{}"))
        # built in one call, from keywords (a fifth of the cost of setting each item)
        if all(name.isidentifier() and not keyword.iskeyword(name) for name, _ in items):
            e(indent, f"{target} = {cls}({', '.join(f'{n}={x}' for n, x in items)})")
        else:
            e(indent, f"{target} = {cls}({{{', '.join(f'{n!r}: {x}' for n, x in items)}}})")
        if self.flexible:
            known = self.src.fresh("KNOWN")
            self.src.tail.append(f"{known} = {{{', '.join(entries)}}}")
            e(indent, "if frame[pos] == 0:  # no tagged fields: what clients send")
            e(indent + 1, "pos += 1")
            e(indent, "else:")
            e(indent + 1, f"{target}['tagged_fields'], pos = _tagged_at(frame, pos, end, "
                          f"{target}, {known})")

    def tag_parser(self, f: F, path: str) -> str:
        """A function decoding the tagged field ``f`` from its bytes (no element budget: the
        declared codec reads them from a stream of their own)."""
        name = self.src.fresh("parse_tag")

        def body() -> None:
            self.src.emit(1, "pos, end, left, view = 0, len(frame), INFINITE, None")
            self.field(f, in_range(self.version, f.nullable), f"{path}{_camel(f.name)}", 1,
                       "value")
            self.src.emit(1, "return value")

        self.src.function(f"def {name}(frame):", body)
        return name

    def field(self, f: F, nullable: bool, path: str, indent: int, target: str) -> None:
        e, compact = self.src.emit, self.flexible
        if f.type in _FIXED:
            unpack = self.src.constant("S", struct.Struct(">" + _FIXED[f.type]).unpack_from)
            e(indent, f"{target} = {unpack}(frame, pos)[0]" + (" != 0" if f.type == "bool" else ""))
            e(indent, f"pos += {struct.calcsize('>' + _FIXED[f.type])}")
        elif f.type == "uuid":
            e(indent, f"{target}, pos = _uuid_at(frame, pos, end)")
        elif f.type == "string":
            # A one-byte compact length or any int16 length read here (the null string of a
            # Produce's transactional id too); longer ones, null otherwise and errors in
            # _string_at.
            n = self.src.fresh("n")
            read, fits, width = (("frame[pos] - 1", f"0 <= {n} < 0x7F", 1) if compact
                                 else ("frame[pos] << 8 | frame[pos + 1]", f"{n} < 0x8000", 2))
            e(indent, f"{n} = {read}")
            e(indent, f"if {fits} and pos + {width} + {n} <= end:")
            e(indent + 1, f"{target} = str(frame[pos + {width} : pos + {width} + {n}], 'utf-8')")
            e(indent + 1, f"pos += {width} + {n}")
            if compact and nullable:
                e(indent, f"elif {n} == -1:")
                e(indent + 1, f"{target} = None")
                e(indent + 1, "pos += 1")
            e(indent, "else:")
            e(indent + 1, f"{target}, pos = _string_at(frame, pos, end, {compact}, {nullable})")
        elif f.type in ("bytes", "records"):
            records = f.type == "records"
            call = (f"_bytes_at(frame, pos, end, {compact}, {nullable or records}, "
                    f"{'view' if records else 'None'})")
            if not compact:
                n = self.src.fresh("n")
                e(indent, f"{n}, = I32(frame, pos)")
                e(indent, f"if {n} >= 0 and pos + 4 + {n} <= end:  # not null")
                sliced = f"[pos + 4 : pos + 4 + {n}]"
                e(indent + 1, f"{target} = view{sliced}" if records
                  else f"{target} = bytes(frame{sliced})")
                e(indent + 1, f"pos += 4 + {n}")
                e(indent, "else:")
                e(indent + 1, f"{target}, pos = {call}")
                return
            # A length of one or two bytes (a Produce's record batch up to 16 KiB) read here;
            # null, longer ones and every error in _bytes_at.
            n, start = self.src.fresh("n"), self.src.fresh("q")
            e(indent, f"{n} = frame[pos] - 1")
            e(indent, f"if 0 <= {n} < 0x7F:")
            e(indent + 1, f"{start} = pos + 1")
            e(indent, f"elif {n} >= 0x7F and frame[pos + 1] < 0x80:")
            e(indent + 1, f"{n} = (({n} + 1) & 0x7F | frame[pos + 1] << 7) - 1")
            e(indent + 1, f"{start} = pos + 2")
            e(indent, "else:")
            e(indent + 1, f"{n} = -1  # null, or a longer length")
            e(indent, f"if {n} >= 0 and {start} + {n} <= end:")
            sliced = f"[{start} : {start} + {n}]"
            e(indent + 1, f"{target} = view{sliced}" if records else f"{target} = bytes(frame{sliced})")
            e(indent + 1, f"pos = {start} + {n}")
            e(indent, "else:")
            e(indent + 1, f"{target}, pos = {call}")
        elif f.type == "struct":
            if nullable:
                e(indent, "if _I8(frame, pos)[0] < 0:")
                e(indent + 1, f"{target} = None")
                e(indent + 1, "pos += 1")
                e(indent, "else:")
                e(indent + 1, "pos += 1")
                self.struct(f.fields, path, indent + 1, target)
            else:
                self.struct(f.fields, path, indent, target)
        elif f.type.startswith("[]"):
            # A one-byte compact count or any int32 count within the budget read here; null,
            # longer ones and refusals in _count_at.
            count = self.src.fresh("n")
            read, fits, width = (("frame[pos] - 1", f"0 <= {count} < 0x7F", 1) if compact
                                 else ("I32(frame, pos)[0]", f"0 <= {count}", 4))
            e(indent, f"{count} = {read}")
            e(indent, f"if {fits} and {count} <= left:")
            e(indent + 1, f"pos += {width}")
            e(indent + 1, f"left -= {count}")
            e(indent, "else:")
            e(indent + 1, f"{count}, pos, left = _count_at(frame, pos, {compact}, {nullable}, left)")
            e(indent, f"if {count} is None:")
            e(indent + 1, f"{target} = None")
            e(indent, "else:")
            item = f.type[2:]
            if f.fields:
                e(indent + 1, f"{target} = []")
                e(indent + 1, f"for _ in range({count}):")
                element = self.src.fresh("item")
                self.struct(f.fields, path, indent + 2, element)
                e(indent + 2, f"{target}.append({element})")
            elif item in _FIXED:
                e(indent + 1, f"{target}, pos = _fixed_array_at(frame, pos, end, {count}, "
                              f"{_FIXED[item]!r})")
            else:
                e(indent + 1, f"{target} = []")
                e(indent + 1, f"for _ in range({count}):")
                element = self.src.fresh("item")
                self.field(F(f.name, item), False, path, indent + 2, element)
                e(indent + 2, f"{target}.append({element})")
        else:
            raise ValueError(f"unknown field type {f.type!r}")


class _Encoder:
    def __init__(self, api: Api, version: int, src: _Source, parts: bool = False) -> None:
        self.api = api
        self.version = version
        self.flexible = api.is_flexible(version)
        self.src = src
        self.parts = parts  # records fields as chunks of their own (``response_parts_encoder``)

    def struct(self, fields: Sequence[F], obj: str, indent: int) -> None:
        """Lines that append the encoding of the struct ``obj`` (a dict) to the parts."""
        v = self.version
        members = [(f, in_range(v, f.nullable)) for f in fields
                   if in_range(v, f.versions) and f.tag is None]
        tagged = [f for f in fields if in_range(v, f.versions) and f.tag is not None]
        runs = _runs(members)
        # The fields after the last fixed-width ones, when they are an error message and the
        # like (nullable strings and bytes, arrays: a Produce partition's record errors and
        # error message), which a struct usually leaves out: absent, they and the tagged
        # section are constant bytes, written at once.
        split = len(runs)
        while split and _left_out_often(*runs[split - 1][0]):
            split -= 1
        for run in runs[:split]:
            self.run(run, obj, indent)
        tail = [f for run in runs[split:] for f, _ in run]
        absent = (self.absent_bytes(runs[split:], tagged)
                  if 0 < split and runs[split - 1][0][0].type in _FIXED
                  and any(f.type == "string" for f in tail) else None)
        if absent is None:
            self.rest(runs[split:], tagged, obj, indent)
            return
        names = [f.name for f in (*tail, *tagged)] + ["tagged_fields"] * self.flexible
        keys = self.src.constant("NAMES", frozenset(names))
        self.src.emit(indent, f"if {obj}.keys().isdisjoint({keys}):  # all left out")
        self.src.emit(indent + 1, f"a({absent!r})")
        self.src.emit(indent, "else:")
        self.rest(runs[split:], tagged, obj, indent + 1)

    def absent_bytes(self, runs: list, tagged: list[F]) -> bytes | None:
        """What ``rest`` writes for a struct without any of these fields (None: it raises)."""
        src = _Source("absent fields")
        src.emit(0, "def absent(obj):")
        src.emit(1, "parts = []")
        src.emit(1, "a = parts.append")
        _Encoder(self.api, self.version, src).rest(runs, tagged, "obj", 1)
        src.emit(1, "return b''.join(parts)")
        try:
            return src.compile("absent")({})
        except Exception:  # noqa: BLE001 - a field without a default: no constant
            return None

    def run(self, run: list, obj: str, indent: int) -> None:
        """The lines of one run of fields (``_runs``)."""
        v, e = self.version, self.src.emit
        if run[0][0].type in _FIXED:
            fmt = "".join(_FIXED[f.type] for f, _ in run)
            pack = self.src.constant("P", struct.Struct(">" + fmt).pack)
            args = []
            for f, _ in run:
                get = f"{obj}.get({f.name!r}, {_default(self.src, f, v)})"
                args.append(f"1 if {get} else 0" if f.type == "bool" else get)
            e(indent, f"a({pack}({', '.join(args)}))")
        else:
            f, nullable = run[0]
            value = self.src.fresh("v")
            e(indent, f"{value} = {obj}.get({f.name!r}, {_default(self.src, f, v)})")
            self.field(f, nullable, value, indent)

    def rest(self, runs: list, tagged: list[F], obj: str, indent: int) -> None:
        """The lines of the runs, then of the tagged-field section."""
        v, e = self.version, self.src.emit
        for run in runs:
            self.run(run, obj, indent)
        if self.flexible:
            tests, entries = [f"{obj}.get('tagged_fields')"], []
            for f in tagged:
                default = _default(self.src, f, v)
                get = f"{obj}.get({f.name!r}, {default})"
                tests.append(f"not _is_default({get}, {default})" if default == "[]"
                             else f"{get} is not None" if default == "None"
                             else f"{get} != {default}")
                entries.append(f"({f.tag}, {f.name!r}, {default}, {self.tag_writer(f)})")
            known = self.src.fresh("KNOWN")
            self.src.tail.append(f"{known} = ({''.join(x + ', ' for x in entries)})")
            e(indent, f"if {' or '.join(tests)}:")
            e(indent + 1, f"_put_tagged(a, {obj}, {known})")
            e(indent, "else:")
            e(indent + 1, "a(b'\\x00')  # no tagged fields: the usual case")

    def tag_writer(self, f: F) -> str:
        """A function encoding the value of the tagged field ``f`` to its bytes."""
        name, parts = self.src.fresh("write_tag"), self.parts

        def body() -> None:
            self.src.emit(1, "parts = []")
            self.src.emit(1, "a = parts.append")
            self.field(f, in_range(self.version, f.nullable), "value", 1)
            self.src.emit(1, "return b''.join(parts)")

        self.parts = False
        self.src.function(f"def {name}(value):", body)
        self.parts = parts
        return name

    def field(self, f: F, nullable: bool, value: str, indent: int) -> None:
        e, compact = self.src.emit, self.flexible
        if f.type in _FIXED:
            pack = self.src.constant("P", struct.Struct(">" + _FIXED[f.type]).pack)
            e(indent, f"a({pack}(1 if {value} else 0))" if f.type == "bool"
              else f"a({pack}({value}))")
        elif f.type == "uuid":
            e(indent, f"_put_uuid(a, {value})")
        elif f.type == "string":
            e(indent, f"if {value} is None:")
            e(indent + 1, _null_line(compact, nullable, False, "string"))
            e(indent, "else:")
            data = self.src.fresh("d")
            e(indent + 1, f"{data} = {value}.encode('utf-8')")
            e(indent + 1, _length_line(data, compact))
            e(indent + 1, f"a({data})")
        elif f.type == "records" and self.parts:  # its bytes a chunk of their own, unread
            e(indent, f"if {value} is None:")
            e(indent + 1, "a(b'\\x00')" if compact else "a(b'\\xff\\xff\\xff\\xff')")
            e(indent, "else:")
            e(indent + 1, f"if type({value}) is memoryview and {value}.itemsize != 1:")
            e(indent + 2, f"{value} = {value}.cast('B')  # len() of a chunk counts its bytes")
            e(indent + 1, _length_line(value, compact, wide=True))
            e(indent + 1, f"if {value}:")
            e(indent + 2, "out.append(b''.join(parts))")
            e(indent + 2, "parts.clear()")
            e(indent + 2, f"out.append({value})")
        elif f.type in ("bytes", "records"):
            e(indent, f"_put_bytes(a, {value}, {compact}, {nullable or f.type == 'records'})")
        elif f.type == "struct":
            if nullable:
                e(indent, f"if {value} is None:")
                e(indent + 1, "a(b'\\xff')")
                e(indent, "else:")
                e(indent + 1, "a(b'\\x01')")
                self.struct(f.fields, value, indent + 1)
            else:
                self.struct(f.fields, value, indent)
        elif f.type.startswith("[]"):
            # Null (aborted_transactions under read_uncommitted) and empty arrays (no record
            # errors) are a constant.
            e(indent, f"if not {value}:")
            e(indent + 1, f"if {value} is None:")
            e(indent + 2, _null_line(compact, nullable, True, "array"))
            e(indent + 1, "else:")
            e(indent + 2, "a(b'\\x01')" if compact else "a(b'\\x00\\x00\\x00\\x00')")
            e(indent, "else:")
            e(indent + 1, _length_line(value, compact, wide=True))
            item = self.src.fresh("item")
            e(indent + 1, f"for {item} in {value}:")
            if f.fields:
                self.struct(f.fields, item, indent + 2)
            else:
                self.field(F(f.name, f.type[2:]), False, item, indent + 2)
        else:
            raise ValueError(f"unknown field type {f.type!r}")


def _null_line(compact: bool, nullable: bool, wide: bool, what: str) -> str:
    """The line appending a null string (``wide``: bytes, array), or refusing a non-nullable
    one (the declared codec then says why)."""
    if not nullable:
        return f"raise ValueError('null for a non-nullable {what}')"
    return "a(b'\\x00')" if compact else "a(b'\\xff\\xff\\xff\\xff')" if wide else "a(b'\\xff\\xff')"


def _left_out_often(f: F, nullable: bool) -> bool:
    """Nullable strings and bytes, and arrays: fields a struct often leaves out."""
    return (nullable and f.type in ("string", "bytes")) or f.type.startswith("[]")


def _length_line(value: str, compact: bool, wide: bool = False) -> str:
    """The line appending the length of ``value`` (a string's bytes, an array)."""
    if compact:
        return f"a(UVARINT1[len({value}) + 1] if len({value}) < 0x7F else _uvarint(len({value}) + 1))"
    return f"a({'P32' if wide else 'P16'}(len({value})))"


def _camel(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


def request_decoder(api_key: int, version: int) -> tuple[Callable, str]:
    """The generated decoder of (api_key, version)'s request, and its source."""
    return _decoder(api_key, version, "request")


def response_decoder(api_key: int, version: int) -> tuple[Callable, str]:
    """The generated decoder of (api_key, version)'s response (no element budget: the declared
    response codec has none), and its source."""
    return _decoder(api_key, version, "response")


def _decoder(api_key: int, version: int, which: str) -> tuple[Callable, str]:
    api = APIS[ApiKey(api_key)]
    fields = api.request if which == "request" else api.response
    budget = "MAX_REQUEST_ARRAY_ELEMENTS" if which == "request" else "INFINITE"
    src = _Source(f"{ApiKey(api_key).name} v{version} {which} decoder")
    decoder = _Decoder(api, version, src)
    src.emit(0, "def decode(frame, offset, version):")
    src.emit(1, "try:")
    src.emit(2, f"pos, end, left = offset, len(frame), {budget}")
    if any(_has_records(f) for f in fields):
        src.emit(2, "view = memoryview(frame)")
    decoder.struct(fields, _camel(ApiKey(api_key).name.lower()) + which.title(), 2, "r")
    src.emit(2, "return r")
    src.emit(1, "except CorruptFrameError:")
    src.emit(2, "raise")
    src.emit(1, "except UnicodeDecodeError as exc:")
    src.emit(2, "raise CorruptFrameError(f'string is not UTF-8: {exc}') from None")
    src.emit(1, "except DECODE_ERRORS as exc:")
    src.emit(2, "raise CorruptFrameError(f'undecodable message: {exc}') from None")
    return src.compile("decode"), src.text


def _has_records(f: F) -> bool:
    return f.type == "records" or any(_has_records(g) for g in f.fields)


def response_encoder(api_key: int, version: int) -> tuple[Callable, str]:
    """The generated encoder of (api_key, version)'s response, and its source."""
    api = APIS[ApiKey(api_key)]
    src = _Source(f"{ApiKey(api_key).name} v{version} response encoder")
    src.emit(0, "def encode(obj, version):")
    src.emit(1, "parts = []")
    src.emit(1, "a = parts.append")
    _Encoder(api, version, src).struct(api.response, "obj", 1)
    src.emit(1, "return b''.join(parts)")
    return src.compile("encode"), src.text


def response_parts_encoder(api_key: int, version: int) -> tuple[Callable, str]:
    """The generated encoder of (api_key, version)'s response as chunks for one gather-write
    (``b"".join`` of them is ``response_encoder``'s bytes): each non-empty ``records`` value is
    a chunk of its own, as it is (bytes, a memoryview, or any sized object the writer knows how
    to send, such as the broker's FileSlice: its ``len`` is its size in bytes), the fields
    between them one chunk each. Returns the source too."""
    api = APIS[ApiKey(api_key)]
    src = _Source(f"{ApiKey(api_key).name} v{version} response parts encoder")
    src.emit(0, "def encode(obj, version):")
    src.emit(1, "out = []")
    src.emit(1, "parts = []")
    src.emit(1, "a = parts.append")
    _Encoder(api, version, src, parts=True).struct(api.response, "obj", 1)
    src.emit(1, "if parts:")
    src.emit(2, "out.append(b''.join(parts))")
    src.emit(1, "return out")
    return src.compile("encode"), src.text


# The generator of each codec a schema holds (``_registry.Schema``'s slot of that name).
_GENERATORS = {
    "fast_request": request_decoder, "fast_response": response_encoder,
    "fast_response_parts": response_parts_encoder, "fast_response_decoder": response_decoder,
}


def _lazy(api_key: int, version: int, slot: str) -> Callable:
    """A stand-in registered until first use: it generates the codec, puts it in the schema's
    place and runs it."""

    def first_use(*args):
        codec = _GENERATORS[slot](api_key, version)[0]
        setattr(SCHEMAS[(api_key, version)], slot, codec)
        return codec(*args)

    return first_use


def install() -> None:
    """Register the generated codecs of every declared version of ``FAST_APIS`` (and of
    ``RECORDS_APIS``: the parts encoder and the response decoder)."""
    for key in FAST_APIS:
        for version in APIS[key].versions:
            register_fast(key, version, decode_request=_lazy(key, version, "fast_request"),
                          encode_response=_lazy(key, version, "fast_response"))
    for key in RECORDS_APIS:
        for version in APIS[key].versions:
            register_fast(
                key, version,
                encode_response_parts=_lazy(key, version, "fast_response_parts"),
                decode_response=_lazy(key, version, "fast_response_decoder"))


def _tag_of(f: F) -> int:
    return -1 if f.tag is None else f.tag
