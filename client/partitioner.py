"""Choosing a partition: murmur2 for keyed records (same partition as the Java client), sticky for
records without a key.

Keyed: ``(murmur2(key) & 0x7fffffff) % partition_count``, exactly Kafka's default partitioner, so a
key lands on the same partition whichever Kafka client wrote it (librdkafka too with
``partitioner=murmur2_random``).

Unkeyed: the "uniform sticky" rule of Kafka 3.3+ without its load weighting: stay on one partition
until about ``batch.size`` bytes went there, then move to another one at random. Records then fill
whole batches instead of being spread thin over every partition.
"""

from __future__ import annotations

import random
import struct

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``) as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    words = length >> 2
    if words:
        for k in struct.unpack_from(f"<{words}I", data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = length & ~3
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def partition_for_key(key: bytes, partition_count: int) -> int:
    """The partition Kafka's default partitioner picks for ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partition_count


class StickyPartitioner:
    """Per-topic sticky choice for records without a key (see the module docstring)."""

    __slots__ = ("_batch_size", "_current", "_random")

    def __init__(self, batch_size: int, rng: random.Random | None = None) -> None:
        self._batch_size = max(batch_size, 1)
        self._current: dict[str, list[int]] = {}  # topic -> [partition, bytes sent there]
        self._random = rng or random.Random()

    def partition(self, topic: str, partition_count: int, size: int) -> int:
        """The partition for a record of ``size`` bytes; moves on after ``batch.size`` bytes."""
        state = self._current.get(topic)
        if state is None or state[0] >= partition_count:
            state = self._current[topic] = [self._random.randrange(partition_count), 0]
        elif state[1] >= self._batch_size:
            state[0] = self._next(state[0], partition_count)
            state[1] = 0
        state[1] += size
        return state[0]

    def _next(self, previous: int, partition_count: int) -> int:
        if partition_count == 1:
            return 0
        # Any partition but the one just filled.
        choice = self._random.randrange(partition_count - 1)
        return choice + 1 if choice >= previous else choice
