"""Transactions on minibroker (durable): throughput overhead, commit latency, transactions/s.

    .venv/bin/python bench/transactions.py            # about a minute
    .venv/bin/python bench/transactions.py --quick    # smoke run

One broker process (``--flush always``: acks=all answers after fdatasync, every transaction-log
record and marker durable before any request that depends on it is handled), confluent-kafka
producers, 1 KiB values:

  (a) throughput: the same producer settings (acks=all, idempotent, linger.ms=5, 3 partitions)
      non-transactional, and transactional committing every 100 ms; runs alternate, ``--seconds``
      each, ``--repeat`` pairs; medians and the overhead (1 - txn/plain), plus the broker's CPU
      seconds per MB in both modes;
  (b) commit latency of one-record transactions: begin, produce one record, flush (so that
      AddPartitionsToTxn and the Produce are done), then time ``commit_transaction()`` alone (the
      EndTxn round trip: PrepareCommit, marker, CompleteCommit, each fsync'd); p50/p99, and the
      whole transaction (begin to commit returned) beside it;
  (c) back-to-back one-record transactions per second from one producer with linger.ms=0, and
      the same sequence (AddPartitionsToTxn, Produce acks=all, EndTxn) sent by a minimal blocking
      client (``tests/raw_client.py``), which shows how much of a transaction is the broker's:
      its round trip per request (AddPartitionsToTxn / Produce / EndTxn, p50 as the client
      times it) beside the rate;
  (d) the same back-to-back producer against the two Rust Kafka-compatible peers of
      bench/produce.py (Tansu with memory storage and noida-db; neither fsyncs), each a fresh
      broker in the same run (``--skip-peers`` leaves them out), and the raw client against each
      peer that serves it: the per-request round trips side by side show what of the
      back-to-back gap is the broker's answer time (librdkafka's own time is the same);
  (e) 1, 10 and 50 transactional producers at once (threads; librdkafka releases the GIL), each
      running back-to-back one-record transactions: transactions/s in all and broker CPU per
      transaction against the number of producers, which shows how fsyncs are shared.

Prints a markdown table with the targets of issue 29 for the ``--flush`` mode run, and writes
bench/results/transactions-<ts>.json:

- ``--flush never`` (page cache, as the peers): back-to-back at least the faster peer, broker CPU
  per transaction at most 0.6 ms;
- ``--flush always``: back-to-back at least 90% of the one-fsync bound, the faster peer's time per
  transaction plus the wait of the one round EndTxn waits for (PrepareCommit and the
  transaction's batch: two files fdatasynced side by side, in the directory the broker writes to,
  as bench/floors.py measures it), both measured in this run; the bound with a single file's
  fdatasync is shown beside it; broker CPU per transaction at most 1.0 ms; 50 producers at once
  at least 2,000 transactions/s;
- both: commit latency p50 <= 1 ms and p99 <= 5 ms.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402  (bench/ is not a package)

PARTITIONS = 3
VALUE_SIZE = 1024
COMMIT_INTERVAL_S = 0.100
# Both modes: a local queue of at most ~16 MB, so that a commit drains at most ~0.1 s of records
# and the transactional producer really commits about every 100 ms (with librdkafka's default
# 1 GB queue the producer runs far ahead and each commit first drains seconds of backlog).
QUEUE_KBYTES = 16 * 1024
TOPIC = "txn-bench"
FSYNC_CALLS = 2000  # the fdatasync wait of the durable bound: its mean over this many


def log(message: str) -> None:
    click.echo(message, err=True)


@dataclass
class ThroughputRun:
    mode: str  # "plain" or "transactional"
    records: int
    elapsed_s: float
    records_per_s: float
    mb_per_s: float
    transactions: int
    broker_cpu_s: float
    broker_cpu_s_per_mb: float
    commit_p50_ms: float | None  # commit_transaction() during the run: drain + EndTxn


def _producer(bootstrap: str, transactional_id: str | None, **extra):
    from confluent_kafka import Producer

    config = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "delivery.report.only.error": True,
        "queue.buffering.max.kbytes": QUEUE_KBYTES,
        **extra,
    }
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    if transactional_id is not None:
        producer.init_transactions(30)
    return producer


def _warm_up(producer, transactional: bool, value: bytes) -> None:
    for _ in range(3):
        if transactional:
            producer.begin_transaction()
        for i in range(300):
            producer.produce(TOPIC, value, partition=i % PARTITIONS)
        if transactional:
            producer.commit_transaction(30)
        else:
            producer.flush(30)


def throughput_run(broker: common.RunningBroker, mode: str, seconds: float, run: int) -> ThroughputRun:
    transactional = mode == "transactional"
    value = os.urandom(VALUE_SIZE)
    producer = _producer(broker.bootstrap, f"bench-tp-{run}" if transactional else None)
    _warm_up(producer, transactional, value)
    produce, poll = producer.produce, producer.poll
    records = transactions = 0
    commits: list[float] = []
    cpu_before = broker.cpu_seconds()
    started = time.perf_counter()
    end = started + seconds
    if transactional:
        producer.begin_transaction()
    next_commit = started + COMMIT_INTERVAL_S
    while True:
        now = time.perf_counter()
        if transactional and now >= next_commit:
            producer.commit_transaction(30)
            transactions += 1
            commits.append((time.perf_counter() - now) * 1000)
            now = time.perf_counter()
            if now >= end:
                break
            producer.begin_transaction()
            next_commit = now + COMMIT_INTERVAL_S
        elif not transactional and now >= end:
            break
        for _ in range(100):
            try:
                produce(TOPIC, value)
                records += 1
            except BufferError:
                poll(0.001)
                break
    if producer.flush(60):
        raise RuntimeError("records not delivered")
    elapsed = time.perf_counter() - started
    cpu = common.settled_cpu_seconds(broker.cpu_seconds, quiet_s=0.2) - cpu_before
    mb = records * VALUE_SIZE / common.MB
    return ThroughputRun(mode, records, elapsed, records / elapsed, mb / elapsed, transactions,
                         cpu, cpu / mb, statistics.median(commits) if commits else None)


@dataclass
class LatencyResult:
    transactions: int
    commit_p50_ms: float
    commit_p99_ms: float
    commit_max_ms: float
    transaction_p50_ms: float
    transaction_p99_ms: float


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def commit_latency(broker: common.RunningBroker, transactions: int) -> LatencyResult:
    producer = _producer(broker.bootstrap, "bench-latency", **{"linger.ms": 0})
    value = os.urandom(VALUE_SIZE)
    _warm_up(producer, True, value)
    commits, whole = [], []
    for i in range(transactions):
        started = time.perf_counter()
        producer.begin_transaction()
        producer.produce(TOPIC, value, partition=i % PARTITIONS)
        producer.flush(30)
        before_commit = time.perf_counter()
        producer.commit_transaction(30)
        done = time.perf_counter()
        commits.append((done - before_commit) * 1000)
        whole.append((done - started) * 1000)
    return LatencyResult(transactions, _percentile(commits, 0.5), _percentile(commits, 0.99),
                         max(commits), _percentile(whole, 0.5), _percentile(whole, 0.99))


@dataclass
class RateResult:
    transactions: int
    elapsed_s: float
    transactions_per_s: float
    broker_cpu_ms_per_transaction: float


@dataclass
class RawRateResult(RateResult):
    # The client's round trip per request, p50 in us: AddPartitionsToTxn, Produce, EndTxn.
    round_trip_p50_us: tuple[float, float, float]


def back_to_back(broker: common.RunningBroker, seconds: float) -> RateResult:
    return concurrent_back_to_back(broker, seconds, 1).rate


def _one_record_transactions(producer, value: bytes, until: float) -> int:
    count = 0
    while time.perf_counter() < until:
        producer.begin_transaction()
        producer.produce(TOPIC, value, partition=count % PARTITIONS)
        producer.commit_transaction(30)
        count += 1
    return count


@dataclass
class ConcurrentResult:
    producers: int
    rate: RateResult


def concurrent_back_to_back(broker: common.RunningBroker, seconds: float,
                            producers: int) -> ConcurrentResult:
    """``producers`` transactional producers (one thread each) running one-record transactions
    back to back for ``seconds``; transactions/s in all and broker CPU per transaction."""
    value = os.urandom(VALUE_SIZE)
    clients = [_producer(broker.bootstrap, f"bench-rate-{producers}-{i}", **{"linger.ms": 0})
               for i in range(producers)]
    for producer in clients:
        _warm_up(producer, True, value)
    counts = [0] * producers
    cpu_before = broker.cpu_seconds()
    started = time.perf_counter()
    until = started + seconds

    def run(i: int) -> None:
        counts[i] = _one_record_transactions(clients[i], value, until)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    cpu = common.settled_cpu_seconds(broker.cpu_seconds, quiet_s=0.2) - cpu_before
    for producer in clients:
        producer.flush(30)
    count = sum(counts)
    return ConcurrentResult(producers, RateResult(count, elapsed, count / elapsed,
                                                  cpu / count * 1000))


R = TypeVar("R")


def on_peer(spec: common.BrokerSpec, work_dir: Path, seconds: float,
            measure: Callable[[common.RunningBroker, float], R]) -> R:
    """``measure`` (``back_to_back``, ``raw_back_to_back``) against a fresh peer broker."""
    with common.RunningBroker(spec, work_dir) as broker:
        common.create_topic(broker.bootstrap, TOPIC, PARTITIONS)
        return measure(broker, seconds)


class RawTransactions:
    """One-record transactions (AddPartitionsToTxn, Produce acks=-1, EndTxn commit) from the
    minimal blocking protocol client of the tests (``tests/raw_client.py``): what a transaction
    costs the broker without librdkafka's own time. ``bench/instr.py`` counts its instructions."""

    def __init__(self, port: int, transactional_id: str = "bench-raw",
                 topic: str = TOPIC, partitions: int = PARTITIONS,
                 value_size: int = VALUE_SIZE) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.raw_client import RawConnection

        self._client = RawConnection(port, timeout=300.0)
        self._tid, self._topic, self._partitions = transactional_id, topic, partitions
        self._value = os.urandom(value_size)
        self._sequences = [0] * partitions
        self.count = 0
        # Each request's round trip in seconds (AddPartitionsToTxn, Produce, EndTxn), if a list.
        self.round_trips: list[tuple[float, float, float]] | None = None

    def __enter__(self) -> RawTransactions:
        from protocol.api_keys import ApiKey

        self._client.__enter__()
        init = self._client.request(ApiKey.INIT_PRODUCER_ID, 0, {
            "transactional_id": self._tid, "transaction_timeout_ms": 60_000})
        if init.error_code:
            self._client.__exit__(None, None, None)
            raise RuntimeError(f"InitProducerId v0 answered error {init.error_code}")
        self._pid, self._epoch = init.producer_id, init.producer_epoch
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._client.__exit__(*exc_info)

    def one(self) -> None:
        """One committed transaction of one record, on the next partition in turn."""
        from protocol.api_keys import ApiKey
        from protocol.records import encode_batch

        client, tid, pid, epoch = self._client, self._tid, self._pid, self._epoch
        p = self.count % self._partitions
        t0 = time.perf_counter()
        added = client.request(ApiKey.ADD_PARTITIONS_TO_TXN, 0, {
            "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
            "topics": [{"name": self._topic, "partitions": [p]}]})
        t1 = time.perf_counter()
        batch = encode_batch([(None, self._value, (), 0)], producer_id=pid, producer_epoch=epoch,
                             base_sequence=self._sequences[p], transactional=True)
        self._sequences[p] += 1
        t2 = time.perf_counter()
        produced = client.request(ApiKey.PRODUCE, 3, {
            "transactional_id": tid, "acks": -1, "timeout_ms": 30_000,
            "topic_data": [{"name": self._topic,
                            "partition_data": [{"index": p, "records": batch}]}]})
        t3 = time.perf_counter()
        ended = client.request(ApiKey.END_TXN, 0, {
            "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
            "committed": True})
        if self.round_trips is not None:
            self.round_trips.append((t1 - t0, t3 - t2, time.perf_counter() - t3))
        codes = (added.results[0].results[0].error_code,
                 produced.responses[0].partition_responses[0].error_code, ended.error_code)
        if any(codes):
            raise RuntimeError(f"raw transaction failed: {codes}")
        self.count += 1


