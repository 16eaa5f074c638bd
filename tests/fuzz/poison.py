"""Record batches with a valid CRC but something a consumer cannot read: the poison pills the
broker must refuse (docs/protocol.md section 4). Shared by the integration tests and the fuzzer."""

from __future__ import annotations

import functools
import struct
import zlib

import crc32c

from protocol.records import HEADER_SIZE, Compression, encode_batch, encode_varint

TS = 1_700_000_000_000
_HEADER = struct.Struct(">qiibIhiqqqhii")


def recrc(batch: bytes | bytearray) -> bytes:
    """The batch with ``length`` and CRC recomputed: whatever the records say, the batch is
    well-formed at the level a CRC check sees."""
    out = bytearray(batch)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def with_records(section: bytes, count: int, attributes: int = 0) -> bytes:
    """A batch whose records section is ``section`` (raw bytes) claiming ``count`` records."""
    head = bytearray(HEADER_SIZE)
    _HEADER.pack_into(head, 0, 0, 0, -1, 2, 0, attributes, max(count - 1, 0), TS, TS, -1, -1, -1,
                      count)
    return recrc(bytes(head) + section)


def _record(offset_delta: int, value: bytes, key_len: bytes | None = None,
            extra: bytes = b"", length_adjust: int = 0, headers: bytes = b"\x00") -> bytes:
    body = (b"\x00" + encode_varint(0) + encode_varint(offset_delta)
            + (key_len if key_len is not None else b"\x01")
            + encode_varint(len(value)) + value + headers + extra)
    return encode_varint(len(body) + length_adjust) + body


def good_section(n: int = 3) -> bytes:
    return b"".join(_record(i, b"value-%d" % i) for i in range(n))


@functools.cache
def poison_batches() -> dict[str, bytes]:
    """name -> a batch with a correct CRC and malformed records."""
    gzip_bomb = zlib.compress(_record(0, b"\x00" * (64 << 20)), 9, 31)  # ~64 KB claiming 64 MB
    out = {
        "record length too long": with_records(
            _record(0, b"a") + _record(1, b"b", length_adjust=3) + b"\x00\x00\x00", 2),
        "record length too short": with_records(
            _record(0, b"a") + _record(1, b"bcd", length_adjust=-2), 2),
        "offset delta out of order": with_records(_record(0, b"a") + _record(5, b"b"), 2),
        "count above records": with_records(good_section(3), 4),
        "count below records": with_records(good_section(3), 2),
        "negative key length": with_records(_record(0, b"a", key_len=encode_varint(-7)), 1),
        "key runs past record": with_records(_record(0, b"a", key_len=encode_varint(60)), 1),
        "overlong varint": with_records(b"\x80\x80\x80\x80\x80\x80\x01" + b"\x00" * 10, 1),
        "trailing bytes": with_records(good_section(2) + b"\x00\x00", 2),
        "bad header key utf-8": with_records(
            _record(0, b"a", headers=b"\x02\x04\xff\xfe\x02ok"), 1),
        "negative header count": with_records(_record(0, b"a", headers=encode_varint(-3)), 1),
        # (the attributes byte follows the one-byte length; kafka-python reads it as a varint)
        "record attributes 0x80": with_records(
            _record(0, b"a")[:1] + b"\x80" + _record(0, b"a")[2:], 1),
        "gzip garbage": with_records(b"\x1f\x8b" + b"\x00" * 30, 1, Compression.GZIP),
        "gzip bomb": with_records(gzip_bomb, 1, Compression.GZIP),
        "gzip of malformed records": with_records(
            zlib.compress(_record(0, b"a", length_adjust=4), 6, 31), 1, Compression.GZIP),
    }
    return out


def good_batch(values: list[bytes], compression: Compression = Compression.NONE) -> bytes:
    return encode_batch([(None, v, [], TS + i) for i, v in enumerate(values)],
                        compression=compression)
