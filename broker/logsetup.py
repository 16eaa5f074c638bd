"""One log format for the broker: one line per event, as text or JSON (``--log-format``).

text:  ``2026-11-23T22:55:01.123Z INFO minibroker.server: closing 127.0.0.1:5312: ...``
json:  ``{"ts": "2026-11-23T22:55:01.123Z", "level": "INFO", "logger": "minibroker.server",
         "msg": "...", "exc": "Traceback ..."}``

A traceback stays on the same line (newlines escaped in text, a field in JSON), so that a log
shipper never splits one event into several. Every line goes to stderr.
"""

from __future__ import annotations

import json
import logging
import sys
import time
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


def configure(level: str = "info", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Send every log record (broker and client loggers) to ``stream`` in format ``fmt``."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, got {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
