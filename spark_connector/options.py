"""The connector's options: parsed and checked once, with errors that name the option.

Spark hands a data source its options with lowercased keys and string values. The names mirror
Spark's Kafka source and sink so that a job moves over by changing ``format("kafka")`` to
``format("minibroker")``:

    bootstrap.servers (or kafka.bootstrap.servers)   host:port[,host:port...]
    subscribe | subscribePattern | assign            what to read (exactly one)
    startingOffsets / endingOffsets                  "earliest" | "latest" | {"t": {"0": 23}}
    startingTimestamp / endingTimestamp              ms since the epoch, for every partition
    startingOffsetsByTimestamp / endingOffsetsByTimestamp   {"t": {"0": 1700000000000}}
    startingOffsetsByTimestampStrategy               error (default) | latest
    maxOffsetsPerTrigger / minOffsetsPerTrigger      streaming: offsets per micro-batch
    maxTriggerDelay                                  streaming: longest wait for minOffsetsPerTrigger
    fetchOffset.numRetries / fetchOffset.retryIntervalMs    retries of offset lookups
    groupIdPrefix / kafka.group.id                   the group id the read's consumers carry
    failOnDataLoss                                   true (default) | false
    includeHeaders                                   false (default) | true
    isolation.level (or kafka.isolation.level)       read_committed (default) | read_uncommitted
    minPartitions / maxRecordsPerPartition           how read ranges are split into Spark tasks
    kafka.<client key>                               passed to our client (client/config.py)
    topic                                            writes: the topic (overrides a topic column)
    transactionalIdPrefix                            writes: prefix of the producers' ids
    progressTopic                                    streaming writes: where sink progress lives

This module does not import pyspark: it is plain parsing, unit-tested without a Spark session.
"""

from __future__ import annotations

import difflib
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from client.config import OPTIONS as CLIENT_OPTIONS
from client.config import admin_config, consumer_config, parse_bootstrap_servers, producer_config
from client.errors import ConfigError
from spark_connector.planning import TopicPartition

FORMAT = "minibroker"

# Offsets in startingOffsets / endingOffsets JSON, as in Spark's Kafka source.
EARLIEST = -2
LATEST = -1

DEFAULT_TRANSACTIONAL_ID_PREFIX = "minibroker-spark"
DEFAULT_PROGRESS_TOPIC = "minibroker-spark-progress"
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000
DEFAULT_POLL_TIMEOUT_MS = 120_000
# How long a reader's first contact waits for a broker before the query fails (minibroker's own
# option): short, so that a broker that is down or a wrong address is said at once.
DEFAULT_CONNECT_TIMEOUT_MS = 10_000
# Spark's defaults for the same options.
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
DEFAULT_FETCH_OFFSET_NUM_RETRIES = 3
DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS = 10
DEFAULT_GROUP_ID_PREFIX = "spark-kafka-source"

# Client settings the connector decides itself: a user value would break its guarantees.
_MANAGED_CLIENT_KEYS = {
    "enable.auto.commit": "reads use no consumer group (offsets live in Spark's checkpoint)",
    "auto.offset.reset": "use startingOffsets / failOnDataLoss",
    "transactional.id": "use transactionalIdPrefix (each task needs its own id)",
    "enable.idempotence": "writes are transactional, which needs idempotence",
}

# Spark itself adds these to a sink's or source's options; they mean nothing to us.
_SPARK_KEYS = frozenset({"path", "checkpointlocation"})

_READ_KEYS = {
    "subscribe": "subscribe",
    "subscribepattern": "subscribePattern",
    "assign": "assign",
    "startingoffsets": "startingOffsets",
    "endingoffsets": "endingOffsets",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "failondataloss": "failOnDataLoss",
    "includeheaders": "includeHeaders",
    "minpartitions": "minPartitions",
    "maxrecordsperpartition": "maxRecordsPerPartition",
    "kafkaconsumer.polltimeoutms": "kafkaConsumer.pollTimeoutMs",
    "startingtimestamp": "startingTimestamp",
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
    "startingoffsetsbytimestampstrategy": "startingOffsetsByTimestampStrategy",
    "endingtimestamp": "endingTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
    "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
    "fetchoffset.numretries": "fetchOffset.numRetries",
    "fetchoffset.retryintervalms": "fetchOffset.retryIntervalMs",
    "groupidprefix": "groupIdPrefix",
    "connecttimeoutms": "connectTimeoutMs",
}
_WRITE_KEYS = {
    "topic": "topic",
    "transactionalidprefix": "transactionalIdPrefix",
    "progresstopic": "progressTopic",
}
# Read options Spark's Kafka sink also accepts (it ignores them; a job often shares one option map
# between its source and its sink). Headers are written whenever the data has a headers column.
_IGNORED_BY_WRITES = frozenset({"includeheaders"})
_COMMON_KEYS = {
    "bootstrap.servers": "bootstrap.servers",
    "isolation.level": "isolation.level",
}
_ALL_KEYS = {**_READ_KEYS, **_WRITE_KEYS, **_COMMON_KEYS}

