"""Kafka 4.4's kafka-configs.sh --describe without --entity-name (ListConfigResources, KIP-1142)
against minibroker and the reference Kafka: the group set here is listed, with the same lines.
Before ListConfigResources was served, minibroker listed nothing."""

from __future__ import annotations

import time

import pytest

from tests.broker_process import BrokerProcess

pytestmark = [pytest.mark.xdist_group("kafka_ref"), pytest.mark.slow]


@pytest.fixture
def minibroker(tmp_path, kafka_ref):
    with BrokerProcess(tmp_path / "data") as b:
        yield b


def _blocks(text: str) -> dict[str, list[str]]:
    """The lines under each "Dynamic configs for ... are:" heading, by heading."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("Dynamic configs for "):
            current = blocks.setdefault(line, [])
        elif current is not None and line.strip():
            current.append(line)
    return blocks


def test_kafka_configs_describe_lists_every_group_with_configs(minibroker, kafka_one) -> None:
    from tests.kafka_ref.harness import run_tool

    def configs(bootstrap: str, *args: str) -> str:
        done = run_tool("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", bootstrap,
                        *args)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    stamp = time.monotonic_ns()
    groups = [f"listed-{i}-{stamp}" for i in range(2)]
    subscription = f"listed-sub-{stamp}"
    listed = []
    for bootstrap in (minibroker.bootstrap, kafka_one.bootstrap):
        for group in groups:
            configs(bootstrap, "--entity-type", "groups", "--entity-name", group, "--alter",
                    "--add-config", "consumer.session.timeout.ms=50000")
        configs(bootstrap, "--entity-type", "client-metrics", "--entity-name", subscription,
                "--alter", "--add-config", "interval.ms=60000")
        everything = {
            **_blocks(configs(bootstrap, "--entity-type", "groups", "--describe")),
            **_blocks(configs(bootstrap, "--entity-type", "client-metrics", "--describe"))}
        listed.append({h: lines for h, lines in everything.items()
                       if any(name in h for name in (*groups, subscription))})
        configs(bootstrap, "--entity-type", "client-metrics", "--entity-name", subscription,
                "--alter", "--delete-config", "interval.ms")
    ours, kafka = listed
    assert len(ours) == 3, ours
    assert ours == kafka
