"""Transaction version 2 (KIP-890 part 2) in the pure coordinator: every EndTxn v5 bumps the epoch
(rotating the producer id when it is exhausted), a retry of that EndTxn is recognised and answered
with the new pair, and anything the old epoch still has in flight (a late EndTxn, a late Produce) is
fenced instead of acting on the next transaction. Produce v12 adds partitions by itself."""

from __future__ import annotations

from broker.txn.coordinator import EPOCH_EXHAUSTED, INT16_MAX, TransactionCoordinator
from broker.txn.state import TxnState
from protocol.errors import ErrorCode
from tests.unit.broker.txn.test_coordinator import NOW, TIMEOUT, TP, code, done, make

TP2 = ("orders", 1)


def start(c: TransactionCoordinator, tid: str = "tx") -> tuple[int, int]:
    t = done(c, c.prepare_init_producer_id(tid, TIMEOUT, None, NOW))
    return t.producer_id, t.producer_epoch


def produce(c, pid, epoch, tp=TP, tid="tx") -> None:
    """The Produce v12 path: the first batch for a partition adds it."""
    t = c.prepare_produce(tid, pid, epoch, tp, NOW)
    if t is not None:
        done(c, t)


def end(c, pid, epoch, commit=True, tid="tx") -> tuple[int, int] | None:
    """EndTxn v5 through Prepare and Complete; the pair the client continues with (None: the
    request was a retry answered without a new transition)."""
    t = c.prepare_end_txn(tid, pid, epoch, commit, NOW, bump_epoch=True)
    if t is None:
        return None
    done(c, t)
    done(c, c.prepare_complete(tid, NOW))
    return c.producer_after_end(tid)


def test_every_end_bumps_the_epoch_and_the_prepare_record_carries_it() -> None:
    c = make()
    pid, epoch = start(c)
    produce(c, pid, epoch)
    produce(c, pid, epoch, TP2)
    assert c.get("tx").partitions == {TP, TP2}
    prepare = c.prepare_end_txn("tx", pid, epoch, True, NOW, bump_epoch=True)
    assert (prepare.state, prepare.producer_epoch, prepare.last_producer_epoch,
            prepare.txn_version) == (TxnState.PREPARE_COMMIT, epoch + 1, epoch, 2)
    done(c, prepare)  # the markers are written with epoch + 1
    done(c, c.prepare_complete("tx", NOW))
    assert c.producer_after_end("tx") == (pid, epoch + 1)
    produce(c, pid, epoch + 1)
    assert end(c, pid, epoch + 1, commit=False) == (pid, epoch + 2)


def test_a_retried_end_gets_the_new_pair_and_the_other_outcome_is_refused() -> None:
    c = make()
    pid, epoch = start(c)
    produce(c, pid, epoch)
    assert end(c, pid, epoch) == (pid, epoch + 1)
    # The answer was lost: the client sends the same EndTxn again.
    assert c.prepare_end_txn("tx", pid, epoch, True, NOW, bump_epoch=True) is None
    assert c.producer_after_end("tx") == (pid, epoch + 1)
    assert code(lambda: c.prepare_end_txn("tx", pid, epoch, False, NOW, bump_epoch=True)) == \
        ErrorCode.INVALID_TXN_STATE
    # While the Prepare is being completed a retry waits (CONCURRENT_TRANSACTIONS).
    produce(c, pid, epoch + 1)
    done(c, c.prepare_end_txn("tx", pid, epoch + 1, False, NOW, bump_epoch=True))
    assert code(lambda: c.prepare_end_txn("tx", pid, epoch + 1, False, NOW,
                                          bump_epoch=True)) == ErrorCode.CONCURRENT_TRANSACTIONS


