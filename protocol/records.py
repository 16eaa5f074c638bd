"""RecordBatch v2 (magic 2): batch header, record codec, CRC-32C, control records.

Pure: no I/O, no clock. Functions that read bytes from the network end in ``_untrusted`` and raise
only ``CorruptFrameError`` on bad bytes; encoders raise ``ValueError`` on bad arguments.

Layout (``docs/protocol.md`` section 4; big-endian; offsets from the start of the batch)::

    RecordBatch =>
      baseOffset           int64   @0   offset of the first record; producers send 0, the broker
                                        patches the assigned offset in place. NOT under the CRC
      length               int32   @8   bytes after this field (batch size = length + 12)
      partitionLeaderEpoch int32   @12  the broker may overwrite it. NOT under the CRC
      magic                int8    @16  2
      crc                  uint32  @17  CRC-32C (Castagnoli) of bytes [21, 12 + length): everything
                                        from attributes to the end of the batch
      attributes           int16   @21  bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd),
                                        bit 3 timestampType (1 = LogAppendTime),
                                        bit 4 transactional, bit 5 control; the rest 0
      lastOffsetDelta      int32   @23  offsetDelta of the last record (records - 1 when written)
      baseTimestamp        int64   @27  timestamp of the first record
      maxTimestamp         int64   @35  largest record timestamp (the append time if bit 3 is set)
      producerId           int64   @43  -1 = none
      producerEpoch        int16   @51  -1 = none
      baseSequence         int32   @53  -1 = none; the last sequence is baseSequence +
                                        lastOffsetDelta, wrapping past INT32_MAX to 0
      recordsCount         int32   @57  number of records that follow
      records              bytes   @61  recordsCount Records back to back; when the codec is not 0,
                                        one compressed blob holding them (the CRC covers the blob)

    Record =>                           varint/varlong: zig-zag, then LEB128 (7 bits per byte)
      length               varint       bytes after this field
      attributes           int8         unused, 0
      timestampDelta       varlong      timestamp - baseTimestamp
      offsetDelta          varint       offset - baseOffset
      keyLength            varint       -1 = null key
      key                  bytes
      valueLength          varint       -1 = null value
      value                bytes
      headersCount         varint
      Header =>                         headersCount times
        headerKeyLength    varint       never null
        headerKey          UTF-8
        headerValueLength  varint       -1 = null value
        headerValue        bytes

    Control record (attributes transactional + control, one record at offsetDelta 0) =>
      key   = version int16 (0), type int16 (0 ABORT, 1 COMMIT)
      value = version int16 (0), coordinatorEpoch int32

The broker does not decode records: it checks their framing with ``validate_records_untrusted``
(a poison batch with a valid CRC must never be stored); producers and consumers use the record
codec, so ``encode_batch``, ``decode_records_untrusted`` and the validator are written for speed:
one buffer, varints inlined with lookup tables for the common short forms, no per-record helper
layers.
"""

from __future__ import annotations

import enum
import importlib
import struct
import zlib
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import crc32c as _crc32c

from protocol.errors import CorruptFrameError
from protocol.trusted import trusted

HEADER_SIZE = 61  # full batch header incl. baseOffset and length
LOG_OVERHEAD = 12  # baseOffset(8) + length(4)
# The smallest legal ``length``: the header fields after the length field, no records.
_MIN_LENGTH = HEADER_SIZE - LOG_OVERHEAD

# attribute bits
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

INT32_MAX = 0x7FFF_FFFF

# Byte offsets of header fields from the start of a batch (see the layout above).
PARTITION_LEADER_EPOCH_OFFSET = 12
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # int16; the CRC covers [21, end)
# The low byte of the big-endian attributes: the compression, transactional and control bits.
ATTRIBUTES_LOW_BYTE_OFFSET = ATTRIBUTES_OFFSET + 1
LAST_OFFSET_DELTA_OFFSET = 23
MAX_TIMESTAMP_OFFSET = 35
# The first 43 bytes of a batch: baseOffset, length, partitionLeaderEpoch, magic, crc,
# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp (enough to walk a log and answer
# time lookups without parsing whole headers).
HEADER_PREFIX = struct.Struct(">qiibIhiqq")

_HEADER = struct.Struct(">qiibIhiqqqhii")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator_epoch

# A record needs at least 6 bytes after its length varint (attributes, timestampDelta, offsetDelta,
# keyLength, valueLength, headersCount), 7 with the length itself. Bounds records_count up front so
# a forged count cannot make us loop or allocate beyond the bytes actually present.
_MIN_RECORD_BODY = 6
_MIN_RECORD_SIZE = 7

# Decompressed record sections larger than this are refused: a few bytes of forged gzip/zstd must
# not be able to claim gigabytes of memory. Real batches are bounded by the producers' batch.size
# (1 MB by default) times the compression ratio, far below this.
_MAX_UNCOMPRESSED_SIZE = 256 * 1024 * 1024


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


# The key of a marker's one record (control record version 0).
_COMMIT_KEY = _CONTROL_KEY.pack(0, ControlType.COMMIT)
_ABORT_KEY = _CONTROL_KEY.pack(0, ControlType.ABORT)


class BatchHeader(NamedTuple):
    """The 61-byte header of a magic-2 batch, as on the wire."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        """Sequence number of the last record; sequences wrap from INT32_MAX to 0 (Kafka's rule)."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        seq = self.base_sequence + self.last_offset_delta
        return seq - (INT32_MAX + 1) if seq > INT32_MAX else seq

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)


