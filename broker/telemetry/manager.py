"""Client telemetry (KIP-714) as Kafka's ``ClientMetricsManager`` serves it: GetTelemetry-
Subscriptions gives a client instance its subscription; PushTelemetry takes its metrics.

Rules / theory of operation:

- A client instance is named by a UUID the broker assigns when the client asks with the zero
  UUID. Its subscription is evaluated once from the CLIENT_METRICS subscriptions its attributes
  match (client id, software name and version, source address and port, instance id): the union
  of their metric prefixes (``*`` if any says every metric), the lowest interval (default 5
  minutes), and a subscription id hashed from those and the instance id. A change to any
  subscription makes every instance re-evaluated at its next request (a new instance record,
  whose timestamps start afresh, so the client gets the new subscription at once).
- Timing, as Kafka's ``ClientMetricsInstance``: a Get less than one interval after the last Get
  or Push is THROTTLING_QUOTA_EXCEEDED (unless the last push failed with UNKNOWN_SUBSCRIPTION_ID
  or UNSUPPORTED_COMPRESSION_TYPE: the client must re-fetch at once); a Push is accepted right
  after a Get (clients add jitter) or one interval after the last Push, else throttled (a
  terminating push is never throttled).
- A Push, in Kafka's order: after a terminating push INVALID_REQUEST; too early
  THROTTLING_QUOTA_EXCEEDED; another subscription id UNKNOWN_SUBSCRIPTION_ID; an unknown codec
  UNSUPPORTED_COMPRESSION_TYPE; more than ``telemetry.max.bytes`` TELEMETRY_TOO_LARGE (also when
  it decompresses to more); a payload that is not OTLP INVALID_RECORD.
- Bounded: at most ``MAX_CLIENT_INSTANCES`` instances (Kafka's 16384) of at most
  ``MAX_ATTRIBUTE`` characters per attribute, least recently seen dropped first, and each expires
  max(60 s, 3 push intervals) after its last request or when the connection it last spoke on
  closes (Kafka's disconnect listener); its pushed series stay on /metrics until that expiry.

Pure: time is ``now_ms``; the UUID source, subscriptions and exporter are passed in.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import crc32c

from broker.config.client_metrics_configs import ALL_METRICS, INTERVAL_MS_DEFAULT, Subscription
from broker.telemetry.export import TelemetryExport
from broker.telemetry.otlp import OtlpError, decode_metrics_untrusted
from protocol.errors import CorruptFrameError, ErrorCode
from protocol.primitives import ZERO_UUID
from protocol.records import Compression, DecompressedTooLarge, codec_available, decompress

MAX_CLIENT_INSTANCES = 16_384
MAX_ATTRIBUTE = 256  # characters of a client attribute kept (client id, software name, ...)
CACHE_EXPIRY_MS = 60_000
RESERVED_UUIDS = (ZERO_UUID, uuid.UUID(int=1))
# Kafka's preference order: clients compress with the first they support.
PREFERRED_COMPRESSION = (Compression.ZSTD, Compression.LZ4, Compression.GZIP, Compression.SNAPPY)
_NEVER = -(1 << 62)
_REFETCH_ERRORS = (ErrorCode.UNKNOWN_SUBSCRIPTION_ID, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)


@dataclass
class ClientInstance:
    client_instance_id: uuid.UUID
    attributes: dict[str, str | None]  # the match selectors' values
    subscription_id: int
    subscription_version: int
    metrics: tuple[str, ...]
    push_interval_ms: int
    last_get_ms: int = _NEVER
    last_push_ms: int = _NEVER
    terminating: bool = False
    last_error: int = ErrorCode.NONE
    last_seen_ms: int = 0

    @property
    def expires_ms(self) -> int:
        return self.last_seen_ms + max(CACHE_EXPIRY_MS, 3 * self.push_interval_ms)


@dataclass(frozen=True)
class SubscriptionAnswer:
    error_code: int
    client_instance_id: uuid.UUID = ZERO_UUID
    subscription_id: int = 0
    accepted_compression_types: tuple[int, ...] = ()
    push_interval_ms: int = 0
    telemetry_max_bytes: int = 0
    delta_temporality: bool = False
    requested_metrics: tuple[str, ...] = ()


def subscription_id(metrics: tuple[str, ...], push_interval_ms: int,
                    client_instance_id: uuid.UUID) -> int:
    """A CRC32C of the metric prefixes and the interval, XORed with the instance id's hash (as
    Kafka's ``computeSubscriptionId``); a signed int32."""
    crc = crc32c.crc32c((",".join(sorted(metrics)) + str(push_interval_ms)).encode())
    value = client_instance_id.int
    h = (value >> 64) ^ (value & ((1 << 64) - 1))
    h = ((h >> 32) ^ h) & 0xFFFFFFFF
    out = crc ^ h
    return out - (1 << 32) if out >= 1 << 31 else out