# Kafka topic names: what Kafka's Topic.validate accepts.
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
# transactional.id / group.id pieces we build: keep them readable and safe.
_ID_PREFIX = re.compile(r"[a-zA-Z0-9._-]{1,100}")


class OptionError(ValueError):
    """A data source option that cannot work; the message names the option."""


# {(topic, partition): offset} or a symbolic "earliest" / "latest" for every partition
OffsetSpec = str | dict[TopicPartition, int]


@dataclass(frozen=True)
class CommonOptions:
    bootstrap_servers: str
    # kafka.<key> settings with the prefix removed, values as given (strings); not in the repr,
    # which Spark may log: they can hold kafka.sasl.password
    client: dict[str, str] = field(default_factory=dict, repr=False)

    def client_config(self, role: str, **managed: Any) -> dict[str, Any]:
        """A client configuration for ``role`` ("consumer", "producer" or "admin"): the user's
        ``kafka.*`` keys that belong to that role, then the connector's own settings."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        for key, value in self.client.items():
            if role in CLIENT_OPTIONS[key].roles:
                conf[key] = value
        conf.update(managed)
        return conf


@dataclass(frozen=True)
class ReadOptions(CommonOptions):
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartition, ...] | None = None
    starting_offsets: OffsetSpec = "earliest"
    ending_offsets: OffsetSpec = "latest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    isolation_level: str = "read_committed"
    min_partitions: int | None = None
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS
    # Timestamps (ms since the epoch) to start or end at: one for every partition, or per
    # partition; they take precedence over starting_offsets / ending_offsets, as in Spark.
    starting_timestamp: int | None = None
    starting_offsets_by_timestamp: dict[TopicPartition, int] | None = None
    # "error": fail when a partition has no record at or after its starting timestamp;
    # "latest": start such a partition at its latest offset.
    starting_timestamp_strategy: str = "error"
    ending_timestamp: int | None = None
    ending_offsets_by_timestamp: dict[TopicPartition, int] | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    fetch_offset_num_retries: int = DEFAULT_FETCH_OFFSET_NUM_RETRIES
    fetch_offset_retry_interval_ms: int = DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS
    # The group id of the read's consumers: kafka.group.id, else "<groupIdPrefix>-<random>".
    # Reads never join the group or commit to it (offsets live in Spark's checkpoint); the id
    # is what the broker sees, e.g. for quotas or ACLs on Apache Kafka.
    group_id: str | None = None
    group_id_prefix: str = DEFAULT_GROUP_ID_PREFIX

    def consumer_config(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            # Larger fetches than the client's defaults: a read task streams one partition range.
            "max.partition.fetch.bytes": 4 * 1024 * 1024,
            "max.poll.records": 10_000,
            # A range ends at data that is already there, so there is nothing to wait for; and
            # closing the consumer waits for its Fetch in flight (the client's default is 500 ms).
            "fetch.max.wait.ms": 50,
        }
        managed = {
            "group.id": self.group_id,
            "isolation.level": self.isolation_level,
            "enable.auto.commit": False,
            # The connector seeks every partition itself and checks for lost data itself.
            "auto.offset.reset": "none",
        }
        conf.update(self.client_config("consumer", **managed))
        return conf

    def topic_matches(self, topic: str) -> bool:
        """For subscribe / subscribePattern: does the source read ``topic``?"""
        if self.subscribe is not None:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return any(t == topic for t, _ in self.assign or ())


@dataclass(frozen=True)
class WriteOptions(CommonOptions):
    topic: str | None = None
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX
    progress_topic: str = DEFAULT_PROGRESS_TOPIC

    def producer_config(self, transactional_id: str) -> dict[str, Any]:
        return self.client_config("producer", **{"transactional.id": transactional_id})

    def admin_config(self) -> dict[str, Any]:
        return self.client_config("admin")


# -- parsing ----------------------------------------------------------------------------------


def _unknown(key: str, allowed: Mapping[str, str]) -> OptionError:
    hint = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.7)
    suffix = f" (did you mean {allowed[hint[0]]!r}?)" if hint else ""
    return OptionError(f"unknown option {key!r} for format {FORMAT!r}{suffix}")


def _split(options: Mapping[str, str], direction: str) -> tuple[dict[str, str], dict[str, str]]:
    """(our options by lowercased key, kafka.* client settings) of a read or a write."""
    own: dict[str, str] = {}
    client: dict[str, str] = {}
    mine = {**_COMMON_KEYS, **(_READ_KEYS if direction == "read" else _WRITE_KEYS)}
    other = _WRITE_KEYS if direction == "read" else _READ_KEYS
    for raw_key, value in options.items():
        key = raw_key.lower()
        if key in _SPARK_KEYS:
            continue
        if value is None:
            raise OptionError(f"option {raw_key!r} has no value")
        value = str(value)
        if key in ("kafka.bootstrap.servers", "kafka.isolation.level"):
            plain = key.removeprefix("kafka.")
            if plain in own and own[plain] != value:
                raise OptionError(f"options {plain!r} and {key!r} disagree; give one of them")
            own[plain] = value
        elif key.startswith("kafka."):
            client[key.removeprefix("kafka.")] = value
        elif direction == "write" and key in _IGNORED_BY_WRITES:
            _bool(own | {key: value}, key, _READ_KEYS[key], False)  # still a checked boolean
        elif key in mine:
            if key in own and own[key] != value:
                raise OptionError(f"options {key!r} and 'kafka.{key}' disagree; give one of them")
            own[key] = value
        elif key in other:
            kind = "write" if direction == "read" else "read"
            raise OptionError(
                f"option {other[key]!r} is a {kind} option; it has no meaning for a {direction}"
            )
        else:
            raise _unknown(key, _ALL_KEYS)
    return own, client


def _check_client_keys(client: dict[str, str], roles: tuple[str, ...]) -> None:
    for key in client:
        if key in _MANAGED_CLIENT_KEYS:
            raise OptionError(f"option 'kafka.{key}' is set by the connector: {_MANAGED_CLIENT_KEYS[key]}")
        option = CLIENT_OPTIONS.get(key)
        if option is None:
            keys = [k for k, o in CLIENT_OPTIONS.items() if set(o.roles) & set(roles)]
            hint = difflib.get_close_matches(key, keys, n=1, cutoff=0.7)
            suffix = f" (did you mean 'kafka.{hint[0]}'?)" if hint else ""
            raise OptionError(f"option 'kafka.{key}' is not a client setting{suffix}")
        if not set(option.roles) & set(roles):
            raise OptionError(
                f"option 'kafka.{key}' is a {' and '.join(option.roles)} setting; "
                f"it has no meaning here"
            )


def _bootstrap(own: dict[str, str]) -> str:
    value = own.get("bootstrap.servers")
    if not value:
        raise OptionError("option 'bootstrap.servers' (or 'kafka.bootstrap.servers') is required")
    try:
        parse_bootstrap_servers(value)
    except ValueError as exc:
        raise OptionError(f"option 'bootstrap.servers': {exc}") from None
    return value


def _bool(own: dict[str, str], key: str, name: str, default: bool) -> bool:
    if key not in own:
        return default
    value = own[key].strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {name!r} must be true or false, not {own[key]!r}")
    return value == "true"


def _positive_int(own: dict[str, str], key: str, name: str) -> int | None:
    if key not in own:
        return None
    try:
        value = int(own[key].strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be a positive integer, not {own[key]!r}") from None
    if value <= 0:
        raise OptionError(f"option {name!r} must be a positive integer, not {own[key]!r}")
    return value


def _int_at_least(own: dict[str, str], key: str, name: str, minimum: int, default: int) -> int:
    if key not in own:
        return default
    try:
        value = int(own[key].strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise OptionError(f"option {name!r} must be an integer >= {minimum}, not {own[key]!r}")
    return value


def _timestamp(own: dict[str, str], key: str, name: str) -> int | None:
    """A timestamp option: milliseconds since the epoch (>= 0)."""
    if key not in own:
        return None
    return _int_at_least(own, key, name, 0, 0)


_DURATION = re.compile(r"(\d+)\s*(us|ms|s|sec|m|min|h|d)?", re.IGNORECASE)
_DURATION_MS = {"us": 0.001, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000,
                "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(value: str, name: str) -> int:
    """Spark's time strings: ``15m``, ``30s``, ``100ms``, ``1h``, ``2d``; a bare number is ms."""
    match = _DURATION.fullmatch(value.strip())
    if not match:
        raise OptionError(f"option {name!r} must be a duration like 15m, 30s or 500ms, not {value!r}")
    return int(int(match.group(1)) * _DURATION_MS[(match.group(2) or "ms").lower()])


