"""Recovery after a machine restart that lost the record adding a partition to a transaction
while the batch it admitted survived (a power cut between the fsyncs of one round): the
partition holds an open transaction its coordinator never recorded. Recovery aborts it there
(the LSO moves, read_committed readers skip it, pending transactional offsets are dropped) and
fences the producer that still believes in it; a kill -9 on the same boot aborts nothing.

The lost record is simulated: after the crash the bytes of ``__transaction_state`` from where
the add record begins are zeroed (what a power cut leaves of unsynced pages), and the data
dir's boot id no longer matches."""

from __future__ import annotations

import os

import trio

from broker.group.offset_service import OffsetToCommit, TxnProducer
from broker.handlers.context import Broker
from broker.log.manager import BOOT_ID_FILE
from broker.log.partition import Partition
from broker.log.topics import CONSUMER_OFFSETS_TOPIC
from broker.log.topics import TRANSACTION_STATE_TOPIC as TOPIC
from broker.txn.state import TxnState
from protocol.errors import ErrorCode, KafkaError
from protocol.records import ControlType
from tests.unit.broker.txn.test_manager import (
    NOW,
    TIMEOUT,
    begin,
    crash,
    make_broker,
    markers,
    produce,
    run,
)


def txn_log(broker: Broker, tid: str = "tx") -> Partition:
    return broker.partition(TOPIC, broker.transactions.log.partition_of(tid))


async def synced(broker: Broker, partition: Partition) -> None:
    assert await broker.storage.commit([partition]).wait()


def power_cut(broker: Broker, partition: Partition, lost_from: int, tmp_path) -> None:
    """kill -9, then lose ``partition``'s bytes from ``lost_from`` on (its last segment), and
    make the next start see another boot."""
    segment = partition.segments[-1]
    path, end = segment.log_path, segment.size
    assert end > lost_from
    crash(broker)
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(end - lost_from), lost_from)
    finally:
        os.close(fd)
    (tmp_path / "data" / BOOT_ID_FILE).write_text("the boot before a power cut")


def settled(p: Partition) -> bool:
    return p.producers.open_transactions() == {} and \
        p.last_stable_offset == p.high_watermark == p.log_end_offset


