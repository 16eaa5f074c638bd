"""What every part of the broker's configuration shares: the error it raises and the value
parsers more than one part uses."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration key or value that cannot be used."""


def parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")
