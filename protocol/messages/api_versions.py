"""ApiVersions (api key 18): which versions of which APIs this broker speaks; the table of served
versions.

v1 adds throttle_time_ms; v3 is flexible and the request carries the client's software name and
version (KIP-511), the response optional feature lists as tagged fields; v4 is v3 (KIP-896: a
broker answering v4 may leave out APIs that it only serves below Kafka 4's baseline). The response
always goes with response header v0 (``protocol.api_keys.response_header_version``).

``SERVED`` is the one table of the versions the broker serves and advertises, with the reason each
range starts and stops where it does (docs/protocol.md section 2: every advertised version works). The
dispatcher refuses to start unless every (api, version) in it has a codec and a handler and every
handler is in it (``broker.network.dispatcher.check_served``).

``API_VERSIONS_FALLBACK_BODY`` answers an ApiVersions request above our newest version: a v0 body,
``error_code=35 (UNSUPPORTED_VERSION)`` and our ApiVersions range, so that the client retries with
the highest version it sees there (Kafka does the same).
"""

from __future__ import annotations

from typing import NamedTuple

from protocol.api_keys import ApiKey, VersionRange
from protocol.errors import ErrorCode
from protocol.messages._declare import F, declare

API_VERSIONS = declare(
    ApiKey.API_VERSIONS, valid="0-4", flexible="3+",
    request=[
        F("client_software_name", "string", "3+"),
        F("client_software_version", "string", "3+"),
    ],
    response=[
        F("error_code", "int16"),
        F("api_keys", "[]", fields=[
            F("api_key", "int16"),
            F("min_version", "int16"),
            F("max_version", "int16"),
        ]),
        F("throttle_time_ms", "int32", "1+"),
        F("supported_features", "[]", "3+", tag=0, fields=[
            F("name", "string"), F("min_version", "int16"), F("max_version", "int16"),
        ]),
        F("finalized_features_epoch", "int64", "3+", tag=1, default=-1),
        F("finalized_features", "[]", "3+", tag=2, fields=[
            F("name", "string"), F("max_version_level", "int16"), F("min_version_level", "int16"),
        ]),
        F("zk_migration_ready", "bool", "3+", tag=3),
    ],
)


class Served(NamedTuple):
    versions: VersionRange
    why: str


