"""The command line takes Kafka's tools' option names and shapes (issue 27 items 2, 3, 7 and 10),
in-process (click's runner) against a real broker subprocess shared by the module."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from broker.cli import main as minibroker
from client import Admin, Producer
from client.structs import ConfigResource
from tests.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kafka-names")
    # Consumer groups join at once instead of after Kafka's 3 s first-join wait.
    proc = BrokerProcess.configured(tmp, "group.initial.rebalance.delay.ms=0\n",
                                    "--flush", "never").start()
    yield proc
    assert proc.stop() == 0


def run(broker, *args: str, input: str | None = None, code: int = 0) -> str:
    result = CliRunner().invoke(minibroker, [*args, "-b", broker.bootstrap], input=input)
    assert result.exit_code == code, (args, result.output, result.exception)
    return result.output


def admin(broker) -> Admin:
    return Admin({"bootstrap.servers": broker.bootstrap})


def test_topics_in_kafka_topics_form(broker):
    run(broker, "topics", "--create", "--topic", "kt", "--partitions", "2", "--config",
        "cleanup.policy=compact", "--config", "retention.ms=1000")
    with admin(broker) as a:
        (described,) = a.describe_topics(["kt"])
        assert len(described.partitions) == 2
        resource = ConfigResource("topic", "kt")
        configs = a.describe_configs([resource])[resource]
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].source == "DYNAMIC_TOPIC_CONFIG"
    # --topic-config stays as the older name.
    run(broker, "topics", "create", "kt-old", "--topic-config", "retention.ms=5000")
    run(broker, "topics", "--alter", "--topic", "kt", "--partitions", "4")
    assert "PartitionCount: 4" in run(broker, "topics", "--describe", "--topic", "kt")
    listed = run(broker, "topics", "--list", "--exclude-internal").split()
    assert "kt" in listed and "__consumer_offsets" not in listed
    run(broker, "topics", "--delete", "--topic", "kt-old")


def test_a_typo_in_a_topic_config_gets_a_did_you_mean(broker):
    output = run(broker, "topics", "create", "typo", "--config", "cleanup.polcy=compact", code=1)
    assert "did you mean cleanup.policy?" in output
    output = run(broker, "topics", "create", "typo", "--config", "log.retention.ms=5", code=1)
    assert "retention.ms" in output


def test_ids_in_both_forms(broker):
    with admin(broker) as a:
        a.create_topic("ids", 1)
    with Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ids-loader"}) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("ids", b"v")
        p.commit_transaction()
    run(broker, "consume", "--topic", "ids", "--group", "ids-group", "--from-beginning",
        "--max-messages", "1")
    positional = run(broker, "groups", "describe", "ids-group")
    assert run(broker, "groups", "describe", "--group", "ids-group") == positional
    assert "ids-group" in run(broker, "groups", "--describe", "--group", "ids-group")
    by_option = run(broker, "transactions", "describe", "--transactional-id", "ids-loader",
                    "--format", "json")  # (the text has a duration, which moves)
    assert by_option == run(broker, "transactions", "describe", "ids-loader", "--format", "json")
    assert "CompleteCommit" in by_option
    run(broker, "transactions", "abort", "ids-loader")  # positional too: nothing open


def test_groups_all_groups_and_state(broker):
    with admin(broker) as a:
        a.create_topic("states", 1)
    run(broker, "produce", "--topic", "states", input="x\n")
    for group in ("st-a", "st-b"):
        run(broker, "consume", "states", "-g", group, "--from-beginning", "-n", "1")
    state = run(broker, "groups", "describe", "--all-groups", "--state")
    header, *rows = state.splitlines()
    assert header.split()[:2] == ["GROUP", "COORDINATOR"]
    assert {"st-a", "st-b"} <= {row.split()[0] for row in rows}
    assert all("Empty" in row for row in rows if row.split()[0] in ("st-a", "st-b"))
    everything = json.loads(run(broker, "groups", "describe", "--all-groups", "--format", "json"))
    assert {"st-a", "st-b"} <= {g["group"] for g in everything}
    assert "st-a" in run(broker, "groups", "list", "--state", "Empty").split()
    # The groups' offsets made __consumer_offsets: listed, as kafka-topics.sh --list does,
    # unless --exclude-internal.
    assert "__consumer_offsets" in run(broker, "topics", "list").split()
    assert "__consumer_offsets" in run(broker, "topics", "--list").split()
    assert "__consumer_offsets" not in run(broker, "topics", "list", "--exclude-internal").split()
    run(broker, "groups", "--delete", "--group", "st-a", "--group", "st-b")


def test_console_properties(broker):
    with admin(broker) as a:
        a.create_topic("props", 1)
    run(broker, "produce", "--topic", "props", "--property", "parse.key=true",
        "--property", "key.separator=:", input="alice:10\nbob:20\n")
    output = run(broker, "consume", "--topic", "props", "--from-beginning", "--max-messages", "2",
                 "--property", "print.key=true", "--property", "print.offset=true")
    assert output.splitlines() == ["Offset:0\talice\t10", "Offset:1\tbob\t20"]
    # The console tools' names of the client settings.
    run(broker, "consume", "props", "--from-beginning", "-n", "1",
        "--consumer-property", "client.id=kafka-named")


def test_consume_at_a_time_after_the_last_record_says_so(broker):
    with admin(broker) as a:
        a.create_topic("later", 1)
    run(broker, "produce", "later", input="old\n")
    result = CliRunner().invoke(
        minibroker, ["consume", "later", "--offset", "@2030-01-01", "--timeout", "0.5",
                     "-b", broker.bootstrap])
    assert result.exit_code == 0 and result.stdout == ""
    assert "No record at or after 2030-01-01 in later" in result.stderr


def test_configs_entity_form_and_every_effective_config(broker):
    with admin(broker) as a:
        a.create_topic("ent", 1)
    run(broker, "configs", "--alter", "--entity-type", "topics", "--entity-name", "ent",
        "--add-config", "retention.ms=60000")
    rows = json.loads(run(broker, "configs", "--describe", "--entity-type", "topics",
                          "--entity-name", "ent", "--format", "json"))
    sources = {r["name"]: r["source"] for r in rows}
    assert sources["retention.ms"] == "DYNAMIC_TOPIC_CONFIG"
    assert sources["cleanup.policy"] == "DEFAULT_CONFIG" and len(rows) >= 13
    brokers = json.loads(run(broker, "configs", "describe", "--entity-type", "brokers",
                             "--entity-name", "0", "--all", "--format", "json"))
    assert "num.partitions" in {r["name"] for r in brokers}


def test_delete_records_and_log_dirs(broker, tmp_path):
    with admin(broker) as a:
        a.create_topic("trim", 1)
    run(broker, "produce", "trim", input="".join(f"{i}\n" for i in range(10)))
    assert "low_watermark: 3" in run(broker, "delete-records", "--topic", "trim",
                                     "--partition", "0", "--offset", "3")
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"partitions": [{"topic": "trim", "partition": 0, "offset": 5}],
                                "version": 1}))
    assert "trim-0\tlow_watermark: 5" in run(broker, "delete-records",
                                             "--offset-json-file", str(plan))
    described = json.loads(run(broker, "log-dirs", "--describe", "--topic-list", "trim",
                               "--format", "json"))
    (node,) = described["brokers"]
    partitions = {p["partition"]: p["size"] for d in node["logDirs"] for p in d["partitions"]}
    assert set(partitions) == {"trim-0"} and partitions["trim-0"] > 0


def test_perf_produce_takes_producer_props_as_kafka_does(broker):
    with admin(broker) as a:
        a.create_topic("perf-props", 1)
    output = run(broker, "perf", "produce", "--topic", "perf-props", "--num-records", "50",
                 "--record-size", "10", "--producer-props", "acks=1", "linger.ms=0")
    assert "50 records sent" in output
    run(broker, "perf", "produce", "--topic", "perf-props", "--num-records", "5",
        "--producer-props", "acks=sometimes", code=1)


def test_abort_keeps_the_transactions_timeout(broker):
    """transactions abort --transactional-id fences the producer but keeps the id's timeout
    (issue 27 item 10: it showed the CLI producer's default instead)."""
    with admin(broker) as a:
        a.create_topic("abort-timeout", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "slow-one",
                         "transaction.timeout.ms": 123_000})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("abort-timeout", b"x")
    producer.flush(10)
    try:
        run(broker, "transactions", "abort", "--transactional-id", "slow-one")
        (after,) = json.loads(run(broker, "transactions", "describe", "slow-one", "--format",
                                  "json"))
        assert after["state"] in ("CompleteAbort", "Empty")
        assert after["timeout_ms"] == 123_000
    finally:
        producer.close()
    time.sleep(0)
