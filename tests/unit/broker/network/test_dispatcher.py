"""The ApiVersions table lists exactly what the broker implements (docs/protocol.md obligation 10)."""

from __future__ import annotations

import types

import pytest

from broker import handlers
from broker.app import build_handler_table
from broker.handlers.marks import handles
from broker.network.dispatcher import Dispatcher, check_served, handler_table
from broker.network.dispatcher import implemented as implemented_by
from protocol.api_keys import ApiKey, VersionRange
from protocol.messages.api_versions import ADVERTISED, IMPLEMENTED


def implemented():
    return implemented_by(build_handler_table())


def test_every_advertised_version_has_a_schema_and_a_handler():
    served = implemented()
    for api_key, versions in ADVERTISED.items():
        for version in range(versions.min, versions.max + 1):
            assert (int(api_key), version) in served, f"{api_key.name} v{version}"


def test_every_handler_is_reachable():
    assert implemented() == IMPLEMENTED


def test_write_txn_markers_is_advertised_as_kafka_does():
    # Kafka's Admin.abortTransaction (kafka-transactions.sh abort --topic) needs it advertised.
    assert ADVERTISED[ApiKey.WRITE_TXN_MARKERS] == VersionRange(0, 1)
    assert (int(ApiKey.WRITE_TXN_MARKERS), 0) in implemented()


def test_importing_the_handlers_registers_nothing():
    assert handler_table() == {}
    assert handler_table(handlers.fetch).keys() == {
        (int(ApiKey.FETCH), v) for v in range(ADVERTISED[ApiKey.FETCH].min,
                                               ADVERTISED[ApiKey.FETCH].max + 1)
    } | {
        (int(ApiKey.LIST_OFFSETS), v) for v in range(ADVERTISED[ApiKey.LIST_OFFSETS].min,
                                                      ADVERTISED[ApiKey.LIST_OFFSETS].max + 1)
    }


def test_a_table_that_differs_from_the_served_table_is_refused():
    table = build_handler_table()
    check_served(table)
    del table[(int(ApiKey.INIT_PRODUCER_ID), 1)]
    with pytest.raises(ValueError, match="missing.*INIT_PRODUCER_ID v1"):
        Dispatcher(table, None)
    table = build_handler_table()
    table[(int(ApiKey.PRODUCE), 2)] = table[(int(ApiKey.PRODUCE), 3)]
    with pytest.raises(ValueError, match="not in the table.*PRODUCE v2"):
        check_served(table)


def test_two_handlers_for_one_version_are_refused():
    twice = types.ModuleType("twice")

    @handles(ApiKey.FETCH, 4)
    def again(broker, header, request):
        return {}

    twice.again = again  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="two handlers for FETCH v4"):
        handler_table(handlers.fetch, twice)
