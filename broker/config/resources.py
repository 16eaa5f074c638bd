"""DescribeConfigs / AlterConfigs / IncrementalAlterConfigs over the topic-config store and the
broker's (read-only) configuration. Pure apart from the LogManager calls.

Resources are Kafka's: type 2 = TOPIC (name = topic), type 4 = BROKER (name = this node's id, or
"" for the cluster-wide dynamic defaults, of which this broker has none). Sources are Kafka's
``ConfigSource`` values: a topic override is DYNAMIC_TOPIC_CONFIG; a value from
``server.properties`` (or a flag) STATIC_BROKER_CONFIG; everything else DEFAULT_CONFIG. Broker
configs are read-only here (no dynamic broker config): altering one is INVALID_CONFIG.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from broker.config import UNIT_DEFAULTS, UNIT_KEYS, BrokerConfig, property_values
from broker.log.manager import LogManager
from broker.log.topic_config import (
    BROKER_KEYS as TOPIC_BY_BROKER_KEY,
)
from broker.log.topic_config import (
    TOPIC_CONFIGS,
    ConfigType,
    LogConfig,
    check_internal_alter,
    incremental_overrides,
    render,
)
from broker.log.topics import INTERNAL_TOPICS
from protocol.errors import ErrorCode, KafkaError
from protocol.text import clip


class ResourceType(enum.IntEnum):
    TOPIC = 2
    BROKER = 4
    CLIENT_METRICS = 16  # a client metrics subscription: broker/config/client_metrics_configs.py
    GROUP = 32  # a group's configs: broker/config/group_configs.py


class ConfigSource(enum.IntEnum):
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    CLIENT_METRICS_CONFIG = 7
    DYNAMIC_GROUP_CONFIG = 8


@dataclass(frozen=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool
    source: ConfigSource
    synonyms: tuple[Synonym, ...]  # the entry's own source first, as Kafka lists them
    type: ConfigType
    documentation: str | None


_BROKER_TYPES = {bool: ConfigType.BOOLEAN, int: ConfigType.LONG, float: ConfigType.DOUBLE,
                 tuple: ConfigType.LIST}


def _render_optional(value: object) -> str | None:
    return None if value is None else render(value)


def _broker_synonyms(broker: BrokerConfig, key: str, effective: str | None,
                     unit_defaults: bool = True) -> list[Synonym]:
    """Kafka's broker-level synonyms of broker property ``key``, in Kafka's order: for each name
    of its unit family (log.retention.ms, .minutes, .hours; UNIT_KEYS) or the key alone, the
    static value (server.properties or a flag), then the default, where there is one. ``effective``
    is the static value shown for the key itself (a flag gives no raw text). A topic's
    retention.ms / segment.ms list no default of their family (``unit_defaults`` False): Kafka
    4.4 lists none there (measured with kafka-configs.sh, tests/kafka_ref/test_tools.py)."""
    family = next((tuple(name for name, _ in names) for names in UNIT_KEYS.values()
                   if key in {name for name, _ in names}), None)
    if family is None:
        synonyms = []
        if key in broker.static_keys:
            synonyms.append(Synonym(key, effective, ConfigSource.STATIC_BROKER_CONFIG))
        built_in = property_values(BrokerConfig())
        if key in built_in:
            synonyms.append(Synonym(key, _render_optional(built_in[key]),
                                    ConfigSource.DEFAULT_CONFIG))
        return synonyms
    given = dict(broker.unit_values)
    synonyms = []
    for name in family:
        if name in given:
            synonyms.append(Synonym(name, given[name], ConfigSource.STATIC_BROKER_CONFIG))
        elif name in broker.static_keys and name in UNIT_KEYS:  # the ms key itself
            synonyms.append(Synonym(name, render(getattr(broker.log,
                                                         TOPIC_BY_BROKER_KEY[name].field)),
                                    ConfigSource.STATIC_BROKER_CONFIG))
        if name in UNIT_DEFAULTS and unit_defaults:
            synonyms.append(Synonym(name, UNIT_DEFAULTS[name], ConfigSource.DEFAULT_CONFIG))
    return synonyms


def describe_topic(
    logs: LogManager, broker: BrokerConfig, topic: str, keys: Iterable[str] | None,
    overrides: Mapping[str, str] | None = None,
) -> list[ConfigEntry]:
    """Every topic config of ``topic`` (or those of ``keys`` that exist), with its source and
    synonyms. UNKNOWN_TOPIC_OR_PARTITION for an unknown topic; ``overrides`` describes a topic
    that does not exist yet (CreateTopics with validate_only)."""
    if overrides is None:
        overrides = logs.topic_overrides(topic)
    wanted = None if keys is None else set(keys)
    defaults = broker.log
    built_in = LogConfig()
    entries = []
    for key, definition in sorted(TOPIC_CONFIGS.items()):
        if wanted is not None and key not in wanted:
            continue
        synonyms = []
        if key in overrides:
            synonyms.append(Synonym(key, overrides[key], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        synonyms += _broker_synonyms(broker, definition.broker_key,
                                     render(getattr(defaults, definition.field)),
                                     unit_defaults=False)
        default = Synonym(definition.broker_key, render(getattr(built_in, definition.field)),
                          ConfigSource.DEFAULT_CONFIG)
        first = synonyms[0] if synonyms else default
        # The value is the effective one (log.retention.minutes=1 makes retention.ms 60000),
        # its source that of the first synonym, as Kafka reports them.
        value = overrides[key] if key in overrides else render(getattr(defaults,
                                                                      definition.field))
        entries.append(ConfigEntry(key, value, False, first.source, tuple(synonyms),
                                   definition.type, definition.doc))
    return entries


def describe_broker(
    broker: BrokerConfig, name: str, keys: Iterable[str] | None
) -> list[ConfigEntry]:
    """The broker's properties (read-only). ``name`` must be this node's id; "" (the dynamic
    cluster defaults) has none. INVALID_REQUEST for another broker."""
    check_broker_name(broker, name)
    if name == "":
        return []
    wanted = None if keys is None else set(keys)
    entries = []
    for key, value in sorted(property_values(broker).items()):
        if wanted is not None and key not in wanted:
            continue
        synonyms = _broker_synonyms(broker, key, _render_optional(value))
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(
            key, _render_optional(value), True, source, tuple(synonyms),
            _BROKER_TYPES.get(type(value), ConfigType.STRING), None,
        ))
    return entries


def check_broker_name(broker: BrokerConfig, name: str) -> None:
    if name not in ("", str(broker.node_id)):
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {broker.node_id} or empty string, but received {clip(name)}",
        )


def check_resource_type(resource_type: int) -> ResourceType:
    try:
        return ResourceType(resource_type)
    except ValueError:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"unsupported resource type {resource_type}"
        ) from None


def alter_topic(
    logs: LogManager, topic: str, configs: list[tuple[str, str | None]], validate_only: bool
) -> None:
    """AlterConfigs on a topic: ``configs`` become its overrides, everything else returns to the
    default. INVALID_REQUEST for a null value, INVALID_CONFIG for bad keys or values."""
    current = logs.topic_overrides(topic)  # UNKNOWN_TOPIC_OR_PARTITION first
    overrides: dict[str, str] = {}
    for key, value in configs:
        if value is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {key}")
        overrides[key] = value
    if topic in INTERNAL_TOPICS:
        check_internal_alter(topic, current, {k: v.strip() for k, v in overrides.items()})
    logs.alter_topic_config(topic, overrides, validate_only)


def incremental_alter_topic(
    logs: LogManager, topic: str, ops: list[tuple[str, int, str | None]], validate_only: bool
) -> None:
    """IncrementalAlterConfigs on a topic (SET / DELETE / APPEND / SUBTRACT)."""
    current = logs.topic_overrides(topic)
    overrides = incremental_overrides(current, logs.default_config, ops)
    if topic in INTERNAL_TOPICS:
        check_internal_alter(topic, current, overrides)
    logs.alter_topic_config(topic, overrides, validate_only)


def alter_broker(broker: BrokerConfig, name: str, keys: list[str]) -> None:
    """Broker configs cannot change at run time here."""
    check_broker_name(broker, name)
    if keys:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"broker configs are read-only on this broker (set them in server.properties): "
            f"{', '.join(sorted(keys))}",
        )