def raw_back_to_back(broker: common.RunningBroker, seconds: float) -> RawRateResult:
    """The same transactions from a minimal blocking protocol client (no librdkafka)."""
    with RawTransactions(int(broker.bootstrap.rsplit(":", 1)[1])) as raw:
        for _ in range(50):
            raw.one()
        raw.round_trips = []
        count = 0
        cpu_before = broker.cpu_seconds()
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            raw.one()
            count += 1
        elapsed = time.perf_counter() - started
        add, produce, end = (statistics.median(column) * 1e6
                             for column in zip(*raw.round_trips, strict=True))
    cpu = common.settled_cpu_seconds(broker.cpu_seconds, quiet_s=0.2) - cpu_before
    return RawRateResult(count, elapsed, count / elapsed, cpu / count * 1000, (add, produce, end))


def _fmt(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def _throughput_rows(plain: list[ThroughputRun], txn: list[ThroughputRun]) -> list[list[str]]:
    plain_rate = statistics.median(r.records_per_s for r in plain)
    txn_rate = statistics.median(r.records_per_s for r in txn)
    overhead = (1 - txn_rate / plain_rate) * 100
    plain_cpu = statistics.median(r.broker_cpu_s_per_mb for r in plain)
    txn_cpu = statistics.median(r.broker_cpu_s_per_mb for r in txn)
    mb = VALUE_SIZE * 1.0 / common.MB
    commit_p50 = statistics.median(r.commit_p50_ms or 0 for r in txn)
    commits_per_s = statistics.median(r.transactions / r.elapsed_s for r in txn)
    return [
        ["throughput, non-transactional (1 KiB, acks=all, linger.ms=5)",
         f"{_fmt(plain_rate, 0)} rec/s ({_fmt(plain_rate * mb)} MB/s)", "", ""],
        ["throughput, transactional, commit every 100 ms",
         f"{_fmt(txn_rate, 0)} rec/s ({_fmt(txn_rate * mb)} MB/s)", "", ""],
        ["transactional overhead (1 - txn/plain)", f"{overhead:.1f}%", "<= 3%",
         "met" if overhead <= 3 else "missed"],
        ["broker CPU ms per MB, plain / transactional",
         f"{plain_cpu * 1000:.2f} / {txn_cpu * 1000:.2f}", "", ""],
        ["commit_transaction() during the transactional runs: p50, commits/s",
         f"{commit_p50:.1f} ms, {commits_per_s:.1f}/s", "", ""],
    ]


@dataclass
class Targets:
    """Issue 29's targets for one flush mode (see the module docstring)."""

    durable: bool
    back_to_back: float | None  # transactions/s; None without the peers
    back_to_back_rule: str  # how ``back_to_back`` was computed
    cpu_ms: float
    producers_50: float | None  # transactions/s at 50 producers, durable only


# Issue 29: a durable transaction's back-to-back rate against the one-fsync bound; at 50 producers.
BOUND_SHARE = 0.9
DURABLE_50_PRODUCERS = 2000.0


def targets(durable: bool, fastest_peer: float | None, round_ms: float | None,
            fdatasync_ms: float | None) -> Targets:
    if not durable:
        return Targets(False, fastest_peer, "the faster peer", 0.6, None)
    if fastest_peer is None or round_ms is None or fdatasync_ms is None:
        return Targets(True, None, f"{BOUND_SHARE:.0%} of the one-fsync bound", 1.0,
                       DURABLE_50_PRODUCERS)

    def bound(wait_ms: float) -> float:
        return 1 / (1 / fastest_peer + wait_ms / 1e3)

    return Targets(True, BOUND_SHARE * bound(round_ms),
                   f"{BOUND_SHARE:.0%} of the one-fsync bound, 1 / (1 / {_fmt(fastest_peer, 0)} "
                   f"+ {round_ms * 1e3:.0f} us round) = {_fmt(bound(round_ms), 0)} (with one "
                   f"file's fdatasync, {fdatasync_ms * 1e3:.0f} us: {_fmt(bound(fdatasync_ms), 0)}"
                   f", 90% {_fmt(BOUND_SHARE * bound(fdatasync_ms), 0)})", 1.0,
                   DURABLE_50_PRODUCERS)


def _round_trips(raw: RawRateResult) -> str:
    return " / ".join(f"{us:.0f}" for us in raw.round_trip_p50_us) + " us"


def report(plain: list[ThroughputRun], txn: list[ThroughputRun], latency: LatencyResult,
           rate: RateResult, raw: RawRateResult, peers: dict[str, RateResult],
           sweep: list[ConcurrentResult], goal: Targets,
           raw_peers: dict[str, RawRateResult] | None = None) -> str:
    def verdict(ok: bool) -> str:
        return "met" if ok else "missed"

    rows = []
    if plain and txn:  # not with --only rates
        rows += _throughput_rows(plain, txn)
    rows += [
        ["commit latency p50 (one-record transactions)", f"{latency.commit_p50_ms:.2f} ms",
         "<= 1 ms", verdict(latency.commit_p50_ms <= 1)],
        ["commit latency p99", f"{latency.commit_p99_ms:.2f} ms", "<= 5 ms",
         verdict(latency.commit_p99_ms <= 5)],
        ["whole one-record transaction p50 / p99 (begin .. commit)",
         f"{latency.transaction_p50_ms:.2f} / {latency.transaction_p99_ms:.2f} ms", "", ""],
        ["back-to-back one-record transactions, confluent-kafka (linger.ms=0)",
         f"{_fmt(rate.transactions_per_s, 0)} txn/s",
         f">= {goal.back_to_back_rule}"
         + (f": {_fmt(goal.back_to_back, 0)}" if goal.back_to_back is not None else ""),
         verdict(rate.transactions_per_s >= goal.back_to_back)
         if goal.back_to_back is not None else "n/a"],
        ["broker CPU per one-record transaction", f"{rate.broker_cpu_ms_per_transaction:.2f} ms",
         f"<= {goal.cpu_ms:.1f} ms", verdict(rate.broker_cpu_ms_per_transaction <= goal.cpu_ms)],
        ["back-to-back, minimal blocking protocol client (no librdkafka)",
         f"{_fmt(raw.transactions_per_s, 0)} txn/s", "", ""],
        ["its round trips, p50: AddPartitionsToTxn / Produce / EndTxn", _round_trips(raw), "",
         ""],
    ]
    for r in sweep:
        if goal.producers_50 is not None and r.producers == 50:
            rows.append(["50 transactional producers at once",
                         f"{_fmt(r.rate.transactions_per_s, 0)} txn/s",
                         f">= {_fmt(goal.producers_50, 0)} txn/s",
                         verdict(r.rate.transactions_per_s >= goal.producers_50)])
    for label, peer in peers.items():
        rows.append([f"back-to-back, confluent-kafka, against {label} (no fsync)",
                     f"{_fmt(peer.transactions_per_s, 0)} txn/s "
                     f"({peer.broker_cpu_ms_per_transaction:.2f} ms broker CPU each)", "", ""])
    for label, peer_raw in (raw_peers or {}).items():
        rows.append([f"raw client against {label}: txn/s; round trips p50 (same three)",
                     f"{_fmt(peer_raw.transactions_per_s, 0)} txn/s; {_round_trips(peer_raw)}",
                     "", ""])
    table = common.markdown_table(["figure", "measured", "target", ""], rows)
    sweep_table = common.markdown_table(
        ["transactional producers at once", "transactions/s in all", "per producer",
         "broker CPU per transaction"],
        [[str(r.producers), _fmt(r.rate.transactions_per_s, 0),
          _fmt(r.rate.transactions_per_s / r.producers, 0),
          f"{r.rate.broker_cpu_ms_per_transaction:.2f} ms"] for r in sweep])
    runs = ", ".join(f"{r.mode[:3]} {_fmt(r.records_per_s, 0)}" for pair in zip(plain, txn,
                                                                                  strict=True)
                     for r in pair)
    return (f"{table}\n\n{sweep_table}\n\nthroughput runs (rec/s, in order): {runs}; "
            f"{latency.transactions} latency samples; {rate.transactions} back-to-back "
            f"transactions in {rate.elapsed_s:.1f} s")


@click.command()
@click.option("--seconds", type=float, default=None, help="Length of each throughput run.")
@click.option("--repeat", type=int, default=None, help="Plain/transactional run pairs.")
@click.option("--latency-samples", type=int, default=None)
@click.option("--producers", "producer_counts", multiple=True, type=click.IntRange(1, 500),
              help="Producer counts of (e) (repeatable) [1, 10, 50].")
@click.option("--skip-peers", is_flag=True, help="Do not run Tansu and noida-db.")
@click.option("--quick", is_flag=True, help="Short runs (a smoke test of the benchmark).")
@click.option("--keep-data", is_flag=True, help="Keep the broker's data dir under bench/.cache/.")
@click.option("--flush", type=click.Choice(["always", "never"]), default="always", show_default=True,
              help="The broker's --flush: always (durable) or never (page cache, as the peers).")
@click.option("--tree", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="Run the broker of this checkout (before/after comparisons).")
@click.option("--only", type=click.Choice(["all", "rates"]), default="all", show_default=True,
              help="rates: no plain/transactional throughput runs (turns of two trees).")
def main(seconds, repeat, latency_samples, producer_counts, skip_peers, quick, keep_data, flush,
         tree, only) -> None:
    """Transaction overhead, commit latency and transactions/s against a minibroker."""
    seconds = seconds or (2.0 if quick else 5.0)
    repeat = repeat or (1 if quick else 3)
    latency_samples = latency_samples or (200 if quick else 2000)
    producer_counts = producer_counts or (1, 10, 50)
    reason = common.minibroker_unavailable_reason()
    if reason:
        raise click.ClickException(f"minibroker does not start: {reason}")
    with common.work_directory("transactions", keep=keep_data) as work_dir:
        spec = common.minibroker_spec(flush_never=flush == "never", tree=tree)
        with common.RunningBroker(spec, work_dir) as broker:
            common.create_topic(broker.bootstrap, TOPIC, PARTITIONS)
            plain, txn = [], []
            for run in range(repeat if only == "all" else 0):
                log(f"throughput run {run + 1}/{repeat}: plain, then transactional "
                    f"({seconds:.0f} s each)")
                plain.append(throughput_run(broker, "plain", seconds, run))
                txn.append(throughput_run(broker, "transactional", seconds, run))
            log(f"commit latency: {latency_samples} one-record transactions")
            latency = commit_latency(broker, latency_samples)
            log(f"back-to-back one-record transactions for {seconds:.0f} s")
            rate = back_to_back(broker, seconds)
            log(f"back-to-back one-record transactions, raw protocol client, for {seconds:.0f} s")
            raw = raw_back_to_back(broker, seconds)
            sweep = []
            for count in producer_counts:
                log(f"{count} producers at once, back-to-back transactions for {seconds:.0f} s")
                sweep.append(concurrent_back_to_back(broker, seconds, count))
        peers: dict[str, RateResult] = {}
        raw_peers: dict[str, RawRateResult] = {}
        if not skip_peers:
            binaries = common.ensure_peers(log)
            for label, spec in (("tansu (memory)", common.tansu_spec(binaries.tansu)),
                                ("noida-db", common.noida_spec(binaries.noida))):
                log(f"back-to-back one-record transactions against {label} for {seconds:.0f} s")
                try:
                    peers[label] = on_peer(spec, work_dir, seconds, back_to_back)
                except Exception as exc:  # a peer that cannot run must not lose our figures
                    log(f"  {label} failed: {exc!r}")
                log(f"back-to-back one-record transactions, raw protocol client, against {label}"
                    f" for {seconds:.0f} s")
                try:
                    raw_peers[label] = on_peer(spec, work_dir, seconds, raw_back_to_back)
                except Exception as exc:  # (Tansu answers its InitProducerId v0 with error -1)
                    log(f"  {label} failed: {exc!r}")
        fdatasync_ms = round_ms = None
        if flush == "always":
            log("the fdatasync wait of a 200-byte append, and of EndTxn's round, in the broker's "
                "directory")
            fdatasync_ms = common.disk_limit(work_dir, 200 * FSYNC_CALLS, 200).fdatasync_ms
            round_ms = common.round_wait_ms(work_dir, FSYNC_CALLS)
    goal = targets(flush == "always",
                   max((r.transactions_per_s for r in peers.values()), default=None),
                   round_ms, fdatasync_ms)
    click.echo(report(plain, txn, latency, rate, raw, peers, sweep, goal, raw_peers))
    payload = {
        "settings": {"seconds": seconds, "repeat": repeat, "value_size": VALUE_SIZE,
                     "flush": flush, "only": only,
                     "tree": None if tree is None else common.tree_commit(tree),
                     "partitions": PARTITIONS, "commit_interval_s": COMMIT_INTERVAL_S},
        "plain": [asdict(r) for r in plain],
        "transactional": [asdict(r) for r in txn],
        "latency": asdict(latency),
        "back_to_back": asdict(rate),
        "back_to_back_raw_client": asdict(raw),
        "back_to_back_peers": {label: asdict(r) for label, r in peers.items()},
        "back_to_back_raw_client_peers": {label: asdict(r) for label, r in raw_peers.items()},
        "concurrent_producers": [asdict(r) for r in sweep],
        "fdatasync_ms": fdatasync_ms,
        "round_ms": round_ms,
        "targets": asdict(goal),
        "peers": list(common.PEER_PACKAGES),
    }
    log(f"results written to {common.write_results_json('transactions', payload)}")


if __name__ == "__main__":
    main()
