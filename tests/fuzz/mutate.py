"""Mutations of request frames for the fuzzer (pure: bytes in, bytes out, a seeded Random).

Each mutation keeps the 8-byte request header prefix (api key, version, correlation id) most of
the time so that the broker gets past dispatch into the decoders and handlers:

- bit flips and byte overwrites anywhere;
- an int32/int16 at a random position set to a boundary value (huge, negative, -1, 0);
- truncation, and garbage appended;
- record batches inside a Produce frame corrupted *with a valid CRC* (records' varints, lengths,
  counts), or replaced by a compression bomb or a poison batch (``poison.py``).
"""

from __future__ import annotations

import random
import struct
import zlib

from protocol.records import HEADER_SIZE, Compression
from tests.fuzz.poison import poison_batches, recrc, with_records

_BOUNDARY32 = [0x7FFFFFFF, -1, -2, 0, 1, -0x80000000, 0x10000, 0x7FFFFFF0, 1 << 20]
_BOUNDARY16 = [0x7FFF, -1, 0, -0x8000, 1]
_MAGIC_POS = 16


def _batches(frame: bytes) -> list[tuple[int, int]]:
    """(position, size) of the magic-2 record batches found in a frame (heuristic scan)."""
    out = []
    pos = 0
    n = len(frame)
    while pos + HEADER_SIZE <= n:
        if frame[pos + _MAGIC_POS] == 2:
            (length,) = struct.unpack_from(">i", frame, pos + 8)
            size = length + 12
            if HEADER_SIZE <= size <= n - pos:
                (base,) = struct.unpack_from(">q", frame, pos)
                if base == 0:
                    out.append((pos, size))
                    pos += size
                    continue
        pos += 1
    return out


def _bomb(rng: random.Random) -> bytes:
    size = rng.choice([1 << 20, 32 << 20, 200 << 20])
    body = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    data = b"".join(body.compress(chunk) for _ in range(size >> 20)) + body.flush()
    return with_records(data, rng.choice([1, 1000, 10**6]), Compression.GZIP)


_BOMBS: dict[int, bytes] = {}


def bomb(rng: random.Random) -> bytes:
    key = rng.randrange(3)
    if key not in _BOMBS:
        _BOMBS[key] = _bomb(random.Random(key))
    return _BOMBS[key]


def corrupt_records(batch: bytes, rng: random.Random) -> bytes:
    """Change bytes of the records section and fix the CRC (and sometimes the counts)."""
    out = bytearray(batch)
    if len(out) > HEADER_SIZE:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(HEADER_SIZE, len(out))
            out[i] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256)])
    if rng.random() < 0.3:
        struct.pack_into(">i", out, 57, rng.choice(_BOUNDARY32))  # recordsCount
    if rng.random() < 0.2:
        struct.pack_into(">i", out, 23, rng.choice(_BOUNDARY32))  # lastOffsetDelta
    return recrc(out)


def mutate(frame: bytes, rng: random.Random) -> bytes:
    """One mutated copy of ``frame``."""
    kind = rng.random()
    batches = _batches(frame)
    if batches and kind < 0.45:
        pos, size = rng.choice(batches)
        choice = rng.random()
        if choice < 0.6:
            new = corrupt_records(frame[pos : pos + size], rng)
        elif choice < 0.8:
            new = rng.choice(list(poison_batches().values()))
        else:
            new = bomb(rng)
        out = bytearray(frame[:pos] + new + frame[pos + size :])
        # Keep the enclosing "records" length field right, if it sits just before the batch.
        (declared,) = struct.unpack_from(">i", frame, pos - 4) if pos >= 4 else (None,)
        if declared == size:
            struct.pack_into(">i", out, pos - 4, len(new))
        return bytes(out)
    out = bytearray(frame)
    if kind < 0.65 and len(out) > 8:
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(8 if rng.random() < 0.9 else 0, len(out))
            out[i] ^= 1 << rng.randrange(8)
    elif kind < 0.85 and len(out) > 12:
        i = rng.randrange(8, len(out) - 4)
        if rng.random() < 0.7:
            struct.pack_into(">i", out, i, rng.choice(_BOUNDARY32))
        else:
            struct.pack_into(">h", out, i, rng.choice(_BOUNDARY16))
    elif kind < 0.95:
        out = out[: rng.randrange(0, len(out) + 1)]
    else:
        out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    return bytes(out)
