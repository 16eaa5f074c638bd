"""What the listeners admit: the connection counts (``max.connections``,
``max.connections.per.ip`` and its overrides) and the broker-wide budget of
``queued.max.request.bytes`` for requests being received (the server's limits, ``server.py``)."""

from __future__ import annotations

import resource
import socket as stdsocket
from collections.abc import Sequence

import trio

from broker.config import BrokerConfig, ConfigError

# Descriptors kept free for segments, indexes, snapshots and the flusher's duplicates.
_RESERVED_FDS = 128


class RequestMemory:
    """The broker-wide budget of ``queued.max.request.bytes`` for requests being received."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.reserved = 0
        self._released = trio.Event()

    async def reserve(self, n: int) -> None:
        while self.reserved and self.reserved + n > self.limit:
            await self._released.wait()
        self.reserved += n

    def release(self, n: int) -> None:
        self.reserved -= n
        self._released.set()
        self._released = trio.Event()


class ConnectionLimits:
    """``max.connections``, ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``:
    counts of open connections, as Kafka's ConnectionQuotas keeps them. At ``max.connections``
    the listeners stop accepting (new connections wait in the kernel's backlog, as Kafka's
    acceptor waits for a slot); a connection over its address's limit is closed at once."""

    def __init__(self, max_connections: int, max_per_ip: int,
                 overrides: Sequence[tuple[str, int]] = ()) -> None:
        try:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        except (OSError, ValueError):
            soft = resource.RLIM_INFINITY
        if soft != resource.RLIM_INFINITY:
            max_connections = min(max_connections, max(soft - _RESERVED_FDS, 16))
        if max_per_ip == 0 and not overrides:
            raise ConfigError("max.connections.per.ip can be 0 only with "
                              "max.connections.per.ip.overrides (Kafka's rule)")
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.per_ip_overrides = _resolve(overrides)
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self.refused = 0
        self._slot = trio.Event()

    @classmethod
    def of(cls, config: BrokerConfig) -> ConnectionLimits:
        """The limits ``config`` sets; ConfigError for values Kafka refuses at start."""
        return cls(config.max_connections, config.max_connections_per_ip,
                   config.max_connections_per_ip_overrides)

    def limit_for(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.max_per_ip)

    async def wait_for_slot(self) -> None:
        """Until fewer than ``max.connections`` are open."""
        while self.total >= self.max_connections:
            await self._slot.wait()

    def admit(self, ip: str) -> bool:
        if self.total >= self.max_connections or self.per_ip.get(ip, 0) >= self.limit_for(ip):
            self.refused += 1
            return False
        self.total += 1
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        return True

    def leave(self, ip: str) -> None:
        self.total -= 1
        left = self.per_ip[ip] - 1
        if left:
            self.per_ip[ip] = left
        else:
            del self.per_ip[ip]
        if self.total < self.max_connections:
            self._slot.set()
            self._slot = trio.Event()


def _resolve(overrides: Sequence[tuple[str, int]]) -> dict[str, int]:
    """Host names of max.connections.per.ip.overrides as the addresses connections come from
    (Kafka resolves them at start too); a name that does not resolve is a config error."""
    out: dict[str, int] = {}
    for host, count in overrides:
        try:
            infos = stdsocket.getaddrinfo(host, None, type=stdsocket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise ConfigError(f"invalid value for max.connections.per.ip.overrides: cannot "
                              f"resolve {host!r} ({exc})") from None
        for info in infos:
            out[str(info[4][0])] = count
    return out
