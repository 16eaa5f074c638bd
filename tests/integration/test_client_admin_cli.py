"""The admin client and the CLI commands against the real broker."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from client import Admin, NewTopic
from client.cli import COMMANDS, main
from client.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError


def run_cli(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: a separate process."""
    return subprocess.run(
        [sys.executable, "-m", "client.cli", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_admin_topics(broker_proc):
    with Admin({"bootstrap.servers": broker_proc.bootstrap}) as admin:
        results = admin.create_topics([NewTopic("a", 3), NewTopic("b", 1)])
        assert results == {"a": None, "b": None}
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topic("a", 3)
        admin.create_topic("a", 3, exist_ok=True)
        assert {"a", "b"} <= set(admin.list_topics())
        (desc,) = admin.describe_topics(["a"])
        assert desc.name == "a" and [p.partition for p in desc.partitions] == [0, 1, 2]
        assert all(p.leader >= 0 and p.replicas == (p.leader,) for p in desc.partitions)
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.describe_topics(["missing"])
        assert admin.delete_topics(["b"]) == {"b": None}
        assert "b" not in admin.list_topics()
        cluster = admin.describe_cluster()
        assert cluster["cluster_id"] and cluster["brokers"]


def test_cli_commands_are_exported():
    assert {c.name for c in COMMANDS} == {
        "topics", "produce", "consume", "groups", "transactions", "get-offsets", "perf", "configs",
        "log-dirs", "delete-records", "acls", "users", "broker-api-versions", "features",
        "share-groups",
    }


def test_every_command_is_registered_in_one_place():
    """client/cli/__init__.py's COMMANDS is the tree: each module fills only its own group (no
    module adds commands to another's as an import side effect), and every group lists what its
    module defines."""
    from client.cli import configs, groups, topics, transactions
    from client.cli.share_groups import share_groups

    assert set(groups.commands) == {"list", "describe", "reset-offsets", "delete"}
    assert set(share_groups.commands) == {"list", "describe", "reset-offsets", "delete-offsets",
                                          "delete"}
    assert set(transactions.commands) == {
        "list", "describe", "abort", "describe-producers", "find-hanging"}
    assert set(topics.commands) == {"create", "list", "describe", "alter", "delete"}
    assert set(configs.commands) == {"describe", "alter"}


def test_cli_round_trip_produce_then_consume(broker_proc):
    server = ["--bootstrap-server", broker_proc.bootstrap]
    created = run_cli("topics", "create", "cli-topic", "--partitions", "2", *server)
    assert created.returncode == 0, created.stderr
    listed = run_cli("topics", "list", *server)
    assert "cli-topic" in listed.stdout.split()
    described = run_cli("topics", "describe", "cli-topic", *server)
    assert "PartitionCount: 2" in described.stdout

    lines = "".join(f"key{i % 3}:line {i}\n" for i in range(20))
    produced = run_cli("produce", "cli-topic", "--key-separator", ":", *server, input=lines)
    assert produced.returncode == 0, produced.stderr
    assert "Produced 20 record(s)" in produced.stderr

    consumed = run_cli(
        "consume",
        "cli-topic",
        "--from-beginning",
        "--max-messages",
        "20",
        "--format",
        "json",
        *server,
    )
    assert consumed.returncode == 0, consumed.stderr
    records = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert sorted(r["value"] for r in records) == sorted(f"line {i}" for i in range(20))
    for r in records:
        assert r["key"] == f"key{int(r['value'].split()[1]) % 3}"
    # Same key, same partition; per-partition order is line order.
    for partition in (0, 1):
        mine = [int(r["value"].split()[1]) for r in records if r["partition"] == partition]
        assert mine == sorted(mine)

    text = run_cli(
        "consume", "cli-topic", "--from-beginning", "--timeout", "2", "--print-key", *server
    )
    assert text.returncode == 0, text.stderr
    assert sorted(text.stdout.splitlines()) == sorted(f"key{i % 3}\tline {i}" for i in range(20))


def test_cli_errors_are_one_line_and_nonzero(broker_proc):
    runner = CliRunner()
    server = ["--bootstrap-server", broker_proc.bootstrap]
    result = runner.invoke(main, ["topics", "create", "dup", *server])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["topics", "create", "dup", *server])
    assert result.exit_code == 1
    assert result.output.strip().startswith("Error: TopicAlreadyExistsError")
    assert len(result.output.strip().splitlines()) == 1
    result = runner.invoke(main, ["topics", "list", "--bootstrap-server", "127.0.0.1:1"])
    assert result.exit_code == 1 and "Error:" in result.output
    result = runner.invoke(main, ["produce", "dup", "-X", "lingr.ms=5", *server], input="x\n")
    assert result.exit_code == 1 and "did you mean 'linger.ms'" in result.output


def test_cli_transactional_produce(broker_proc):
    from protocol.api_keys import ApiKey
    from tests.fault_proxy import broker_supports

    if not broker_supports(broker_proc.bootstrap, ApiKey.END_TXN, ApiKey.ADD_PARTITIONS_TO_TXN):
        pytest.skip("the broker's ApiVersions does not list EndTxn yet")
    server = ["--bootstrap-server", broker_proc.bootstrap]
    produced = run_cli(
        "produce", "txn-cli", "--transactional-id", "cli-tx", *server, input="a\nb\nc\n"
    )
    assert produced.returncode == 0, produced.stderr
    consumed = run_cli("consume", "txn-cli", "--from-beginning", "--max-messages", "3", *server)
    assert consumed.stdout.splitlines() == ["a", "b", "c"]


def test_cli_groups_describe_shows_committed_offsets_and_lag(broker_proc):
    from client import Consumer, Producer

    conf = {"bootstrap.servers": broker_proc.bootstrap}
    with Admin(conf) as admin:
        admin.create_topics([NewTopic("lagging", 1)])
    with Producer(conf) as producer:
        for i in range(10):
            producer.send("lagging", b"v%d" % i, partition=0)
        producer.flush(10)
    with Consumer({**conf, "group.id": "laggards", "enable.auto.commit": False}) as consumer:
        consumer.assign([("lagging", 0)])
        consumer.commit({("lagging", 0): 4})
    result = run_cli("groups", "describe", "laggards", "--bootstrap-server", broker_proc.bootstrap)
    assert result.returncode == 0, result.stderr
    # kafka-consumer-groups.sh's columns: GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
    assert ["laggards", "lagging", "0", "4", "10", "6"] in [
        line.split()[:6] for line in result.stdout.splitlines()
    ]
