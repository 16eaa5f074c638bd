"""Kafka's own command-line tools (4.4) against minibroker and against the reference Kafka, side
by side: each scenario runs the same tool invocations (one JVM per broker: ``ToolBatch``) after the
same set-up, and what the tools print (exit codes and stdout; stderr where it is the tool's answer)
must be the same once ids, hosts, ports and times are normalized. The differences minibroker keeps
on purpose are rewritten by ``KEPT`` below, each with its reason (README: "Kafka's tools")."""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import Producer

from tests.broker_process import BrokerProcess
from tests.kafka_ref.tools import (
    CONFIGS,
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    CONSUMER_PERF,
    GET_OFFSETS,
    GROUPS,
    PRODUCER_PERF,
    TOPICS,
    TXNS,
    Result,
    Tool,
    normalize,
    run_batch,
)

pytestmark = [pytest.mark.xdist_group("kafka_ref"), pytest.mark.slow]

# Differences kept on purpose: (pattern in Kafka's normalized output, replacement, reason).
KEPT = [
    # minibroker has no topic ids (Metadata answers the zero UUID), so the tool leaves the field out
    (re.compile(r" TopicId: <id>"), "", "no topic ids"),
    # DescribeTopicPartitions (KIP-966, eligible leader replicas) is not served: the tool falls
    # back to Metadata and prints N/A for the ELR columns; one node has no ELR anyway
    (re.compile(r"Elr: LastKnownElr:"), "Elr: N/A LastKnownElr: N/A", "no DescribeTopicPartitions"),
    # Kafka 4 (KIP-966) writes a cluster-level dynamic min.insync.replicas, so every topic lists
    # it; minibroker has no replication and reports min.insync.replicas as a default
    (re.compile(r"(?<=Configs: )min\.insync\.replicas=1,?"), "", "cluster-level min ISR"),
]


