"""Topic configuration: the one table of topic-level keys, their broker defaults and validation.

Every per-topic setting the broker honours is a field of ``LogConfig``; ``TOPIC_CONFIGS`` maps
Kafka's topic key (``retention.ms``) to that field, its type, the broker property that supplies the
default (``log.retention.ms``), and how a value is parsed and checked (Kafka's ``LogConfig``
validators). A topic stores only its *overrides*, as the strings it was given (``topics.json``,
``manager.py``); ``apply_overrides`` turns the broker default plus the overrides into the topic's
``LogConfig``, so a topic without an override follows the broker default, as in Kafka.

Readers: the log (segment roll, retention, max.message.bytes, message.timestamp.type), the log
cleaner (cleanup.policy and the compaction settings) and the config admin APIs (DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs, CreateTopics). Nothing else keeps a copy of these values.

Bad keys or values raise ``KafkaError(INVALID_CONFIG)`` with a message naming the key, as Kafka's
``InvalidConfigurationException`` does.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from protocol.errors import ErrorCode, KafkaError
from protocol.text import clip

INT_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1
CLEANUP_POLICIES = ("compact", "delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True)
class LogConfig:
    """Per-topic log settings; Kafka's topic key and broker key in the comments."""

    segment_bytes: int = 1 << 30  # segment.bytes / log.segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms / log.roll.ms
    retention_bytes: int = -1  # retention.bytes / log.retention.bytes (-1 unlimited)
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms / log.retention.ms (-1 unlimited)
    index_interval_bytes: int = 4096  # index.interval.bytes / log.index.interval.bytes
    max_message_bytes: int = 1048588  # max.message.bytes / message.max.bytes (one batch)
    # preallocate / log.preallocate: zero-fill the active segment ahead of the data so fdatasync
    # needs no metadata update; applies only with flush="always" (segment.py has the numbers).
    preallocate: bool = True
    flush: str = "always"  # "always": HW moves after fdatasync; "never": HW = LEO at once
    # cleanup.policy / log.cleanup.policy: "delete" (retention), "compact" (the cleaner), or both
    cleanup_policy: tuple[str, ...] = ("delete",)
    # message.timestamp.type / log.message.timestamp.type: LogAppendTime makes the broker stamp
    # every batch with its own clock
    message_timestamp_type: str = "CreateTime"
    # Compaction (the log cleaner reads these):
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio / log.cleaner.min.cleanable.ratio
    delete_retention_ms: int = 86_400_000  # delete.retention.ms / log.cleaner.delete.retention.ms
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms / log.cleaner.min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms / log.cleaner.max.compaction.lag.ms

    def __post_init__(self) -> None:
        if self.flush not in ("always", "never"):
            raise ValueError(f"flush must be 'always' or 'never', not {self.flush!r}")
        if self.segment_bytes < 14 or self.segment_ms < 1 or self.index_interval_bytes < 0:
            raise ValueError(f"invalid log config {self}")

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Retention (by time and size) applies."""
        return "delete" in self.cleanup_policy

    @property
    def roll_ms(self) -> int:
        """Age at which the active segment rolls: ``segment.ms``, and for a compacted topic no
        later than ``max.compaction.lag.ms`` (KIP-354: the cleaner never touches the active
        segment, so it must close for the lag to hold)."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"


