"""Client metrics subscriptions (KIP-714): Kafka's CLIENT_METRICS config resources (resource type
16), set with IncrementalAlterConfigs / AlterConfigs and read with DescribeConfigs, as
``kafka-client-metrics.sh --alter --name X --metrics ... --interval ... --match ...`` does.

Pure apart from ``ClientMetricsConfigStore``, which keeps them durably as the group configs are
kept (``group_configs.py``): one JSON document in the data dir, replaced atomically and fsynced
(``atomic_write``), so a kill -9 leaves the old or the new one.

The keys (Kafka's ``ClientMetricsConfigs``):

- ``metrics``: metric-name prefixes the matching clients push; ``*`` (or an empty prefix) every
  metric; none: nothing.
- ``interval.ms``: the push interval, 100 to 3600000 (default 300000).
- ``match``: ``selector=regex`` pairs that a client must all match (full match) for the
  subscription to apply; selectors ``client_instance_id``, ``client_id``, ``client_software_name``,
  ``client_software_version``, ``client_source_address``, ``client_source_port``. None: every
  client.

Errors as Kafka's: an empty name, an unknown key or an interval out of range INVALID_REQUEST; a
bad value type or match pattern INVALID_CONFIG. Deleting every key deletes the subscription.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from broker.config.resources import ConfigEntry, ConfigSource, Synonym
from broker.log.segment import atomic_write
from broker.log.topic_config import ConfigType, apply_alter_ops, not_a_list
from protocol.errors import ErrorCode, KafkaError
from protocol.text import clip

log = logging.getLogger("minibroker.config")

CLIENT_METRICS_CONFIGS_FILE = "client_metrics_configs.json"
METRICS, INTERVAL_MS, MATCH = "metrics", "interval.ms", "match"
INTERVAL_MS_DEFAULT = 300_000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
ALL_METRICS = "*"
SELECTORS = ("client_instance_id", "client_id", "client_software_name",
             "client_software_version", "client_source_address", "client_source_port")
MAX_SUBSCRIPTIONS = 1_000  # minibroker's: subscriptions are matched on every client's request
MAX_PATTERN = 1_000  # characters of one match regex

_TYPES = {METRICS: ConfigType.LIST, INTERVAL_MS: ConfigType.INT, MATCH: ConfigType.LIST}
_DOCS = {METRICS: "Telemetry metric name prefix list",
         INTERVAL_MS: "Metrics push interval in milliseconds",
         MATCH: "Client match criteria"}
_DEFAULTS = {METRICS: "", INTERVAL_MS: str(INTERVAL_MS_DEFAULT), MATCH: ""}


@dataclass(frozen=True)
class Subscription:
    """One CLIENT_METRICS resource, parsed."""

    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: tuple[tuple[str, re.Pattern[str]], ...]

    def matches(self, client: Mapping[str, str | None]) -> bool:
        """Every pattern fully matches the client's attribute (none given: every client)."""
        for selector, pattern in self.match:
            value = client.get(selector)
            if value is None or pattern.fullmatch(value) is None:
                return False
        return True


def _list(text: str) -> list[str]:
    text = text.strip()
    return [] if not text else [t.strip() for t in text.split(",")]