@pytest.fixture(scope="module")
def minibroker(kafka_ref, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tools-minibroker")
    config = tmp / "server.properties"
    config.write_text("group.initial.rebalance.delay.ms=0\noffsets.topic.num.partitions=3\n"
                      "transaction.state.log.num.partitions=3\n")
    broker = BrokerProcess(tmp / "data", "--config", str(config)).start()
    yield broker
    broker.stop()


def both(minibroker: BrokerProcess, kafka, scenario, *, stderr: bool = False
         ) -> tuple[list[Result], list[Result]]:
    """Run ``scenario(bootstrap) -> [Tool]`` against both; assert the normalized outputs agree."""
    tools = scenario(minibroker.bootstrap)
    ours = run_batch(tools)
    theirs = run_batch(scenario(kafka.bootstrap))
    diffs = []
    for i, (tool, a, b) in enumerate(zip(tools, ours, theirs, strict=True)):
        mine = render(a, minibroker.bootstrap, stderr, tool.unordered)
        ref = render(b, kafka.bootstrap, stderr, tool.unordered)
        for pattern, replacement, _reason in KEPT:
            ref = pattern.sub(replacement, ref)
        if mine != ref:
            diffs.append(f"=== tool #{i} {tool.main.rsplit('.', 1)[1]} {' '.join(tool.args[2:])}\n"
                         f"--- Kafka:\n{ref}\n--- minibroker:\n{mine}\n"
                         f"--- raw minibroker:\n{a}\n--- raw Kafka:\n{b}")
    assert not diffs, "\n".join(diffs)
    return ours, theirs


def render(result: Result, bootstrap: str, stderr: bool, unordered: bool = False) -> str:
    text = result.out
    if stderr:
        text += "\n" + "\n".join(line for line in result.err.splitlines()
                                 if not re.match(r"\[\d{4}-", line))  # log lines are not the answer
    text = normalize(text, {bootstrap: "<bootstrap>"})
    if unordered:  # a listing whose order Kafka does not define
        text = "\n".join(sorted(text.splitlines()))
    return f"exit {result.code}\n{text}"


# -- kafka-topics -------------------------------------------------------------------------------


def topics_scenario(b: str) -> list[Tool]:
    bs = ["--bootstrap-server", b]
    return [
        Tool(TOPICS, [*bs, "--create", "--topic", "t1", "--partitions", "3", "--config",
                      "retention.ms=3600000"]),
        Tool(TOPICS, [*bs, "--create", "--topic", "t1", "--partitions", "3"]),
        Tool(TOPICS, [*bs, "--create", "--topic", "t1", "--if-not-exists"]),
        Tool(TOPICS, [*bs, "--create", "--topic", "t2", "--replication-factor", "1", "--config",
                      "cleanup.policy=compact"]),
        Tool(TOPICS, [*bs, "--list", "--exclude-internal"]),
        Tool(TOPICS, [*bs, "--describe", "--topic", "t1"]),
        Tool(TOPICS, [*bs, "--alter", "--topic", "t1", "--partitions", "4"]),
        Tool(TOPICS, [*bs, "--describe", "--topic", "t1"]),
        Tool(TOPICS, [*bs, "--describe", "--topic", "t2"]),
        Tool(TOPICS, [*bs, "--describe", "--under-replicated-partitions"]),
        Tool(TOPICS, [*bs, "--describe", "--topic", "nope"]),
        Tool(TOPICS, [*bs, "--delete", "--topic", "t2"]),
        Tool(TOPICS, [*bs, "--create", "--topic", "bad name!"]),
        Tool(TOPICS, [*bs, "--create", "--topic", "t3", "--replication-factor", "3"]),
        Tool(TOPICS, [*bs, "--create", "--topic", "t3", "--replication-factor", "0"]),
        Tool(TOPICS, [*bs, "--alter", "--topic", "t1", "--partitions", "2"]),
        Tool(TOPICS, [*bs, "--alter", "--topic", "t1", "--partitions", "4"]),
    ]


def test_kafka_topics(minibroker, kafka_one):
    both(minibroker, kafka_one, topics_scenario)
    time.sleep(0)  # t2's deletion completes asynchronously on Kafka; nothing else uses it


# -- console producer and consumer: keys, headers, isolation level -----------------------------


def produce_transactions(bootstrap: str, topic: str, txn_id: str) -> None:
    """One committed and one aborted transaction of two records each, then a plain record."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    for outcome in ("committed", "aborted"):
        producer.begin_transaction()
        for i in range(2):
            producer.produce(topic, key=f"{outcome}-{i}".encode(), value=f"{outcome} {i}".encode(),
                             partition=0)
        if outcome == "committed":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, key=b"plain", value=b"after", partition=0)
    assert plain.flush(30) == 0


def console_scenario(b: str) -> list[Tool]:
    bs = ["--bootstrap-server", b]
    printing = ["--formatter-property", "print.key=true", "--formatter-property",
                "print.headers=true", "--formatter-property", "print.partition=true",
                "--formatter-property", "print.offset=true", "--formatter-property", "key.separator=|"]
    consume = [*bs, "--topic", "console", "--from-beginning", "--timeout-ms", "5000", *printing]
    return [
        Tool(CONSOLE_PRODUCER, [*bs, "--topic", "console", "--reader-property", "parse.key=true",
                                "--reader-property", "key.separator=:",
                                "--reader-property", "parse.headers=true",
                                "--reader-property", "headers.delimiter=\t",
                                "--reader-property", "headers.separator=,",
                                "--reader-property", "headers.key.separator=="],
             stdin="h1=v1,h2=v2\tk1:first\n\tk2:second\nh3=\tk3:third\n"),
        Tool(CONSOLE_CONSUMER, [*consume, "--max-messages", "3"]),
        Tool(CONSOLE_PRODUCER, [*bs, "--topic", "console", "--producer-property", "acks=all",
                                "--compression-codec", "gzip"], stdin="fourth\nfifth\n"),
        Tool(CONSOLE_CONSUMER, [*bs, "--topic", "console", "--partition", "0", "--offset", "3",
                                "--max-messages", "2", "--timeout-ms", "5000"]),
    ]


def isolation_scenario(b: str) -> list[Tool]:
    bs = ["--bootstrap-server", b, "--topic", "txn-console", "--from-beginning",
          "--timeout-ms", "4000", "--formatter-property", "print.key=true"]
    return [
        Tool(CONSOLE_CONSUMER, [*bs, "--isolation-level", "read_committed"]),
        Tool(CONSOLE_CONSUMER, [*bs, "--isolation-level", "read_uncommitted"]),
    ]


def test_console_producer_and_consumer(minibroker, kafka_one):
    ours, _ = both(minibroker, kafka_one, console_scenario)
    assert ours[1].out.splitlines()[0] == "Partition:0|Offset:0|h1:v1,h2:v2|k1|first"
    for target in (minibroker, kafka_one):
        produce_transactions(target.bootstrap, "txn-console", "console-txn")
    ours, _ = both(minibroker, kafka_one, isolation_scenario)
    assert ours[0].out.split() == ["committed-0", "committed", "0", "committed-1", "committed",
                                   "1", "plain", "after"]


# -- kafka-consumer-groups: list, describe with lag, reset-offsets, delete ---------------------


def groups_scenario(b: str) -> list[Tool]:
    bs = ["--bootstrap-server", b]
    group = [*bs, "--group", "tools-group"]
    reset = [*group, "--reset-offsets", "--topic", "grouped"]
    return [
        Tool(CONSOLE_PRODUCER, [*bs, "--topic", "grouped"], stdin="".join(f"{i}\n" for i in range(10))),
        Tool(GROUPS, [*reset, "--to-offset", "4", "--execute"]),  # an empty group's first commit
        Tool(GROUPS, [*bs, "--list"], unordered=True),
        Tool(GROUPS, [*bs, "--list", "--state"], unordered=True),
        Tool(GROUPS, [*group, "--describe"]),
        Tool(GROUPS, [*group, "--describe", "--state"]),
        Tool(GROUPS, [*group, "--describe", "--members"]),
        Tool(GROUPS, [*group, "--describe", "--offsets"]),
        Tool(GROUPS, [*reset, "--to-earliest", "--dry-run"]),
        Tool(GROUPS, [*reset, "--to-earliest", "--execute"]),
        Tool(GROUPS, [*reset, "--shift-by", "3", "--execute"]),
        Tool(GROUPS, [*reset, "--shift-by", "-5", "--execute"]),
        Tool(GROUPS, [*reset, "--to-latest", "--execute"]),
        Tool(GROUPS, [*reset, "--to-datetime", "2000-01-01T00:00:00.000", "--execute"]),
        Tool(GROUPS, [*reset, "--to-datetime", "2999-01-01T00:00:00.000", "--execute"]),
        Tool(GROUPS, [*reset, "--by-duration", "PT1H", "--execute"]),
        Tool(GROUPS, [*group, "--describe"]),
        Tool(GROUPS, [*group, "--delete-offsets", "--topic", "grouped"]),
        Tool(GROUPS, [*group, "--delete"]),
        Tool(GROUPS, [*group, "--describe"]),
        Tool(GROUPS, [*bs, "--group", "nope", "--delete"]),
        Tool(GROUPS, [*bs, "--list"], unordered=True),
    ]


def test_kafka_consumer_groups(minibroker, kafka_one):
    ours, _ = both(minibroker, kafka_one, groups_scenario, stderr=True)
    assert "grouped 0 4 10 6" in normalize(ours[4].out)


# -- kafka-configs ----------------------------------------------------------------------------


def configs_scenario(b: str) -> list[Tool]:
    bs = ["--bootstrap-server", b]
    topic = [*bs, "--entity-type", "topics", "--entity-name", "configured"]
    broker = [*bs, "--entity-type", "brokers", "--entity-name", "0"]
    return [
        Tool(TOPICS, [*bs, "--create", "--topic", "configured"]),
        Tool(CONFIGS, [*topic, "--describe"]),
        Tool(CONFIGS, [*topic, "--alter", "--add-config", "retention.ms=7200000,cleanup.policy=compact"]),
        Tool(CONFIGS, [*topic, "--describe"]),
        Tool(CONFIGS, [*topic, "--alter", "--delete-config", "cleanup.policy"]),
        Tool(CONFIGS, [*topic, "--describe"]),
        Tool(CONFIGS, [*topic, "--alter", "--add-config", "no.such.config=1"]),
        Tool(CONFIGS, [*topic, "--alter", "--add-config", "retention.ms=soon"]),
        Tool(CONFIGS, [*bs, "--entity-type", "topics", "--entity-name", "nope", "--describe"]),
        Tool(CONFIGS, [*broker, "--describe"]),
        Tool(CONFIGS, [*bs, "--entity-type", "brokers", "--entity-default", "--describe"]),
        Tool(CONFIGS, [*broker, "--alter", "--add-config", "log.cleaner.threads=2"]),
        Tool(CONFIGS, [*broker, "--describe"]),
    ]


def test_kafka_configs(minibroker, kafka_one):
    both(minibroker, kafka_one, configs_scenario, stderr=True)


# -- kafka-get-offsets ---------------------------------------------------------------------------


def offsets_scenario(b: str) -> list[Tool]:
    bs = ["--bootstrap-server", b]
    return [
        Tool(CONSOLE_PRODUCER, [*bs, "--topic", "offsets"], stdin="a\nb\nc\n"),
        Tool(GET_OFFSETS, [*bs, "--topic", "offsets"]),
        Tool(GET_OFFSETS, [*bs, "--topic", "offsets", "--time", "-2"]),
        Tool(GET_OFFSETS, [*bs, "--topic", "offsets", "--time", "-1"]),
        Tool(GET_OFFSETS, [*bs, "--topic", "offsets", "--time", "-3"]),
        Tool(GET_OFFSETS, [*bs, "--topic", "offsets", "--time", "4102444800000"]),
        Tool(GET_OFFSETS, [*bs, "--topic-partitions", "offsets:0,nope:0"]),
        Tool(GET_OFFSETS, [*bs, "--topic", "nope-.*"]),
    ]


def test_kafka_get_offsets(minibroker, kafka_one):
    ours, _ = both(minibroker, kafka_one, offsets_scenario, stderr=True)
    assert ours[1].out == "offsets:0:3\n"
