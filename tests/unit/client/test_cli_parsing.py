"""The command line's parsing without a broker: Kafka's shapes (action flags, variadic options,
ids positional or as options), did-you-mean for unknown options, --property and --config."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from broker.cli import main as minibroker
from client.cli.common import kafka_shapes, option_hint
from client.cli.records import CONSUMER_PROPERTIES, console_formatter, console_properties
from client.cli.topics import topic_configs
from client.structs import ConsumerRecord

GROUPS = ["topics", "groups", "configs", "acls", "log-dirs", "perf"]


@pytest.mark.parametrize("given, expected", [
    (["topics", "--bootstrap-server", "b:1", "--create", "--topic", "t"],
     ["topics", "create", "--bootstrap-server", "b:1", "--topic", "t"]),
    (["topics", "--list"], ["topics", "list"]),
    (["groups", "--describe", "--group", "g", "--members"],
     ["groups", "describe", "--group", "g", "--members"]),
    (["configs", "--entity-type", "topics", "--entity-name", "t", "--alter", "--add-config", "a=1"],
     ["configs", "alter", "--entity-type", "topics", "--entity-name", "t", "--add-config", "a=1"]),
    (["log-dirs", "--describe", "--topic-list", "t"], ["log-dirs", "--topic-list", "t"]),
    (["topics", "create", "t"], ["topics", "create", "t"]),  # ours: unchanged
    (["consume", "topics", "--list"], ["consume", "topics", "--list"]),  # a topic named topics
    (["perf", "produce", "--producer-props", "acks=all", "linger.ms=5", "--num-records", "5"],
     ["perf", "produce", "--producer-props", "acks=all", "--producer-props", "linger.ms=5",
      "--num-records", "5"]),
])
def test_kafka_shapes(given, expected):
    assert kafka_shapes(given, GROUPS) == expected


@pytest.mark.parametrize("given, expected", [
    # kafka-transactions.sh / kafka-features.sh: connection options before the subcommand
    (["transactions", "--bootstrap-server", "b:1", "list"],
     ["transactions", "list", "--bootstrap-server", "b:1"]),
    (["transactions", "--bootstrap-server=b:1", "--command-config", "c.properties", "abort",
      "--topic", "t"],
     ["transactions", "abort", "--bootstrap-server=b:1", "--command-config", "c.properties",
      "--topic", "t"]),
    (["features", "-b", "b:1", "describe"], ["features", "describe", "-b", "b:1"]),
    # (already after it, or another option first: unchanged)
    (["transactions", "list", "-b", "b:1"], ["transactions", "list", "-b", "b:1"]),
    (["transactions", "--help"], ["transactions", "--help"]),
    (["transactions", "-b", "b:1"], ["transactions", "-b", "b:1"]),
])
def test_connection_options_before_a_subcommand(given, expected):
    assert kafka_shapes(given, [*GROUPS, "transactions", "features"]) == expected


def test_two_action_flags_are_left_for_click_to_refuse():
    assert kafka_shapes(["topics", "--create", "--delete"], GROUPS) == \
        ["topics", "--create", "--delete"]


def test_option_hints():
    groups = minibroker.commands["groups"]
    describe = groups.commands["describe"]
    assert "--all-groups" in option_hint(minibroker, describe, "--all-group")
    # An option another command has: say which.
    consume = minibroker.commands["consume"]
    hint = option_hint(minibroker, consume, "--replication-factor")
    assert "topics create" in hint
    assert option_hint(minibroker, consume, "--zzzzzz") == ""


@pytest.mark.parametrize("args, needle", [
    (["groups", "describe", "--all-group"], "--all-groups"),
    (["consume", "t", "--replication-factor", "1"], "topics create"),
    (["topics", "create", "t", "--partition", "3"], "--partitions"),
])
def test_unknown_options_get_a_did_you_mean(args, needle):
    result = CliRunner().invoke(minibroker, args)
    assert result.exit_code == 2
    assert "No such option" in result.output and needle in result.output, result.output


@pytest.mark.parametrize("args, needle", [
    (["groups", "describe"], "--all-groups"),
    (["groups", "describe", "g", "--all-groups"], "--all-groups"),
    (["transactions", "describe"], "--transactional-id"),
    (["transactions", "describe", "a", "--transactional-id", "b"], "one TRANSACTIONAL_ID"),
    (["topics", "create"], "--topic"),
    (["configs", "describe", "--entity-type", "users", "--entity-name", "u"], "topics and brokers"),
    (["configs", "describe", "--entity-type", "topics"], "go together"),
    (["consume", "t", "--property", "print.kye=true"], "print.key"),
    (["delete-records", "--topic", "t"], "go together"),
])
def test_usage_errors_name_what_to_give(args, needle):
    result = CliRunner().invoke(minibroker, [*args, "-b", "127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert needle in result.output, result.output


def test_topic_configs_split_as_kafka_configs_does():
    assert topic_configs(("cleanup.policy=compact,delete,retention.ms=1000",
                          "segment.ms=5")) == {
        "cleanup.policy": "compact,delete", "retention.ms": "1000", "segment.ms": "5"}
    with pytest.raises(click.BadParameter):
        topic_configs(("retention.ms",))


def test_console_formatter_follows_kafka_console_consumer():
    record = ConsumerRecord("t", 2, 7, 1000, b"k", b"v", (("h", b"1"),))
    shown = console_properties(("print.key=true", "print.partition=true", "print.offset=true",
                                "key.separator=|"), CONSUMER_PROPERTIES)
    assert console_formatter(shown, False)(record) == "Partition:2|Offset:7|k|v\n"
    shown = console_properties(("print.timestamp=true", "print.value=false", "print.key=true",
                                "null.literal=NULL"), CONSUMER_PROPERTIES)
    nokey = record._replace(key=None)
    assert console_formatter(shown, False)(nokey) == "CreateTime:1000\tNULL\n"
    with pytest.raises(click.BadParameter, match="did you mean 'print.key'"):
        console_properties(("print.keys=true",), CONSUMER_PROPERTIES)
