"""Run the real broker as a subprocess on a loopback port, for integration tests and benchmarks.

The broker is stopped through its own Popen handle (SIGTERM, then SIGKILL); ``kill9()`` simulates a
crash. Every broker started here is tracked by ``tests.process_guard``, which fails the session if one
is still running at its end. Ports are chosen by the broker itself (``--port 0``) and read from its "listening on" line.
``crash_at=POINT`` starts it through ``tests/crash_broker.py`` instead, which exits with 137 when
EndTxn reaches that point; ``restart()`` then starts the plain broker.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.process_guard import popen

_LISTENING = re.compile(r"listening on [^:]+:(\d+)")


class BrokerProcess:
    def __init__(
        self, data_dir: Path, *extra_args: str, port: int = 0, crash_at: str | None = None
    ) -> None:
        self.data_dir = Path(data_dir)
        self.crash_at = crash_at
        self.extra_args = list(extra_args)
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []

    @classmethod
    def configured(cls, directory: Path, properties: str, *extra_args: str,
                   **kwargs) -> BrokerProcess:
        """A broker on ``directory/data`` run with ``--config directory/server.properties``, that
        file holding ``properties`` (written now); start it as any other."""
        config = Path(directory) / "server.properties"
        config.write_text(properties)
        return cls(Path(directory) / "data", "--config", str(config), *extra_args, **kwargs)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        if self.crash_at is None:
            entry = ["-c", "from broker.cli import main; main()", "serve"]
        else:
            entry = ["-m", "tests.crash_broker", self.crash_at]
        cmd = [
            sys.executable,
            *entry,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            *self.extra_args,
        ]
        self.output = []
        self.proc = popen(
            cmd,
            what=f"broker on data dir {self.data_dir}",
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        ready = threading.Event()

        def pump(stream, proc=self.proc) -> None:
            for line in stream:
                self.output.append(line)
                match = _LISTENING.search(line)
                if match:
                    self.port = int(match.group(1))
                    ready.set()
            ready.set()  # EOF: the process died

        self._pump = threading.Thread(target=pump, args=(self.proc.stdout,), daemon=True)
        self._pump.start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("broker did not start:\n" + "".join(self.output))
        return self

    def wait_for_output(self, text: str, timeout: float = 10.0) -> str:
        """The first line of the broker's output holding ``text``, waiting up to ``timeout``
        seconds for it (the output is read by a thread: a line can come after its answer)."""
        deadline = time.monotonic() + timeout
        while True:
            for line in list(self.output):
                if text in line:
                    return line
            assert time.monotonic() < deadline, f"no {text!r} in:\n" + "".join(self.output)
            time.sleep(0.05)

    def stop(self, timeout: float = 20.0) -> int | None:
        """Clean shutdown (SIGTERM); SIGKILL if it does not exit in time. Returns the exit code."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._close_pipe(proc)
        return proc.returncode

    def kill9(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            self._close_pipe(proc)

    def _close_pipe(self, proc: subprocess.Popen) -> None:
        self._pump.join(5)
        proc.stdout.close()

    def restart(self, timeout: float = 30.0) -> BrokerProcess:
        """Start again on the same port and data dir (after stop() or kill9())."""
        self.crash_at = None
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.start(timeout)
            except RuntimeError:
                # The old socket may linger briefly in the kernel; retry until the deadline.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
