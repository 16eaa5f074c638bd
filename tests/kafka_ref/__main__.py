"""The reference Kafka from a shell or a benchmark:

    python -m tests.kafka_ref fetch                   # fetch the jars once; print the timing
    python -m tests.kafka_ref classpath               # Kafka's classpath and the test programs'
    python -m tests.kafka_ref start --nodes 1|3 [--dir D] [--config KEY=VALUE ...] [--feature NAME=LEVEL ...]
    python -m tests.kafka_ref tool CLASS [ARG ...]    # e.g. org.apache.kafka.tools.TopicCommand

``start`` prints the bootstrap address alone on its first stdout line once every broker serves,
then runs until SIGTERM or SIGINT, when it stops the nodes (controlled shutdown) and exits. Node
logs and data stay in --dir (a fresh temporary directory by default, printed on stderr).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.kafka_ref.harness import (
    KafkaCluster,
    classpath,
    programs_classpath,
    run_tool,
    unavailable,
)


def _pairs(values: list[str]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kafka_ref")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch")
    sub.add_parser("classpath")
    start = sub.add_parser("start")
    start.add_argument("--nodes", type=int, default=1)
    start.add_argument("--dir", type=Path)
    start.add_argument("--heap", default="512m")
    start.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    start.add_argument("--feature", action="append", default=[], metavar="NAME=LEVEL")
    tool = sub.add_parser("tool")
    tool.add_argument("main_class")
    tool.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)

    reason = unavailable()
    if reason:
        print(f"reference Kafka unavailable: {reason}", file=sys.stderr)
        return 2
    if args.command == "fetch":
        began = time.monotonic()
        classpath()
        programs_classpath()
        print(f"jars and test programs ready in {time.monotonic() - began:.1f} s", file=sys.stderr)
        return 0
    if args.command == "classpath":
        print(programs_classpath())
        return 0
    if args.command == "tool":
        done = run_tool(args.main_class, *args.args, timeout=3600)
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        return done.returncode

    workdir = args.dir or Path(tempfile.mkdtemp(prefix="kafka-ref-"))
    features = {k: int(v) for k, v in _pairs(args.feature).items()}
    cluster = KafkaCluster(workdir, args.nodes, config=_pairs(args.config), features=features,
                           heap=args.heap)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    began = time.monotonic()
    print(f"kafka-ref: starting {args.nodes} node(s) in {workdir}", file=sys.stderr)
    cluster.start()
    try:
        print(f"kafka-ref: serving after {time.monotonic() - began:.1f} s", file=sys.stderr)
        print(cluster.bootstrap, flush=True)
        while not stop.wait(0.5):
            for node in cluster.nodes:
                if node.proc is not None and node.proc.poll() is not None:
                    print(f"kafka-ref: node {node.node_id} exited with {node.proc.returncode}\n"
                          + cluster.log_tail(), file=sys.stderr)
                    return 1
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
