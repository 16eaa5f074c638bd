"""Broker configuration: Kafka's property names, read from a ``server.properties``-style file.

Every setting has Kafka's key (``num.partitions``, ``log.segment.bytes``, ...) so that a Kafka user
recognises it; the CLI flags override the file. Bad keys or values raise ``ConfigError`` with a
message naming the key, which the CLI prints as one line.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.log.topic_config import BROKER_KEYS, LogConfig
from protocol.properties import parse_properties

DAY_MS = 24 * 3600 * 1000
_log = logging.getLogger("minibroker.config")


class ConfigError(ValueError):
    """A configuration key or value that cannot be used."""


@dataclass(frozen=True)
class Listener:
    """One more address to listen on (Kafka's ``listeners``), with what its clients are told."""

    name: str
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None


@dataclass(frozen=True)
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None  # what clients are told to connect to; default: host
    advertised_port: int | None = None
    data_dir: Path = Path("data")
    node_id: int = 0
    num_partitions: int = 1
    auto_create_topics: bool = True
    socket_request_max_bytes: int = 100 * 1024 * 1024
    # Limits on what clients can make the broker hold (issue 10). Kafka's keys; where Kafka's
    # default is unbounded, ours is a bound (noted), so memory stays bounded out of the box.
    queued_max_request_bytes: int = 100 * 1024 * 1024  # Kafka: -1 (unbounded)
    connections_max_idle_ms: int = 600_000
    request_receive_timeout_ms: int = 30_000  # minibroker's: a request must arrive within this
    max_connections: int = 2_147_483_647  # also capped by the open-files limit (RLIMIT_NOFILE)
    max_connections_per_ip: int = 2_147_483_647
    fetch_max_bytes: int = 57_671_680  # Kafka's broker-side cap on one Fetch response (55 MiB)
    log: LogConfig = field(default_factory=LogConfig)
    log_retention_check_interval_ms: int = 300_000
    # The log cleaner (broker/log/cleaner.py): Kafka's log.cleaner.* keys.
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_backoff_ms: int = 15_000  # sleep when no partition needs cleaning
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024  # bounds the key -> offset map
    # Bounded I/O: bytes read + written per second by the cleaner (Kafka's default: unlimited).
    log_cleaner_io_max_bytes_per_second: float = float("inf")
    producer_id_expiration_ms: int = DAY_MS
    # Transactions (issue 3) and groups use these; they are read here so one file configures all.
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * DAY_MS
    transaction_state_log_num_partitions: int = 50
    transaction_abort_timed_out_interval_ms: int = 10_000
    # The finalized level of the transaction.version feature (KIP-890 part 2): 2 (the default)
    # lets clients end every transaction with an epoch bump (EndTxn v5, Produce v12); 1 keeps
    # the epoch across transactions (what Kafka 3.x does).
    transaction_version: int = 2
    offsets_topic_num_partitions: int = 50
    # Segment sizes of the compacted internal topics. Kafka's default is 100 MiB; ours is small
    # so that cleaning (which never touches the active segment) keeps the logs, and the replay at
    # start, proportional to the live state: see README "Log compaction".
    transaction_state_log_segment_bytes: int = 64 * 1024
    offsets_topic_segment_bytes: int = 64 * 1024
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    # The Kafka property names the config file (or a flag) set: DescribeConfigs reports them as
    # STATIC_BROKER_CONFIG, the others as DEFAULT_CONFIG.
    static_keys: frozenset[str] = frozenset()
    # Listeners after the first (Kafka's ``listeners=A://...,B://...``): e.g. an internal one
    # advertised under a container name and an external one advertised as localhost.
    extra_listeners: tuple[Listener, ...] = ()
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None  # Prometheus text format on http://host:port/metrics

    @property
    def advertised(self) -> tuple[str, int]:
        host = self.advertised_host or self.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return host, self.advertised_port or self.port


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _transaction_version(value: str) -> int:
    if value.strip() not in ("1", "2"):
        raise ValueError("expected 1 or 2")
    return int(value)


def _flush(value: str) -> str:
    if value not in ("always", "never"):
        raise ValueError(f"expected 'always' or 'never', got {value!r}")
    return value


# Kafka property -> (BrokerConfig field or "log.<LogConfig field>", parser, minimum for ints)
_PROPERTIES: dict[str, tuple[str, object, int | None]] = {
    "host.name": ("host", str, None),
    "port": ("port", int, 0),
    "advertised.host.name": ("advertised_host", str, None),
    "advertised.port": ("advertised_port", int, 1),
    "log.dirs": ("data_dir", Path, None),
    "log.dir": ("data_dir", Path, None),
    "node.id": ("node_id", int, 0),
    "broker.id": ("node_id", int, 0),
    "num.partitions": ("num_partitions", int, 1),
    "auto.create.topics.enable": ("auto_create_topics", _bool, None),
    "socket.request.max.bytes": ("socket_request_max_bytes", int, 1024),
    "queued.max.request.bytes": ("queued_max_request_bytes", int, 1024),
    "connections.max.idle.ms": ("connections_max_idle_ms", int, 1),
    "request.receive.timeout.ms": ("request_receive_timeout_ms", int, 1),
    "max.connections": ("max_connections", int, 1),
    "max.connections.per.ip": ("max_connections_per_ip", int, 1),
    "fetch.max.bytes": ("fetch_max_bytes", int, 1024),
    "log.segment.bytes": ("log.segment_bytes", int, 14),
    "log.roll.ms": ("log.segment_ms", int, 1),
    "log.retention.bytes": ("log.retention_bytes", int, -1),
    "log.retention.ms": ("log.retention_ms", int, -1),
    "log.index.interval.bytes": ("log.index_interval_bytes", int, 0),
    "message.max.bytes": ("log.max_message_bytes", int, 0),
    "log.preallocate": ("log.preallocate", _bool, None),
    "log.flush": ("log.flush", _flush, None),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", int, 1),
    "log.cleaner.enable": ("log_cleaner_enable", _bool, None),
    "log.cleaner.threads": ("log_cleaner_threads", int, 1),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", int, 1),
    "log.cleaner.dedupe.buffer.size": ("log_cleaner_dedupe_buffer_size", int, 1024),
    "log.cleaner.io.max.bytes.per.second": ("log_cleaner_io_max_bytes_per_second", float, None),
    "transaction.state.log.segment.bytes": ("transaction_state_log_segment_bytes", int, 14),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", int, 14),
    "producer.id.expiration.ms": ("producer_id_expiration_ms", int, 1),
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", int, 1),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", int, 1),
    "transaction.state.log.num.partitions": ("transaction_state_log_num_partitions", int, 1),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "transaction_abort_timed_out_interval_ms",
        int,
        1,
    ),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", int, 1),
    "transaction.version": ("transaction_version", _transaction_version, None),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", int, 0),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", int, 0),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", int, 0),
    "metrics.port": ("metrics_port", int, 0),
    "metrics.host": ("metrics_host", str, None),
}

