"""Instructions the broker executes per transaction, counted by valgrind (callgrind).

    .venv/bin/python bench/instr.py                       # --flush never, 3 runs of 300
    .venv/bin/python bench/instr.py --flush always --transactions 500 --runs 5
    .venv/bin/python bench/instr.py --tree ../base        # the broker of another checkout
    .venv/bin/python bench/instr.py --workload produce    # per small idempotent Produce request
    .venv/bin/python bench/instr.py --workload produce-pipelined  # the same, as librdkafka sends

Wall-clock and CPU-time figures on a shared 2-core VM vary by +-30%; an instruction count of the
same binary, inputs and environment repeats within 0.1% at the same machine load (the broker's
timers tick in wall time, so on a much busier machine more of their work falls into each
transaction: compare trees in turns, in one quiet run; an idle broker of today wakes about once
a second for its group, share and memory timers, about 0.37M instructions a second under callgrind,
which a 50-times-slower request window counts as a few per cent). That makes it the tool for a small
change on the request path, where a 1% gain is far inside the noise of every timed benchmark.

How: the broker runs as a subprocess under ``valgrind --tool=callgrind`` (about 50 times slower).
A minimal blocking client (``bench/transactions.py``'s ``RawTransactions``: AddPartitionsToTxn,
Produce acks=-1, EndTxn, one 1 KiB record each) warms it up, then ``callgrind_control --zero``
clears the counters, ``--transactions`` transactions run, and ``callgrind_control --dump`` writes
the counts of exactly that window; instructions / transactions is the figure. Idle instructions
of the event loop between requests fall in the window too (a few per cent at most). Every run is
a fresh broker; the median and the range of ``--runs`` are printed and written to
bench/results/instr-<ts>.json.

The environment is fixed for repeatable counts: PYTHONHASHSEED=0 (set order and dict probing
follow string hashes), and the interpreter is the venv's (Debian's 3.11 when ``make`` chose it:
another build executes different instruction counts for the same code).

When is a micro-optimization worth its idiom? An in-process count is a means, not the end: keep
an idiom that makes code harder to read (a ``tuple.__new__`` bypass, a loop instead of a
comprehension) only when it also shows on the whole broker over the wire: this script (the broker
serving real requests from a socket) by more than the spread of its runs, and not against a
regression of bench/transactions.py or bench/produce.py. See bench/README.md, "Instruction
counts".
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402  (bench/ is not a package)
from transactions import PARTITIONS, TOPIC, RawTransactions  # noqa: E402

# --workload produce: what librdkafka sends with batch.size=4096 (bench/produce.py step (f)), one
# request at a time: Produce v9, acks=1, one idempotent batch of this many 100-byte records to
# each of the topic's partitions (produce-pipelined: one partition per request, 5 at a time).
PRODUCE_RECORDS_PER_BATCH = 36
PRODUCE_VALUE_SIZE = 100

WARM_UP = 100
_TOTALS = re.compile(r"^(?:totals|summary):\s+(\d+)", re.MULTILINE)


@dataclass
class InstrRun:
    transactions: int
    instructions: int
    per_transaction: float


def callgrind_spec(flush_never: bool, tree: Path | None, out_dir: Path) -> common.BrokerSpec:
    """minibroker's own command, run under callgrind (one output file per process)."""
    plain = common.minibroker_spec(flush_never, tree)

    def command(port: int, data_dir: Path) -> list[str]:
        return ["valgrind", "--tool=callgrind", "--quiet",
                f"--callgrind-out-file={out_dir}/callgrind.out.%p",
                *plain.command(port, data_dir)]

    return common.BrokerSpec(plain.name, plain.label + " under callgrind", command, plain.cwd)


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=300)


