"""Produce over SASL_SSL beside PLAINTEXT on the same minibroker (issue 14's performance figure).

    .venv/bin/python bench/security.py            # a few minutes
    .venv/bin/python bench/security.py --quick    # smoke run

One durable broker with two listeners, PLAINTEXT and SASL_SSL (PLAIN, a certificate made by
``trustme``); confluent-kafka producers (idempotent, acks=all, linger.ms=5, 3 partitions) send the
same records through each listener, runs alternating, ``--repeat`` pairs. Printed: records/s,
broker CPU per Produce request (librdkafka's request count, the broker's /proc CPU time) and the
ratios SASL_SSL / PLAINTEXT. Writes bench/results/security-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import asdict
from pathlib import Path

import trustme

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402  (bench/ is not a package)

PARTITIONS = 3
PRODUCER = {"enable.idempotence": True, "acks": "all", "linger.ms": 5}


def secure_spec(pki: Path, sasl_port: int) -> common.BrokerSpec:
    properties = pki / "server.properties"
    properties.write_text("\n".join([
        f"listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:{sasl_port}",
        f"ssl.keystore.location={pki / 'server.pem'}",
        "listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain."
        'PlainLoginModule required user_bench="bench-secret";',
    ]) + "\n")
    plain = common.minibroker_spec(flush_never=False)

    def command(port: int, data_dir: Path) -> list[str]:
        return plain.command(port, data_dir) + ["--config", str(properties)]

    return common.BrokerSpec("minibroker", "minibroker (durable)", command)


def run_pairs(broker, sasl_port: int, sasl: dict, sizes, repeat: int, results: dict) -> None:
    for size, records in sizes:
        topic = f"bench-{size}"
        common.create_topic(broker.bootstrap, topic, PARTITIONS)
        for attempt in range(repeat):
            for name, bootstrap, extra in (
                ("PLAINTEXT", broker.bootstrap, {}),
                ("SASL_SSL", f"127.0.0.1:{sasl_port}", sasl),
            ):
                run = common.produce_records(bootstrap, topic, records, size, PARTITIONS,
                                             {**PRODUCER, **extra}, broker.cpu_seconds)
                results.setdefault(f"{name} {size} B", []).append(run)
                print(f"  {name} {size} B run {attempt + 1}: {run.records_per_s:,.0f} "
                           f"records/s, {run.cpu_us_per_request or 0:.0f} us/request", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small runs, one pair")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    sizes = [(100, 20_000 if args.quick else 300_000), (1024, 5_000 if args.quick else 100_000)]
    results: dict[str, list] = {}
    with common.work_directory("security") as work:
        ca = trustme.CA()
        ca.cert_pem.write_to_path(str(work / "ca.pem"))
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
            str(work / "server.pem"))
        sasl_port = common.free_port()
        sasl = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                "sasl.username": "bench", "sasl.password": "bench-secret",
                "ssl.ca.location": str(work / "ca.pem")}
        with common.RunningBroker(secure_spec(work, sasl_port), work) as broker:
            run_pairs(broker, sasl_port, sasl, sizes, repeat, results)

    def median(key: str, attribute: str) -> float:
        return statistics.median(getattr(r, attribute) or 0 for r in results[key])

    print("| values | listener | records/s | broker CPU per Produce request |")
    print("|---|---|---|---|")
    for size, _ in sizes:
        for name in ("PLAINTEXT", "SASL_SSL"):
            key = f"{name} {size} B"
            print(f"| {size} B | {name} | {median(key, 'records_per_s'):,.0f} | "
                  f"{median(key, 'cpu_us_per_request'):.0f} us |")
        plain, tls = f"PLAINTEXT {size} B", f"SASL_SSL {size} B"
        print(f"| {size} B | SASL_SSL / PLAINTEXT | "
              f"{median(tls, 'records_per_s') / median(plain, 'records_per_s'):.2f}x | "
              f"{median(tls, 'cpu_us_per_request') / median(plain, 'cpu_us_per_request'):.2f}x |")
    path = common.write_results_json("security", {
        "environment": {"repeat": repeat, "sizes": sizes},
        "runs": {k: [asdict(r) for r in v] for k, v in results.items()},
    })
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
