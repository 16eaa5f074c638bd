"""`make test` runs the suite with ``--dist loadgroup`` so that the tests of an xdist group (the
reference Kafka's: tests/kafka_ref/fixtures.py) run on one worker and one Kafka serves them. pytest
9.2 broke that without a word (pytest-xdist issue 1386: the group no longer reaches the scheduler,
the tests spread over the workers and each worker starts its own clusters); pyproject.toml keeps
pytest below 9.2 until xdist follows. This test fails if the grouping stops working again."""

from __future__ import annotations

import textwrap
from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_loadgroup_runs_a_group_on_one_worker(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    log = pytester.path / "ran.txt"
    pytester.makepyfile(test_grouped=textwrap.dedent(f"""
        import os
        import time

        import pytest

        def ran(name):
            with open({str(log)!r}, "a") as f:
                f.write(f"{{name}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")
            time.sleep(0.05)

        @pytest.mark.parametrize("i", range(6))
        def test_free(i):
            ran("free")

        @pytest.mark.xdist_group("one")
        @pytest.mark.parametrize("i", range(6))
        def test_one(i):
            ran("one")

        @pytest.mark.xdist_group("two")
        @pytest.mark.parametrize("i", range(6))
        def test_two(i):
            ran("two")
    """))
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-p",
                                           "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=18)
    workers: dict[str, set[str]] = defaultdict(set)
    for line in log.read_text().splitlines():
        name, worker = line.split()
        workers[name].add(worker)
    assert len(workers["one"]) == 1 and len(workers["two"]) == 1, dict(workers)
