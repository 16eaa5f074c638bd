"""The client side of TLS and SASL (PLAIN, SCRAM-SHA-256/512 through ``scramp``), from the
librdkafka-named settings of ``client.config``. Used by ``BrokerConnection.connect``: TLS wraps the
socket first, then SaslHandshake v1 and SaslAuthenticate follow ApiVersions, as Kafka's clients
do. The password never appears in an error or a log line.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scramp import ScramClient, ScramException

from client.errors import ConfigError, SaslAuthenticationFailedError, UnsupportedSaslMechanismError
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str
    mechanism: str
    username: str | None
    password: str | None = None  # (repr hides it below)
    tls: ssl.SSLContext | None = None
    check_hostname: bool = True

    def __repr__(self) -> str:
        return f"ClientSecurity({self.protocol}, {self.mechanism}, user={self.username!r})"

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ClientSecurity:
        protocol = config["security.protocol"]
        tls = None
        check = config["ssl.endpoint.identification.algorithm"] == "https"
        if protocol in ("SSL", "SASL_SSL"):
            tls = _context(config, check)
        return cls(protocol, config["sasl.mechanism"], config["sasl.username"],
                   config["sasl.password"], tls, check)


def protocol_hint(protocol: str) -> str:
    """What to add to "closed by the broker" before it answered a connection's first request:
    a client without TLS (PLAINTEXT, SASL_PLAINTEXT) at a TLS listener (SSL, SASL_SSL), which
    cannot read a plaintext request and closes the connection, is the most common cause."""
    if protocol.upper().endswith("SSL"):
        return ""
    return (f" (security.protocol is {protocol.upper()}: if this is an SSL or SASL_SSL listener, "
            "set security.protocol=SSL or SASL_SSL)")


def _context(config: Mapping[str, Any], check_hostname: bool) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=config["ssl.ca.location"])
        if config["ssl.certificate.location"] is not None:
            context.load_cert_chain(config["ssl.certificate.location"],
                                    config["ssl.key.location"], config["ssl.key.password"])
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the TLS files (ssl.ca.location, "
                          f"ssl.certificate.location, ssl.key.location): {exc}") from None
    context.check_hostname = check_hostname
    if not check_hostname:
        context.verify_mode = ssl.CERT_REQUIRED  # still a certificate the CAs signed
    return context


Request = Callable[..., Awaitable[Any]]


async def authenticate(request: Request, security: ClientSecurity, where: str) -> None:
    """The SASL exchange on a fresh connection (``request(api_key, body, version=...)``)."""
    handshake = await request(ApiKey.SASL_HANDSHAKE, {"mechanism": security.mechanism},
                              version=1)
    if handshake.error_code:
        raise UnsupportedSaslMechanismError(
            f"{where}: SASL mechanism {security.mechanism} is not enabled (the broker offers "
            f"{', '.join(handshake.mechanisms) or 'none'})")
    user, password = security.username or "", security.password or ""

    async def step(token: bytes) -> bytes:
        response = await request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token})
        if response.error_code:
            message = response.error_message or ErrorCode(response.error_code).name
            raise SaslAuthenticationFailedError(f"{where}: {message}")
        return bytes(response.auth_bytes)

    if security.mechanism == "PLAIN":
        await step(b"\0" + user.encode() + b"\0" + password.encode())
        return
    client = ScramClient([security.mechanism], user.replace("=", "=3D").replace(",", "=2C"),
                         password)
    try:
        client.set_server_first((await step(client.get_client_first().encode())).decode())
        client.set_server_final((await step(client.get_client_final().encode())).decode())
    except (ScramException, UnicodeDecodeError) as exc:
        raise SaslAuthenticationFailedError(f"{where}: the broker's SCRAM answer does not verify "
                                  f"({type(exc).__name__})") from None
