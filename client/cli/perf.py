"""``perf produce|consume``: kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh.

Both print one progress line per ``--reporting-interval`` and a final summary in the format of
Kafka's tools, so their output can be compared line by line:

    50000 records sent, 49950.0 records/sec (4.76 MB/sec), 12.3 ms avg latency, 40.0 ms max latency.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import click

from client.admin import Admin
from client.cli.common import (
    CONTEXT,
    client_options,
    existing_partitions,
    for_admin,
    friendly_errors,
    key_value,
    name_argument,
    with_defaults,
)
from client.config import consumer_config, producer_config
from client.consumer import Consumer
from client.producer import Producer
from client.structs import TopicPartition

MB = 1024 * 1024


@click.group(context_settings=CONTEXT)
def perf() -> None:
    """Measure produce and consume throughput against a broker."""


class _Window:
    """Counts and latencies of one reporting window and of the whole run (thread-safe: delivery
    callbacks run on the client's thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = self.bytes = 0
        self.latency_sum = self.latency_max = 0.0
        self.all_latencies: list[float] = []
        self.errors = 0

    def record(self, size: int, latency_ms: float) -> None:
        with self.lock:
            self.count += 1
            self.bytes += size
            self.latency_sum += latency_ms
            self.latency_max = max(self.latency_max, latency_ms)
            self.all_latencies.append(latency_ms)

    def take(self) -> tuple[int, int, float, float]:
        with self.lock:
            taken = (self.count, self.bytes, self.latency_sum, self.latency_max)
            self.count = self.bytes = 0
            self.latency_sum = self.latency_max = 0.0
            return taken


def _line(count: int, size: int, seconds: float, latency_sum: float, latency_max: float) -> str:
    seconds = max(seconds, 1e-9)
    avg = latency_sum / count if count else 0.0
    return (f"{count} records sent, {count / seconds:.1f} records/sec "
            f"({size / MB / seconds:.2f} MB/sec), {avg:.1f} ms avg latency, "
            f"{latency_max:.1f} ms max latency")


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(int(len(sorted_values) * fraction), len(sorted_values) - 1)]


@perf.command("produce", context_settings=CONTEXT)
@name_argument("topic", "--topic", metavar="TOPIC")
@click.option("--num-records", type=click.IntRange(min=1), required=True)
@click.option("--record-size", type=click.IntRange(min=0), default=100, show_default=True,
              help="Bytes per value (random bytes, generated once).")
@click.option("--throughput", type=float, default=-1, show_default=True,
              help="Records per second at most (-1: as fast as possible).")
@click.option("--transactional-id", default=None,
              help="Send in transactions of --transaction-size records.")
@click.option("--transaction-size", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--reporting-interval", type=click.IntRange(min=1), default=5000,
              show_default=True, help="Milliseconds between progress lines.")
@click.option("--producer-props", "producer_props", multiple=True, metavar="KEY=VALUE...",
              help="Producer settings, as kafka-producer-perf-test.sh takes them "
                   "(--producer-props acks=all linger.ms=5); the same as -X.")