def _topic_name(value: str, name: str) -> str:
    if not _TOPIC_NAME.fullmatch(value) or value in (".", ".."):
        raise OptionError(f"option {name!r}: {value!r} is not a valid topic name")
    return value


def _json(value: str, name: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name!r} is not valid JSON ({exc.msg}): {value!r}") from None


def parse_assign(value: str) -> tuple[TopicPartition, ...]:
    """``{"topicA": [0, 1], "topicB": [2]}`` -> sorted (topic, partition) pairs."""
    data = _json(value, "assign")
    if not isinstance(data, dict) or not data:
        raise OptionError(f'option \'assign\' must be a JSON object like {{"topic": [0, 1]}}, not {value!r}')
    pairs = set()
    for topic, partitions in data.items():
        _topic_name(topic, "assign")
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise OptionError(f"option 'assign': partitions of {topic!r} must be a list of integers >= 0")
        pairs.update((topic, p) for p in partitions)
    if not pairs:
        raise OptionError("option 'assign' names no partition")
    return tuple(sorted(pairs))


def parse_offsets(value: str, name: str, allowed: tuple[str, ...]) -> OffsetSpec:
    """``earliest`` / ``latest`` (if in ``allowed``) or ``{"topic": {"0": 23, "1": -2}}``."""
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        if text.lower() not in allowed:
            raise OptionError(f"option {name!r} cannot be {text.lower()!r} here")
        return text.lower()
    if not text.startswith(("{", "[", '"')):
        # A word, not JSON: most likely a misspelt earliest/latest.
        hint = difflib.get_close_matches(text.lower(), allowed, n=1, cutoff=0.5)
        words = " or ".join(repr(a) for a in allowed)
        raise OptionError(
            f"option {name!r} must be {words} or a JSON object like {{\"topic\": {{\"0\": 23}}}}, "
            f"not {value!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
        )
    data = _json(text, name)
    if not isinstance(data, dict) or not data:
        raise OptionError(
            f"option {name!r} must be {' or '.join(map(repr, allowed))} or a JSON object like "
            f'{{"topic": {{"0": 23}}}}, not {value!r}'
        )
    symbolic = {"earliest": EARLIEST, "latest": LATEST}
    allowed_codes = {symbolic[a] for a in allowed}
    result: dict[TopicPartition, int] = {}
    for (topic, number), offset in _per_partition(data, name, "offsets"):
        if offset < 0 and offset not in allowed_codes:
            meaning = {EARLIEST: "earliest", LATEST: "latest"}.get(offset, "a negative offset")
            raise OptionError(f"option {name!r}: {topic}-{number} cannot be {meaning} ({offset})")
        result[(topic, number)] = offset
    return result


