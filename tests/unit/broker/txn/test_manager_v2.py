"""Transaction version 2 on a real Broker (data dir on disk, no sockets): Produce v12 adds the
partition before its batch (the record synced with the transaction's Prepare record), EndTxn v5 writes the markers with the bumped epoch, and every
state survives a crash at each step (Ongoing, PrepareCommit/PrepareAbort with the new epoch, markers
written, Complete, an exhausted epoch with its next producer id): recovery finishes the transaction
with the markers of the bumped epoch and a retried EndTxn is still answered with the new pair."""

from __future__ import annotations

import pytest

from broker.handlers.context import Broker
from broker.log.manager import BOOT_ID_FILE
from broker.txn.coordinator import EPOCH_EXHAUSTED, INT16_MAX
from broker.txn.state import TxnState
from protocol.errors import ErrorCode, KafkaError
from protocol.records import ControlType, encode_batch
from tests.unit.broker.txn.test_manager import (
    NOW,
    TIMEOUT,
    Crashed,
    crash,
    crash_at,
    make_broker,
    markers,
    run,
)


async def init(broker: Broker, tid: str = "tx") -> tuple[int, int]:
    result = await run(broker.transactions.init_producer_id(tid, TIMEOUT, None, NOW))
    assert result.error_code == ErrorCode.NONE
    return result.producer_id, result.producer_epoch