# Kafka keys that are valid in a real server.properties but mean nothing to a single node without
# replication, ZooKeeper, KRaft or SASL: accepted with one warning line each.
IGNORED_KAFKA_KEYS = frozenset({
    "process.roles", "controller.quorum.voters", "controller.quorum.bootstrap.servers",
    "controller.listener.names", "inter.broker.listener.name", "listener.security.protocol.map",
    "zookeeper.connect", "zookeeper.connection.timeout.ms", "zookeeper.session.timeout.ms",
    "num.network.threads", "num.io.threads", "num.replica.fetchers", "background.threads",
    "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "queued.max.requests",
    "num.recovery.threads.per.data.dir", "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
    "default.replication.factor", "min.insync.replicas", "unclean.leader.election.enable",
    "delete.topic.enable", "log.flush.interval.messages", "log.flush.interval.ms",
    "log.flush.scheduler.interval.ms",
    "replica.lag.time.max.ms", "auto.leader.rebalance.enable", "confluent.support.metrics.enable",
    "metadata.log.dir", "security.inter.broker.protocol", "sasl.enabled.mechanisms",
    "authorizer.class.name", "allow.everyone.if.no.acl.found", "super.users",
    "group.coordinator.rebalance.protocols", "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
})
_RETENTION_UNITS = {"log.retention.minutes": 60_000, "log.retention.hours": 3_600_000}

# Broker defaults of the remaining topic configs (cleanup policy, compaction, timestamp type):
# parsed and checked by the topic-config table itself.
for _key, _definition in BROKER_KEYS.items():
    _PROPERTIES.setdefault(_key, ("log." + _definition.field, _definition.parse, None))


def property_values(config: BrokerConfig) -> dict[str, object]:
    """Every broker property this broker reads, with its current value (DescribeConfigs)."""
    values: dict[str, object] = {}
    for key, (name, _, _) in _PROPERTIES.items():
        target = config.log if name.startswith("log.") else config
        values[key] = getattr(target, name[4:] if name.startswith("log.") else name)
    return values


