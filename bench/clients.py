"""Client throughput: our producer and consumer beside kafka-python and confluent-kafka.

    .venv/bin/python bench/clients.py            # 100-byte and 1 KiB values (a few minutes)
    .venv/bin/python bench/clients.py --quick    # smoke run with small volumes
    .venv/bin/python bench/clients.py --durable  # broker fsyncs acks=all writes

One minibroker serves the whole run. Every measurement runs in a fresh subprocess (so that one
client's threads, buffers and garbage do not slow the next), and the same settings apply to every
client:

- producer: idempotent (acks=all), batch.size=262144, linger.ms=5, one partition; timed from the
  first send to the end of flush(), after a warm-up record that fetched metadata and the producer
  id. The figure is records/s; the client's CPU seconds per record are shown beside it.
- consumer: read_committed, max.poll.records=500 (each client's default poll size), reading what
  our producer wrote from offset 0 until every record arrived.

Each figure is the median of --repeat runs. Prints a markdown table with the targets of issue 4
(producer >= 150,000 records/s at 100 bytes and >= 3x kafka-python; consumer >= 2x kafka-python)
and writes bench/results/clients-<timestamp>.json.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402  (bench/ is not a package)

CLIENTS = ("ours", "kafka-python", "confluent-kafka")
VALUE_SIZES = (100, 1024)
BATCH_SIZE = 262_144
LINGER_MS = 5
MAX_POLL_RECORDS = 500
MEASURE_TIMEOUT_S = 600


def log(message: str) -> None:
    click.echo(message, err=True)


# --------------------------------------------------------------------------------------------
# measurements (run in a subprocess: `clients.py measure ...`)


class _Timer:
    """Wall and process CPU time (all threads of the client) of the timed part."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def stop(self, records: int) -> dict:
        return {
            "records": records,
            "elapsed_s": time.perf_counter() - self.wall,
            "cpu_s": time.process_time() - self.cpu,
        }


STALL_S = 60.0  # a consumer that gets nothing for this long gives up


class _FirstRecordTimer:
    """Consumers: timed from the first records received, so that connection set-up (which
    differs between clients) counts for no one."""

    def __init__(self) -> None:
        self.got = 0
        self.first = 0
        self.timer: _Timer | None = None
        self.last_progress = time.monotonic()

    def add(self, n: int) -> None:
        now = time.monotonic()
        if n:
            self.last_progress = now
            if self.timer is None:
                self.timer = _Timer()
                self.first = n
        elif now - self.last_progress > STALL_S:
            raise RuntimeError(f"no records for {STALL_S:.0f} s after {self.got}")
        self.got += n

    def stop(self) -> dict:
        return self.timer.stop(self.got - self.first)


def _produce_ours(bootstrap: str, topic: str, value: bytes, records: int) -> dict:
    from client import Producer

    with Producer(
        {"bootstrap.servers": bootstrap, "batch.size": BATCH_SIZE, "linger.ms": LINGER_MS}
    ) as producer:
        producer.send(topic, value).result(30)  # warm-up: metadata, producer id
        timer = _Timer()
        send = producer.send
        for _ in range(records):
            send(topic, value)
        producer.flush()
        return timer.stop(records)


def _produce_kafka_python(bootstrap: str, topic: str, value: bytes, records: int) -> dict:
    import kafka

    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=True,
        acks="all",
        batch_size=BATCH_SIZE,
        linger_ms=LINGER_MS,
        max_request_size=1_048_576,
    )
    try:
        producer.send(topic, value).get(30)
        timer = _Timer()
        send = producer.send
        for _ in range(records):
            send(topic, value)
        producer.flush()
        return timer.stop(records)
    finally:
        producer.close()


def _produce_confluent(bootstrap: str, topic: str, value: bytes, records: int) -> dict:
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "batch.size": BATCH_SIZE,
            "linger.ms": LINGER_MS,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    producer.produce(topic, value)
    producer.flush(30)
    timer = _Timer()
    produce = producer.produce
    for _ in range(records):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                producer.poll(0.005)
    producer.flush(120)
    return timer.stop(records)


def _consume_ours(bootstrap: str, topic: str, records: int) -> dict:
    from client import Consumer

    with Consumer(
        {
            "bootstrap.servers": bootstrap,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "max.poll.records": MAX_POLL_RECORDS,
        }
    ) as consumer:
        consumer.assign([(topic, 0)])
        timer = _FirstRecordTimer()
        poll = consumer.poll
        while timer.got < records:
            timer.add(len(poll(1.0)))
        return timer.stop()


def _consume_kafka_python(bootstrap: str, topic: str, records: int) -> dict:
    import kafka

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=MAX_POLL_RECORDS,
    )
    try:
        consumer.assign([kafka.TopicPartition(topic, 0)])
        timer = _FirstRecordTimer()
        while timer.got < records:
            timer.add(sum(len(batch) for batch in consumer.poll(1000).values()))
        return timer.stop()
    finally:
        consumer.close()


