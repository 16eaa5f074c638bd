"""Recovery after a machine restart that lost the Complete record of a producer's transaction
while a batch of its next transaction, appended after that transaction's marker on the same
partition, survived (a power cut between the fsyncs of one round: the data partition kept the
marker and the batch, ``__transaction_state`` lost the Complete record and the next
transaction's add record). Recovery finds the first transaction prepared and completes it, but
does not write its marker again where it is already followed by the next transaction: that
marker would end the next transaction there too and commit a batch nobody committed. The next
transaction is then aborted as hanging, and its producer fenced (it still holds the epoch).

The lost records are simulated as in ``test_recovery_hanging.py``: after the crash the bytes of
``__transaction_state`` from where the Complete record begins are zeroed, and the data dir's
boot id no longer matches."""

from __future__ import annotations

import pytest

from broker.group.offset_service import OffsetToCommit, TxnProducer
from broker.handlers.context import Broker
from broker.log.manager import BOOT_ID_FILE
from broker.log.topics import CONSUMER_OFFSETS_TOPIC
from broker.txn.state import TxnState
from protocol.errors import ErrorCode, KafkaError
from protocol.records import ControlType, encode_batch
from tests.unit.broker.txn.test_manager import (
    NOW,
    TIMEOUT,
    Crashed,
    begin,
    crash,
    make_broker,
    markers,
    produce,
    run,
)
from tests.unit.broker.txn.test_recovery_hanging import power_cut, settled, txn_log
from tests.unit.broker.txn.test_recovery_not_whole import read_committed


def broker_noting_cuts(tmp_path, cuts: list[int], **props) -> Broker:
    """A broker (one ``__transaction_state`` partition) whose crash hook notes where the
    transaction log ends once a transaction's markers are durable, before its Complete record
    is appended; nothing crashes."""
    made: list[Broker] = []

    def hook(point: str) -> None:
        if point == "after_markers":
            cuts.append(txn_log(made[0]).segments[-1].size)

    made.append(make_broker(tmp_path, crash_hook=hook,
                            **{"transaction.state.log.num.partitions": "1", **props}))
    return made[0]


async def committed_then_next_batch(tmp_path, nursery, commit: bool, bump_epoch: bool):
    """Transaction 1 on t-0 and t-1 (two records each) ends (``commit``) with its markers
    durable and its Complete record appended; transaction 2 of the same producer adds t-0 and
    appends one batch (offsets 3-4) after the marker (values v2, v3; v0, v1 with a bumped
    epoch, whose sequence starts again). Returns the broker, the producer, the epoch of the
    second transaction and where ``__transaction_state`` ended before the Complete record."""
    cuts: list[int] = []
    broker = broker_noting_cuts(tmp_path, cuts)
    nursery.start_soon(broker.flusher.run)
    tm = broker.transactions
    pid, epoch = await begin(broker)
    await produce(broker, "tx", pid, epoch, 0, 0)
    await produce(broker, "tx", pid, epoch, 1, 0)
    assert await run(tm.end_txn("tx", pid, epoch, commit, NOW, bump_epoch=bump_epoch)) == \
        ErrorCode.NONE
    assert len(cuts) == 1 and txn_log(broker).segments[-1].size > cuts[0]
    epoch2 = epoch + 1 if bump_epoch else epoch
    assert tm.coordinator.get("tx").producer_epoch == epoch2
    assert await run(tm.add_partitions("tx", pid, epoch2, [("t", 0)], NOW)) == ErrorCode.NONE
    await produce(broker, "tx", pid, epoch2, 0, 0 if bump_epoch else 2)  # (a new epoch: 0)
    assert markers(broker, 0) == [(2, epoch2, ControlType.COMMIT if commit else ControlType.ABORT)]
    return broker, pid, epoch2, cuts[0]


