"""Broker metrics in the Prometheus text format (``serve --metrics-port``, key ``metrics.port``).

Two kinds of figures:

- counted as they happen, by ``Metrics`` (which the composition root builds only when metrics are
  on and hands to the dispatcher, the server and the flusher): requests and errors by API and
  version, request latency histograms, bytes in and out, connections, fsync latency;
- read from the broker's state at scrape time, by ``render``: partitions (log start, log end
  offset, high watermark, last stable offset), open transactions and their age, group lag.

Exposition format 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/). No
third-party client: the format is a few lines, and the hot path only increments dict entries.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

from protocol.api_keys import ApiKey
from protocol.errors import KafkaError, error_name

# Seconds; request latencies run from ~50 us (Metadata) to seconds (long-poll Fetch, rebalances).
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                   0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
FSYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                 0.5, 1.0)
IN_PROGRESS_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")


class Histogram:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value


class Metrics:
    """What is counted as it happens. Not thread-safe: everything runs on the broker's loop,
    except ``fsync`` which the flusher calls on the loop after its worker thread returns."""

    def __init__(self) -> None:
        self.requests: dict[tuple[int, int], int] = {}
        self.errors: dict[tuple[int, int, int], int] = {}  # (api, version, error code)
        self.latency: dict[tuple[int, int], Histogram] = {}
        self.closed_by_error: dict[tuple[int, int], int] = {}
        self.bytes_in = 0
        self.bytes_out = 0
        self.connections_opened = 0
        self.connections_closed = 0
        self.fsync_latency = Histogram(FSYNC_BUCKETS)

    def request(self, api_key: int, version: int, seconds: float, error_codes: Iterable[int]) -> None:
        key = (api_key, version)
        self.requests[key] = self.requests.get(key, 0) + 1
        histogram = self.latency.get(key)
        if histogram is None:
            histogram = self.latency[key] = Histogram(LATENCY_BUCKETS)
        histogram.observe(seconds)
        for code in error_codes:
            error_key = (api_key, version, code)
            self.errors[error_key] = self.errors.get(error_key, 0) + 1

    def connection_closed_on_error(self, api_key: int, version: int) -> None:
        """A request the broker could not answer (undecodable, unsupported): the connection is
        dropped, Kafka's answer to such input."""
        key = (api_key, version)
        self.closed_by_error[key] = self.closed_by_error.get(key, 0) + 1

    def fsync(self, seconds: float) -> None:
        self.fsync_latency.observe(seconds)


def error_codes(response: Any, depth: int = 0) -> list[int]:
    """Every non-zero ``error_code`` in a response (top level and nested lists of structs, three
    levels deep: response -> topics -> partitions), as Kafka's ErrorsPerSec counts them; already
    encoded bodies are not looked into. (Construct Containers are dicts: ``isinstance(x, dict)``
    is the fast check here, on the path of every request.)"""
    found: list[int] = []
    if not isinstance(response, dict):
        return found
    code = response.get("error_code")
    if code:
        found.append(int(code))
    if depth < 3:
        for value in response.values():
            # The entries of a list share one schema: when the first has no error code and no
            # nested list (ApiVersions' keys, Metadata's brokers), none has.
            if type(value) is list and value and isinstance(value[0], dict) and (
                "error_code" in value[0] or any(type(v) is list for v in value[0].values())
            ):
                for item in value:
                    found.extend(error_codes(item, depth + 1))
    return found


# -- exposition -------------------------------------------------------------------------------------


def _api_name(api_key: int) -> str:
    try:
        return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)


def _escape(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: object) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _float(value: float) -> str:
    return repr(float(value)) if value not in (float("inf"),) else "+Inf"


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: float, **labels: object) -> None:
        self.lines.append(f"{name}{_labels(**labels)} {_float(value)}")

    def histogram(self, name: str, histogram: Histogram, **labels: object) -> None:
        cumulative = 0
        for bound, count in zip((*histogram.bounds, float("inf")), histogram.counts, strict=True):
            cumulative += count
            self.sample(f"{name}_bucket", cumulative, **labels, le=_float(bound))
        self.sample(f"{name}_sum", histogram.sum, **labels)
        self.sample(f"{name}_count", cumulative, **labels)


