"""``minibroker share-groups`` (kafka-share-groups.sh) against the real broker with our share
consumer in the group: list, describe (offsets, members, state, verbose), reset-offsets (dry run,
execute, the bounds of the log), delete-offsets and delete, given in Kafka's shapes
(``share-groups --describe --group G``). Kafka's own tool on the same broker, text compared:
tests/kafka_ref/test_cli_same_output.py."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from broker.cli import main as minibroker
from client import Admin, Producer
from client.share_consumer import ShareConsumer
from tests.broker_process import BrokerProcess
from tests.integration.test_share_groups import set_group_config


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("share-groups-cli")
    proc = BrokerProcess.configured(tmp, "group.initial.rebalance.delay.ms=0\n",
                                    "--flush", "never").start()
    yield proc
    assert proc.stop() == 0


def run(broker, *args: str, code: int = 0):
    result = CliRunner().invoke(minibroker, ["share-groups", *args, "-b", broker.bootstrap])
    assert result.exit_code == code, (args, result.output, result.exception)
    return result


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def consumed(broker, group: str, topic: str, n: int) -> ShareConsumer:
    """A share consumer of ``group`` that has received and acknowledged ``n`` records."""
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                              "client.id": "cli-test"})
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < n and time.monotonic() < deadline:
        got += len(consumer.poll(0.5))
    assert got == n
    consumer.commit_sync()  # (implicit mode: what was polled is accepted)
    return consumer


def test_share_groups_commands(broker):
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic("sq", 2)
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        for i in range(10):
            producer.send("sq", b"v%d" % i, partition=i % 2)
        producer.flush()
    set_group_config(broker.port, "sg", "share.auto.offset.reset", "earliest")
    consumer = consumed(broker, "sg", "sq", 10)
    try:
        assert "sg" in run(broker, "--list").stdout.split()
        listed = rows(run(broker, "--list", "--state").stdout)
        assert listed[0] == ["GROUP", "STATE"] and ["sg", "Stable"] in listed
        assert ["sg", "Stable"] in rows(run(broker, "--list", "--state", "stable").stdout)
        assert rows(run(broker, "--list", "--state", "Empty").stdout) == [["GROUP", "STATE"]]
        bad = run(broker, "--list", "--state", "Rebalancing", code=1)
        assert "Invalid state list 'Rebalancing'. Valid states are: Empty, Stable, Dead" in (
            bad.output)

        assert rows(run(broker, "--describe", "--group", "sg").stdout) == [
            ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"],
            ["sg", "sq", "0", "5", "0"], ["sg", "sq", "1", "5", "0"]]
        verbose = rows(run(broker, "--describe", "--group", "sg", "--offsets",
                           "--verbose").stdout)
        assert verbose[0][3] == "LEADER-EPOCH" and verbose[1] == ["sg", "sq", "0", "0", "5", "0"]
        members = rows(run(broker, "--describe", "--group", "sg", "--members",
                           "--verbose").stdout)
        assert members[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                              "MEMBER-EPOCH", "ASSIGNMENT"]
        (member,) = members[1:]
        assert member[0] == "sg" and member[3:5] == ["cli-test", "2"] and member[6] == "sq:0,1"
        state = rows(run(broker, "--describe", "--all-groups", "--state").stdout)
        assert state[0] == ["GROUP", "COORDINATOR", "(ID)", "STATE", "#MEMBERS"]
        assert state[1][0] == "sg" and state[1][-2:] == ["Stable", "1"]
        busy = run(broker, "--reset-offsets", "--group", "sg", "--all-topics", "--to-earliest",
                   "--execute", code=1)
        assert "Share group 'sg' is not empty." in busy.output
        # Kafka 4.4's broker and tool say it so (the same command against Kafka: same text)
        live = run(broker, "--delete-offsets", "--group", "sg", "--topic", "sq", code=1)
        assert rows(live.stdout) == [["Error:", "The", "group", "is", "not", "empty."],
                                     ["TOPIC", "STATUS"],
                                     ["sq", "Error:", "The", "group", "is", "not", "empty."]]
    finally:
        consumer.close()

    state = run(broker, "--describe", "--group", "sg", "--state", "--verbose")
    (header, row) = rows(state.stdout)
    assert header[-3:] == ["GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert row[0] == "sg" and row[-4] == "Empty" and row[-1] == "0"
    assert "Share group 'sg' has no active members." in state.stderr
    empty_members = run(broker, "--describe", "--group", "sg", "--members")
    assert empty_members.stdout.strip() == ""

    # reset-offsets: Kafka's tool wants --dry-run or --execute
    run(broker, "--reset-offsets", "--group", "sg", "--all-topics", "--to-earliest", code=2)
    dry = run(broker, "--reset-offsets", "--group", "sg", "--topic", "sq", "--to-earliest",
              "--dry-run")
    assert rows(dry.stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                                ["sg", "sq", "0", "0"], ["sg", "sq", "1", "0"]]
    assert rows(run(broker, "--describe", "--group", "sg").stdout)[1][3] == "5"  # unchanged
    run(broker, "--reset-offsets", "--group", "sg", "--all-topics", "--to-earliest", "--execute")
    assert rows(run(broker, "--describe", "--group", "sg").stdout)[1:] == [
        ["sg", "sq", "0", "0", "5"], ["sg", "sq", "1", "0", "5"]]
    # an offset past the log end is the log end, as in Kafka's tool
    clamped = run(broker, "--reset-offsets", "--group", "sg", "--topic", "sq:1", "--to-offset",
                  "99", "--execute")
    assert rows(clamped.stdout)[1:] == [["sg", "sq", "1", "5"]]
    assert run(broker, "--reset-offsets", "--group", "sg", "--topic", "sq:0", "--to-latest",
               "--dry-run", "--export").stdout == "sq,0,5\n\n"

    missing = run(broker, "--delete-offsets", "--group", "sg", "--topic", "nosuch", code=1)
    assert rows(missing.stdout)[1][:2] == ["nosuch", "Error:"]
    deleted = run(broker, "--delete-offsets", "--group", "sg", "--topic", "sq")
    assert rows(deleted.stdout) == [["TOPIC", "STATUS"], ["sq", "Successful"]]
    assert run(broker, "--describe", "--group", "sg").stdout.strip() == (
        "Share group 'sg' has no offset information.")

    partly = run(broker, "--delete", "--group", "sg", "--group", "nope", code=1)
    assert partly.stdout.splitlines() == [
        "", "Error: Deletion of some share groups failed:",
        "* Group 'nope' could not be deleted due to: org.apache.kafka.common.errors."
        "GroupIdNotFoundException: Group 'nope' is not a share group.",
        "", "These share groups were deleted successfully: 'sg'"]
    assert "sg" not in run(broker, "--list").stdout.split()
    gone = run(broker, "--describe", "--group", "sg", code=1)
    assert gone.output.strip().startswith("Error: share group 'sg': GroupIdNotFoundError")


@pytest.mark.parametrize("args, message", [
    (["--describe"], "give GROUP (or --group GROUP, repeatable) or --all-groups"),
    (["--describe", "--group", "g", "--members", "--state"],
     "give at most one of --offsets, --members, --state"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--dry-run", "--execute"],
     "give one of --dry-run and --execute"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--dry-run"],
     "give exactly one of --to-earliest"),
    (["--reset-offsets", "--group", "g", "--to-latest", "--dry-run"],
     "give --topic (repeatable) or --all-topics"),
    (["--delete-offsets", "--group", "g"], "give --topic (repeatable)"),
    (["--delete"], "give GROUP (or --group GROUP, repeatable) or --all-groups"),
])
def test_usage_errors_are_one_line(args, message):
    result = CliRunner().invoke(minibroker, ["share-groups", *args, "-b", "127.0.0.1:1"])
    assert result.exit_code == 2
    (error,) = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert message in error
