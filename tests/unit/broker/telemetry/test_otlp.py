"""The OTLP MetricsData decoder (broker/telemetry/otlp.py): what clients push, and arbitrary
bytes (untrusted: only OtlpError)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.telemetry import otlp
from broker.telemetry.otlp import DataPoint, OtlpError, decode_metrics_untrusted
from tests.unit.broker.telemetry.otlp_encode import (
    field_len,
    gauge,
    histogram,
    metrics_data,
    number_point,
    sum_metric,
    varint,
)

PUSH = metrics_data(
    gauge("org.apache.kafka.producer.record.queue.time.avg",
          number_point(0.25, {"node.id": 3, "topic": "t"})),
    sum_metric("org.apache.kafka.producer.connection.creation.total", number_point(7)),
    sum_metric("org.apache.kafka.consumer.fetch.total", number_point(5), delta=True),
    sum_metric("org.apache.kafka.client.up.down", number_point(-2), monotonic=False),
    histogram("org.apache.kafka.producer.latency", 4, 10.5, {"ok": True}),
    resource={"group_id": "g1", "ratio": 0.5},
)


def test_every_kind_of_point_decodes() -> None:
    base = (("group_id", "g1"), ("ratio", "0.5"))
    assert decode_metrics_untrusted(PUSH) == [
        DataPoint("org.apache.kafka.producer.record.queue.time.avg", "gauge",
                  tuple(sorted(base + (("node.id", "3"), ("topic", "t"))) ), 0.25, False),
        DataPoint("org.apache.kafka.producer.connection.creation.total", "counter", base, 7.0,
                  False),
        DataPoint("org.apache.kafka.consumer.fetch.total", "counter", base, 5.0, True),
        DataPoint("org.apache.kafka.client.up.down", "gauge", base, -2.0, False),
        DataPoint("org.apache.kafka.producer.latency.count", "counter",
                  tuple(sorted(base + (("ok", "true"),))), 4.0, False),
        DataPoint("org.apache.kafka.producer.latency.sum", "counter",
                  tuple(sorted(base + (("ok", "true"),))), 10.5, False),
    ]


def test_empty_payload_has_no_points() -> None:
    assert decode_metrics_untrusted(b"") == []


def test_every_truncation_is_refused() -> None:
    for cut in range(1, len(PUSH)):
        with pytest.raises(OtlpError):
            decode_metrics_untrusted(PUSH[:cut])


def test_trailing_garbage_is_refused() -> None:
    with pytest.raises(OtlpError):
        decode_metrics_untrusted(PUSH + b"\x0a\x05ab")


@pytest.mark.parametrize("data", [
    b"\x0b",  # wire type 3 (start group)
    b"\x08" + b"\xff" * 11,  # a varint of 11 bytes
    b"\x00\x00",  # field number 0
    field_len(1, b"\x0a\x7f"),  # an inner length past its message
    field_len(1, b"\x08\x01"),  # resource (a message) with a varint wire type
])
def test_malformed_messages_are_refused(data: bytes) -> None:
    with pytest.raises(OtlpError):
        decode_metrics_untrusted(data)


def test_points_attributes_and_names_are_bounded(monkeypatch) -> None:
    monkeypatch.setattr(otlp, "MAX_POINTS", 5)
    many = metrics_data(gauge("g", *(number_point(float(i)) for i in range(20))))
    assert len(decode_metrics_untrusted(many)) == 5
    wide = metrics_data(gauge("x" * 5000, number_point(1.0, {f"k{i}": i for i in range(100)})))
    (point,) = decode_metrics_untrusted(wide)
    assert len(point.name) == otlp.MAX_TEXT
    assert len(point.attributes) == otlp.MAX_ATTRIBUTES


def test_unknown_fields_are_skipped() -> None:
    extra = varint(15 << 3 | 5) + b"\x01\x02\x03\x04" + varint(16 << 3 | 1) + b"\x00" * 8
    assert decode_metrics_untrusted(extra + PUSH) == decode_metrics_untrusted(PUSH)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_otlp_error(data: bytes) -> None:
    try:
        points = decode_metrics_untrusted(data)
    except OtlpError:
        return
    assert all(isinstance(p, DataPoint) for p in points)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(PUSH) - 1), st.integers(0, 255))
def test_one_changed_byte_raises_only_otlp_error(position: int, byte: int) -> None:
    data = bytearray(PUSH)
    data[position] = byte
    try:
        decode_metrics_untrusted(bytes(data))
    except OtlpError:
        pass
