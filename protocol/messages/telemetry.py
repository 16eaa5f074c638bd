"""Client telemetry (KIP-714): GetTelemetrySubscriptions (api key 71) and PushTelemetry (72).

A client asks which of its metrics the broker wants, and how often (the subscription), then pushes
them as an OpenTelemetry ``MetricsData`` protobuf (``metrics``), compressed with
``compression_type`` (Kafka's codec ids). Both flexible from v0, Kafka 4.4's only version.
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

GET_TELEMETRY_SUBSCRIPTIONS = declare(
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, valid="0", flexible="0+",
    request=[
        F("client_instance_id", "uuid"),  # zero on the first request: the broker assigns one
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("client_instance_id", "uuid"),  # the one assigned, else zero
        F("subscription_id", "int32"),
        F("accepted_compression_types", "[]int8"),
        F("push_interval_ms", "int32"),
        F("telemetry_max_bytes", "int32"),
        F("delta_temporality", "bool"),
        F("requested_metrics", "[]string"),  # prefixes; [""] every metric, [] none
    ],
)

PUSH_TELEMETRY = declare(
    ApiKey.PUSH_TELEMETRY, valid="0", flexible="0+",
    request=[
        F("client_instance_id", "uuid"),
        F("subscription_id", "int32"),
        F("terminating", "bool"),
        F("compression_type", "int8"),
        F("metrics", "bytes"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
    ],
)
