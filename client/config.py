"""Kafka-style configuration dicts for the producer, the consumer and the admin client.

Keys and meanings are Kafka's (``bootstrap.servers``, ``enable.idempotence``, ...). Values may be
given as Python values or as the strings a properties file holds (``"true"``, ``"all"``, ``"5"``).
``producer_config`` / ``consumer_config`` / ``admin_config`` check every key and value and return a
``ClientConfig`` holding every key of that role, defaults filled in.

Rules (the seeds quote the Java client's ``ConfigException`` messages; ours are the same):

- An unknown key is an error, with a "did you mean" hint; a key of another role (``group.id`` given
  to a producer) is an error naming the role it belongs to.
- The idempotent producer needs ``acks=all``, ``retries > 0`` and
  ``max.in.flight.requests.per.connection <= 5``. When ``enable.idempotence`` is set explicitly (or
  implied by ``transactional.id``), a conflicting explicit value is an error; when it is left unset
  a conflicting explicit value turns idempotence off (Kafka 3.x behaviour), and unset values take
  the defaults idempotence needs (acks=all, retries=MAX_INT, in-flight 5).
- ``transactional.id`` requires idempotence: ``enable.idempotence=false`` beside it is an error.
- librdkafka's names of the same settings (``queue.buffering.max.ms`` for ``linger.ms``,
  ``metadata.broker.list``, ``message.timeout.ms``, ``auto.offset.reset=smallest``...) are
  accepted; librdkafka settings without an equal here are refused naming what to use instead.
- A Java client's properties (what Kafka's tools read with ``--command-config``) work too: the
  username and password of a PlainLoginModule or ScramLoginModule ``sasl.jaas.config``, PEM trust
  and key stores (``ssl.truststore.type=PEM``, ``ssl.truststore.location``,
  ``ssl.keystore.location`` holding the key and chain); what cannot be honoured (JKS, PKCS12,
  other login modules, inline PEM) is refused naming the Java key.
- ``delivery.timeout.ms >= linger.ms + request.timeout.ms``; a consumer's
  ``heartbeat.interval.ms < session.timeout.ms``; ``enable.auto.commit=true`` needs a group.id.
"""

from __future__ import annotations

import difflib
import importlib.util
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from client.errors import ConfigError
from protocol.jaas import JaasError, parse_one, shown_module
from protocol.records import codec_import, missing_codec

INT32_MAX = 2**31 - 1

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PRODUCER = "producer"
CONSUMER = "consumer"
ADMIN = "admin"
_ALL = (PRODUCER, CONSUMER, ADMIN)

# The messages the seeds quote (Java's ProducerConfig / KafkaProducer).
MSG_ACKS = (
    "Must set acks to all in order to use the idempotent producer. "
    "Otherwise we cannot guarantee idempotence."
)
MSG_RETRIES = "Must set retries to non-zero when using the idempotent producer."
MSG_MAX_IN_FLIGHT = (
    "Must set max.in.flight.requests.per.connection to at most 5 to use the idempotent producer."
)
MSG_TRANSACTIONAL_ID = "Cannot set a transactional.id without also enabling idempotence."
MAX_IN_FLIGHT_FOR_IDEMPOTENCE = 5


# -- value parsers: (raw value) -> normalised value, raising ValueError with a reason ----------


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("expected true or false")


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ValueError("expected an integer")


def _int_range(low: int, high: int = INT32_MAX) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        number = _int(value)
        if not low <= number <= high:
            raise ValueError(
                f"value must be at least {low}"
                if high == INT32_MAX
                else f"value must be in [{low}, {high}]"
            )
        return number

    return parse


