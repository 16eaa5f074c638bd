"""A Java program (a Kafka tool or ``Referee``) running in the background, its stdout read as it
comes: lines kept in order, JSON lines parsed, waits on a predicate. Stopped by its own handle."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.kafka_ref.harness import java_command
from tests.process_guard import popen


class JavaProgram:
    def __init__(self, main_class: str, *args: str, stdin: bool = False) -> None:
        self.lines: list[str] = []
        self.events: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self.proc = popen(java_command(main_class, *args), what=f"java {main_class} {args[:1]}",
                          stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr: list[str] = []
        self._threads = [threading.Thread(target=self._pump, daemon=True),
                         threading.Thread(target=self._pump_err, daemon=True)]
        for thread in self._threads:
            thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line)
                if line.startswith("{"):
                    try:
                        self.events.append(json.loads(line))
                    except ValueError:
                        pass
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60.0,
                 start: int = 0) -> dict[str, Any]:
        """The first event from index ``start`` on for which ``predicate`` holds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for event in self.events[start:]:
                    if predicate(event):
                        return event
                if self.proc.poll() is not None and not self._threads[0].is_alive():
                    raise AssertionError(f"program exited ({self.proc.returncode}) first:\n"
                                         + self.output())
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("timed out waiting for an event:\n" + self.output())
                self._changed.wait(min(left, 0.5))

    def close_stdin(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()

    def wait(self, timeout: float = 120.0) -> int:
        code = self.proc.wait(timeout)
        for thread in self._threads:
            thread.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait()

    def output(self, tail: int = 60) -> str:
        return ("".join(self.lines[-tail:]) + "--- stderr:\n" + "".join(self.stderr[-tail:]))

    def __enter__(self) -> JavaProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
