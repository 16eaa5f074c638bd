"""The ApiVersions table lists exactly what the broker implements (PROTOCOL.md obligation 10)."""

from __future__ import annotations

import broker.handlers  # noqa: F401  (registers the handlers)
from broker.dispatcher import implemented
from protocol.api_keys import ApiKey
from protocol.messages.api_versions import ADVERTISED, IMPLEMENTED


def test_every_advertised_pin_has_a_schema_and_a_handler():
    served = implemented()
    for api_key, versions in ADVERTISED.items():
        assert (int(api_key), versions.max) in served, f"{api_key.name} v{versions.max}"


def test_every_handler_is_reachable():
    assert implemented() == IMPLEMENTED


def test_write_txn_markers_is_served_but_not_advertised():
    assert ApiKey.WRITE_TXN_MARKERS not in ADVERTISED
    assert (int(ApiKey.WRITE_TXN_MARKERS), 0) in implemented()
