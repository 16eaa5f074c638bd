"""Share groups (KIP-932): three share consumers on one partition, minibroker against Kafka 4.4.

    .venv/bin/python bench/share_groups.py              # 2 runs of each broker, alternating
    .venv/bin/python bench/share_groups.py --records 100000 --runs 1

Each run starts a fresh broker (minibroker ``--flush never``, Kafka 4.4 one node as the reference
harness runs it, 1 GiB heap), creates a one-partition topic, produces the records (100 B values,
confluent-kafka), sets the group's ``share.auto.offset.reset=earliest`` and runs Kafka's
``ShareConsumerPerformance --threads 3`` (KafkaShareConsumer, implicit acknowledgement: every
record acknowledged, in batches with the next poll). Reported: the tool's records/s, wall time
of the tool, the broker's CPU seconds while the consumers ran (/proc/PID/stat).
The machine is shared: say so beside the figures.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as common  # noqa: E402  (bench/ is not a package)

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.kafka_ref.harness import KafkaCluster, java_command  # noqa: E402
from tests.raw_client import RawConnection  # noqa: E402

PERF = "org.apache.kafka.tools.ShareConsumerPerformance"


def set_earliest(bootstrap: str, group: str) -> None:
    from protocol.api_keys import ApiKey
    port = int(bootstrap.rsplit(":", 1)[1])
    with RawConnection(port) as conn:
        answer = conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": 32, "resource_name": group,
            "configs": [{"name": "share.auto.offset.reset", "config_operation": 0,
                         "value": "earliest"}]}]})
    assert answer.responses[0].error_code == 0, answer


def one(bootstrap: str, pid: int, records: int, tag: str) -> dict:
    topic, group = f"share-{tag}", f"perf-{tag}"
    common.create_topic(bootstrap, topic, 1)
    common.produce_records(bootstrap, topic, records, 100, 1)
    set_earliest(bootstrap, group)
    cpu0 = common.cpu_seconds(pid)
    started = time.monotonic()
    done = subprocess.run(java_command(PERF, "--bootstrap-server", bootstrap, "--topic", topic,
                                       "--group", group, "--num-records", str(records),
                                       "--threads", "3", "--timeout", "30000"),
                          capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - started
    cpu = common.cpu_seconds(pid) - cpu0
    lines = [line for line in done.stdout.splitlines() if re.match(r"^\d{4}-", line)]
    result = {"wall_s": wall, "broker_cpu_s": cpu, "exit": done.returncode,
              "tool": lines[-1] if lines else done.stdout[-500:] + done.stderr[-500:]}
    if lines:
        fields = [f.strip() for f in lines[-1].split(",")]
        # start.time, end.time, data.consumed.in.MB, MB.sec, nMsg.sec, data.consumed.in.nMsg,
        # fetch.time.ms
        result["records_per_s"] = float(fields[4])
        result["consumed"] = int(float(fields[5]))
    return result


@click.command()
@click.option("--records", default=200_000, show_default=True)
@click.option("--runs", default=2, show_default=True)
def main(records: int, runs: int) -> None:
    results: dict[str, list[dict]] = {"minibroker": [], "kafka": []}
    for run in range(runs):
        for name in ("minibroker", "kafka"):
            with tempfile.TemporaryDirectory(prefix="share-bench-") as tmp:
                if name == "minibroker":
                    broker = BrokerProcess(Path(tmp) / "data", "--flush", "never").start()
                    try:
                        one(broker.bootstrap, broker.proc.pid, 20_000, "warm")
                        out = one(broker.bootstrap, broker.proc.pid, records, f"r{run}")
                    finally:
                        broker.stop()
                else:
                    cluster = KafkaCluster(Path(tmp), 1, heap="1g", config={
                        "share.coordinator.state.topic.num.partitions": 1,
                        "offsets.topic.num.partitions": 1}).start()
                    try:
                        pid = cluster.node(0).proc.pid
                        one(cluster.bootstrap, pid, 20_000, "warm")
                        out = one(cluster.bootstrap, pid, records, f"r{run}")
                    finally:
                        cluster.stop()
            print(name, json.dumps(out), flush=True)
            results[name].append(out)
    for name, outs in results.items():
        rates = [o.get("records_per_s", 0.0) for o in outs]
        cpus = [o["broker_cpu_s"] for o in outs]
        print(f"{name}: records/s median {statistics.median(rates):,.0f} "
              f"(range {min(rates):,.0f}-{max(rates):,.0f}); broker CPU s median "
              f"{statistics.median(cpus):.2f} (range {min(cpus):.2f}-{max(cpus):.2f})")
    path = common.write_results_json("share-groups", {"records": records, "runs": results})
    print("wrote", path)


if __name__ == "__main__":
    main()
