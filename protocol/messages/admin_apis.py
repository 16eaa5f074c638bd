"""Admin APIs: configs, partitions, records, groups, cluster, log dirs, producers, transactions.

Declared once with each field's version range (``_declare.py``), following Kafka's
``*Request.json`` / ``*Response.json`` for the same API key; the comments say what each version
added. Field names are Kafka's in snake_case.
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

# -- DescribeConfigs (32): v1 adds include_synonyms, config_source, synonyms; v3 adds
# include_documentation, config_type, documentation; v4 is flexible. v0 has is_default.
DESCRIBE_CONFIGS = declare(
    ApiKey.DESCRIBE_CONFIGS, valid="0-4", flexible="4+",
    request=[
        F("resources", "[]", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configuration_keys", "[]string", nullable="0+"),
        ]),
        F("include_synonyms", "bool", "1+"),
        F("include_documentation", "bool", "3+"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]", fields=[
                F("name", "string"),
                F("value", "string", nullable="0+"),
                F("read_only", "bool"),
                F("is_default", "bool", "0"),
                F("config_source", "int8", "1+"),
                F("is_sensitive", "bool"),
                F("synonyms", "[]", "1+", fields=[
                    F("name", "string"),
                    F("value", "string", nullable="0+"),
                    F("source", "int8"),
                ]),
                F("config_type", "int8", "3+"),
                F("documentation", "string", "3+", nullable="0+"),
            ]),
        ]),
    ],
)

_ALTER_RESPONSE = [
    F("throttle_time_ms", "int32"),
    F("responses", "[]", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("resource_type", "int8"),
        F("resource_name", "string"),
    ]),
]

# -- AlterConfigs (33): v1 = v0; v2 is flexible.
ALTER_CONFIGS = declare(
    ApiKey.ALTER_CONFIGS, valid="0-2", flexible="2+",
    request=[
        F("resources", "[]", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]", fields=[F("name", "string"), F("value", "string", nullable="0+")]),
        ]),
        F("validate_only", "bool"),
    ],
    response=_ALTER_RESPONSE,
)

# -- IncrementalAlterConfigs (44): v1 is flexible. config_operation: 0 SET, 1 DELETE, 2 APPEND,
# 3 SUBTRACT.
INCREMENTAL_ALTER_CONFIGS = declare(
    ApiKey.INCREMENTAL_ALTER_CONFIGS, valid="0-1", flexible="1+",
    request=[
        F("resources", "[]", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]", fields=[
                F("name", "string"),
                F("config_operation", "int8"),
                F("value", "string", nullable="0+"),
            ]),
        ]),
        F("validate_only", "bool"),
    ],
    response=_ALTER_RESPONSE,
)

# -- CreatePartitions (37): v1 = v0; v2 is flexible; v3 = v2 (may answer THROTTLING_QUOTA_EXCEEDED).
CREATE_PARTITIONS = declare(
    ApiKey.CREATE_PARTITIONS, valid="0-3", flexible="2+",
    request=[
        F("topics", "[]", fields=[
            F("name", "string"),
            F("count", "int32"),
            F("assignments", "[]", nullable="0+", fields=[F("broker_ids", "[]int32")]),
        ]),
        F("timeout_ms", "int32"),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]", fields=[
            F("name", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ],
)

# -- DeleteRecords (21): v1 = v0; v2 is flexible.
DELETE_RECORDS = declare(
    ApiKey.DELETE_RECORDS, valid="0-2", flexible="2+",
    request=[
        F("topics", "[]", fields=[
            F("name", "string"),
            F("partitions", "[]", fields=[F("partition_index", "int32"), F("offset", "int64")]),
        ]),
        F("timeout_ms", "int32"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]", fields=[
            F("name", "string"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"),
                F("low_watermark", "int64"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)

# -- DeleteGroups (42): v1 = v0; v2 is flexible.
DELETE_GROUPS = declare(
    ApiKey.DELETE_GROUPS, valid="0-2", flexible="2+",
    request=[F("groups_names", "[]string")],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]", fields=[F("group_id", "string"), F("error_code", "int16")]),
    ],
)

# -- OffsetDelete (47): v0 only, never flexible.
OFFSET_DELETE = declare(
    ApiKey.OFFSET_DELETE, valid="0", flexible="none",
    request=[
        F("group_id", "string"),
        F("topics", "[]", fields=[
            F("name", "string"),
            F("partitions", "[]", fields=[F("partition_index", "int32")]),
        ]),
    ],
    response=[
        F("error_code", "int16"),
        F("throttle_time_ms", "int32"),
        F("topics", "[]", fields=[
            F("name", "string"),
            F("partitions", "[]", fields=[F("partition_index", "int32"), F("error_code", "int16")]),
        ]),
    ],
)

# -- DescribeCluster (60): flexible from v0; v1 adds endpoint_type (KIP-919); v2 adds
# include_fenced_brokers and is_fenced (Kafka 4.0).
# -- DescribeClientQuotas (48): v1 is flexible. minibroker has no quotas: it answers every filter
# with no entries (kafka-configs --describe --entity-type users asks it before the SCRAM users).
DESCRIBE_CLIENT_QUOTAS = declare(
    ApiKey.DESCRIBE_CLIENT_QUOTAS, valid="0-1", flexible="1+",
    request=[
        F("components", "[]", fields=[
            F("entity_type", "string"),
            F("match_type", "int8"),
            F("match", "string", nullable="0+"),
        ]),
        F("strict", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("entries", "[]", nullable="0+", fields=[
            F("entity", "[]", fields=[
                F("entity_type", "string"), F("entity_name", "string", nullable="0+"),
            ]),
            F("values", "[]", fields=[F("key", "string"), F("value", "float64")]),
        ]),
    ],
)

# -- ListConfigResources (74): flexible from v0. v0 was ListClientMetricsResources (KIP-714: the
# CLIENT_METRICS resources only, no type in the request or the answer); v1 (KIP-1142, Kafka 4.1)
# adds the resource types asked for (empty: every type) and each resource's type (default 16,
# CLIENT_METRICS, which is what a v0 answer means).
LIST_CONFIG_RESOURCES = declare(
    ApiKey.LIST_CONFIG_RESOURCES, valid="0-1", flexible="0+",
    request=[
        F("resource_types", "[]int8", "1+"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("config_resources", "[]", fields=[
            F("resource_name", "string"),
            F("resource_type", "int8", "1+", default=16),
        ]),
    ],
)

DESCRIBE_CLUSTER = declare(
    ApiKey.DESCRIBE_CLUSTER, valid="0-2", flexible="0+",
    request=[
        F("include_cluster_authorized_operations", "bool"),
        F("endpoint_type", "int8", "1+"),
        F("include_fenced_brokers", "bool", "2+"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("endpoint_type", "int8", "1+"),
        F("cluster_id", "string"),
        F("controller_id", "int32"),
        F("brokers", "[]", fields=[
            F("broker_id", "int32"),
            F("host", "string"),
            F("port", "int32"),
            F("rack", "string", nullable="0+"),
            F("is_fenced", "bool", "2+"),
        ]),
        F("cluster_authorized_operations", "int32"),
    ],
)

# -- DescribeLogDirs (35): v1 = v0; v2 is flexible; v3 adds the top-level error_code; v4 adds
# total_bytes and usable_bytes.
DESCRIBE_LOG_DIRS = declare(
    ApiKey.DESCRIBE_LOG_DIRS, valid="0-4", flexible="2+",
    request=[
        F("topics", "[]", nullable="0+", fields=[
            F("topic", "string"),
            F("partitions", "[]int32"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "3+"),
        F("results", "[]", fields=[
            F("error_code", "int16"),
            F("log_dir", "string"),
            F("topics", "[]", fields=[
                F("name", "string"),
                F("partitions", "[]", fields=[
                    F("partition_index", "int32"),
                    F("partition_size", "int64"),
                    F("offset_lag", "int64"),
                    F("is_future_key", "bool"),
                ]),
            ]),
            F("total_bytes", "int64", "4+"),
            F("usable_bytes", "int64", "4+"),
        ]),
    ],
)

# -- DescribeProducers (61): v0, flexible (KIP-664).
DESCRIBE_PRODUCERS = declare(
    ApiKey.DESCRIBE_PRODUCERS, valid="0", flexible="0+",
    request=[F("topics", "[]", fields=[F("name", "string"), F("partition_indexes", "[]int32")])],
    response=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]", fields=[
            F("name", "string"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
                F("active_producers", "[]", fields=[
                    F("producer_id", "int64"),
                    F("producer_epoch", "int32"),
                    F("last_sequence", "int32"),
                    F("last_timestamp", "int64"),
                    F("coordinator_epoch", "int32"),
                    F("current_txn_start_offset", "int64"),
                ]),
            ]),
        ]),
    ],
)

# -- ListGroups (16): v1 adds throttle_time_ms; v2 = v1; v3 is flexible; v4 adds states_filter and
# group_state (KIP-518); v5 adds types_filter and group_type (KIP-848).
LIST_GROUPS = declare(
    ApiKey.LIST_GROUPS, valid="0-5", flexible="3+",
    request=[F("states_filter", "[]string", "4+"), F("types_filter", "[]string", "5+")],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F("groups", "[]", fields=[
            F("group_id", "string"),
            F("protocol_type", "string"),
            F("group_state", "string", "4+"),
            F("group_type", "string", "5+"),
        ]),
    ],
)

# -- ListTransactions (66): flexible from v0; v1 adds duration_filter (KIP-994: only
# transactions running longer than that many ms).
LIST_TRANSACTIONS = declare(
    ApiKey.LIST_TRANSACTIONS, valid="0-1", flexible="0+",
    request=[
        F("state_filters", "[]string"),
        F("producer_id_filters", "[]int64"),
        F("duration_filter", "int64", "1+"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("unknown_state_filters", "[]string"),
        F("transaction_states", "[]", fields=[
            F("transactional_id", "string"),
            F("producer_id", "int64"),
            F("transaction_state", "string"),
        ]),
    ],
)
