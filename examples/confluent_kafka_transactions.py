"""A consume-transform-produce loop with confluent-kafka (librdkafka), exactly once.

    minibroker serve                                                      # terminal 1
    printf 'alice:10\\nbob:250\\n' | minibroker produce orders --key-separator :
    python examples/confluent_kafka_transactions.py --source orders --sink orders-checked

Each poll's records are written to ``--sink`` (the value with " checked" appended) and the input
offsets committed in the same transaction (``send_offsets_to_transaction``): after a crash or a
broker restart every input record is in the sink exactly once for ``read_committed`` readers.

``metadata.recovery.strategy=none`` on the producer is needed against a single broker: librdkafka
2.10 and later take a restart of the only broker for "all brokers down", re-bootstrap, drop the
cached group coordinator, and can then hang in ``send_offsets_to_transaction()`` past its timeout
(librdkafka issues 5511 and 5456). Keep it in every transactional librdkafka application that
talks to minibroker.
"""

from __future__ import annotations

import time

import click
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer


def producer_settings(bootstrap: str, transactional_id: str) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        "metadata.recovery.strategy": "none",  # see the module docstring
    }


def consumer_settings(bootstrap: str, group: str) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "metadata.recovery.strategy": "none",
    }


def run(bootstrap: str, source: str, sink: str, group: str, idle_seconds: float) -> int:
    """Copy ``source`` to ``sink`` until ``idle_seconds`` pass without a record; the count."""
    consumer = Consumer(consumer_settings(bootstrap, group))
    producer = Producer(producer_settings(bootstrap, f"{group}-copier"))
    producer.init_transactions(30)
    last = [time.monotonic() + 60]  # the idle clock starts at the group's first assignment

    def assigned(_consumer: Consumer, _partitions: list) -> None:
        last[0] = min(last[0], time.monotonic())

    consumer.subscribe([source], on_assign=assigned)
    copied = 0
    try:
        while time.monotonic() - last[0] < idle_seconds:
            records = [r for r in consumer.consume(500, timeout=0.5) if r.error() is None]
            if not records:
                continue
            last[0] = time.monotonic()
            producer.begin_transaction()
            try:
                for record in records:
                    producer.produce(sink, key=record.key(), value=record.value() + b" checked")
                producer.send_offsets_to_transaction(
                    consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30)
                producer.commit_transaction(30)
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    raise
                producer.abort_transaction(30)
                # Back to the last committed offsets; the next poll reads the batch again.
                for tp in consumer.committed(consumer.assignment(), timeout=30):
                    if tp.offset < 0:  # nothing committed yet: auto.offset.reset's earliest
                        tp.offset = OFFSET_BEGINNING
                    consumer.seek(tp)
                continue
            copied += len(records)
    finally:
        consumer.close()
        producer.flush(10)
    return copied


@click.command()
@click.option("--bootstrap", default="localhost:9092", show_default=True)
@click.option("--source", default="orders", show_default=True)
@click.option("--sink", default="orders-checked", show_default=True)
@click.option("--group", default="orders-checker", show_default=True)
@click.option("--idle", "idle_seconds", type=float, default=10.0, show_default=True,
              help="Exit after this many seconds without a record.")
def main(bootstrap: str, source: str, sink: str, group: str, idle_seconds: float) -> None:
    copied = run(bootstrap, source, sink, group, idle_seconds)
    click.echo(f"copied {copied} record(s) from {source} to {sink}")


if __name__ == "__main__":
    main()