def test_a_late_end_txn_of_the_previous_transaction_never_ends_the_next_one() -> None:
    """KAFKA-17754 / issue 12: EndTxn(commit) of transaction 1 is held on an old connection; the
    client retried it, began transaction 2 and wrote to it. The held request is fenced."""
    c = make()
    pid, epoch = start(c)
    produce(c, pid, epoch)
    assert end(c, pid, epoch) == (pid, epoch + 1)  # the retry that got through
    produce(c, pid, epoch + 1)  # transaction 2
    assert c.get("tx").state is TxnState.ONGOING
    for commit in (True, False):
        assert code(lambda commit=commit: c.prepare_end_txn(
            "tx", pid, epoch, commit, NOW, bump_epoch=True)) == ErrorCode.INVALID_PRODUCER_EPOCH
    # A late batch of transaction 1 is fenced as well.
    assert code(lambda: c.prepare_produce("tx", pid, epoch, TP2, NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    md = c.get("tx")
    assert (md.state, md.producer_epoch, md.partitions) == (TxnState.ONGOING, epoch + 1, {TP})
    assert end(c, pid, epoch + 1, commit=False) == (pid, epoch + 2)  # the application's abort


def test_an_epoch_never_handed_out_is_refused() -> None:
    c = make()
    pid, epoch = start(c)
    assert code(lambda: c.prepare_produce("tx", pid, epoch + 1, TP, NOW)) == \
        ErrorCode.INVALID_TXN_STATE
    assert code(lambda: c.prepare_produce("tx", pid + 1, epoch, TP, NOW)) == \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    # Ending when the current epoch has no transaction (after InitProducerId: Kafka's answer).
    assert code(lambda: c.prepare_end_txn("tx", pid, epoch, True, NOW, bump_epoch=True)) == \
        ErrorCode.INVALID_TXN_STATE


def test_a_commit_ahead_of_its_first_batch_after_a_commit_is_retried_not_refused() -> None:
    """Kafka 4.4's Java client can send EndTxn(commit) before the transaction's only batch (its
    Sender reads "no unsent batch", then takes the EndTxn the application queued meanwhile).
    Right after a version-2 commit or abort Kafka answers it CONCURRENT_TRANSACTIONS as a rule
    (its markers are still being written): so does this coordinator, for up to the transaction
    timeout from the first attempt, so that the client retries the EndTxn after the batch; the
    batch adds the partition and the retry commits."""
    c = make()
    pid, epoch = start(c)
    for commit in (True, False):  # after a commit (the bench's case) and after an abort
        produce(c, pid, epoch)
        assert end(c, pid, epoch, commit) == (pid, epoch + 1)
        epoch += 1
        for late in (0, TIMEOUT // 2, TIMEOUT):  # retries within the timeout of the first
            assert code(lambda late=late, epoch=epoch: c.prepare_end_txn(
                "tx", pid, epoch, True, NOW + late, bump_epoch=True)) == \
                ErrorCode.CONCURRENT_TRANSACTIONS
        assert c.get("tx").pending is None
        produce(c, pid, epoch)  # the batch arrives: it starts the transaction
        assert c.get("tx").state is TxnState.ONGOING
        assert end(c, pid, epoch) == (pid, epoch + 1)
        epoch += 1
    # The clock starts again for each transaction, from its own first early commit; a commit
    # whose batch never comes gets Kafka's answer after the transaction timeout.
    assert code(lambda: c.prepare_end_txn("tx", pid, epoch, True, NOW + 3 * TIMEOUT,
                                          bump_epoch=True)) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert code(lambda: c.prepare_end_txn("tx", pid, epoch, True, NOW + 4 * TIMEOUT + 1,
                                          bump_epoch=True)) == ErrorCode.INVALID_TXN_STATE
    # An abort of that transaction is allowed as before (nothing to mark, epoch bumped).
    assert end(c, pid, epoch, commit=False) == (pid, epoch + 1)


def test_epoch_overflow_rotates_the_producer_id_and_retries_still_work() -> None:
    c = make()
    pid, _ = start(c)
    md = c.get("tx")
    md.producer_epoch = EPOCH_EXHAUSTED  # as after 32766 transactions
    produce(c, pid, EPOCH_EXHAUSTED)
    prepare = c.prepare_end_txn("tx", pid, EPOCH_EXHAUSTED, True, NOW, bump_epoch=True)
    # The markers use the last epoch; the new id waits in next_producer_id.
    assert (prepare.producer_id, prepare.producer_epoch, prepare.next_producer_id) == \
        (pid, INT16_MAX, 1001)
    done(c, prepare)
    assert c.producer_after_end("tx") == (1001, 0)
    complete = done(c, c.prepare_complete("tx", NOW))
    assert (complete.producer_id, complete.producer_epoch, complete.next_producer_id,
            complete.last_producer_id, complete.last_producer_epoch) == \
        (1001, 0, -1, pid, EPOCH_EXHAUSTED)
    # A retry with the old pair gets the new one.
    assert c.prepare_end_txn("tx", pid, EPOCH_EXHAUSTED, True, NOW, bump_epoch=True) is None
    assert c.producer_after_end("tx") == (1001, 0)
    # The old id is fenced; once the new one starts a transaction it is not known at all.
    assert code(lambda: c.prepare_produce("tx", pid, EPOCH_EXHAUSTED, TP, NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    produce(c, 1001, 0)
    assert code(lambda: c.prepare_produce("tx", pid, EPOCH_EXHAUSTED, TP, NOW)) == \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert code(lambda: c.prepare_end_txn("tx", pid, EPOCH_EXHAUSTED, True, NOW,
                                          bump_epoch=True)) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert end(c, 1001, 0) == (1001, 1)


def test_a_zombie_is_fenced_by_init_producer_id_under_version_2() -> None:
    c = make()
    pid, epoch = start(c)
    produce(c, pid, epoch)
    assert end(c, pid, epoch) == (pid, epoch + 1)
    t = done(c, c.prepare_init_producer_id("tx", TIMEOUT, None, NOW))  # a new instance
    assert t.producer_epoch == epoch + 2
    assert code(lambda: c.prepare_produce("tx", pid, epoch + 1, TP, NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    assert code(lambda: c.prepare_end_txn("tx", pid, epoch + 1, True, NOW, bump_epoch=True)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH


def test_version_1_end_txn_keeps_the_epoch() -> None:
    c = make()
    pid, epoch = start(c)
    done(c, c.prepare_add_partitions("tx", pid, epoch, [TP], NOW))
    done(c, c.prepare_end_txn("tx", pid, epoch, True, NOW))
    done(c, c.prepare_complete("tx", NOW))
    md = c.get("tx")
    assert (md.producer_epoch, md.txn_version) == (epoch, 1)
    assert c.prepare_end_txn("tx", pid, epoch, True, NOW) is None  # the version-1 retry
