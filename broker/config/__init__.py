"""Broker configuration: Kafka's property names, read from a ``server.properties``-style file.

Every setting has Kafka's key (``num.partitions``, ``log.segment.bytes``, ...) so that a Kafka user
recognises it; the CLI flags override the file. Bad keys or values raise ``ConfigError`` with a
message naming the key, which the CLI prints as one line.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from broker.config.listeners import Listener, apply_listeners
from broker.config.security import SECURITY_KEYS, SecurityConfig, is_security_key, security_config
from broker.config.values import ConfigError, parse_bool
from broker.log.topic_config import BROKER_KEYS, LogConfig
from protocol.properties import parse_properties

DAY_MS = 24 * 3600 * 1000
_log = logging.getLogger("minibroker.config")


@dataclass(frozen=True)
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 9092
    security_protocol: str = "PLAINTEXT"  # of the first listener
    advertised_host: str | None = None  # what clients are told to connect to; default: host
    advertised_port: int | None = None
    data_dir: Path = Path("data")
    node_id: int = 0
    num_partitions: int = 1
    # Partitions clients may make the broker hold, and ask for in one CreateTopics (issue 36):
    # each is a directory, open files and memory, and start and shutdown work.
    max_partitions: int = 20_000
    max_partitions_per_request: int = 10_000
    auto_create_topics: bool = True
    socket_request_max_bytes: int = 100 * 1024 * 1024
    # Limits on what clients can make the broker hold (issue 10). Kafka's keys; where Kafka's
    # default is unbounded, ours is a bound (noted), so memory stays bounded out of the box.
    queued_max_request_bytes: int = 100 * 1024 * 1024  # Kafka: -1 (unbounded)
    connections_max_idle_ms: int = 600_000
    request_receive_timeout_ms: int = 30_000  # minibroker's: a request must arrive within this
    max_connections: int = 2_147_483_647  # also capped by the open-files limit (RLIMIT_NOFILE)
    max_connections_per_ip: int = 2_147_483_647
    # Issue 36: per-address exceptions ((host or ip, count), Kafka's), and the time a connection
    # of a SASL listener has to authenticate (minibroker's own).
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = ()
    sasl_server_authentication_timeout_ms: int = 30_000
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
    # Kafka's default is 50, which spreads transaction coordinators over a cluster's brokers.
    # Here one broker coordinates every id, and each partition with a record in a group-commit
    # round is one more fdatasync: with 50, concurrent producers (whose ids hash to different
    # partitions) share none of them (bench/README.md, issue 29: 50 producers, durable, broker
    # CPU per transaction 0.86-0.87 ms with 50, 0.65-0.67 with 1). An existing topic keeps its count.
    transaction_state_log_num_partitions: int = 1
    transaction_abort_timed_out_interval_ms: int = 10_000
    # The finalized level of the transaction.version feature (KIP-890 part 2): 2 (the default)
    # lets clients end every transaction with an epoch bump (EndTxn v5, Produce v12); 1 keeps
    # the epoch across transactions (what Kafka 3.x does).
    transaction_version: int = 2
    offsets_topic_num_partitions: int = 50
    # Segment sizes of the compacted internal topics. Kafka's default is 100 MiB; ours is small
    # so that cleaning (which never touches the active segment) keeps the logs, and the replay at
    # start, proportional to the live state: see docs/design.md section 3.1.
    transaction_state_log_segment_bytes: int = 64 * 1024
    offsets_topic_segment_bytes: int = 64 * 1024
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    # Share groups (KIP-932, broker/share/): Kafka's keys and defaults.
    group_share_record_lock_duration_ms: int = 30_000
    group_share_delivery_count_limit: int = 5
    group_share_partition_max_record_locks: int = 2_000
    group_share_session_timeout_ms: int = 45_000
    group_share_heartbeat_interval_ms: int = 5_000
    group_share_max_size: int = 200
    group_share_max_share_sessions: int = 2_000
    share_coordinator_state_topic_num_partitions: int = 1
    # The consumer group protocol (KIP-848): Kafka's defaults.
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_assignors: str = "uniform,range"
    group_consumer_migration_policy: str = "bidirectional"
    group_consumer_assignment_interval_ms: int = 1_000
    # The Streams rebalance protocol (KIP-1071): Kafka's defaults.
    group_streams_heartbeat_interval_ms: int = 5_000
    group_streams_session_timeout_ms: int = 45_000
    group_streams_num_standby_replicas: int = 0
    group_streams_initial_rebalance_delay_ms: int = 3_000
    # The Kafka property names the config file (or a flag) set: DescribeConfigs reports them as
    # STATIC_BROKER_CONFIG, the others as DEFAULT_CONFIG.
    static_keys: frozenset[str] = frozenset()
    # The raw values of the coarser-unit keys given (log.retention.minutes=1, ...: UNIT_KEYS), for
    # DescribeConfigs' synonyms (the effective value is in ``log``).
    unit_values: tuple[tuple[str, str], ...] = ()
    # Listeners after the first (Kafka's ``listeners=A://...,B://...``): e.g. an internal one
    # advertised under a container name and an external one advertised as localhost.
    extra_listeners: tuple[Listener, ...] = ()
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None  # Prometheus text format on http://host:port/metrics
    # Client telemetry (KIP-714): the largest push accepted (Kafka's key), the most client
    # metric series /metrics shows (minibroker's).
    telemetry_max_bytes: int = 1_048_576
    telemetry_export_max_series: int = 20_000
    security: SecurityConfig = field(default_factory=SecurityConfig)

    @property
    def advertised(self) -> tuple[str, int]:
        host = self.advertised_host or self.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return host, self.advertised_port or self.port


def _transaction_version(value: str) -> int:
    if value.strip() not in ("1", "2"):
        raise ValueError("expected 1 or 2")
    return int(value)


def _flush(value: str) -> str:
    if value not in ("always", "never"):
        raise ValueError(f"expected 'always' or 'never', got {value!r}")
    return value


def _ip_overrides(value: str) -> tuple[tuple[str, int], ...]:
    """``host:count,ip:count`` (Kafka's max.connections.per.ip.overrides; the count after the
    last colon, so that IPv6 addresses work)."""
    out = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not host.strip() or not count.strip().isdigit():
            raise ValueError(f"expected host:count, got {item!r}")
        out.append((host.strip().strip("[]"), int(count)))
    return tuple(out)


class Property(NamedTuple):
    """One broker property: where it goes, how it is read, and what it means (the configuration
    reference, docs/configuration.md, is generated from this table by broker/config/reference.py).
    """

    field: str  # BrokerConfig field, or "log.<LogConfig field>"
    parse: Callable[[str], object]
    minimum: int | None  # for integers
    doc: str
    kafka: str = ""  # how Kafka differs: its name or default, "" when the same


_OWN = "minibroker's own"


def _migration_policy(value: str) -> str:
    """group.consumer.migration.policy, case-insensitive as Kafka's validator."""
    policy = value.strip().lower()
    if policy not in ("bidirectional", "upgrade", "downgrade", "disabled"):
        raise ValueError("must be one of bidirectional, upgrade, downgrade, disabled")
    return policy
