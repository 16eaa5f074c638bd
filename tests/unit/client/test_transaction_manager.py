"""The producer's transaction state table, and the errors each wrong call raises."""

from __future__ import annotations

import itertools

import pytest

from client.errors import (
    IllegalStateError,
    InvalidTxnStateError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
    TransactionAbortableError,
)
from client.structs import TopicPartition
from client.transaction_manager import (
    MSG_NOT_TRANSACTIONAL,
    VALID_PREVIOUS,
    TransactionManager,
    TxnState,
)

S = TxnState
TP = TopicPartition("t", 0)

# The allowed transitions, written out as (from, to) pairs: the table must say exactly this.
ALLOWED = {
    (S.UNINITIALIZED, S.INITIALIZING),
    (S.ABORTING_TRANSACTION, S.INITIALIZING),
    (S.COMMITTING_TRANSACTION, S.INITIALIZING),  # version 1: the bump after a timed-out EndTxn
    (S.INITIALIZING, S.READY),
    (S.COMMITTING_TRANSACTION, S.READY),
    (S.ABORTING_TRANSACTION, S.READY),
    (S.READY, S.IN_TRANSACTION),
    (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION),
    (S.IN_TRANSACTION, S.ABORTING_TRANSACTION),
    (S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION),
    (S.IN_TRANSACTION, S.ABORTABLE_ERROR),
    (S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR),
    (S.ABORTING_TRANSACTION, S.ABORTABLE_ERROR),
    (S.ABORTABLE_ERROR, S.ABORTABLE_ERROR),
    (S.IN_TRANSACTION, S.HANDED_OFF),
} | {(s, S.FATAL_ERROR) for s in S}


def tm_in(state: TxnState) -> TransactionManager:
    tm = TransactionManager("tx")
    tm.state = state
    return tm


@pytest.mark.parametrize(("source", "target"), list(itertools.product(S, S)))
def test_transition_table(source, target):
    tm = tm_in(source)
    allowed = (source, target) in ALLOWED
    assert (source in VALID_PREVIOUS[target]) == allowed
    if allowed:
        tm.transition(target, RuntimeError("x"))
        assert tm.state is target
    else:
        with pytest.raises(IllegalStateError):
            tm.transition(target)
        assert tm.state is source


def test_happy_path_commit_and_abort():
    tm = TransactionManager("tx")
    tm.begin_init()
    tm.init_done(5, 0)
    assert (tm.state, tm.producer_id, tm.producer_epoch) == (S.READY, 5, 0)
    tm.begin_transaction()
    assert tm.add_partition(TP) is True
    assert tm.add_partition(TP) is False  # already pending
    assert not tm.is_partition_added(TP)
    tm.partitions_added([TP])
    assert tm.is_partition_added(TP) and tm.add_partition(TP) is False
    assert tm.add_group("g") is True
    tm.group_added("g")
    assert tm.add_group("g") is False  # AddOffsetsToTxn once per group per transaction
    assert not tm.is_empty_transaction
    tm.begin_commit()
    tm.transaction_completed()
    assert tm.state is S.READY and tm.is_empty_transaction
    tm.begin_transaction()
    tm.begin_abort()
    tm.transaction_completed()
    assert tm.state is S.READY


def test_transactional_methods_need_a_transactional_id():
    tm = TransactionManager(None)
    for call in (tm.begin_init, tm.begin_transaction, tm.begin_commit, tm.begin_abort, tm.handoff):
        with pytest.raises(IllegalStateError) as info:
            call()
        assert str(info.value) == MSG_NOT_TRANSACTIONAL
    tm.check_send()  # an idempotent producer may always send


def test_send_outside_a_transaction_is_refused():
    tm = TransactionManager("tx")
    with pytest.raises(IllegalStateError, match="before completing a call to init_transactions"):
        tm.check_send()
    tm.begin_init()
    tm.init_done(1, 0)
    with pytest.raises(IllegalStateError, match="Cannot call send in state READY"):
        tm.check_send()
    tm.begin_transaction()
    tm.check_send()


def test_begin_twice_is_an_invalid_transition():
    tm = tm_in(S.IN_TRANSACTION)
    with pytest.raises(
        IllegalStateError, match="from state IN_TRANSACTION to state IN_TRANSACTION"
    ):
        tm.begin_transaction()


def test_abortable_error_blocks_commit_and_send_but_not_abort():
    tm = tm_in(S.IN_TRANSACTION)
    cause = TopicAuthorizationFailedError()
    tm.classify(cause)
    assert tm.state is S.ABORTABLE_ERROR and tm.last_error is cause
    with pytest.raises(TransactionAbortableError) as info:
        tm.begin_commit()
    assert info.value.__cause__ is cause
    with pytest.raises(TransactionAbortableError):
        tm.check_send()
    tm.begin_abort()
    tm.transaction_completed()
    assert tm.state is S.READY


def test_fatal_error_is_terminal():
    tm = tm_in(S.IN_TRANSACTION)
    fenced = ProducerFencedError()
    tm.classify(fenced)
    assert tm.state is S.FATAL_ERROR
    for call in (tm.begin_transaction, tm.begin_commit, tm.begin_abort, tm.check_send):
        with pytest.raises(IllegalStateError) as info:
            call()
        assert info.value.__cause__ is fenced
    assert "Producer attempted an operation with an old epoch" in str(fenced)


def test_invalid_txn_state_from_coordinator_is_fatal():
    tm = tm_in(S.COMMITTING_TRANSACTION)
    tm.classify(InvalidTxnStateError())
    assert tm.state is S.FATAL_ERROR


def test_commit_and_abort_may_be_resumed_after_a_timeout():
    tm = tm_in(S.COMMITTING_TRANSACTION)
    tm.begin_commit()
    assert tm.state is S.COMMITTING_TRANSACTION
    tm = tm_in(S.ABORTING_TRANSACTION)
    tm.begin_abort()
    assert tm.state is S.ABORTING_TRANSACTION


def test_epoch_bump_after_abort():
    tm = tm_in(S.ABORTABLE_ERROR)
    tm.producer_id, tm.producer_epoch, tm.needs_epoch_bump = 3, 4, True
    tm.begin_abort()
    tm.begin_epoch_bump()
    tm.init_done(3, 5)
    assert (tm.state, tm.producer_epoch, tm.needs_epoch_bump) == (S.READY, 5, False)


def test_handoff_only_from_a_transaction():
    tm = tm_in(S.READY)
    with pytest.raises(IllegalStateError):
        tm.handoff()
    tm = tm_in(S.IN_TRANSACTION)
    tm.handoff()
    with pytest.raises(IllegalStateError, match="Cannot call send in state HANDED_OFF"):
        tm.check_send()


def test_idempotent_producer_records_errors_without_states():
    tm = TransactionManager(None)
    tm.set_idempotent_producer(9, 0)
    err = TopicAuthorizationFailedError()
    tm.classify(err)
    assert tm.state is S.UNINITIALIZED and tm.last_error is err
    tm.classify(ProducerFencedError())
    with pytest.raises(IllegalStateError):
        tm.check_send()