def read_properties(path: Path) -> dict[str, str]:
    """Read a Kafka ``server.properties`` file (Java properties syntax, see ``parse_properties``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    try:
        return parse_properties(text, str(path))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def parse_listeners(value: str, key: str = "listeners") -> list[tuple[str, str, int]]:
    """``PLAINTEXT://host:port,NAME://:port`` -> ``[(name, host, port)]`` (empty host: all
    interfaces, as in Kafka)."""
    result = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, address = item.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not port.isdigit() or int(port) > 65535:
            raise ConfigError(f"invalid value for {key}: {item!r} is not NAME://host:port")
        if not name.isidentifier():
            raise ConfigError(f"invalid value for {key}: listener name {name!r}")
        result.append((name.upper(), host.strip("[]") or "0.0.0.0", int(port)))
    if not result:
        raise ConfigError(f"invalid value for {key}: no listener")
    return result


def _apply_listeners(properties: dict[str, str], top: dict[str, object]) -> None:
    """Kafka's ``listeners`` / ``advertised.listeners``: the first listener is host/port, the
    others become ``extra_listeners``; each is advertised as its ``advertised.listeners`` entry of
    the same name."""
    listeners = parse_listeners(properties.get("listeners", "PLAINTEXT://127.0.0.1:9092"))
    controller_names = {
        n.strip().upper() for n in properties.get("controller.listener.names", "").split(",")
    }
    listeners = [item for item in listeners if item[0] not in controller_names]
    if not listeners:
        raise ConfigError("invalid value for listeners: only controller listeners")
    advertised: dict[str, tuple[str, int]] = {}
    if "advertised.listeners" in properties:
        for name, host, port in parse_listeners(properties["advertised.listeners"],
                                                "advertised.listeners"):
            if name not in {n for n, _, _ in listeners}:
                raise ConfigError(
                    f"invalid value for advertised.listeners: {name} is not in listeners"
                )
            advertised[name] = (host, port)
    (name, host, port), *rest = listeners
    if "listeners" in properties:
        top["host"], top["port"] = host, port
    if name in advertised:
        top["advertised_host"], top["advertised_port"] = advertised[name]
    extra = []
    for name, host, port in rest:
        adv_host, adv_port = advertised.get(name, (None, None))
        extra.append(Listener(name, host, port, adv_host, adv_port))
    top["extra_listeners"] = tuple(extra)


def build_config(properties: dict[str, str], **overrides: Any) -> BrokerConfig:
    """A BrokerConfig from Kafka-named properties, then keyword overrides (BrokerConfig fields)."""
    top: dict[str, object] = {}
    log: dict[str, object] = {}
    _apply_listeners(properties, top)
    retention_unit = 0
    ignored = sorted(key for key in properties if key in IGNORED_KAFKA_KEYS)
    if ignored:
        _log.warning("ignored %d Kafka config key(s) that mean nothing to a single minibroker "
                     "node: %s", len(ignored), ", ".join(ignored))
    for key, raw in properties.items():
        if key in ("listeners", "advertised.listeners") or key in IGNORED_KAFKA_KEYS:
            continue
        if key in _RETENTION_UNITS:
            # log.retention.ms wins over .minutes, which wins over .hours (as in Kafka).
            if "log.retention.ms" in properties or (
                retention_unit and _RETENTION_UNITS[key] > retention_unit
            ):
                continue
            try:
                log["retention_ms"] = int(raw) * _RETENTION_UNITS[key]
            except ValueError:
                raise ConfigError(f"invalid value for {key}: {raw!r} is not an integer") from None
            retention_unit = _RETENTION_UNITS[key]
            continue
        if key not in _PROPERTIES:
            known = [*_PROPERTIES, *IGNORED_KAFKA_KEYS, *_RETENTION_UNITS, "listeners"]
            hint = difflib.get_close_matches(key, known, n=1)
            suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ConfigError(f"unknown config key {key!r}{suffix}")
        name, parse, minimum = _PROPERTIES[key]
        try:
            value = parse(raw)  # type: ignore[operator]
        except ValueError as exc:
            raise ConfigError(f"invalid value for {key}: {exc}") from None
        if minimum is not None and isinstance(value, int) and value < minimum:
            raise ConfigError(f"invalid value for {key}: {value} is below the minimum {minimum}")
        if name.startswith("log."):
            log[name[4:]] = value
        else:
            top[name] = value
    static = set(properties)
    for name, value in overrides.items():
        if value is None:
            continue
        static.update(k for k, (field_name, _, _) in _PROPERTIES.items()
                      if field_name in (name, "log." + name))
        if name == "flush":
            log["flush"] = value
        else:
            top[name] = value
    try:
        return BrokerConfig(
            **top, log=dataclasses.replace(LogConfig(), **log), static_keys=frozenset(static)  # type: ignore[arg-type]
        )
    except TypeError as exc:
        raise ConfigError(str(exc)) from None
