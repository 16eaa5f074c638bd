"""The real broker with a crash hook, for the kill -9 tests only.

    python -m tests.crash_broker POINT --host H --port P --data-dir D [--config FILE]

runs what ``minibroker serve`` runs (same start-up lines), built with a crash hook that exits the
process at once with status 137, as SIGKILL would, when EndTxn reaches ``POINT`` (one of
``broker.txn.manager.CRASH_POINTS``) or a log cleaning does (one of
``broker.log.cleaner.CRASH_POINTS``). The broker itself has no such hook: only this entry point
passes one (``broker.app.build_broker(crash_hook=...)``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from broker.cli import run_broker
from broker.config import build_config, read_properties
from broker.log.cleaner import CRASH_POINTS as CLEANER_CRASH_POINTS
from broker.txn.manager import CRASH_POINTS


def exit_at(point: str):
    def hook(reached: str) -> None:
        if reached == point:
            sys.stderr.write(f"minibroker: crash point {point}: exiting with 137 (test only)\n")
            sys.stderr.flush()
            os._exit(137)

    return hook


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.crash_broker")
    parser.add_argument("point", choices=sorted(CRASH_POINTS | set(CLEANER_CRASH_POINTS)))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--config", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    properties = read_properties(args.config) if args.config else {}
    config = build_config(properties, host=args.host, port=args.port, data_dir=args.data_dir)
    run_broker(config, crash_hook=exit_at(args.point))


if __name__ == "__main__":
    main()
