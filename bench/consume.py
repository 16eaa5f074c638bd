"""Consume throughput and broker CPU per consumed MB: this tree against another one, alternated.

Each run starts a fresh broker, produces ``--records`` values of ``--size`` bytes into a
one-partition topic (confluent-kafka, acks=all), waits for the broker to go quiet, then consumes
them all from offset 0 with a confluent-kafka consumer (librdkafka's default fetch sizes) and
reads the broker's CPU seconds (/proc/PID/stat) before and after. The primary figure is broker
CPU per consumed MB (CPU time: robust on a shared machine); throughput is printed too, noisy.

    .venv/bin/python bench/consume.py --base /path/to/other/checkout --runs 3

``--base`` is another checkout (e.g. ``git worktree add bench/.cache/base main --detach``); its
broker runs with this benchmark's code. Runs alternate base / this tree; medians and ranges.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import _common as common  # noqa: E402


def consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 300.0) -> float:
    """Consume ``expected`` records from offset 0; the seconds it took."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "bench-consume",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
    })
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        started = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        while got < expected:
            batch = consumer.consume(10_000, 1.0)
            for message in batch:
                if message.error() is None:
                    got += 1
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumed {got} of {expected}")
        return time.perf_counter() - started
    finally:
        consumer.close()


@dataclass
class FetchLoop:
    seconds: float
    received: int  # bytes
    # Per Fetch, p50 in us: from the request written to the answer's size prefix read (the
    # broker's answer time, wake-ups included), then to the answer's last byte read.
    first_bytes_us: float
    rest_us: float


def fetch_loop(bootstrap: str, topic: str, end_offset: int, rounds: int) -> FetchLoop:
    """Read the partition from 0 to ``end_offset`` ``rounds`` times with raw Fetch v11 requests
    (1 MiB per partition, 50 MiB per request, as librdkafka asks), the client discarding the
    bytes: the broker's side of consuming without a client's record parsing in the way."""
    import socket
    import struct

    from protocol.headers import RequestHeader, encode_request_header
    from protocol.messages import decode_response, encode_request

    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    received = 0
    first: list[float] = []
    rest: list[float] = []
    started = time.perf_counter()
    try:
        for _ in range(rounds):
            offset = 0
            while offset < end_offset:
                body = encode_request(1, 11, {
                    "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52_428_800,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": topic, "partitions": [{
                        "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                        "log_start_offset": -1, "partition_max_bytes": 1_048_576}]}],
                    "forgotten_topics_data": [], "rack_id": ""})
                header = encode_request_header(RequestHeader(1, 11, 1, "bench"))
                frame = header + body
                sock.sendall(struct.pack(">i", len(frame)) + frame)
                sent = time.perf_counter()
                (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
                sized = time.perf_counter()
                data = _recv_exactly(sock, size)
                first.append(sized - sent)
                rest.append(time.perf_counter() - sized)
                received += size
                response = decode_response(1, 11, data, 4)
                records = response.responses[0].partitions[0].records
                offset = _next_offset(records)
    finally:
        sock.close()
    return FetchLoop(time.perf_counter() - started, received,
                     statistics.median(first) * 1e6, statistics.median(rest) * 1e6)


def _recv_exactly(sock, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionError("broker closed the connection")
        got += k
    return buf


def _next_offset(records) -> int:
    """The offset after the last whole batch in ``records``."""
    import struct

    pos, last = 0, None
    while pos + 61 <= len(records):
        base, length = struct.unpack_from(">qi", records, pos)
        (delta,) = struct.unpack_from(">i", records, pos + 23)
        if pos + 12 + length > len(records):
            break
        last = base + delta + 1
        pos += 12 + length
    if last is None:
        raise RuntimeError("a fetch returned no whole batch")
    return last


def one_run(tree: Path | None, records: int, size: int, flush_never: bool,
            raw_rounds: int = 0) -> dict:
    spec = common.minibroker_spec(flush_never, tree)
    with common.work_directory("consume") as work, common.RunningBroker(spec, work) as broker:
        topic = "consume-bench"
        common.create_topic(broker.bootstrap, topic, 1)
        common.produce_records(broker.bootstrap, topic, records, size, 1)
        common.settled_cpu_seconds(broker.cpu_seconds)
        before = broker.cpu_seconds()
        timing = {}
        if raw_rounds:
            loop = fetch_loop(broker.bootstrap, topic, records + common.WARMUP_RECORDS, raw_rounds)
            elapsed, mb = loop.seconds, loop.received / common.MB
            timing = {"first_bytes_us": loop.first_bytes_us, "rest_us": loop.rest_us}
        else:
            elapsed = consume_all(broker.bootstrap, topic, records + common.WARMUP_RECORDS)
            mb = (records + common.WARMUP_RECORDS) * size / common.MB
        cpu = common.settled_cpu_seconds(broker.cpu_seconds) - before
        return {"cpu_ms_per_mb": cpu / mb * 1000, "mb_per_s": mb / elapsed,
                "rss_mb": broker.memory().rss_mb, "hwm_mb": broker.memory().hwm_mb} | timing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the checkout to compare with")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--flush-never", action="store_true")
    parser.add_argument("--raw-rounds", type=int, default=0,
                        help="read the log this many times with raw Fetch requests instead of a "
                             "confluent-kafka consumer (the broker's cost without the client's)")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"base": [], "this": []}
    for run in range(args.runs):
        for name, tree in (("base", args.base), ("this", common.REPO_ROOT)):
            r = one_run(tree, args.records, args.size, args.flush_never, args.raw_rounds)
            results[name].append(r)
            timing = (f", per Fetch {r['first_bytes_us']:.0f} us to the answer's first bytes"
                      f" and {r['rest_us']:.0f} us to its last" if args.raw_rounds else "")
            print(f"run {run + 1} {name}: {r['cpu_ms_per_mb']:.2f} ms CPU/MB, "
                  f"{r['mb_per_s']:.0f} MB/s, RSS {r['rss_mb']:.0f} MB{timing}", flush=True)
    rows = []
    for name, runs in results.items():
        def cell(key: str, fmt: str, runs=runs) -> str:
            values = [r[key] for r in runs]
            return (f"{statistics.median(values):{fmt}} "
                    f"({min(values):{fmt}}-{max(values):{fmt}})")
        rows.append([name, cell("cpu_ms_per_mb", ".2f"), cell("mb_per_s", ".0f"),
                     cell("hwm_mb", ".0f")]
                    + ([cell("first_bytes_us", ".0f"), cell("rest_us", ".0f")]
                       if args.raw_rounds else []))
    print(common.markdown_table(
        ["broker", "CPU ms per consumed MB", "consume MB/s (noisy)", "peak RSS MB"]
        + (["Fetch: us to first bytes", "us to last"] if args.raw_rounds else []), rows))
    common.write_results_json("consume", {"args": vars(args) | {"base": str(args.base)},
                                          "results": results})


if __name__ == "__main__":
    main()
