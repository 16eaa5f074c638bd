"""Produce (api key 0): append record batches to partitions.

v1 throttle_time_ms; v2 log_append_time_ms; v3 transactional_id and RecordBatch v2 (the first we
serve); v4 (KAFKA_STORAGE_ERROR); v5 log_start_offset; v6-7 (no change); v8 record_errors and
error_message; v9 flexible; v10 current_leader / node_endpoints tagged fields (KIP-951); v11
(no change, KIP-1005); v12 (no change) is transaction version 2 (KIP-890 part 2): the partition
joins the producer's transaction with its first batch. ``records`` holds RecordBatch
v2 bytes (``protocol.records``). acks=0 requests get no response.

The broker decodes the request and encodes the response with the codecs generated from this
declaration (``_codegen``): each partition's records are a writable ``memoryview`` into the
request frame, so the log can patch baseOffset in place and write the view without a copy.
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

PRODUCE = declare(
    ApiKey.PRODUCE, valid="0-12", flexible="9+",
    request=[
        F("transactional_id", "string", "3+", nullable="3+", default=None),
        F("acks", "int16"),
        F("timeout_ms", "int32"),
        F("topic_data", "[]", fields=[
            F("name", "string"),
            F("partition_data", "[]", fields=[F("index", "int32"), F("records", "records")]),
        ]),
    ],
    response=[
        F("responses", "[]", fields=[
            F("name", "string"),
            F("partition_responses", "[]", fields=[
                F("index", "int32"),
                F("error_code", "int16"),
                F("base_offset", "int64"),
                F("log_append_time_ms", "int64", "2+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("record_errors", "[]", "8+", fields=[
                    F("batch_index", "int32"),
                    F("batch_index_error_message", "string", nullable="0+", default=None),
                ]),
                F("error_message", "string", "8+", nullable="8+", default=None),
                F("current_leader", "struct", "10+", tag=0, fields=[
                    F("leader_id", "int32", default=-1), F("leader_epoch", "int32", default=-1),
                ]),
            ]),
        ]),
        F("throttle_time_ms", "int32", "1+"),
        F("node_endpoints", "[]", "10+", tag=0, fields=[
            F("node_id", "int32"),
            F("host", "string"),
            F("port", "int32"),
            F("rack", "string", nullable="0+", default=None),
        ]),
    ],
)