# Kafka property -> Property. The topic-level defaults (log.cleanup.policy, ...) are added below
# from the topic-config table.
_PROPERTIES: dict[str, Property] = {
    "host.name": Property("host", str, None,
                          "Address of the first listener (0.0.0.0: every interface).",
                          "Kafka: listeners (host.name is its old name)"),
    "port": Property("port", int, 0, "TCP port of the first listener (0: any free port).",
                     "Kafka: listeners (port is its old name)"),
    "advertised.host.name": Property("advertised_host", str, None,
                                     "Host name clients are told to connect to (default: the "
                                     "listener's host, or the machine's name for 0.0.0.0).",
                                     "Kafka: advertised.listeners"),
    "advertised.port": Property("advertised_port", int, 1, "Port clients are told to connect to.",
                                "Kafka: advertised.listeners"),
    "log.dirs": Property("data_dir", Path, None,
                         "The data directory (one: the first of a list is not split)."),
    "log.dir": Property("data_dir", Path, None, "The same as log.dirs."),
    "node.id": Property("node_id", int, 0, "This broker's id in Metadata answers."),
    "broker.id": Property("node_id", int, 0, "The same as node.id."),
    "num.partitions": Property("num_partitions", int, 1,
                               "Partitions of a topic created without a count."),
    "max.partitions": Property("max_partitions", int, 1,
                               "Partitions the broker holds at most (the internal topics not "
                               "counted): CreateTopics, CreatePartitions and auto-creation past "
                               "it fail with POLICY_VIOLATION.",
                               "KIP-578's name, never added to Kafka (no limit there)"),
    "max.partitions.per.request": Property("max_partitions_per_request", int, 1,
                                           "Partitions one CreateTopics may ask for in all; "
                                           "past it every topic of the request fails with "
                                           "POLICY_VIOLATION.",
                                           _OWN + " (Kafka: fixed at 10000)"),
    "auto.create.topics.enable": Property("auto_create_topics", parse_bool, None,
                                          "Metadata requests for an unknown topic create it."),
    "socket.request.max.bytes": Property("socket_request_max_bytes", int, 1024,
                                         "Largest request frame; a bigger one closes the "
                                         "connection."),
    "queued.max.request.bytes": Property("queued_max_request_bytes", int, 1024,
                                         "Broker-wide budget of request bytes being read "
                                         "(requests of 64 KiB or more reserve their size).",
                                         "Kafka default: -1 (unbounded)"),
    "connections.max.idle.ms": Property("connections_max_idle_ms", int, 1,
                                        "Idle connections are closed after this long."),
    "request.receive.timeout.ms": Property("request_receive_timeout_ms", int, 1,
                                           "A request must arrive completely within this time "
                                           "(against slowloris clients).", _OWN),
    "max.connections": Property("max_connections", int, 1,
                                "Connections at once (also kept 128 below the open-files "
                                "limit)."),
    "max.connections.per.ip": Property("max_connections_per_ip", int, 0,
                                       "Connections at once from one address (0 only with "
                                       "max.connections.per.ip.overrides)."),
    "max.connections.per.ip.overrides": Property(
        "max_connections_per_ip_overrides", lambda v: _ip_overrides(v), None,
        "Per-address exceptions to max.connections.per.ip: host:count,ip:count (host names are "
        "resolved at start)."),
    "sasl.server.authentication.timeout.ms": Property(
        "sasl_server_authentication_timeout_ms", int, 1,
        "A connection of a SASL listener that has not authenticated within this time is closed "
        "(what an unauthenticated peer may hold is bounded in time as well as in size).", _OWN),
    "fetch.max.bytes": Property("fetch_max_bytes", int, 1024,
                                "Largest Fetch answer (at least one batch is always sent)."),
    "log.segment.bytes": Property("log.segment_bytes", int, 14,
                                  "Size of one segment file (topic key segment.bytes)."),
    "log.roll.ms": Property("log.segment_ms", int, 1,
                            "Age after which the active segment is rolled (topic key "
                            "segment.ms)."),
    "log.retention.bytes": Property("log.retention_bytes", int, -1,
                                    "Size per partition above which the oldest segments are "
                                    "deleted; -1: no limit (topic key retention.bytes)."),
    "log.retention.ms": Property("log.retention_ms", int, -1,
                                 "Age above which a segment is deleted; -1: no limit (topic key "
                                 "retention.ms). log.retention.minutes and .hours are read too."),
    "log.index.interval.bytes": Property("log.index_interval_bytes", int, 0,
                                         "Bytes between two offset index entries."),
    "message.max.bytes": Property("log.max_message_bytes", int, 0,
                                  "Largest record batch (topic key max.message.bytes)."),
    "log.preallocate": Property("log.preallocate", parse_bool, None,
                                "Zero-fill the active segment ahead of small writes, so that "
                                "their fdatasync needs no metadata update.",
                                "Kafka default: false"),
    "log.flush": Property("log.flush", _flush, None,
                          "always: acks=all is answered after fdatasync and the high watermark "
                          "covers only synced data; never: the page cache only (as --flush).",
                          _OWN + " (Kafka: log.flush.interval.messages/ms, default never)"),
    "log.retention.check.interval.ms": Property("log_retention_check_interval_ms", int, 1,
                                                "How often retention is applied."),
    "log.cleaner.enable": Property("log_cleaner_enable", parse_bool, None,
                                   "Run the log cleaner (compaction)."),
    "log.cleaner.threads": Property("log_cleaner_threads", int, 1,
                                    "Partitions cleaned at once."),
    "log.cleaner.backoff.ms": Property("log_cleaner_backoff_ms", int, 1,
                                       "Sleep of the cleaner when nothing needs cleaning."),
    "log.cleaner.dedupe.buffer.size": Property("log_cleaner_dedupe_buffer_size", int, 1024,
                                               "Memory bound of the cleaner's key map."),
    "log.cleaner.io.max.bytes.per.second": Property("log_cleaner_io_max_bytes_per_second", float,
                                                    None,
                                                    "Bytes read and written per second by the "
                                                    "cleaner (inf: unlimited)."),
    "transaction.state.log.segment.bytes": Property("transaction_state_log_segment_bytes", int,
                                                    14,
                                                    "Segment size of __transaction_state (small, "
                                                    "so that compaction keeps it and the replay "
                                                    "at start small).",
                                                    "Kafka default: 104857600"),
    "offsets.topic.segment.bytes": Property("offsets_topic_segment_bytes", int, 14,
                                            "Segment size of __consumer_offsets (small, as "
                                            "above).", "Kafka default: 104857600"),
    "producer.id.expiration.ms": Property("producer_id_expiration_ms", int, 1,
                                          "Idle producers' idempotence state is forgotten after "
                                          "this long (not while a transaction is open)."),
    "transaction.max.timeout.ms": Property("transaction_max_timeout_ms", int, 1,
                                           "Largest transaction.timeout.ms a producer may ask "
                                           "for."),
    "transactional.id.expiration.ms": Property("transactional_id_expiration_ms", int, 1,
                                               "A transactional id idle this long is forgotten."),
    "transaction.state.log.num.partitions": Property("transaction_state_log_num_partitions", int,
                                                     1,
                                                     "Partitions of __transaction_state (a "
                                                     "transactional id's coordinator partition "
                                                     "is its hash modulo this), fixed when the "
                                                     "topic is created.",
                                                     "ours (Kafka: 50, to spread coordinators "
                                                     "over brokers; here each partition is one "
                                                     "more fdatasync per group-commit round)"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": Property(
        "transaction_abort_timed_out_interval_ms", int, 1,
        "How often timed-out transactions are aborted and idle transactional ids expired."),
    "offsets.topic.num.partitions": Property("offsets_topic_num_partitions", int, 1,
                                             "Partitions of __consumer_offsets."),
    "transaction.version": Property("transaction_version", _transaction_version, None,
                                    "The finalized level of the transaction.version feature: 2 "
                                    "lets clients end every transaction with an epoch bump "
                                    "(KIP-890 part 2), 1 keeps the epoch (Kafka 3.x).",
                                    "Kafka: a feature level set with kafka-features.sh"),
    "group.share.record.lock.duration.ms": Property(
        "group_share_record_lock_duration_ms", int, 1000,
        "How long a share consumer holds the records it acquired before they are delivered"
        " again."),
    "group.share.delivery.count.limit": Property(
        "group_share_delivery_count_limit", int, 2,
        "Deliveries of a record to share consumers before it is archived."),
    "group.share.partition.max.record.locks": Property(
        "group_share_partition_max_record_locks", int, 100,
        "Records in flight (acquired and not yet finished) per share partition."),
    "group.share.session.timeout.ms": Property(
        "group_share_session_timeout_ms", int, 1,
        "A share-group member without a heartbeat for this long is removed."),
    "group.share.heartbeat.interval.ms": Property(
        "group_share_heartbeat_interval_ms", int, 1,
        "The heartbeat interval share-group members are told."),
    "group.share.max.size": Property("group_share_max_size", int, 1,
                                     "Members of one share group at most."),
    "group.share.max.share.sessions": Property(
        "group_share_max_share_sessions", int, 1, "Share sessions the broker keeps at most."),
    "share.coordinator.state.topic.num.partitions": Property(
        "share_coordinator_state_topic_num_partitions", int, 1,
        "Partitions of __share_group_state when it is created.", "Kafka's default is 50"),
    "group.min.session.timeout.ms": Property("group_min_session_timeout_ms", int, 0,
                                             "Smallest session timeout a member may ask for."),
    "group.max.session.timeout.ms": Property("group_max_session_timeout_ms", int, 0,
                                             "Largest session timeout a member may ask for."),
    "group.initial.rebalance.delay.ms": Property("group_initial_rebalance_delay_ms", int, 0,
                                                 "How long a new group waits for more members "
                                                 "before its first rebalance."),
    "group.consumer.heartbeat.interval.ms": Property(
        "group_consumer_heartbeat_interval_ms", int, 1,
        "How often members of consumer-protocol groups (KIP-848) heartbeat."),
    "group.consumer.session.timeout.ms": Property(
        "group_consumer_session_timeout_ms", int, 1,
        "How long a consumer-protocol group member may go without a heartbeat before it is "
        "removed."),
    "group.consumer.assignors": Property(
        "group_consumer_assignors", str, None,
        "The server-side assignors of consumer-protocol groups, the default first (uniform, "
        "range)."),
    "group.consumer.assignment.interval.ms": Property(
        "group_consumer_assignment_interval_ms", int, 0,
        "The least time between two target assignments of a consumer-protocol group (KIP-1263): "
        "changes in between move the group epoch, and the next heartbeat after the interval "
        "computes the target. 0: at every change."),
    "group.consumer.migration.policy": Property(
        "group_consumer_migration_policy", _migration_policy, None,
        "Whether a classic group with members becomes a consumer-protocol group when a member "
        "joins with the consumer protocol (upgrade), and back when its last such member leaves "
        "(downgrade): bidirectional, upgrade, downgrade or disabled. Empty groups change "
        "either way always."),
    "group.streams.heartbeat.interval.ms": Property(
        "group_streams_heartbeat_interval_ms", int, 1,
        "How often members of streams groups (KIP-1071) heartbeat."),
    "group.streams.session.timeout.ms": Property(
        "group_streams_session_timeout_ms", int, 1,
        "How long a streams group member may go without a heartbeat before it is removed."),
    "group.streams.num.standby.replicas": Property(
        "group_streams_num_standby_replicas", int, 0,
        "Standby replicas of each stateful task in streams groups."),
    "group.streams.initial.rebalance.delay.ms": Property(
        "group_streams_initial_rebalance_delay_ms", int, 0,
        "How long a new streams group waits for more members before its first assignment."),
    "metrics.port": Property("metrics_port", int, 0,
                             "Serve Prometheus metrics on http://metrics.host:PORT/metrics "
                             "(unset: no metrics are counted; as --metrics-port).", _OWN),
    "metrics.host": Property("metrics_host", str, None, "Address of the metrics listener.",
                             _OWN),
    "telemetry.max.bytes": Property(
        "telemetry_max_bytes", int, 1,
        "The largest client metrics push (KIP-714) accepted, compressed and decompressed."),
    "telemetry.export.max.series": Property(
        "telemetry_export_max_series", int, 0,
        "The most client metric series (pushed by clients, KIP-714) served on /metrics; the "
        "clients that pushed least recently are dropped first.", _OWN),
}

