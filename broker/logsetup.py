"""One log format for the broker: one line per event, as text or JSON (``--log-format``).

text:  ``2026-11-23T22:55:01.123Z INFO minibroker.server: closing 127.0.0.1:5312: ...``
json:  ``{"ts": "2026-11-23T22:55:01.123Z", "level": "INFO", "logger": "minibroker.server",
         "msg": "...", "exc": "Traceback ..."}``

A traceback stays on the same line (newlines escaped in text, a field in JSON), so that a log
shipper never splits one event into several. Every line goes to stderr and, with ``--log-file``,
to that file as well (appended; reopened when logrotate moves it away, as Kafka's server.log is
rotated).
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
import time
from pathlib import Path
from typing import TextIO

FORMATS = ("text", "json")


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info:
            line += " | " + self.formatException(record.exc_info)
        return line.replace("\r", "").replace("\n", "\\n")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        event = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            event["exc"] = self.formatException(record.exc_info)
        return json.dumps(event, ensure_ascii=False)


def configure(level: str = "info", fmt: str = "text", stream: TextIO | None = None,
              log_file: Path | None = None) -> None:
    """Send every log record (broker and client loggers) to ``stream`` (stderr) and ``log_file``
    in format ``fmt``. OSError if the file cannot be opened."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, got {fmt!r}")
    formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    handlers: list[logging.Handler] = [logging.StreamHandler(stream or sys.stderr)]
    if log_file is not None:
        handlers.append(logging.handlers.WatchedFileHandler(log_file, encoding="utf-8"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level.upper())
