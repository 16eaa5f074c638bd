"""Issue 39, a Kafka user's second hour: the console producer's reader properties, configs'
sources and synonyms, Kafka's option names and the small things, in-process (click's runner)
against a real broker subprocess shared by the module."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from broker.cli import main as minibroker
from client import Admin, Consumer, Producer
from client.structs import ConfigResource, TopicPartition
from tests.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("second-hour")
    proc = BrokerProcess.configured(
        tmp, "group.initial.rebalance.delay.ms=0\nauto.create.topics.enable=false\n"
             "log.retention.minutes=1\nlog.roll.hours=2\n", "--flush", "never").start()
    yield proc
    assert proc.stop() == 0


def run(broker, *args: str, input: str | None = None, code: int = 0) -> str:
    result = CliRunner().invoke(minibroker, [*args, "-b", broker.bootstrap], input=input)
    assert result.exit_code == code, (args, result.output, result.exception)
    return result.output


def records(broker, topic: str, count: int):
    config = {"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest"}
    got = []
    with Consumer(config) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        for _ in range(40):
            got += consumer.poll(0.25)
            if len(got) >= count:
                break
    return [(list(r.headers), r.key, r.value) for r in got]


# -- item 1: the console producer's reader properties -----------------------------------------


def test_parse_headers_as_kafkas_line_reader(broker):
    with Admin({"bootstrap.servers": broker.bootstrap}) as a:
        a.create_topic("hdr", 1)
    run(broker, "produce", "hdr", "--property", "parse.key=true", "--property",
        "parse.headers=true", input="h1:v1\tkk\tvv\nh1:a,h2:b\tk2\tv2\n")
    assert records(broker, "hdr", 2) == [
        ([("h1", b"v1")], b"kk", b"vv"),
        ([("h1", b"a"), ("h2", b"b")], b"k2", b"v2"),
    ]


def test_reader_separators_and_null_marker(broker):
    with Admin({"bootstrap.servers": broker.bootstrap}) as a:
        a.create_topic("hdr2", 1)
    run(broker, "produce", "--topic", "hdr2", "--reader-property", "parse.key=true",
        "--property", "key.separator=|", "--property", "parse.headers=true",
        "--property", "headers.delimiter=#", "--property", "headers.separator=;",
        "--property", "headers.key.separator==", "--property", "null.marker=NULL",
        input="a=1;b=NULL#NULL|v1\nNULL#k2|NULL\n")
    assert records(broker, "hdr2", 2) == [
        ([("a", b"1"), ("b", None)], None, b"v1"),
        ([], b"k2", None),
    ]


def test_reader_errors_and_ignore_error(broker):
    with Admin({"bootstrap.servers": broker.bootstrap}) as a:
        a.create_topic("hdr3", 1)
    output = run(broker, "produce", "hdr3", "--property", "parse.key=true",
                 input="good\tone\nno-separator\n", code=1)
    assert "No key separator found on line number 2: 'no-separator'" in output
    output = run(broker, "produce", "hdr3", "--property", "parse.headers=true",
                 input="novalue\tv\n", code=1)
    assert "No header key separator found in pair 'novalue' on line number 1" in output
    output = run(broker, "produce", "hdr3", "--property", "parse.headers=true",
                 "--property", "headers.delimiter=,", input="x\n", code=2)
    assert "headers.delimiter and headers.separator may not be equal" in output
    run(broker, "produce", "hdr3", "--property", "parse.key=true", "--property",
        "parse.headers=true", "--property", "ignore.error=true",
        input="lonely\nh\tk\tv\n")
    got = records(broker, "hdr3", 3)
    # The first line of the failed run was sent before its second failed, as Kafka's does.
    assert got[0] == ([], b"good", b"one")
    assert got[1:] == [([], None, b"lonely"), ([("h", None)], b"k", b"v")]


# -- item 2: DescribeConfigs' effective values, sources and synonyms ----------------------------


def synonyms(entry):
    return [(s.source, s.name, s.value) for s in entry.synonyms]


def test_unit_keys_are_effective_values_with_kafkas_synonyms(broker):
    topic = ConfigResource("topic", "units")
    node = ConfigResource("broker", "0")
    with Admin({"bootstrap.servers": broker.bootstrap}) as a:
        a.create_topic("units", 1)
        described = a.describe_configs([topic, node], include_synonyms=True)
    retention = described[topic]["retention.ms"]
    assert (retention.value, retention.source) == ("60000", "STATIC_BROKER_CONFIG")
    # (a topic's retention.ms and segment.ms list no default of their family: Kafka 4.4 neither)
    assert synonyms(retention) == [("STATIC_BROKER_CONFIG", "log.retention.minutes", "1")]
    segment = described[topic]["segment.ms"]
    assert (segment.value, segment.source) == ("7200000", "STATIC_BROKER_CONFIG")
    assert synonyms(segment) == [("STATIC_BROKER_CONFIG", "log.roll.hours", "2")]
    policy = described[topic]["cleanup.policy"]
    assert (policy.value, policy.source) == ("delete", "DEFAULT_CONFIG")
    assert synonyms(policy) == [("DEFAULT_CONFIG", "log.cleanup.policy", "delete")]
    brokers = described[node]
    assert (brokers["log.retention.ms"].value, brokers["log.retention.ms"].source) == (
        "60000", "STATIC_BROKER_CONFIG")
    assert synonyms(brokers["log.retention.ms"]) == [
        *synonyms(retention), ("DEFAULT_CONFIG", "log.retention.hours", "168")]
    assert (brokers["log.retention.minutes"].value,
            brokers["log.retention.minutes"].source) == ("1", "STATIC_BROKER_CONFIG")
    assert brokers["log.retention.hours"].value == "168"
    assert (brokers["num.partitions"].source, synonyms(brokers["num.partitions"])) == (
        "DEFAULT_CONFIG", [("DEFAULT_CONFIG", "num.partitions", "1")])
    assert brokers["auto.create.topics.enable"].source == "STATIC_BROKER_CONFIG"


def test_configs_describe_prints_kafka_configs_lines(broker):
    with Admin({"bootstrap.servers": broker.bootstrap}) as a:
        a.create_topic("units2", 1)
    run(broker, "configs", "--alter", "--entity-type", "topics", "--entity-name", "units2",
        "--add-config", "retention.ms=5000")
    assert run(broker, "configs", "--describe", "--entity-type", "topics", "--entity-name",
               "units2").splitlines() == [
        "Dynamic configs for topic units2 are:",
        "  retention.ms=5000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5000, "
        "STATIC_BROKER_CONFIG:log.retention.minutes=1}",
    ]
    everything = run(broker, "configs", "describe", "--topic", "units2", "--all").splitlines()
    assert everything[0] == "All configs for topic units2 are:"
    assert ("  segment.ms=7200000 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.roll.hours=2}"
            ) in everything
    assert run(broker, "configs", "--describe", "--entity-type", "brokers",
               "--entity-default") == "Default configs for brokers in the cluster are:\n"
    table = run(broker, "configs", "describe", "--topic", "units2", "--format", "table")
    assert ["retention.ms", "5000", "DYNAMIC_TOPIC_CONFIG"] in [r.split() for r in
                                                                table.splitlines()]


# -- item 3: Kafka 4's stock KRaft server.properties starts the broker ---------------------------

# The keys and values of Kafka 4's config/server.properties (combined broker and controller
# mode), comments left out.
KAFKA4_SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,\\
SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


@pytest.mark.slow  # two broker starts: 4-8 s on a shared machine
def test_kafka4_stock_server_properties_positional(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text(KAFKA4_SERVER_PROPERTIES)
    # Positional, as kafka-server-start.sh takes it; the flags put it on a free loopback port
    # and a data dir under tmp_path (the file's listener and /tmp/kraft-combined-logs are not
    # used).
    proc = BrokerProcess(tmp_path / "data", str(config))
    with proc:
        warnings = [line for line in proc.output if "ignored" in line]
        assert len(warnings) == 1, proc.output
        for key in ("process.roles", "controller.quorum.bootstrap.servers",
                    "controller.listener.names", "the CONTROLLER listener"):
            assert key in warnings[0]
        with Admin({"bootstrap.servers": proc.bootstrap}) as a:
            # The file's node.id and PLAINTEXT advertised listener, as Kafka would tell clients.
            assert a.describe_cluster()["brokers"] == [(1, "localhost", 9092)]
    # kafka-server-start.sh's --override; a blank advertised.listeners is the listeners'.
    proc = BrokerProcess(tmp_path / "data", str(config), "--override", "num.partitions=2",
                         "--override", "advertised.listeners=")
    with proc:
        with Admin({"bootstrap.servers": proc.bootstrap}) as a:
            a.create_topic("kraft")
            (described,) = a.describe_topics(["kraft"])
            assert len(described.partitions) == 2
        run(proc, "produce", "kraft", "-p", "0", input="hello\n")
        assert records(proc, "kraft", 1) == [([], None, b"hello")]


# -- item 4: an ABORT marker for a transaction its coordinator still runs is refused -------------


def test_partition_abort_of_a_running_transaction_is_refused(broker):
    with Admin({"bootstrap.servers": broker.bootstrap}) as a:
        a.create_topic("running", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "runner"})
    with producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("running", b"v")
        producer.flush()
        output = run(broker, "transactions", "abort", "--topic", "running", "--partition", "0",
                     "--start-offset", "0", code=1)
        assert "TransactionCoordinatorFencedError" in output
        assert "transactions abort --transactional-id runner" in output
        with Admin({"bootstrap.servers": broker.bootstrap}) as a:
            (state,) = a.describe_transactions(["runner"])
        assert state.state == "Ongoing"  # untouched: the producer may still commit
        producer.commit_transaction()
    assert records(broker, "running", 1) == [([], None, b"v")]


# -- item 7: missing commands, a closed pipe, an unknown topic -----------------------------------


def test_produce_to_an_unknown_topic_without_auto_create_fails_at_once(broker):
    started = time.monotonic()
    output = run(broker, "produce", "nosuchtopic", input="hi\n", code=1)
    assert time.monotonic() - started < 5
    assert "Topic nosuchtopic not present in metadata" in output
    assert "auto.create.topics.enable=false" in output


def test_a_closed_stdout_is_not_an_error(broker):
    with Admin({"bootstrap.servers": broker.bootstrap}) as a:
        for i in range(3):
            a.create_topic(f"piped-{i}", 1)
    read, write = os.pipe()
    os.close(read)  # `| head -0`: the reader is gone before the first line
    try:
        done = subprocess.run(
            [sys.executable, "-c", "from broker.cli import main; main()", "topics", "list",
             "-b", broker.bootstrap], stdout=write, stderr=subprocess.PIPE, text=True,
            timeout=60)
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode == 141  # as a tool killed by SIGPIPE


def test_broker_api_versions_and_features(broker):
    output = run(broker, "broker-api-versions")
    head, *apis, tail = output.splitlines()
    assert head == f"{broker.bootstrap} (id: 0 rack: null isFenced: false) -> ("
    assert tail == ")"
    assert "\tApiVersions(18): 0 to 4 [usable: 4]," in apis
    assert any(line.startswith("\tInitProducerId(22): 0 to ") for line in apis)
    features = run(broker, "features", "describe")
    assert features == ("Feature: transaction.version\tSupportedMinVersion: 0\t"
                        "SupportedMaxVersion: 2\tFinalizedVersionLevel: 2\tEpoch: 0\n")


# -- item 8: the small ones ---------------------------------------------------------------------


def test_a_cleaning_that_removed_nothing_is_logged_at_debug(tmp_path):
    proc = BrokerProcess.configured(tmp_path, "log.cleaner.backoff.ms=100\n", "--flush", "never",
                                    "--log-level", "debug")
    with proc:
        with Admin({"bootstrap.servers": proc.bootstrap}) as a:
            a.create_topic("unique", 1, configs={"cleanup.policy": "compact",
                                                "segment.bytes": "1024",
                                                "min.cleanable.dirty.ratio": "0.01"})
        with Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 0}) as p:
            for i in range(20):  # every key once: a cleaning has nothing to remove
                p.send("unique", b"v" * 100, key=b"key-%d" % i)
                p.flush()
        line = proc.wait_for_output("cleaned unique-0", timeout=30)
    assert "0 records removed" in line
    assert " DEBUG " in line and " INFO " not in line, line


def test_readme_performance_section_keeps_only_the_current_table():
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Performance", 1)[1].split("\n## ", 1)[0]
    assert "| produce 1 KiB, MB/s |" in section  # the table stays
    # No history: issue numbers, commit ids, run names.
    assert not re.search(r"\bissue \d+|\b[0-9a-f]{7}\b|-20\d{6}-\d{6}", section), section
    assert "issue 29's transaction targets" in (root / "bench" / "README.md").read_text(
        encoding="utf-8").lower() or "transaction targets of issue 29" in (
        root / "bench" / "README.md").read_text(encoding="utf-8")
