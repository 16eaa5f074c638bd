"""Issue 39 item 2: Kafka's keys that set one value in several units (log.retention.ms /
.minutes / .hours, log.roll.ms / .hours): which one wins, and what DescribeConfigs reports."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig, build_config
from broker.config.resources import ConfigSource, describe_broker


@pytest.mark.parametrize(("properties", "retention_ms", "segment_ms"), [
    ({}, 604_800_000, 604_800_000),
    ({"log.retention.hours": "1"}, 3_600_000, 604_800_000),
    ({"log.retention.hours": "1", "log.retention.minutes": "2"}, 120_000, 604_800_000),
    ({"log.retention.minutes": "2", "log.retention.hours": "1"}, 120_000, 604_800_000),
    ({"log.retention.ms": "5", "log.retention.minutes": "2"}, 5, 604_800_000),
    ({"log.retention.hours": "-1"}, -1, 604_800_000),
    ({"log.roll.hours": "2"}, 604_800_000, 7_200_000),
    ({"log.roll.hours": "2", "log.roll.ms": "1000"}, 604_800_000, 1000),
])
def test_the_finest_unit_given_wins(properties, retention_ms, segment_ms):
    config = build_config(properties)
    assert (config.log.retention_ms, config.log.segment_ms) == (retention_ms, segment_ms)


def test_broker_describe_lists_the_unit_family_as_synonyms():
    config = build_config({"log.retention.hours": "1", "log.retention.minutes": "2"})
    entries = {e.name: e for e in describe_broker(config, "0", None)}
    ms = entries["log.retention.ms"]
    assert (ms.value, ms.source) == ("120000", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in ms.synonyms] == [
        ("log.retention.minutes", "2", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    assert entries["log.retention.hours"].value == "1"
    default = {e.name: e for e in describe_broker(BrokerConfig(), "0", None)}
    assert default["log.retention.minutes"].value is None
    assert default["log.roll.ms"].source == ConfigSource.DEFAULT_CONFIG
    assert [(s.name, s.value) for s in default["log.roll.ms"].synonyms] == [
        ("log.roll.hours", "168")]
