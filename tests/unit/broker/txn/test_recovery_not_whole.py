"""Recovery after a machine restart that kept a PrepareCommit record while a data partition of
its round lost the transaction's batches (a power cut between the fsyncs of that one round):
the commit is not whole and was never answered, so recovery aborts it with an epoch bump
instead of completing it; read_committed readers see nothing of it, the LSO moves, the producer
is fenced and commits again once re-initialized. Nothing lost, the commit completes.

The lost batches are simulated as in ``test_recovery_hanging.py``: after the crash (at the test
crash point right after the PrepareCommit round) the partition's bytes from where the batch
begins are zeroed, and the data dir's boot id no longer matches."""

from __future__ import annotations

import pytest

from broker.log.manager import BOOT_ID_FILE
from broker.log.partition import Partition
from broker.txn.state import TxnState
from client.fetch_decoder import decode_fetched
from protocol.errors import ErrorCode, KafkaError
from protocol.records import ControlType
from tests.unit.broker.txn.test_manager import (
    NOW,
    Crashed,
    begin,
    crash,
    make_broker,
    markers,
    produce,
    run,
)
from tests.unit.broker.txn.test_recovery_hanging import power_cut, settled


def read_committed(p: Partition) -> list[bytes | None]:
    """What a read_committed consumer reads from offset 0 (one fetch: the tests' partitions
    are small)."""
    lso = p.last_stable_offset
    data = p.read(p.log_start_offset, 1 << 20, lso)
    records, _ = decode_fetched(bytes(data), p.topic, p.index, 0,
                                p.aborted_transactions(0, lso), True)
    return [r.value for r in records]


async def committed_then_crash_in_the_next_commit(tmp_path, nursery, bump_epoch: bool = False,
                                                   older_record: bool = False):
    """One committed transaction on t-0 and t-1 (two records each), then a second one (t-0:
    offsets 3-4, t-1: 3-5) whose EndTxn(commit) crashes once its PrepareCommit round is
    durable. Returns the crashed broker, the producer and the position of the second
    transaction's batch in t-1's segment."""
    armed: list[bool] = []

    def hook(point: str) -> None:
        if armed and point == "after_prepare_commit":
            raise Crashed(137)

    broker = make_broker(tmp_path, crash_hook=hook)
    nursery.start_soon(broker.flusher.run)
    tm = broker.transactions
    if older_record:  # a PrepareCommit record as the version before wrote it: no end offsets
        tm.coordinator.record_end_offsets = lambda transition, offsets: transition
    pid, epoch = await begin(broker)
    await produce(broker, "tx", pid, epoch, 0, 0)
    await produce(broker, "tx", pid, epoch, 1, 0)
    assert await run(tm.end_txn("tx", pid, epoch, True, NOW)) == ErrorCode.NONE
    assert await run(tm.add_partitions("tx", pid, epoch, [("t", 0), ("t", 1)], NOW)) == \
        ErrorCode.NONE
    lost_from = broker.partition("t", 1).segments[-1].size
    await produce(broker, "tx", pid, epoch, 0, 2)
    await produce(broker, "tx", pid, epoch, 1, 2, n=3)
    armed.append(True)
    with pytest.raises(Crashed):
        await run(tm.end_txn("tx", pid, epoch, True, NOW, bump_epoch=bump_epoch))
    md = tm.coordinator.get("tx")
    assert md.state is TxnState.PREPARE_COMMIT
    assert md.end_offsets == (() if older_record else ((("t", 0), 5), (("t", 1), 6)))
    return broker, pid, epoch, lost_from