def _per_partition(data: dict, name: str, what: str) -> list[tuple[TopicPartition, int]]:
    """The entries of ``{"topic": {"0": n, ...}}`` (``what``: offsets or timestamps), checked:
    topic names, partition numbers >= 0, integer values; each topic maps at least one partition
    when ``what`` is timestamps."""
    entries = []
    for topic, partitions in data.items():
        _topic_name(topic, name)
        if not isinstance(partitions, dict) or (what == "timestamps" and not partitions):
            raise OptionError(f"option {name!r}: {topic!r} must map partition numbers to {what}")
        for partition, value in partitions.items():
            try:
                number = int(partition)
            except ValueError:
                raise OptionError(f"option {name!r}: {partition!r} is not a partition number") from None
            if number < 0 or not isinstance(value, int) or isinstance(value, bool):
                raise OptionError(f"option {name!r}: bad entry {topic}-{partition}: {value!r}")
            entries.append(((topic, number), value))
    return entries


def parse_timestamps(value: str, name: str) -> dict[TopicPartition, int]:
    """``{"topic": {"0": 1700000000000}}``: a timestamp (ms, >= 0) per partition."""
    data = _json(value.strip(), name)
    if not isinstance(data, dict) or not data:
        raise OptionError(
            f'option {name!r} must be a JSON object like {{"topic": {{"0": 1700000000000}}}}, not {value!r}'
        )
    result: dict[TopicPartition, int] = {}
    for (topic, number), timestamp in _per_partition(data, name, "timestamps"):
        if timestamp < 0:
            raise OptionError(f"option {name!r}: bad entry {topic}-{number}: {timestamp!r}")
        result[(topic, number)] = timestamp
    return result


