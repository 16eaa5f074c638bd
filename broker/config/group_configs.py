"""Group configs (Kafka 4.4's GROUP config resources, ``kafka-configs --entity-type groups``).

Pure: the keys, their types, defaults (the broker's ``group.*`` value each stands for, its
synonym), validation as Kafka's ``GroupConfig.validate`` does it, and DescribeConfigs entries.
``GroupConfigStore`` (below) keeps the overrides durably, one JSON document in the data dir
(replaced atomically and fsynced: a kill -9 leaves the old or the new one).

Validation, in Kafka's order: unknown names (``Unknown group config name: X``), each value's type
and floor (``Invalid value V for configuration X: ...``), then, for the keys given, the broker's
min/max bounds (``X must be in the range A to B inclusive.``), and a session timeout greater
than its heartbeat interval (the broker's value standing in for the one not overridden).

Who applies what: ``share.*`` the share service (broker/share/service.py); ``consumer.session
.timeout.ms`` / ``consumer.heartbeat.interval.ms`` the consumer-protocol groups through
``GroupConfigStore.int_value`` (the hook broker/group reads); the streams groups their session
timeout, heartbeat interval, standby replicas, task offset interval, acceptable recovery lag,
initial rebalance delay and rack-aware tags (broker/group/streams_service.py, as Kafka 4.4; its
sticky assignor reads no tags, and its warm-up replicas change nothing); the others (assignment
intervals, the consumer groups' initial delays, dead-letter queues, renew acknowledgements) are
kept and described, not used.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from broker.config import BrokerConfig
from broker.config.resources import ConfigEntry, ConfigSource, Synonym, _broker_synonyms
from broker.log.segment import atomic_write
from broker.log.topic_config import ConfigType, append_not_allowed, apply_alter_ops
from protocol.errors import ErrorCode, KafkaError
from protocol.text import clip

log = logging.getLogger("minibroker.config")

GROUP_CONFIGS_FILE = "group_configs.json"
OLD_SHARE_CONFIGS_FILE = "share_group_configs.json"  # before every group key was served

INT_MAX = 2**31 - 1
_DURATION = re.compile(r"^-?P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?"
                       r"(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)


@dataclass(frozen=True)
class GroupKey:
    name: str
    type: ConfigType
    broker_key: str  # the synonym: the broker property whose value is the default
    default: Callable[[BrokerConfig], str]
    at_least: int | None = None  # Kafka's ConfigDef floor
    bounds: tuple[int, int] | None = None  # the broker's group.*.min/max for this key
    at_most: int | None = None
    choices: tuple[str, ...] | None = None
    internal: bool = False  # described only when set (Kafka's GroupConfig.isInternal)
    doc: str = ""
    minimum: int | None = None  # the broker's group.*.min for this key, without a maximum


def _const(value: str) -> Callable[[BrokerConfig], str]:
    return lambda _config: value


def _field(name: str) -> Callable[[BrokerConfig], str]:
    return lambda config: str(getattr(config, name))


def _int(name: str, type_: ConfigType, broker_key: str, default: Callable[[BrokerConfig], str],
         at_least: int, bounds: tuple[int, int] | None = None, at_most: int | None = None,
         internal: bool = False, doc: str = "") -> GroupKey:
    return GroupKey(name, type_, broker_key, default, at_least, bounds, at_most, None, internal,
                    doc)


_I, _B, _S, _L = ConfigType.INT, ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.LIST
# Kafka 4.4's bounds (group.{consumer,share,streams}.{min,max}.*): this broker has no keys of its
# own for them, so Kafka's defaults are the bounds.
SESSION_BOUNDS = (45_000, 60_000)
HEARTBEAT_BOUNDS = (5_000, 15_000)
ASSIGNMENT_BOUNDS = (0, 15_000)
LOCK_BOUNDS = (15_000, 60_000)
DELIVERY_BOUNDS = (2, 10)
RECORD_LOCKS_BOUNDS = (100, 4_000)
STREAMS_MAX_STANDBY = 2
STREAMS_MIN_TASK_OFFSET_INTERVAL = 15_000  # group.streams.min.task.offset.interval.ms
STREAMS_MAX_WARMUP = 20  # group.streams.max.warmup.replicas
STREAMS_ASSIGNORS = ("sticky",)

KEYS: dict[str, GroupKey] = {k.name: k for k in (
    _int("consumer.session.timeout.ms", _I, "group.consumer.session.timeout.ms",
         _field("group_consumer_session_timeout_ms"), 1, SESSION_BOUNDS,
         doc="The timeout to detect client failures when using the consumer group protocol."),
    _int("consumer.heartbeat.interval.ms", _I, "group.consumer.heartbeat.interval.ms",
         _field("group_consumer_heartbeat_interval_ms"), 1, HEARTBEAT_BOUNDS,
         doc="The heartbeat interval given to the members of a consumer group."),
    _int("consumer.assignment.interval.ms", _I, "group.consumer.assignment.interval.ms",
         _const("1000"), 0, ASSIGNMENT_BOUNDS,
         doc="The interval between assignment updates for a consumer group."),
    GroupKey("consumer.assignor.offload.enable", _B, "group.consumer.assignor.offload.enable",
             _const("true"), internal=True),
    _int("share.session.timeout.ms", _I, "group.share.session.timeout.ms",
         _field("group_share_session_timeout_ms"), 1, SESSION_BOUNDS,
         doc="The timeout to detect client failures when using the share group protocol."),
    _int("share.heartbeat.interval.ms", _I, "group.share.heartbeat.interval.ms",
         _field("group_share_heartbeat_interval_ms"), 1, HEARTBEAT_BOUNDS,
         doc="The heartbeat interval given to the members of a share group."),
    _int("share.record.lock.duration.ms", _I, "group.share.record.lock.duration.ms",
         _field("group_share_record_lock_duration_ms"), 1000, LOCK_BOUNDS,
         doc="The record acquisition lock duration in milliseconds for share groups."),
    _int("share.delivery.count.limit", _I, "group.share.delivery.count.limit",
         _field("group_share_delivery_count_limit"), 2, DELIVERY_BOUNDS,
         doc="The maximum number of delivery attempts for a record delivered to a share group."),
    _int("share.partition.max.record.locks", _I, "group.share.partition.max.record.locks",
         _field("group_share_partition_max_record_locks"), 100, RECORD_LOCKS_BOUNDS,
         doc="Share-group record lock limit per share-partition."),
    GroupKey("share.auto.offset.reset", _S, "share.auto.offset.reset", _const("latest"),
             doc="The strategy to initialize the share-partition start offset: earliest, "
                 "latest or by_duration:<ISO-8601 duration>."),
    GroupKey("share.isolation.level", _S, "share.isolation.level", _const("read_uncommitted"),
             choices=("read_committed", "read_uncommitted"),
             doc="Controls how to read records written transactionally."),
    GroupKey("share.renew.acknowledge.enable", _B, "share.renew.acknowledge.enable",
             _const("true"), doc="Whether the renew acknowledge type is enabled for the share "
                                 "group."),
    _int("share.assignment.interval.ms", _I, "group.share.assignment.interval.ms",
         _const("1000"), 0, ASSIGNMENT_BOUNDS,
         doc="The interval between assignment updates for a share group."),
    GroupKey("share.assignor.offload.enable", _B, "group.share.assignor.offload.enable",
             _const("true"), internal=True),
    _int("streams.session.timeout.ms", _I, "group.streams.session.timeout.ms",
         _field("group_streams_session_timeout_ms"), 1, SESSION_BOUNDS,
         doc="The timeout to detect client failures when using the streams group protocol."),
    _int("streams.heartbeat.interval.ms", _I, "group.streams.heartbeat.interval.ms",
         _field("group_streams_heartbeat_interval_ms"), 1, HEARTBEAT_BOUNDS, doc="The heartbeat interval given to the members."),
    _int("streams.num.standby.replicas", _I, "group.streams.num.standby.replicas",
         _field("group_streams_num_standby_replicas"), 0, at_most=STREAMS_MAX_STANDBY, doc="The number of standby replicas for each task."),
    _int("streams.initial.rebalance.delay.ms", _I, "group.streams.initial.rebalance.delay.ms",
         _field("group_streams_initial_rebalance_delay_ms"), 0, doc="How long a new streams group waits for more members before "
                                "its first rebalance."),
    _int("streams.assignment.interval.ms", _I, "group.streams.assignment.interval.ms",
         _const("1000"), 0, ASSIGNMENT_BOUNDS,
         doc="The interval between assignment updates for a streams group."),
    GroupKey("streams.rack.aware.assignment.tags", _L, "group.streams.rack.aware.assignment.tags",
             _const(""), doc="The tag keys used for rack-aware standby task assignment."),
    GroupKey("streams.assignor.offload.enable", _B, "group.streams.assignor.offload.enable",
             _const("true"), internal=True),
    GroupKey("streams.task.offset.interval.ms", _I, "group.streams.task.offset.interval.ms",
             _const("60000"), 0, internal=True, minimum=STREAMS_MIN_TASK_OFFSET_INTERVAL),
    _int("streams.num.warmup.replicas", _I, "group.streams.num.warmup.replicas", _const("2"),
         0, at_most=STREAMS_MAX_WARMUP, internal=True),
    GroupKey("streams.acceptable.recovery.lag", ConfigType.LONG,
             "group.streams.acceptable.recovery.lag", _const("10000"), 0, internal=True),
    GroupKey("streams.assignor.name", _S, "group.streams.assignors", _const("sticky"),
             doc="The task assignor of this streams group, by short name."),
    GroupKey("errors.deadletterqueue.topic.name", _S, "errors.deadletterqueue.topic.name",
             _const(""), doc="The dead-letter queue topic of this share group (blank: none)."),
    GroupKey("errors.deadletterqueue.copy.record.enable", _B,
             "errors.deadletterqueue.copy.record.enable", _const("false"),
             doc="Whether records written to the dead-letter queue carry the original record."),
)}
# session key -> its heartbeat key: the session must be longer
_SESSION_PAIRS = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
                  ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
                  ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"))


def _invalid(key: str, value: str, reason: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_CONFIG,
                      f"Invalid value {clip(value)} for configuration {key}: {reason}")


def _parse(key: GroupKey, value: str) -> object:
    """Kafka's ConfigDef.parse of one value: the type, then the floor and the choices."""
    text = value.strip()
    if key.type in (ConfigType.INT, ConfigType.LONG):
        limit = INT_MAX if key.type is ConfigType.INT else 2**63 - 1
        try:
            number = int(text)
        except ValueError:
            raise _invalid(key.name, value, f"Not a number of type {key.type.name}") from None
        if not -limit - 1 <= number <= limit:
            raise _invalid(key.name, value, f"Not a number of type {key.type.name}")
        if key.at_least is not None and number < key.at_least:
            raise _invalid(key.name, value, f"Value must be at least {key.at_least}")
        return number
    if key.type is ConfigType.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise _invalid(key.name, value, "Expected value to be either true or false")
        return text.lower() == "true"
    if key.type is ConfigType.LIST:
        return [] if not text else [t.strip() for t in text.split(",")]
    if key.choices is not None and text not in key.choices:
        raise _invalid(key.name, value, "String must be one of: " + ", ".join(sorted(key.choices)))
    if key.name == "share.auto.offset.reset" and reset_strategy(text) is None:
        raise _invalid(key.name, value,
                       f"Invalid value `{clip(value)}` for configuration {key.name}. The value "
                       "must be either 'earliest', 'latest' or of the format "
                       "'by_duration:<PnDTnHnMn.nS>'.")
    return text


