"""Gzip bombs against the event loop (issue 36): the longest event-loop step while one client
sends gzip bombs and another produces one record at a time with acks=1.

    .venv/bin/python bench/inflate.py --tree . --tree ../base --runs 3 --seconds 8

Each run starts a fresh broker of the tree with ``many_partitions.py``'s stall probe (a trio
instrument logging every task step longer than 5 ms), creates two topics, then for
``--seconds``: a bomber connection sends the fuzzer's gzip bomb (32 MiB of zeros, 32 KB on the
wire, inflated up to the 16 MiB cap before it is refused) five requests at a time, while a calm
connection sends a one-record acks=1 Produce every 5 ms and times each round trip. Printed per
run: the longest step, the steps over 20 ms, the calm producer's p50/p99/max round trip, the bombs
answered and the broker's CPU seconds (/proc). Trees run in turns, runs alternate. ``--no-bombs``:
the calm producer alone, what the machine's load costs the same figures.
"""

from __future__ import annotations

import json
import statistics
import struct
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from many_partitions import Broker, _cpu_seconds, stalls_between  # noqa: E402

from protocol.api_keys import ApiKey  # noqa: E402
from protocol.errors import ErrorCode  # noqa: E402
from protocol.headers import RequestHeader, encode_request_header  # noqa: E402
from protocol.messages import encode_request  # noqa: E402
from protocol.records import Compression, encode_batch  # noqa: E402
from tests.fuzz.poison import with_records  # noqa: E402
from tests.raw_client import RawConnection  # noqa: E402

PIPELINED = 5


def _bomb() -> bytes:
    body = zlib.compressobj(9, zlib.DEFLATED, 31)
    data = b"".join(body.compress(bytes(1 << 20)) for _ in range(32)) + body.flush()
    return with_records(data, 1000, Compression.GZIP)


def _frame(correlation_id: int, topic: str, batch: bytes) -> bytes:
    body = encode_request(ApiKey.PRODUCE, 3, {
        "transactional_id": None, "acks": 1, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    head = encode_request_header(RequestHeader(ApiKey.PRODUCE, 3, correlation_id, "bench"))
    payload = bytes(head) + bytes(body)
    return struct.pack(">i", len(payload)) + payload


def _create(port: int, names: list[str]) -> None:
    with RawConnection(port) as conn:
        for name in names:
            conn.request(ApiKey.CREATE_TOPICS, 2, {
                "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                            "assignments": [], "configs": []}],
                "timeout_ms": 5000, "validate_only": False})


def run_once(tree: Path, seconds: float, bombs: bool = True) -> dict:
    with tempfile.TemporaryDirectory(prefix="inflate-") as tmp:
        work = Path(tmp)
        broker = Broker(tree, work / "data", work / "stalls.jsonl")
        broker.start()
        try:
            _create(broker.port, ["bombed", "calm"])
            bomb = _bomb()
            batch = _frame(0, "bombed", bomb)
            round_trips: list[float] = []
            answered = [0]
            stop = threading.Event()

            def calm() -> None:
                record = encode_batch([(None, b"calm", [], 0)])
                with RawConnection(broker.port, timeout=60) as conn:
                    while not stop.is_set():
                        started = time.monotonic()
                        answer = conn.request(ApiKey.PRODUCE, 3, {
                            "transactional_id": None, "acks": 1, "timeout_ms": 5000,
                            "topic_data": [{"name": "calm", "partition_data": [
                                {"index": 0, "records": record}]}]})
                        round_trips.append(time.monotonic() - started)
                        assert answer.responses[0].partition_responses[0].error_code == 0
                        time.sleep(0.005)

            def bomber() -> None:
                with RawConnection(broker.port, timeout=60) as conn:
                    while not stop.is_set():
                        conn.send_raw(batch * PIPELINED)
                        for _ in range(PIPELINED):
                            frame = conn.read_frame()
                            assert frame is not None
                            answered[0] += 1

            cpu0 = _cpu_seconds(broker.proc.pid)  # type: ignore[union-attr]
            began = time.monotonic()
            threads = [threading.Thread(target=calm)]
            if bombs:
                threads.append(threading.Thread(target=bomber))
            for t in threads:
                t.start()
            time.sleep(seconds)
            stop.set()
            for t in threads:
                t.join(60)
            ended = time.monotonic()
            cpu = _cpu_seconds(broker.proc.pid) - cpu0  # type: ignore[union-attr]
            time.sleep(0.2)  # the probe's last lines
            stalls = stalls_between(broker.stall_file, began, ended)
            with RawConnection(broker.port) as conn:  # still serving, and the bomb refused
                code = conn.request(ApiKey.PRODUCE, 3, {
                    "transactional_id": None, "acks": 1, "timeout_ms": 5000,
                    "topic_data": [{"name": "bombed", "partition_data": [
                        {"index": 0, "records": bomb}]}]}).responses[0].partition_responses[0]
            trips = sorted(round_trips)
            return {
                "longest_step_ms": round(1000 * stalls[0][0], 1) if stalls else 0.0,
                "longest_step_task": stalls[0][1] if stalls else "",
                "steps_over_20ms": sum(1 for s, _ in stalls if s > 0.02),
                "calm_p50_ms": round(1000 * statistics.median(trips), 2),
                "calm_p99_ms": round(1000 * trips[int(0.99 * (len(trips) - 1))], 2),
                "calm_max_ms": round(1000 * trips[-1], 1),
                "calm_requests": len(trips),
                "bombs_answered": answered[0],
                "bomb_error": ErrorCode(code.error_code).name,
                "broker_cpu_s": round(cpu, 2),
            }
        finally:
            broker.sigterm()


@click.command()
@click.option("--tree", "trees", multiple=True, type=click.Path(exists=True, file_okay=False),
              default=["."], show_default=True, help="checkouts to compare, run in turns")
@click.option("--runs", default=3, show_default=True)
@click.option("--seconds", default=8.0, show_default=True)
@click.option("--bombs/--no-bombs", default=True, show_default=True,
              help="--no-bombs: the calm producer alone (the machine's noise floor)")
def main(trees: tuple[str, ...], runs: int, seconds: float, bombs: bool) -> None:
    results: dict[str, list[dict]] = {t: [] for t in trees}
    for i in range(runs):
        for tree in trees:
            result = run_once(Path(tree).resolve(), seconds, bombs)
            results[tree].append(result)
            click.echo(f"run {i + 1} {tree}: {json.dumps(result)}")
    for tree, rows in results.items():
        def med(key: str, rows=rows) -> str:
            values = [r[key] for r in rows]
            return f"{statistics.median(values)} ({min(values)}-{max(values)})"
        click.echo(f"{tree}: longest step {med('longest_step_ms')} ms, steps>20ms "
                   f"{med('steps_over_20ms')}, calm p99 {med('calm_p99_ms')} ms, max "
                   f"{med('calm_max_ms')} ms, bombs {med('bombs_answered')}, CPU "
                   f"{med('broker_cpu_s')} s")


if __name__ == "__main__":
    main()
