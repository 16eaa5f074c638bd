"""The mutation fuzzer in the suite: a short run always; a long one with MINIBROKER_FUZZ_SECONDS.

``MINIBROKER_FUZZ_SECONDS=600 pytest tests/fuzz -k long`` (or ``python -m tests.fuzz.runner 600``).
"""

from __future__ import annotations

import os

import pytest

from tests.fuzz.mutate import mutate
from tests.fuzz.runner import check, load_seeds, run


def test_seeds_are_committed_from_both_clients():
    seeds = load_seeds()
    assert len(seeds) >= 30
    assert any(s[:2] == b"\x00\x00" for s in seeds)  # Produce frames among them


def test_mutations_are_deterministic_per_seed():
    import random

    seeds = load_seeds()
    first = [mutate(s, random.Random(7)) for s in seeds]
    again = [mutate(s, random.Random(7)) for s in seeds]
    assert first == again
    assert sum(a != s for a, s in zip(first, seeds, strict=True)) > len(seeds) // 2


@pytest.mark.slow
def test_short_fuzz_run(tmp_path):
    report = run(tmp_path, seconds=8, seed=1)
    check(report)
    assert report.frames > 200 and report.maximal_frames > 0 and report.exits == 0


@pytest.mark.skipif(not os.environ.get("MINIBROKER_FUZZ_SECONDS"),
                    reason="long run on demand: set MINIBROKER_FUZZ_SECONDS")
def test_long_fuzz_run(tmp_path):
    report = run(tmp_path, seconds=float(os.environ["MINIBROKER_FUZZ_SECONDS"]),
                 seed=int(os.environ.get("MINIBROKER_FUZZ_SEED", "2")))
    print(report)
    check(report)
