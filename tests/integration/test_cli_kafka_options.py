"""Issue 39 item 5: every option of each Kafka 4.4 tool our commands stand for (the tools'
--help, kept in kafka_tool_options.json) is accepted, or refused with a one-line reason. The
walk is offline (click's parser); the options of the issue's list are also run against a real
broker."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from broker.cli import main as minibroker
from client import Admin, Producer
from client.cli.common import ACTIONS, REFUSED_COMMANDS, refusal
from tests.broker_process import BrokerProcess

OPTIONS = json.loads((Path(__file__).parent / "kafka_tool_options.json").read_text())
TOOLS = {k: v for k, v in OPTIONS.items() if not k.startswith("_")}


def option_names(command: click.Command) -> set[str]:
    names: set[str] = set()
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts)
            names.update(param.secondary_opts)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            names |= option_names(sub)
    return names


def command_at(path: str) -> click.Command | None:
    command: click.Command = minibroker
    for part in path.split():
        assert isinstance(command, click.Group)
        found = command.commands.get(part)
        if found is None:
            return None
        command = found
    return command


@pytest.mark.parametrize("path", sorted(TOOLS))
def test_every_kafka_option_is_accepted_or_refused_with_a_reason(path):
    command = command_at(path)
    if command is None:
        group, sub = path.split()
        assert sub in REFUSED_COMMANDS[group], f"Kafka's {path} is neither ours nor refused"
        result = CliRunner().invoke(minibroker, [group, sub])
        assert result.exit_code == 2
        assert f"Error: {group} {sub}: {REFUSED_COMMANDS[group][sub]}" in result.output
        return
    known = option_names(command) | set(ACTIONS.get(path.split()[0], {})) | {"--help",
                                                                            "--version"}
    unhandled = []
    for option in TOOLS[path]:
        if option in known:
            assert refusal(path.split(), option) is None, (path, option, "both accepted and refused")
            continue
        reason = refusal(path.split(), option)
        if reason is None:
            unhandled.append(option)
            continue
        result = CliRunner().invoke(minibroker, [*path.split(), option, "x"])
        assert result.exit_code == 2, (path, option, result.output)
        error = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert error == [f"Error: {option} (Kafka's) is not supported: {reason}"], result.output
    assert not unhandled, f"{path}: Kafka's {unhandled} neither accepted nor refused"


def test_version_of_a_tool_is_the_version():
    result = CliRunner().invoke(minibroker, ["topics", "--version"])
    assert result.exit_code == 0 and "version" in result.output


# -- the issue's list, against a broker ----------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kafka-options")
    proc = BrokerProcess.configured(tmp, "group.initial.rebalance.delay.ms=0\n",
                                    "--flush", "never").start()
    yield proc
    assert proc.stop() == 0


def run(broker, *args: str, input: str | None = None, code: int = 0) -> str:
    result = CliRunner().invoke(minibroker, [*args, "-b", broker.bootstrap], input=input)
    assert result.exit_code == code, (args, result.output, result.exception)
    return result.output


def test_the_issues_options(broker, tmp_path):
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic("opts", 2)
    run(broker, "produce", "--topic", "opts", "--reader-property", "parse.key=true",
        input="k\tv\n")
    assert run(broker, "consume", "--topic", "opts", "--from-beginning", "--max-messages", "1",
               "--formatter-property", "print.key=true", "--formatter",
               "org.apache.kafka.tools.consumer.DefaultMessageFormatter") == "k\tv\n"
    config = tmp_path / "formatter.properties"
    config.write_text("print.partition=true\n")
    assert run(broker, "consume", "opts", "--from-beginning", "-n", "1", "--formatter-config",
               str(config)).startswith("Partition:")
    run(broker, "consume", "opts", "--from-beginning", "-n", "1", "--group", "opts-g")
    listed = run(broker, "groups", "--list", "--state").splitlines()
    assert listed[0].split() == ["GROUP", "STATE"] and ["opts-g", "Empty"] in [
        line.split() for line in listed]
    run(broker, "groups", "--describe", "--group", "opts-g", "--members", "--verbose")
    with Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "opts-tx"}) as p:
        p.init_transactions()
    run(broker, "transactions", "find-hanging", "--broker-id", "0")
    # kafka-transactions.sh's shape: the connection options before the subcommand
    listed = CliRunner().invoke(minibroker, ["transactions", "--bootstrap-server",
                                             broker.bootstrap, "list"])
    assert listed.exit_code == 0 and "opts-tx" in listed.stdout, listed.output
    assert "no broker 7" in run(broker, "transactions", "find-hanging", "--broker-id", "7",
                                code=1)
    run(broker, "transactions", "describe-producers", "--topic", "opts", "--partition", "0",
        "--broker-id", "0")
    assert run(broker, "get-offsets", "--topic-partitions", "opts:0") == "opts:0:1\n"
    everything = run(broker, "get-offsets").splitlines()
    assert {"opts:0:1", "opts:1:0"} <= set(everything)
    assert run(broker, "get-offsets", "--topic", "opts", "--time", "-3").splitlines() == [
        "opts:0:0", "opts:1:"]
    assert "opts" not in run(broker, "get-offsets", "--exclude-internal-topics", "--topic",
                             "__.*")
    run(broker, "configs", "--describe", "--entity-type", "brokers", "--entity-default")
    assert run(broker, "topics", "--describe", "--under-replicated-partitions") == ""
    at_min = run(broker, "topics", "--describe", "--topic", "opts", "--at-min-isr-partitions")
    assert len(at_min.splitlines()) == 2 and at_min.startswith("\tTopic: opts\tPartition: 0")
    run(broker, "topics", "--delete", "--topic", "nope", "--if-exists")