class Record(NamedTuple):
    """One record as decoded: offset and timestamp are absolute."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    attributes: int = 0


_new_batch_header = trusted(BatchHeader)
_new_record = trusted(Record)

# ---------------------------------------------------------------------------------------------
# Batch header

_CRC_COPY_MAX = 1024  # _finish_batch: up to this size the CRC is taken over a copy


def parse_header_untrusted(buf: Any, pos: int = 0) -> BatchHeader:
    """Parse and sanity-check the batch header at ``buf[pos:]`` (bytes, bytearray or memoryview).

    Checks that 61 bytes are present, magic is 2, ``length`` covers at least the header, the codec
    is known, and recordsCount / lastOffsetDelta are not negative. It does not check that the
    whole batch is present (``iter_batches_untrusted`` does) nor the CRC (``batch_crc_ok``).
    Raises ``CorruptFrameError``.
    """
    if pos < 0:
        raise ValueError(f"negative position {pos}")
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptFrameError(
            f"record batch header needs {HEADER_SIZE} bytes, {max(len(buf) - pos, 0)} present"
        )
    header = _new_batch_header(_HEADER.unpack_from(buf, pos))
    if header.magic != 2:
        raise CorruptFrameError(f"unsupported record batch magic {header.magic} (only 2)")
    if header.length < _MIN_LENGTH:
        raise CorruptFrameError(f"record batch length {header.length} < {_MIN_LENGTH}")
    if header.attributes & COMPRESSION_MASK > Compression.ZSTD:
        raise CorruptFrameError(f"unknown compression codec {header.attributes & COMPRESSION_MASK}")
    if header.records_count < 0:
        raise CorruptFrameError(f"negative records count {header.records_count}")
    if header.last_offset_delta < 0:
        raise CorruptFrameError(f"negative last offset delta {header.last_offset_delta}")
    return header


def iter_batches_untrusted(
    buf: Any, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch in ``buf[pos:end]``, which must hold whole batches.

    Raises ``CorruptFrameError`` on a bad header or a batch that runs past ``end`` (also for
    trailing bytes too short to be a header).
    """
    end = len(buf) if end is None else min(end, len(buf))
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptFrameError(f"{end - pos} trailing bytes are not a record batch")
        header = parse_header_untrusted(buf, pos)
        size = header.length + LOG_OVERHEAD
        if pos + size > end:
            raise CorruptFrameError(
                f"record batch at {pos} is truncated: {size} bytes declared, {end - pos} present"
            )
        yield pos, header
        pos += size


def batch_crc_ok(buf: Any, pos: int, header: BatchHeader) -> bool:
    """True if the CRC-32C of bytes [pos+21, pos+size) matches the header (no copy made)."""
    end = pos + header.length + LOG_OVERHEAD
    if end > len(buf):
        return False
    return _crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end]) == header.crc


def patch_base_offset(buf: Any, pos: int, base_offset: int) -> None:
    """Write baseOffset of the batch at ``pos`` in place. The CRC stays valid (not covered)."""
    _INT64.pack_into(buf, pos, base_offset)




def stamp_log_append_time(buf: Any, pos: int, header: BatchHeader, now_ms: int) -> BatchHeader:
    """Mark the batch at ``pos`` as LogAppendTime with maxTimestamp ``now_ms`` in place (what a
    topic with ``message.timestamp.type=LogAppendTime`` does to every batch it stores), and
    rewrite its CRC. Returns the new header. Consumers then read ``now_ms`` as the timestamp of
    every record of the batch."""
    attributes = header.attributes | TIMESTAMP_TYPE_BIT
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, now_ms)
    end = pos + header.length + LOG_OVERHEAD
    crc = _crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end])
    _UINT32.pack_into(buf, pos + CRC_OFFSET, crc)
    return header._replace(attributes=attributes, max_timestamp=now_ms, crc=crc)


def patch_partition_leader_epoch(buf: Any, pos: int, epoch: int) -> None:
    """Write partitionLeaderEpoch of the batch at ``pos`` in place. Not covered by the CRC."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


# ---------------------------------------------------------------------------------------------
# Varints: zig-zag + LEB128, 64-bit (a varint is a varlong whose value fits in 32 bits)

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def encode_varint(value: int) -> bytes:
    """Zig-zag + LEB128 encoding of a signed 64-bit integer (1 to 10 bytes)."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varint value {value} outside int64")
    u = (value << 1) ^ (value >> 63)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def decode_varint(buf: Any, pos: int) -> tuple[int, int]:
    """Decode the zig-zag varint at ``buf[pos]``; return ``(value, position after it)``.

    Raises ``CorruptFrameError`` if it runs past the buffer, is longer than 10 bytes or exceeds
    64 bits.
    """
    result = 0
    shift = 0
    try:
        while True:
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 63:
                raise CorruptFrameError("varint longer than 10 bytes")
    except IndexError:
        raise CorruptFrameError("varint runs past the end of the data") from None
    if result >> 64:
        raise CorruptFrameError("varint exceeds 64 bits")
    return (result >> 1) ^ -(result & 1), pos


# Lookup tables for the hot loops. _ZIGZAG1[b] decodes a one-byte varint (b < 0x80);
# _SMALL_VARINT[n] is the encoding of n for 0 <= n < 8192 (one or two bytes): offset deltas,
# lengths and timestamp deltas of ordinary records all land there.
_ZIGZAG1 = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))
_SMALL_VARINT = tuple(encode_varint(n) for n in range(8192))
_N_SMALL = len(_SMALL_VARINT)


# ---------------------------------------------------------------------------------------------
# Compression codecs. gzip comes with Python; snappy, lz4 and zstd need optional packages,
# imported on first use (so a missing one costs nothing unless a batch asks for it).

_CODEC_PACKAGES = {
    Compression.SNAPPY: ("snappy", "python-snappy"),
    Compression.LZ4: ("lz4.frame", "lz4"),
    Compression.ZSTD: ("zstandard", "zstandard"),
}