def reset_strategy(text: str) -> tuple[str, int] | None:
    """``share.auto.offset.reset``: ``("earliest", 0)``, ``("latest", 0)`` or
    ``("by_duration", ms)``; None if invalid (a negative duration too)."""
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        return lowered, 0
    if not lowered.startswith("by_duration:"):
        return None
    spec = text.strip()[len("by_duration:"):]
    match = _DURATION.match(spec)
    if match is None or spec.startswith("-") or spec.upper() in ("P", "PT"):
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return "by_duration", int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def validate(overrides: Mapping[str, str], broker: BrokerConfig) -> dict[str, object]:
    """A group's complete set of overrides, as Kafka checks it; their parsed values. Raises
    KafkaError(INVALID_CONFIG) with Kafka's message."""
    for name in overrides:
        if name not in KEYS:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {clip(name)}")
    tags = overrides.get("streams.rack.aware.assignment.tags", "").strip()
    if tags:
        listed = re.split(r"\s*,\s*", tags)
        if len(set(listed)) != len(listed):
            raise KafkaError(ErrorCode.INVALID_CONFIG, "streams.rack.aware.assignment.tags must "
                                                       "not contain duplicate tag keys.")
    parsed = {name: _parse(KEYS[name], value) for name, value in overrides.items()}
    for name in KEYS:  # Kafka's order
        if name not in parsed:
            continue
        key, number = KEYS[name], parsed[name]
        if key.bounds is not None:
            low, high = key.bounds
            assert isinstance(number, int)
            if not low <= number <= high:
                raise KafkaError(ErrorCode.INVALID_CONFIG,
                                 f"{name} must be in the range {low} to {high} inclusive.")
        if key.at_most is not None and isinstance(number, int) and number > key.at_most:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"{name} must be less than or equal to {key.at_most}")
        if key.minimum is not None and isinstance(number, int) and number < key.minimum:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"{name} must be greater than or equal to {key.minimum}")
    assignor = parsed.get("streams.assignor.name")
    if assignor is not None and assignor not in STREAMS_ASSIGNORS:
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         f"streams.assignor.name '{clip(str(assignor))}' is not a registered "
                         f"task assignor. Registered assignors are: [{', '.join(STREAMS_ASSIGNORS)}].")
    for session_key, heartbeat_key in _SESSION_PAIRS:
        if session_key not in parsed and heartbeat_key not in parsed:
            continue
        session = parsed.get(session_key, int(KEYS[session_key].default(broker)))
        heartbeat = parsed.get(heartbeat_key, int(KEYS[heartbeat_key].default(broker)))
        assert isinstance(session, int) and isinstance(heartbeat, int)
        if session <= heartbeat:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"{session_key} must be greater than {heartbeat_key}")
    dlq = parsed.get("errors.deadletterqueue.topic.name")
    if isinstance(dlq, str) and dlq.startswith("__"):
        raise KafkaError(ErrorCode.INVALID_CONFIG, "errors.deadletterqueue.topic.name: DLQ "
                                                   "topic name must not start with '__'")
    return parsed


