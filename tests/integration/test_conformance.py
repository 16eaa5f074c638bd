"""Every advertised (api, version): a valid request sent to the running broker over a socket, and
its answer decoded by an independent implementation.

The referee is kafka-python 3.0.12: its classes generated from Kafka's JSON schemas (Kafka 4's
ranges) and, below Kafka 4's baseline, its hand-written 2.x classes. Each answer must decode with
their class and their encoding of it must be the exact bytes the broker sent (so every field and
tagged-field section was where Kafka's schema puts it); the error codes must be the expected ones.
The request bodies are ours (the unit tests hold our request codecs to the same referee).
"""

from __future__ import annotations

import uuid

import pytest

from protocol.api_keys import ApiKey, response_header_version
from protocol.errors import ErrorCode
from protocol.headers import parse_response_header_untrusted
from protocol.messages import decode_response
from protocol.messages.api_versions import ADVERTISED, TELEMETRY_APIS
from protocol.records import encode_batch
from tests.kafka_python_classes import json_classes, old_classes
from tests.raw_client import RawConnection

TOPIC = "conformance"
GROUP = "conformance-group"
PAIRS = [(key, v) for key, r in sorted(ADVERTISED.items()) for v in range(r.min, r.max + 1)]


JSON = {key: cls for (key, direction), cls in json_classes().items() if direction == "response"}
OLD = {(key, version): cls for (key, version, direction), cls in old_classes().items()
       if direction == "response"}


# Versions kafka-python has no class for (Kafka 4 removed them); their codec is held to golden
# bytes in tests/unit/protocol/messages/test_messages.py instead.
NO_REFEREE = {(ApiKey.WRITE_TXN_MARKERS, 0),
              # KIP-848's APIs: tests/unit/protocol/messages/test_consumer_groups.py
              (ApiKey.CONSUMER_GROUP_HEARTBEAT, 0), (ApiKey.CONSUMER_GROUP_HEARTBEAT, 1),
              (ApiKey.CONSUMER_GROUP_DESCRIBE, 0), (ApiKey.CONSUMER_GROUP_DESCRIBE, 1),
              # KIP-1071's APIs: Kafka 4.4's golden bytes in
              # tests/unit/protocol/messages/test_streams_groups.py
              (ApiKey.STREAMS_GROUP_HEARTBEAT, 0), (ApiKey.STREAMS_GROUP_HEARTBEAT, 1),
              (ApiKey.STREAMS_GROUP_DESCRIBE, 0), (ApiKey.STREAMS_GROUP_DESCRIBE, 1),
              # KIP-714's APIs: Kafka 4.4's golden bytes in
              # tests/unit/protocol/messages/test_telemetry.py
              (ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0), (ApiKey.PUSH_TELEMETRY, 0)}
# kafka-python has no share-group classes (KIP-932): golden bytes in
# tests/unit/protocol/messages/test_share.py, Kafka's own share consumer in
# tests/kafka_ref/test_share_groups.py.
SHARE_APIS = {ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.SHARE_FETCH,
              ApiKey.SHARE_ACKNOWLEDGE, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
              ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS}
NO_REFEREE |= {(k, v) for k in SHARE_APIS for v in range(ADVERTISED[k].min, ADVERTISED[k].max + 1)}


def referee_decode(key: int, version: int, body: bytes):
    """kafka-python's decoding of a response body, checked to re-encode to the same bytes
    (None for the versions in ``NO_REFEREE``)."""
    if (key, version) in NO_REFEREE:
        return None
    cls = JSON.get(key)
    if cls is not None and cls.valid_versions[0] <= version <= cls.valid_versions[1]:
        decoded = cls.decode(body, version=version)
        assert decoded.encode() == body
        return decoded.to_dict(json=False)
    old = OLD[(key, version)]
    decoded = old.decode(body)
    assert decoded.encode() == body
    return decoded.to_object() if hasattr(decoded, "to_object") else decoded


def _records() -> bytes:
    return encode_batch([(b"k", b"conformance", [], 1_700_000_000_000)])