async def test_a_transaction_whose_add_record_was_lost_is_aborted_and_its_producer_fenced(
        tmp_path, nursery) -> None:
    broker = make_broker(tmp_path)
    nursery.start_soon(broker.flusher.run)
    tm = broker.transactions
    pid, epoch = await begin(broker, partitions=[("t", 0)])
    await produce(broker, "tx", pid, epoch, 0, 0)
    assert await run(tm.end_txn("tx", pid, epoch, True, NOW)) == ErrorCode.NONE
    await synced(broker, txn_log(broker))  # the Complete record: only the next record is lost
    cut = txn_log(broker).segments[-1].size
    assert tm.add_partitions("tx", pid, epoch, [("t", 0), ("t", 1)], NOW) == ErrorCode.NONE
    await produce(broker, "tx", pid, epoch, 0, 2)
    await produce(broker, "tx", pid, epoch, 1, 0, n=3)
    power_cut(broker, txn_log(broker), cut, tmp_path)

    again = make_broker(tmp_path)
    nursery.start_soon(again.flusher.run)
    recovery = again.transactions.recovery
    assert (recovery.aborted, recovery.hanging) == (0, 1)
    md = again.transactions.coordinator.get("tx")
    # Recorded with the partitions found open and aborted with an epoch bump.
    assert (md.state, md.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
    assert markers(again, 0) == [(2, epoch, ControlType.COMMIT), (5, epoch + 1, ControlType.ABORT)]
    assert markers(again, 1) == [(3, epoch + 1, ControlType.ABORT)]
    for index, first in ((0, 3), (1, 0)):
        p = again.partition("t", index)
        assert settled(p)
        # read_committed readers skip the aborted batches
        assert p.aborted_transactions(0, p.log_end_offset) == [(pid, first)]
    # The producer that believed in it is fenced: its commit is not taken for a retry.
    assert await run(again.transactions.end_txn("tx", pid, epoch, True, NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    try:
        await produce(again, "tx", pid, epoch, 0, 4)
        raise AssertionError("a fenced producer's batch was accepted")
    except KafkaError as exc:
        assert exc.code == ErrorCode.INVALID_PRODUCER_EPOCH
    # Initialized again, the same id commits a transaction.
    pid2, epoch2 = await begin(again, partitions=[("t", 0)])
    assert (pid2, epoch2) == (pid, epoch + 2)
    await produce(again, "tx", pid2, epoch2, 0, 0)
    assert await run(again.transactions.end_txn("tx", pid2, epoch2, True, NOW)) == ErrorCode.NONE
    p = again.partition("t", 0)
    assert settled(p) and markers(again, 0)[-1] == (8, epoch2, ControlType.COMMIT)
    assert p.aborted_transactions(0, p.log_end_offset) == [(pid, 3)]
    again.close()


async def test_a_partition_left_open_at_an_older_epoch_gets_an_abort_marker_of_that_epoch(
        tmp_path, nursery) -> None:
    """The transaction's first partition was recorded durably, the second one's record was
    lost: recovery aborts the ongoing transaction with an epoch bump where the coordinator knows
    it, and the other partition with an ABORT marker of the epoch its producer state holds."""
    broker = make_broker(tmp_path)
    nursery.start_soon(broker.flusher.run)
    tm = broker.transactions
    pid, epoch = await begin(broker, partitions=[("t", 0)])
    await synced(broker, txn_log(broker))
    cut = txn_log(broker).segments[-1].size
    assert tm.add_partitions("tx", pid, epoch, [("t", 1)], NOW) == ErrorCode.NONE
    await produce(broker, "tx", pid, epoch, 0, 0)
    await produce(broker, "tx", pid, epoch, 1, 0)
    power_cut(broker, txn_log(broker), cut, tmp_path)

    again = make_broker(tmp_path)
    recovery = again.transactions.recovery
    assert (recovery.aborted, recovery.hanging) == (1, 1)
    md = again.transactions.coordinator.get("tx")
    assert (md.state, md.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
    assert markers(again, 0) == [(2, epoch + 1, ControlType.ABORT)]
    assert markers(again, 1) == [(2, epoch, ControlType.ABORT)]
    for index in (0, 1):
        p = again.partition("t", index)
        assert settled(p) and p.aborted_transactions(0, 3) == [(pid, 0)]
    again.close()


async def test_pending_transactional_offsets_whose_add_record_was_lost_are_dropped(
        tmp_path, nursery) -> None:
    props = {"offsets.topic.num.partitions": "3"}
    broker = make_broker(tmp_path, **props)
    nursery.start_soon(broker.flusher.run)
    tm, groups = broker.transactions, broker.groups

    def offsets(b: Broker) -> dict[int, int]:
        return {f.partition: f.offset for f in b.groups.fetch_offsets("g", [("t", [0, 1])], NOW)}

    committed = groups.commit_offsets("g", -1, "", [OffsetToCommit("t", 0, 5, None)], NOW)
    await run(committed)
    init = await run(tm.init_producer_id("tx", TIMEOUT, None, NOW))
    pid, epoch = init.producer_id, init.producer_epoch
    await synced(broker, txn_log(broker))
    cut = txn_log(broker).segments[-1].size
    group_tp = broker.cross.offsets_partition("g")
    assert tm.add_partitions("tx", pid, epoch, [group_tp], NOW) == ErrorCode.NONE  # lost
    stored = await run(groups.txn_commit_offsets(
        "g", TxnProducer("tx", pid, epoch), [OffsetToCommit("t", 0, 50, None),
                                             OffsetToCommit("t", 1, 60, None)], NOW))
    assert stored == [ErrorCode.NONE] * 2
    assert groups.coordinator.offsets.pending("g")
    power_cut(broker, txn_log(broker), cut, tmp_path)

    again = make_broker(tmp_path, **props)
    nursery.start_soon(again.flusher.run)
    assert again.transactions.recovery.hanging == 1
    assert again.groups.coordinator.offsets.pending("g") == {}  # dropped by the ABORT marker
    assert offsets(again) == {0: 5, 1: -1}  # the group's committed offsets unchanged
    p = again.partition(CONSUMER_OFFSETS_TOPIC, group_tp[1])
    assert settled(p)
    assert again.transactions.coordinator.get("tx").producer_epoch == epoch + 1  # fenced
    # A new transaction of the same id commits its offsets.
    init = await run(again.transactions.init_producer_id("tx", TIMEOUT, None, NOW))
    pid, epoch = init.producer_id, init.producer_epoch
    assert await run(again.transactions.add_partitions("tx", pid, epoch, [group_tp], NOW)) == \
        ErrorCode.NONE
    assert await run(again.groups.txn_commit_offsets(
        "g", TxnProducer("tx", pid, epoch), [OffsetToCommit("t", 1, 70, None)], NOW)) == \
        [ErrorCode.NONE]
    assert await run(again.transactions.end_txn("tx", pid, epoch, True, NOW)) == ErrorCode.NONE
    assert offsets(again) == {0: 5, 1: 70}
    again.close()


async def test_after_a_kill_9_on_the_same_boot_nothing_is_aborted(tmp_path, nursery) -> None:
    """The page cache kept every record: the scan does not run, and would find nothing to
    abort if it did (the coordinator runs every open transaction)."""
    broker = make_broker(tmp_path)
    nursery.start_soon(broker.flusher.run)
    pid, epoch = await begin(broker)
    await produce(broker, "tx", pid, epoch, 0, 0)
    await produce(broker, "tx", pid, epoch, 1, 0)
    crash(broker)

    again = make_broker(tmp_path)
    nursery.start_soon(again.flusher.run)
    assert (again.transactions.recovery.aborted, again.transactions.recovery.hanging) == (0, 0)
    assert again.transactions.abort_hanging(NOW) == 0
    assert again.transactions.coordinator.get("tx").state is TxnState.ONGOING
    assert await run(again.transactions.end_txn("tx", pid, epoch, True, NOW)) == ErrorCode.NONE
    for index in (0, 1):
        assert markers(again, index) == [(2, epoch, ControlType.COMMIT)]
        assert settled(again.partition("t", index))
    again.close()
    await trio.sleep(0)