def _choice(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if isinstance(value, str) and value.strip().lower() in choices:
            return value.strip().lower()
        raise ValueError(f"expected one of {', '.join(choices)}")

    return parse


def _upper_choice(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if isinstance(value, str) and value.strip().upper() in choices:
            return value.strip().upper()
        raise ValueError(f"expected one of {', '.join(choices)}")

    return parse


def _endpoint_check(value: Any) -> str:
    if value in ("", None):  # the Java client's way of turning the check off
        return "none"
    return _choice("https", "none")(value)


def _optional_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    raise ValueError("expected a string")


def _str(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise ValueError("expected a string")


def _acks(value: Any) -> int:
    """``all`` / ``-1`` -> -1, ``0``, ``1``."""
    text = str(value).strip().lower() if not isinstance(value, bool) else ""
    if text in ("all", "-1"):
        return -1
    if text in ("0", "1"):
        return int(text)
    raise ValueError("expected all, -1, 0 or 1")


def parse_bootstrap_servers(value: Any) -> tuple[tuple[str, int], ...]:
    """``"host:port,host:port"`` (or a list of such strings) -> ``((host, port), ...)``."""
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, list | tuple):
        items = [str(v).strip() for v in value]
    else:
        raise ValueError("expected host:port[,host:port...]")
    servers = []
    for item in items:
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host:
            raise ValueError(f"{item!r} is not host:port")
        try:
            number = int(port)
        except ValueError:
            raise ValueError(f"{item!r} has a bad port") from None
        if not 0 < number < 65536:
            raise ValueError(f"{item!r} has a bad port")
        servers.append((host.strip("[]"), number))
    if not servers:
        raise ValueError("no host:port given")
    return tuple(servers)


def _compression(value: Any) -> str:
    codec = _choice("none", "gzip", "snappy", "lz4", "zstd")(value)
    needed = codec_import(codec)
    if needed is not None and importlib.util.find_spec(needed[0].split(".")[0]) is None:
        raise ValueError(missing_codec(codec))
    return codec


def _serializer(value: Any) -> Callable[[Any], Any] | None:
    if value is None or callable(value):
        return value
    raise ValueError("expected a callable taking the key or value and returning bytes")


@dataclass(frozen=True)
class Option:
    key: str
    parse: Callable[[Any], Any]
    default: Any
    roles: tuple[str, ...]
    doc: str


_OPTIONS: tuple[Option, ...] = (
    # -- common -----------------------------------------------------------------------------------
    Option(
        "bootstrap.servers", parse_bootstrap_servers, None, _ALL, "host:port list to start from"
    ),
    Option("client.id", _str, "", _ALL, "sent in every request header"),
    Option("request.timeout.ms", _int_range(1), 30_000, _ALL, "how long to wait for a response"),
    Option("retry.backoff.ms", _int_range(0), 100, _ALL, "pause before retrying a request"),
    Option("retry.backoff.max.ms", _int_range(0), 1000, _ALL,
           "longest pause between retries (the pause doubles from retry.backoff.ms)"),
    Option("reconnect.backoff.ms", _int_range(0), 50, _ALL, "pause before reconnecting"),
    Option(
        "metadata.max.age.ms", _int_range(0), 300_000, _ALL, "refresh metadata at least this often"
    ),
    Option(
        "socket.connection.setup.timeout.ms", _int_range(1), 10_000, _ALL, "TCP connect timeout"
    ),
    # -- security (librdkafka's names; docs/security.md) -------------------------------------------
    Option("security.protocol", _upper_choice(*SECURITY_PROTOCOLS), "PLAINTEXT", _ALL,
           "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
    Option("sasl.mechanism", _upper_choice(*SASL_MECHANISMS), "PLAIN", _ALL,
           "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
    Option("sasl.username", _optional_str, None, _ALL, "SASL user"),
    Option("sasl.password", _optional_str, None, _ALL, "SASL password (never shown)"),
    Option("ssl.ca.location", _optional_str, None, _ALL,
           "PEM CA certificates for the broker's (default: the system's)"),
    Option("ssl.certificate.location", _optional_str, None, _ALL,
           "client certificate (PEM; may hold the key too) for mTLS"),
    Option("ssl.key.location", _optional_str, None, _ALL, "the client certificate's key (PEM)"),
    Option("ssl.key.password", _optional_str, None, _ALL, "the key's password (never shown)"),
    Option("ssl.endpoint.identification.algorithm", _endpoint_check, "https", _ALL,
           "https: the broker's certificate must name its host; none: do not check"),
    # -- producer ---------------------------------------------------------------------------------
    Option("acks", _acks, -1, (PRODUCER,), "all/-1, 0 or 1"),
    Option("retries", _int_range(0), INT32_MAX, (PRODUCER,), "retries of a failed batch"),
    Option("enable.idempotence", _bool, True, (PRODUCER,), "producer id + sequence numbers"),
    Option(
        "max.in.flight.requests.per.connection",
        _int_range(1),
        5,
        (PRODUCER,),
        "unanswered Produce requests per connection",
    ),
    Option("transactional.id", _optional_str, None, (PRODUCER,), "enables transactions"),
    Option(
        "transaction.timeout.ms", _int_range(1), 60_000, (PRODUCER,), "coordinator aborts after"
    ),
    Option("linger.ms", _int_range(0), 5, (PRODUCER,), "wait this long to fill a batch"),
    Option("batch.size", _int_range(0), 262_144, (PRODUCER,), "bytes per partition batch"),
    Option("compression.type", _compression, "none", (PRODUCER,), "none, gzip (snappy, lz4, zstd)"),
    Option("delivery.timeout.ms", _int_range(1), 120_000, (PRODUCER,), "give up on a record after"),
    Option("max.request.size", _int_range(1), 1_048_576, (PRODUCER,), "largest Produce request"),
    Option("buffer.memory", _int_range(1), 33_554_432, (PRODUCER,), "send() blocks above this"),
    Option("max.block.ms", _int_range(0), 60_000, (PRODUCER,), "longest send()/metadata block"),
    Option("key.serializer", _serializer, None, (PRODUCER,), "callable: key -> bytes (not None)"),
    Option("value.serializer", _serializer, None, (PRODUCER,), "callable: value -> bytes"),
    # -- consumer ---------------------------------------------------------------------------------
    Option("group.id", _optional_str, None, (CONSUMER,), "consumer group (subscribe, commits)"),
    Option("group.protocol", _choice("classic", "consumer"), "classic", (CONSUMER,),
           "classic (JoinGroup/SyncGroup) or consumer (KIP-848: the broker assigns)"),
    Option("group.remote.assignor", _optional_str, None, (CONSUMER,),
           "group.protocol=consumer: the broker-side assignor (uniform, range)"),
    Option(
        "isolation.level",
        _choice("read_committed", "read_uncommitted"),
        "read_committed",
        (CONSUMER,),
        "hide aborted and open transactions",
    ),
    Option("enable.auto.commit", _bool, True, (CONSUMER,), "commit positions periodically"),
    Option("auto.commit.interval.ms", _int_range(0), 5_000, (CONSUMER,), "auto-commit period"),
    Option(
        "auto.offset.reset",
        _choice("earliest", "latest", "none"),
        "latest",
        (CONSUMER,),
        "where to start without a committed offset",
    ),
    Option("max.poll.records", _int_range(1), 500, (CONSUMER,), "records per poll()"),
    Option("session.timeout.ms", _int_range(1), 45_000, (CONSUMER,), "group session timeout"),
    Option("heartbeat.interval.ms", _int_range(1), 3_000, (CONSUMER,), "group heartbeat period"),
    Option("max.poll.interval.ms", _int_range(1), 300_000, (CONSUMER,), "rebalance timeout"),
    Option("fetch.min.bytes", _int_range(0), 1, (CONSUMER,), "broker waits for this much data"),
    Option("fetch.max.wait.ms", _int_range(0), 500, (CONSUMER,), "longest broker-side fetch wait"),
    Option("fetch.max.bytes", _int_range(0), 52_428_800, (CONSUMER,), "bytes per Fetch response"),
    Option(
        "max.partition.fetch.bytes", _int_range(0), 1_048_576, (CONSUMER,), "bytes per partition"
    ),
    Option(
        "partition.assignment.strategy",
        _choice("range", "roundrobin"),
        "range",
        (CONSUMER,),
        "assignor used when this member leads the group",
    ),
    Option("check.crcs", _bool, True, (CONSUMER,), "verify each batch's CRC-32C"),
)

OPTIONS: dict[str, Option] = {o.key: o for o in _OPTIONS}

# librdkafka (confluent-kafka) names of the same settings: accepted as they are.
LIBRDKAFKA_ALIASES: dict[str, str] = {
    "metadata.broker.list": "bootstrap.servers",
    "sasl.mechanisms": "sasl.mechanism",
    # The Java client's names (PEM stores) of the same TLS settings.
    "ssl.truststore.location": "ssl.ca.location",
    "ssl.keystore.location": "ssl.certificate.location",
    "queue.buffering.max.ms": "linger.ms",
    "message.timeout.ms": "delivery.timeout.ms",
    "request.required.acks": "acks",
    "message.send.max.retries": "retries",
    "compression.codec": "compression.type",
    "message.max.bytes": "max.request.size",
    "fetch.wait.max.ms": "fetch.max.wait.ms",
    "fetch.message.max.bytes": "max.partition.fetch.bytes",
    "max.in.flight": "max.in.flight.requests.per.connection",
}

# librdkafka settings with no equal here: refused, naming what to use instead.
LIBRDKAFKA_REFUSED: dict[str, str] = {
    "queue.buffering.max.kbytes": "use buffer.memory (in bytes)",
    "queue.buffering.max.messages": "the buffer is bounded in bytes: use buffer.memory",
    "batch.num.messages": "batches are bounded in bytes: use batch.size",
    "socket.timeout.ms": "use request.timeout.ms",
    "enable.auto.offset.store": "commit explicit offsets with commit(offsets) instead",
    "enable.partition.eof": "compare position() with end_offsets() instead",
    "statistics.interval.ms": "no statistics callback; use the broker's metrics",
    "debug": "use Python logging (loggers client.*)",
    "api.version.request": "versions are always negotiated with ApiVersions",
    "topic.metadata.refresh.interval.ms": "use metadata.max.age.ms",
    "reconnect.backoff.max.ms": "use reconnect.backoff.ms",
    "queued.min.messages": "prefetching is bounded by max.partition.fetch.bytes",
    "queued.max.messages.kbytes": "prefetching is bounded by max.partition.fetch.bytes",
    "dr_cb": "pass on_delivery to send()",
    "dr_msg_cb": "pass on_delivery to send()",
    "error_cb": "errors are raised by the calls (and delivery futures)",
    "on_delivery": "pass on_delivery to send()",
}

# The Java client's settings with no equal here (a Kafka client.properties may hold them):
# refused, named as Java keys. sasl.jaas.config and the PEM store types are read by _java().
JAVA_REFUSED: dict[str, str] = {
    "ssl.truststore.certificates": "put the PEM certificates in a file: ssl.truststore.location",
    "ssl.keystore.key": "put the PEM key and chain in a file: ssl.keystore.location",
    "ssl.keystore.certificate.chain": "put the PEM key and chain in a file: "
                                      "ssl.keystore.location",
    "sasl.login.callback.handler.class": "only PLAIN and SCRAM logins are supported",
    "sasl.client.callback.handler.class": "only PLAIN and SCRAM logins are supported",
    "sasl.kerberos.service.name": "GSSAPI (Kerberos) is not supported",
}
_LOGIN_MODULES = ("PlainLoginModule", "ScramLoginModule")


def _java_refusal(key: str, value: Any, reason: str) -> ConfigError:
    shown = "..." if "password" in key or key.startswith("ssl.keystore.") else value
    return ConfigError(f"{key}={shown} (a Java client setting) is not supported: {reason}")


def _java(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A Java client's properties (as Kafka's tools read them with --command-config) in our
    terms: the user and password of a PLAIN or SCRAM ``sasl.jaas.config``, PEM trust and key
    stores; what cannot be honoured raises ConfigError naming the Java key."""
    result = dict(conf)
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        if key in result:
            value = result.pop(key)
            if str(value).strip().upper() != "PEM":
                raise _java_refusal(key, value, "only PEM files are read (convert the store "
                                               "with keytool and openssl)")
    result.pop("ssl.truststore.password", None)  # a PEM truststore has none
    if "ssl.keystore.password" in result:
        password = result.pop("ssl.keystore.password")
        result.setdefault("ssl.key.password", password)
    if "sasl.jaas.config" in result:
        # Read as Kafka's JaasConfig reads it (protocol/jaas.py); errors never show a value.
        try:
            entry = parse_one(str(result.pop("sasl.jaas.config")))
        except JaasError as exc:
            raise ConfigError(f"sasl.jaas.config: {exc}") from None
        module = shown_module(entry.module)
        if module not in _LOGIN_MODULES:
            raise _java_refusal("sasl.jaas.config", module,
                                "only org.apache.kafka.common.security.plain.PlainLoginModule "
                                "and ...scram.ScramLoginModule are supported")
        options = entry.options
        if "username" not in options or "password" not in options:
            raise ConfigError(f"sasl.jaas.config: {module} needs username=\"...\" and "
                              "password=\"...\"")
        for ours, theirs in (("sasl.username", "username"), ("sasl.password", "password")):
            if ours in result and result[ours] != options[theirs]:
                raise ConfigError(f"sasl.jaas.config and {ours} disagree: give only one")
            result[ours] = options[theirs]
    return result

SECRET_KEYS = frozenset({"sasl.password", "ssl.key.password"})

# librdkafka spellings of auto.offset.reset values.
_OFFSET_RESET_ALIASES = {
    "smallest": "earliest",
    "beginning": "earliest",
    "largest": "latest",
    "end": "latest",
    "error": "none",
}


class ClientConfig(Mapping[str, Any]):
    """A validated configuration: every key of the role, defaults filled in. Read-only.

    ``explicit`` holds the keys the caller set (some rules depend on it).
    """

    def __init__(self, role: str, values: dict[str, Any], explicit: frozenset[str]) -> None:
        self.role = role
        self._values = values
        self.explicit = explicit

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        shown = {k: "******" if k in SECRET_KEYS and v is not None else v
                 for k, v in self._values.items()}
        return f"ClientConfig({self.role}, {shown!r})"


def _parse(role: str, conf: Mapping[str, Any] | None) -> tuple[dict[str, Any], frozenset[str]]:
    if conf is None:
        conf = {}
    if not isinstance(conf, Mapping):
        raise ConfigError(f"configuration must be a dict of Kafka keys, not {type(conf).__name__}")
    role_keys = [o.key for o in _OPTIONS if role in o.roles]
    values: dict[str, Any] = {}
    conf = _java(conf)
    given = set(conf)
    for key, raw in conf.items():
        if key in JAVA_REFUSED:
            raise _java_refusal(key, raw, JAVA_REFUSED[key])
        if key in LIBRDKAFKA_REFUSED:
            raise ConfigError(
                f"{key!r} (a librdkafka setting) is not supported: {LIBRDKAFKA_REFUSED[key]}"
            )
        if key in LIBRDKAFKA_ALIASES:
            alias, key = key, LIBRDKAFKA_ALIASES[key]
            if key in given:
                raise ConfigError(f"{alias!r} and {key!r} are the same setting: give only one")
        if key == "auto.offset.reset" and isinstance(raw, str):
            raw = _OFFSET_RESET_ALIASES.get(raw.strip().lower(), raw)
        option = OPTIONS.get(key) if isinstance(key, str) else None
        if option is None:
            hint = difflib.get_close_matches(str(key), role_keys, n=1, cutoff=0.6)
            suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ConfigError(f"Unknown {role} configuration key {key!r}{suffix}")
        if role not in option.roles:
            owners = " and ".join(option.roles)
            raise ConfigError(f"{key!r} is a {owners} setting, not a {role} setting")
        try:
            values[key] = option.parse(raw)
        except ValueError as exc:
            shown = "******" if key in SECRET_KEYS else repr(raw)
            raise ConfigError(f"Invalid value {shown} for configuration {key}: {exc}") from None
    explicit = frozenset(values)
    for key in role_keys:
        if key not in values:
            values[key] = OPTIONS[key].default
    if values["bootstrap.servers"] is None:
        raise ConfigError("Missing required configuration 'bootstrap.servers'")
    if values["security.protocol"].startswith("SASL_") and (
            values["sasl.username"] is None or values["sasl.password"] is None):
        raise ConfigError(f"security.protocol {values['security.protocol']} needs sasl.username "
                          "and sasl.password")
    if values["ssl.key.location"] is not None and values["ssl.certificate.location"] is None:
        raise ConfigError("ssl.key.location needs ssl.certificate.location")
    return values, explicit


def producer_config(conf: Mapping[str, Any] | None) -> ClientConfig:
    """Validate a producer configuration (see the module docstring for the rules)."""
    values, explicit = _parse(PRODUCER, conf)
    transactional = values["transactional.id"] is not None
    if transactional and values["transactional.id"] == "":
        raise ConfigError("Invalid value '' for configuration transactional.id: must not be empty")
    if "enable.idempotence" in explicit:
        idempotence_required = values["enable.idempotence"]
    else:
        idempotence_required = transactional
    if transactional and not values["enable.idempotence"]:
        raise ConfigError(MSG_TRANSACTIONAL_ID)

    conflicts = []
    if "acks" in explicit and values["acks"] != -1:
        conflicts.append(MSG_ACKS)
    if "retries" in explicit and values["retries"] == 0:
        conflicts.append(MSG_RETRIES)
    if values["max.in.flight.requests.per.connection"] > MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
        conflicts.append(MSG_MAX_IN_FLIGHT)
    if conflicts:
        if idempotence_required:
            raise ConfigError(conflicts[0])
        values["enable.idempotence"] = False  # unset and contradicted: off, as Kafka 3.x does

    if values["delivery.timeout.ms"] < values["linger.ms"] + values["request.timeout.ms"]:
        raise ConfigError(
            "delivery.timeout.ms should be equal to or larger than linger.ms + request.timeout.ms"
        )
    if values["batch.size"] > values["max.request.size"]:
        # A full batch must fit in one request.
        if "batch.size" in explicit:
            raise ConfigError("batch.size must not exceed max.request.size")
        values["batch.size"] = values["max.request.size"]
    return ClientConfig(PRODUCER, values, explicit)


def consumer_config(conf: Mapping[str, Any] | None) -> ClientConfig:
    """Validate a consumer configuration (see the module docstring for the rules)."""
    values, explicit = _parse(CONSUMER, conf)
    if values["group.id"] == "":
        raise ConfigError("Invalid value '' for configuration group.id: must not be empty")
    if values["group.id"] is None:
        if "enable.auto.commit" in explicit and values["enable.auto.commit"]:
            raise ConfigError(
                "enable.auto.commit cannot be set to true when default group id (null) is used."
            )
        values["enable.auto.commit"] = False
    if values["heartbeat.interval.ms"] >= values["session.timeout.ms"]:
        raise ConfigError("heartbeat.interval.ms must be lower than session.timeout.ms")
    return ClientConfig(CONSUMER, values, explicit)


def admin_config(conf: Mapping[str, Any] | None) -> ClientConfig:
    """Validate an admin-client configuration."""
    values, explicit = _parse(ADMIN, conf)
    return ClientConfig(ADMIN, values, explicit)