def codec_import(name: str) -> tuple[str, str] | None:
    """``(module to import, PyPI package)`` of codec ``name`` (snappy, lz4, zstd); None: gzip
    and none need nothing."""
    codec = {"snappy": Compression.SNAPPY, "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
    return _CODEC_PACKAGES[codec[name]] if name in codec else None


def missing_codec(name: str) -> str:
    """The one message for a codec whose optional package is not installed."""
    package = codec_import(name)[1]  # type: ignore[index]
    return (f"compression {name} needs the PyPI package {package}: "
            f"pip install {package} (or the minibroker[compression] extra)")

# xerial snappy framing, which Kafka's Java producer writes: magic, version 1, compatible 1,
# then (int32 compressed length, snappy block) per block of up to 32 KiB of input.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


def _codec_module(codec: Compression) -> Any | None:
    module_name, _ = _CODEC_PACKAGES[codec]
    try:
        return importlib.import_module(module_name)
    except ImportError:
        return None


def _compress(codec: Compression, data: bytes | bytearray) -> bytes:
    if codec == Compression.GZIP:
        # zlib with a gzip wrapper (wbits 31): same bytes as gzip.compress but mtime 0, so the
        # output is deterministic.
        return zlib.compress(data, -1, 31)
    module = _codec_module(codec)
    if module is None:
        raise ValueError(missing_codec(codec.name.lower()))
    if codec == Compression.SNAPPY:
        parts = [_XERIAL_HEADER]
        view = memoryview(data)
        for start in range(0, len(data), _XERIAL_BLOCK):
            block = module.compress(bytes(view[start : start + _XERIAL_BLOCK]))
            parts.append(_INT32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == Compression.LZ4:
        # Independent blocks: Kafka's LZ4 reader does not support linked blocks.
        return module.compress(bytes(data), block_linked=False)
    return module.ZstdCompressor().compress(bytes(data))


class DecompressedTooLarge(CorruptFrameError):
    """Compressed data that expands beyond the caller's limit."""


def _too_large(limit: int) -> CorruptFrameError:
    return DecompressedTooLarge(f"compressed records expand beyond {limit} bytes")


def codec_available(codec: Compression) -> bool:
    """Whether ``codec``'s optional package (if it needs one) is installed."""
    return codec in (Compression.NONE, Compression.GZIP) or _codec_module(codec) is not None


# What one call inflates at most: the output of a large batch is built from parts this size
# (zlib allocates and writes each with the GIL released) instead of one buffer grown and copied
# with the GIL held, which cost a worker thread's event loop tens of ms for a 16 MiB bomb.
_INFLATE_STEP = 1024 * 1024


def _gunzip(data: memoryview, limit: int) -> bytes:
    # Concatenated gzip members are legal (Java's GZIPInputStream reads them); zlib-wrapped
    # deflate is accepted too (wbits 47 = detect gzip or zlib).
    parts: list[bytes] = []
    total = 0
    rest: Any = data
    while True:
        dec = zlib.decompressobj(47)
        while not dec.eof:
            room = limit + 1 - total
            step = room if room < _INFLATE_STEP else _INFLATE_STEP
            part = dec.decompress(rest, step)
            rest = dec.unconsumed_tail
            if part:
                parts.append(part)
                total += len(part)
                if total > limit:
                    raise _too_large(limit)
            if len(part) < step and not rest:
                break  # the input is used up
        if not dec.eof:
            raise CorruptFrameError("gzip data is truncated")
        rest = dec.unused_data
        if not rest:
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _unsnappy_raw(module: Any, block: bytes, limit: int) -> bytes:
    # The raw format starts with the uncompressed length (unsigned LEB128): check it before the
    # library allocates that much.
    length = shift = 0
    for i in range(min(5, len(block))):
        length |= (block[i] & 0x7F) << shift
        if block[i] < 0x80:
            break
        shift += 7
    if length > limit:
        raise _too_large(limit)
    return module.decompress(block)


def _unsnappy(module: Any, data: memoryview, limit: int) -> bytes:
    raw = bytes(data)
    if not raw.startswith(_XERIAL_MAGIC):
        return _unsnappy_raw(module, raw, limit)  # librdkafka may send unframed snappy
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    if len(raw) < pos:
        raise CorruptFrameError("truncated xerial snappy header")
    while pos < len(raw):
        if len(raw) - pos < 4:
            raise CorruptFrameError("truncated xerial snappy block length")
        (n,) = _INT32.unpack_from(raw, pos)
        pos += 4
        if n < 0 or pos + n > len(raw):
            raise CorruptFrameError("xerial snappy block runs past the batch")
        out += _unsnappy_raw(module, raw[pos : pos + n], limit - len(out))
        pos += n
        if len(out) > limit:
            raise _too_large(limit)
    return bytes(out)


def _decompress(codec: Compression, data: memoryview, limit: int | None = None) -> bytes:
    """The decompressed records section; ``CorruptFrameError`` if bad or beyond ``limit`` bytes
    (checked while decompressing: a bomb never costs more than ``limit`` bytes of memory)."""
    if limit is None:
        limit = _MAX_UNCOMPRESSED_SIZE
    module: Any = None
    if codec != Compression.GZIP:
        module = _codec_module(codec)
        if module is None:
            raise CorruptFrameError(
                f"record batch can not be decompressed: {missing_codec(codec.name.lower())}"
            )
    try:
        if codec == Compression.GZIP:
            out = _gunzip(data, limit)
        elif codec == Compression.SNAPPY:
            out = _unsnappy(module, data, limit)
        elif codec == Compression.LZ4:
            dec = module.LZ4FrameDecompressor()
            out = dec.decompress(bytes(data), limit + 1)
            if not dec.eof and len(out) <= limit:
                raise CorruptFrameError("lz4 frame is truncated")
        else:
            # A stream reader copes with frames that do not state their content size (librdkafka
            # writes such frames) and lets us bound the output.
            with module.ZstdDecompressor().stream_reader(
                bytes(data), read_across_frames=True
            ) as reader:
                out = reader.read(limit + 1)
    except CorruptFrameError:
        raise
    except Exception as exc:  # each codec library has its own error types
        raise CorruptFrameError(f"cannot decompress {codec.name.lower()} records: {exc}") from exc
    if len(out) > limit:
        raise _too_large(limit)
    return out


decompress = _decompress  # for other compressed payloads (client telemetry, KIP-714)

# ---------------------------------------------------------------------------------------------
# Encoding


def _encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    parts = [encode_varint(len(headers))]
    for h_key, h_value in headers:
        kb = h_key.encode()
        parts.append(encode_varint(len(kb)))
        parts.append(kb)
        if h_value is None:
            parts.append(b"\x01")
        else:
            parts.append(encode_varint(len(h_value)))
            parts.append(h_value)
    return b"".join(parts)


def _build_batch(
    records: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int]],
    attributes: int,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    partition_leader_epoch: int,
) -> tuple[bytearray, BatchHeader]:
    if not records:
        raise ValueError("a record batch needs at least one record")
    codec = attributes & COMPRESSION_MASK  # (an int: no enum lookup per batch)
    base_ts = records[0][3]
    max_ts = base_ts
    small = _SMALL_VARINT
    n_small = _N_SMALL
    enc = encode_varint
    join = b"".join
    # Uncompressed records go straight after a placeholder header; compressed ones are built
    # alone, then compressed.
    out = bytearray() if codec else bytearray(HEADER_SIZE)
    offset_delta = 0
    for key, value, headers, ts in records:
        if ts > max_ts:
            max_ts = ts
        d = ts - base_ts
        ts_b = small[d] if 0 <= d < n_small else enc(d)
        off_b = small[offset_delta] if offset_delta < n_small else enc(offset_delta)
        if key is None:
            key_len_b = b"\x01"
            key = b""
        else:
            n = len(key)
            key_len_b = small[n] if n < n_small else enc(n)
        if value is None:
            value_len_b = b"\x01"
            value = b""
        else:
            n = len(value)
            value_len_b = small[n] if n < n_small else enc(n)
        body = join(
            (
                b"\x00",  # record attributes
                ts_b,
                off_b,
                key_len_b,
                key,
                value_len_b,
                value,
                _encode_headers(headers) if headers else b"\x00",
            )
        )
        n = len(body)
        out += small[n] if n < n_small else enc(n)
        out += body
        offset_delta += 1

    if codec:
        compressed = _compress(Compression(codec), out)
        out = bytearray(HEADER_SIZE)
        out += compressed
    return out, _finish_batch(out, attributes, base_offset, producer_id, producer_epoch,
                              base_sequence, partition_leader_epoch, offset_delta, base_ts,
                              max_ts)