# Kafka keys that are valid in a real server.properties but mean nothing to a single node without
# replication, ZooKeeper, KRaft or SASL: accepted with one warning line each.
IGNORED_KAFKA_KEYS = frozenset({
    "process.roles", "controller.quorum.voters", "controller.quorum.bootstrap.servers",
    "controller.quorum.election.timeout.ms", "controller.quorum.fetch.timeout.ms",
    "controller.quorum.election.backoff.max.ms", "controller.quorum.request.timeout.ms",
    "controller.quorum.retry.backoff.ms", "metadata.log.segment.bytes",
    "controller.listener.names", "inter.broker.listener.name",
    "zookeeper.connect", "zookeeper.connection.timeout.ms", "zookeeper.session.timeout.ms",
    "num.network.threads", "num.io.threads", "num.replica.fetchers", "background.threads",
    "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "queued.max.requests",
    "num.recovery.threads.per.data.dir", "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
    "default.replication.factor", "min.insync.replicas", "unclean.leader.election.enable",
    "delete.topic.enable", "log.flush.interval.messages", "log.flush.interval.ms",
    "log.flush.scheduler.interval.ms",
    "replica.lag.time.max.ms", "auto.leader.rebalance.enable", "confluent.support.metrics.enable",
    "metadata.log.dir", "security.inter.broker.protocol",
    "sasl.mechanism.inter.broker.protocol",
    "group.coordinator.rebalance.protocols", "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
})
# Kafka's broker keys that set one value in several units, finest first: the first one given
# wins (log.retention.ms over .minutes over .hours). Only the coarsest has a default of its own
# (Kafka's: 168 hours); DescribeConfigs lists the family as each other's synonyms.
UNIT_KEYS: dict[str, tuple[tuple[str, int], ...]] = {
    "log.retention.ms": (("log.retention.ms", 1), ("log.retention.minutes", 60_000),
                         ("log.retention.hours", 3_600_000)),
    "log.roll.ms": (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
}
UNIT_DEFAULTS = {"log.retention.hours": "168", "log.roll.hours": "168"}
# Coarser key -> (its ms key, milliseconds per unit).
_COARSE_UNITS = {name: (ms_key, unit) for ms_key, family in UNIT_KEYS.items()
                 for name, unit in family if unit != 1}

# Broker defaults of the remaining topic configs (cleanup policy, compaction, timestamp type):
# parsed and checked by the topic-config table itself.
for _key, _definition in BROKER_KEYS.items():
    _PROPERTIES.setdefault(_key, Property("log." + _definition.field, _definition.parse, None,
                                          f"{_definition.doc.rstrip('.')} (topic key {_definition.key})."))


def property_values(config: BrokerConfig) -> dict[str, object]:
    """Every broker property this broker reads, with its current value (DescribeConfigs)."""
    values: dict[str, object] = {}
    for key, prop in _PROPERTIES.items():
        name = prop.field
        target = config.log if name.startswith("log.") else config
        values[key] = getattr(target, name[4:] if name.startswith("log.") else name)
    given = dict(config.unit_values)
    for key in _COARSE_UNITS:  # their own value as given (or Kafka's default), not the effective
        raw = given.get(key, UNIT_DEFAULTS.get(key))
        values[key] = None if raw is None else int(raw)
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


# The keys read by apply_listeners and security_config, for the configuration reference:
# key -> (default as written in a properties file, meaning, how Kafka differs).
OTHER_KEYS: dict[str, tuple[str, str, str]] = {
    "listeners": ("PLAINTEXT://127.0.0.1:9092",
                  "NAME://host:port,...: the first is host.name/port, each other one is served "
                  "as well; controller listeners are skipped.", ""),
    "advertised.listeners": ("(the listeners)",
                             "NAME://host:port,...: what clients of each listener are told.", ""),
    "listener.security.protocol.map": ("PLAINTEXT:PLAINTEXT,SSL:SSL,...",
                                       "NAME:PROTOCOL,...: the protocol each listener speaks "
                                       "(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).", ""),
    "log.retention.minutes": ("", "log.retention.ms in minutes (log.retention.ms wins).", ""),
    "log.retention.hours": ("168", "log.retention.ms in hours (.minutes and .ms win).", ""),
    "log.roll.hours": ("168", "log.roll.ms in hours (log.roll.ms wins).", ""),
    "ssl.keystore.location": ("", "PEM file with the broker's private key and certificate chain "
                              "(TLS listeners).", "Kafka default type: JKS"),
    "ssl.keystore.type": ("PEM", "Only PEM is read.", "Kafka default: JKS"),
    "ssl.keystore.password": ("", "Password of the private key (if ssl.key.password is unset).",
                              ""),
    "ssl.key.password": ("", "Password of the private key.", ""),
    "ssl.truststore.location": ("", "PEM file with the CAs that sign client certificates (mTLS).",
                                "Kafka default type: JKS"),
    "ssl.truststore.type": ("PEM", "Only PEM is read.", "Kafka default: JKS"),
    "ssl.truststore.password": ("", "Accepted; a PEM truststore has no password.", ""),
    "ssl.client.auth": ("none", "none, requested or required: whether a client certificate is "
                        "asked for (mTLS); it makes the principal User:<subject>.", ""),
    "ssl.principal.mapping.rules": ("DEFAULT", "RULE:pattern/replacement/[LU],...,DEFAULT: "
                                    "Kafka's rules from a client certificate's subject (RFC "
                                    "2253) to the principal's name; DEFAULT keeps the subject.",
                                    ""),
    "ssl.endpoint.identification.algorithm": ("https", "Accepted (a broker does not verify "
                                              "client host names).", ""),
    "sasl.enabled.mechanisms": ("PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                                "SASL mechanisms offered on SASL listeners.", "Kafka default: GSSAPI"),
    "[listener.name.NAME.][MECHANISM.]sasl.jaas.config": (
        "", "A PlainLoginModule's user_NAME=\"password\" options are the PLAIN users; SCRAM "
        "users are kept in data/scram-credentials.json (minibroker users add).", ""),
    "connection.failed.authentication.delay.ms": ("100", "Delay before a failed authentication "
                                                  "is answered.", ""),
    "authorizer.class.name": ("", "Any value turns ACLs on (the class is not loaded).", ""),
    "super.users": ("", "User:NAME;User:NAME...: principals allowed everything.", ""),
    "allow.everyone.if.no.acl.found": ("false", "With ACLs on, a resource with no ACL at all is "
                                       "open to everyone.", ""),
}


def build_config(properties: dict[str, str], **overrides: Any) -> BrokerConfig:
    """A BrokerConfig from Kafka-named properties, then keyword overrides (BrokerConfig fields)."""
    top: dict[str, object] = {}
    log: dict[str, object] = {}
    controllers = apply_listeners(properties, top)
    top["security"] = security_config(properties)
    units: dict[str, int] = {}  # ms key -> the unit of the value taken so far
    unit_values: list[tuple[str, str]] = []
    ignored = sorted(key for key in properties if key in IGNORED_KAFKA_KEYS)
    ignored += [f"the {name} listener" for name in controllers]
    if ignored:
        # One line for all of them (a KRaft file's process.roles, controller.quorum.*, its
        # controller listeners, replication factors ...).
        _log.warning("ignored %d Kafka config key(s) that mean nothing to a single minibroker "
                     "node without a controller quorum: %s", len(ignored), ", ".join(ignored))
    for key, raw in properties.items():
        if (key in ("listeners", "advertised.listeners", "listener.security.protocol.map")
                or key in IGNORED_KAFKA_KEYS or is_security_key(key)):
            continue
        if key in _COARSE_UNITS:
            ms_key, unit = _COARSE_UNITS[key]
            try:
                count = int(raw)
            except ValueError:
                raise ConfigError(f"invalid value for {key}: {raw!r} is not an integer") from None
            unit_values.append((key, raw.strip()))
            # The ms key wins over .minutes, which wins over .hours (as in Kafka).
            if ms_key in properties or units.get(ms_key, unit) < unit:
                continue
            field_name = _PROPERTIES[ms_key].field[4:]
            log[field_name] = count * unit if count >= 0 else -1
            units[ms_key] = unit
            continue
        if key not in _PROPERTIES:
            known = [*_PROPERTIES, *IGNORED_KAFKA_KEYS, *_COARSE_UNITS, *SECURITY_KEYS,
                     "listeners", "listener.security.protocol.map"]
            hint = difflib.get_close_matches(key, known, n=1)
            suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ConfigError(f"unknown config key {key!r}{suffix}")
        name, parse, minimum = _PROPERTIES[key][:3]
        try:
            value = parse(raw)
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
        static.update(k for k, prop in _PROPERTIES.items()
                      if prop.field in (name, "log." + name))
        if name == "flush":
            log["flush"] = value
        else:
            top[name] = value
    try:
        return BrokerConfig(
            **top, log=dataclasses.replace(LogConfig(), **log), static_keys=frozenset(static),  # type: ignore[arg-type]
            unit_values=tuple(unit_values),
        )
    except TypeError as exc:
        raise ConfigError(str(exc)) from None
