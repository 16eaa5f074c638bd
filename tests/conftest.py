"""Shared fixtures: the real broker, in-process (trio) or as a subprocess, on a loopback port."""

from __future__ import annotations

import pytest
import trio
from hypothesis import settings

from broker.config import build_config
from tests.broker_process import BrokerProcess
from tests.kafka_ref.fixtures import (  # noqa: F401  (the reference Kafka's fixtures, for every test)
    kafka_one,
    kafka_ref,
    kafka_three,
    pytest_collection_modifyitems,
    pytest_runtest_makereport,
)
from tests.process_guard import pytest_sessionfinish  # noqa: F401  (fails a session that leaks a process)

pytest_plugins = ["pytester"]

# No per-example wall-clock deadline (Hypothesis' default is 200 ms): the suite runs on worker
# processes that share the machine's cores with brokers and JVMs, and an example that waited for a
# core failed as "Unreliable test timings" (9 of tests/unit/protocol/messages under load). What an
# example checks is unchanged; a test that means to bound its time says so itself. The tests'
# own @settings say deadline=None too: once, under load, a worker ran one with the 200 ms default
# although this profile was loaded (why is not established; a pytester run in the same worker is
# a suspect).
settings.register_profile("minibroker", deadline=None)
settings.load_profile("minibroker")


@pytest.fixture
def broker_proc(tmp_path):
    """A broker subprocess with a fresh data dir; stopped by its own handle at the end."""
    with BrokerProcess(tmp_path / "data") as proc:
        yield proc


@pytest.fixture
async def broker_port(tmp_path, nursery):
    """An in-process broker on an ephemeral loopback port; returns the port."""
    from broker.app import serve

    config = build_config({}, port=0, data_dir=tmp_path / "data")
    port = await nursery.start(serve, config)
    yield port


@pytest.fixture
def trio_open_tcp():
    async def connect(port: int) -> trio.SocketStream:
        return await trio.open_tcp_stream("127.0.0.1", port)

    return connect
