"""Client telemetry (KIP-714) with a real client: a CLIENT_METRICS subscription made with our
admin, confluent-kafka (librdkafka) pushing its metrics, and the metrics then on the broker's
Prometheus endpoint, parsed with the reference parser. (The subscriptions' durability: the store's
unit tests, tests/unit/broker/config/test_client_metrics_configs.py.)"""

from __future__ import annotations

import time
import urllib.request

import confluent_kafka
import pytest
from prometheus_client.parser import text_string_to_metric_families

from client import Admin, AlterConfigOp
from client.structs import ConfigResource
from tests.broker_process import BrokerProcess
from tests.integration.test_metrics import metrics_port

SUBSCRIPTION = ConfigResource("client_metrics", "producers")


def scrape(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def pushed(families: dict[str, list], client_id: str) -> dict[str, float]:
    """The samples of org.apache.kafka.* metrics labelled with ``client_id``."""
    return {s.name: s.value for name, samples in families.items() if name.startswith("org_apache")
            for s in samples if s.labels.get("client_id") == client_id}


def admin_describe(bootstrap: str) -> dict:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return admin.describe_configs([SUBSCRIPTION])[SUBSCRIPTION]


@pytest.mark.slow
def test_confluent_kafka_pushes_its_metrics_to_the_prometheus_endpoint(tmp_path):
    broker = BrokerProcess.configured(tmp_path, "metrics.port=0\n").start()
    try:
        port = metrics_port(broker)
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            result = admin.incremental_alter_configs({SUBSCRIPTION: [
                AlterConfigOp("metrics", "set", "org.apache.kafka.producer."),
                AlterConfigOp("interval.ms", "set", "500"),
                AlterConfigOp("match", "set", "client_id=tele-.*"),
            ]})
            assert result == {SUBSCRIPTION: None}
        matched = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                            "client.id": "tele-producer",
                                            "enable.metrics.push": True})
        unmatched = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                              "client.id": "quiet-producer",
                                              "enable.metrics.push": True})
        for producer in (matched, unmatched):
            producer.produce("telemetry-topic", b"v")
            assert producer.flush(10) == 0
        deadline = time.monotonic() + 15
        samples: dict[str, float] = {}
        while time.monotonic() < deadline and not samples:
            matched.poll(0.2)
            unmatched.poll(0.2)
            families = scrape(port)
            samples = pushed(families, "tele-producer")
        assert "org_apache_kafka_producer_record_queue_time_avg" in samples, families.keys()
        assert samples.get("org_apache_kafka_producer_connection_creation_total", 0) >= 1
        assert pushed(families, "quiet-producer") == {}  # its client id does not match
        ids = {s.labels["client_instance_id"] for name, rows in families.items()
               if name.startswith("org_apache") for s in rows}
        assert len(ids) == 1 and len(ids.pop()) == 36
        described = admin_describe(broker.bootstrap)
        assert described["match"].value == "client_id=tele-.*"
        assert described["metrics"].source == "CLIENT_METRICS_CONFIG"
        del matched, unmatched
    finally:
        assert broker.stop() == 0
