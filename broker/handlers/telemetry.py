"""Client telemetry (KIP-714): GetTelemetrySubscriptions and PushTelemetry, handed to the
telemetry manager (broker/telemetry/manager.py) with the attributes subscriptions match: the
request's client id, the software name and version the connection gave in ApiVersions, its
source address and port. No ACL, as Kafka: every client may ask and push."""

from __future__ import annotations

from functools import partial

from broker.handlers import peer
from broker.handlers.context import Broker
from broker.handlers.marks import handles
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode


def _client(header) -> dict[str, str | None]:
    session = peer.session()
    return {
        "client_id": header.client_id or "",
        "client_software_name": session.client_software_name,
        "client_software_version": session.client_software_version,
        "client_source_address": peer.client_host().lstrip("/") or None,
        "client_source_port": None if session.client_port is None else str(session.client_port),
    }


def _on_close(broker: Broker, client_instance_id) -> None:
    """The connection's last client instance is forgotten when it closes (Kafka's)."""
    peer.session().on_close["telemetry"] = partial(broker.telemetry.connection_closed,
                                                   client_instance_id)


@handles(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
def get_telemetry_subscriptions(broker: Broker, header, request) -> dict:
    answer = broker.telemetry.get_subscriptions(request.client_instance_id, _client(header),
                                                broker.clock.now_ms())
    if answer.error_code != ErrorCode.NONE:
        return {"throttle_time_ms": 0, "error_code": answer.error_code}
    _on_close(broker, answer.client_instance_id)
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "client_instance_id": answer.client_instance_id,
        "subscription_id": answer.subscription_id,
        "accepted_compression_types": list(answer.accepted_compression_types),
        "push_interval_ms": answer.push_interval_ms,
        "telemetry_max_bytes": answer.telemetry_max_bytes,
        "delta_temporality": answer.delta_temporality,
        "requested_metrics": list(answer.requested_metrics),
    }


@handles(ApiKey.PUSH_TELEMETRY)
def push_telemetry(broker: Broker, header, request) -> dict:
    code = broker.telemetry.push(request.client_instance_id, request.subscription_id,
                                 request.terminating, request.compression_type, request.metrics,
                                 _client(header), broker.clock.now_ms())
    if code != ErrorCode.INVALID_REQUEST or request.client_instance_id in broker.telemetry.instances:
        _on_close(broker, request.client_instance_id)
    return {"throttle_time_ms": 0, "error_code": code}
