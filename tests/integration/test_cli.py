"""The ``minibroker`` command as a user runs it (a subprocess) against a real broker subprocess.

One broker serves the whole module (with Kafka's default group.initial.rebalance.delay.ms of 3 s,
which the group tests must survive); every test uses its own topic and group names. Each fixed
item of issue 15 has a test here (or in test_serve_cli.py for ``serve`` itself).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from client import Admin, Consumer, NewTopic, Producer
from tests.broker_process import BrokerProcess
from tests.process_guard import popen

ROOT = Path(__file__).resolve().parents[2]


def minibroker_argv() -> list[str]:
    """The installed console script if there is one (``make`` installs it), else the module."""
    script = Path(sys.executable).parent / "minibroker"
    return [str(script)] if script.exists() else [sys.executable, "-m", "broker.cli"]


def run(*args: str, input: str | None = None, env: dict | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*minibroker_argv(), *args], input=input, capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("cli") / "data") as proc:
        yield proc


@pytest.fixture
def b(broker) -> list[str]:
    return ["--bootstrap-server", broker.bootstrap]


def create(broker, topic: str, partitions: int = 1) -> None:
    from tests.spark.helpers import wait_for_topic  # also run against a Kafka cluster

    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, partitions)])
        wait_for_topic(admin, topic)


def produce(broker, topic: str, records: list[tuple[int, bytes]]) -> None:
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        for partition, value in records:
            producer.send(topic, value, partition=partition)
        producer.flush(10)


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stderr
    return result


def one_line_error(result: subprocess.CompletedProcess, needle: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr


# -- item 1: the console consumer commits every assigned position --------------------------------


@pytest.mark.slow
def test_group_consumer_commits_every_assigned_partition(broker, b):
    create(broker, "orders", 2)
    produce(broker, "orders", [(1, b"only-in-1")])
    result = ok(run("consume", "orders", "-g", "g-orders", "--from-beginning", "-n", "1", *b))
    assert result.stdout == "only-in-1\n"
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        committed = admin.list_group_offsets("g-orders")
    assert {(tp.partition, o.offset) for tp, o in committed.items()} == {(0, 0), (1, 1)}
    # A later record in either partition reaches the next run of the group.
    produce(broker, "orders", [(0, b"later-in-0")])
    again = ok(run("consume", "orders", "-g", "g-orders", "-n", "1", *b))
    assert again.stdout == "later-in-0\n"


def test_max_messages_never_commits_past_an_unprinted_record(broker, b):
    create(broker, "cut", 1)
    produce(broker, "cut", [(0, b"r%d" % i) for i in range(5)])
    assert ok(run("consume", "cut", "-g", "g-cut", "--from-beginning", "-n", "2", *b)).stdout \
        == "r0\nr1\n"
    assert ok(run("consume", "cut", "-g", "g-cut", "-n", "3", *b)).stdout == "r2\nr3\nr4\n"


# -- item 4: transactions are never left open ------------------------------------------------------


def test_transactions_abort_finishes_what_a_killed_producer_left(broker, b):
    create(broker, "tx-left", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "left"})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("tx-left", b"never-visible")
    producer.flush(10)
    described = json.loads(ok(run("transactions", "describe", "left", "--format", "json",
                                   *b)).stdout)
    assert described[0]["state"] == "Ongoing"
    assert described[0]["partitions"] == [["tx-left", 0]]
    result = ok(run("transactions", "abort", "--transactional-id", "left", "--format", "json",
                    *b))
    after = json.loads(result.stdout)[0]
    # InitProducerId aborted it and left the id Empty with a higher epoch (the old one fenced).
    assert after["state"] == "Empty" and after["producer_epoch"] > described[0]["producer_epoch"]
    assert "Aborted the transaction of left" in result.stderr
    # The last stable offset moved past the aborted record and its marker.
    offsets = ok(run("get-offsets", "tx-left", "--isolation-level", "read_committed", *b))
    assert offsets.stdout == "tx-left:0:2\n"
    assert ok(run("consume", "tx-left", "--from-beginning", "--timeout", "1", *b)).stdout == ""
    producer.close()
    # Nothing to abort: says so, exit 0; an unknown id is an error.
    assert "has no open transaction" in ok(run("transactions", "abort", "--transactional-id",
                                               "left", *b)).stderr
    one_line_error(run("transactions", "abort", "--transactional-id", "nobody", *b),
                   "transactional id 'nobody' not found")


@pytest.mark.slow
def _default_sigint() -> None:
    # A suite started in the background by a shell inherits SIGINT ignored (POSIX), and Python
    # keeps it ignored: Ctrl-C must reach the CLI as it does in a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_transactional_produce_aborts(broker, b):
    create(broker, "tx-ctrl-c", 1)
    proc = popen([*minibroker_argv(), "produce", "tx-ctrl-c", "--transactional-id", "ctrl-c", *b],
                 what="minibroker produce", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    try:
        proc.stdin.write("one\ntwo\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until the coordinator has the partition
            described = run("transactions", "describe", "ctrl-c", "--format", "json", *b)
            if described.returncode == 0:  # not found before the producer's InitProducerId
                state = json.loads(described.stdout)[0]
                if state["state"] == "Ongoing" and state["partitions"]:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("the transaction never started")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Aborted the transaction of ctrl-c" in err
    # Kafka answers EndTxn before its markers are written (PrepareAbort for a moment; this test
    # also runs against a Kafka cluster: tests/kafka_road); minibroker answers once they are.
    deadline = time.monotonic() + 30
    while True:
        state = json.loads(ok(run("transactions", "describe", "ctrl-c", "--format", "json",
                                  *b)).stdout)[0]
        if state["state"] != "PrepareAbort" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert state["state"] == "CompleteAbort"


def test_transactions_list_json_and_state_filter(broker, b):
    create(broker, "tx-list", 1)
    with Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "listed"}) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("tx-list", b"x")
        p.commit_transaction()
    # Kafka answers EndTxn before its markers are written (PrepareCommit for a moment: this test
    # also runs against a Kafka cluster, tests/kafka_road); minibroker answers once they are.
    deadline = time.monotonic() + 30
    while True:
        listed = json.loads(ok(run("transactions", "list", "--state", "CompleteCommit",
                                   "--format", "json", *b)).stdout)
        if "listed" in {t["transactional_id"] for t in listed} or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert "listed" in {t["transactional_id"] for t in listed}
    assert all(t["state"] == "CompleteCommit" for t in listed)
    one_line_error(run("transactions", "list", "--state", "Bogus", *b),
                   "unknown transaction state(s): Bogus")


# -- item 5: timeouts and an absent broker ---------------------------------------------------------


def test_consume_unknown_topic_honours_the_timeout(b):
    started = time.monotonic()
    result = run("consume", "no-such-topic", "--timeout", "2", *b)
    elapsed = time.monotonic() - started
    one_line_error(result, "topic 'no-such-topic' does not exist")
    assert 2 <= elapsed < 15, elapsed


@pytest.mark.parametrize("command", [["produce", "t"], ["consume", "t"], ["topics", "list"],
                                     ["groups", "list"], ["transactions", "list"]])
def test_broker_down_fails_fast_with_one_line(command):
    started = time.monotonic()
    result = run(*command, "--bootstrap-server", "127.0.0.1:1", input="x\n")
    one_line_error(result, "no broker reachable")
    assert time.monotonic() - started < 15


@pytest.mark.slow
def test_group_join_delay_does_not_eat_the_timeout(broker, b):
    create(broker, "joined", 1)
    produce(broker, "joined", [(0, b"a"), (0, b"b")])
    # The broker waits group.initial.rebalance.delay.ms (3 s) before the first join completes.
    result = ok(run("consume", "joined", "-g", "g-joined", "--from-beginning", "--timeout", "2",
                    *b))
    assert result.stdout == "a\nb\n"


# -- item 7: honest messages, -h, groups describe ------------------------------------------------


def test_if_not_exists_is_honest(broker, b):
    assert ok(run("topics", "create", "twice", *b)).stdout == "Created topic twice.\n"
    assert ok(run("topics", "create", "twice", "--if-not-exists", *b)).stdout == \
        "Topic twice already exists.\n"
    one_line_error(run("topics", "create", "twice", *b), "TopicAlreadyExistsError")


@pytest.mark.parametrize("command", [
    [], ["serve"], ["topics"], ["topics", "create"], ["produce"], ["consume"], ["groups"],
    ["groups", "describe"], ["groups", "reset-offsets"], ["transactions", "abort"],
    ["get-offsets"],
])
def test_every_command_has_dash_h(command):
    result = ok(run(*command, "-h"))
    assert result.stdout.startswith("Usage:")


@pytest.mark.slow
def test_groups_describe_shows_every_partition_member_and_log_end(broker, b):
    create(broker, "described", 3)
    produce(broker, "described", [(0, b"x")] * 4 + [(2, b"y")])
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": "g-described",
            "client.id": "my-client", "enable.auto.commit": False,
            "auto.offset.reset": "earliest"}
    with Consumer(conf) as consumer:
        consumer.subscribe(["described"])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        consumer.commit({("described", 0): 3})
        result = json.loads(ok(run("groups", "describe", "g-described", "--format", "json",
                                   *b)).stdout)
        text = ok(run("groups", "describe", "g-described", *b)).stdout
    (group,) = result
    assert group["state"] == "Stable"
    rows = {r["partition"]: r for r in group["partitions"]}
    assert sorted(rows) == [0, 1, 2]  # partitions without a commit too
    assert (rows[0]["current_offset"], rows[0]["log_end_offset"], rows[0]["lag"]) == (3, 4, 1)
    assert (rows[2]["current_offset"], rows[2]["log_end_offset"], rows[2]["lag"]) == (None, 1,
                                                                                      None)
    assert {r["client_id"] for r in rows.values()} == {"my-client"}
    assert {r["host"] for r in rows.values()} == {"/127.0.0.1"}
    assert all(r["consumer_id"] for r in rows.values())
    assert "CURRENT-OFFSET  LOG-END-OFFSET  LAG" in text and "my-client" in text
    one_line_error(run("groups", "describe", "no-such-group", *b),
                   "consumer group 'no-such-group' does not exist")


@pytest.mark.slow
def test_groups_reset_offsets_dry_run_and_execute(broker, b):
    create(broker, "resettable", 2)
    produce(broker, "resettable", [(0, b"a")] * 5 + [(1, b"b")] * 3)
    ok(run("consume", "resettable", "-g", "g-reset", "--from-beginning", "-n", "8", *b))

    def committed() -> dict[int, int]:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            return {tp.partition: o.offset
                    for tp, o in admin.list_group_offsets("g-reset").items()}

    assert committed() == {0: 5, 1: 3}
    dry = ok(run("groups", "reset-offsets", "-g", "g-reset", "--topic", "resettable",
                 "--to-earliest", "--format", "json", *b))
    assert [r["new_offset"] for r in json.loads(dry.stdout)] == [0, 0]
    assert committed() == {0: 5, 1: 3}  # dry run: nothing committed
    ok(run("groups", "reset-offsets", "-g", "g-reset", "--topic", "resettable:0",
           "--shift-by", "-2", "--execute", *b))
    assert committed() == {0: 3, 1: 3}
    ok(run("groups", "reset-offsets", "-g", "g-reset", "--all-topics", "--to-datetime",
           "2000-01-01T00:00:00Z", "--execute", *b))
    assert committed() == {0: 0, 1: 0}
    ok(run("groups", "reset-offsets", "-g", "g-reset", "--all-topics", "--to-latest",
           "--execute", *b))
    assert committed() == {0: 5, 1: 3}
    usage = run("groups", "reset-offsets", "-g", "g-reset", "--all-topics", *b)
    assert usage.returncode == 2 and "exactly one of" in usage.stderr


# -- kcat / Kafka tools coverage -------------------------------------------------------------------


def test_consume_partition_offsets_and_formats(broker, b):
    create(broker, "positions", 2)
    produce(broker, "positions", [(0, b"p0-%d" % i) for i in range(6)] + [(1, b"p1-0")])
    fmt = "%t|%p|%o|%s\\n"
    absolute = ok(run("consume", "positions", "-p", "0", "-o", "4", "--timeout", "1",
                      "--format", fmt, *b))
    assert absolute.stdout == "positions|0|4|p0-4\npositions|0|5|p0-5\n"
    relative = ok(run("consume", "positions", "-p", "0", "-o", "-2", "--timeout", "1", *b))
    assert relative.stdout == "p0-4\np0-5\n"
    by_time = ok(run("consume", "positions", "-p", "1", "-o", "@0", "--timeout", "1", *b))
    assert by_time.stdout == "p1-0\n"
    future = ok(run("consume", "positions", "-o", "@4102444800000", "--timeout", "1", *b))
    assert future.stdout == ""
    records = [json.loads(line) for line in ok(run(
        "consume", "positions", "-o", "beginning", "--timeout", "1", "--format", "json", *b
    )).stdout.splitlines()]
    assert sorted((r["partition"], r["offset"]) for r in records) == \
        [(0, i) for i in range(6)] + [(1, 0)]
    assert {r["timestamp_type"] for r in records} == {"CreateTime"}
    bad = run("consume", "positions", "--format", "%q", *b)
    assert bad.returncode == 2 and "unknown format token %q" in bad.stderr
    one_line_error(run("consume", "positions", "-p", "7", *b), "has no partition 7")


def test_get_offsets_and_json_listings(broker, b):
    create(broker, "listed", 2)
    produce(broker, "listed", [(0, b"a"), (0, b"b"), (1, b"c")])
    assert ok(run("get-offsets", "listed", *b)).stdout == "listed:0:2\nlisted:1:1\n"
    assert ok(run("get-offsets", "listed", "--time", "-2", "-p", "1", *b)).stdout == \
        "listed:1:0\n"
    assert "listed" in json.loads(ok(run("topics", "list", "--format", "json", *b)).stdout)
    (described,) = json.loads(ok(run("topics", "describe", "listed", "--format", "json",
                                     *b)).stdout)
    assert [p["partition"] for p in described["partitions"]] == [0, 1]
    groups = json.loads(ok(run("groups", "list", "--format", "json", *b)).stdout)
    assert isinstance(groups, list)


def test_command_config_file_and_environment(broker, tmp_path):
    properties = tmp_path / "client.properties"
    properties.write_text(f"# a Kafka client file\nbootstrap.servers : {broker.bootstrap}\n"
                          "client.id=from-file\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIBROKER_")}
    # The file's bootstrap.servers wins over the default; -b over the file.
    ok(run("topics", "list", "--command-config", str(properties), env=env))
    one_line_error(run("topics", "list", "--command-config", str(properties), "-b",
                       "127.0.0.1:1", env=env), "no broker reachable")
    env_only = {**os.environ, "MINIBROKER_BOOTSTRAP_SERVER": broker.bootstrap}
    ok(run("topics", "list", env=env_only))
    bad = tmp_path / "bad.properties"
    bad.write_text("lingr.ms=5\n")
    result = run("produce", "x", "--command-config", str(bad), "-b", broker.bootstrap,
                 input="x\n")
    one_line_error(result, "did you mean 'linger.ms'")


def test_shell_completion_script():
    result = ok(subprocess.run(minibroker_argv(), capture_output=True, text=True, timeout=60,
                               env={**os.environ, "_MINIBROKER_COMPLETE": "bash_source"}))
    assert "complete" in result.stdout and "_MINIBROKER_COMPLETE" in result.stdout


def test_make_run_takes_port_and_data_dir():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    result = subprocess.run(["make", "-n", "run", "PORT=19093", "DATA_DIR=/srv/mb"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "--port 19093 --data-dir /srv/mb" in result.stdout


@pytest.mark.slow
def test_perf_produce_and_consume_report_progress_and_a_summary(broker, b):
    create(broker, "perf", 2)
    produced = ok(run("perf", "produce", "perf", "--num-records", "3000", "--record-size", "100",
                      "--throughput", "3000", "--reporting-interval", "300", *b))
    lines = produced.stdout.strip().splitlines()
    assert len(lines) >= 3  # progress lines, then the summary
    assert all(re.fullmatch(r"\d+ records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms "
                            r"avg latency, [\d.]+ ms max latency.*\.", line) for line in lines)
    assert lines[-1].startswith("3000 records sent") and "ms 99.9th." in lines[-1]
    consumed = ok(run("perf", "consume", "perf", "--messages", "3000", *b))
    header, *rows = consumed.stdout.strip().splitlines()
    assert header.startswith("start.time, end.time, data.consumed.in.MB")
    assert rows[-1].split(", ")[4] == "3000"
    short = run("perf", "consume", "perf", "--messages", "5000", "--timeout", "1", *b)
    one_line_error(short, "only 3000 of 5000 records")


def test_configs_describe_and_alter(broker, b):
    create(broker, "configured", 1)
    ok(run("configs", "alter", "--topic", "configured", "--add-config",
           "retention.ms=60000,cleanup.policy=compact", *b))
    described = json.loads(ok(run("configs", "describe", "--topic", "configured", "--format",
                                  "json", *b)).stdout)
    assert {(c["name"], c["value"], c["source"]) for c in described} >= {
        ("retention.ms", "60000", "DYNAMIC_TOPIC_CONFIG"),
        ("cleanup.policy", "compact", "DYNAMIC_TOPIC_CONFIG"),
    }
    ok(run("configs", "alter", "--topic", "configured", "--delete-config", "retention.ms", *b))
    # Every effective config with its source (issue 27 item 10), the overrides first.
    text = ok(run("configs", "describe", "--topic", "configured", "--format", "table",
                  *b)).stdout
    rows = [line.split() for line in text.splitlines()[1:]]
    assert rows[0] == ["cleanup.policy", "compact", "DYNAMIC_TOPIC_CONFIG"]
    assert ["retention.ms", "604800000", "DEFAULT_CONFIG"] in rows
    assert len(rows) >= 13
    everything = ok(run("configs", "describe", "--topic", "configured", "--all", "--format",
                        "table", *b)).stdout
    assert everything == text
    # The default is kafka-configs.sh's text (issue 39 item 6): the overrides only.
    assert ok(run("configs", "describe", "--topic", "configured", *b)).stdout.splitlines() == [
        "Dynamic configs for topic configured are:",
        "  cleanup.policy=compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=compact, DEFAULT_CONFIG:log.cleanup.policy=delete}"]
    broker_configs = json.loads(ok(run("configs", "describe", "--broker", "0", "--all",
                                       "--format", "json", *b)).stdout)
    assert "num.partitions" in {c["name"] for c in broker_configs}
    one_line_error(run("configs", "alter", "--topic", "configured", "--add-config",
                       "retention.ms=soon", *b), "InvalidConfigError")


def test_groups_delete(broker, b):
    create(broker, "deletable", 1)
    produce(broker, "deletable", [(0, b"x")])
    ok(run("consume", "deletable", "-g", "g-deletable", "--from-beginning", "-n", "1", *b))
    result = ok(run("groups", "delete", "--group", "g-deletable", *b))
    assert result.stdout == "Deleted consumer group 'g-deletable'.\n"
    one_line_error(run("groups", "describe", "g-deletable", *b), "does not exist")
    one_line_error(run("groups", "delete", "--group", "g-deletable", *b), "cannot delete group")


def test_topics_delete_reports_each_topic_then_the_first_failure(broker, b):
    create(broker, "doomed", 1)
    result = run("topics", "delete", "doomed", "never-made", *b)
    assert result.stdout == "Deleted topic doomed.\n"
    one_line_error(result, "cannot delete never-made: UnknownTopicOrPartitionError")


def test_describe_producers_and_find_hanging(broker, b):
    create(broker, "producers", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "hangs"})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("producers", b"open")
    producer.flush(10)
    try:
        (state,) = json.loads(ok(run("transactions", "describe-producers", "--topic", "producers",
                                     "--partition", "0", "--format", "json", *b)).stdout)
        assert state["current_txn_start_offset"] == 0
        # The coordinator runs it: not hanging, however old (issue 27 item 10; as
        # kafka-transactions.sh decides). Its coordinator aborts it at its timeout.
        assert json.loads(ok(run("transactions", "find-hanging", "--topic", "producers",
                                 "--format", "json", *b)).stdout) == []
        time.sleep(0.2)
        assert json.loads(ok(run("transactions", "find-hanging", "--topic", "producers",
                                 "--max-transaction-timeout", "1", "--format", "json",
                                 *b)).stdout) == []
    finally:
        producer.abort_transaction()
        producer.close()


def test_abort_a_hanging_transaction_by_partition(tmp_path):
    """A transaction open on a partition that no coordinator runs (its transaction-log state is
    lost here on purpose) holds the LSO back forever; kafka-transactions.sh's partition form of
    ``abort`` ends it with an ABORT marker. A producer with nothing open there is refused."""
    with BrokerProcess(tmp_path / "data") as proc:
        b = ["--bootstrap-server", proc.bootstrap]
        create(proc, "hung", 1)
        producer = Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": "hung"})
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("hung", b"lost-coordinator")
        producer.flush(10)
        # A marker for a transaction nobody runs or has open here is refused, nothing written.
        one_line_error(run("transactions", "abort", "--topic", "hung", "--partition", "0",
                           "--producer-id", "4242", "--producer-epoch", "0",
                           "--coordinator-epoch", "0", *b), "CLUSTER_AUTHORIZATION_FAILED")
        producer.close(0)
        proc.kill9()
        for log_dir in (tmp_path / "data").glob("__transaction_state-*"):
            shutil.rmtree(log_dir)
        proc.restart()
        offsets = ok(run("get-offsets", "hung", "--isolation-level", "read_committed", *b))
        assert offsets.stdout == "hung:0:0\n"  # held back by the hanging transaction
        # Hanging only once older than the longest timeout (kafka-transactions.sh's rule).
        assert json.loads(ok(run("transactions", "find-hanging", "--topic", "hung",
                                 "--format", "json", *b)).stdout) == []
        (hanging,) = json.loads(ok(run("transactions", "find-hanging", "--topic", "hung",
                                       "--max-transaction-timeout", "1", "--format", "json",
                                       *b)).stdout)
        assert (hanging["start_offset"], hanging["transactional_id"]) == (0, None)
        assert hanging["age_ms"] > 1
        one_line_error(run("transactions", "abort", "--topic", "hung", "--partition", "0",
                           "--start-offset", "7", *b), "no open transaction starts at offset 7")
        result = ok(run("transactions", "abort", "--topic", "hung", "--partition", "0",
                        "--start-offset", "0", "--format", "json", *b))
        assert json.loads(result.stdout)[0]["producer_id"] == hanging["producer_id"]
        offsets = ok(run("get-offsets", "hung", "--isolation-level", "read_committed", *b))
        assert offsets.stdout == "hung:0:2\n"  # the record and its ABORT marker
        assert json.loads(ok(run("transactions", "find-hanging", "--topic", "hung",
                                 "--max-transaction-timeout", "1", "--format", "json",
                                 *b)).stdout) == []
        assert ok(run("consume", "hung", "--from-beginning", "--timeout", "1", *b)).stdout == ""
        # Usage errors are one line each.
        result = run("transactions", "abort", "--topic", "hung", "--partition", "0", *b)
        assert result.returncode == 2 and "give --start-offset" in result.stderr