def render(metrics: Metrics, state: BrokerState) -> str:
    """The whole exposition: counters from ``metrics``, gauges read from ``state`` now."""
    w = _Writer()
    w.family("minibroker_requests_total", "counter", "Requests handled, by API and version.")
    for (api, version), count in sorted(metrics.requests.items()):
        w.sample("minibroker_requests_total", count, api=_api_name(api), version=version)
    w.family("minibroker_request_errors_total", "counter",
             "Error codes in responses, by API, version and error.")
    for (api, version, code), count in sorted(metrics.errors.items()):
        w.sample("minibroker_request_errors_total", count, api=_api_name(api), version=version,
                 error=state.error_name(code))
    w.family("minibroker_requests_dropped_total", "counter",
             "Requests that could not be answered (the connection was closed), by API.")
    for (api, version), count in sorted(metrics.closed_by_error.items()):
        w.sample("minibroker_requests_dropped_total", count, api=_api_name(api), version=version)
    w.family("minibroker_request_latency_seconds", "histogram",
             "From the request's arrival to its reply being ready, by API and version.")
    for (api, version), histogram in sorted(metrics.latency.items()):
        w.histogram("minibroker_request_latency_seconds", histogram, api=_api_name(api),
                    version=version)
    w.family("minibroker_bytes_in_total", "counter", "Bytes received from clients.")
    w.sample("minibroker_bytes_in_total", metrics.bytes_in)
    w.family("minibroker_bytes_out_total", "counter", "Bytes sent to clients.")
    w.sample("minibroker_bytes_out_total", metrics.bytes_out)
    w.family("minibroker_connections_opened_total", "counter", "Client connections accepted.")
    w.sample("minibroker_connections_opened_total", metrics.connections_opened)
    w.family("minibroker_connections", "gauge", "Client connections open now.")
    w.sample("minibroker_connections", metrics.connections_opened - metrics.connections_closed)
    w.family("minibroker_fsync_latency_seconds", "histogram",
             "One group-commit round of fdatasyncs (all partitions it covers).")
    w.histogram("minibroker_fsync_latency_seconds", metrics.fsync_latency)

    partitions = sorted(state.partitions())
    for name, index, help_text in (
        ("log_start_offset", 2, "First offset still in the log."),
        ("log_end_offset", 3, "Next offset to be written (LEO)."),
        ("high_watermark", 4, "Offset below which records are durable and readable (HW)."),
        ("last_stable_offset", 5, "First offset of the oldest open transaction, else HW (LSO)."),
    ):
        metric = f"minibroker_partition_{name}"
        w.family(metric, "gauge", help_text)
        for row in partitions:
            w.sample(metric, float(row[index]), topic=row[0], partition=row[1])

    transactions = state.open_transactions()
    w.family("minibroker_open_transactions", "gauge", "Transactions in progress, by state.")
    by_state: dict[str, int] = dict.fromkeys(IN_PROGRESS_STATES, 0)
    for _, txn_state, _ in transactions:
        by_state[txn_state] = by_state.get(txn_state, 0) + 1
    for txn_state, count in by_state.items():
        w.sample("minibroker_open_transactions", count, state=txn_state)
    w.family("minibroker_transaction_age_seconds", "gauge",
             "Age of each transaction in progress, by transactional id.")
    for transactional_id, txn_state, age_ms in sorted(transactions):
        w.sample("minibroker_transaction_age_seconds", age_ms / 1000,
                 transactional_id=transactional_id, state=txn_state)

    w.family("minibroker_group_lag", "gauge",
             "Last stable offset minus the group's committed offset, per partition.")
    w.family("minibroker_group_committed_offset", "gauge", "The group's committed offset.")
    lags = sorted(state.group_offsets())
    for group, topic, partition, committed, _lso in lags:
        w.sample("minibroker_group_committed_offset", committed, group=group, topic=topic,
                 partition=partition)
    for group, topic, partition, committed, lso in lags:
        if lso is not None:
            w.sample("minibroker_group_lag", max(lso - committed, 0), group=group, topic=topic,
                     partition=partition)
    _render_share(w, state.share_partitions())
    consumer_groups = sorted(state.consumer_groups())
    for name, index, kind, help_text in (
        ("members", 2, "gauge", "Members of a consumer-protocol group (KIP-848), by state."),
        ("classic_members", 3, "gauge",
         "Its members that speak the classic protocol (a group that changed protocol)."),
        ("epoch", 4, "gauge", "The group epoch."),
        ("assignment_epoch", 5, "gauge", "The epoch of the group's target assignment."),
        ("rebalances_total", 6, "counter", "Group epoch bumps since the broker started."),
    ):
        metric = f"minibroker_consumer_group_{name}"
        w.family(metric, kind, help_text)
        for cg in consumer_groups:
            labels = {"group": cg[0], "state": cg[1]} if index == 2 else {"group": cg[0]}
            w.sample(metric, float(cg[index]), **labels)
    _render_telemetry(w, state.client_telemetry())
    return "\n".join(w.lines) + "\n"


