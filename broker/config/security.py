"""The TLS, SASL and authorizer keys (Kafka's names; PEM files only): SecurityConfig and the
keys that build it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from broker.config.principal_mapping import DEFAULT_RULES, Rule, parse_rules
from broker.config.values import ConfigError, parse_bool
from protocol.jaas import JaasError, parse_one

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class SecurityConfig:
    """TLS, SASL and authorization settings (Kafka's keys; docs/security.md)."""

    # TLS (listeners whose protocol is SSL or SASL_SSL): PEM files only.
    ssl_keystore_location: Path | None = None  # private key and certificate chain
    ssl_key_password: str | None = None
    ssl_truststore_location: Path | None = None  # CA certificates for client certificates
    ssl_client_auth: str = "none"  # none | requested | required
    # ssl.principal.mapping.rules: an mTLS certificate's subject -> the principal's name.
    ssl_principal_mapping_rules: tuple[Rule, ...] = DEFAULT_RULES
    # SASL (SASL_PLAINTEXT, SASL_SSL).
    sasl_enabled_mechanisms: tuple[str, ...] = SASL_MECHANISMS
    plain_users: tuple[tuple[str, str], ...] = ()  # from a PlainLoginModule jaas config
    connection_failed_authentication_delay_ms: int = 100
    # Authorization: on when authorizer.class.name is set (as in Kafka).
    authorizer: bool = False
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False

    def __repr__(self) -> str:  # never print passwords
        return (f"SecurityConfig(keystore={self.ssl_keystore_location}, "
                f"client_auth={self.ssl_client_auth}, mechanisms={self.sasl_enabled_mechanisms}, "
                f"plain_users={len(self.plain_users)}, authorizer={self.authorizer})")


_JAAS_KEY = re.compile(r"^(listener\.name\.[a-z0-9_]+\.)?([a-z0-9-]+\.)?sasl\.jaas\.config$")
SECURITY_KEYS = frozenset({
    "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password",
    "ssl.client.auth", "ssl.endpoint.identification.algorithm", "sasl.enabled.mechanisms",
    "ssl.principal.mapping.rules",
    "connection.failed.authentication.delay.ms", "authorizer.class.name", "super.users",
    "allow.everyone.if.no.acl.found",
})


def is_security_key(key: str) -> bool:
    return key in SECURITY_KEYS or _JAAS_KEY.match(key) is not None


def _plain_users(key: str, value: str) -> list[tuple[str, str]]:
    """The ``user_NAME="password"`` options of a PlainLoginModule jaas config (Kafka's way of
    listing PLAIN users), read as Kafka's JaasConfig reads the value (``protocol/jaas.py``:
    quoting, escapes, flags in any case); other login modules carry no users. The error never
    shows a value (they are passwords)."""
    try:
        entry = parse_one(value)
    except JaasError as exc:
        raise ConfigError(f"invalid value for {key}: {exc}") from None
    if not entry.module.endswith("PlainLoginModule"):
        return []
    users = [(k[5:], v) for k, v in entry.options.items() if k.startswith("user_") and len(k) > 5]
    if not users:
        raise ConfigError(f"invalid value for {key}: a PlainLoginModule without user_NAME=\"...\" "
                          "entries lets nobody in")
    return users


def security_config(properties: dict[str, str]) -> SecurityConfig:
    """The TLS, SASL and authorizer keys (Kafka's names; PEM files only)."""
    get = properties.get
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        if get(key, "PEM").strip().upper() != "PEM":
            raise ConfigError(f"invalid value for {key}: only PEM files are read (convert a JKS "
                              "or PKCS12 store with keytool/openssl)")
    client_auth = get("ssl.client.auth", "none").strip().lower()
    if client_auth not in ("none", "requested", "required"):
        raise ConfigError("invalid value for ssl.client.auth: expected none, requested or required")
    mechanisms = tuple(m.strip().upper() for m in
                       get("sasl.enabled.mechanisms", ",".join(SASL_MECHANISMS)).split(",")
                       if m.strip())
    unknown = [m for m in mechanisms if m not in SASL_MECHANISMS]
    if unknown:
        raise ConfigError(f"invalid value for sasl.enabled.mechanisms: {', '.join(unknown)} "
                          f"(supported: {', '.join(SASL_MECHANISMS)})")
    users: dict[str, str] = {}
    for key, value in properties.items():
        if _JAAS_KEY.match(key):
            users.update(_plain_users(key, value))
    try:
        mapping = parse_rules(get("ssl.principal.mapping.rules", "DEFAULT"))
    except ValueError as exc:
        raise ConfigError(f"invalid value for ssl.principal.mapping.rules: {exc}") from None
    delay = get("connection.failed.authentication.delay.ms", "100")
    if not delay.strip().isdigit():
        raise ConfigError("invalid value for connection.failed.authentication.delay.ms: "
                          f"{delay!r} is not a non-negative integer")
    try:
        allow_if_none = parse_bool(get("allow.everyone.if.no.acl.found", "false"))
    except ValueError as exc:
        raise ConfigError(f"invalid value for allow.everyone.if.no.acl.found: {exc}") from None
    keystore, truststore = get("ssl.keystore.location"), get("ssl.truststore.location")
    return SecurityConfig(
        ssl_keystore_location=Path(keystore) if keystore else None,
        ssl_key_password=get("ssl.key.password") or get("ssl.keystore.password"),
        ssl_truststore_location=Path(truststore) if truststore else None,
        ssl_client_auth=client_auth,
        ssl_principal_mapping_rules=mapping,
        sasl_enabled_mechanisms=mechanisms,
        plain_users=tuple(sorted(users.items())),
        connection_failed_authentication_delay_ms=int(delay),
        authorizer=bool(get("authorizer.class.name", "").strip()),
        super_users=frozenset(u.strip() for u in get("super.users", "").split(";") if u.strip()),
        allow_everyone_if_no_acl_found=allow_if_none,
    )
