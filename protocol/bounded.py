"""Bounds-checked reads over untrusted bytes: one reader for every record shape kept outside the
wire codecs (``__consumer_offsets`` and ``__transaction_state`` records, the classic consumer
protocol's subscription and assignment blobs).

Each caller names what it reads (``what``, used in every message) and the exception it raises
(``error``, CorruptFrameError unless given), so a truncated record reads "consumer group record is
truncated" and a transaction log corrupt in the same way raises the transaction log's own error.
No read ever goes past the data, allocates more than the data holds, or loops longer than the data
is long: every length and count is checked against the bytes that are left.

The layouts are Kafka's primitive types: int8/16/32/64 big-endian, strings with an int16 length
(-1 = null), bytes with an int32 length (-1 = null), unsigned varints, compact strings and arrays
(unsigned varint length + 1, 0 = null), uuids and tagged-field sections.
"""

from __future__ import annotations

import struct
import uuid

from protocol.errors import CorruptFrameError

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class BoundedReader:
    """Reads Kafka primitives from ``data``, raising ``error`` for anything short or malformed."""

    __slots__ = ("data", "pos", "what", "error")

    def __init__(self, data: bytes, what: str,
                 error: type[Exception] = CorruptFrameError) -> None:
        self.data = data
        self.pos = 0
        self.what = what
        self.error = error

    def fail(self, problem: str) -> Exception:
        """The exception for ``problem`` in this record, to raise."""
        return self.error(f"{problem} in {self.what}")

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int) -> bytes:
        if n < 0 or n > len(self.data) - self.pos:
            raise self.error(f"{self.what} is truncated")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return bytes(chunk)

    def unpack(self, fmt: struct.Struct) -> tuple:
        if fmt.size > len(self.data) - self.pos:
            raise self.error(f"{self.what} is truncated")
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return values

    def i8(self) -> int:
        return self.unpack(_I8)[0]

    def i16(self) -> int:
        return self.unpack(_I16)[0]

    def i32(self) -> int:
        return self.unpack(_I32)[0]

    def i64(self) -> int:
        return self.unpack(_I64)[0]

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.take(16))

    def uvarint(self) -> int:
        """An unsigned varint of at most 5 bytes (Kafka's int32-sized varints)."""
        value = 0
        for shift in range(0, 35, 7):
            if self.pos >= len(self.data):
                raise self.error(f"{self.what} is truncated")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
        raise self.fail("unsigned varint longer than 5 bytes")

    def _text(self, n: int) -> str:
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("string that is not UTF-8") from None

    def nullable_string(self) -> str | None:
        """A string with an int16 length; -1 is null."""
        n = self.i16()
        return None if n == -1 else self._text(n)

    def string(self) -> str:
        """A non-null string with an int16 length."""
        value = self.nullable_string()
        if value is None:
            raise self.fail("null string")
        return value

    def nullable_bytes(self) -> bytes | None:
        """Bytes with an int32 length; -1 is null."""
        n = self.i32()
        return None if n == -1 else self.take(n)

    def compact_string(self) -> str | None:
        """A compact nullable string: unsigned varint length + 1, 0 is null."""
        n = self.uvarint()
        return None if n == 0 else self._text(n - 1)

    def count(self, min_size: int = 1) -> int:
        """An int32 array length, each element at least ``min_size`` bytes: a count the bytes left
        cannot hold is refused before anything is allocated for it."""
        n = self.i32()
        if n < 0 or n * min_size > len(self.data) - self.pos:
            raise self.fail(f"bad array length {n}")
        return n

    def compact_count(self, min_size: int = 1) -> int:
        """A compact (non-null) array length: unsigned varint length + 1."""
        n = self.uvarint() - 1
        if n < 0 or n * min_size > len(self.data) - self.pos:
            raise self.fail(f"bad array length {n}")
        return n

    def tagged_fields(self) -> dict[int, bytes]:
        """A tagged-field section: tag -> its bytes, tags ascending and each once (as Kafka
        writes them)."""
        fields: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            if fields and tag <= max(fields):
                raise self.fail(f"tagged field {tag} out of order or repeated")
            fields[tag] = self.take(self.uvarint())
        return fields
