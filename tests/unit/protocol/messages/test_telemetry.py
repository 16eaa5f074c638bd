"""GetTelemetrySubscriptions and PushTelemetry (KIP-714) against Kafka 4.4's own bytes.

The golden bytes were written by Kafka 4.4.0's generated message classes (kafka-clients
``GetTelemetrySubscriptionsRequestData`` & co., ``Message.write`` at v0) with every field set:
the client instance id 01020304-0506-0708-090a-0b0c0d0e0f10, a negative subscription id, the
int8 array of compression types, a terminating zstd push. Each is decoded by our codec and
encoded back to the same bytes.
"""

import uuid

import pytest

from protocol.api_keys import ApiKey
from protocol.messages import decode_request, decode_response, encode_request, encode_response

INSTANCE = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
GOLDEN = {
    (ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, "request"): "0102030405060708090a0b0c0d0e0f1000",
    (ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, "response"): (
        "0000000000000102030405060708090a0b0c0d0e0f10fffe1dc00504030102000013880010000000031b6f"
        "72672e6170616368652e6b61666b612e70726f64756365722e022a00"),
    (ApiKey.PUSH_TELEMETRY, "request"): "0102030405060708090a0b0c0d0e0f10fffe1dc00104050a00010200",
    (ApiKey.PUSH_TELEMETRY, "response"): "00000000007600",
}
VALUES = {
    (ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, "request"): {"client_instance_id": INSTANCE},
    (ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, "response"): {
        "throttle_time_ms": 0, "error_code": 0, "client_instance_id": INSTANCE,
        "subscription_id": -123456, "accepted_compression_types": [4, 3, 1, 2],
        "push_interval_ms": 5000, "telemetry_max_bytes": 1048576, "delta_temporality": False,
        "requested_metrics": ["org.apache.kafka.producer.", "*"]},
    (ApiKey.PUSH_TELEMETRY, "request"): {
        "client_instance_id": INSTANCE, "subscription_id": -123456, "terminating": True,
        "compression_type": 4, "metrics": bytes([10, 0, 1, 2])},
    (ApiKey.PUSH_TELEMETRY, "response"): {"throttle_time_ms": 0, "error_code": 118},
}


@pytest.mark.parametrize("case", sorted(GOLDEN), ids=lambda c: f"{c[0].name}-{c[1]}")
def test_golden_bytes_decode_and_encode_back(case) -> None:
    api, direction = case
    data = bytes.fromhex(GOLDEN[case])
    decode = decode_request if direction == "request" else decode_response
    encode = encode_request if direction == "request" else encode_response
    decoded = decode(api, 0, data)
    for name, value in VALUES[case].items():
        assert list(getattr(decoded, name)) == value if isinstance(value, list) \
            else getattr(decoded, name) == value, name
    assert encode(api, 0, VALUES[case]) == data
    assert encode(api, 0, decoded) == data
