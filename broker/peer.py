"""What a handler may know of the connection its request came on: the client's address and the
address clients of that listener are told to use (Kafka answers Metadata and FindCoordinator
with the advertised address of the listener the request arrived on).

The server sets it once per connection, in the connection's task, before any request is read;
handlers run synchronously in that task. It is a ContextVar because it belongs to the request,
not to a service: the services never read it, the handlers pass what they need on.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Peer:
    client_host: str  # as Kafka shows it in DescribeGroups: "/127.0.0.1"
    advertised: tuple[str, int] | None = None  # None: the broker's main advertised address


_CURRENT: ContextVar[Peer | None] = ContextVar("minibroker_peer", default=None)


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
