"""Fetch (api key 1): read record batches, with isolation_level and aborted transactions.

v1 throttle_time_ms; v2 (message format 1); v3 max_bytes; v4 isolation_level, last_stable_offset
and aborted_transactions, RecordBatch v2 (the first we serve); v5 log_start_offset; v6 (no
change); v7 fetch sessions (KIP-227: session_id / session_epoch, forgotten_topics_data, a top-level
error_code); v8 (no change); v9 current_leader_epoch; v10 (zstd); v11 rack_id and
preferred_read_replica (KIP-392); v12 flexible, last_fetched_epoch, tagged fields; v13+ topic ids.

Kafka's schema makes ``records`` nullable, but librdkafka fails to parse a null (-1) records field
(docs/protocol.md section 5): the broker always sends a 0-length field instead. aborted_transactions is
null under read_uncommitted.

The codecs are generated from this declaration (``_codegen.RECORDS_APIS``): the broker encodes a
response with ``encode_response_parts``, which leaves every records value (maybe megabytes of a
segment, or a file slice sent with sendfile) as a chunk of its own for one gather-write; the
client's ``decode_response`` hands out each records field as a view into the response frame
instead of copying it.
"""

from __future__ import annotations

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

FETCH = declare(
    ApiKey.FETCH, valid="0-12", flexible="12+",
    request=[
        F("cluster_id", "string", "12+", nullable="12+", tag=0, default=None),
        F("replica_id", "int32", default=-1),
        F("max_wait_ms", "int32"),
        F("min_bytes", "int32"),
        F("max_bytes", "int32", "3+", default=0x7FFFFFFF),
        F("isolation_level", "int8", "4+"),
        F("session_id", "int32", "7+"),
        F("session_epoch", "int32", "7+", default=-1),
        F("topics", "[]", fields=[
            F("topic", "string"),
            F("partitions", "[]", fields=[
                F("partition", "int32"),
                F("current_leader_epoch", "int32", "9+", default=-1),
                F("fetch_offset", "int64"),
                F("last_fetched_epoch", "int32", "12+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("partition_max_bytes", "int32"),
            ]),
        ]),
        F("forgotten_topics_data", "[]", "7+", fields=[
            F("topic", "string"), F("partitions", "[]int32"),
        ]),
        F("rack_id", "string", "11+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "7+"),
        F("session_id", "int32", "7+"),
        F("responses", "[]", fields=[
            F("topic", "string"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("high_watermark", "int64"),
                F("last_stable_offset", "int64", "4+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("diverging_epoch", "struct", "12+", tag=0, fields=[
                    F("epoch", "int32", default=-1), F("end_offset", "int64", default=-1),
                ]),
                F("current_leader", "struct", "12+", tag=1, fields=[
                    F("leader_id", "int32", default=-1), F("leader_epoch", "int32", default=-1),
                ]),
                F("snapshot_id", "struct", "12+", tag=2, fields=[
                    F("end_offset", "int64", default=-1), F("epoch", "int32", default=-1),
                ]),
                F("aborted_transactions", "[]", "4+", nullable="4+", fields=[
                    F("producer_id", "int64"), F("first_offset", "int64"),
                ]),
                F("preferred_read_replica", "int32", "11+", default=-1),
                F("records", "records"),
            ]),
        ]),
    ],
)