async def produce_v12(broker: Broker, pid: int, epoch: int, index: int, seq: int,
                      tid: str = "tx", n: int = 2) -> None:
    records = bytearray(encode_batch(
        [(None, b"v%d" % (seq + i), (), NOW) for i in range(n)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True))
    partition = broker.partition("t", index)
    # The partition joins the transaction here (its record appended and applied, not synced).
    broker.transactions.verify_produce(partition, records, tid, NOW, add_partition=True)
    _, flushed = broker.storage.append(partition, records, NOW, transactional=True)
    if flushed is not None:
        await flushed.wait()


async def end_v5(broker: Broker, pid: int, epoch: int, commit: bool, tid: str = "tx"):
    code = await run(broker.transactions.end_txn(tid, pid, epoch, commit, NOW, bump_epoch=True))
    return code, broker.transactions.coordinator.producer_after_end(tid)


async def test_produce_adds_the_partition_and_end_bumps_the_epoch_of_the_markers(
        tmp_path, nursery) -> None:
    broker = make_broker(tmp_path)
    nursery.start_soon(broker.flusher.run)
    pid, epoch = await init(broker)
    await produce_v12(broker, pid, epoch, 0, 0)
    md = broker.transactions.coordinator.get("tx")
    assert (md.state, md.partitions) == (TxnState.ONGOING, {("t", 0)})
    assert await end_v5(broker, pid, epoch, True) == (ErrorCode.NONE, (pid, epoch + 1))
    assert markers(broker, 0) == [(2, epoch + 1, ControlType.COMMIT)]
    # The next transaction at the new epoch starts at sequence 0 on the same partition.
    await produce_v12(broker, pid, epoch + 1, 0, 0)
    # A late batch and a late EndTxn of the ended transaction are fenced.
    with pytest.raises(KafkaError) as info:
        await produce_v12(broker, pid, epoch, 1, 2)
    assert info.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert (await end_v5(broker, pid, epoch, True))[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert broker.transactions.coordinator.get("tx").state is TxnState.ONGOING
    assert await end_v5(broker, pid, epoch + 1, False) == (ErrorCode.NONE, (pid, epoch + 2))
    assert markers(broker, 0)[-1] == (5, epoch + 2, ControlType.ABORT)
    broker.close()


@pytest.mark.parametrize(("point", "commit"), [
    ("after_prepare_commit", True),
    ("after_prepare_abort", False),
    ("after_markers", True),
    ("after_markers", False),
])
async def test_recovery_after_a_crash_in_a_version_2_end(tmp_path, nursery, point: str,
                                                          commit: bool) -> None:
    broker = make_broker(tmp_path, crash_hook=crash_at(point))
    nursery.start_soon(broker.flusher.run)
    pid, epoch = await init(broker)
    await produce_v12(broker, pid, epoch, 0, 0)
    await produce_v12(broker, pid, epoch, 1, 0, n=3)
    with pytest.raises(Crashed):
        await end_v5(broker, pid, epoch, commit)
    crash(broker)

    again = make_broker(tmp_path)
    assert again.transactions.recovery.completed == 1
    md = again.transactions.coordinator.get("tx")
    assert md.state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    assert (md.producer_id, md.producer_epoch, md.txn_version) == (pid, epoch + 1, 2)
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    for index in (0, 1):
        p = again.partition("t", index)
        assert p.producers.open_transactions() == {}
        assert p.last_stable_offset == p.high_watermark == p.log_end_offset
        found = markers(again, index)
        assert found and all(m[1:] == (epoch + 1, kind) for m in found)
    # The client never got its answer: its retry is recognised and gets the new pair.
    code = await run(again.transactions.end_txn("tx", pid, epoch, commit, NOW, bump_epoch=True))
    assert code == ErrorCode.NONE
    assert again.transactions.coordinator.producer_after_end("tx") == (pid, epoch + 1)
    again.close()


async def test_an_ongoing_version_2_transaction_is_aborted_by_recovery_after_a_crash(
        tmp_path, nursery) -> None:
    """Its batches were answered once appended, so a crash followed by a machine restart may
    have taken them: recovery aborts it with an epoch bump (the producer is fenced, as by a
    timeout) and the producer goes on after it initializes again."""
    broker = make_broker(tmp_path)
    nursery.start_soon(broker.flusher.run)
    pid, epoch = await init(broker)
    await produce_v12(broker, pid, epoch, 0, 0)
    crash(broker)
    (tmp_path / "data" / BOOT_ID_FILE).write_text("the boot before a power cut")
    again = make_broker(tmp_path)
    nursery.start_soon(again.flusher.run)
    assert again.transactions.recovery.aborted == 1
    md = again.transactions.coordinator.get("tx")
    assert (md.state, md.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
    p = again.partition("t", 0)
    assert markers(again, 0) == [(2, epoch + 1, ControlType.ABORT)]
    assert p.producers.open_transactions() == {}
    assert p.last_stable_offset == p.high_watermark == p.log_end_offset == 3
    with pytest.raises(KafkaError) as info:
        await produce_v12(again, pid, epoch, 1, 0)
    assert info.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    pid2, epoch2 = await init(again)
    await produce_v12(again, pid2, epoch2, 1, 0)
    assert await end_v5(again, pid2, epoch2, True) == (ErrorCode.NONE, (pid2, epoch2 + 1))
    assert again.partition("t", 1).producers.open_transactions() == {}
    again.close()


async def test_an_ongoing_version_2_transaction_goes_on_after_a_crash_on_the_same_boot(
        tmp_path, nursery) -> None:
    """Only the process died: the page cache kept its batches, so recovery syncs them and leaves
    the transaction open, and the same producer commits it."""
    broker = make_broker(tmp_path)
    nursery.start_soon(broker.flusher.run)
    pid, epoch = await init(broker)
    await produce_v12(broker, pid, epoch, 0, 0)
    crash(broker)
    again = make_broker(tmp_path)
    nursery.start_soon(again.flusher.run)
    assert again.transactions.recovery.aborted == 0
    assert again.transactions.coordinator.get("tx").state is TxnState.ONGOING
    p = again.partition("t", 0)
    assert p.high_watermark == p.log_end_offset  # synced by recovery, so readable
    assert await end_v5(again, pid, epoch, True) == (ErrorCode.NONE, (pid, epoch + 1))
    assert markers(again, 0) == [(p.log_end_offset - 1, epoch + 1, ControlType.COMMIT)]
    again.close()


@pytest.mark.parametrize("point", ["after_prepare_commit", "after_markers", None])
async def test_epoch_overflow_rotates_the_producer_id_across_a_crash(
        tmp_path, nursery, point: str | None) -> None:
    broker = make_broker(tmp_path, crash_hook=None if point is None else crash_at(point))
    nursery.start_soon(broker.flusher.run)
    pid, _ = await init(broker)
    # As after 32766 transactions: persist an Empty record at the exhausted epoch.
    coordinator = broker.transactions.coordinator
    coordinator.get("tx").producer_epoch = EPOCH_EXHAUSTED
    await produce_v12(broker, pid, EPOCH_EXHAUSTED, 0, 0)
    if point is None:
        code, pair = await end_v5(broker, pid, EPOCH_EXHAUSTED, True)
        assert code == ErrorCode.NONE
        new_pid = pair[0]
        assert pair == (new_pid, 0) and new_pid != pid
        broker.close()
    else:
        with pytest.raises(Crashed):
            await end_v5(broker, pid, EPOCH_EXHAUSTED, True)
        crash(broker)
    again = make_broker(tmp_path)
    nursery.start_soon(again.flusher.run)
    md = again.transactions.coordinator.get("tx")
    assert md.state is TxnState.COMPLETE_COMMIT
    assert md.producer_epoch == 0 and md.producer_id != pid
    assert (md.last_producer_id, md.last_producer_epoch) == (pid, EPOCH_EXHAUSTED)
    # The markers carry the last epoch of the old id.
    assert [m[1:] for m in markers(again, 0)] and all(
        m[1:] == (INT16_MAX, ControlType.COMMIT) for m in markers(again, 0))
    # A retry with the old pair is answered with the new one; the new id works.
    code = await run(again.transactions.end_txn("tx", pid, EPOCH_EXHAUSTED, True, NOW,
                                                bump_epoch=True))
    assert code == ErrorCode.NONE
    assert again.transactions.coordinator.producer_after_end("tx") == (md.producer_id, 0)
    await produce_v12(again, md.producer_id, 0, 0, 0)
    assert await end_v5(again, md.producer_id, 0, False) == (
        ErrorCode.NONE, (md.producer_id, 1))
    again.close()