def _dumped_instructions(out_dir: Path, pid: int, before: set[Path]) -> int:
    """The instruction total of the dump written after ``before`` was listed."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        new = sorted(set(out_dir.glob(f"callgrind.out.{pid}*")) - before)
        for path in new:
            found = _TOTALS.search(path.read_text(errors="replace"))
            if found:
                return int(found.group(1))
        time.sleep(0.5)
    raise RuntimeError(f"no callgrind dump of process {pid} appeared in {out_dir}")


class RawProduce:
    """Idempotent Produce requests from the tests' blocking client (``one``: a request of one
    batch per partition, answered before the next): the per-request path of bench/produce.py's
    small batches without librdkafka."""

    def __init__(self, port: int) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.raw_client import RawConnection

        self._client = RawConnection(port, timeout=300.0)
        self._value = os.urandom(PRODUCE_VALUE_SIZE)
        self._sequences = [0] * PARTITIONS

    def __enter__(self) -> RawProduce:
        from protocol.api_keys import ApiKey

        self._client.__enter__()
        init = self._client.request(ApiKey.INIT_PRODUCER_ID, 0, {
            "transactional_id": None, "transaction_timeout_ms": 60_000})
        self._pid, self._epoch = init.producer_id, init.producer_epoch
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._client.__exit__(*exc_info)

    def one(self) -> None:
        from protocol.api_keys import ApiKey
        from protocol.records import encode_batch

        records = [(None, self._value, (), 0)] * PRODUCE_RECORDS_PER_BATCH
        partitions = []
        for p in range(PARTITIONS):
            partitions.append({"index": p, "records": encode_batch(
                records, producer_id=self._pid, producer_epoch=self._epoch,
                base_sequence=self._sequences[p])})
            self._sequences[p] += PRODUCE_RECORDS_PER_BATCH
        produced = self._client.request(ApiKey.PRODUCE, 9, {
            "transactional_id": None, "acks": 1, "timeout_ms": 30_000,
            "topic_data": [{"name": TOPIC, "partition_data": partitions}]})
        codes = [p.error_code for p in produced.responses[0].partition_responses]
        if any(codes):
            raise RuntimeError(f"raw produce failed: {codes}")


class RawPipelinedProduce(RawProduce):
    """``RawProduce``'s batches as librdkafka sends them in bench/produce.py step (f): one
    partition per request (its sticky partitioner, the partitions in turn), acks=all, and
    ``PER_CALL`` requests written at once before their answers are read (idempotence allows 5
    in flight): the broker reads several requests per receive, as it does there."""

    PER_CALL = 5
    _next = -1  # the partition of the last request

    def one(self) -> None:
        from protocol.api_keys import ApiKey
        from protocol.headers import parse_response_header_untrusted
        from protocol.messages import decode_response
        from protocol.records import encode_batch

        records = [(None, self._value, (), 0)] * PRODUCE_RECORDS_PER_BATCH
        frames = []
        for _ in range(self.PER_CALL):
            p = self._next = (self._next + 1) % PARTITIONS
            batch = encode_batch(records, producer_id=self._pid, producer_epoch=self._epoch,
                                 base_sequence=self._sequences[p])
            self._sequences[p] += PRODUCE_RECORDS_PER_BATCH
            frames.append(self._client.frame(ApiKey.PRODUCE, 9, {
                "transactional_id": None, "acks": -1, "timeout_ms": 30_000,
                "topic_data": [{"name": TOPIC, "partition_data": [
                    {"index": p, "records": batch}]}]}))
        self._client.send_raw(b"".join(frames))
        for _ in frames:
            frame = self._client.read_frame()
            if frame is None:
                raise RuntimeError("the broker closed the connection")
            _, offset = parse_response_header_untrusted(frame, ApiKey.PRODUCE, 9)
            answer = decode_response(ApiKey.PRODUCE, 9, frame, offset)
            code = answer.responses[0].partition_responses[0].error_code
            if code:
                raise RuntimeError(f"raw produce failed: {code}")


WORKLOADS = {"transactions": RawTransactions, "produce": RawProduce,
             "produce-pipelined": RawPipelinedProduce}


def one_run(spec: common.BrokerSpec, work_dir: Path, out_dir: Path, transactions: int,
            workload: str = "transactions") -> InstrRun:
    with common.RunningBroker(spec, work_dir, ready_timeout_s=600.0) as broker:
        common.create_topic(broker.bootstrap, TOPIC, PARTITIONS, timeout_s=300.0)
        with WORKLOADS[workload](broker.port) as raw:
            for _ in range(WARM_UP):
                raw.one()
            _control("--zero", str(broker.pid))
            for _ in range(transactions):
                raw.one()
            before = set(out_dir.glob(f"callgrind.out.{broker.pid}*"))
            _control("--dump", str(broker.pid))
            total = _dumped_instructions(out_dir, broker.pid, before)
            units = transactions * getattr(raw, "PER_CALL", 1)  # requests of a pipelined call
    return InstrRun(units, total, total / units)


@click.command()
@click.option("--flush", type=click.Choice(["never", "always"]), default="never", show_default=True)
@click.option("--transactions", default=300, show_default=True, help="counted per run")
@click.option("--runs", default=3, show_default=True, help="fresh brokers, one after another")
@click.option("--tree", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="run the broker of this checkout (the benchmark's code stays this one's)")
@click.option("--workload", type=click.Choice(sorted(WORKLOADS)), default="transactions",
              show_default=True, help="produce: idempotent Produce requests of small batches "
              "(one per partition), counted per request; produce-pipelined: one batch per "
              "request, 5 requests written at once")
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="copy the callgrind dumps here (for callgrind_annotate)")
def main(flush: str, transactions: int, runs: int, tree: Path | None, workload: str,
         keep: Path | None) -> None:
    """Instructions the broker executes per transaction (callgrind)."""
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise click.ClickException(f"{tool} not found: install Debian's valgrind package")
    reason = common.minibroker_unavailable_reason()
    if reason:
        raise click.ClickException(f"minibroker does not start: {reason}")
    os.environ["PYTHONHASHSEED"] = "0"  # inherited by the broker
    results = []
    unit = "request" if workload.startswith("produce") else "transaction"
    with common.work_directory("instr", keep=False) as work_dir:
        out_dir = work_dir / "callgrind"
        out_dir.mkdir()
        spec = callgrind_spec(flush == "never", tree, out_dir)
        for run in range(runs):
            click.echo(f"run {run + 1}/{runs}: {transactions} {unit}s under callgrind", err=True)
            results.append(one_run(spec, work_dir, out_dir, transactions, workload))
            click.echo(f"  {results[-1].per_transaction / 1000:,.1f}k instructions per "
                       f"{unit}", err=True)
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for dump in out_dir.glob("callgrind.out.*"):
                shutil.copy2(dump, keep / dump.name)
    per = [r.per_transaction for r in results]
    click.echo(f"| flush {flush} | instructions per {unit} (k) |\n|---|---|\n"
               f"| median of {runs} | {statistics.median(per) / 1000:,.1f} |\n"
               f"| range | {min(per) / 1000:,.1f} - {max(per) / 1000:,.1f} |")
    payload = {"settings": {"flush": flush, "workload": workload, "count": transactions,
                            "runs": runs,
                            "warm_up": WARM_UP, "python": sys.executable,
                            "tree": None if tree is None else common.tree_commit(tree)},
               "runs": [asdict(r) for r in results]}
    click.echo(f"results written to {common.write_results_json('instr', payload)}", err=True)


if __name__ == "__main__":
    main()
