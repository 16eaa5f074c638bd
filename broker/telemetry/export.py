"""The latest pushed client metrics, for the broker's Prometheus endpoint (``/metrics``).

Each client instance's last push replaces its series (a sum sent as deltas is added to the value
kept). Names follow Prometheus' rules: the client's metric name with every character outside
``[a-zA-Z0-9_]`` made ``_`` (``org.apache.kafka.producer.record.queue.time.avg`` becomes
``org_apache_kafka_producer_record_queue_time_avg``); labels ``client_instance_id``,
``client_id`` and the data point's (and resource's) attributes, their keys mapped the same way.

Bounded cardinality: at most ``max_series`` series and ``max_bytes`` of their text over every
instance, and ``max_clients`` instances; when a push would go over, the instances pushed least
recently are dropped first, and one instance alone keeps at most that much (the rest of its push
is cut). A client's series go when it has been silent past the expiry its manager gives
(``expire``). Pure: time is ``now_ms``.
"""

from __future__ import annotations

import re
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from broker.telemetry.otlp import DataPoint

MAX_SERIES = 20_000
MAX_CLIENTS = 1_000
MAX_BYTES = 16 * 1024 * 1024  # of names, labels and values kept, all clients together
SERIES_OVERHEAD = 100  # bytes counted per series beyond its text (tuples, floats, dict slot)
OWN_LABELS = ("client_instance_id", "client_id")
_INVALID = re.compile(r"[^a-zA-Z0-9_]")

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]  # (Prometheus name, attribute labels)


def prometheus_name(name: str) -> str:
    """A client metric name as a Prometheus metric (or label) name."""
    mapped = _INVALID.sub("_", name)
    if not mapped or mapped[0].isdigit():
        mapped = "_" + mapped
    return mapped


def _label_name(key: str) -> str:
    mapped = prometheus_name(key)
    if mapped.startswith("__"):  # reserved by Prometheus
        mapped = "a" + mapped
    return mapped


@dataclass
class _Client:
    client_id: str
    series: dict[SeriesKey, tuple[str, float]]  # key -> (kind, value)
    expires_ms: int  # its series go then, unless it pushes again
    size: int  # bytes counted against ``max_bytes``


class TelemetryExport:
    def __init__(self, max_series: int = MAX_SERIES, max_clients: int = MAX_CLIENTS,
                 max_bytes: int = MAX_BYTES) -> None:
        self.max_series = max_series
        self.max_clients = max_clients
        self.max_bytes = max_bytes
        self._clients: OrderedDict[uuid.UUID, _Client] = OrderedDict()
        self._series = 0
        self._bytes = 0

    @property
    def series_count(self) -> int:
        return self._series

    @property
    def bytes_count(self) -> int:
        return self._bytes

    def forget(self, client_instance_id: uuid.UUID) -> None:
        client = self._clients.pop(client_instance_id, None)
        if client is not None:
            self._series -= len(client.series)
            self._bytes -= client.size

    def expire(self, now_ms: int) -> None:
        """Forget the clients silent past their expiry (the least recently pushed first)."""
        while self._clients:
            instance_id, client = next(iter(self._clients.items()))
            if client.expires_ms > now_ms:
                return
            self.forget(instance_id)

    def update(self, client_instance_id: uuid.UUID, client_id: str,
               points: Iterable[DataPoint], expires_ms: int) -> None:
        """A push's data points become the instance's series, kept until ``expires_ms``."""
        previous = self._clients.get(client_instance_id)
        old = previous.series if previous is not None else {}
        self.forget(client_instance_id)
        series: dict[SeriesKey, tuple[str, float]] = {}
        size = len(client_id) + SERIES_OVERHEAD
        for point in points:
            labels = tuple((_label_name(k), v) for k, v in point.attributes
                           if _label_name(k) not in OWN_LABELS)
            key = (prometheus_name(point.name), labels)
            cost = len(key[0]) + sum(len(k) + len(v) for k, v in labels) + SERIES_OVERHEAD
            if len(series) >= self.max_series or size + cost > self.max_bytes:
                break
            value = point.value
            if point.delta:
                value += old.get(key, ("counter", 0.0))[1]
            if key not in series:
                size += cost
            series[key] = (point.kind, value)
        while self._clients and (self._series + len(series) > self.max_series
                                 or self._bytes + size > self.max_bytes
                                 or len(self._clients) >= self.max_clients):
            self.forget(next(iter(self._clients)))
        self._clients[client_instance_id] = _Client(client_id, series, expires_ms, size)
        self._series += len(series)
        self._bytes += size

    def families(self) -> list[tuple[str, str, list[tuple[dict[str, str], float]]]]:
        """(name, kind, [(labels, value)]) per metric name, sorted; the kind of a name is the
        first instance's (a client that disagrees is shown under that kind)."""
        out: dict[str, tuple[str, list[tuple[dict[str, str], float]]]] = {}
        for instance_id, client in self._clients.items():
            own = {"client_instance_id": str(instance_id), "client_id": client.client_id}
            for (name, labels), (kind, value) in client.series.items():
                family = out.setdefault(name, (kind, []))
                family[1].append(({**own, **dict(labels)}, value))
        return [(name, kind, samples) for name, (kind, samples) in sorted(out.items())]