def apply_ops(current: Mapping[str, str], ops: Sequence[tuple[str, int, str | None]]
              ) -> dict[str, str]:
    """IncrementalAlterConfigs on a group: SET (0) and DELETE (1); APPEND (2) / SUBTRACT (3)
    only for the list key, as Kafka. The stored list keeps its items' spaces."""
    return apply_alter_ops(current, ops, is_list=_is_list, refusal=append_not_allowed,
                           split_stored=lambda text: [t for t in text.split(",") if t.strip()])


def _is_list(name: str) -> bool:
    key = KEYS.get(name)
    return key is not None and key.type is ConfigType.LIST


def describe(broker: BrokerConfig, overrides: Mapping[str, str], keys: Iterable[str] | None
             ) -> list[ConfigEntry]:
    """DescribeConfigs of a group: every described key (or those of ``keys`` that exist), its
    value, source (DYNAMIC_GROUP_CONFIG for an override) and synonyms (the override, then the
    broker key's static value and default), as Kafka 4.4 answers."""
    wanted = None if keys is None else set(keys)
    entries = []
    for name, key in sorted(KEYS.items()):
        if (key.internal and name not in overrides) or (wanted is not None
                                                         and name not in wanted):
            continue  # an internal key is described only when the group overrides it (Kafka)
        default = key.default(broker)
        synonyms = []
        if name in overrides:
            synonyms.append(Synonym(name, overrides[name], ConfigSource.DYNAMIC_GROUP_CONFIG))
        broker_synonyms = _broker_synonyms(broker, key.broker_key, default)
        if broker_synonyms:
            synonyms += broker_synonyms
        else:
            synonyms.append(Synonym(key.broker_key, default, ConfigSource.DEFAULT_CONFIG))
        value = overrides.get(name, default)
        entries.append(ConfigEntry(name, value, False, synonyms[0].source, tuple(synonyms),
                                   key.type, key.doc or None))
    return entries


