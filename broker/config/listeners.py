"""Kafka's ``listeners``, ``advertised.listeners`` and ``listener.security.protocol.map``: the
addresses the broker serves, what their clients are told, and the protocol each speaks."""

from __future__ import annotations

import re
from dataclasses import dataclass

from broker.config.values import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class Listener:
    """One more address to listen on (Kafka's ``listeners``), with what its clients are told."""

    name: str
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None
    security_protocol: str = "PLAINTEXT"  # from listener.security.protocol.map


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


def _protocol_map(properties: dict[str, str]) -> dict[str, str]:
    """``listener.security.protocol.map``: listener name -> security protocol (Kafka's default
    maps each protocol's own name to itself)."""
    key = "listener.security.protocol.map"
    if key not in properties:
        return {p: p for p in SECURITY_PROTOCOLS}
    result = {}
    for item in properties[key].split(","):
        name, sep, protocol = item.strip().partition(":")
        if not item.strip():
            continue
        if not sep or protocol.strip().upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(f"invalid value for {key}: {item.strip()!r} is not NAME:PROTOCOL "
                              f"(protocols: {', '.join(SECURITY_PROTOCOLS)})")
        result[name.strip().upper()] = protocol.strip().upper()
    return result


def apply_listeners(properties: dict[str, str], top: dict[str, object]) -> list[str]:
    """Kafka's ``listeners`` / ``advertised.listeners``: the first listener is host/port, the
    others become ``extra_listeners``; each is advertised as its ``advertised.listeners`` entry of
    the same name and speaks its ``listener.security.protocol.map`` protocol. Controller listeners
    (``controller.listener.names``, as in Kafka 4's stock KRaft file) are skipped: their names are
    returned, for the warning about ignored keys."""
    listeners = parse_listeners(properties.get("listeners", "PLAINTEXT://127.0.0.1:9092"))
    protocols = _protocol_map(properties)
    controller_names = {
        n.strip().upper() for n in properties.get("controller.listener.names", "").split(",")
    }
    listeners = [item for item in listeners if item[0] not in controller_names]
    if not listeners:
        raise ConfigError("invalid value for listeners: only controller listeners")
    advertised: dict[str, tuple[str, int]] = {}
    if properties.get("advertised.listeners", "").strip():  # blank: unset (the listeners)
        for name, host, port in parse_listeners(properties["advertised.listeners"],
                                                "advertised.listeners"):
            if name in controller_names:
                continue
            if name not in {n for n, _, _ in listeners}:
                raise ConfigError(
                    f"invalid value for advertised.listeners: {name} is not in listeners"
                )
            advertised[name] = (host, port)
    for name, _, _ in listeners:
        if name not in protocols:
            raise ConfigError(f"invalid value for listeners: {name} has no security protocol "
                              f"in listener.security.protocol.map")
    (name, host, port), *rest = listeners
    if "listeners" in properties:
        top["host"], top["port"] = host, port
    top["security_protocol"] = protocols[name]
    if name in advertised:
        top["advertised_host"], top["advertised_port"] = advertised[name]
    extra = []
    for name, host, port in rest:
        adv_host, adv_port = advertised.get(name, (None, None))
        extra.append(Listener(name, host, port, adv_host, adv_port, protocols[name]))
    top["extra_listeners"] = tuple(extra)
    named = {n.strip().upper() for key in ("listeners", "advertised.listeners")
             for n in re.findall(r"([A-Za-z0-9_]+)://", properties.get(key, ""))}
    return sorted(named & controller_names)
