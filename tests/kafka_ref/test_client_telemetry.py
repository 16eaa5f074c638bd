"""Client telemetry (KIP-714) with Kafka's own tools and Java client (4.4): ``kafka-client-metrics``
(``ClientMetricsCommand``) alters, describes and deletes CLIENT_METRICS subscriptions on
minibroker and on the reference Kafka with the same output; then Kafka's Java producer
(``ProducerPerformance``, ``enable.metrics.push`` on by default) pushes its metrics to
minibroker, and they appear on its Prometheus endpoint. (The reference Kafka has no telemetry
exporter configured, so only the subscriptions are compared there.)"""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from client import Admin
from client.structs import ConfigResource
from protocol.messages.api_versions import ADVERTISED
from tests.broker_process import BrokerProcess
from tests.integration.test_metrics import metrics_port
from tests.kafka_ref.tools import PRODUCER_PERF, Tool, normalize, run_batch

pytestmark = [pytest.mark.xdist_group("kafka_ref"), pytest.mark.slow]

CLIENT_METRICS = "org.apache.kafka.tools.ClientMetricsCommand"


@pytest.fixture(scope="module")
def minibroker(kafka_ref, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("telemetry-minibroker")
    broker = BrokerProcess.configured(tmp, "metrics.port=0\n").start()
    yield broker
    broker.stop()


# kafka-client-metrics --describe (4.4) first lists the resources with ListConfigResources (API
# 74, being added on its own branch): compared once minibroker advertises it.
DESCRIBE_TOOL = 74 in {int(key) for key in ADVERTISED}


def subscriptions_scenario(b: str) -> list[Tool]:
    def tool(*args: str) -> Tool:
        return Tool(CLIENT_METRICS, ["--bootstrap-server", b, *args])

    describe = [tool("--describe", "--name", "java-producers")] if DESCRIBE_TOOL else []
    return [
        tool("--alter", "--name", "java-producers", "--metrics",
             "org.apache.kafka.producer.,org.apache.kafka.client.", "--interval", "500",
             "--match", "client_software_name=apache-kafka-java,client_id=java-.*"),
        *describe,
        tool("--alter", "--name", "java-producers", "--interval", "1000"),
        *describe,
        tool("--alter", "--name", "too-fast", "--interval", "10"),
        tool("--alter", "--name", "bad-match", "--match", "colour=blue"),
        tool("--alter", "--name", "gone", "--metrics", "*"),
        tool("--delete", "--name", "gone"),
    ]


def _render(result, bootstrap: str) -> str:
    lines = [line for line in normalize(result.out, {bootstrap: "<bootstrap>"}).splitlines()
             if line.strip()]
    # DescribeConfigs' entries come in no defined order
    return f"exit {result.code}\n" + "\n".join(sorted(lines))


def _described(bootstrap: str) -> dict:
    names = ("java-producers", "gone", "never-set")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        described = admin.describe_configs([ConfigResource("client_metrics", n) for n in names],
                                           include_synonyms=True)
    return {resource.name: {k: (e.value, e.source, e.synonyms) for k, e in entries.items()}
            for resource, entries in described.items()}


def test_kafka_client_metrics_tool_same_as_kafka(minibroker, kafka_one):
    ours = run_batch(subscriptions_scenario(minibroker.bootstrap))
    theirs = run_batch(subscriptions_scenario(kafka_one.bootstrap))
    rendered = [(_render(a, minibroker.bootstrap), _render(b, kafka_one.bootstrap))
                for a, b in zip(ours, theirs, strict=True)]
    assert [r[0] for r in rendered] == [r[1] for r in rendered], "\n".join(
        f"--- minibroker:\n{a}\n--- Kafka:\n{b}" for a, b in rendered if a != b)
    assert [r.code for r in ours][-4:] == [1, 1, 0, 0]  # two refused, one made and deleted
    # what the tool's --describe prints, whichever way it finds the names
    mine = _described(minibroker.bootstrap)
    assert mine == _described(kafka_one.bootstrap)
    assert mine["java-producers"]["interval.ms"][:2] == ("1000", "CLIENT_METRICS_CONFIG")


def test_java_producer_pushes_its_metrics(minibroker):
    (alter,) = run_batch([Tool(CLIENT_METRICS, [
        "--bootstrap-server", minibroker.bootstrap, "--alter", "--name", "perf",
        "--metrics", "org.apache.kafka.producer.", "--interval", "500",
        "--match", "client_id=java-telemetry"])])
    assert alter.code == 0, alter
    (perf,) = run_batch([Tool(PRODUCER_PERF, [
        "--topic", "telemetry-perf", "--num-records", "3000", "--record-size", "10",
        "--throughput", "1000", "--producer-props", f"bootstrap.servers={minibroker.bootstrap}",
        "client.id=java-telemetry"])])
    assert perf.code == 0, perf
    port = metrics_port(minibroker)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        families = {f.name: f.samples for f in text_string_to_metric_families(
            response.read().decode())}
    pushed = {s.name: s.value for name, samples in families.items()
              if name.startswith("org_apache_kafka_producer")
              for s in samples if s.labels.get("client_id") == "java-telemetry"}
    assert pushed, sorted(families)
    assert pushed.get("org_apache_kafka_producer_record_send_total", 0) >= 1, pushed
