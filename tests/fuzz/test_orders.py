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
    assert report.exits == 0 and report.maximal > 0, report
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


# -- what the fuzzer found, kept as plain tests ----------------------------------------------


@pytest.mark.slow
def test_a_topic_deleted_under_an_unsynced_transactional_batch_lets_the_broker_stop_cleanly(
        tmp_path):
    """Seed 11 (secured, 60 s): a transactional batch is answered before its fsync (that comes
    with the PrepareCommit); DeleteTopics of its topic then left the deleted partition in the
    flush set, and the clean stop's flush called fdatasync(-1) (exit 1, a traceback)."""
    from tests.broker_process import BrokerProcess
    from tests.fuzz import ops

    proc = BrokerProcess(tmp_path / "data").start()
    try:
        with ops.connect(proc.port) as conn:
            assert ops.create_topic(conn, "u") == 0
            code, pid, epoch = ops.init_producer_id(conn, "x")
            assert ops.add_partitions(conn, "x", pid, epoch, [("u", 0)]) == {("u", 0): 0}
            assert ops.produce(conn, "u", 0, ops.batch([b"v"], pid, epoch, 0, True), "x") == 0
            assert ops.delete_topic(conn, "u") == 0
            assert ops.end_txn(conn, "x", pid, epoch, True)[0] == 0
            assert ops.create_topic(conn, "t-after") == 0
            ops.commit_transaction(conn, "y", "t-after", [b"w"])
    finally:
        assert proc.stop() == 0, "".join(proc.output[-20:])
    assert "Traceback" not in "".join(proc.output)