def _finish_batch(
    out: bytearray, attributes: int, base_offset: int, producer_id: int, producer_epoch: int,
    base_sequence: int, partition_leader_epoch: int, records_count: int, base_ts: int,
    max_ts: int,
) -> BatchHeader:
    """Write the header of the batch in ``out`` (its records after ``HEADER_SIZE`` bytes), the
    CRC last; returns it."""
    try:
        _HEADER.pack_into(
            out,
            0,
            base_offset,
            len(out) - LOG_OVERHEAD,
            partition_leader_epoch,
            2,
            0,  # crc, set below
            attributes,
            records_count - 1,  # last offset delta
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count,
        )
    except struct.error as exc:
        raise ValueError(f"record batch field out of range: {exc}") from exc
    # A small batch (a coordinator record, a marker) is cheaper to copy than to view twice.
    crc = _crc32c.crc32c(out[ATTRIBUTES_OFFSET:] if len(out) <= _CRC_COPY_MAX
                         else memoryview(out)[ATTRIBUTES_OFFSET:])
    _UINT32.pack_into(out, CRC_OFFSET, crc)
    return _new_batch_header((
        base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, 2, crc, attributes,
        records_count - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence,
        records_count,
    ))


def encode_batch(
    records: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int]],
    *,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    compression: Compression = Compression.NONE,
    partition_leader_epoch: int = -1,
    timestamp_type: int = 0,
) -> bytes:
    """Build a complete, CRC-correct magic-2 batch from ``(key, value, headers, timestamp_ms)``.

    Offset deltas are 0..n-1, baseTimestamp is the first record's timestamp and maxTimestamp the
    largest. Raises ``ValueError`` for no records, a field out of range, a transactional batch
    without a producer id, or a codec whose optional package (python-snappy, lz4, zstandard) is
    not installed.
    """
    attributes = _batch_attributes(compression, timestamp_type, transactional, producer_id)
    out, _ = _build_batch(records, attributes, base_offset, producer_id, producer_epoch,
                          base_sequence, partition_leader_epoch)
    return bytes(out)


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int]],
    *,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    compression: Compression = Compression.NONE,
    timestamp_type: int = 0,
) -> tuple[bytearray, BatchHeader]:
    """``encode_batch``'s batch (base offset 0, no leader epoch) as a bytearray, with its header:
    what the broker's own writers hand to ``Partition.append_built_batch``, which patches the
    base offset in place and needs no parse of the header it would read back."""
    if not compression and not timestamp_type and not transactional:
        attributes = 0  # a coordinator record (Compression.NONE is 0): nothing to check
    else:
        attributes = _batch_attributes(compression, timestamp_type, transactional, producer_id)
    return _build_batch(records, attributes, 0, producer_id, producer_epoch, base_sequence, -1)


def build_record_batch(key: bytes | None, value: bytes | None,
                       timestamp_ms: int) -> tuple[bytearray, BatchHeader]:
    """``build_batch([(key, value, (), timestamp_ms)])``: the batch of one record without
    headers, compression or producer that a coordinator appends (a ``__transaction_state``
    record, three per transaction), built without the loop over records."""
    small, n_small = _SMALL_VARINT, _N_SMALL
    if key is None:
        key, key_len = b"", b"\x01"  # -1: null
    else:
        n = len(key)
        key_len = small[n] if n < n_small else encode_varint(n)
    if value is None:
        value, value_len = b"", b"\x01"
    else:
        n = len(value)
        value_len = small[n] if n < n_small else encode_varint(n)
    # attributes, timestamp delta, offset delta; the key; the value; no headers
    body = b"".join((b"\x00\x00\x00", key_len, key, value_len, value, b"\x00"))
    n = len(body)
    out = bytearray(HEADER_SIZE)
    out += small[n] if n < n_small else encode_varint(n)
    out += body
    return out, _finish_batch(out, 0, 0, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, -1, 1,
                              timestamp_ms, timestamp_ms)


def _batch_attributes(compression: Compression, timestamp_type: int, transactional: bool,
                      producer_id: int) -> int:
    # A member needs no conversion (the enum call costs 0.5 us); an int is checked by it.
    codec = compression if type(compression) is Compression else Compression(compression)
    if timestamp_type not in (0, 1):
        raise ValueError(
            f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}"
        )
    attributes = int(codec)
    if timestamp_type:
        attributes |= TIMESTAMP_TYPE_BIT
    if transactional:
        if producer_id < 0:
            raise ValueError("a transactional batch needs a producer id")
        attributes |= TRANSACTIONAL_BIT
    return attributes