def _consume_confluent(bootstrap: str, topic: str, records: int) -> dict:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        timer = _FirstRecordTimer()
        while timer.got < records:
            timer.add(sum(1 for m in consumer.consume(MAX_POLL_RECORDS, 1.0) if not m.error()))
        return timer.stop()
    finally:
        consumer.close()


PRODUCERS = {
    "ours": _produce_ours,
    "kafka-python": _produce_kafka_python,
    "confluent-kafka": _produce_confluent,
}
CONSUMERS = {
    "ours": _consume_ours,
    "kafka-python": _consume_kafka_python,
    "confluent-kafka": _consume_confluent,
}


@click.group()
def cli() -> None:
    """Client throughput benchmark (see the module docstring)."""


@cli.command(hidden=True)
@click.argument("role", type=click.Choice(["produce", "consume"]))
@click.argument("client_name", type=click.Choice(CLIENTS))
@click.argument("bootstrap")
@click.argument("topic")
@click.argument("value_size", type=int)
@click.argument("records", type=int)
def measure(
    role: str, client_name: str, bootstrap: str, topic: str, value_size: int, records: int
) -> None:
    """One timed run; prints a JSON line: records timed, elapsed seconds, CPU seconds."""
    if role == "produce":
        result = PRODUCERS[client_name](bootstrap, topic, os.urandom(value_size), records)
    else:
        result = CONSUMERS[client_name](bootstrap, topic, records)
    click.echo(json.dumps(result))