@pytest.mark.parametrize("bump_epoch", [False, True], ids=["txn-v1", "txn-v2"])
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
async def test_a_batch_of_the_next_transaction_is_not_ended_by_the_previous_marker(
        tmp_path, nursery, commit: bool, bump_epoch: bool) -> None:
    """Written again, the COMMIT marker would commit the next transaction's batch (never
    committed, never answered); the ABORT marker would abort it and leave its producer
    unfenced, free to go on with that transaction on other partitions and commit it (answered
    NONE without the aborted batch). Either way the next transaction is aborted with an epoch
    bump instead."""
    broker, pid, epoch, cut = await committed_then_next_batch(
        tmp_path, nursery, commit, bump_epoch)
    power_cut(broker, txn_log(broker), cut, tmp_path)

    again = make_broker(tmp_path, **{"transaction.state.log.num.partitions": "1"})
    nursery.start_soon(again.flusher.run)
    tm = again.transactions
    first = [b"v0", b"v1"] if commit else []
    for index in (0, 1):
        p = again.partition("t", index)
        assert settled(p)
        # read_committed readers see the first transaction only (if it committed)
        assert read_committed(p) == first
    assert again.partition("t", 0).aborted_transactions(0, 6) == \
        ([] if commit else [(pid, 0)]) + [(pid, 3)]
    # The first transaction is complete, its marker on t-0 not written again; the second one
    # is aborted there with an epoch bump (its producer still held the epoch).
    outcome = ControlType.COMMIT if commit else ControlType.ABORT
    assert markers(again, 0) == [(2, epoch, outcome), (5, epoch + 1, ControlType.ABORT)]
    md = tm.coordinator.get("tx")
    assert (md.state, md.producer_id, md.producer_epoch) == \
        (TxnState.COMPLETE_ABORT, pid, epoch + 1)
    recovery = tm.recovery
    assert (recovery.completed, recovery.not_whole, recovery.aborted, recovery.hanging,
            recovery.marked) == (1, 0, 0, 1, 1)
    # The producer believing in its second transaction is fenced: it can neither go on with it
    # nor have it answered NONE.
    assert await run(tm.add_partitions("tx", pid, epoch, [("t", 1)], NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    assert await run(tm.end_txn("tx", pid, epoch, True, NOW, bump_epoch=bump_epoch)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as late:
        await produce(again, "tx", pid, epoch, 0, 4)
    assert late.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    # Initialized again, the same id commits, and it is read once.
    pid2, epoch2 = await begin(again, partitions=[("t", 0)])
    assert (pid2, epoch2) == (pid, epoch + 2)
    await produce(again, "tx", pid2, epoch2, 0, 0, n=1)
    assert await run(tm.end_txn("tx", pid2, epoch2, True, NOW)) == ErrorCode.NONE
    p = again.partition("t", 0)
    assert settled(p) and read_committed(p) == first + [b"v0"]
    again.close()


async def test_nothing_after_the_marker_writes_it_again_as_before(tmp_path, nursery) -> None:
    """The Complete record lost, and no later transaction on the partition: the marker is
    written again (harmless: it ends nothing) and the transaction completes."""
    cuts: list[int] = []
    broker = broker_noting_cuts(tmp_path, cuts)
    nursery.start_soon(broker.flusher.run)
    pid, epoch = await begin(broker)
    await produce(broker, "tx", pid, epoch, 0, 0)
    assert await run(broker.transactions.end_txn("tx", pid, epoch, True, NOW)) == ErrorCode.NONE
    power_cut(broker, txn_log(broker), cuts[0], tmp_path)

    again = make_broker(tmp_path, **{"transaction.state.log.num.partitions": "1"})
    nursery.start_soon(again.flusher.run)
    recovery = again.transactions.recovery
    assert (recovery.completed, recovery.hanging, recovery.marked) == (1, 0, 0)
    assert markers(again, 0) == [(2, epoch, ControlType.COMMIT), (3, epoch, ControlType.COMMIT)]
    assert read_committed(again.partition("t", 0)) == [b"v0", b"v1"]
    # Completed, then its producer fenced (a machine restart: ``_fence_after_restart``).
    md = again.transactions.coordinator.get("tx")
    assert (md.state, md.producer_epoch, recovery.fenced) == (TxnState.EMPTY, epoch + 1, 1)
    again.close()


async def test_a_batch_appended_after_the_prepare_record_still_gets_the_commit_marker(
        tmp_path, nursery) -> None:
    """A batch of the transaction itself may follow its PrepareCommit record (accepted while
    the record was being synced): above the recorded end offset but before any marker of the
    producer. With the markers lost it is the transaction's own, and the commit covers it."""
    def hook(point: str) -> None:
        if point == "after_prepare_commit":
            raise Crashed(137)

    broker = make_broker(tmp_path, crash_hook=hook)
    nursery.start_soon(broker.flusher.run)
    tm = broker.transactions
    pid, epoch = await begin(broker, partitions=[("t", 0), ("t", 1)])
    await produce(broker, "tx", pid, epoch, 0, 0)
    with pytest.raises(Crashed):
        await run(tm.end_txn("tx", pid, epoch, True, NOW))
    assert tm.coordinator.get("tx").end_offsets == ((("t", 0), 2), (("t", 1), 0))
    # The late batch, as verify_produce let it through before the record was durable.
    late = bytearray(encode_batch([(None, b"v2", (), NOW)], producer_id=pid,
                                  producer_epoch=epoch, base_sequence=0, transactional=True))
    broker.storage.append(broker.partition("t", 1), late, NOW, transactional=True)
    crash(broker)
    (tmp_path / "data" / BOOT_ID_FILE).write_text("the boot before a power cut")

    again = make_broker(tmp_path)
    nursery.start_soon(again.flusher.run)
    assert read_committed(again.partition("t", 1)) == [b"v2"]
    assert markers(again, 1) == [(1, epoch, ControlType.COMMIT)]
    recovery = again.transactions.recovery
    assert (recovery.completed, recovery.not_whole, recovery.hanging, recovery.marked) == \
        (1, 0, 0, 0)
    # Completed, then its producer fenced (a machine restart: ``_fence_after_restart``).
    assert again.transactions.coordinator.get("tx").state is TxnState.EMPTY
    assert recovery.fenced == 1
    again.close()


async def test_pending_offsets_of_the_next_transaction_are_not_committed_by_the_previous_marker(
        tmp_path, nursery) -> None:
    """The same on ``__consumer_offsets``: the next transaction's TxnOffsetCommit follows the
    previous one's COMMIT marker there; its offsets stay uncommitted (dropped by the ABORT of
    the hanging transaction), the previous transaction's offsets stay committed."""
    props = {"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "1"}
    cuts: list[int] = []
    broker = broker_noting_cuts(tmp_path, cuts, **props)
    nursery.start_soon(broker.flusher.run)
    tm, groups = broker.transactions, broker.groups

    def offsets(b: Broker) -> dict[int, int]:
        return {f.partition: f.offset for f in b.groups.fetch_offsets("g", [("t", [0, 1])], NOW)}

    init = await run(tm.init_producer_id("tx", TIMEOUT, None, NOW))
    pid, epoch = init.producer_id, init.producer_epoch
    group_tp = broker.cross.offsets_partition("g")
    for offset, then_commit in ((50, True), (60, False)):
        assert await run(tm.add_partitions("tx", pid, epoch, [group_tp], NOW)) == ErrorCode.NONE
        assert await run(groups.txn_commit_offsets(
            "g", TxnProducer("tx", pid, epoch), [OffsetToCommit("t", 0, offset, None)], NOW)) \
            == [ErrorCode.NONE]
        if then_commit:
            assert await run(tm.end_txn("tx", pid, epoch, True, NOW)) == ErrorCode.NONE
    assert offsets(broker) == {0: 50, 1: -1}
    power_cut(broker, txn_log(broker), cuts[0], tmp_path)

    again = make_broker(tmp_path, **props)
    nursery.start_soon(again.flusher.run)
    assert offsets(again) == {0: 50, 1: -1}  # not 60: that transaction was never committed
    assert again.groups.coordinator.offsets.pending("g") == {}
    recovery = again.transactions.recovery
    assert (recovery.completed, recovery.hanging, recovery.marked) == (1, 1, 1)
    assert settled(again.partition(CONSUMER_OFFSETS_TOPIC, group_tp[1]))
    md = again.transactions.coordinator.get("tx")
    assert (md.state, md.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)  # fenced
    again.close()
