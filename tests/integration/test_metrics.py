"""``serve --metrics-port``: the Prometheus text format, scraped over HTTP and parsed with the
reference parser (prometheus_client), against a real broker with real traffic."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from client import Admin, Consumer, NewTopic, Producer
from tests.broker_process import BrokerProcess


def scrape(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def value(samples: list, name: str, **labels: str) -> float:
    matching = [s.value for s in samples if s.name == name
                and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(matching) == 1, (name, labels, samples)
    return matching[0]


def metrics_port(broker: BrokerProcess) -> int:
    found = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", "".join(broker.output))
    assert found, broker.output
    return int(found.group(1))


@pytest.mark.slow
def test_metrics_are_served_and_parse(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("metrics.port=0\ngroup.initial.rebalance.delay.ms=0\n")  # the key works too
    broker = BrokerProcess(tmp_path / "data", "--config", str(config))
    broker.start()
    try:
        port = metrics_port(broker)
        conf = {"bootstrap.servers": broker.bootstrap}
        with Admin(conf) as admin:
            admin.create_topics([NewTopic("measured", 2)])
        with Producer(conf) as producer:
            for i in range(10):
                producer.send("measured", b"v%d" % i, partition=0)
            producer.flush(10)
        open_txn = Producer({**conf, "transactional.id": "slow-one"})
        open_txn.init_transactions()
        open_txn.begin_transaction()
        open_txn.send("measured", b"pending", partition=1)
        open_txn.flush(10)
        with Consumer({**conf, "group.id": "measurers", "enable.auto.commit": False}) as c:
            c.assign([("measured", 0)])
            c.commit({("measured", 0): 4})
        time.sleep(0.3)
        families = scrape(port)
        open_txn.abort_transaction()
        open_txn.close()
    finally:
        assert broker.stop() == 0

    requests = families["minibroker_requests"]  # the parser drops the _total suffix
    # Counted per version: our client uses the newest Produce version both sides support.
    produce = {s.labels["version"] for s in requests if s.labels["api"] == "Produce"}
    assert len(produce) == 1, produce
    version = produce.pop()
    assert value(requests, "minibroker_requests_total", api="Produce", version=version) >= 1
    init = [s.value for s in requests if s.labels["api"] == "InitProducerId"]
    assert sum(init) >= 2  # the idempotent producer and the transactional one
    latency = families["minibroker_request_latency_seconds"]
    assert value(latency, "minibroker_request_latency_seconds_count", api="Produce",
                 version=version) >= 1
    assert value(latency, "minibroker_request_latency_seconds_bucket", api="Produce",
                 version=version, le="+Inf") >= 1
    assert value(families["minibroker_bytes_in"], "minibroker_bytes_in_total") > 500
    assert value(families["minibroker_bytes_out"], "minibroker_bytes_out_total") > 100
    assert value(families["minibroker_connections_opened"],
                 "minibroker_connections_opened_total") >= 3
    assert value(families["minibroker_connections"], "minibroker_connections") >= 1
    assert value(families["minibroker_fsync_latency_seconds"],
                 "minibroker_fsync_latency_seconds_count") >= 1
    part = {"topic": "measured", "partition": "0"}
    assert value(families["minibroker_partition_log_end_offset"],
                 "minibroker_partition_log_end_offset", **part) == 10
    assert value(families["minibroker_partition_high_watermark"],
                 "minibroker_partition_high_watermark", **part) == 10
    pending = {"topic": "measured", "partition": "1"}
    assert value(families["minibroker_partition_log_end_offset"],
                 "minibroker_partition_log_end_offset", **pending) == 1
    assert value(families["minibroker_partition_last_stable_offset"],
                 "minibroker_partition_last_stable_offset", **pending) == 0
    assert value(families["minibroker_open_transactions"], "minibroker_open_transactions",
                 state="Ongoing") == 1
    assert value(families["minibroker_transaction_age_seconds"],
                 "minibroker_transaction_age_seconds", transactional_id="slow-one") >= 0
    assert value(families["minibroker_group_lag"], "minibroker_group_lag",
                 group="measurers", **part) == 6
    assert value(families["minibroker_group_committed_offset"],
                 "minibroker_group_committed_offset", group="measurers", **part) == 4


def test_metrics_http_answers_only_metrics(tmp_path):
    broker = BrokerProcess(tmp_path / "data", "--metrics-port", "0")
    broker.start()
    try:
        port = metrics_port(broker)
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
        assert missing.value.code == 404
        missing.value.close()
        assert "minibroker_requests" in scrape(port)
    finally:
        assert broker.stop() == 0
