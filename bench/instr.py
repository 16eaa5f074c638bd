"""Instructions the broker executes per transaction, counted by valgrind (callgrind).

    .venv/bin/python bench/instr.py                       # --flush never, 3 runs of 300
    .venv/bin/python bench/instr.py --flush always --transactions 500 --runs 5
    .venv/bin/python bench/instr.py --tree ../base        # the broker of another checkout

Wall-clock and CPU-time figures on a shared 2-core VM vary by +-30%; an instruction count of the
same binary, inputs and environment repeats within 0.1% at the same machine load (the broker's
timers tick in wall time, so on a much busier machine more of their work falls into each
transaction: compare trees in turns, in one quiet run). That makes it the tool for a small
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


def one_run(spec: common.BrokerSpec, work_dir: Path, out_dir: Path, transactions: int) -> InstrRun:
    with common.RunningBroker(spec, work_dir, ready_timeout_s=600.0) as broker:
        common.create_topic(broker.bootstrap, TOPIC, PARTITIONS, timeout_s=300.0)
        with RawTransactions(broker.port) as raw:
            for _ in range(WARM_UP):
                raw.one()
            _control("--zero", str(broker.pid))
            for _ in range(transactions):
                raw.one()
            before = set(out_dir.glob(f"callgrind.out.{broker.pid}*"))
            _control("--dump", str(broker.pid))
            total = _dumped_instructions(out_dir, broker.pid, before)
    return InstrRun(transactions, total, total / transactions)


@click.command()
@click.option("--flush", type=click.Choice(["never", "always"]), default="never", show_default=True)
@click.option("--transactions", default=300, show_default=True, help="counted per run")
@click.option("--runs", default=3, show_default=True, help="fresh brokers, one after another")
@click.option("--tree", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="run the broker of this checkout (the benchmark's code stays this one's)")
def main(flush: str, transactions: int, runs: int, tree: Path | None) -> None:
    """Instructions the broker executes per transaction (callgrind)."""
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise click.ClickException(f"{tool} not found: install Debian's valgrind package")
    reason = common.minibroker_unavailable_reason()
    if reason:
        raise click.ClickException(f"minibroker does not start: {reason}")
    os.environ["PYTHONHASHSEED"] = "0"  # inherited by the broker
    results = []
    with common.work_directory("instr", keep=False) as work_dir:
        out_dir = work_dir / "callgrind"
        out_dir.mkdir()
        spec = callgrind_spec(flush == "never", tree, out_dir)
        for run in range(runs):
            click.echo(f"run {run + 1}/{runs}: {transactions} transactions under callgrind",
                       err=True)
            results.append(one_run(spec, work_dir, out_dir, transactions))
            click.echo(f"  {results[-1].per_transaction / 1000:,.1f}k instructions per "
                       "transaction", err=True)
    per = [r.per_transaction for r in results]
    click.echo(f"| flush {flush} | instructions per transaction (k) |\n|---|---|\n"
               f"| median of {runs} | {statistics.median(per) / 1000:,.1f} |\n"
               f"| range | {min(per) / 1000:,.1f} - {max(per) / 1000:,.1f} |")
    payload = {"settings": {"flush": flush, "transactions": transactions, "runs": runs,
                            "warm_up": WARM_UP, "python": sys.executable,
                            "tree": None if tree is None else common.tree_commit(tree)},
               "runs": [asdict(r) for r in results]}
    click.echo(f"results written to {common.write_results_json('instr', payload)}", err=True)


if __name__ == "__main__":
    main()
