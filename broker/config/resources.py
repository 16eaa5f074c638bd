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

from broker.config import BrokerConfig, property_values
from broker.log.manager import LogManager
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


class ConfigSource(enum.IntEnum):
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


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


# Broker properties with no default value in Kafka: their default comes from another property
# (log.retention.ms from log.retention.hours, log.roll.ms from log.roll.hours), and Kafka lists no
# DEFAULT_CONFIG synonym for the topic configs they stand for; neither do we.
NO_DEFAULT_OF_THEIR_OWN = frozenset({"log.retention.ms", "log.roll.ms"})


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
        if definition.broker_key in broker.static_keys:
            synonyms.append(Synonym(definition.broker_key,
                                    render(getattr(defaults, definition.field)),
                                    ConfigSource.STATIC_BROKER_CONFIG))
        default = Synonym(definition.broker_key, render(getattr(built_in, definition.field)),
                          ConfigSource.DEFAULT_CONFIG)
        if definition.broker_key not in NO_DEFAULT_OF_THEIR_OWN:
            synonyms.append(default)
        first = synonyms[0] if synonyms else default
        entries.append(ConfigEntry(key, first.value, False, first.source, tuple(synonyms),
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
    built_in = property_values(BrokerConfig())
    entries = []
    for key, value in sorted(property_values(broker).items()):
        if wanted is not None and key not in wanted:
            continue
        synonyms = []
        if key in broker.static_keys:
            synonyms.append(Synonym(key, _render_optional(value), ConfigSource.STATIC_BROKER_CONFIG))
        synonyms.append(Synonym(key, _render_optional(built_in.get(key)),
                                ConfigSource.DEFAULT_CONFIG))
        entries.append(ConfigEntry(
            key, _render_optional(value), True, synonyms[0].source, tuple(synonyms),
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
