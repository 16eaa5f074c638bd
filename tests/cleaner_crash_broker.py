"""The broker CLI with a log-cleaner crash point, for the crash tests (never used in production).

``python -c "from tests.cleaner_crash_broker import main; main()" POINT serve ...`` runs
``minibroker serve ...`` whose cleaner ends the process with exit code 137 (no cleanup at all, like
kill -9) when it reaches ``POINT`` (one of ``broker.log.cleaner.CRASH_POINTS``). The hook goes in
through the Broker's ``cleaner_crash_hook`` constructor argument.
"""

from __future__ import annotations

import functools
import os
import sys

import broker.server
from broker.cli import main as cli_main
from broker.core import Broker
from broker.log.cleaner import CRASH_POINTS


def main() -> None:
    point = sys.argv.pop(1)
    if point not in CRASH_POINTS:
        raise SystemExit(f"unknown crash point {point!r}; expected one of {CRASH_POINTS}")

    def hook(at: str) -> None:
        if at == point:
            sys.stdout.write(f"crash point {at}: exiting with 137\n")
            sys.stdout.flush()
            os._exit(137)

    broker.server.Broker = functools.partial(Broker, cleaner_crash_hook=hook)  # type: ignore[misc]
    cli_main()
