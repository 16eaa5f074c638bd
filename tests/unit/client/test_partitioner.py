"""murmur2 and the partition choice, against values pinned by the Java and kafka-python clients."""

from __future__ import annotations

import random

import pytest

from client.partitioner import StickyPartitioner, murmur2, partition_for_key

# murmur2 results of Kafka's Java client (Utils.murmur2), signed 32-bit.
JAVA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

# Partition chosen among 1000 by the Java default partitioner for these keys.
JAVA_PARTITION_OF_1000 = [
    (b"", 681),
    (b"a", 524),
    (b"ab", 434),
    (b"abc", 107),
    (b"123456789", 566),
    (b"\x00 ", 742),
]


@pytest.mark.parametrize(("key", "expected"), JAVA_MURMUR2)
def test_murmur2_matches_java(key, expected):
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected"), JAVA_PARTITION_OF_1000)
def test_partition_matches_java_default_partitioner(key, expected):
    assert partition_for_key(key, 1000) == expected


def test_partition_is_positive_hash_modulo_count():
    for key, hashed in JAVA_MURMUR2:
        for n in (1, 3, 6, 7, 50):
            assert partition_for_key(key, n) == (hashed & 0x7FFFFFFF) % n


def test_murmur2_agrees_with_kafka_python_on_random_keys():
    kafka_murmur2 = pytest.importorskip("kafka.partitioner.default").murmur2
    rng = random.Random(7)
    for _ in range(300):
        key = rng.randbytes(rng.randrange(0, 40))
        # kafka-python returns the hash as an unsigned value
        assert murmur2(key) & 0xFFFFFFFF == kafka_murmur2(key) & 0xFFFFFFFF


def test_murmur2_accepts_bytearray_and_memoryview():
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482


def test_sticky_partitioner_stays_until_batch_size_then_moves():
    sticky = StickyPartitioner(batch_size=100, rng=random.Random(1))
    first = sticky.partition("t", 4, 30)
    assert [sticky.partition("t", 4, 30) for _ in range(3)] == [first] * 3  # 120 bytes now
    moved = sticky.partition("t", 4, 30)
    assert moved != first


def test_sticky_partitioner_single_partition_and_shrinking_topic():
    sticky = StickyPartitioner(batch_size=10, rng=random.Random(2))
    assert {sticky.partition("t", 1, 50) for _ in range(5)} == {0}
    sticky2 = StickyPartitioner(batch_size=10, rng=random.Random(3))
    for _ in range(20):
        assert sticky2.partition("u", 3, 5) < 3
    assert sticky2.partition("u", 1, 5) == 0  # fewer partitions than the sticky choice