def evaluate(subscriptions: Mapping[str, Subscription], attributes: Mapping[str, str | None]
             ) -> tuple[tuple[str, ...], int]:
    """The metric prefixes and push interval of a client with ``attributes``."""
    metrics: set[str] = set()
    interval = INTERVAL_MS_DEFAULT
    for sub in subscriptions.values():
        if sub.matches(attributes):
            metrics.update(sub.metrics)
            interval = min(interval, sub.interval_ms)
    if ALL_METRICS in metrics or "" in metrics:
        return (ALL_METRICS,), interval
    return tuple(sorted(metrics)), interval


class TelemetryManager:
    def __init__(self, subscriptions: Callable[[], Mapping[str, Subscription]],
                 export: TelemetryExport, telemetry_max_bytes: int,
                 new_uuid: Callable[[], uuid.UUID] = uuid.uuid4,
                 max_instances: int = MAX_CLIENT_INSTANCES) -> None:
        self._subscriptions = subscriptions
        self.export = export
        self.telemetry_max_bytes = telemetry_max_bytes
        self._new_uuid = new_uuid
        self._max_instances = max_instances
        self.instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()
        self.subscription_version = 0
        self.accepted_compression = tuple(int(c) for c in PREFERRED_COMPRESSION
                                          if codec_available(c))

    def subscriptions_changed(self) -> None:
        """A CLIENT_METRICS resource changed: every instance is re-evaluated when next seen."""
        self.subscription_version += 1

    # -- instances -------------------------------------------------------------------------

    def _expire(self, now_ms: int) -> None:
        self.export.expire(now_ms)
        while self.instances:
            oldest = next(iter(self.instances.values()))
            if oldest.expires_ms > now_ms and len(self.instances) <= self._max_instances:
                return
            self._drop(oldest.client_instance_id)

    def _drop(self, client_instance_id: uuid.UUID) -> None:
        self.instances.pop(client_instance_id, None)  # its series expire on their own

    def connection_closed(self, client_instance_id: uuid.UUID) -> None:
        """The connection the instance last spoke on closed: forget it, as Kafka's disconnect
        listener does (a client that comes back is evaluated afresh, with its new connection's
        attributes and no throttle); the metrics it pushed stay until they expire."""
        self._drop(client_instance_id)

    def _build(self, client_instance_id: uuid.UUID, attributes: dict[str, str | None],
               now_ms: int) -> ClientInstance:
        metrics, interval = evaluate(self._subscriptions(), attributes)
        return ClientInstance(client_instance_id, attributes,
                              subscription_id(metrics, interval, client_instance_id),
                              self.subscription_version, metrics, interval, last_seen_ms=now_ms)

    def _instance(self, client_instance_id: uuid.UUID, client: Mapping[str, str | None],
                  now_ms: int) -> ClientInstance:
        self._expire(now_ms)
        instance = self.instances.get(client_instance_id)
        if instance is None:
            attributes = {k: None if v is None else v[:MAX_ATTRIBUTE] for k, v in client.items()}
            attributes["client_instance_id"] = str(client_instance_id)
            instance = self._build(client_instance_id, attributes, now_ms)
        elif instance.subscription_version < self.subscription_version:
            instance = self._build(client_instance_id, instance.attributes, now_ms)
        instance.last_seen_ms = now_ms
        self.instances[client_instance_id] = instance
        self.instances.move_to_end(client_instance_id)
        if len(self.instances) > self._max_instances:
            self._drop(next(iter(self.instances)))
        return instance

    # -- requests --------------------------------------------------------------------------

    def get_subscriptions(self, client_instance_id: uuid.UUID,
                          client: Mapping[str, str | None], now_ms: int) -> SubscriptionAnswer:
        """GetTelemetrySubscriptions. ``client``: the match selectors' values of the request's
        connection (client_id, client_software_name/version, client_source_address/port)."""
        if client_instance_id == ZERO_UUID:
            client_instance_id = self._new_uuid()
            while client_instance_id in self.instances or client_instance_id in RESERVED_UUIDS:
                client_instance_id = self._new_uuid()
        instance = self._instance(client_instance_id, client, now_ms)
        last = max(instance.last_get_ms, instance.last_push_ms)
        if now_ms - last >= instance.push_interval_ms:
            instance.last_get_ms = now_ms
        elif instance.last_error not in _REFETCH_ERRORS:
            return SubscriptionAnswer(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
        instance.last_error = ErrorCode.NONE
        return SubscriptionAnswer(
            ErrorCode.NONE, client_instance_id, instance.subscription_id,
            self.accepted_compression, instance.push_interval_ms, self.telemetry_max_bytes,
            # Cumulative sums: Prometheus counters are cumulative, and a missed push then loses
            # nothing (Kafka asks for deltas, for its exporter plugins).
            False, instance.metrics)

    def push(self, client_instance_id: uuid.UUID, subscription: int, terminating: bool,
             compression_type: int, metrics: bytes, client: Mapping[str, str | None],
             now_ms: int) -> int:
        """PushTelemetry: the error code of the answer."""
        if client_instance_id in RESERVED_UUIDS:
            return ErrorCode.INVALID_REQUEST
        instance = self._instance(client_instance_id, client, now_ms)
        try:
            code = self._check_push(instance, subscription, terminating, compression_type,
                                    metrics, now_ms)
        finally:
            instance.terminating = terminating
        if code == ErrorCode.NONE and metrics:
            code = self._export(instance, compression_type, metrics, now_ms)
        instance.last_error = code
        return code

    def _check_push(self, instance: ClientInstance, subscription: int, terminating: bool,
                    compression_type: int, metrics: bytes, now_ms: int) -> int:
        if instance.terminating:
            return ErrorCode.INVALID_REQUEST
        accept = (instance.last_get_ms > instance.last_push_ms
                  or now_ms - instance.last_push_ms >= instance.push_interval_ms)
        if accept:
            instance.last_push_ms = now_ms
        elif not terminating:
            return ErrorCode.THROTTLING_QUOTA_EXCEEDED
        if subscription != instance.subscription_id:
            return ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        if compression_type != Compression.NONE and compression_type not in self.accepted_compression:
            return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        if len(metrics) > self.telemetry_max_bytes:
            return ErrorCode.TELEMETRY_TOO_LARGE
        return ErrorCode.NONE

    def _export(self, instance: ClientInstance, compression_type: int, metrics: bytes,
                now_ms: int) -> int:
        try:
            data = (bytes(metrics) if compression_type == Compression.NONE else
                    decompress(Compression(compression_type), memoryview(metrics),
                               self.telemetry_max_bytes))
            points = decode_metrics_untrusted(data)
        except DecompressedTooLarge:
            return ErrorCode.TELEMETRY_TOO_LARGE
        except (CorruptFrameError, OtlpError):
            return ErrorCode.INVALID_RECORD
        self.export.update(instance.client_instance_id,
                           instance.attributes.get("client_id") or "", points,
                           instance.expires_ms)
        return ErrorCode.NONE