def parse_read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    """Check a read's options (batch or streaming); raises ``OptionError`` naming the option."""
    own, client = _split(options, "read")
    _check_client_keys(client, ("consumer",))
    bootstrap = _bootstrap(own)
    isolation = own.get("isolation.level", "read_committed").strip().lower()
    if isolation not in ("read_committed", "read_uncommitted"):
        raise OptionError(
            f"option 'isolation.level' must be read_committed or read_uncommitted, not {own['isolation.level']!r}"
        )

    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in own]
    if len(chosen) != 1:
        names = ", ".join(_READ_KEYS[k] for k in ("subscribe", "subscribepattern", "assign"))
        got = ", ".join(_READ_KEYS[k] for k in chosen) or "none"
        raise OptionError(f"give exactly one of the options {names} (got: {got})")
    subscribe = pattern = assign = None
    if "subscribe" in own:
        topics = [t.strip() for t in own["subscribe"].split(",") if t.strip()]
        if not topics:
            raise OptionError("option 'subscribe' names no topic")
        subscribe = tuple(sorted({_topic_name(t, "subscribe") for t in topics}))
    elif "subscribepattern" in own:
        pattern = own["subscribepattern"].strip()
        if not pattern:
            raise OptionError("option 'subscribePattern' is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid regular expression: {exc}") from None
    else:
        assign = parse_assign(own["assign"])

    if streaming:
        for key in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if key in own:
                raise OptionError(f"option {_READ_KEYS[key]!r} is for batch reads; a stream has no end")
    else:
        for key in ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"):
            if key in own:
                raise OptionError(f"option {_READ_KEYS[key]!r} is for streaming reads; a batch read has no triggers")
    strategy = own.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            f"option 'startingOffsetsByTimestampStrategy' must be error or latest, not "
            f"{own['startingoffsetsbytimestampstrategy']!r}"
        )
    starting_by_ts = ending_by_ts = None
    if "startingoffsetsbytimestamp" in own:
        starting_by_ts = parse_timestamps(own["startingoffsetsbytimestamp"], "startingOffsetsByTimestamp")
    if "endingoffsetsbytimestamp" in own:
        ending_by_ts = parse_timestamps(own["endingoffsetsbytimestamp"], "endingOffsetsByTimestamp")
    max_delay = DEFAULT_MAX_TRIGGER_DELAY_MS
    if "maxtriggerdelay" in own:
        max_delay = parse_duration_ms(own["maxtriggerdelay"], "maxTriggerDelay")
    prefix = own.get("groupidprefix", DEFAULT_GROUP_ID_PREFIX).strip()
    if not _ID_PREFIX.fullmatch(prefix):
        raise OptionError(f"option 'groupIdPrefix' must be 1-100 characters of [a-zA-Z0-9._-], not {prefix!r}")
    group_id = client.pop("group.id", None)
    if group_id is not None and not group_id.strip():
        raise OptionError("option 'kafka.group.id' must not be empty")
    if group_id is None:
        # One id per source, shared by its tasks (as Spark makes one per query).
        group_id = f"{prefix}-{uuid.uuid4().hex}"

    if streaming:
        starting = parse_offsets(own.get("startingoffsets", "latest"), "startingOffsets", ("earliest", "latest"))
        ending: OffsetSpec = "latest"
    else:
        starting = parse_offsets(own.get("startingoffsets", "earliest"), "startingOffsets", ("earliest",))
        ending = parse_offsets(own.get("endingoffsets", "latest"), "endingOffsets", ("latest",))

    max_per_partition = _positive_int(own, "maxrecordsperpartition", "maxRecordsPerPartition")
    poll_timeout = _positive_int(own, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs")
    opts = ReadOptions(
        bootstrap_servers=bootstrap,
        client=client,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting_offsets=starting,
        ending_offsets=ending,
        max_offsets_per_trigger=_positive_int(own, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
        fail_on_data_loss=_bool(own, "failondataloss", "failOnDataLoss", True),
        include_headers=_bool(own, "includeheaders", "includeHeaders", False),
        isolation_level=isolation,
        min_partitions=_positive_int(own, "minpartitions", "minPartitions"),
        max_records_per_partition=max_per_partition or DEFAULT_MAX_RECORDS_PER_PARTITION,
        poll_timeout_ms=poll_timeout or DEFAULT_POLL_TIMEOUT_MS,
        connect_timeout_ms=_positive_int(own, "connecttimeoutms", "connectTimeoutMs")
        or DEFAULT_CONNECT_TIMEOUT_MS,
        starting_timestamp=_timestamp(own, "startingtimestamp", "startingTimestamp"),
        starting_offsets_by_timestamp=starting_by_ts,
        starting_timestamp_strategy=strategy,
        ending_timestamp=_timestamp(own, "endingtimestamp", "endingTimestamp"),
        ending_offsets_by_timestamp=ending_by_ts,
        min_offsets_per_trigger=_positive_int(own, "minoffsetspertrigger", "minOffsetsPerTrigger"),
        max_trigger_delay_ms=max_delay,
        fetch_offset_num_retries=_int_at_least(
            own, "fetchoffset.numretries", "fetchOffset.numRetries", 0, DEFAULT_FETCH_OFFSET_NUM_RETRIES
        ),
        fetch_offset_retry_interval_ms=_int_at_least(
            own, "fetchoffset.retryintervalms", "fetchOffset.retryIntervalMs", 0,
            DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS,
        ),
        group_id=group_id,
        group_id_prefix=prefix,
    )
    try:
        consumer_config(opts.consumer_config())
    except ConfigError as exc:
        raise OptionError(f"client settings (kafka.*): {exc}") from None
    return opts


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Check a write's options (batch or streaming); raises ``OptionError`` naming the option."""
    own, client = _split(options, "write")
    _check_client_keys(client, ("producer", "admin"))
    bootstrap = _bootstrap(own)
    if "isolation.level" in own:
        raise OptionError("option 'isolation.level' is a read option; writes are always transactional")
    topic = _topic_name(own["topic"].strip(), "topic") if "topic" in own else None
    prefix = own.get("transactionalidprefix", DEFAULT_TRANSACTIONAL_ID_PREFIX).strip()
    if not _ID_PREFIX.fullmatch(prefix):
        raise OptionError(
            f"option 'transactionalIdPrefix' must be 1-100 characters of [a-zA-Z0-9._-], not {prefix!r}"
        )
    progress = _topic_name(own.get("progresstopic", DEFAULT_PROGRESS_TOPIC).strip(), "progressTopic")
    opts = WriteOptions(
        bootstrap_servers=bootstrap,
        client=client,
        topic=topic,
        transactional_id_prefix=prefix,
        progress_topic=progress,
    )
    try:
        producer_config(opts.producer_config(f"{prefix}-check"))
        admin_config(opts.admin_config())
    except ConfigError as exc:
        raise OptionError(f"client settings (kafka.*): {exc}") from None
    return opts


_READ_SELECTORS = ("subscribe", "subscribepattern", "assign")


def check_options(options: Mapping[str, str]) -> None:
    """Raise the ``OptionError`` of the options unless they suit a batch read, a streaming read
    or a write. The error reported is the read's when the options select something to read,
    else the write's."""
    uses = (
        lambda: parse_read_options(options, streaming=False),
        lambda: parse_read_options(options, streaming=True),
        lambda: parse_write_options(options),
    )
    errors = []
    for use in uses:
        try:
            use()
            return
        except OptionError as exc:
            errors.append(exc)
    reading = any(str(key).lower() in _READ_SELECTORS for key in options)
    raise errors[0] if reading else errors[2]
