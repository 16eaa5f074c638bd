"""broker/log/topics.py: Java's String.hashCode and Kafka's partition choice for internal topics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.log.topics import java_string_hash, partition_for

INT32_MIN = -(1 << 31)


def reference_hash(s: str) -> int:
    """Straight from the Java definition, on UTF-16 code units, with int32 wrap-around."""
    h = 0
    for ch in s:
        cp = ord(ch)
        units = [cp] if cp < 0x10000 else [0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)]
        for u in units:
            h = (h * 31 + u) % (1 << 32)
    return h - (1 << 32) if h >= (1 << 31) else h


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("Aa", 2112),
        ("BB", 2112),  # the classic collision
        ("hello", 99162322),
        ("polygenelubricants", INT32_MIN),  # the classic Integer.MIN_VALUE hash
        ("\u00e9", 0xE9),
        ("\U0001F600", 0xD83D * 31 + 0xDE00),  # one code point, two UTF-16 units
    ],
)
def test_known_hashes(s: str, expected: int) -> None:
    assert java_string_hash(s) == expected


@given(st.text(max_size=40))
def test_matches_the_definition(s: str) -> None:
    assert java_string_hash(s) == reference_hash(s)


def test_min_value_maps_to_partition_zero() -> None:
    # Kafka's Utils.abs(Integer.MIN_VALUE) == 0, where Math.abs would stay negative.
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("polygenelubricants", 7) == 0


def test_negative_hash_uses_absolute_value() -> None:
    assert java_string_hash("my-group") == -1906497762 == reference_hash("my-group")
    assert partition_for("my-group", 50) == 1906497762 % 50 == 12
    assert java_string_hash("test-consumer-group") == -1793216381
    assert partition_for("test-consumer-group", 50) == 31


@given(st.text(max_size=20), st.integers(min_value=1, max_value=200))
def test_partition_in_range(key: str, n: int) -> None:
    p = partition_for(key, n)
    assert 0 <= p < n
    h = reference_hash(key)
    assert p == (0 if h == INT32_MIN else abs(h)) % n


def test_bad_partition_count() -> None:
    with pytest.raises(ValueError):
        partition_for("g", 0)