# The versions served, per API. Lower bounds: Kafka 4's (KIP-896) unless a client needs older
# ones; upper bounds: the newest version current clients send, unless it needs something we
# do not have.
SERVED: dict[ApiKey, Served] = {
    ApiKey.PRODUCE: Served(VersionRange(3, 12),
        "from v3, the first with RecordBatch v2 (the only format stored; older ones would need"
        " down-conversion); to v12: transaction version 2 adds partitions with their first"
        " batch (KIP-890 part 2)"),
    ApiKey.FETCH: Served(VersionRange(4, 12),
        "from v4, the first with RecordBatch v2 and isolation_level; to v12 (flexible): v13+"
        " name topics by id, which topics do not have here"),
    ApiKey.LIST_OFFSETS: Served(VersionRange(1, 10),
        "from v1 (Kafka 4's baseline; v0's list of offsets is gone); to v10, all of Kafka's:"
        " -3 max timestamp (batch granularity), -4 earliest local = earliest, -5 latest tiered"
        " = -1 (no tiered storage)"),
    ApiKey.METADATA: Served(VersionRange(0, 12),
        "from v0 (librdkafka <= 2.11 checks old versions); to v12, all of Kafka's: v10+ carry"
        " topic ids (the consumer protocol's assignments name topics by id), v12 looks topics"
        " up by id"),
    ApiKey.OFFSET_COMMIT: Served(VersionRange(2, 9),
        "Kafka 4's range to v9: v9 carries the member epoch of a consumer-protocol group (the"
        " generation of a classic one); v10 names topics by id"),
    ApiKey.OFFSET_FETCH: Served(VersionRange(1, 9),
        "Kafka 4's range (librdkafka's consumer needs v1); v8+ batch groups, v7+ require_stable"),
    ApiKey.FIND_COORDINATOR: Served(VersionRange(0, 5),
        "from v0 (librdkafka checks it); to v5: v6 adds share-group keys (KIP-932)"),
    ApiKey.JOIN_GROUP: Served(VersionRange(0, 9),
        "all of Kafka's: librdkafka <= 2.11 needs v0 in range for its consumer; v4+"
        " MEMBER_ID_REQUIRED, v5+ static membership"),
    ApiKey.HEARTBEAT: Served(VersionRange(0, 4), "all of Kafka's"),
    ApiKey.LEAVE_GROUP: Served(VersionRange(0, 5), "all of Kafka's"),
    ApiKey.SYNC_GROUP: Served(VersionRange(0, 5), "all of Kafka's"),
    ApiKey.DESCRIBE_GROUPS: Served(VersionRange(0, 6),
        "all of Kafka's: v6 (KIP-1043) answers GROUP_ID_NOT_FOUND for a group that does not exist"),
    ApiKey.LIST_GROUPS: Served(VersionRange(0, 5),
        "all of Kafka's: v4 filters by state, v5 by type (classic groups only)"),
    ApiKey.API_VERSIONS: Served(VersionRange(0, 4),
        "all of Kafka's; v3+ carries the client's name and version (KIP-511)"),
    ApiKey.CREATE_TOPICS: Served(VersionRange(0, 6), "to v6: v7 answers topic ids"),
    ApiKey.DELETE_TOPICS: Served(VersionRange(0, 5), "to v5: v6 names topics by id"),
    ApiKey.INIT_PRODUCER_ID: Served(VersionRange(0, 5),
        "to v5 (v5 = v4 for a client of transaction version 2): v6 is two-phase commit"
        " (KIP-939)"),
    ApiKey.ADD_PARTITIONS_TO_TXN: Served(VersionRange(0, 3),
        "to v3: v4+ are the broker-to-broker batched form (KIP-890)"),
    ApiKey.ADD_OFFSETS_TO_TXN: Served(VersionRange(0, 4), "all of Kafka's"),
    ApiKey.END_TXN: Served(VersionRange(0, 5),
        "all of Kafka's: v5 is transaction version 2 (the epoch bumped at every end, answered)"),
    ApiKey.TXN_OFFSET_COMMIT: Served(VersionRange(0, 5),
        "all of Kafka's: v5 is transaction version 2 (the group joins the transaction"
        " implicitly)"),
    ApiKey.DESCRIBE_TRANSACTIONS: Served(VersionRange(0, 0), "Kafka's only version (KIP-664)"),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: Served(VersionRange(0, 1),
        "all of Kafka 4.4's: the consumer group protocol (KIP-848); v1 regex subscriptions and"
        " member ids chosen by the member (KIP-1082)"),
    ApiKey.CONSUMER_GROUP_DESCRIBE: Served(VersionRange(0, 1),
        "all of Kafka 4.4's; v1 adds the member type (KIP-1099)"),
    ApiKey.STREAMS_GROUP_HEARTBEAT: Served(VersionRange(0, 1),
        "all of Kafka 4.4's: the Streams rebalance protocol (KIP-1071); v1 answers the"
        " acceptable recovery lag as int64 and TopologyDescriptionRequired (KIP-1331, never asked)"),
    ApiKey.STREAMS_GROUP_DESCRIBE: Served(VersionRange(0, 1),
        "all of Kafka 4.4's; v1's topology description (KIP-1331) is answered null: not stored"),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: Served(VersionRange(0, 0),
        "Kafka's only version (KIP-966; kafka-topics.sh --describe asks it): one broker, so the"
        " eligible leader replicas are always empty"),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Served(VersionRange(2, 4),
        "all of Kafka 4's (KIP-896 removed v0-1): one broker, so every partition's only leader"
        " epoch is 0"),
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: Served(VersionRange(0, 0),
        "Kafka's only version (KIP-714): client metrics subscriptions (broker/telemetry/)"),
    ApiKey.PUSH_TELEMETRY: Served(VersionRange(0, 0),
        "Kafka's only version (KIP-714): the pushed metrics go to the Prometheus endpoint"),
    ApiKey.LIST_TRANSACTIONS: Served(VersionRange(0, 1),
        "to v1 (duration filter): v2's transactional-id pattern (KIP-1152) is not served"),
    # Admin APIs (issue 11), every version of Kafka's range up to its newest (Kafka 4.x),
    # declared per field version in admin_apis.py.
    ApiKey.DELETE_RECORDS: Served(VersionRange(0, 2), "all of Kafka's"),
    ApiKey.DESCRIBE_CONFIGS: Served(VersionRange(0, 4), "all of Kafka's"),
    ApiKey.ALTER_CONFIGS: Served(VersionRange(0, 2), "all of Kafka's"),
    ApiKey.DESCRIBE_LOG_DIRS: Served(VersionRange(0, 4), "all of Kafka's"),
    ApiKey.CREATE_PARTITIONS: Served(VersionRange(0, 3), "all of Kafka's"),
    ApiKey.DELETE_GROUPS: Served(VersionRange(0, 2), "all of Kafka's"),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Served(VersionRange(0, 1), "all of Kafka's"),
    ApiKey.OFFSET_DELETE: Served(VersionRange(0, 0), "all of Kafka's"),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: Served(VersionRange(0, 1),
        "all of Kafka's; no quotas here, so always no entries (kafka-configs asks for them)"),
    ApiKey.DESCRIBE_CLUSTER: Served(VersionRange(0, 2), "all of Kafka's"),
    ApiKey.LIST_CONFIG_RESOURCES: Served(VersionRange(0, 1),
        "all of Kafka 4.4's (KIP-1142; v0 was ListClientMetricsResources): kafka-configs.sh"
        " --describe without --entity-name lists groups (and client metrics) with it"),
    ApiKey.DESCRIBE_PRODUCERS: Served(VersionRange(0, 0), "all of Kafka's"),
    # Inter-broker in Kafka, and advertised as Kafka does (a "broker" listener API): its Admin's
    # abortTransaction (kafka-transactions.sh abort --topic --partition) sends it. The handler
    # accepts only markers a transaction here can have, and ABORTs of hanging transactions.
    ApiKey.WRITE_TXN_MARKERS: Served(VersionRange(0, 1), "Kafka 3's (v2, TV2 markers, not yet)"),
    # Security (docs/security.md): all of Kafka 4's.
    ApiKey.SASL_HANDSHAKE: Served(VersionRange(0, 1), "all of Kafka's (v0: bare SASL tokens)"),
    ApiKey.SASL_AUTHENTICATE: Served(VersionRange(0, 2), "all of Kafka's"),
    ApiKey.DESCRIBE_ACLS: Served(VersionRange(1, 3), "Kafka 4's (v0 removed, KIP-896)"),
    ApiKey.CREATE_ACLS: Served(VersionRange(1, 3), "Kafka 4's (v0 removed, KIP-896)"),
    ApiKey.DELETE_ACLS: Served(VersionRange(1, 3), "Kafka 4's (v0 removed, KIP-896)"),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Served(VersionRange(0, 0), "all of Kafka's"),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Served(VersionRange(0, 0), "all of Kafka's"),
    # Share groups (KIP-932, broker/share/): Kafka 4.4's versions (v0 was 4.0's early access).
    ApiKey.SHARE_GROUP_HEARTBEAT: Served(VersionRange(1, 1), "Kafka 4.4's only version"),
    ApiKey.SHARE_GROUP_DESCRIBE: Served(VersionRange(1, 1), "Kafka 4.4's only version"),
    ApiKey.SHARE_FETCH: Served(VersionRange(1, 2),
        "Kafka 4.4's: v2 adds the acquire mode and Renew (KIP-1206, KIP-1222)"),
    ApiKey.SHARE_ACKNOWLEDGE: Served(VersionRange(1, 2), "Kafka 4.4's: v2 adds Renew"),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: Served(VersionRange(0, 1),
        "Kafka 4.4's: v1 adds the lag"),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: Served(VersionRange(0, 0), "Kafka 4.4's only version"),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: Served(VersionRange(0, 0), "Kafka 4.4's only version"),
}

ADVERTISED: dict[ApiKey, VersionRange] = {key: s.versions for key, s in SERVED.items()}

# KIP-714's APIs are listed in ApiVersions only where pushed metrics have somewhere to go: Kafka
# lists them only with a telemetry receiver plugin configured, minibroker only with its metrics
# endpoint (``metrics.port``). Elsewhere clients do not ask for subscriptions (librdkafka logs a
# line per client when it does).
TELEMETRY_APIS = frozenset({ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY})

IMPLEMENTED: frozenset[tuple[ApiKey, int]] = frozenset(
    (key, version)
    for key, s in SERVED.items()
    for version in range(s.versions.min, s.versions.max + 1)
)

API_VERSIONS_FALLBACK_BODY: bytes = b"".join((
    int(ErrorCode.UNSUPPORTED_VERSION).to_bytes(2, "big", signed=True),
    (1).to_bytes(4, "big"),
    int(ApiKey.API_VERSIONS).to_bytes(2, "big"),
    ADVERTISED[ApiKey.API_VERSIONS].min.to_bytes(2, "big"),
    ADVERTISED[ApiKey.API_VERSIONS].max.to_bytes(2, "big"),
))
