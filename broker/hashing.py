"""Kafka's key -> partition hashing for the internal topics.

Kafka places a consumer group in ``__consumer_offsets`` and a transactional id in
``__transaction_state`` at partition ``Utils.abs(key.hashCode()) % partitions``, where ``hashCode``
is Java's ``String.hashCode`` (``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, in int32
arithmetic) and ``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0 instead of leaving it negative.
Using the same function keeps a data directory's layout what a Kafka user would predict.
"""

from __future__ import annotations

import struct

_UINT32 = 0xFFFFFFFF
_INT32_MIN = -(1 << 31)


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()`` of ``s``: a signed 32-bit int."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for unit in struct.unpack(f">{len(data) // 2}H", data):
        h = (31 * h + unit) & _UINT32
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, n: int) -> int:
    """Partition of ``key`` among ``n`` partitions: ``Utils.abs(hashCode) % n`` as in Kafka."""
    if n <= 0:
        raise ValueError(f"partition count must be positive, not {n}")
    h = java_string_hash(key)
    return (0 if h == _INT32_MIN else abs(h)) % n