class ConfigType(enum.IntEnum):
    """DescribeConfigs v3+ ``config_type`` (Kafka's ConfigDef types)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7


# -- parsers: str -> value, ValueError with the reason ---------------------------------------------


# The reasons are Kafka's (ConfigDef's), so that its tools print the same error.
def _int_range(minimum: int, maximum: int) -> Callable[[str], int]:
    type_name = "INT" if maximum <= INT_MAX else "LONG"

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"Not a number of type {type_name}") from None
        if not minimum <= value <= maximum:
            if value < minimum:
                raise ValueError(f"Value must be at least {minimum}")
            raise ValueError(f"Value must be no more than {maximum}")
        return value

    return parse


def _ratio(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("Not a number of type DOUBLE") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError("Value must be at least 0.0" if value < 0 else "Value must be no more than 1.0")
    return value


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("Expected value to be either true or false")
    return lowered == "true"


def _cleanup_policy(text: str) -> tuple[str, ...]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError(f"expected a list of {', '.join(CLEANUP_POLICIES)}")
    for item in items:
        if item not in CLEANUP_POLICIES:
            raise ValueError(f"String must be one of: {', '.join(CLEANUP_POLICIES)}")
    return tuple(dict.fromkeys(items))


def _timestamp_type(text: str) -> str:
    value = text.strip()
    if value not in TIMESTAMP_TYPES:
        raise ValueError(f"String must be one of: {', '.join(TIMESTAMP_TYPES)}")
    return value


def render(value: object) -> str:
    """A value as DescribeConfigs shows it (Kafka's rendering)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


@dataclass(frozen=True)
class TopicConfigDef:
    key: str  # the topic-level key
    field: str  # the LogConfig field
    type: ConfigType
    broker_key: str  # the broker property that gives the default (a synonym in DescribeConfigs)
    parse: Callable[[str], object]
    doc: str


def _def(
    key: str,
    field: str,
    type_: ConfigType,
    broker_key: str,
    parse: Callable[[str], object],
    doc: str,
) -> TopicConfigDef:
    return TopicConfigDef(key, field, type_, broker_key, parse, doc)


TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.key: d
    for d in (
        _def("cleanup.policy", "cleanup_policy", ConfigType.LIST, "log.cleanup.policy",
             _cleanup_policy,
             "delete: old segments go by retention.ms/retention.bytes; compact: the log keeps "
             "the latest record of each key; both may be given."),
        _def("delete.retention.ms", "delete_retention_ms", ConfigType.LONG,
             "log.cleaner.delete.retention.ms", _int_range(0, LONG_MAX),
             "How long tombstones of a compacted topic stay readable."),
        _def("index.interval.bytes", "index_interval_bytes", ConfigType.INT,
             "log.index.interval.bytes", _int_range(0, INT_MAX),
             "Bytes between two offset index entries."),
        _def("max.compaction.lag.ms", "max_compaction_lag_ms", ConfigType.LONG,
             "log.cleaner.max.compaction.lag.ms", _int_range(1, LONG_MAX),
             "The longest a record stays uncompacted."),
        _def("max.message.bytes", "max_message_bytes", ConfigType.INT, "message.max.bytes",
             _int_range(0, INT_MAX), "The largest record batch the topic accepts."),
        _def("message.timestamp.type", "message_timestamp_type", ConfigType.STRING,
             "log.message.timestamp.type", _timestamp_type,
             "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches with the "
             "broker's clock."),
        _def("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", ConfigType.DOUBLE,
             "log.cleaner.min.cleanable.ratio", _ratio,
             "The uncompacted share of the log above which the cleaner compacts it."),
        _def("min.compaction.lag.ms", "min_compaction_lag_ms", ConfigType.LONG,
             "log.cleaner.min.compaction.lag.ms", _int_range(0, LONG_MAX),
             "The least time a record stays uncompacted."),
        _def("preallocate", "preallocate", ConfigType.BOOLEAN, "log.preallocate", _bool,
             "Zero-fill segment files ahead of the data."),
        _def("retention.bytes", "retention_bytes", ConfigType.LONG, "log.retention.bytes",
             _int_range(-1, LONG_MAX),
             "Size per partition above which the oldest segments are deleted; -1: no limit."),
        _def("retention.ms", "retention_ms", ConfigType.LONG, "log.retention.ms",
             _int_range(-1, LONG_MAX),
             "Age above which a segment is deleted; -1: no limit."),
        _def("segment.bytes", "segment_bytes", ConfigType.INT, "log.segment.bytes",
             _int_range(14, INT_MAX), "Size of one segment file."),
        _def("segment.ms", "segment_ms", ConfigType.LONG, "log.roll.ms",
             _int_range(1, LONG_MAX), "Age after which the active segment is rolled."),
    )
}
BROKER_KEYS: dict[str, TopicConfigDef] = {d.broker_key: d for d in TOPIC_CONFIGS.values()}


