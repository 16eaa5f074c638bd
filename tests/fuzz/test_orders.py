"""The hostile-order fuzzer (``orders.py``) in the suite: one short seeded run always; longer and
more seeds on demand: ``MINIBROKER_ORDERS_SECONDS=300 MINIBROKER_ORDERS_SEEDS=1,2,3 pytest
tests/fuzz/test_orders.py -k long`` (each seed anonymous, then as a SASL user with every right on
``Topic:*`` under an authorizer)."""

from __future__ import annotations

import os

import pytest

from tests.fuzz.orders import run


@pytest.mark.slow
def test_short_hostile_order_run(tmp_path):
    report = run(tmp_path, seconds=12, seed=1)
    assert report.requests > 100, report
    assert not report.findings, report


@pytest.mark.skipif(not os.environ.get("MINIBROKER_ORDERS_SECONDS"),
                    reason="long run on demand: set MINIBROKER_ORDERS_SECONDS")
def test_long_hostile_order_run(tmp_path):
    seconds = float(os.environ["MINIBROKER_ORDERS_SECONDS"])
    for seed in (int(s) for s in os.environ.get("MINIBROKER_ORDERS_SEEDS", "2").split(",")):
        for secured in (False, True):
            report = run(tmp_path, seconds, seed, secured)
            print(report)
            assert not report.findings, report
