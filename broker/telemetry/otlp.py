"""A bounded decoder of the OpenTelemetry ``MetricsData`` protobuf that KIP-714 clients push.

Pure and for untrusted bytes: ``decode_metrics_untrusted`` raises only ``OtlpError``. Only the
fields the exporter uses are read; every other field is skipped by its wire type. The grammar
(opentelemetry-proto, ``metrics/v1/metrics.proto``; field number, wire type)::

    MetricsData       resource_metrics 1 (msg, repeated)
    ResourceMetrics   resource 1 (msg), scope_metrics 2 (msg, repeated)
    Resource          attributes 1 (KeyValue, repeated)
    ScopeMetrics      metrics 2 (Metric, repeated)
    Metric            name 1 (string); gauge 5, sum 7, histogram 9 (msg; one of them)
    Gauge             data_points 1 (NumberDataPoint, repeated)
    Sum               data_points 1, aggregation_temporality 2 (varint: 1 delta, 2 cumulative),
                      is_monotonic 3 (varint)
    Histogram         data_points 1 (HistogramDataPoint, repeated), aggregation_temporality 2
    NumberDataPoint   attributes 7 (KeyValue), as_double 4 (fixed64 double),
                      as_int 6 (fixed64 signed)
    HistogramDataPoint attributes 9, count 4 (fixed64), sum 5 (fixed64 double)
    KeyValue          key 1 (string), value 2 (AnyValue)
    AnyValue          string 1, bool 2 (varint), int 3 (varint, two's complement), double 4
                      (fixed64); arrays, key-value lists and bytes (5, 6, 7) are not kept

Bounds: the nesting is the grammar's (no recursion on input), and ``MAX_POINTS`` data points,
``MAX_ATTRIBUTES`` attributes per point and ``MAX_TEXT`` bytes per name, key or value are kept;
a message over them is cut, not refused (a client's metric set may grow; a push must not cost
more than that). Summaries and exponential histograms (fields 11, 10) are skipped.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAX_POINTS = 10_000  # data points kept from one push
MAX_ATTRIBUTES = 16  # attributes kept per data point (resource attributes included)
MAX_TEXT = 512  # bytes of a metric name, attribute key or value

# wire types
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_DOUBLE = struct.Struct("<d")
_INT64 = struct.Struct("<q")
_UINT64 = struct.Struct("<Q")

DELTA, CUMULATIVE = 1, 2  # AggregationTemporality


class OtlpError(ValueError):
    """The payload is not a MetricsData protobuf (Kafka answers INVALID_RECORD)."""


@dataclass(frozen=True)
class DataPoint:
    name: str  # the client's metric name, e.g. org.apache.kafka.producer.record.queue.time.avg
    kind: str  # "gauge" or "counter" (a monotonic sum)
    attributes: tuple[tuple[str, str], ...]
    value: float
    delta: bool  # a sum sent as the change since the last push (DeltaTemporality)


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise OtlpError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise OtlpError("varint longer than 10 bytes")


def _fields(buf: bytes, pos: int, end: int):
    """(field number, wire type, value) of one message: an int for VARINT/I64/I32, a
    (start, stop) slice for LEN."""
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise OtlpError("field number 0")
        if wire == _VARINT:
            value, pos = _varint(buf, pos, end)
            yield number, wire, value
        elif wire == _I64:
            if pos + 8 > end:
                raise OtlpError("truncated fixed64")
            yield number, wire, _UINT64.unpack_from(buf, pos)[0]
            pos += 8
        elif wire == _I32:
            if pos + 4 > end:
                raise OtlpError("truncated fixed32")
            yield number, wire, int.from_bytes(buf[pos:pos + 4], "little")
            pos += 4
        elif wire == _LEN:
            length, pos = _varint(buf, pos, end)
            if length > end - pos:
                raise OtlpError("length-delimited field runs past its message")
            yield number, wire, (pos, pos + length)
            pos += length
        else:
            raise OtlpError(f"unsupported wire type {wire}")


def _text(buf: bytes, span: tuple[int, int]) -> str:
    start, stop = span
    try:
        return bytes(buf[start:min(stop, start + MAX_TEXT)]).decode("utf-8", "replace")
    except (TypeError, ValueError) as exc:  # pragma: no cover - "replace" never raises
        raise OtlpError(str(exc)) from exc


def _len(wire: int, value) -> tuple[int, int]:
    if wire != _LEN:
        raise OtlpError("a message field with a scalar wire type")
    return value


def _as_double(bits: int) -> float:
    return _DOUBLE.unpack(_UINT64.pack(bits))[0]


def _any_value(buf: bytes, span: tuple[int, int]) -> str | None:
    text = None
    for number, wire, value in _fields(buf, *span):
        if number == 1 and wire == _LEN:
            text = _text(buf, value)
        elif number == 2 and wire == _VARINT:
            text = "true" if value else "false"
        elif number == 3 and wire == _VARINT:
            text = str(value - (1 << 64) if value >= 1 << 63 else value)
        elif number == 4 and wire == _I64:
            text = repr(_as_double(value))
    return text


def _key_value(buf: bytes, span: tuple[int, int]) -> tuple[str, str] | None:
    key, text = None, None
    for number, wire, value in _fields(buf, *span):
        if number == 1:
            key = _text(buf, _len(wire, value))
        elif number == 2:
            text = _any_value(buf, _len(wire, value))
    return (key, text) if key and text is not None else None


class _Collector:
    def __init__(self) -> None:
        self.points: list[DataPoint] = []

    def full(self) -> bool:
        return len(self.points) >= MAX_POINTS

    def add(self, point: DataPoint) -> None:
        if not self.full():
            self.points.append(point)


def _attributes(buf: bytes, spans: list[tuple[int, int]], base: tuple[tuple[str, str], ...]
                ) -> tuple[tuple[str, str], ...]:
    out = dict(base)
    for span in spans:
        if len(out) >= MAX_ATTRIBUTES:
            break
        pair = _key_value(buf, span)
        if pair is not None:
            out[pair[0]] = pair[1]
    return tuple(sorted(out.items()))


def _number_point(buf: bytes, span: tuple[int, int], attr_field: int
                  ) -> tuple[list[tuple[int, int]], float | None, int | None, float | None]:
    """(attribute spans, number value, histogram count, histogram sum)."""
    attrs: list[tuple[int, int]] = []
    number = count = total = None
    for field, wire, value in _fields(buf, *span):
        if field == attr_field and wire == _LEN:
            if len(attrs) < MAX_ATTRIBUTES:
                attrs.append(value)
        elif attr_field == 7 and field == 4 and wire == _I64:
            number = _as_double(value)
        elif attr_field == 7 and field == 6 and wire == _I64:
            number = float(_INT64.unpack(_UINT64.pack(value))[0])
        elif attr_field == 9 and field == 4 and wire == _I64:
            count = value
        elif attr_field == 9 and field == 5 and wire == _I64:
            total = _as_double(value)
    return attrs, number, count, total


def _metric(buf: bytes, span: tuple[int, int], base: tuple[tuple[str, str], ...],
            out: _Collector) -> None:
    name = ""
    data: tuple[int, tuple[int, int]] | None = None
    for field, wire, value in _fields(buf, *span):
        if field == 1:
            name = _text(buf, _len(wire, value))
        elif field in (5, 7, 9):
            data = (field, _len(wire, value))
    if not name or data is None:
        return
    kind_field, body = data
    points: list[tuple[int, int]] = []
    temporality, monotonic = CUMULATIVE, False
    for field, wire, value in _fields(buf, *body):
        if field == 1 and wire == _LEN:
            points.append(value)
        elif field == 2 and wire == _VARINT:
            temporality = value
        elif field == 3 and wire == _VARINT:
            monotonic = bool(value)
    delta = temporality == DELTA and kind_field != 5
    for point in points:
        if out.full():
            return
        if kind_field == 9:
            attrs, _, count, total = _number_point(buf, point, 9)
            labels = _attributes(buf, attrs, base)
            if count is not None:
                out.add(DataPoint(name + ".count", "counter", labels, float(count), delta))
            if total is not None:
                out.add(DataPoint(name + ".sum", "counter", labels, total, delta))
            continue
        attrs, number, _, _ = _number_point(buf, point, 7)
        if number is None:
            continue
        kind = "counter" if kind_field == 7 and monotonic else "gauge"
        out.add(DataPoint(name, kind, _attributes(buf, attrs, base), number,
                          delta and kind == "counter"))


def decode_metrics_untrusted(data: bytes) -> list[DataPoint]:
    """The data points of a MetricsData message (at most ``MAX_POINTS``). Raises OtlpError."""
    buf = bytes(data)
    out = _Collector()
    for field, wire, value in _fields(buf, 0, len(buf)):
        if field != 1:
            continue
        resource_metrics = _len(wire, value)
        base: tuple[tuple[str, str], ...] = ()
        scopes: list[tuple[int, int]] = []
        for rfield, rwire, rvalue in _fields(buf, *resource_metrics):
            if rfield == 1:
                spans = [v for f, w, v in _fields(buf, *_len(rwire, rvalue))
                         if f == 1 and w == _LEN]
                base = _attributes(buf, spans, ())
            elif rfield == 2:
                scopes.append(_len(rwire, rvalue))
        for scope in scopes:
            for sfield, swire, svalue in _fields(buf, *scope):
                if sfield == 2:
                    _metric(buf, _len(swire, svalue), base, out)
    return out.points