def _run_measure(
    role: str, client_name: str, bootstrap: str, topic: str, value_size: int, records: int
) -> dict:
    argv = [sys.executable, __file__, "measure", role, client_name, bootstrap, topic]
    argv += [str(value_size), str(records)]
    try:
        proc = subprocess.run(
            argv,
            cwd=common.REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=MEASURE_TIMEOUT_S,
            env={**os.environ, "PYTHONPATH": str(common.REPO_ROOT)},
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {MEASURE_TIMEOUT_S} s"}
    if proc.returncode != 0:
        tail = " / ".join(proc.stderr.strip().splitlines()[-3:])
        return {"error": tail or f"exit {proc.returncode}"}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["records_per_s"] = result["records"] / result["elapsed_s"]
    result["cpu_us_per_record"] = result["cpu_s"] / result["records"] * 1e6
    return result


# --------------------------------------------------------------------------------------------
# the whole run


def _check_broker(broker: common.RunningBroker) -> None:
    if broker.proc is None or broker.proc.poll() is not None:
        raise click.ClickException(f"the broker died: {broker.log_tail()}")


def _median_run(runs: list[dict]) -> dict:
    good = sorted((r for r in runs if "error" not in r), key=lambda r: r["records_per_s"])
    if not good:
        return runs[-1]
    result = dict(good[len(good) // 2])
    result["runs"] = [r.get("records_per_s") for r in runs]
    return result


def _fmt_rate(result: dict | None) -> str:
    if result is None:
        return "-"
    if "error" in result:
        return "failed"
    return f"{result['records_per_s']:,.0f} ({result['cpu_us_per_record']:.1f} us)"


def _ratio(a: dict | None, b: dict | None) -> float | None:
    if not a or not b or "error" in a or "error" in b:
        return None
    return a["records_per_s"] / b["records_per_s"]


@cli.command()
@click.option(
    "--records",
    type=int,
    default=None,
    help="Records per run at 100 bytes (1 KiB runs use a third).",
)
@click.option("--repeat", type=int, default=None, help="Runs per figure (median reported).")
@click.option(
    "--durable", is_flag=True, help="Broker fsyncs acks=all writes (default: --flush never)."
)
@click.option("--quick", is_flag=True, help="Small volumes, one run: a smoke test.")
@click.option(
    "--only", "only", multiple=True, type=click.Choice(CLIENTS), help="Clients to run (repeatable)."
)
def run(
    records: int | None, repeat: int | None, durable: bool, quick: bool, only: tuple[str, ...]
) -> None:
    """Run every client against one broker and print the table."""
    clients = only or CLIENTS
    small_records = records or (30_000 if quick else 300_000)
    repeat = repeat or (1 if quick else 3)
    reason = common.minibroker_unavailable_reason()
    if reason:
        raise click.ClickException(f"minibroker does not start: {reason}")
    results: dict[str, dict[str, dict[str, dict]]] = {"produce": {}, "consume": {}}
    spec = common.minibroker_spec(flush_never=not durable)
    with (
        common.work_directory("clients") as work_dir,
        common.RunningBroker(spec, work_dir) as broker,
    ):
        bootstrap = broker.bootstrap
        for size in VALUE_SIZES:
            n = small_records if size <= 100 else max(small_records // 3, 1)
            key = f"{size}"
            results["produce"][key] = {}
            results["consume"][key] = {}
            source_topic = None
            for client_name in clients:
                runs = []
                for attempt in range(repeat):
                    topic = f"p-{client_name}-{size}-{attempt}"
                    common.create_topic(bootstrap, topic, 1)
                    log(
                        f"produce {size} B x {n} with {client_name} (run {attempt + 1}/{repeat}) ..."
                    )
                    runs.append(_run_measure("produce", client_name, bootstrap, topic, size, n))
                    if client_name == "ours" and "error" not in runs[-1] and source_topic is None:
                        source_topic = topic
                results["produce"][key][client_name] = _median_run(runs)
            if source_topic is None:  # our producer did not run: write the consumers' data now
                source_topic = f"c-source-{size}"
                common.create_topic(bootstrap, source_topic, 1)
                _run_measure("produce", "confluent-kafka", bootstrap, source_topic, size, n)
            for client_name in clients:
                runs = []
                for attempt in range(repeat):
                    log(
                        f"consume {size} B x {n} with {client_name} (run {attempt + 1}/{repeat}) ..."
                    )
                    # n records plus the producer's warm-up record
                    runs.append(
                        _run_measure("consume", client_name, bootstrap, source_topic, size, n + 1)
                    )
                results["consume"][key][client_name] = _median_run(runs)
        broker_cpu = broker.cpu_seconds()

    rows = []
    checks = []
    for role in ("produce", "consume"):
        for size in VALUE_SIZES:
            per = results[role][f"{size}"]
            ratio_kp = _ratio(per.get("ours"), per.get("kafka-python"))
            ratio_ck = _ratio(per.get("ours"), per.get("confluent-kafka"))
            rows.append(
                [
                    role,
                    f"{size} B" if size < 1024 else "1 KiB",
                    _fmt_rate(per.get("ours")),
                    _fmt_rate(per.get("kafka-python")),
                    _fmt_rate(per.get("confluent-kafka")),
                    "-" if ratio_kp is None else f"{ratio_kp:.1f}x",
                    "-" if ratio_ck is None else f"{ratio_ck:.2f}x",
                ]
            )
        small = results[role]["100"]
        ours = small.get("ours")
        ratio_kp = _ratio(ours, small.get("kafka-python"))
        if role == "produce" and ours and "error" not in ours:
            checks.append(
                (
                    "producer >= 150,000 records/s at 100 B",
                    ours["records_per_s"] >= 150_000,
                    f"{ours['records_per_s']:,.0f}",
                )
            )
        if ratio_kp is not None:
            target = 3.0 if role == "produce" else 2.0
            checks.append(
                (
                    f"{role}r >= {target:.0f}x kafka-python at 100 B",
                    ratio_kp >= target,
                    f"{ratio_kp:.1f}x",
                )
            )
        ratio_1k = _ratio(
            results[role]["1024"].get("ours"), results[role]["1024"].get("kafka-python")
        )
        if ratio_1k is not None:
            target = 3.0 if role == "produce" else 2.0
            checks.append(
                (
                    f"{role}r >= {target:.0f}x kafka-python at 1 KiB",
                    ratio_1k >= target,
                    f"{ratio_1k:.1f}x",
                )
            )

    table = common.markdown_table(
        [
            "",
            "value",
            "ours",
            "kafka-python",
            "confluent-kafka",
            "ours/kafka-python",
            "ours/confluent",
        ],
        rows,
    )
    mode = "durable (fsync)" if durable else "--flush never"
    click.echo(
        f"\nClient throughput, records/s (client CPU per record), median of {repeat}; "
        f"minibroker {mode}, one partition, idempotent acks=all, batch.size={BATCH_SIZE}, "
        f"linger.ms={LINGER_MS}, read_committed consumers, max {MAX_POLL_RECORDS} records per poll.\n"
    )
    click.echo(table)
    click.echo("")
    click.echo(
        common.markdown_table(
            ["target", "met", "measured"], [[c, "yes" if ok else "NO", v] for c, ok, v in checks]
        )
    )
    click.echo(
        f"\nbroker CPU for the whole run: {broker_cpu:.1f} s; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    payload = {
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "durable": durable,
            "repeat": repeat,
            "records_100b": small_records,
        },
        "results": results,
        "checks": [{"target": c, "met": ok, "measured": v} for c, ok, v in checks],
        "broker_cpu_s": broker_cpu,
    }
    log(f"results written to {common.write_results_json('clients', payload)}")


if __name__ == "__main__":
    if len(sys.argv) == 1 or sys.argv[1] not in ("run", "measure", "--help"):
        sys.argv.insert(1, "run")  # `clients.py [options]` means `clients.py run [options]`
    cli()