@client_options(role="producer")
@friendly_errors
def perf_produce(topic, num_records, record_size, throughput, transactional_id, transaction_size,
                 reporting_interval, producer_props, conf) -> None:
    """Send NUM_RECORDS records to TOPIC and report throughput and latency."""
    for item in producer_props:
        key, value = key_value(item, "--producer-props")
        conf[key.strip()] = value
    config = with_defaults(conf, client_id="minibroker-producer-perf",
                           transactional_id=transactional_id)
    producer_config(config)
    with Admin(for_admin(conf)) as admin:
        admin.describe_cluster()  # "no broker reachable" at once
    value = os.urandom(record_size)
    window, total = _Window(), _Window()
    interval = reporting_interval / 1000

    def delivered_at(sent: float) -> Any:
        def delivered(err: BaseException | None, _metadata: Any) -> None:
            if err is not None:
                with total.lock:
                    total.errors += 1
                return
            latency = (time.perf_counter() - sent) * 1000
            window.record(record_size, latency)
            total.record(record_size, latency)

        return delivered

    with Producer(config) as producer:
        if transactional_id:
            producer.init_transactions()
            producer.begin_transaction()
        started = last_report = time.perf_counter()
        try:
            for i in range(num_records):
                if throughput > 0:
                    ahead = (i / throughput) - (time.perf_counter() - started)
                    if ahead > 0:
                        time.sleep(ahead)
                producer.send(topic, value, on_delivery=delivered_at(time.perf_counter()))
                if transactional_id and (i + 1) % transaction_size == 0:
                    producer.commit_transaction()
                    producer.begin_transaction()
                now = time.perf_counter()
                if now - last_report >= interval:
                    count, size, latency_sum, latency_max = window.take()
                    click.echo(_line(count, size, now - last_report, latency_sum,
                                     latency_max) + ".")
                    last_report = now
            if transactional_id:
                producer.commit_transaction()
            else:
                producer.flush()
        except BaseException:
            if transactional_id:
                producer.abort_transaction()
            raise
        elapsed = time.perf_counter() - started
    latencies = sorted(total.all_latencies)
    click.echo(
        _line(total.count, total.bytes, elapsed, total.latency_sum, total.latency_max)
        + f", {_percentile(latencies, 0.5):.0f} ms 50th, {_percentile(latencies, 0.95):.0f} ms"
        f" 95th, {_percentile(latencies, 0.99):.0f} ms 99th, "
        f"{_percentile(latencies, 0.999):.0f} ms 99.9th."
    )
    if total.errors:
        raise click.ClickException(f"{total.errors} of {num_records} records failed")


@perf.command("consume", context_settings=CONTEXT)
@name_argument("topic", "--topic", metavar="TOPIC")
@click.option("--messages", type=click.IntRange(min=1), required=True,
              help="Records to consume (from the beginning of every partition).")
@click.option("--timeout", type=click.FloatRange(min=0), default=10, show_default=True,
              help="Give up after this many seconds without a record.")
@click.option("--reporting-interval", type=click.IntRange(min=1), default=5000,
              show_default=True, help="Milliseconds between progress lines.")
@client_options(role="consumer")
@friendly_errors
def perf_consume(topic, messages, timeout, reporting_interval, conf) -> None:
    """Read MESSAGES records of TOPIC from the beginning and report the throughput, in the columns
    of kafka-consumer-perf-test.sh."""
    config = with_defaults(conf, client_id="minibroker-consumer-perf")
    consumer_config(config)
    header = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
              "nMsg.sec")
    count = size = 0
    with Admin(for_admin(conf)) as admin, Consumer(config) as consumer:
        tps = [TopicPartition(topic, p) for p in existing_partitions(admin, topic)]
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        click.echo(header)
        started = last_report = last_record = time.perf_counter()
        start_wall = time.strftime("%Y-%m-%d %H:%M:%S")
        reported = (0, 0)
        while count < messages:
            records = consumer.poll(0.5)
            now = time.perf_counter()
            if records:
                last_record = now
                for record in records[: messages - count]:
                    count += 1
                    size += len(record.value or b"") + len(record.key or b"")
            elif now - last_record > timeout:
                break
            if now - last_report >= reporting_interval / 1000:
                window = now - last_report
                click.echo(_consumed_line(start_wall, size - reported[1], count - reported[0],
                                          window))
                last_report, reported = now, (count, size)
        elapsed = time.perf_counter() - started
    click.echo(_consumed_line(start_wall, size, count, elapsed))
    if count < messages:
        raise click.ClickException(
            f"only {count} of {messages} records within --timeout {timeout:g} s"
        )


def _consumed_line(start_wall: str, size: int, count: int, seconds: float) -> str:
    seconds = max(seconds, 1e-9)
    end_wall = time.strftime("%Y-%m-%d %H:%M:%S")
    return (f"{start_wall}, {end_wall}, {size / MB:.4f}, {size / MB / seconds:.4f}, {count}, "
            f"{count / seconds:.4f}")