def _render_telemetry(w: _Writer, families: list[tuple[str, str, list]]) -> None:
    """The metrics clients pushed (KIP-714, broker/telemetry/export.py), as they named them."""
    w.family("minibroker_client_telemetry_series", "gauge",
             "Client metric series (pushed by clients, KIP-714) shown below.")
    w.sample("minibroker_client_telemetry_series", sum(len(f[2]) for f in families))
    for name, kind, samples in families:
        w.family(name, kind, "Pushed by clients (KIP-714 client telemetry).")
        for labels, value in samples:
            w.sample(name, value, **labels)


_SHARE_FAMILIES = (  # (name, kind, help), in the order of ShareService.metrics()'s values
    ("minibroker_share_start_offset", "gauge", "The share-partition start offset."),
    ("minibroker_share_in_flight_records", "gauge",
     "Records in flight not yet finished (Available again or Acquired), per share partition."),
    ("minibroker_share_acquired_records", "gauge",
     "Records acquired by a member and not yet acknowledged, per share partition."),
    ("minibroker_share_redelivered_records_total", "counter",
     "Records delivered again (after a release, a lock expiry or a member gone)."),
    ("minibroker_share_archived_records_total", "counter",
     "Delivered records archived (rejected, or at the delivery count limit)."),
)


def _render_share(w: _Writer, rows: list[tuple]) -> None:
    for index, (name, kind, help_text) in enumerate(_SHARE_FAMILIES):
        w.family(name, kind, help_text)
        for group, topic, partition, *values in rows:
            w.sample(name, values[index], group=group, topic=topic, partition=partition)


class BrokerState:
    """What ``render`` reads from the broker at scrape time (the handler context's services)."""

    def __init__(self, broker: Any) -> None:
        self._broker = broker

    def error_name(self, code: int) -> str:
        return error_name(code)

    def partitions(self) -> list[tuple[str, int, int, int, int, int]]:
        return [
            (p.topic, p.index, p.log_start_offset, p.log_end_offset, p.high_watermark,
             p.last_stable_offset)
            for p in self._broker.logs.all_partitions()
        ]

    def open_transactions(self) -> list[tuple[str, str, int]]:
        now = self._broker.clock.now_ms()
        result = []
        for md in self._broker.transactions.transactions():
            name = md.state.display_name
            if name in IN_PROGRESS_STATES:
                started = md.txn_start_ms if md.txn_start_ms >= 0 else now
                result.append((md.transactional_id, name, max(now - started, 0)))
        return result

    def share_partitions(self) -> list[tuple]:
        """Share groups' partitions (broker/share/service.py ``metrics``)."""
        share = getattr(self._broker, "share", None)
        return share.metrics() if share is not None else []
    def client_telemetry(self) -> list[tuple[str, str, list]]:
        """The latest metrics clients pushed (broker/telemetry/export.py ``families``)."""
        telemetry = getattr(self._broker, "telemetry", None)
        return telemetry.export.families() if telemetry is not None else []

    def consumer_groups(self) -> list[tuple[str, str, int, int, int, int, int]]:
        return self._broker.groups.consumer_group_stats()

    def group_offsets(self) -> list[tuple[str, str, int, int, int | None]]:
        broker = self._broker
        now = broker.clock.now_ms()
        rows = []
        for group_id in broker.groups.groups_with_offsets():
            for f in broker.groups.fetch_offsets(group_id, None, now):
                if f.offset < 0:
                    continue
                try:
                    lso = broker.partition(f.topic, f.partition).last_stable_offset
                except KafkaError:  # a deleted topic: no lag to show
                    lso = None
                rows.append((group_id, f.topic, f.partition, f.offset, lso))
        return rows
