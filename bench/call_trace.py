"""Which of the project's files one request passes through, and how often it changes layer.

    .venv/bin/python bench/call_trace.py                 # EndTxn and Produce, --flush always
    .venv/bin/python bench/call_trace.py --flush never --show-files

The broker runs in this process (trio, in a thread of its own, on a loopback port); a minimal
blocking client (``tests/raw_client.py``) sends a transaction: InitProducerId, AddPartitionsToTxn,
Produce (acks=-1, one 1 KiB record), EndTxn(commit), then a read_committed Fetch v11 of the
partition from offset 0. A profiler (``sys.setprofile`` and
``threading.setprofile``: every thread, the flusher's workers included) records each Python call
made while one chosen request is in flight, from the moment it is sent to the moment its answer
is read. Calls into the standard library, trio and other packages are left out; what remains is
the request's route through our code:

- files: the distinct files of ``broker/`` and ``protocol/`` entered;
- layer switches: consecutive recorded calls whose files lie in different layers (a layer is a
  folder: ``broker/network``, ``broker/handlers``, ``broker/txn``, ``broker/log``, ``protocol``,
  ...; a top-level module of ``broker/`` such as ``broker/wiring.py`` is a layer of its own).

The figures measure structure, not speed: a route that crosses fewer files and layers is easier
to follow and to change. Idle work of the event loop during the window (housekeeping ticks) can
add a call or two; runs repeat to the same figures when nothing else changed.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOPIC = "trace"
_OURS = (str(ROOT / "broker") + "/", str(ROOT / "protocol") + "/")


class Recorder:
    """Call events of our files while ``on``; set as the profiler of every thread."""

    def __init__(self) -> None:
        self.on = False
        self.calls: list[str] = []  # relative file of each call, in order (all threads)
        self._lock = threading.Lock()

    def __call__(self, frame, event, arg):
        if not self.on or event != "call":
            return
        filename = frame.f_code.co_filename
        if filename.startswith(_OURS):
            with self._lock:
                self.calls.append(str(Path(filename).relative_to(ROOT)))

    def take(self) -> list[str]:
        with self._lock:
            calls, self.calls = self.calls, []
        return calls


def layer(path: str) -> str:
    parts = Path(path).parts
    if parts[0] == "protocol":
        return "protocol"
    return "/".join(parts[:2]) if len(parts) > 2 else path


def summarise(calls: list[str]) -> tuple[int, int, Counter]:
    files = Counter(calls)
    switches = sum(1 for a, b in zip(calls, calls[1:], strict=False) if layer(a) != layer(b))
    return len(files), switches, files


def trace(flush: str) -> dict[str, list[str]]:
    import trio

    from broker.app import serve
    from broker.config import build_config
    from protocol.api_keys import ApiKey
    from protocol.records import encode_batch
    from tests.raw_client import RawConnection

    recorder = Recorder()
    ready = threading.Event()
    stop = threading.Event()
    box: dict = {}

    import tempfile

    data_dir = Path(tempfile.mkdtemp(prefix="call-trace-"))

    def run_broker() -> None:
        async def main() -> None:
            config = build_config({"log.flush": flush}, port=0, data_dir=data_dir)
            async with trio.open_nursery() as nursery:
                box["port"] = await nursery.start(serve, config)
                ready.set()
                while not stop.is_set():
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()

        sys.setprofile(recorder)
        trio.run(main)

    threading.setprofile(recorder)  # the broker's worker threads, started after this
    thread = threading.Thread(target=run_broker, name="broker", daemon=True)
    thread.start()
    if not ready.wait(60):
        raise click.ClickException("the broker did not start within 60 s")
    routes: dict[str, list[str]] = {}
    try:
        with RawConnection(box["port"], timeout=30.0) as client:
            client.request(ApiKey.CREATE_TOPICS, 2, {
                "topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1,
                            "assignments": [], "configs": []}],
                "timeout_ms": 10_000, "validate_only": False})
            tid = "trace"
            init = client.request(ApiKey.INIT_PRODUCER_ID, 0,
                                  {"transactional_id": tid, "transaction_timeout_ms": 60_000})
            pid, epoch = init.producer_id, init.producer_epoch
            for n in range(3):  # the last transaction is traced; the first ones warm up
                last = n == 2

                def timed(name: str, api: ApiKey, version: int, body: dict, last: bool = last):
                    recorder.on = last
                    try:
                        answer = client.request(api, version, body)
                    finally:
                        recorder.on = False
                    if last:
                        routes[name] = recorder.take()
                    else:
                        recorder.take()
                    return answer

                timed("AddPartitionsToTxn", ApiKey.ADD_PARTITIONS_TO_TXN, 0, {
                    "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                    "topics": [{"name": TOPIC, "partitions": [0]}]})
                batch = encode_batch([(None, b"x" * 1024, (), 0)], producer_id=pid,
                                     producer_epoch=epoch, base_sequence=n, transactional=True)
                timed("Produce", ApiKey.PRODUCE, 3, {
                    "transactional_id": tid, "acks": -1, "timeout_ms": 30_000,
                    "topic_data": [{"name": TOPIC,
                                    "partition_data": [{"index": 0, "records": batch}]}]})
                timed("EndTxn", ApiKey.END_TXN, 0, {
                    "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                    "committed": True})
                time.sleep(0.5)  # the commit's markers written: the Fetch's window is its own
                timed("Fetch", ApiKey.FETCH, 11, {
                    "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                    "isolation_level": 1, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": TOPIC, "partitions": [{
                        "partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
                    "forgotten_topics_data": [], "rack_id": ""})
    finally:
        stop.set()
        thread.join(30)
        threading.setprofile(None)
    return routes


@click.command()
@click.option("--flush", type=click.Choice(["always", "never"]), default="always",
              show_default=True)
@click.option("--show-files", is_flag=True, help="list the files and their call counts")
def main(flush: str, show_files: bool) -> None:
    """Files and layer switches of one AddPartitionsToTxn, Produce, EndTxn and Fetch."""
    routes = trace(flush)
    click.echo(f"| request (flush {flush}) | files | layer switches | calls |\n|---|---|---|---|")
    for name, calls in routes.items():
        files, switches, _ = summarise(calls)
        click.echo(f"| {name} | {files} | {switches} | {len(calls)} |")
    if show_files:
        for name, calls in routes.items():
            click.echo(f"\n{name}:")
            for path, count in sorted(summarise(calls)[2].items()):
                click.echo(f"  {count:4d}  {path}")


if __name__ == "__main__":
    main()