class GroupConfigStore:
    """The groups' config overrides (group id -> key -> value text), durable in
    ``data_dir/group_configs.json``; ``listeners`` hear of every change (the share service
    applies its keys)."""

    def __init__(self, config: BrokerConfig) -> None:
        self._broker = config
        self._path = Path(config.data_dir) / GROUP_CONFIGS_FILE
        self.configs: dict[str, dict[str, str]] = self._read()
        self.listeners: list[Callable[[str], None]] = []

    def get(self, group_id: str) -> dict[str, str]:
        return self.configs.get(group_id, {})

    def value(self, group_id: str, name: str) -> str:
        """The effective value: the group's override, else the broker's."""
        override = self.configs.get(group_id, {}).get(name)
        return override if override is not None else KEYS[name].default(self._broker)

    def int_value(self, group_id: str, name: str) -> int:
        return int(self.value(group_id, name))

    def describe(self, group_id: str, keys: Iterable[str] | None) -> list[ConfigEntry]:
        return describe(self._broker, self.get(group_id), keys)

    def alter(self, group_id: str, ops: Sequence[tuple[str, int, str | None]],
              validate_only: bool = False, replace: bool = False) -> None:
        """IncrementalAlterConfigs (or AlterConfigs with ``replace``: the ops' SETs become the
        whole set). Validated as a whole; nothing changes on an error."""
        current = {} if replace else self.get(group_id)
        updated = apply_ops(current, ops)
        validate(updated, self._broker)
        if validate_only:
            return
        configs = {**self.configs, group_id: {k: v.strip() for k, v in updated.items()}}
        if not updated:
            del configs[group_id]
        try:
            atomic_write(self._path, json.dumps(configs, sort_keys=True).encode())
        except OSError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc
        self.configs = configs
        for listener in self.listeners:
            listener(group_id)

    def _read(self) -> dict[str, dict[str, str]]:
        path = self._path
        if not path.exists() and (path.parent / OLD_SHARE_CONFIGS_FILE).exists():
            path = path.parent / OLD_SHARE_CONFIGS_FILE
        try:
            doc = json.loads(path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error("%s unreadable (%s): groups use the broker's configs", path, exc)
            return {}
        if not isinstance(doc, dict):
            return {}
        out: dict[str, dict[str, str]] = {}
        for group_id, configs in doc.items():
            if not isinstance(configs, dict):
                continue
            kept = {k: v for k, v in configs.items() if isinstance(k, str) and isinstance(v, str)}
            try:
                validate(kept, self._broker)
            except KafkaError as exc:
                log.error("group %s: stored configs %s refused (%s); kept those valid alone",
                          clip(group_id), sorted(kept), exc.message)
                kept = {k: v for k, v in kept.items() if _valid_alone(k, v, self._broker)}
            if kept:
                out[group_id] = kept
        return out


def _valid_alone(name: str, value: str, broker: BrokerConfig) -> bool:
    try:
        validate({name: value}, broker)
    except KafkaError:
        return False
    return True

