"""Issue 40: GROUP config resources. Validation with Kafka 4.4's messages (measured with
kafka-configs.sh against Kafka 4.4: tests/kafka_ref/test_share_groups.py compares the two), the
described keys, sources and synonyms, and the store's durability."""

from __future__ import annotations

import json

import pytest

from broker.config import build_config
from broker.config.group_configs import GroupConfigStore, describe, reset_strategy, validate
from broker.config.resources import ConfigSource
from protocol.errors import ErrorCode, KafkaError

BROKER = build_config({})


@pytest.mark.parametrize(("overrides", "message"), [
    ({"bogus.key": "1"}, "Unknown group config name: bogus.key"),
    ({"share.record.lock.duration.ms": "100"},
     "Invalid value 100 for configuration share.record.lock.duration.ms: Value must be at least "
     "1000"),
    ({"share.record.lock.duration.ms": "100000"},
     "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."),
    ({"share.record.lock.duration.ms": "abc"},
     "Invalid value abc for configuration share.record.lock.duration.ms: Not a number of type "
     "INT"),
    ({"share.session.timeout.ms": "5000"},
     "share.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
    ({"share.delivery.count.limit": "1"},
     "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2"),
    ({"share.delivery.count.limit": "11"},
     "share.delivery.count.limit must be in the range 2 to 10 inclusive."),
    ({"share.partition.max.record.locks": "50"},
     "Invalid value 50 for configuration share.partition.max.record.locks: Value must be at "
     "least 100"),
    ({"share.partition.max.record.locks": "20000"},
     "share.partition.max.record.locks must be in the range 100 to 4000 inclusive."),
    ({"share.isolation.level": "READ_COMMITTED"},
     "Invalid value READ_COMMITTED for configuration share.isolation.level: String must be one "
     "of: read_committed, read_uncommitted"),
    ({"share.renew.acknowledge.enable": "maybe"},
     "Invalid value maybe for configuration share.renew.acknowledge.enable: Expected value to "
     "be either true or false"),
    ({"streams.assignor.name": "foo"},
     "streams.assignor.name 'foo' is not a registered task assignor. Registered assignors are: "
     "[sticky]."),
    ({"streams.num.standby.replicas": "3"},
     "streams.num.standby.replicas must be less than or equal to 2"),
    ({"streams.task.offset.interval.ms": "2000"},
     "streams.task.offset.interval.ms must be greater than or equal to 15000"),
    ({"streams.num.warmup.replicas": "21"},
     "streams.num.warmup.replicas must be less than or equal to 20"),
    ({"consumer.assignment.interval.ms": "100000000"},
     "consumer.assignment.interval.ms must be in the range 0 to 15000 inclusive."),
    ({"consumer.session.timeout.ms": "44000", "consumer.heartbeat.interval.ms": "6000"},
     "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
    ({"share.auto.offset.reset": "foo"},
     "Invalid value foo for configuration share.auto.offset.reset: Invalid value `foo` for "
     "configuration share.auto.offset.reset. The value must be either 'earliest', 'latest' or "
     "of the format 'by_duration:<PnDTnHnMn.nS>'."),
])
def test_refused_as_kafka_refuses(overrides, message):
    with pytest.raises(KafkaError) as refused:
        validate(overrides, BROKER)
    assert refused.value.code == ErrorCode.INVALID_CONFIG
    assert refused.value.message == message


def test_session_must_exceed_heartbeat_with_the_broker_standing_in():
    validate({"share.session.timeout.ms": "50000", "share.heartbeat.interval.ms": "15000"}, BROKER)
    broker = build_config({"group.share.session.timeout.ms": "10000"})
    with pytest.raises(KafkaError, match="share.session.timeout.ms must be greater than "
                                         "share.heartbeat.interval.ms"):
        validate({"share.heartbeat.interval.ms": "15000"}, broker)


@pytest.mark.parametrize(("text", "parsed"), [
    ("earliest", ("earliest", 0)), ("latest", ("latest", 0)),
    ("by_duration:PT1H", ("by_duration", 3_600_000)),
    ("by_duration:P1DT2M", ("by_duration", 86_520_000)),
    ("by_duration:-PT1H", None), ("by_duration:", None), ("by_duration:P", None), ("now", None),
])
def test_reset_strategies(text, parsed):
    assert reset_strategy(text) == parsed


def test_describe_lists_kafka_s_keys_with_sources_and_synonyms():
    broker = build_config({"group.share.delivery.count.limit": "3"})
    entries = {e.name: e for e in describe(broker, {"share.auto.offset.reset": "earliest"}, None)}
    assert len(entries) == 21  # Kafka 4.4's non-internal group keys
    assert "consumer.assignor.offload.enable" not in entries
    reset = entries["share.auto.offset.reset"]
    assert (reset.value, reset.source) == ("earliest", ConfigSource.DYNAMIC_GROUP_CONFIG)
    assert [(s.name, s.value, s.source) for s in reset.synonyms] == [
        ("share.auto.offset.reset", "earliest", ConfigSource.DYNAMIC_GROUP_CONFIG),
        ("share.auto.offset.reset", "latest", ConfigSource.DEFAULT_CONFIG)]
    limit = entries["share.delivery.count.limit"]
    assert (limit.value, limit.source) == ("3", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value) for s in limit.synonyms] == [
        ("group.share.delivery.count.limit", "3"), ("group.share.delivery.count.limit", "5")]
    internal = {e.name: e for e in describe(BROKER, {"consumer.assignor.offload.enable": "false"},
                                            None)}["consumer.assignor.offload.enable"]
    assert [(s.name, s.value, s.source) for s in internal.synonyms] == [
        ("consumer.assignor.offload.enable", "false", ConfigSource.DYNAMIC_GROUP_CONFIG),
        ("group.consumer.assignor.offload.enable", "true", ConfigSource.DEFAULT_CONFIG)]
    assignor = entries["streams.assignor.name"]
    assert [(s.name, s.value, s.source) for s in assignor.synonyms] == [
        ("group.streams.assignors", "sticky", ConfigSource.DEFAULT_CONFIG)]


def test_store_is_durable_and_refuses_as_a_whole(tmp_path):
    broker = build_config({"log.dirs": str(tmp_path)})
    store = GroupConfigStore(broker)
    heard = []
    store.listeners.append(heard.append)
    store.alter("g", [("share.auto.offset.reset", 0, "earliest"),
                      ("share.record.lock.duration.ms", 0, "20000")])
    with pytest.raises(KafkaError):  # one bad key: nothing changes
        store.alter("g", [("share.isolation.level", 0, "read_committed"),
                          ("share.delivery.count.limit", 0, "99")])
    store.alter("g", [("share.isolation.level", 0, "read_committed")], validate_only=True)
    assert heard == ["g"]
    again = GroupConfigStore(broker)
    assert again.get("g") == {"share.auto.offset.reset": "earliest",
                              "share.record.lock.duration.ms": "20000"}
    assert again.int_value("g", "share.record.lock.duration.ms") == 20000
    assert again.int_value("other", "share.record.lock.duration.ms") == 30000
    again.alter("g", [("share.auto.offset.reset", 1, None),
                      ("share.record.lock.duration.ms", 1, None)])
    assert GroupConfigStore(broker).configs == {}


def test_store_reads_the_old_share_file_and_drops_what_is_invalid(tmp_path):
    (tmp_path / "share_group_configs.json").write_text(json.dumps(
        {"g": {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "99"},
         "h": "junk"}))
    store = GroupConfigStore(build_config({"log.dirs": str(tmp_path)}))
    assert store.configs == {"g": {"share.auto.offset.reset": "earliest"}}
