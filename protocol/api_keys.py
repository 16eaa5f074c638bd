"""API keys, and which versions of them are flexible (that decides the header versions).

The versions we advertise and the one version of each we implement (the pin) are the tables
``ADVERTISED`` and ``IMPLEMENTED`` in ``protocol.messages.api_versions`` (docs/protocol.md section 2).
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23  # KIP-320
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68  # KIP-848
    CONSUMER_GROUP_DESCRIBE = 69
    GET_TELEMETRY_SUBSCRIPTIONS = 71  # KIP-714: protocol/messages/telemetry.py
    PUSH_TELEMETRY = 72
    LIST_CONFIG_RESOURCES = 74  # KIP-1142 (v0 was ListClientMetricsResources, KIP-714)
    DESCRIBE_TOPIC_PARTITIONS = 75  # KIP-966
    # Share groups (KIP-932): protocol/messages/share.py
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    STREAMS_GROUP_HEARTBEAT = 88  # KIP-1071: protocol/messages/streams_groups.py
    STREAMS_GROUP_DESCRIBE = 89
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


class VersionRange(NamedTuple):
    min: int
    max: int


# First flexible version of each API (Kafka's "flexibleVersions"). Decides header versions: a
# flexible request uses request header v2 and response header v1 (ApiVersions: always v0).
FIRST_FLEXIBLE_VERSION: dict[ApiKey, int] = {
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 9,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 6,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 6,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 4,
    ApiKey.SYNC_GROUP: 4,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 3,
    ApiKey.API_VERSIONS: 3,
    ApiKey.CREATE_TOPICS: 5,
    ApiKey.DELETE_TOPICS: 4,
    ApiKey.INIT_PRODUCER_ID: 2,
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.ADD_OFFSETS_TO_TXN: 3,
    ApiKey.END_TXN: 3,
    ApiKey.WRITE_TXN_MARKERS: 1,
    ApiKey.TXN_OFFSET_COMMIT: 3,
    ApiKey.DELETE_RECORDS: 2,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.DESCRIBE_LOG_DIRS: 2,
    ApiKey.CREATE_PARTITIONS: 2,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    # OffsetDelete (47) is never flexible.
    ApiKey.DESCRIBE_CLIENT_QUOTAS: 1,
    ApiKey.DESCRIBE_CLUSTER: 0,
    ApiKey.DESCRIBE_PRODUCERS: 0,
    ApiKey.SASL_AUTHENTICATE: 2,
    ApiKey.DESCRIBE_ACLS: 2,
    ApiKey.CREATE_ACLS: 2,
    ApiKey.DELETE_ACLS: 2,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.DESCRIBE_TRANSACTIONS: 0,  # flexible from v0 (an admin API added after KIP-482)
    ApiKey.LIST_TRANSACTIONS: 0,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: 0,
    ApiKey.CONSUMER_GROUP_DESCRIBE: 0,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: 0,
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: 0,  # KIP-714: flexible from v0
    ApiKey.PUSH_TELEMETRY: 0,
    ApiKey.LIST_CONFIG_RESOURCES: 0,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 4,
    ApiKey.SHARE_GROUP_HEARTBEAT: 0,  # the share-group APIs are flexible from v0
    ApiKey.SHARE_GROUP_DESCRIBE: 0,
    ApiKey.SHARE_FETCH: 0,
    ApiKey.SHARE_ACKNOWLEDGE: 0,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: 0,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: 0,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: 0,
    ApiKey.STREAMS_GROUP_HEARTBEAT: 0,  # KIP-1071: flexible from v0
    ApiKey.STREAMS_GROUP_DESCRIBE: 0,
}


# The same table keyed by plain ints: every request's header asks it, and a plain int looks up
# an int key faster than an IntEnum member (which it finds too, through the enum's __eq__).
_FIRST_FLEXIBLE: dict[int, int] = {int(k): v for k, v in FIRST_FLEXIBLE_VERSION.items()}
_API_VERSIONS = int(ApiKey.API_VERSIONS)


def is_flexible(api_key: int, api_version: int) -> bool:
    first = _FIRST_FLEXIBLE.get(api_key)
    return first is not None and api_version >= first


def request_header_version(api_key: int, api_version: int) -> int:
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == _API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0
