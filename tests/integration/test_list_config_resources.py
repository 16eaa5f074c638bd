"""ListConfigResources (74, KIP-1142; v0 was ListClientMetricsResources) over a real socket: the
resources of the types asked for, as Kafka's KafkaApis lists them, DescribeConfigs on the
cluster required. (Kafka 4.4's kafka-configs.sh against it: tests/kafka_ref.)"""

from __future__ import annotations

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.broker_process import BrokerProcess
from tests.raw_client import RawConnection
from tests.secured import sasl_plain, secured

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("lcr") / "data") as proc:
        with RawConnection(proc.port) as conn:
            for name in ("beta", "alpha"):
                assert conn.request(ApiKey.CREATE_TOPICS, 2, {
                    "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                "assignments": [], "configs": []}],
                    "timeout_ms": 5000, "validate_only": False}).topics[0].error_code == 0
            for group in ("g-two", "g-one"):
                _set_config(conn, GROUP, group, "consumer.session.timeout.ms", "50000")
            _set_config(conn, CLIENT_METRICS, "sub-1", "interval.ms", "60000")
        yield proc


def _set_config(conn: RawConnection, kind: int, name: str, key: str, value: str) -> None:
    answer = conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {
        "resources": [{"resource_type": kind, "resource_name": name, "configs": [
            {"name": key, "config_operation": 0, "value": value}]}],
        "validate_only": False})
    assert answer.responses[0].error_code == ErrorCode.NONE


def _node(conn: RawConnection) -> str:
    return str(conn.request(ApiKey.METADATA, 1, {"topics": []}).brokers[0].node_id)


def _list(conn: RawConnection, version: int, types: list[int]):
    return conn.request(ApiKey.LIST_CONFIG_RESOURCES, version, {"resource_types": types})


def test_every_type_when_none_is_asked(broker):
    with RawConnection(broker.port) as conn:
        answer = _list(conn, 1, [])
        node = _node(conn)
    assert answer.error_code == ErrorCode.NONE
    listed = [(r.resource_type, r.resource_name) for r in answer.config_resources]
    # Kafka's order: groups, client metrics subscriptions, broker loggers, brokers, topics.
    assert listed == [(GROUP, "g-one"), (GROUP, "g-two"), (CLIENT_METRICS, "sub-1"),
                      (BROKER_LOGGER, node), (BROKER, node), (TOPIC, "alpha"), (TOPIC, "beta")]


def test_the_types_asked_for(broker):
    with RawConnection(broker.port) as conn:
        groups = _list(conn, 1, [GROUP])
        topics_and_brokers = _list(conn, 1, [TOPIC, BROKER])
        metrics = _list(conn, 1, [CLIENT_METRICS])
        unknown = _list(conn, 1, [GROUP, 64])
        v0 = _list(conn, 0, [])
        node = _node(conn)
    assert [r.resource_name for r in groups.config_resources] == ["g-one", "g-two"]
    assert [(r.resource_type, r.resource_name) for r in topics_and_brokers.config_resources] \
        == [(BROKER, node), (TOPIC, "alpha"), (TOPIC, "beta")]
    assert [(r.resource_type, r.resource_name) for r in metrics.config_resources] == \
        [(CLIENT_METRICS, "sub-1")]
    # A type the version does not know fails the request (Kafka: UNSUPPORTED_VERSION).
    assert (unknown.error_code, list(unknown.config_resources)) == \
        (ErrorCode.UNSUPPORTED_VERSION, [])
    # v0 (ListClientMetricsResources) lists client-metrics resources only (no type field: a
    # v0 answer's resources are CLIENT_METRICS, the field's default).
    assert v0.error_code == ErrorCode.NONE
    assert [(r.resource_type, r.resource_name) for r in v0.config_resources] == \
        [(CLIENT_METRICS, "sub-1")]


def test_advertised_in_api_versions(broker):
    with RawConnection(broker.port) as conn:
        keys = {k.api_key: (k.min_version, k.max_version)
                for k in conn.request(ApiKey.API_VERSIONS, 3, {
                    "client_software_name": "t", "client_software_version": "1"}).api_keys}
    assert keys[ApiKey.LIST_CONFIG_RESOURCES] == (0, 1)


def test_describe_configs_on_the_cluster_is_required(tmp_path):
    with BrokerProcess.configured(tmp_path, "\n".join(secured()) + "\n") as proc:
        with RawConnection(proc.port) as conn:
            sasl_plain(conn, "alice")
            refused = _list(conn, 1, [])
        with RawConnection(proc.port) as conn:
            sasl_plain(conn, "admin")
            allowed = _list(conn, 1, [BROKER])
            node = _node(conn)
    assert (refused.error_code, list(refused.config_resources)) == \
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    assert allowed.error_code == ErrorCode.NONE
    assert [r.resource_name for r in allowed.config_resources] == [node]
