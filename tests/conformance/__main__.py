"""Run the differential corpus against two running brokers and print the divergences:

    python -m tests.conformance KAFKA_PORT MINIBROKER_PORT [CASE ...]
"""

from __future__ import annotations

import sys

from tests.conformance.driver import compare, load_corpus


def main(argv: list[str]) -> int:
    kafka, minibroker, *names = argv
    cases = [c for c in load_corpus() if not names or c["name"] in names]
    result = compare(int(kafka), int(minibroker), cases, workers=4)
    total = 0
    for case in cases:
        for line in result[case["name"]]:
            print(line)
            total += 1
    print(f"{len(cases)} cases, {total} divergences", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
