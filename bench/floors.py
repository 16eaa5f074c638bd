"""What this machine charges before any broker work: the floors under issue 12's targets.

    .venv/bin/python bench/floors.py            # about half a minute
    .venv/bin/python bench/floors.py --quick    # smoke run

Two figures, each the median of ``--repeat`` runs:

- fdatasync of a small append (200 bytes, what a one-record transaction writes per file): CPU
  and wall time per call, in a file under bench/.cache/ (the disk the benchmarks' brokers use).
  A durable one-record transaction from librdkafka makes three of them (PrepareCommit and the
  data in one round, then the markers; AddPartitionsToTxn's record is synced with PrepareCommit
  since issue 29), one round of which its answers must wait for.
- that round: a 200-byte append to one file and a 1,100-byte append to another, fdatasynced side
  by side as the broker's flusher does (``_common.round_wait_ms``). On a disk that merges their
  flushes it costs one fdatasync wait; this VM's virtio disk does not (about 1.5-2 times one).
- one request and its answer over loopback (40 bytes each way, one at a time, as librdkafka
  sends a transaction's requests): the server's CPU per round trip, for a blocking server, for
  a trio server that reads the way broker/network/server.py does (try the receive, else
  ``wait_readable``), and for trio's SocketStream (``receive_some`` / ``send_all``). The server runs in its own process; the client is blocking Python.
  A transaction is three such requests.

Writes bench/results/floors-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402  (bench/ is not a package)

MESSAGE = 40  # bytes of each request and answer
WARM_UP = 500


def fsync_floor(directory: Path, calls: int) -> tuple[float, float]:
    """(CPU us, wall us) per 200-byte append + fdatasync, in a fresh file under ``directory``."""
    disk = common.disk_limit(directory, 200 * calls, 200)
    return disk.fdatasync_cpu_ms * 1e3, disk.fdatasync_ms * 1e3


def request_floor(kind: str, requests: int) -> float:
    """The server's CPU us per round trip (``kind``: blocking or trio)."""
    server = subprocess.Popen([sys.executable, __file__, "serve", kind, str(requests)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with socket.create_connection((common.LOOPBACK, port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request = os.urandom(MESSAGE)
            for _ in range(WARM_UP + requests):
                sock.sendall(request)
                common.recv_exactly(sock, MESSAGE)
        cpu_s = float(server.stdout.readline())
        server.wait(timeout=10)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return cpu_s / requests * 1e6


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _serve(kind: str, requests: int) -> None:
    """Answer each 40-byte request with 40 bytes; print the CPU seconds of the timed requests."""
    listener = socket.create_server((common.LOOPBACK, 0))
    print(listener.getsockname()[1], flush=True)
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    answer = os.urandom(MESSAGE)
    buffer = bytearray(64 * 1024)
    marks: list[float] = []

    def count(handled: int) -> None:
        if handled in (WARM_UP, WARM_UP + requests):
            marks.append(_cpu_s())

    if kind == "blocking":
        handled = 0
        while conn.recv_into(buffer):  # the client sends one request at a time
            conn.sendall(answer)
            handled += 1
            count(handled)
    elif kind == "stream":
        import trio

        async def serve_stream() -> None:
            # trio's SocketStream, as the broker read and wrote before it drove the socket
            # itself (issue 37's comparison).
            stream = trio.SocketStream(trio.socket.from_stdlib_socket(conn))
            handled = 0
            while await stream.receive_some(len(buffer)):
                await stream.send_all(answer)
                handled += 1
                count(handled)

        trio.run(serve_stream)
    else:
        import trio

        async def serve() -> None:
            conn.setblocking(False)
            handled = 0
            while True:
                try:
                    n = conn.recv_into(buffer)
                except BlockingIOError:
                    await trio.lowlevel.wait_readable(conn)
                    continue
                if not n:
                    return
                conn.sendmsg([memoryview(answer)])
                handled += 1
                count(handled)

        trio.run(serve)
    print(marks[1] - marks[0], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="Short runs (a smoke test).")
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    calls, requests = (200, 500) if args.quick else (2000, 5000)
    fsync: list[tuple[float, float]] = []
    rounds: list[float] = []
    blocking: list[float] = []
    trio_loop: list[float] = []
    stream: list[float] = []
    with common.work_directory("floors") as work:
        for _ in range(repeat):  # alternating, so that drift hits all three alike
            fsync.append(fsync_floor(work, calls))
            rounds.append(common.round_wait_ms(work, calls) * 1e3)
            blocking.append(request_floor("blocking", requests))
            trio_loop.append(request_floor("trio", requests))
            stream.append(request_floor("stream", requests))
    fsync_cpu = statistics.median(f[0] for f in fsync)
    fsync_wall = statistics.median(f[1] for f in fsync)
    round_wall = statistics.median(rounds)
    rows = [
        ["fdatasync of a 200-byte append: CPU / wall", f"{fsync_cpu:.0f} / {fsync_wall:.0f} us"],
        ["one request and answer, server CPU: blocking server",
         f"{statistics.median(blocking):.0f} us"],
        ["the same, trio server reading as broker/network/server.py does",
         f"{statistics.median(trio_loop):.0f} us"],
        ["the same, trio's SocketStream (receive_some / send_all)",
         f"{statistics.median(stream):.0f} us"],
        ["the broker's way / SocketStream (issue 37: at most 60%)",
         f"{statistics.median(trio_loop) / statistics.median(stream):.0%}"],
        ["a durable one-record transaction before any broker work: 3 fdatasyncs + 3 trio "
         "round trips, CPU", f"{3 * fsync_cpu + 3 * statistics.median(trio_loop):.0f} us"],
        ["the fdatasync wait its answers cannot avoid: one round, PrepareCommit with the "
         "transaction's data (issue 29), two files synced side by side", f"{round_wall:.0f} us"],
    ]
    print(common.markdown_table(["floor", "median"], rows))
    path = common.write_results_json("floors", {
        "fsync_cpu_us": [f[0] for f in fsync], "fsync_wall_us": [f[1] for f in fsync],
        "blocking_server_cpu_us": blocking, "trio_server_cpu_us": trio_loop,
        "socketstream_server_cpu_us": stream,
        "round_wall_us": rounds,
    })
    print(f"results written to {path}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        _serve(sys.argv[2], int(sys.argv[3]))
    else:
        main()
