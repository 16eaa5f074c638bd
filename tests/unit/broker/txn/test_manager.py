"""The coordinator's trio side on a real Broker (data dir on disk, no sockets): EndTxn with its
markers, the KIP-890 produce check, the periodic task with a driven clock, and recovery after a
crash at each point of EndTxn (the test-only crash hook, raising instead of exiting)."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from broker.app import build_broker
from broker.clock import ManualClock
from broker.config import build_config
from broker.handlers.context import Broker
from broker.log.topics import TRANSACTION_STATE_TOPIC as TOPIC
from broker.reply import AnswerFirst, Deferred
from broker.storage import flusher
from broker.txn.manager import CrashHook, InitResult
from broker.txn.state import TxnState
from protocol.errors import ErrorCode, KafkaError
from protocol.records import (
    ControlType,
    decode_batches_untrusted,
    encode_batch,
    parse_control_record,
)

NOW = 1_700_000_000_000
TIMEOUT = 10_000


class Crashed(BaseException):
    """The crash hook's exit, as an exception the test catches."""


def crash_at(point: str) -> CrashHook:
    def hook(reached: str) -> None:
        if reached == point:
            raise Crashed(137)

    return hook


def make_broker(tmp_path, crash_hook: CrashHook | None = None, **props) -> Broker:
    properties = {"transaction.state.log.num.partitions": "3", **props}
    # The clock stays at NOW: the time of the records the coordinator writes.
    broker = build_broker(build_config(properties, data_dir=tmp_path / "data"),
                          clock=ManualClock(NOW), crash_hook=crash_hook)
    if "t" not in broker.logs.topics():
        broker.logs.create_topic("t", 2, None, NOW)
    return broker


def crash(broker: Broker) -> None:
    """kill -9: no flush, no snapshot, no clean-shutdown marker."""
    for p in broker.logs.all_partitions():
        p.txn_index.close(sync=False)
        for seg in p.segments:
            seg.close()


async def run(result):
    return await result.wait() if isinstance(result, Deferred) else result


async def begin(broker: Broker, tid: str = "tx", partitions=(("t", 0), ("t", 1))) -> tuple[int, int]:
    init = await run(broker.transactions.init_producer_id(tid, TIMEOUT, None, NOW))
    assert isinstance(init, InitResult) and init.error_code == ErrorCode.NONE
    code = await run(broker.transactions.add_partitions(
        tid, init.producer_id, init.producer_epoch, partitions, NOW))
    assert code == ErrorCode.NONE
    return init.producer_id, init.producer_epoch


