"""ApiVersions v0 (api key 18): which versions of which APIs this broker speaks.

Request:  (empty)
Response: error_code INT16, api_keys [api_key INT16, min_version INT16, max_version INT16]

Also the tables the handshake needs (PROTOCOL.md sections 2 and 3):

- ``ADVERTISED``: what the v0 response lists, ``[0, pin]`` per API. Clients send the highest
  version both sides list, so only the pin arrives; the low minimum keeps librdkafka <= 2.11 from
  switching features off. WriteTxnMarkers is broker-internal and not advertised.
- ``IMPLEMENTED``: the (api_key, version) pairs that have a schema, i.e. the pins, plus
  InitProducerId v0 beside v3 and the unadvertised WriteTxnMarkers v0. DescribeTransactions and
  ListTransactions (admin, flexible from v0) are advertised at exactly v0.
- ``API_VERSIONS_FALLBACK_BODY``: the answer to ApiVersions v1+ (librdkafka opens with v3,
  kafka-python with v4, both flexible): a v0 body ``error_code=35 (UNSUPPORTED_VERSION),
  [{18, 0, 0}]`` that the client parses with the v0 schema before retrying with v0. It goes out
  with response header v0, like every ApiVersions response.
"""

from __future__ import annotations

from construct import Struct

from protocol.api_keys import ApiKey, VersionRange
from protocol.errors import ErrorCode
from protocol.messages._registry import register
from protocol.primitives import Array, Int16

ApiVersionsRequestV0 = Struct()

ApiVersionsResponseV0 = Struct(
    "error_code" / Int16,
    "api_keys" / Array(
        Struct("api_key" / Int16, "min_version" / Int16, "max_version" / Int16)
    ),
)

API_VERSIONS_V0 = register(ApiKey.API_VERSIONS, 0, ApiVersionsRequestV0, ApiVersionsResponseV0)

ADVERTISED: dict[ApiKey, VersionRange] = {
    ApiKey.PRODUCE: VersionRange(0, 3),
    ApiKey.FETCH: VersionRange(0, 4),
    ApiKey.LIST_OFFSETS: VersionRange(0, 2),
    ApiKey.METADATA: VersionRange(0, 4),
    ApiKey.OFFSET_COMMIT: VersionRange(0, 2),
    ApiKey.OFFSET_FETCH: VersionRange(0, 2),
    ApiKey.FIND_COORDINATOR: VersionRange(0, 1),
    ApiKey.JOIN_GROUP: VersionRange(0, 2),
    ApiKey.HEARTBEAT: VersionRange(0, 0),
    ApiKey.LEAVE_GROUP: VersionRange(0, 0),
    ApiKey.SYNC_GROUP: VersionRange(0, 0),
    ApiKey.DESCRIBE_GROUPS: VersionRange(0, 0),
    ApiKey.LIST_GROUPS: VersionRange(0, 5),
    ApiKey.API_VERSIONS: VersionRange(0, 0),
    ApiKey.CREATE_TOPICS: VersionRange(0, 2),
    ApiKey.DELETE_TOPICS: VersionRange(0, 1),
    ApiKey.INIT_PRODUCER_ID: VersionRange(0, 3),
    # Exactly 0-0: librdkafka speaks only v0 of these, and a higher max makes kafka-python send
    # a version we do not implement.
    ApiKey.ADD_PARTITIONS_TO_TXN: VersionRange(0, 0),
    ApiKey.ADD_OFFSETS_TO_TXN: VersionRange(0, 0),
    ApiKey.END_TXN: VersionRange(0, 0),
    ApiKey.TXN_OFFSET_COMMIT: VersionRange(0, 0),
    # Admin (KIP-664), flexible from v0: the `minibroker transactions` CLI uses them.
    ApiKey.DESCRIBE_TRANSACTIONS: VersionRange(0, 0),
    # v1 = the duration filter (KIP-994); stops there: v2's transactional-id pattern (KIP-1152,
    # Kafka 4.1) is not implemented.
    ApiKey.LIST_TRANSACTIONS: VersionRange(0, 1),
    # Admin APIs (issue 11), every version of Kafka's range up to its newest (Kafka 4.x), all
    # implemented: they are declared per field version (admin_apis.py). v0 of DescribeConfigs and
    # DescribeLogDirs (below Kafka 4's KIP-896 floor) is served too: it costs nothing.
    ApiKey.DELETE_RECORDS: VersionRange(0, 2),
    ApiKey.DESCRIBE_CONFIGS: VersionRange(0, 4),
    ApiKey.ALTER_CONFIGS: VersionRange(0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: VersionRange(0, 4),
    ApiKey.CREATE_PARTITIONS: VersionRange(0, 3),
    ApiKey.DELETE_GROUPS: VersionRange(0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: VersionRange(0, 1),
    ApiKey.OFFSET_DELETE: VersionRange(0, 0),
    ApiKey.DESCRIBE_CLUSTER: VersionRange(0, 2),
    ApiKey.DESCRIBE_PRODUCERS: VersionRange(0, 0),
}

# APIs whose every advertised version is implemented (the others: the pin only, see above).
EVERY_VERSION: frozenset[ApiKey] = frozenset({
    ApiKey.LIST_GROUPS, ApiKey.LIST_TRANSACTIONS, ApiKey.DELETE_RECORDS, ApiKey.DESCRIBE_CONFIGS,
    ApiKey.ALTER_CONFIGS, ApiKey.DESCRIBE_LOG_DIRS, ApiKey.CREATE_PARTITIONS,
    ApiKey.DELETE_GROUPS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.OFFSET_DELETE,
    ApiKey.DESCRIBE_CLUSTER, ApiKey.DESCRIBE_PRODUCERS,
})

IMPLEMENTED: frozenset[tuple[ApiKey, int]] = frozenset(
    {(key, r.max) for key, r in ADVERTISED.items()}
    | {(key, v) for key in EVERY_VERSION for v in range(ADVERTISED[key].min, ADVERTISED[key].max + 1)}
    | {(ApiKey.INIT_PRODUCER_ID, 0), (ApiKey.WRITE_TXN_MARKERS, 0)}
)

API_VERSIONS_FALLBACK_BODY: bytes = ApiVersionsResponseV0.build(
    {
        "error_code": ErrorCode.UNSUPPORTED_VERSION,
        "api_keys": [{"api_key": ApiKey.API_VERSIONS, "min_version": 0, "max_version": 0}],
    }
)
