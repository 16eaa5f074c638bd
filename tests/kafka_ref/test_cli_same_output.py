"""Issue 39: where a ``minibroker`` command stands for one of Kafka's tools, its default text is
that tool's, checked by running Kafka 4.4's tool and ours against the same minibroker and
comparing (ids, hosts, times and column padding normalized: ``tools.normalize``); and an answer of
the broker (EndTxn before the transaction's only batch, the Java producer's race) compared with
Kafka's own broker's."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from broker.cli import main as minibroker_cli
from client import Admin, Producer
from client.share_consumer import ShareConsumer
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import encode_batch
from tests.broker_process import BrokerProcess
from tests.integration.test_share_groups import set_group_config
from tests.kafka_ref.tools import (
    ACLS,
    CONFIGS,
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    CONSUMER_PERF,
    GET_OFFSETS,
    GROUPS,
    PRODUCER_PERF,
    TOPICS,
    TXNS,
    Tool,
    normalize,
    run_batch,
)
from tests.raw_client import RawConnection

pytestmark = [pytest.mark.xdist_group("kafka_ref"), pytest.mark.slow]

BROKER_API_VERSIONS = "org.apache.kafka.tools.BrokerApiVersionsCommand"
FEATURES = "org.apache.kafka.tools.FeatureCommand"


@pytest.fixture(scope="module")
def broker(kafka_ref, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("same-output")
    proc = BrokerProcess.configured(tmp, "log.retention.minutes=10\n").start()
    yield proc
    assert proc.stop() == 0


def ours(broker: BrokerProcess, *args: str) -> str:
    result = CliRunner().invoke(minibroker_cli, [*args, "-b", broker.bootstrap])
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.stdout  # (Kafka's tools' stdout is compared; stderr is for people)


# kafka-transactions.sh describe's TransactionDurationMs: the time between the two runs
_DURATION = re.compile(r"(?<=<ms> )\d+(?= )")


def same(broker: BrokerProcess, pairs: list[tuple[Tool, list[str]]],
         unordered: bool = False) -> None:
    """Each Kafka tool and our command against ``broker``: the same text once normalized
    (``unordered``: the same lines, a listing in no defined order)."""
    theirs = run_batch([tool for tool, _ in pairs])
    extra = {broker.bootstrap: "<bootstrap>"}
    diffs = []
    for (_tool, args), result in zip(pairs, theirs, strict=True):
        assert result.code == 0, result
        mine = _DURATION.sub("<duration>", normalize(ours(broker, *args), extra))
        ref = _DURATION.sub("<duration>", normalize(result.out, extra))
        if unordered:
            mine, ref = ("\n".join(sorted(text.splitlines())) for text in (mine, ref))
        if mine != ref:
            diffs.append(f"=== {' '.join(args)}\n--- Kafka's tool:\n{ref}\n--- ours:\n{mine}")
    assert not diffs, "\n".join(diffs)


def test_configs_api_versions_and_features_print_kafkas_text(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic("same", 2, configs={"retention.ms": "5000",
                                                "cleanup.policy": "compact"})
    same(broker, [
        (Tool(CONFIGS, [*bs, "--describe", "--entity-type", "topics", "--entity-name", "same"]),
         ["configs", "describe", "--topic", "same"]),
        (Tool(CONFIGS, [*bs, "--describe", "--entity-type", "topics", "--entity-name", "same",
                        "--all"]),
         ["configs", "--describe", "--entity-type", "topics", "--entity-name", "same", "--all"]),
        (Tool(CONFIGS, [*bs, "--describe", "--entity-type", "brokers", "--entity-default"]),
         ["configs", "describe", "--entity-type", "brokers", "--entity-default"]),
        (Tool(BROKER_API_VERSIONS, bs), ["broker-api-versions"]),
        (Tool(FEATURES, [*bs, "describe"]), ["features", "describe"]),
        (Tool(TOPICS, [*bs, "--describe", "--topic", "same"]),
         ["topics", "describe", "--topic", "same"]),
        (Tool(GET_OFFSETS, [*bs, "--topic", "same"]), ["get-offsets", "--topic", "same"]),
        (Tool(GET_OFFSETS, [*bs, "--topic-partitions", "same:1", "--time", "-2"]),
         ["get-offsets", "--topic-partitions", "same:1", "--time", "-2"]),
        (Tool(TOPICS, [*bs, "--describe", "--topics-with-overrides", "--topic", "same"]),
         ["topics", "--describe", "--topics-with-overrides", "--topic", "same"]),
        # (not --at-min-isr-partitions: Kafka's tool reads the topic's min.insync.replicas,
        # which this broker's DescribeConfigs does not list, and fails with a
        # NullPointerException)
    ])


def test_transactions_print_kafkas_text(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic("same-txn", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "same-tx"})
    with producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("same-txn", b"v", partition=0)
        producer.flush()
        same(broker, [
            (Tool(TXNS, [*bs, "list"]), ["transactions", "list"]),
            (Tool(TXNS, [*bs, "describe", "--transactional-id", "same-tx"]),
             ["transactions", "describe", "--transactional-id", "same-tx"]),
            (Tool(TXNS, [*bs, "describe-producers", "--topic", "same-txn", "--partition", "0"]),
             ["transactions", "describe-producers", "--topic", "same-txn", "--partition", "0"]),
        ])
        producer.abort_transaction()


# -- the Java producer's race: EndTxn before the transaction's only batch (docs/protocol.md) -----


RETRY = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
         ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS)


def _race(port: int, topic: str, attempt: int = 0) -> tuple[int, int, int]:
    """Transaction version 2, as Kafka 4.4's Java producer sends it when its Sender reads the
    accumulator as empty before the batch is in it: InitProducerId, EndTxn(commit) with nothing
    added yet, then the batch (Produce v12), then an abort. The three error codes."""
    tid = f"race-{topic}-{attempt}"
    with RawConnection(port) as conn:
        deadline = time.monotonic() + 60
        while True:  # Kafka's FindCoordinator creates __transaction_state first
            found = conn.request(ApiKey.FIND_COORDINATOR, 3, {"key": tid, "key_type": 1})
            if found.error_code == ErrorCode.NONE or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        while True:
            init = conn.request(ApiKey.INIT_PRODUCER_ID, 5, {"transactional_id": tid,
                                                              "transaction_timeout_ms": 60_000})
            if init.error_code not in RETRY or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert init.error_code == ErrorCode.NONE
        pid, epoch = init.producer_id, init.producer_epoch
        ended = conn.request(ApiKey.END_TXN, 5, {"transactional_id": tid, "producer_id": pid,
                                                 "producer_epoch": epoch, "committed": True})
        records = encode_batch([(None, b"late", (), 0)], producer_id=pid, producer_epoch=epoch,
                               base_sequence=0, transactional=True)
        produced = conn.request(ApiKey.PRODUCE, 12, {
            "transactional_id": tid, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        })
        aborted = conn.request(ApiKey.END_TXN, 5, {"transactional_id": tid, "producer_id": pid,
                                                   "producer_epoch": epoch, "committed": False})
    return (ended.error_code, produced.responses[0].partition_responses[0].error_code,
            aborted.error_code)


def test_end_txn_before_the_only_batch_is_answered_as_kafka_does(broker, kafka_one):
    answers = {}
    for name, bootstrap in (("minibroker", broker.bootstrap), ("kafka", kafka_one.bootstrap)):
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topic("race", 1, exist_ok=True)
        for attempt in range(5):
            answers[name] = _race(int(bootstrap.rsplit(":", 1)[1]), "race", attempt)
            # A topic just created may have no leader yet on Kafka (NOT_LEADER_OR_FOLLOWER, 6,
            # seen once): that is not the answer compared here; the race again, with a new id.
            if answers[name][1] not in (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                break
            time.sleep(0.5)
    assert answers["minibroker"] == answers["kafka"], answers
    assert answers["kafka"][0] == ErrorCode.INVALID_TXN_STATE


def test_groups_print_kafkas_text(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic("same-groups", 2)
    CliRunner().invoke(minibroker_cli, ["produce", "same-groups", "-p", "0", "-b",
                                        broker.bootstrap], input="a\nb\n")
    ours(broker, "consume", "same-groups", "--group", "same-g", "--from-beginning", "-n", "1")
    same(broker, [
        (Tool(GROUPS, [*bs, "--describe", "--group", "same-g"]),
         ["groups", "describe", "--group", "same-g"]),
        (Tool(GROUPS, [*bs, "--describe", "--group", "same-g", "--members"]),
         ["groups", "describe", "--group", "same-g", "--members"]),
        (Tool(GROUPS, [*bs, "--describe", "--group", "same-g", "--state"]),
         ["groups", "describe", "--group", "same-g", "--state"]),
        (Tool(GROUPS, [*bs, "--list", "--state"]), ["groups", "--list", "--state"]),
    ])


SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"


def _share_group(broker: BrokerProcess, group: str, topic: str, n: int) -> ShareConsumer:
    """A member of share group ``group`` that has received and accepted ``n`` records."""
    set_group_config(broker.port, group, "share.auto.offset.reset", "earliest")
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.subscribe([topic])
    got, deadline = 0, time.monotonic() + 30
    while got < n and time.monotonic() < deadline:
        got += len(consumer.poll(0.5))
    assert got == n
    consumer.commit_sync()
    return consumer


def test_share_groups_print_kafkas_text(broker):
    """kafka-share-groups.sh and ``share-groups`` on the same groups: read-only views of one
    group, then each changing command given to Kafka's tool for one group and to ours for a
    twin group in the same state (the group ids normalized)."""
    bs = ["--bootstrap-server", broker.bootstrap]
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic("same-share", 2)
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        for i in range(6):
            producer.send("same-share", b"v", partition=i % 2)
    consumer = _share_group(broker, "same-sg", "same-share", 6)
    try:
        views = [["--list"], ["--list", "--state"], ["--list", "--state", "Stable"]] + [
            ["--describe", "--group", "same-sg", *more]
            for more in ([], ["--verbose"], ["--members"], ["--members", "--verbose"],
                         ["--state"], ["--state", "--verbose"])]
        same(broker, [(Tool(SHARE_GROUPS, [*bs, *v]), ["share-groups", *v]) for v in views])
    finally:
        consumer.close()
    # twins: "same-k" for Kafka's tool, "same-m" for ours
    for group in ("same-k", "same-m"):
        _share_group(broker, group, "same-share", 6).close()
    steps = [
        ["--describe", "--group", "<g>", "--state"],
        ["--describe", "--group", "<g>", "--members"],
        ["--reset-offsets", "--group", "<g>", "--topic", "same-share", "--to-earliest",
         "--dry-run"],
        ["--reset-offsets", "--group", "<g>", "--all-topics", "--to-offset", "1", "--execute"],
        ["--describe", "--group", "<g>"],
        ["--reset-offsets", "--group", "<g>", "--topic", "same-share:1", "--to-latest",
         "--execute"],
        ["--describe", "--group", "<g>", "--verbose"],
        ["--delete-offsets", "--group", "<g>", "--topic", "nosuch"],  # (ours exits 1)
        ["--delete-offsets", "--group", "<g>", "--topic", "same-share"],
        ["--describe", "--group", "<g>"],
        ["--delete", "--group", "<g>"],
    ]
    extra = {broker.bootstrap: "<bootstrap>", "same-k": "<g>", "same-m": "<g>"}
    theirs = run_batch([Tool(SHARE_GROUPS, [*bs, *[a.replace("<g>", "same-k") for a in step]])
                        for step in steps])
    diffs = []
    for step, result in zip(steps, theirs, strict=True):
        done = CliRunner().invoke(minibroker_cli, ["share-groups", *[
            a.replace("<g>", "same-m") for a in step], "-b", broker.bootstrap])
        assert done.exit_code == (1 if "nosuch" in step else 0), (step, done.output)
        mine = normalize(done.stdout, extra)
        ref = normalize(result.out, extra)
        if step[0] == "--reset-offsets":  # (Kafka's tool prints the partitions unordered)
            mine, ref = ("\n".join(sorted(text.splitlines())) for text in (mine, ref))
        if mine != ref:
            diffs.append(f"=== {' '.join(step)}\n--- Kafka's tool:\n{ref}\n--- ours:\n{mine}")
    assert not diffs, "\n".join(diffs)


# -- the option lists test_cli_kafka_options.py walks are Kafka's -------------------------------

_MAINS = {
    "topics": TOPICS, "produce": CONSOLE_PRODUCER, "consume": CONSOLE_CONSUMER,
    "groups": GROUPS, "configs": CONFIGS, "get-offsets": GET_OFFSETS,
    "delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "log-dirs": "org.apache.kafka.tools.LogDirsCommand", "acls": "org.apache.kafka.tools.AclCommand",
    "perf produce": PRODUCER_PERF, "perf consume": CONSUMER_PERF,
    "broker-api-versions": BROKER_API_VERSIONS, "features": FEATURES, "transactions": TXNS,
    "share-groups": SHARE_GROUPS,
}


def test_the_stored_option_lists_are_kafkas(kafka_ref):
    stored = json.loads((Path(__file__).resolve().parents[1] / "integration"
                         / "kafka_tool_options.json").read_text())
    paths = [p for p in stored if not p.startswith("_")]
    tools = []
    for path in paths:
        head, _, sub = path.partition(" ")
        if head in ("transactions", "features") and sub:
            tools.append(Tool(_MAINS[head], [sub, "--help"]))
        else:
            tools.append(Tool(_MAINS[path], ["--help"]))
    for path, result in zip(paths, run_batch(tools), strict=True):
        found = sorted(set(re.findall(r"(?m)^\s*(--[a-z][\w.-]*)", result.out + result.err)))
        assert found == stored[path], (path, found)


def test_acls_list_prints_kafkas_blocks(kafka_ref, tmp_path):
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule required"
    config = tmp_path / "server.properties"
    config.write_text(
        "listeners=SASL_PLAINTEXT://127.0.0.1:0\n"
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT\n"
        "sasl.enabled.mechanisms=PLAIN\n"
        f'listener.name.sasl_plaintext.plain.sasl.jaas.config={plain} username="admin" '
        'password="admin-secret" user_admin="admin-secret";\n'
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
        "super.users=User:admin\n")
    admin = tmp_path / "admin.properties"
    admin.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     f'sasl.jaas.config={plain} username="admin" password="admin-secret";\n')
    with BrokerProcess(tmp_path / "data", "--config", str(config)) as secured:
        cc = ["--command-config", str(admin)]
        ours(secured, "acls", "add", "--allow-principal", "User:alice", "--operation", "Write",
             "--topic", "secure", *cc)
        ours(secured, "acls", "add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.1",
             "--operation", "Read", "--group", "g-", "--resource-pattern-type", "prefixed", *cc)
        bs = ["--bootstrap-server", secured.bootstrap, *cc]
        # (one ACL per resource: Kafka's sets list several in no defined order)
        same(secured, [
            (Tool(ACLS, [*bs, "--list"]), ["acls", "--list", *cc]),
            (Tool(ACLS, [*bs, "--list", "--topic", "secure"]),
             ["acls", "list", "--topic", "secure", *cc]),
        ], unordered=True)