def parse_match(patterns: Iterable[str]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """``selector=regex`` pairs (split at the one '='), as Kafka's ``parseMatchingPatterns``.
    Raises KafkaError(INVALID_CONFIG) naming the bad pattern."""
    out: dict[str, re.Pattern[str]] = {}
    for pattern in patterns:
        parts = pattern.split("=")
        selector = parts[0].strip()
        bad = KafkaError(ErrorCode.INVALID_CONFIG,
                         f"Illegal client matching pattern: {clip(pattern)}")
        if len(parts) != 2 or selector not in SELECTORS or len(parts[1]) > MAX_PATTERN:
            raise bad
        try:
            out[selector] = re.compile(parts[1].strip())
        except (re.error, RecursionError, OverflowError):
            raise bad from None
    return tuple(out.items())


def validate(name: str, configs: Mapping[str, str]) -> Subscription:
    """A subscription's complete set of keys, checked as Kafka checks it; parsed."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    for key in configs:
        if key not in _TYPES:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unknown client metrics configuration: {clip(key)}")
    interval = INTERVAL_MS_DEFAULT
    if INTERVAL_MS in configs:
        text = configs[INTERVAL_MS].strip()
        try:
            interval = int(text)
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"Invalid value {clip(text)} for configuration {INTERVAL_MS}: "
                             "Not a number of type INT") from None
        if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Invalid value {interval} for {INTERVAL_MS}, interval must be "
                             f"between {MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)")
    metrics = tuple(_list(configs.get(METRICS, "")))
    match = parse_match(_list(configs.get(MATCH, "")))
    return Subscription(name, metrics, interval, match)


def apply_ops(current: Mapping[str, str], ops: Sequence[tuple[str, int, str | None]]
              ) -> dict[str, str]:
    """IncrementalAlterConfigs: SET (0), DELETE (1), APPEND (2) and SUBTRACT (3) on the lists,
    whose empty items count."""
    return apply_alter_ops(current, ops, is_list=lambda name: _TYPES.get(name) is ConfigType.LIST,
                           refusal=not_a_list, split=_list)


def describe(configs: Mapping[str, str], keys: Iterable[str] | None) -> list[ConfigEntry]:
    """DescribeConfigs of a subscription: its three keys (or those of ``keys``), a set one with
    source CLIENT_METRICS_CONFIG, the others their default; a name never set has every default
    (no error), as Kafka 4.4 answers."""
    wanted = None if keys is None else set(keys)
    entries = []
    for name in (METRICS, INTERVAL_MS, MATCH):
        if wanted is not None and name not in wanted:
            continue
        if name in configs:  # a default has no synonym (Kafka 4.4's answer)
            value = configs[name]
            source = ConfigSource.CLIENT_METRICS_CONFIG
            synonyms: tuple[Synonym, ...] = (Synonym(name, value, source),)
        else:
            source, value, synonyms = ConfigSource.DEFAULT_CONFIG, _DEFAULTS[name], ()
        entries.append(ConfigEntry(name, value, False, source, synonyms, _TYPES[name],
                                   _DOCS[name]))
    return entries


class ClientMetricsConfigStore:
    """The subscriptions (name -> key -> value text), durable in
    ``data_dir/client_metrics_configs.json``; ``listeners`` hear of every change (the telemetry
    manager re-evaluates its clients' subscriptions)."""

    def __init__(self, data_dir: Path) -> None:
        self._path = Path(data_dir) / CLIENT_METRICS_CONFIGS_FILE
        self.configs: dict[str, dict[str, str]] = {}
        self.subscriptions: dict[str, Subscription] = {}
        for name, configs in self._read().items():
            self.configs[name] = configs
            self.subscriptions[name] = validate(name, configs)
        self.listeners: list[Callable[[], None]] = []

    def names(self) -> list[str]:
        """The subscriptions' names, sorted (ListConfigResources / kafka-client-metrics --list)."""
        return sorted(self.configs)

    def describe(self, name: str, keys: Iterable[str] | None) -> list[ConfigEntry]:
        if not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
        return describe(self.configs.get(name, {}), keys)

    def alter(self, name: str, ops: Sequence[tuple[str, int, str | None]],
              validate_only: bool = False, replace: bool = False) -> None:
        """IncrementalAlterConfigs (or AlterConfigs with ``replace``). Validated as a whole;
        nothing changes on an error."""
        updated = apply_ops({} if replace else self.configs.get(name, {}), ops)
        updated = {k: v.strip() for k, v in updated.items()}
        subscription = validate(name, updated)
        if name not in self.configs and updated and len(self.configs) >= MAX_SUBSCRIPTIONS:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"at most {MAX_SUBSCRIPTIONS} client metrics subscriptions")
        if validate_only:
            return
        configs = dict(self.configs)
        if updated:
            configs[name] = updated
        else:
            configs.pop(name, None)
        try:
            atomic_write(self._path, json.dumps(configs, sort_keys=True).encode())
        except OSError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc
        self.configs = configs
        if updated:
            self.subscriptions[name] = subscription
        else:
            self.subscriptions.pop(name, None)
        for listener in self.listeners:
            listener()

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            doc = json.loads(self._path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error("%s unreadable (%s): no client metrics subscriptions", self._path, exc)
            return {}
        out: dict[str, dict[str, str]] = {}
        for name, configs in (doc.items() if isinstance(doc, dict) else ()):
            if not isinstance(configs, dict):
                continue
            kept = {k: v for k, v in configs.items() if isinstance(k, str) and isinstance(v, str)}
            try:
                validate(name, kept)
            except KafkaError as exc:
                log.error("client metrics %s: stored configs refused (%s)", clip(name),
                          exc.message)
                continue
            if kept:
                out[name] = kept
        return out
