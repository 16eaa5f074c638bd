"""The broker's TLS context from Kafka's settings (PEM files), and the principal of a client
certificate: ``User:`` and its subject as an RFC 2253 name, which is what Kafka's default
principal builder makes of it (``User:CN=alice,OU=eng,O=example``)."""

from __future__ import annotations

import ssl

from broker.config import BrokerConfig, ConfigError, SecurityConfig
from broker.config.principal_mapping import DEFAULT_RULES, Rule, map_subject

TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})


def listener_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The server context when some listener speaks TLS, else None (ConfigError if unusable)."""
    protocols = {config.security_protocol} | {s.security_protocol for s in config.extra_listeners}
    return server_context(config.security) if protocols & TLS_PROTOCOLS else None

# RFC 2253 / 4514 attribute keywords for the names Python's ssl module reports.
_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L",
    "stateOrProvinceName": "ST", "organizationName": "O", "organizationalUnitName": "OU",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}


def server_context(security: SecurityConfig) -> ssl.SSLContext:
    if security.ssl_keystore_location is None:
        raise ConfigError("a listener speaks SSL or SASL_SSL but ssl.keystore.location is not set "
                          "(a PEM file with the private key and certificate chain)")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(security.ssl_keystore_location,
                                password=security.ssl_key_password)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"invalid value for ssl.keystore.location: cannot load a key and "
                          f"certificate from {security.ssl_keystore_location} ({exc})") from None
    if security.ssl_client_auth != "none":
        if security.ssl_truststore_location is None:
            raise ConfigError("ssl.client.auth needs ssl.truststore.location (PEM CA certificates)")
        try:
            context.load_verify_locations(security.ssl_truststore_location)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"invalid value for ssl.truststore.location: "
                              f"{security.ssl_truststore_location} ({exc})") from None
        context.verify_mode = (ssl.CERT_REQUIRED if security.ssl_client_auth == "required"
                               else ssl.CERT_OPTIONAL)
    return context


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


def certificate_principal(peer_cert: dict | None,
                          rules: tuple[Rule, ...] = DEFAULT_RULES) -> str | None:
    """``User:<name>`` of a verified client certificate, None without one: the name is what
    ``ssl.principal.mapping.rules`` make of its subject in RFC 2253 form (by default the whole
    subject). NoMatchingRule if no rule applies."""
    if not peer_cert or not peer_cert.get("subject"):
        return None
    rdns = []
    for rdn in reversed(peer_cert["subject"]):  # RFC 2253: the most specific name first
        rdns.append("+".join(f"{_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return "User:" + map_subject(",".join(rdns), rules)