@pytest.mark.parametrize("bump_epoch", [False, True], ids=["txn-v1", "txn-v2"])
async def test_a_commit_whose_batch_a_power_cut_lost_is_aborted_and_its_producer_fenced(
        tmp_path, nursery, bump_epoch: bool) -> None:
    broker, pid, epoch, lost_from = await committed_then_crash_in_the_next_commit(
        tmp_path, nursery, bump_epoch)
    power_cut(broker, broker.partition("t", 1), lost_from, tmp_path)

    again = make_broker(tmp_path)
    nursery.start_soon(again.flusher.run)
    tm = again.transactions
    recovery = tm.recovery
    assert (recovery.not_whole, recovery.completed, recovery.aborted, recovery.hanging) == \
        (1, 0, 0, 0)
    # Aborted with an epoch bump (above the one the version-2 Prepare record already carried).
    fenced = epoch + (2 if bump_epoch else 1)
    md = tm.coordinator.get("tx")
    assert (md.state, md.producer_id, md.producer_epoch) == \
        (TxnState.COMPLETE_ABORT, pid, fenced)
    assert markers(again, 0) == [(2, epoch, ControlType.COMMIT), (5, fenced, ControlType.ABORT)]
    assert markers(again, 1) == [(2, epoch, ControlType.COMMIT), (3, fenced, ControlType.ABORT)]
    for index in (0, 1):
        p = again.partition("t", index)
        assert settled(p)  # the LSO is not stuck
        assert read_committed(p) == [b"v0", b"v1"]  # nothing of the aborted transaction
    # The retried EndTxn(commit) is fenced, not answered as a retry of a commit.
    assert await run(tm.end_txn("tx", pid, epoch, True, NOW, bump_epoch=bump_epoch)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as late:
        await produce(again, "tx", pid, epoch, 0, 4)
    assert late.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    # Initialized again, the same id commits, and it is read exactly once.
    pid2, epoch2 = await begin(again)
    assert (pid2, epoch2) == (pid, fenced + 1)
    await produce(again, "tx", pid2, epoch2, 0, 0, n=1)
    await produce(again, "tx", pid2, epoch2, 1, 0, n=1)
    assert await run(tm.end_txn("tx", pid2, epoch2, True, NOW)) == ErrorCode.NONE
    for index in (0, 1):
        p = again.partition("t", index)
        assert settled(p)
        assert read_committed(p) == [b"v0", b"v1", b"v0"]
    again.close()


async def test_a_commit_a_power_cut_left_whole_completes(tmp_path, nursery) -> None:
    broker, pid, epoch, _ = await committed_then_crash_in_the_next_commit(tmp_path, nursery)
    crash(broker)  # a power cut that lost nothing
    (tmp_path / "data" / BOOT_ID_FILE).write_text("the boot before a power cut")
    again = make_broker(tmp_path)
    nursery.start_soon(again.flusher.run)
    recovery = again.transactions.recovery
    assert (recovery.not_whole, recovery.completed, recovery.aborted) == (0, 1, 0)
    # Completed, then its producer fenced: after a machine restart a retried EndTxn(commit)
    # cannot be told from the commit of a next transaction the power cut took (issue 42), so
    # the producer is fenced rather than answered NONE (``_fence_after_restart``).
    md = again.transactions.coordinator.get("tx")
    assert (md.state, md.producer_epoch, recovery.fenced) == (TxnState.EMPTY, epoch + 1, 1)
    assert read_committed(again.partition("t", 0)) == [b"v0", b"v1", b"v2", b"v3"]
    assert read_committed(again.partition("t", 1)) == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    assert await run(again.transactions.end_txn("tx", pid, epoch, True, NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    again.close()


async def test_a_prepare_commit_record_without_end_offsets_completes_as_before(
        tmp_path, nursery) -> None:
    """A record written by the version before (no end offsets) cannot tell: the commit
    completes, without the batch the power cut took (the gap this version closes)."""
    broker, pid, epoch, lost_from = await committed_then_crash_in_the_next_commit(
        tmp_path, nursery, older_record=True)
    power_cut(broker, broker.partition("t", 1), lost_from, tmp_path)
    again = make_broker(tmp_path)
    nursery.start_soon(again.flusher.run)
    assert (again.transactions.recovery.not_whole, again.transactions.recovery.completed) == (0, 1)
    # Completed, then its producer fenced (a machine restart: ``_fence_after_restart``).
    assert again.transactions.coordinator.get("tx").state is TxnState.EMPTY
    assert read_committed(again.partition("t", 0)) == [b"v0", b"v1", b"v2", b"v3"]
    assert read_committed(again.partition("t", 1)) == [b"v0", b"v1"]
    again.close()


async def test_a_commit_whose_markers_fail_at_recovery_is_fenced_once_complete(
        tmp_path, nursery, monkeypatch) -> None:
    """After a machine restart every producer is fenced (``_fence_after_restart``); one whose
    prepared transaction recovery could not complete (its markers failed) is fenced when the
    periodic task completes it, not left at its epoch (a commit of a next transaction the power
    cut took would be answered as a retry)."""
    from broker.txn.manager import TransactionManager

    broker, pid, epoch, _ = await committed_then_crash_in_the_next_commit(tmp_path, nursery)
    crash(broker)
    (tmp_path / "data" / BOOT_ID_FILE).write_text("the boot before a power cut")
    start = TransactionManager._start_markers
    with monkeypatch.context() as m:
        m.setattr(TransactionManager, "_start_markers", lambda self, *a, **k: None)
        again = make_broker(tmp_path)
    nursery.start_soon(again.flusher.run)
    md = again.transactions.coordinator.get("tx")
    assert (md.state, md.producer_epoch) == (TxnState.PREPARE_COMMIT, epoch)
    assert TransactionManager._start_markers is start
    await again.transactions.housekeeping(NOW)
    md = again.transactions.coordinator.get("tx")
    assert (md.state, md.producer_epoch) == (TxnState.EMPTY, epoch + 1)
    assert read_committed(again.partition("t", 1)) == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    assert await run(again.transactions.end_txn("tx", pid, epoch, True, NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    again.close()
