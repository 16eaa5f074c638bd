"""CLIENT_METRICS config resources (broker/config/client_metrics_configs.py): Kafka's keys and
errors, IncrementalAlterConfigs' operations, and the store durable across a reopen."""

from __future__ import annotations

import pytest

from broker.config.client_metrics_configs import (
    CLIENT_METRICS_CONFIGS_FILE,
    ClientMetricsConfigStore,
    apply_ops,
)
from broker.config.resources import ConfigSource
from protocol.errors import ErrorCode, KafkaError

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def test_subscriptions_survive_a_reopen(tmp_path) -> None:
    store = ClientMetricsConfigStore(tmp_path)
    heard: list[int] = []
    store.listeners.append(lambda: heard.append(1))
    store.alter("producers", [("metrics", SET, "org.apache.kafka.producer."),
                              ("interval.ms", SET, "1000"),
                              ("match", SET, "client_software_name=apache-kafka-java")])
    store.alter("all", [("metrics", SET, "*")])
    assert heard == [1, 1]
    again = ClientMetricsConfigStore(tmp_path)
    assert again.names() == ["all", "producers"]
    sub = again.subscriptions["producers"]
    assert sub.interval_ms == 1000 and sub.metrics == ("org.apache.kafka.producer.",)
    assert sub.matches({"client_software_name": "apache-kafka-java"})
    entries = {e.name: e for e in again.describe("producers", None)}
    assert entries["interval.ms"].value == "1000"
    assert entries["interval.ms"].source is ConfigSource.CLIENT_METRICS_CONFIG
    assert {e.name: (e.value, e.source) for e in again.describe("all", ["interval.ms"])} == {
        "interval.ms": ("300000", ConfigSource.DEFAULT_CONFIG)}


def test_deleting_every_key_deletes_the_subscription(tmp_path) -> None:
    store = ClientMetricsConfigStore(tmp_path)
    store.alter("s", [("metrics", SET, "a.")])
    store.alter("s", [("metrics", DELETE, None)])
    assert store.names() == [] and "s" not in store.subscriptions
    assert ClientMetricsConfigStore(tmp_path).names() == []


def test_a_refused_change_changes_nothing(tmp_path) -> None:
    store = ClientMetricsConfigStore(tmp_path)
    store.alter("s", [("metrics", SET, "a.")])
    with pytest.raises(KafkaError) as caught:
        store.alter("s", [("metrics", SET, "b."), ("interval.ms", SET, "5")])
    assert caught.value.code == ErrorCode.INVALID_REQUEST
    store.alter("s", [("metrics", SET, "c.")], validate_only=True)
    assert store.configs == {"s": {"metrics": "a."}}
    with pytest.raises(KafkaError):
        store.alter("", [("metrics", SET, "a.")])


def test_alter_configs_replaces_the_whole_set(tmp_path) -> None:
    store = ClientMetricsConfigStore(tmp_path)
    store.alter("s", [("metrics", SET, "a."), ("interval.ms", SET, "1000")])
    store.alter("s", [("metrics", SET, "b.")], replace=True)
    assert store.configs == {"s": {"metrics": "b."}}


def test_append_and_subtract_on_lists_only() -> None:
    current = {"metrics": "a.,b."}
    assert apply_ops(current, [("metrics", APPEND, "c.,a.")]) == {"metrics": "a.,b.,c."}
    assert apply_ops(current, [("metrics", SUBTRACT, "a.")]) == {"metrics": "b."}
    with pytest.raises(KafkaError) as caught:
        apply_ops(current, [("interval.ms", APPEND, "1")])
    assert caught.value.code == ErrorCode.INVALID_CONFIG


def test_an_unreadable_file_means_no_subscriptions(tmp_path) -> None:
    (tmp_path / CLIENT_METRICS_CONFIGS_FILE).write_text(
        '{"ok": {"metrics": "a."}, "bad": {"interval.ms": "1"}, "junk": 3}')
    assert ClientMetricsConfigStore(tmp_path).names() == ["ok"]
    (tmp_path / CLIENT_METRICS_CONFIGS_FILE).write_text("{not json")
    assert ClientMetricsConfigStore(tmp_path).names() == []