def unknown_key(key: str) -> KafkaError:
    """Kafka's INVALID_CONFIG message for an unknown key, with a did-you-mean when one is close
    (a broker key such as log.retention.ms names its topic key retention.ms)."""
    message = f"Unknown topic config name: {key}"
    if key in BROKER_KEYS:
        return KafkaError(ErrorCode.INVALID_CONFIG,
                          f"{message} (the topic key of broker config {key} is "
                          f"{BROKER_KEYS[key].key})")
    close = difflib.get_close_matches(key, TOPIC_CONFIGS, n=1, cutoff=0.6)
    if close:
        message += f" (did you mean {close[0]}?)"
    return KafkaError(ErrorCode.INVALID_CONFIG, message)


def parse_value(key: str, raw: object) -> object:
    """The typed value of topic config ``key``; INVALID_CONFIG if unknown or invalid."""
    definition = TOPIC_CONFIGS.get(key)
    if definition is None:
        raise unknown_key(key)
    if raw is None:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Null value not supported for {key}")
    try:
        return definition.parse(str(raw))
    except ValueError as exc:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {key}: {exc}"
        ) from None


def apply_overrides(base: LogConfig, overrides: Mapping[str, object] | None) -> LogConfig:
    """``base`` (the broker defaults) with topic overrides applied; INVALID_CONFIG for unknown
    keys, bad values or contradicting ones."""
    if not overrides:
        return base
    changes: dict[str, object] = {}
    for key, raw in overrides.items():
        value = parse_value(key, raw)
        changes[TOPIC_CONFIGS[key].field] = value
    config = dataclasses.replace(base, **changes)  # type: ignore[arg-type]
    if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"conflict: min.compaction.lag.ms {config.min_compaction_lag_ms} is greater than "
            f"max.compaction.lag.ms {config.max_compaction_lag_ms}",
        )
    return config


def normalize_overrides(overrides: Mapping[str, object] | None) -> dict[str, str]:
    """Overrides as stored: every key known and every value valid (else INVALID_CONFIG), values
    as the strings given, stripped."""
    result: dict[str, str] = {}
    for key, raw in (overrides or {}).items():
        parse_value(key, raw)
        result[key] = str(raw).strip()
    return result


# -- IncrementalAlterConfigs ---------------------------------------------------------------------
#
# ``apply_alter_ops`` is the one loop of IncrementalAlterConfigs' operations for every resource
# type that takes them: topics (``incremental_overrides`` below), groups
# (broker/config/group_configs.py) and client metrics subscriptions
# (broker/config/client_metrics_configs.py). It sits here, beside ``AlterOp``, because
# broker/config imports broker/log and never the other way round. Each caller passes what its
# type does differently: which keys are lists, how a list value splits, the refusal message,
# how a new value is checked, the list of a key not set (tests/unit/broker/config/
# test_incremental_alter.py pins each type's answers).


