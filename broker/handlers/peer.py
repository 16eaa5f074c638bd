"""What a handler may know of the connection its request came on: the client's address, the
address clients of that listener are told to use (Kafka answers Metadata and FindCoordinator
with the advertised address of the listener the request arrived on), and the connection's
``Session``: its security protocol, SASL progress and authenticated principal.

The server sets it once per connection, in the connection's task, before any request is read;
handlers run synchronously in that task. It is a ContextVar because it belongs to the request,
not to a service: the services never read it, the handlers pass what they need on.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

ANONYMOUS = "User:ANONYMOUS"


@dataclass
class Session:
    """One connection's authentication state (mutated by the SASL handlers only)."""

    security_protocol: str = "PLAINTEXT"
    principal: str = ANONYMOUS
    # SASL listeners: "handshake" (SaslHandshake expected), "authenticate" (SaslAuthenticate
    # expected), "tokens" (bare tokens after a v0 handshake), "done".
    sasl_state: str = "done"
    sasl: Any = None  # the connection's broker.security.sasl.SaslServer during the exchange
    close_after_reply: bool = False  # a failed authentication: answer, then close
    refusals: Any = None  # the connection's refusal lines (broker.handlers.authz.RefusalLog)
    # Called once when the connection closes, by key (share sessions opened on it release
    # their records, as Kafka's do when their connection goes).
    on_close: dict = field(default_factory=dict)
    # What the client said of itself in ApiVersions v3+ (KIP-511), and its port: client
    # telemetry's subscriptions match them (broker/telemetry/manager.py).
    client_software_name: str | None = None
    client_software_version: str | None = None
    client_port: int | None = None

    @classmethod
    def for_listener(cls, security_protocol: str, principal: str | None = None) -> Session:
        sasl = security_protocol.startswith("SASL_")
        return cls(security_protocol, principal or ANONYMOUS, "handshake" if sasl else "done")


@dataclass(frozen=True)
class Peer:
    client_host: str  # as Kafka shows it in DescribeGroups: "/127.0.0.1"
    advertised: tuple[str, int] | None = None  # None: the broker's main advertised address
    session: Session = field(default_factory=Session)


_CURRENT: ContextVar[Peer | None] = ContextVar("minibroker_peer", default=None)
_NO_SESSION = Session()


def set_peer(peer: Peer) -> None:
    _CURRENT.set(peer)


def client_host() -> str:
    """The client address of the current request ("" outside a connection, e.g. in tests)."""
    peer = _CURRENT.get()
    return peer.client_host if peer is not None else ""


def advertised(default: tuple[str, int]) -> tuple[str, int]:
    """The advertised (host, port) of the listener the current request came on."""
    peer = _CURRENT.get()
    return peer.advertised if peer is not None and peer.advertised is not None else default


def session() -> Session:
    """The current connection's session (an anonymous PLAINTEXT one outside a connection)."""
    peer = _CURRENT.get()
    return peer.session if peer is not None else _NO_SESSION


def principal_and_host() -> tuple[str, str]:
    """``(principal, client ip)`` of the current request, as ACLs match them."""
    peer = _CURRENT.get()
    if peer is None:
        return ANONYMOUS, ""
    return peer.session.principal, peer.client_host.lstrip("/")