async def produce(broker: Broker, tid, pid: int, epoch: int, index: int, seq: int, n: int = 2):
    records = bytearray(encode_batch(
        [(None, b"v%d" % (seq + i), (), NOW) for i in range(n)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True))
    partition = broker.partition("t", index)
    broker.transactions.verify_produce(partition, records, tid)
    _, flushed = broker.storage.append(partition, records, NOW, transactional=True)
    if flushed is not None:
        await flushed.wait()


def markers(broker: Broker, index: int) -> list[tuple[int, int, ControlType]]:
    p = broker.partition("t", index)
    out = []
    offset = 0
    while offset < p.log_end_offset:
        for header, recs in decode_batches_untrusted(p.read(offset, 1 << 20, p.log_end_offset)):
            if header.is_control:
                out.append((header.base_offset, header.producer_epoch,
                            parse_control_record(recs[0])[0]))
            offset = header.last_offset + 1
    return out


@pytest.fixture
async def broker(tmp_path, nursery):
    b = make_broker(tmp_path)
    nursery.start_soon(b.flusher.run)
    yield b


async def test_end_txn_writes_markers_before_answering(broker: Broker) -> None:
    pid, epoch = await begin(broker)
    await produce(broker, "tx", pid, epoch, 0, 0)
    await produce(broker, "tx", pid, epoch, 1, 0)
    assert broker.partition("t", 0).last_stable_offset == 0
    code = await run(broker.transactions.end_txn("tx", pid, epoch, True, NOW))
    assert code == ErrorCode.NONE
    for index in (0, 1):
        p = broker.partition("t", index)
        assert markers(broker, index) == [(2, 0, ControlType.COMMIT)]
        assert p.last_stable_offset == p.high_watermark == 3  # durable before the answer
    md = broker.transactions.coordinator.get("tx")
    assert (md.state, md.producer_epoch) == (TxnState.COMPLETE_COMMIT, epoch)
    # A retry answers NONE and writes nothing; the other outcome is a mismatch.
    assert await run(broker.transactions.end_txn("tx", pid, epoch, True, NOW)) == ErrorCode.NONE
    assert await run(broker.transactions.end_txn("tx", pid, epoch, False, NOW)) == \
        ErrorCode.INVALID_TXN_STATE
    assert markers(broker, 0) == [(2, 0, ControlType.COMMIT)]


async def test_end_txn_completes_inline_unless_a_round_is_under_way(broker: Broker, nursery) -> None:
    """With nothing else waiting for an fsync (one producer) EndTxn syncs its markers inline and
    answers at once, complete; with a group-commit round under way it joins the round and the
    manager's own task completes the transaction before the answer."""
    pid, epoch = await begin(broker)
    await produce(broker, "tx", pid, epoch, 0, 0)
    result = broker.transactions.end_txn("tx", pid, epoch, True, NOW)
    assert result == ErrorCode.NONE  # not a Deferred: nothing left to wait for
    p = broker.partition("t", 0)
    assert markers(broker, 0) == [(2, 0, ControlType.COMMIT)]
    assert p.last_stable_offset == p.high_watermark == 3
    assert broker.transactions.coordinator.get("tx").state is TxnState.COMPLETE_COMMIT

    await run(broker.transactions.add_partitions("tx", pid, epoch, [("t", 0), ("t", 1)], NOW))
    await produce(broker, "tx", pid, epoch, 1, 0)
    other = broker.partition("t", 1)
    other.append_untrusted(bytearray(encode_batch([(None, b"plain", (), NOW)])), NOW)
    broker.flusher.mark(other)  # someone else's write: a round is about to start
    assert broker.flusher.busy
    result = broker.transactions.end_txn("tx", pid, epoch, False, NOW)
    assert isinstance(result, Deferred)
    assert await result.wait() == ErrorCode.NONE
    # t-1 was in the first transaction too (its COMMIT marker at 0): data 1-2, plain 3.
    assert markers(broker, 1) == [(0, 0, ControlType.COMMIT), (4, 0, ControlType.ABORT)]
    assert other.last_stable_offset == other.high_watermark == 5
    assert broker.transactions.coordinator.get("tx").state is TxnState.COMPLETE_ABORT


async def test_a_lone_end_txn_leaves_the_group_commit_task_asleep(broker: Broker, nursery) -> None:
    """EndTxn's inline markers are synced by the request itself: the group-commit task is not
    woken for a round that would find nothing (two event-loop passes per transaction)."""
    tm = broker.transactions
    pid, epoch = await begin(broker, partitions=(("t", 0),))
    await produce(broker, "tx", pid, epoch, 0, 0)
    await trio.testing.wait_all_tasks_blocked()
    steps = _TaskSteps("broker.storage.flusher.FlushScheduler.run")
    trio.lowlevel.add_instrument(steps)
    try:
        ended = tm.end_txn("tx", pid, epoch, True, NOW, answer_first=True)
        assert isinstance(ended, AnswerFirst)
        ended.finish()
        await trio.testing.wait_all_tasks_blocked()
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert tm.coordinator.get("tx").state is TxnState.COMPLETE_COMMIT
    data = broker.partition("t", 0)
    assert data.last_stable_offset == data.high_watermark == data.log_end_offset == 3
    assert steps.count == 0


async def test_markers_a_round_took_before_finish_complete_after_that_round(
    broker: Broker, nursery, monkeypatch
) -> None:
    """Between EndTxn's answer and ``finish`` (a send that had to wait) another request can
    start a group-commit round that takes the markers into its worker thread. ``finish`` then
    finds nothing to sync: the transaction completes once that round is done, not before."""
    tm = broker.transactions
    release = threading.Event()
    real_sync_all = flusher._sync_all

    def held_sync_all(tickets):
        if threading.current_thread() is not threading.main_thread():  # the round's thread
            release.wait(10)
        real_sync_all(tickets)

    monkeypatch.setattr(flusher, "_sync_all", held_sync_all)
    pid, epoch = await begin(broker, partitions=(("t", 0),))
    await produce(broker, "tx", pid, epoch, 0, 0)
    ended = tm.end_txn("tx", pid, epoch, True, NOW, answer_first=True)
    assert isinstance(ended, AnswerFirst)
    # Someone else's large write to the same partition starts a round (worker thread), which
    # takes the markers too.
    other = broker.partition("t", 0)
    other.append_untrusted(bytearray(encode_batch([(None, b"x" * 20_000, (), NOW)])), NOW)
    broker.flusher.mark(other)
    await trio.testing.wait_all_tasks_blocked()
    ended.finish()
    data = broker.partition("t", 0)
    assert tm.coordinator.get("tx").state is TxnState.PREPARE_COMMIT  # markers not durable yet
    assert data.last_stable_offset == 0
    release.set()
    with trio.fail_after(10):
        while tm.coordinator.get("tx").state is not TxnState.COMPLETE_COMMIT:
            await trio.sleep(0.01)
    assert data.last_stable_offset == data.high_watermark == 4


async def test_every_fsync_of_a_transaction_is_the_flushers_and_counted(broker: Broker) -> None:
    """The transaction log's records go through ``Storage`` like everything else, so the fsync
    metrics and the shutdown statistics count them. Three fdatasyncs per durable transaction
    with one data partition: the PrepareCommit record with the transaction's data (one round,
    two files) and the markers. AddPartitionsToTxn's record and the batch are answered once
    appended (the Prepare round makes them durable), the Complete record rides on the next
    commit of its partition."""
    tm = broker.transactions
    init = await run(tm.init_producer_id("tx", TIMEOUT, None, NOW))
    pid, epoch = init.producer_id, init.producer_epoch
    flusher = broker.flusher
    txn_log = broker.partition(TOPIC, tm.log.partition_of("tx"))
    for n in range(3):
        before = flusher.partition_syncs
        assert tm.add_partitions("tx", pid, epoch, [("t", 0)], NOW) == ErrorCode.NONE  # now
        assert flusher.partition_syncs == before  # appended, not synced
        assert txn_log.high_watermark < txn_log.log_end_offset
        await produce(broker, "tx", pid, epoch, 0, 2 * n)
        assert flusher.partition_syncs == before  # answered once appended: no fsync of its own
        assert await run(tm.end_txn("tx", pid, epoch, True, NOW)) == ErrorCode.NONE
        assert flusher.partition_syncs == before + 3
        data = broker.partition("t", 0)
        assert data.last_stable_offset == data.high_watermark == data.log_end_offset == 3 * (n + 1)
        assert tm.coordinator.get("tx").state is TxnState.COMPLETE_COMMIT


class _TaskSteps(trio.abc.Instrument):
    """Counts the steps of the tasks called ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0

    def before_task_step(self, task) -> None:
        if task.name == self.name:
            self.count += 1


async def test_add_partitions_answers_at_once_and_end_txn_answers_first(broker: Broker) -> None:
    """AddPartitionsToTxn answers once its record is appended (no fsync of its own: the
    PrepareCommit round syncs it); EndTxn answers once its Prepare record is durable, before its
    markers (the connection runs ``finish`` right after sending): nothing may depend on the
    outcome before it is durable."""
    tm = broker.transactions
    init = await run(tm.init_producer_id("tx", TIMEOUT, None, NOW))
    pid, epoch = init.producer_id, init.producer_epoch
    txn_log = broker.partition(TOPIC, tm.log.partition_of("tx"))

    assert tm.add_partitions("tx", pid, epoch, [("t", 0)], NOW) == ErrorCode.NONE
    assert txn_log.high_watermark < txn_log.log_end_offset  # answered, not durable yet
    await produce(broker, "tx", pid, epoch, 0, 0)  # the batch is accepted at once
    assert tm.add_partitions("tx", pid, epoch, [("t", 0)], NOW) == ErrorCode.NONE  # no record
    records = txn_log.log_end_offset

    ended = tm.end_txn("tx", pid, epoch, True, NOW, answer_first=True)
    assert isinstance(ended, AnswerFirst) and ended.value == ErrorCode.NONE
    # The Prepare round made the add record durable with the Prepare record and the batch.
    assert txn_log.high_watermark == records + 1
    data = broker.partition("t", 0)
    # Answered once the PrepareCommit record is durable; the markers follow the answer.
    assert txn_log.high_watermark == txn_log.log_end_offset
    assert tm.coordinator.get("tx").state is TxnState.PREPARE_COMMIT
    assert markers(broker, 0) == []
    assert data.last_stable_offset == 0  # nothing visible yet
    # A request that got in before the finish (the answer's send had to wait): retriable.
    assert tm.add_partitions("tx", pid, epoch, [("t", 1)], NOW) == ErrorCode.CONCURRENT_TRANSACTIONS
    ended.finish()
    assert markers(broker, 0) == [(2, 0, ControlType.COMMIT)]
    assert data.last_stable_offset == data.high_watermark == 3
    assert tm.coordinator.get("tx").state is TxnState.COMPLETE_COMMIT
    assert tm.add_partitions("tx", pid, epoch, [("t", 1)], NOW) == ErrorCode.NONE
    assert tm.coordinator.get("tx").partitions == {("t", 1)}


async def test_an_add_record_that_cannot_be_appended_is_answered_with_the_error(
    broker: Broker, monkeypatch
) -> None:
    tm = broker.transactions
    init = await run(tm.init_producer_id("tx", TIMEOUT, None, NOW))
    pid, epoch = init.producer_id, init.producer_epoch

    def failing(transition, now_ms):
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "No space left on device")

    monkeypatch.setattr(tm.log, "append", failing)
    assert tm.add_partitions("tx", pid, epoch, [("t", 0)], NOW) == ErrorCode.KAFKA_STORAGE_ERROR
    md = tm.coordinator.get("tx")
    assert (md.state, md.pending) == (TxnState.EMPTY, None)  # nothing applied
    with pytest.raises(KafkaError) as info:
        await produce(broker, "tx", pid, epoch, 0, 0)
    assert info.value.code == ErrorCode.INVALID_TXN_STATE
    monkeypatch.undo()
    assert tm.add_partitions("tx", pid, epoch, [("t", 0)], NOW) == ErrorCode.NONE


async def test_whatever_syncs_a_batch_syncs_the_record_that_admitted_it(broker: Broker) -> None:
    """Another producer's acks=all write syncs the partition holding the transaction's
    unsynced batch: the transaction's __transaction_state partition (its add record, and the
    previous transaction's Complete record) is synced in the same round, so a batch is never
    durable while the record that admitted it is not."""
    tm = broker.transactions
    pid, epoch = await begin(broker, partitions=[("t", 0)])
    await produce(broker, "tx", pid, epoch, 0, 0)
    assert await run(tm.end_txn("tx", pid, epoch, True, NOW)) == ErrorCode.NONE
    txn_log = broker.partition(TOPIC, tm.log.partition_of("tx"))
    assert txn_log.high_watermark < txn_log.log_end_offset  # the Complete record
    assert tm.add_partitions("tx", pid, epoch, [("t", 0)], NOW) == ErrorCode.NONE
    await produce(broker, "tx", pid, epoch, 0, 2)
    data = broker.partition("t", 0)
    assert data.high_watermark < data.log_end_offset
    # Someone else's acks=all write to the same partition.
    _, commit = broker.storage.append(data, bytearray(encode_batch([(None, b"plain", (), NOW)])),
                                      NOW)
    if commit is not None:
        assert await commit.wait()
    assert data.high_watermark == data.log_end_offset
    assert txn_log.high_watermark == txn_log.log_end_offset
    before = broker.flusher.partition_syncs
    assert await run(tm.end_txn("tx", pid, epoch, True, NOW)) == ErrorCode.NONE
    assert broker.flusher.partition_syncs == before + 2  # the Prepare record; the markers


async def test_produce_check_needs_the_partition_in_the_transaction(broker: Broker) -> None:
    pid, epoch = await begin(broker, partitions=[("t", 0)])
    with pytest.raises(KafkaError) as info:
        await produce(broker, "tx", pid, epoch, 1, 0)
    assert info.value.code == ErrorCode.INVALID_TXN_STATE
    with pytest.raises(KafkaError) as info:
        await produce(broker, None, pid, epoch, 0, 0)  # a transactional batch needs the id
    assert info.value.code == ErrorCode.INVALID_TXN_STATE
    transactions = broker.transactions
    assert transactions.needs_verification(transactions.is_transactional(b""), "tx")
    plain = encode_batch([(None, b"x", (), NOW)])
    assert not transactions.needs_verification(transactions.is_transactional(plain), None)


async def test_new_instance_aborts_the_ongoing_transaction_and_fences_the_old(broker: Broker) -> None:
    pid, epoch = await begin(broker)
    await produce(broker, "tx", pid, epoch, 0, 0)
    init = await run(broker.transactions.init_producer_id("tx", TIMEOUT, None, NOW))
    assert (init.error_code, init.producer_id, init.producer_epoch) == (ErrorCode.NONE, pid, 2)
    # The abort used the fenced epoch 1; the new instance has 2.
    assert markers(broker, 0) == [(2, 1, ControlType.ABORT)]
    assert markers(broker, 1) == [(0, 1, ControlType.ABORT)]
    assert broker.partition("t", 0).aborted_transactions(0, 3) == [(pid, 0)]
    with pytest.raises(KafkaError) as info:
        await produce(broker, "tx", pid, epoch, 0, 2)
    assert info.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert await run(broker.transactions.end_txn("tx", pid, epoch, True, NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH


async def test_housekeeping_aborts_timed_out_transactions_and_expires_ids(tmp_path, nursery) -> None:
    broker = make_broker(tmp_path, **{"transactional.id.expiration.ms": "100000"})
    nursery.start_soon(broker.flusher.run)
    pid, epoch = await begin(broker)
    await produce(broker, "tx", pid, epoch, 0, 0)
    await broker.transactions.housekeeping(NOW + TIMEOUT)  # not older than its timeout yet
    assert broker.transactions.coordinator.get("tx").state is TxnState.ONGOING
    await broker.transactions.housekeeping(NOW + TIMEOUT + 1)
    md = broker.transactions.coordinator.get("tx")
    assert (md.state, md.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
    p = broker.partition("t", 0)
    assert p.last_stable_offset == p.high_watermark == 3
    assert markers(broker, 0) == [(2, epoch + 1, ControlType.ABORT)]
    # The producer that went quiet is fenced.
    with pytest.raises(KafkaError) as info:
        await produce(broker, "tx", pid, epoch, 0, 2)
    assert info.value.code == ErrorCode.INVALID_PRODUCER_EPOCH

    # Idle ids expire (tombstone) and stay expired after a restart.
    await run(broker.transactions.init_producer_id("idle", TIMEOUT, None, NOW + 50_000))
    await broker.transactions.housekeeping(NOW + 100_000)
    assert broker.transactions.coordinator.get("tx") is None  # last update at NOW
    assert broker.transactions.coordinator.get("idle") is not None
    await broker.transactions.housekeeping(NOW + 150_000)
    assert broker.transactions.coordinator.get("idle") is None
    broker.close()
    again = make_broker(tmp_path)
    assert len(again.transactions.coordinator) == 0
    again.close()


@pytest.mark.parametrize(("point", "commit"), [
    ("after_prepare_commit", True),
    ("after_prepare_abort", False),
    ("after_markers", True),
])
async def test_recovery_completes_a_transaction_interrupted_by_a_crash(
    tmp_path, nursery, point: str, commit: bool
) -> None:
    broker = make_broker(tmp_path, crash_hook=crash_at(point))
    nursery.start_soon(broker.flusher.run)
    pid, epoch = await begin(broker)
    await produce(broker, "tx", pid, epoch, 0, 0)
    await produce(broker, "tx", pid, epoch, 1, 0, n=3)
    with pytest.raises(Crashed):
        await run(broker.transactions.end_txn("tx", pid, epoch, commit, NOW))
    written = {i: markers(broker, i) for i in (0, 1)}
    assert all(written.values()) == (point == "after_markers")
    crash(broker)

    again = make_broker(tmp_path)
    assert again.transactions.recovery.completed == 1
    md = again.transactions.coordinator.get("tx")
    assert md.state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    for index, first_marker in ((0, 2), (1, 3)):
        p = again.partition("t", index)
        assert p.producers.open_transactions() == {}
        assert p.last_stable_offset == p.high_watermark == p.log_end_offset
        found = markers(again, index)
        assert found[0] == (first_marker, epoch, kind)
        assert all(m[2] is kind for m in found)  # a rewritten marker repeats the same outcome
        assert p.aborted_transactions(0, p.log_end_offset) == ([] if commit else [(pid, 0)])
    assert again.logs.partition(TOPIC, again.transactions.log.partition_of("tx")).high_watermark
    again.close()