class AlterOp(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def list_items(text: str) -> list[str]:
    """A list value's items, each stripped, the empty ones dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


def append_not_allowed(key: str, op: AlterOp) -> str:
    """Kafka's refusal of APPEND / SUBTRACT on a key that is not a list, for topics and groups."""
    return f"Config value {op.name.lower()} is not allowed for config key: {key}"


def not_a_list(key: str, op: AlterOp) -> str:
    """Kafka's refusal of the same for client metrics subscriptions."""
    return f"Can't {op.name} to key {clip(key)} because its type is not LIST."


def value_given(key: str, value: str | None) -> str:
    """A new value kept as given; a null one refused as Kafka refuses it."""
    if value is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {key}")
    return value


def apply_alter_ops(
    current: Mapping[str, str],
    ops: Iterable[tuple[str, int, str | None]],
    *,
    is_list: Callable[[str], bool],
    refusal: Callable[[str, AlterOp], str],
    split: Callable[[str], list[str]] = list_items,
    split_stored: Callable[[str], list[str]] | None = None,
    default_items: Callable[[str], list[str]] = lambda _key: [],
    check_key: Callable[[str], None] = lambda _key: None,
    check_value: Callable[[str, str | None], str] = value_given,
) -> dict[str, str]:
    """``current`` (key -> value text, not changed) after the ``ops`` ``(key, op, value)``, in
    order.

    ``check_key`` sees every key first. SET stores ``check_value(key, value)``; DELETE removes
    the key. APPEND and SUBTRACT need a key that ``is_list`` (else INVALID_CONFIG with
    ``refusal(key, op)``): the key's items (``split_stored``, default ``split``, of its value;
    ``default_items(key)`` when it is not set) get the items of ``split(value)`` they lack
    (APPEND) or lose every copy of them (SUBTRACT), and the items joined with "," go through
    ``check_value`` as a SET's value does. Any other operation: INVALID_REQUEST.
    """
    split_stored = split_stored or split
    result = dict(current)
    for key, op, value in ops:
        check_key(key)
        if op == AlterOp.SET:
            result[key] = check_value(key, value)
        elif op == AlterOp.DELETE:
            result.pop(key, None)
        elif op in (AlterOp.APPEND, AlterOp.SUBTRACT):
            if not is_list(key):
                raise KafkaError(ErrorCode.INVALID_CONFIG, refusal(key, AlterOp(op)))
            items = split_stored(result[key]) if key in result else default_items(key)
            given = split(value or "")
            if op == AlterOp.APPEND:
                items = items + [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            result[key] = check_value(key, ",".join(items))
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown alter config operation {op}")
    return result


def incremental_overrides(
    current: Mapping[str, str],
    defaults: LogConfig,
    ops: list[tuple[str, int, str | None]],
) -> dict[str, str]:
    """A topic's overrides after IncrementalAlterConfigs ``ops`` ``(key, op, value)``, validated.

    SET stores the value (checked, stripped), DELETE removes the override (back to the broker
    default), APPEND and SUBTRACT change a LIST config's items (stripped, empty ones dropped)
    starting from its current value (the default when not overridden). INVALID_CONFIG for unknown
    keys, bad values, list ops on other types; INVALID_REQUEST for an unknown operation or a key
    given twice (as Kafka).
    """
    seen: set[str] = set()

    def check_key(key: str) -> None:
        if key in seen:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {key}")
        seen.add(key)
        if key not in TOPIC_CONFIGS:
            raise unknown_key(key)

    def check_value(key: str, value: str | None) -> str:
        parse_value(key, value)
        return str(value).strip()

    result = apply_alter_ops(
        current, ops, check_key=check_key, check_value=check_value,
        is_list=lambda key: TOPIC_CONFIGS[key].type is ConfigType.LIST,
        refusal=append_not_allowed,
        default_items=lambda key: list(getattr(defaults, TOPIC_CONFIGS[key].field)),
    )
    apply_overrides(defaults, result)  # the combination must hold too
    return result


# -- internal topics ---------------------------------------------------------------------------

# Keys of ``__transaction_state`` and ``__consumer_offsets`` that no client may change: each one
# could make the broker forget its own state (retention or a delete policy removes segments of
# live transactions and committed offsets), refuse to write it (max.message.bytes) or drown it
# in segment files (segment.bytes, segment.ms, max.compaction.lag.ms roll a segment per batch).
# The broker sets them when it creates the topic (``broker/log/cleaner.py``,
# ``internal_topic_config``); the other keys (compaction pace, tombstone retention, index
# interval, preallocation, timestamp type) stay alterable as on any topic.
INTERNAL_FIXED_KEYS = frozenset({
    "cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes", "segment.ms",
    "max.message.bytes", "max.compaction.lag.ms",
})


def check_internal_alter(topic: str, current: Mapping[str, str], new: Mapping[str, str]) -> None:
    """POLICY_VIOLATION if ``new`` (the overrides an alter would store for internal topic
    ``topic``) changes, adds or removes a key of ``INTERNAL_FIXED_KEYS``."""
    changed = sorted(k for k in INTERNAL_FIXED_KEYS if current.get(k) != new.get(k))
    if changed:
        raise KafkaError(
            ErrorCode.POLICY_VIOLATION,
            f"{', '.join(changed)} of internal topic {topic} cannot be changed: the broker "
            "keeps its transaction and offset state there",
        )


def internal_overrides_restored(
    current: Mapping[str, str], canonical: Mapping[str, str]
) -> dict[str, str] | None:
    """The overrides of an internal topic with every key of ``INTERNAL_FIXED_KEYS`` as the broker
    creates it (``canonical``); None if they already are (a data dir from a version that let a
    client change them is repaired at start)."""
    restored = {k: v for k, v in current.items() if k not in INTERNAL_FIXED_KEYS}
    restored.update((k, v) for k, v in canonical.items() if k in INTERNAL_FIXED_KEYS)
    return None if restored == dict(current) else restored