def request_body(key: ApiKey, version: int) -> dict:
    """A valid request of ``key`` (fields by our names; absent ones take their defaults)."""
    topic_parts = [{"name": TOPIC, "partition_indexes": [0]}]
    bodies = {
        ApiKey.PRODUCE: {"acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": _records()}]}]},
        ApiKey.FETCH: {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                       "isolation_level": 1, "topics": [{"topic": TOPIC, "partitions": [
                           {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]},
        ApiKey.LIST_OFFSETS: {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "timestamp": -1}]}]},
        ApiKey.METADATA: {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": True},
        ApiKey.OFFSET_COMMIT: {"group_id": GROUP, "generation_id": -1, "member_id": "",
                               "topics": [{"name": TOPIC, "partitions": [
                                   {"partition_index": 0, "committed_offset": 1,
                                    "committed_metadata": "m"}]}]},
        ApiKey.OFFSET_FETCH: {"group_id": GROUP, "topics": topic_parts,
                              "groups": [{"group_id": GROUP, "topics": topic_parts}]},
        ApiKey.FIND_COORDINATOR: {"key": GROUP, "key_type": 0, "coordinator_keys": [GROUP, "g2"]},
        ApiKey.JOIN_GROUP: {"group_id": f"join-{version}", "session_timeout_ms": 10_000,
                            "rebalance_timeout_ms": 10_000, "member_id": "",
                            "protocol_type": "consumer",
                            "protocols": [{"name": "range", "metadata": b"\x00\x01"}]},
        ApiKey.HEARTBEAT: {"group_id": GROUP, "generation_id": 1, "member_id": "nobody"},
        ApiKey.LEAVE_GROUP: {"group_id": GROUP, "member_id": "nobody",
                             "members": [{"member_id": "nobody"}]},
        ApiKey.SYNC_GROUP: {"group_id": GROUP, "generation_id": 1, "member_id": "nobody",
                            "assignments": []},
        ApiKey.DESCRIBE_GROUPS: {"groups": [GROUP]},
        ApiKey.LIST_GROUPS: {},
        ApiKey.API_VERSIONS: {"client_software_name": "conformance", "client_software_version": "1"},
        ApiKey.CREATE_TOPICS: {"topics": [{"name": f"created-{version}", "num_partitions": 2,
                                           "replication_factor": 1}],
                               "timeout_ms": 5000, "validate_only": True},
        ApiKey.DELETE_TOPICS: {"topic_names": ["no-such-topic"], "timeout_ms": 5000},
        ApiKey.INIT_PRODUCER_ID: {"transactional_id": None, "transaction_timeout_ms": 60_000},
        ApiKey.ADD_PARTITIONS_TO_TXN: {"transactional_id": "unknown-txn", "producer_id": 1,
                                       "producer_epoch": 0,
                                       "topics": [{"name": TOPIC, "partitions": [0]}]},
        ApiKey.ADD_OFFSETS_TO_TXN: {"transactional_id": "unknown-txn", "producer_id": 1,
                                    "producer_epoch": 0, "group_id": GROUP},
        ApiKey.END_TXN: {"transactional_id": "unknown-txn", "producer_id": 1, "producer_epoch": 0,
                         "committed": True},
        ApiKey.TXN_OFFSET_COMMIT: {"transactional_id": "unknown-txn", "group_id": GROUP,
                                   "producer_id": 1, "producer_epoch": 0, "topics": []},
        ApiKey.DESCRIBE_TRANSACTIONS: {"transactional_ids": ["unknown-txn"]},
        ApiKey.LIST_TRANSACTIONS: {"state_filters": [], "producer_id_filters": []},
        ApiKey.DELETE_RECORDS: {"topics": [{"name": TOPIC, "partitions": [
                                    {"partition_index": 0, "offset": 0}]}],
                                "timeout_ms": 5000},
        ApiKey.DESCRIBE_CONFIGS: {"resources": [{"resource_type": 2, "resource_name": TOPIC,
                                                 "configuration_keys": None}]},
        ApiKey.ALTER_CONFIGS: {"resources": [{"resource_type": 2, "resource_name": TOPIC,
                                              "configs": [{"name": "retention.ms",
                                                           "value": "86400000"}]}],
                               "validate_only": True},
        ApiKey.INCREMENTAL_ALTER_CONFIGS: {"resources": [{
                                               "resource_type": 2, "resource_name": TOPIC,
                                               "configs": [{"name": "retention.ms",
                                                            "config_operation": 0,
                                                            "value": "86400000"}]}],
                                           "validate_only": True},
        ApiKey.CREATE_PARTITIONS: {"topics": [{"name": TOPIC, "count": 8, "assignments": None}],
                                   "timeout_ms": 5000, "validate_only": True},
        ApiKey.DESCRIBE_LOG_DIRS: {"topics": None},
        ApiKey.DELETE_GROUPS: {"groups_names": ["no-such-group"]},
        ApiKey.OFFSET_DELETE: {"group_id": "no-such-group", "topics": []},
        ApiKey.DESCRIBE_CLUSTER: {"include_cluster_authorized_operations": False,
                                  "endpoint_type": 1},
        ApiKey.DESCRIBE_CLIENT_QUOTAS: {"components": [{"entity_type": "user", "match_type": 1,
                                                        "match": None}], "strict": False},
        ApiKey.DESCRIBE_PRODUCERS: {"topics": [{"name": TOPIC, "partition_indexes": [0]}]},
        ApiKey.SASL_HANDSHAKE: {"mechanism": "PLAIN"},
        ApiKey.SASL_AUTHENTICATE: {"auth_bytes": b"\0user\0password"},
        ApiKey.DESCRIBE_ACLS: {"resource_type_filter": 1, "resource_name_filter": None,
                               "pattern_type_filter": 1, "principal_filter": None,
                               "host_filter": None, "operation": 1, "permission_type": 1},
        ApiKey.CREATE_ACLS: {"creations": [{
            "resource_type": 2, "resource_name": TOPIC, "resource_pattern_type": 3,
            "principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3}]},
        ApiKey.DELETE_ACLS: {"filters": [{
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1}]},
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: {"users": [{"name": "nobody"}]},
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: {"deletions": [{"name": "nobody", "mechanism": 1}],
                                              "upsertions": []},
        ApiKey.CONSUMER_GROUP_HEARTBEAT: {"group_id": f"cg-{version}",
                                          "member_id": f"member-{version}", "member_epoch": 0,
                                          "rebalance_timeout_ms": 30_000,
                                          "subscribed_topic_names": [TOPIC],
                                          "topic_partitions": []},
        ApiKey.CONSUMER_GROUP_DESCRIBE: {"group_ids": [GROUP, "cg-0"]},
        ApiKey.STREAMS_GROUP_HEARTBEAT: {
            "group_id": f"sg-{version}", "member_id": f"member-{version}", "member_epoch": 0,
            "rebalance_timeout_ms": 30_000, "process_id": "p", "active_tasks": [],
            "standby_tasks": [], "warmup_tasks": [], "topology": {"epoch": 0, "subtopologies": [
                {"subtopology_id": "0", "source_topics": [TOPIC]}]}},
        ApiKey.STREAMS_GROUP_DESCRIBE: {"group_ids": [GROUP, "sg-0"]},
        ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: {"client_instance_id": uuid.UUID(int=0)},
        ApiKey.LIST_CONFIG_RESOURCES: {"resource_types": []},  # every type (v0: client metrics)
        # the zero instance id is refused: INVALID_REQUEST
        ApiKey.PUSH_TELEMETRY: {"client_instance_id": uuid.UUID(int=0), "subscription_id": 0,
                                "terminating": False, "compression_type": 0, "metrics": b""},
        ApiKey.DESCRIBE_TOPIC_PARTITIONS: {"topics": [{"name": TOPIC}],
                                           "response_partition_limit": 2000, "cursor": None},
        ApiKey.OFFSET_FOR_LEADER_EPOCH: {"replica_id": -1, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
        ApiKey.WRITE_TXN_MARKERS: {"markers": [{
            "producer_id": 4242, "producer_epoch": 0, "transaction_result": False,
            "topics": [{"name": TOPIC, "partition_indexes": [0]}], "coordinator_epoch": 0}]},
        ApiKey.SHARE_GROUP_HEARTBEAT: {"group_id": "conf-share", "member_id": f"m{version}",
                                       "member_epoch": 0, "subscribed_topic_names": [TOPIC]},
        ApiKey.SHARE_GROUP_DESCRIBE: {"group_ids": ["conf-share"]},
        ApiKey.SHARE_FETCH: {"group_id": "conf-share", "member_id": f"f{version}",
                             "share_session_epoch": 0, "max_wait_ms": 0, "min_bytes": 1,
                             "max_records": 10, "batch_size": 10, "topics": []},
        ApiKey.SHARE_ACKNOWLEDGE: {"group_id": "conf-share", "member_id": "nobody",
                                   "share_session_epoch": 1, "topics": []},
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: {"groups": [{"group_id": "conf-share", "topics": [
            {"topic_name": TOPIC, "partitions": [0]}]}]},
        ApiKey.ALTER_SHARE_GROUP_OFFSETS: {"group_id": "conf-share-empty", "topics": [
            {"topic_name": TOPIC, "partitions": [{"partition_index": 0, "start_offset": 0}]}]},
        ApiKey.DELETE_SHARE_GROUP_OFFSETS: {"group_id": "conf-share-empty",
                                            "topics": [{"topic_name": TOPIC}]},
    }
    return bodies[key]


# The error codes a valid request may get here (these requests name unknown transactions,
# members and topics on purpose: the answer's layout is what is checked).
ALLOWED_ERRORS = {
    ApiKey.PUSH_TELEMETRY: {ErrorCode.INVALID_REQUEST},
    ApiKey.JOIN_GROUP: {ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED},
    ApiKey.HEARTBEAT: {ErrorCode.UNKNOWN_MEMBER_ID},
    ApiKey.SYNC_GROUP: {ErrorCode.UNKNOWN_MEMBER_ID},
    ApiKey.LEAVE_GROUP: {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.NONE},
    ApiKey.DELETE_TOPICS: {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    ApiKey.ADD_PARTITIONS_TO_TXN: {ErrorCode.INVALID_PRODUCER_ID_MAPPING},
    ApiKey.ADD_OFFSETS_TO_TXN: {ErrorCode.INVALID_PRODUCER_ID_MAPPING},
    ApiKey.END_TXN: {ErrorCode.INVALID_PRODUCER_ID_MAPPING},
    ApiKey.DESCRIBE_TRANSACTIONS: {ErrorCode.TRANSACTIONAL_ID_NOT_FOUND},
    ApiKey.DELETE_GROUPS: {ErrorCode.GROUP_ID_NOT_FOUND},
    ApiKey.OFFSET_DELETE: {ErrorCode.GROUP_ID_NOT_FOUND},
    ApiKey.WRITE_TXN_MARKERS: {ErrorCode.CLUSTER_AUTHORIZATION_FAILED},  # no such transaction
    # A PLAINTEXT listener without an authorizer (docs/security.md).
    ApiKey.SASL_HANDSHAKE: {ErrorCode.ILLEGAL_SASL_STATE},
    ApiKey.SASL_AUTHENTICATE: {ErrorCode.ILLEGAL_SASL_STATE},
    ApiKey.DESCRIBE_ACLS: {ErrorCode.SECURITY_DISABLED},
    ApiKey.CREATE_ACLS: {ErrorCode.SECURITY_DISABLED},
    ApiKey.DELETE_ACLS: {ErrorCode.SECURITY_DISABLED},
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: {ErrorCode.NONE, ErrorCode.RESOURCE_NOT_FOUND},
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: {ErrorCode.RESOURCE_NOT_FOUND},
    ApiKey.CONSUMER_GROUP_HEARTBEAT: {ErrorCode.NONE},
    # the classic group (not a consumer group) and a consumer group, there or not yet
    ApiKey.CONSUMER_GROUP_DESCRIBE: {ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.NONE},
    ApiKey.STREAMS_GROUP_HEARTBEAT: {ErrorCode.NONE},
    # the classic group (not a streams group) and a streams group, there or not yet
    ApiKey.STREAMS_GROUP_DESCRIBE: {ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.NONE},
    ApiKey.SHARE_GROUP_DESCRIBE: {ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND},
    ApiKey.SHARE_ACKNOWLEDGE: {ErrorCode.SHARE_SESSION_NOT_FOUND},
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: {ErrorCode.NONE},
}


def _error_codes(value) -> set[int]:
    found: set[int] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            if k.endswith("error_code") and isinstance(v, int):
                found.add(v)
            else:
                found |= _error_codes(v)
    elif isinstance(value, list | tuple):
        for v in value:
            found |= _error_codes(v)
    return found


@pytest.fixture(scope="module")
def conformance_broker(tmp_path_factory):
    from tests.broker_process import BrokerProcess

    tmp = tmp_path_factory.mktemp("conformance")
    # The JoinGroup cases are answered at once instead of after Kafka's 3 s first-join wait.
    proc = BrokerProcess.configured(tmp, "group.initial.rebalance.delay.ms=0\n")
    proc.start()
    try:
        with RawConnection(proc.port) as conn:
            meta = conn.request(ApiKey.METADATA, 4, {"topics": [{"name": TOPIC}],
                                                    "allow_auto_topic_creation": True})
            assert meta.topics[0].error_code == ErrorCode.NONE
            # A durable record for the Fetch cases, whichever worker and order they run in.
            produced = conn.request(ApiKey.PRODUCE, 3, {
                "transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
                    {"name": TOPIC, "partition_data": [{"index": 0, "records": _records()}]}]})
            assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
            # The group the group cases name, for the same reason: DescribeGroups v6 answers
            # GROUP_ID_NOT_FOUND for a group that does not exist (it failed on a worker that had
            # not run the OffsetCommit case first).
            committed = conn.request(ApiKey.OFFSET_COMMIT, 2, request_body(ApiKey.OFFSET_COMMIT, 2))
            assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE
        yield proc
    finally:
        proc.stop()


def test_every_served_api_is_covered():
    assert {key for key, _ in PAIRS} <= set(ALLOWED_ERRORS) | {
        ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA, ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH, ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS,
        ApiKey.API_VERSIONS, ApiKey.CREATE_TOPICS, ApiKey.INIT_PRODUCER_ID,
        ApiKey.TXN_OFFSET_COMMIT, ApiKey.LIST_TRANSACTIONS, ApiKey.DELETE_RECORDS,
        ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.CREATE_PARTITIONS, ApiKey.DESCRIBE_LOG_DIRS, ApiKey.DESCRIBE_CLUSTER,
        ApiKey.DESCRIBE_PRODUCERS, ApiKey.DESCRIBE_CLIENT_QUOTAS, *SHARE_APIS,
        ApiKey.DESCRIBE_TOPIC_PARTITIONS, ApiKey.OFFSET_FOR_LEADER_EPOCH,
        ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.LIST_CONFIG_RESOURCES,
    }


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{ApiKey(p[0]).name}-v{p[1]}")
def test_served_version_answers_what_kafka_clients_decode(conformance_broker, pair):
    key, version = pair
    with RawConnection(conformance_broker.port) as conn:
        correlation_id = conn.send_request(key, version, request_body(key, version))
        frame = conn.read_frame()
        assert frame is not None, "the broker closed the connection"
        got, offset = parse_response_header_untrusted(frame, key, version)
        assert got == correlation_id
        if response_header_version(key, version) == 1:
            assert frame[4:offset] == b"\x00"  # an empty tagged-field section
        body = bytes(frame[offset:])
        theirs = referee_decode(key, version, body)
        ours = decode_response(key, version, body)
    allowed = ALLOWED_ERRORS.get(key, {ErrorCode.NONE})
    codes = _error_codes(theirs if isinstance(theirs, dict) else ours)
    assert codes <= allowed, (codes, theirs)
    if key != ApiKey.TXN_OFFSET_COMMIT:  # (sent with no partitions: no error code at all)
        assert codes, theirs
    if key == ApiKey.API_VERSIONS:
        listed = {k.api_key: (k.min_version, k.max_version) for k in ours.api_keys}
        # (no metrics endpoint here: the telemetry APIs are not listed, as on Kafka without a
        # telemetry receiver)
        assert listed == {int(k): (r.min, r.max) for k, r in ADVERTISED.items()
                          if k not in TELEMETRY_APIS}
    if key == ApiKey.PRODUCE:
        assert ours.responses[0].partition_responses[0].base_offset >= 0
    if key == ApiKey.FETCH:
        assert len(ours.responses[0].partitions[0].records) > 0  # what Produce wrote
