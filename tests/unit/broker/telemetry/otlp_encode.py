"""A tiny protobuf writer for the OTLP MetricsData fields the tests need (the decoder's
independent counterpart: written from the .proto grammar, not from the decoder)."""

from __future__ import annotations

import struct


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_len(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def field_fixed64(number: int, raw: bytes) -> bytes:
    return varint(number << 3 | 1) + raw


def any_value(value: object) -> bytes:
    if isinstance(value, bool):
        return field_varint(2, int(value))
    if isinstance(value, int):
        return field_varint(3, value)
    if isinstance(value, float):
        return field_fixed64(4, struct.pack("<d", value))
    return field_len(1, str(value).encode())


def key_value(key: str, value: object) -> bytes:
    return field_len(1, key.encode()) + field_len(2, any_value(value))


def number_point(value: float | int, attributes: dict[str, object] | None = None) -> bytes:
    out = b"".join(field_len(7, key_value(k, v)) for k, v in (attributes or {}).items())
    out += field_fixed64(3, struct.pack("<Q", 1_700_000_000_000_000_000))
    if isinstance(value, int):
        return out + field_fixed64(6, struct.pack("<q", value))
    return out + field_fixed64(4, struct.pack("<d", value))


def gauge(name: str, *points: bytes) -> bytes:
    body = b"".join(field_len(1, p) for p in points)
    return field_len(1, name.encode()) + field_len(5, body)


def sum_metric(name: str, *points: bytes, delta: bool = False, monotonic: bool = True) -> bytes:
    body = b"".join(field_len(1, p) for p in points)
    body += field_varint(2, 1 if delta else 2) + field_varint(3, int(monotonic))
    return field_len(1, name.encode()) + field_len(7, body)


def histogram(name: str, count: int, total: float, attributes: dict[str, object] | None = None
              ) -> bytes:
    point = b"".join(field_len(9, key_value(k, v)) for k, v in (attributes or {}).items())
    point += field_fixed64(4, struct.pack("<Q", count)) + field_fixed64(5, struct.pack("<d", total))
    return field_len(1, name.encode()) + field_len(9, field_len(1, point) + field_varint(2, 2))


def metrics_data(*metrics: bytes, resource: dict[str, object] | None = None) -> bytes:
    scope = field_len(1, field_len(1, b"scope")) + b"".join(field_len(2, m) for m in metrics)
    res = b"".join(field_len(1, key_value(k, v)) for k, v in (resource or {}).items())
    resource_metrics = field_len(1, res) + field_len(2, scope)
    return field_len(1, resource_metrics)