def encode_control_batch(
    *,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Build a transaction marker batch (COMMIT or ABORT) for ``producer_id``/``producer_epoch``."""
    out, _ = build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                 timestamp_ms, base_offset, partition_leader_epoch)
    return bytes(out)


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> tuple[bytearray, BatchHeader]:
    """``encode_control_batch``'s marker as a bytearray, with its header (see ``build_batch``)."""
    out = bytearray(HEADER_SIZE)
    out += _control_record(commit, coordinator_epoch)
    return out, _finish_batch(out, TRANSACTIONAL_BIT | CONTROL_BIT, base_offset, producer_id,
                              producer_epoch, NO_SEQUENCE, partition_leader_epoch, 1,
                              timestamp_ms, timestamp_ms)


@lru_cache(maxsize=64)
def _control_record(commit: bool, coordinator_epoch: int) -> bytes:
    """The one record of a marker, length prefix included: the same bytes in every marker of
    that outcome and coordinator epoch (its timestamp and offset deltas are 0)."""
    key = _COMMIT_KEY if commit else _ABORT_KEY
    try:
        value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    except struct.error as exc:
        raise ValueError(f"coordinator_epoch out of range: {exc}") from exc
    out, _ = _build_batch([(key, value, (), 0)], TRANSACTIONAL_BIT | CONTROL_BIT, 0,
                          NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, -1)
    return bytes(out[HEADER_SIZE:])


# ---------------------------------------------------------------------------------------------
# Decoding


def decode_records_untrusted(
    buf: Any, pos: int = 0, header: BatchHeader | None = None
) -> list[Record]:
    """Decode every record of the batch at ``buf[pos:]`` (decompressing if needed).

    ``header`` may be passed when already parsed. Offsets and timestamps are absolute; with
    LogAppendTime every record takes the batch's maxTimestamp, as in Kafka. The CRC is not checked
    here (``batch_crc_ok``). Raises only ``CorruptFrameError``: truncated batch, malformed or
    overlong varint, negative length other than -1, a record whose declared length disagrees with
    its fields, fewer or more records than recordsCount, undecodable header key, bad compressed
    data or a codec whose package is missing.
    """
    if header is None:
        header = parse_header_untrusted(buf, pos)
    end = pos + header.length + LOG_OVERHEAD
    if end > len(buf):
        raise CorruptFrameError(
            f"record batch at {pos} is truncated: {header.length + LOG_OVERHEAD} bytes declared, "
            f"{len(buf) - pos} present"
        )
    section = memoryview(buf)[pos + HEADER_SIZE : end]
    codec = header.attributes & COMPRESSION_MASK
    if codec:
        if codec > Compression.ZSTD:
            raise CorruptFrameError(f"unknown compression codec {codec}")
        data = _decompress(Compression(codec), section)
    else:
        data = bytes(section)
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_BIT else None
    return _decode_records(
        data, header.records_count, header.base_offset, header.base_timestamp, log_append_time
    )


def _decode_records(
    data: bytes, count: int, base_offset: int, base_ts: int, log_append_time: int | None
) -> list[Record]:
    n = len(data)
    if count < 0 or count > n // _MIN_RECORD_SIZE:
        raise CorruptFrameError(f"records count {count} does not fit in {n} bytes of records")
    zz = _ZIGZAG1
    dv = decode_varint
    new = _new_record
    records: list[Record] = []
    append = records.append
    p = 0
    # Each varint is inlined with one- and two-byte fast paths; longer ones go to decode_varint.
    # Slices never raise, so a length that overruns shows up in the per-record end check, and a
    # read past the data raises IndexError, turned into CorruptFrameError below.
    try:
        for _ in range(count):
            b = data[p]
            if b < 0x80:
                length = zz[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    u = (b & 0x7F) | (c << 7)
                    length = (u >> 1) ^ -(u & 1)
                    p += 2
                else:
                    length, p = dv(data, p)
            rec_end = p + length
            if length < _MIN_RECORD_BODY or rec_end > n:
                raise CorruptFrameError(f"bad record length {length}")
            attributes = data[p]
            b = data[p + 1]
            if b < 0x80:
                ts_delta = zz[b]
                p += 2
            else:
                c = data[p + 2]
                if c < 0x80:
                    u = (b & 0x7F) | (c << 7)
                    ts_delta = (u >> 1) ^ -(u & 1)
                    p += 3
                else:
                    ts_delta, p = dv(data, p + 1)
            b = data[p]
            if b < 0x80:
                offset_delta = zz[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    u = (b & 0x7F) | (c << 7)
                    offset_delta = (u >> 1) ^ -(u & 1)
                    p += 2
                else:
                    offset_delta, p = dv(data, p)
            b = data[p]
            if b < 0x80:
                k = zz[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    u = (b & 0x7F) | (c << 7)
                    k = (u >> 1) ^ -(u & 1)
                    p += 2
                else:
                    k, p = dv(data, p)
            if k >= 0:
                key = data[p : p + k]
                p += k
            elif k == -1:
                key = None
            else:
                raise CorruptFrameError(f"bad key length {k}")
            b = data[p]
            if b < 0x80:
                k = zz[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    u = (b & 0x7F) | (c << 7)
                    k = (u >> 1) ^ -(u & 1)
                    p += 2
                else:
                    k, p = dv(data, p)
            if k >= 0:
                value = data[p : p + k]
                p += k
            elif k == -1:
                value = None
            else:
                raise CorruptFrameError(f"bad value length {k}")
            if data[p] == 0:
                headers: tuple[tuple[str, bytes | None], ...] = ()
                p += 1
            else:
                headers, p = _decode_headers(data, p, rec_end)
            if p != rec_end:
                raise CorruptFrameError(
                    f"record declares {length} bytes but its fields take {length + p - rec_end}"
                )
            append(
                new((
                    base_offset + offset_delta,
                    base_ts + ts_delta if log_append_time is None else log_append_time,
                    key,
                    value,
                    headers,
                    attributes - 256 if attributes > 127 else attributes,  # int8
                ))
            )
    except IndexError:
        raise CorruptFrameError("record runs past the end of the batch") from None
    if p != n:
        raise CorruptFrameError(f"{n - p} bytes left after {count} records")
    return records


def _decode_headers(
    data: bytes, p: int, rec_end: int
) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    count, p = decode_varint(data, p)
    # Each header takes at least 2 bytes (two length varints).
    if count < 0 or count > (rec_end - p) // 2:
        raise CorruptFrameError(f"bad header count {count}")
    headers = []
    for _ in range(count):
        k, p = decode_varint(data, p)
        if k < 0:
            raise CorruptFrameError(f"bad header key length {k}")
        try:
            h_key = data[p : p + k].decode()
        except UnicodeDecodeError:
            raise CorruptFrameError("header key is not UTF-8") from None
        p += k
        k, p = decode_varint(data, p)
        if k >= 0:
            h_value: bytes | None = data[p : p + k]
            p += k
        elif k == -1:
            h_value = None
        else:
            raise CorruptFrameError(f"bad header value length {k}")
        if p > rec_end:
            raise CorruptFrameError("header runs past the end of its record")
        headers.append((h_key, h_value))
    return tuple(headers), p


# ---------------------------------------------------------------------------------------------
# Validation (the broker, before it stores a batch)

# The broker's default bound on a compressed batch's records once decompressed (see
# ``validate_records_untrusted``).
MAX_UNCOMPRESSED_BATCH_BYTES = 16 * 1024 * 1024
# ``validate_records_untrusted`` with an ``inline_limit`` the records exceed: not checked.
INFLATE_LATER = -1


def validate_records_untrusted(
    buf: Any, pos: int, header: BatchHeader, max_uncompressed: int = MAX_UNCOMPRESSED_BATCH_BYTES,
    inline_limit: int | None = None,
) -> int:
    """Check the record framing of the whole batch at ``buf[pos:]`` without building records.

    What a consumer needs to read the batch back (Kafka's broker checks the same before it stores
    a batch): exactly ``recordsCount`` records filling the records section, each record's length
    equal to its fields, varints of at most 5 bytes (10 for timestampDelta) and within int32,
    offset deltas 0, 1, ... in order, key/value lengths -1 or within the record, header keys UTF-8.
    Stricter than Kafka where what Kafka lets through stops a consumer: a header key that is
    not UTF-8, and a record attributes byte of 0x80 or more (the bits are unused and every
    client writes 0; kafka-python reads the byte as a varint, then misreads the rest of the
    batch and cannot get past it).
    A compressed batch is decompressed within ``max_uncompressed`` bytes (a decompression bomb is
    refused when it gets there, not after). ``header`` must come from ``parse_header_untrusted``
    and the whole batch must be present. Raises only ``CorruptFrameError``.

    Returns how many bytes the records took decompressed (0 for an uncompressed batch). With
    ``inline_limit``, a compressed batch whose records expand beyond it is left unchecked and
    ``INFLATE_LATER`` returned: what costs the event loop at most ``inline_limit`` bytes of
    inflation, the caller checking it again without the limit where time does not matter (a
    worker thread).
    """
    end = pos + header.length + LOG_OVERHEAD
    if end > len(buf):
        raise CorruptFrameError("record batch is truncated")
    count = header.records_count
    codec = header.attributes & COMPRESSION_MASK
    if codec:
        if count > max_uncompressed // _MIN_RECORD_SIZE:
            raise CorruptFrameError(f"records count {count} cannot fit in {max_uncompressed} bytes")
        limit = max_uncompressed
        if inline_limit is not None and inline_limit < limit:
            limit = inline_limit
        try:
            data = _decompress(Compression(codec), memoryview(buf)[pos + HEADER_SIZE : end],
                               limit)
        except DecompressedTooLarge:
            if limit < max_uncompressed:
                return INFLATE_LATER
            raise
        _check_records(data, 0, len(data), count)
        return len(data)
    _check_records(buf, pos + HEADER_SIZE, end, count)
    return 0


def _varint32_untrusted(data: Any, p: int) -> tuple[int, int]:
    """A zig-zag varint that Kafka reads as an int32: at most 5 bytes, within 32 bits."""
    result = 0
    shift = 0
    while True:
        b = data[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            raise CorruptFrameError("varint longer than 5 bytes")
    if result >> 32:
        raise CorruptFrameError("varint exceeds 32 bits")
    return (result >> 1) ^ -(result & 1), p


# Where the offset delta of a record (a zig-zag varint) needs one more byte: records 0-63 take
# one byte, 64-8191 two, 8192-1048575 three.
_DELTA_WIDTH_STARTS = (0, 64, 8192, 1 << 20)
# Records the fast path checks together at most; a run it cannot take is halved down to
# _LEAF_RUN records, and those are checked record by record.
_RUN = 4096
_COPIED_RUN_MAX = 1 << 20  # bytes of a run whose columns are taken from a copy of it
_LEAF_RUN = 64
# A batch of fewer records is checked record by record: the column slices cost about as much as
# parsing 8 records (timeit: 1 record of 1 KiB 4.2 us by columns, 0.7 us alone).
_FEW_RECORDS = 8
_HIGH_BYTES = bytes(range(0x80, 0x100))


# The low byte of the offset deltas 0..63 (repeating every 64 records): alone (a one-byte varint)
# and with the continuation bit (the first byte of a longer one).
_DELTA_LOW = bytes(range(0, 128, 2))
_DELTA_LOW_CONTINUED = bytes(0x80 | d for d in _DELTA_LOW)


def _delta_columns(first: int, stop: int, width: int) -> list[bytes]:
    """The offset deltas ``first`` to ``stop - 1`` (each ``width`` bytes long) as Kafka encodes
    them, one bytes object per byte position: what those columns of a run must hold. Built
    from repeated blocks (a byte of the varint only changes every 2**(7i - 1) records), so
    the cost does not grow with the delta values."""
    m = stop - first
    if width == 1:
        return [_DELTA_LOW[first:stop]]
    at = first & 63
    columns = [(_DELTA_LOW_CONTINUED * (m // 64 + 2))[at : at + m]]
    for i in range(1, width):
        flag = 0x80 if i < width - 1 else 0
        block = 1 << (7 * i - 1)
        parts = []
        j = first
        while j < stop:
            end = min(stop, (j // block + 1) * block)
            parts.append(bytes(((((2 * j) >> (7 * i)) & 0x7F) | flag,)) * (end - j))
            j = end
        columns.append(b"".join(parts))
    return columns


def _check_records(data: Any, p: int, n: int, count: int) -> None:
    if count > (n - p) // _MIN_RECORD_SIZE:
        raise CorruptFrameError(f"records count {count} does not fit in {n - p} bytes of records")
    j = 0
    if count < _FEW_RECORDS:
        p = _check_each_record(data, p, n, 0, count)
        j = count
    while j < count:
        # A run never spans a change in the width of the offset delta.
        width = 1 if j < 64 else 2 if j < 8192 else 3 if j < 1 << 20 else 0
        if width:
            stop = min(count, j + _RUN, _DELTA_WIDTH_STARTS[width])
            p = _check_run(data, p, n, j, stop, width)
        else:
            stop = count
            p = _check_each_record(data, p, n, j, stop)
        j = stop
    if p != n:
        raise CorruptFrameError(f"{n - p} bytes left after {count} records")


def _check_run(data: Any, p: int, n: int, first: int, stop: int, delta_width: int) -> int:
    """Records ``first`` to ``stop - 1`` from ``p``: the position after them. A run that is not
    of one shape (a batch whose timestamp deltas grow a byte wider halfway) is halved, so that
    only the part around the change is checked record by record."""
    end = _same_shape_run(data, p, n, first, stop, delta_width)
    if end >= 0:
        return end
    if stop - first <= _LEAF_RUN:
        return _check_each_record(data, p, n, first, stop)
    middle = (first + stop) // 2
    p = _check_run(data, p, n, first, middle, delta_width)
    return _check_run(data, p, n, middle, stop, delta_width)


def _varint_width(data: Any, q: int, limit: int) -> int:
    """The number of bytes of the varint at ``q``, or 0 if it is longer than ``limit`` bytes."""
    for width in range(1, limit + 1):
        if data[q + width - 1] < 0x80:
            return width
    return 0


def _short_varint(data: Any, q: int) -> tuple[int, int]:
    """The zig-zag varint of one or two bytes at ``q``: ``(value, position after it)``; a
    longer one gives ``(-2, q)``, which every caller refuses as a length."""
    b = data[q]
    if b < 0x80:
        return _ZIGZAG1[b], q + 1
    c = data[q + 1]
    if c >= 0x80:
        return -2, q
    u = (b & 0x7F) | (c << 7)
    return (u >> 1) ^ -(u & 1), q + 2


def _same_shape_run(data: Any, p: int, n: int, first: int, stop: int, delta_width: int) -> int:
    """The fast path of ``_check_records``: records ``first`` to ``stop - 1`` from ``p``, when
    they are valid and alike; returns the position after them, or -1.

    Producers usually write records of one shape: the same key and value lengths, no headers,
    timestamp deltas of one width. Such records sit at a fixed stride, so the first record of
    the run is parsed and the others are checked a column at a time: the bytes at one position
    of every record, taken with a strided slice and compared in C, whatever the record count.
    -1 means "not of one shape, or invalid": the caller then checks the run record by record,
    which also words the error. A position is returned only when ``_check_each_record`` would
    accept the same bytes. ``delta_width``: the width of every offset delta in the run.
    """
    try:
        length, attributes = _short_varint(data, p)
        if length < _MIN_RECORD_BODY:
            return -1
        stride = attributes - p + length
        m = stop - first
        end = p + m * stride
        if end > n:
            return -1
        # The first record: attributes, the timestamp delta, the offset delta (checked with its
        # columns below), key and value lengths, no headers.
        ts = attributes + 1
        ts_width = _varint_width(data, ts, 3)
        if not ts_width:
            return -1
        key = ts + ts_width + delta_width
        k, key_end = _short_varint(data, key)
        if k < -1:
            return -1
        value = key_end + (k if k > 0 else 0)
        k, value_end = _short_varint(data, value)
        if k < -1:
            return -1
        headers = value_end + (k if k > 0 else 0)
        if headers + 1 != p + stride or data[headers] != 0:
            return -1

        # The columns. A strided slice of bytes is a C loop, of a memoryview one memcpy call
        # per byte: a run up to _COPIED_RUN_MAX bytes is copied once and sliced (the usual
        # batch), a larger one read in place (few, large records: no second copy of a big run).
        if end - p <= _COPIED_RUN_MAX:
            run = bytes(data[p:end])

            def column(at: int) -> bytes:
                return run[at - p :: stride]
        else:
            def column(at: int) -> bytes:
                return bytes(data[at:end:stride])
        # Attributes below 0x80 (``validate_records_untrusted`` says why), in every record.
        if not column(attributes).isascii():
            return -1
        # Timestamp deltas: continuation bytes, then a last byte, in every record.
        for at in range(ts, ts + ts_width - 1):
            if column(at).translate(None, _HIGH_BYTES):
                return -1
        if not column(ts + ts_width - 1).isascii():
            return -1
        # Offset deltas: first, first + 1, ... as Kafka encodes them.
        delta = ts + ts_width
        for i, expected in enumerate(_delta_columns(first, stop, delta_width)):
            if column(delta + i) != expected:
                return -1
        # The length, key length, value length and header count: the first record's bytes.
        for at in (*range(p, attributes), *range(key, key_end), *range(value, value_end),
                   headers):
            if column(at).count(data[at]) != m:
                return -1
    except IndexError:
        return -1
    return end


def _check_each_record(data: Any, p: int, n: int, first: int, stop: int) -> int:
    """Records ``first`` to ``stop - 1`` from ``p``, one by one: the position after them.

    One- and two-byte varints inlined (lengths up to 8191), fields that only need skipping are
    skipped. IndexError means a read past the data.
    """
    zz = _ZIGZAG1
    v32 = _varint32_untrusted
    try:
        for i in range(first, stop):
            b = data[p]
            if b < 0x80:
                length = zz[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    u = (b & 0x7F) | (c << 7)
                    length = (u >> 1) ^ -(u & 1)
                    p += 2
                else:
                    length, p = v32(data, p)
            rec_end = p + length
            if length < _MIN_RECORD_BODY or rec_end > n:
                raise CorruptFrameError(f"record {i}: bad length {length}")
            if data[p] >= 0x80:
                raise CorruptFrameError(f"record {i}: attributes {data[p]:#x} (unused bits set)")
            q = p + 1  # after the attributes byte: timestampDelta, a varlong of up to 10 bytes
            if data[q] < 0x80:
                q += 1
            else:
                limit = q + 9
                q += 1
                while data[q] >= 0x80:
                    q += 1
                    if q >= limit:
                        raise CorruptFrameError(f"record {i}: timestamp delta over 10 bytes")
                q += 1
            b = data[q]
            if b < 0x80:
                delta = zz[b]
                q += 1
            else:
                c = data[q + 1]
                if c < 0x80:
                    u = (b & 0x7F) | (c << 7)
                    delta = (u >> 1) ^ -(u & 1)
                    q += 2
                else:
                    delta, q = v32(data, q)
            if delta != i:
                raise CorruptFrameError(f"record {i} has offset delta {delta}")
            b = data[q]
            if b < 0x80:
                k = zz[b]
                q += 1
            else:
                c = data[q + 1]
                if c < 0x80:
                    u = (b & 0x7F) | (c << 7)
                    k = (u >> 1) ^ -(u & 1)
                    q += 2
                else:
                    k, q = v32(data, q)
            if k > 0:
                q += k
            elif k < -1:
                raise CorruptFrameError(f"record {i}: bad key length {k}")
            b = data[q]
            if b < 0x80:
                k = zz[b]
                q += 1
            else:
                c = data[q + 1]
                if c < 0x80:
                    u = (b & 0x7F) | (c << 7)
                    k = (u >> 1) ^ -(u & 1)
                    q += 2
                else:
                    k, q = v32(data, q)
            if k > 0:
                q += k
            elif k < -1:
                raise CorruptFrameError(f"record {i}: bad value length {k}")
            if q >= rec_end:
                raise CorruptFrameError(f"record {i}: fields run past its length {length}")
            if data[q] == 0:
                q += 1
            else:
                q = _check_headers(data, q, rec_end, i)
            if q != rec_end:
                raise CorruptFrameError(f"record {i}: length {length} disagrees with its fields")
            p = rec_end
    except IndexError:
        raise CorruptFrameError("record runs past the end of the batch") from None
    return p


def _check_headers(data: Any, q: int, rec_end: int, i: int) -> int:
    count, q = _varint32_untrusted(data, q)
    if count < 0 or count > (rec_end - q) // 2:
        raise CorruptFrameError(f"record {i}: bad header count {count}")
    for _ in range(count):
        k, q = _varint32_untrusted(data, q)
        if k < 0 or q + k > rec_end:
            raise CorruptFrameError(f"record {i}: bad header key length {k}")
        try:
            bytes(data[q : q + k]).decode()
        except UnicodeDecodeError:
            raise CorruptFrameError(f"record {i}: header key is not UTF-8") from None
        q += k
        k, q = _varint32_untrusted(data, q)
        if k > 0:
            q += k
        elif k < -1:
            raise CorruptFrameError(f"record {i}: bad header value length {k}")
        if q > rec_end:
            raise CorruptFrameError(f"record {i}: header runs past the end of its record")
    return q


def decode_batches_untrusted(buf: Any) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Decode the batches of a Fetch ``records`` blob, checking each batch's CRC.

    A partial batch at the end is ignored: Kafka may cut the last batch at the fetch size limit.
    Raises ``CorruptFrameError`` on a bad header, CRC mismatch or bad records.
    """
    pos = 0
    n = len(buf)
    while n - pos >= LOG_OVERHEAD:
        (length,) = _INT32.unpack_from(buf, pos + 8)
        if length < _MIN_LENGTH:
            raise CorruptFrameError(f"record batch length {length} < {_MIN_LENGTH}")
        size = length + LOG_OVERHEAD
        if pos + size > n:
            return  # trailing partial batch
        header = parse_header_untrusted(buf, pos)
        if not batch_crc_ok(buf, pos, header):
            raise CorruptFrameError(f"CRC mismatch in record batch at offset {header.base_offset}")
        yield header, decode_records_untrusted(buf, pos, header)
        pos += size


def parse_control_record(record: Record) -> tuple[ControlType, int]:
    """``(ABORT or COMMIT, coordinator_epoch)`` of a control record; ``CorruptFrameError`` if bad.

    Later key/value versions may append fields, so only versions below 0 are refused and extra
    bytes are ignored (Kafka does the same).
    """
    key, value = record.key, record.value
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptFrameError("control record key shorter than 4 bytes")
    version, control_type = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptFrameError(f"bad control record key version {version}")
    if control_type not in (ControlType.ABORT, ControlType.COMMIT):
        raise CorruptFrameError(f"unknown control record type {control_type}")
    if value is None or len(value) < _CONTROL_VALUE.size:
        raise CorruptFrameError("transaction marker value shorter than 6 bytes")
    version, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
    if version < 0:
        raise CorruptFrameError(f"bad transaction marker version {version}")
    return ControlType(control_type), coordinator_epoch


# ---------------------------------------------------------------------------------------------
# Rewriting a batch with fewer records (log compaction)


def records_section_untrusted(buf: Any, pos: int, header: BatchHeader) -> bytes:
    """The records of the batch at ``buf[pos:]`` as one uncompressed byte string (the bytes after
    the header, decompressed if the batch is compressed). Raises ``CorruptFrameError``."""
    end = pos + header.length + LOG_OVERHEAD
    if end > len(buf):
        raise CorruptFrameError(f"record batch at {pos} is truncated")
    section = memoryview(buf)[pos + HEADER_SIZE : end]
    codec = header.attributes & COMPRESSION_MASK
    if codec:
        return _decompress(Compression(codec), section)
    return bytes(section)


def record_spans_untrusted(section: bytes, count: int) -> list[tuple[int, int]]:
    """``(start, end)`` of each of the ``count`` records in an uncompressed records section: the
    whole record, its length varint included, so that a span can be copied into another batch
    with the same base offset and base timestamp unchanged. Raises ``CorruptFrameError``."""
    n = len(section)
    if count < 0 or count > n // _MIN_RECORD_SIZE:
        raise CorruptFrameError(f"records count {count} does not fit in {n} bytes of records")
    spans = []
    p = 0
    for _ in range(count):
        start = p
        length, p = decode_varint(section, p)
        end = p + length
        if length < _MIN_RECORD_BODY or end > n:
            raise CorruptFrameError(f"bad record length {length}")
        spans.append((start, end))
        p = end
    if p != n:
        raise CorruptFrameError(f"{n - p} bytes left after {count} records")
    return spans


def rebuild_batch(
    header: BatchHeader, section: bytes, spans: Sequence[tuple[int, int]]
) -> bytes:
    """The batch of ``header`` holding only the records at ``spans`` of its uncompressed
    ``section`` (in order). Base offset, lastOffsetDelta, timestamps, attributes, producer id,
    epoch and base sequence are kept (Kafka keeps lastOffsetDelta so that the producer's last
    sequence survives); recordsCount, length and CRC are recomputed, and a compressed batch is
    compressed again with its codec. No spans gives an empty batch (recordsCount 0), which keeps
    the offsets and the producer's sequence numbers of a batch whose records all went."""
    body = b"".join(section[s:e] for s, e in spans)
    codec = Compression(header.attributes & COMPRESSION_MASK)
    if codec != Compression.NONE and spans:
        body = _compress(codec, body)
    out = bytearray(HEADER_SIZE)
    out += body
    attributes = header.attributes if spans else header.attributes & ~COMPRESSION_MASK
    _HEADER.pack_into(
        out, 0, header.base_offset, len(out) - LOG_OVERHEAD, header.partition_leader_epoch, 2, 0,
        attributes, header.last_offset_delta, header.base_timestamp, header.max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, len(spans),
    )
    _UINT32.pack_into(out, CRC_OFFSET, _crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)
