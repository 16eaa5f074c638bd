"""The pure transaction coordinator: two-phase transitions, epochs and fencing, KIP-360,
EndTxn outcomes and retries, timeouts and expiry with a driven clock, the KIP-890 produce check."""

from __future__ import annotations

import itertools

import pytest

from broker.txn.coordinator import (
    EPOCH_EXHAUSTED,
    AbortFirst,
    TransactionCoordinator,
    TxnConfig,
    TxnTransition,
)
from broker.txn.state import TxnState
from protocol.errors import ErrorCode, KafkaError

NOW = 1_700_000_000_000
TIMEOUT = 60_000
TP = ("orders", 0)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


def make(**config) -> TransactionCoordinator:
    ids = itertools.count(1000)
    return TransactionCoordinator(TxnConfig(**config), lambda: next(ids))


def code(fn) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        fn()
    return info.value.code


def done(c: TransactionCoordinator, t) -> TxnTransition:
    """Persisting is the caller's business: here it always succeeds."""
    assert isinstance(t, TxnTransition)
    c.complete(t)
    return t


def init(c: TransactionCoordinator, tid: str = "tx", expected=None, now: int = NOW,
         timeout: int = TIMEOUT) -> TxnTransition:
    return done(c, c.prepare_init_producer_id(tid, timeout, expected, now))


def begin(c: TransactionCoordinator, tid: str = "tx", partitions=(TP,), now: int = NOW) -> None:
    md = c.get(tid)
    t = c.prepare_add_partitions(tid, md.producer_id, md.producer_epoch, partitions, now)
    if t is not None:
        done(c, t)


def end(c: TransactionCoordinator, commit: bool, tid: str = "tx", now: int = NOW) -> None:
    md = c.get(tid)
    done(c, c.prepare_end_txn(tid, md.producer_id, md.producer_epoch, commit, now))
    done(c, c.prepare_complete(tid, now))


# -- InitProducerId ---------------------------------------------------------------------------


def test_first_init_allocates_a_producer_id_and_later_ones_bump_the_epoch() -> None:
    c = make()
    first = init(c)
    assert (first.producer_id, first.producer_epoch, first.state) == (1000, 0, TxnState.EMPTY)
    second = init(c)
    assert (second.producer_id, second.producer_epoch) == (1000, 1)
    assert second.last_producer_epoch == -1  # no expected epoch: a new instance, not a retry
    assert c.get("tx").txn_timeout_ms == TIMEOUT


def test_a_pending_transition_answers_concurrent_transactions_until_completed_or_abandoned() -> None:
    c = make()
    t = c.prepare_init_producer_id("tx", TIMEOUT, None, NOW)
    assert c.get("tx").producer_epoch == -1  # not applied before it is persisted
    assert code(lambda: c.prepare_init_producer_id("tx", TIMEOUT, None, NOW)) == \
        ErrorCode.CONCURRENT_TRANSACTIONS
    c.abandon(t)  # the log write failed
    assert c.get("tx").pending is None and c.get("tx").producer_epoch == -1
    assert init(c).producer_epoch == 0


def test_completing_something_not_pending_is_a_bug() -> None:
    c = make()
    t = c.prepare_init_producer_id("tx", TIMEOUT, None, NOW)
    c.complete(t)
    with pytest.raises(RuntimeError):
        c.complete(t)


def test_complete_applies_every_field_of_the_transition() -> None:
    """``complete`` copies the transition field by field in declaration order: a value distinct
    per field catches a field applied to another one."""
    c = make()
    c.load("tx", TxnTransition("tx", 1, 2, 3, 4, 5, TxnState.ONGOING, frozenset({TP}), 6, 7))
    target = TxnTransition("tx", 11, 12, 13, 14, 15, TxnState.PREPARE_COMMIT,
                           frozenset({TP, ("orders", 1)}), 16, 17, 18, 2, ((TP, 19),))
    c.get("tx").pending = target
    c.complete(target)
    md = c.get("tx")
    assert md.pending is None
    assert {f: getattr(md, f) for f in TxnTransition._fields} == target._asdict()


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_timeout_outside_the_maximum_is_invalid(timeout: int) -> None:
    assert code(lambda: make().prepare_init_producer_id("tx", timeout, None, NOW)) == \
        ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_empty_transactional_id_is_an_invalid_request() -> None:
    c = make()
    assert code(lambda: c.prepare_init_producer_id("", TIMEOUT, None, NOW)) == ErrorCode.INVALID_REQUEST
    assert code(lambda: c.prepare_add_partitions("", 1, 0, [TP], NOW)) == ErrorCode.INVALID_REQUEST
    assert code(lambda: c.prepare_end_txn("", 1, 0, True, NOW)) == ErrorCode.INVALID_REQUEST


def test_kip360_bump_with_the_current_epoch_and_its_retry() -> None:
    c = make()
    init(c)
    bumped = init(c, expected=(1000, 0))
    assert (bumped.producer_epoch, bumped.last_producer_epoch) == (1, 0)
    # The answer was lost and the producer asks again with its old epoch: same answer, no bump.
    retry = init(c, expected=(1000, 0))
    assert (retry.producer_id, retry.producer_epoch) == (1000, 1)
    # An epoch that is neither current nor previous is a fenced producer (47 at v3).
    assert code(lambda: c.prepare_init_producer_id("tx", TIMEOUT, (1000, 5), NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    # Another producer id is fenced too.
    assert code(lambda: c.prepare_init_producer_id("tx", TIMEOUT, (77, 1), NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    # After a new instance initialised (no expected epoch), the old epoch is no longer a retry.
    init(c)
    assert code(lambda: c.prepare_init_producer_id("tx", TIMEOUT, (1000, 1), NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH


def test_kip360_expected_producer_on_a_fresh_id_is_accepted() -> None:
    # A producer recovering from UNKNOWN_PRODUCER_ID may meet an id the coordinator just created.
    c = make()
    t = init(c, expected=(5, 3))
    assert (t.producer_id, t.producer_epoch) == (1000, 0)


def test_epoch_exhaustion_rotates_the_producer_id() -> None:
    c = make()
    c.load("tx", TxnTransition("tx", 7, 7, EPOCH_EXHAUSTED, -1, TIMEOUT, TxnState.COMPLETE_COMMIT,
                               frozenset(), NOW, NOW))
    rotated = init(c, expected=(7, EPOCH_EXHAUSTED))
    assert (rotated.producer_id, rotated.producer_epoch) == (1000, 0)
    assert (rotated.last_producer_id, rotated.last_producer_epoch) == (7, EPOCH_EXHAUSTED)
    # A retry with the old id and its exhausted epoch gets the same answer.
    retry = init(c, expected=(7, EPOCH_EXHAUSTED))
    assert (retry.producer_id, retry.producer_epoch) == (1000, 0)
    # Without an expected producer the rotation happens as well.
    c.load("ty", TxnTransition("ty", 8, 8, EPOCH_EXHAUSTED, -1, TIMEOUT, TxnState.EMPTY,
                               frozenset(), NOW, NOW))
    assert init(c, "ty").producer_id == 1001


def test_init_with_an_ongoing_transaction_aborts_it_first_with_a_fenced_epoch() -> None:
    c = make()
    init(c)
    begin(c)
    step = c.prepare_init_producer_id("tx", TIMEOUT, None, NOW)
    assert step == AbortFirst("tx")
    abort = done(c, c.prepare_fenced_abort("tx", NOW))
    assert (abort.state, abort.producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    assert abort.partitions == frozenset({TP})
    # The old instance (epoch 0) is fenced from here on.
    assert code(lambda: c.prepare_end_txn("tx", 1000, 0, True, NOW)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert code(lambda: c.verify_produce("tx", 1000, 0, TP)) == ErrorCode.INVALID_PRODUCER_EPOCH
    # While the abort is being completed, a new InitProducerId must wait.
    assert code(lambda: c.prepare_init_producer_id("tx", TIMEOUT, None, NOW)) == \
        ErrorCode.CONCURRENT_TRANSACTIONS
    complete = done(c, c.prepare_complete("tx", NOW))
    assert (complete.state, complete.producer_epoch, complete.partitions) == \
        (TxnState.COMPLETE_ABORT, 1, frozenset())
    assert init(c).producer_epoch == 2


# -- AddPartitionsToTxn, EndTxn -----------------------------------------------------------------


def test_add_partitions_checks_the_producer_and_starts_the_timer_once() -> None:
    clock = Clock()
    c = make()
    assert code(lambda: c.prepare_add_partitions("tx", 1000, 0, [TP], NOW)) == \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    init(c)
    assert code(lambda: c.prepare_add_partitions("tx", 999, 0, [TP], NOW)) == \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert code(lambda: c.prepare_add_partitions("tx", 1000, 1, [TP], NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    t = done(c, c.prepare_add_partitions("tx", 1000, 0, [TP], clock.now))
    assert (t.state, t.txn_start_ms, t.partitions) == (TxnState.ONGOING, NOW, frozenset({TP}))
    assert c.prepare_add_partitions("tx", 1000, 0, [TP], clock.advance(10)) is None  # in already
    more = done(c, c.prepare_add_partitions("tx", 1000, 0, [("orders", 1), TP], clock.advance(10)))
    assert more.txn_start_ms == NOW and more.txn_last_update_ms == NOW + 20
    assert more.partitions == frozenset({TP, ("orders", 1)})


def test_commit_keeps_the_epoch_and_clears_the_partitions() -> None:
    c = make()
    init(c)
    begin(c)
    prepare = done(c, c.prepare_end_txn("tx", 1000, 0, True, NOW))
    assert (prepare.state, prepare.producer_epoch, prepare.partitions) == \
        (TxnState.PREPARE_COMMIT, 0, frozenset({TP}))
    complete = done(c, c.prepare_complete("tx", NOW))
    assert (complete.state, complete.producer_epoch, complete.partitions) == \
        (TxnState.COMPLETE_COMMIT, 0, frozenset())
    # The next transaction of the same producer starts from CompleteCommit.
    begin(c, now=NOW + 5)
    assert c.get("tx").state is TxnState.ONGOING and c.get("tx").txn_start_ms == NOW + 5


def test_end_txn_outcomes_in_every_state() -> None:
    c = make()
    init(c)
    assert code(lambda: c.prepare_end_txn("tx", 1000, 0, True, NOW)) == ErrorCode.INVALID_TXN_STATE
    begin(c)
    done(c, c.prepare_end_txn("tx", 1000, 0, True, NOW))
    # PrepareCommit: the same outcome is being written (retriable), the other one is wrong.
    assert code(lambda: c.prepare_end_txn("tx", 1000, 0, True, NOW)) == \
        ErrorCode.CONCURRENT_TRANSACTIONS
    assert code(lambda: c.prepare_end_txn("tx", 1000, 0, False, NOW)) == ErrorCode.INVALID_TXN_STATE
    assert code(lambda: c.prepare_add_partitions("tx", 1000, 0, [TP], NOW)) == \
        ErrorCode.CONCURRENT_TRANSACTIONS
    done(c, c.prepare_complete("tx", NOW))
    # CompleteCommit: a retried commit succeeds without a change, an abort is a mismatch.
    assert c.prepare_end_txn("tx", 1000, 0, True, NOW) is None
    assert code(lambda: c.prepare_end_txn("tx", 1000, 0, False, NOW)) == ErrorCode.INVALID_TXN_STATE
    begin(c)
    end(c, commit=False)
    assert c.get("tx").state is TxnState.COMPLETE_ABORT
    assert c.prepare_end_txn("tx", 1000, 0, False, NOW) is None
    assert code(lambda: c.prepare_end_txn("tx", 1000, 0, True, NOW)) == ErrorCode.INVALID_TXN_STATE
    # Wrong producer id and stale epoch.
    assert code(lambda: c.prepare_end_txn("tx", 1, 0, True, NOW)) == \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    init(c)
    assert code(lambda: c.prepare_end_txn("tx", 1000, 0, False, NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    assert code(lambda: c.prepare_end_txn("nobody", 1000, 0, False, NOW)) == \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING


# -- timeouts and expiry with a driven clock ------------------------------------------------------


def test_timed_out_transactions_are_aborted_with_an_epoch_bump() -> None:
    clock = Clock()
    c = make()
    init(c, timeout=1000)
    begin(c, now=clock.now)
    assert c.timed_out(clock.advance(1000)) == []  # exactly at the timeout: not yet
    assert c.timed_out(clock.advance(1)) == ["tx"]
    abort = c.prepare_fenced_abort("tx", clock.now)
    assert abort is not None and abort.producer_epoch == 1
    assert c.timed_out(clock.now) == []  # pending: not picked twice
    assert c.prepare_fenced_abort("tx", clock.now) is None
    c.complete(abort)
    assert c.unfinished() == ["tx"]  # PrepareAbort: markers still to write
    done(c, c.prepare_complete("tx", clock.now))
    assert c.unfinished() == [] and c.timed_out(clock.advance(10_000)) == []
    assert c.get("tx").state is TxnState.COMPLETE_ABORT


def test_idle_ids_expire_with_a_tombstone_transition() -> None:
    clock = Clock()
    c = make(transactional_id_expiration_ms=5000)
    init(c, now=clock.now)
    init(c, "busy", now=clock.now)
    begin(c, "busy", now=clock.advance(1000))  # Ongoing: never expires (it times out instead)
    assert c.expired(clock.advance(3999)) == []
    assert c.expired(clock.advance(1)) == ["tx"]
    dead = c.prepare_dead("tx", clock.now)
    assert dead is not None and dead.state is TxnState.DEAD
    c.complete(dead)
    assert c.get("tx") is None and c.expired(clock.advance(100_000)) == []
    # An expired id starts again from a new producer id.
    assert init(c, now=clock.now).producer_id == 1002


# -- the produce check (KIP-890 part 1) ---------------------------------------------------------


def test_verify_produce() -> None:
    c = make()
    assert code(lambda: c.verify_produce("tx", 1000, 0, TP)) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    init(c)
    assert code(lambda: c.verify_produce("tx", 1000, 0, TP)) == ErrorCode.INVALID_TXN_STATE  # Empty
    begin(c)
    c.verify_produce("tx", 1000, 0, TP)
    assert code(lambda: c.verify_produce("tx", 1000, 0, ("orders", 9))) == ErrorCode.INVALID_TXN_STATE
    assert code(lambda: c.verify_produce("tx", 1000, 1, TP)) == ErrorCode.INVALID_TXN_STATE
    assert code(lambda: c.verify_produce("tx", 55, 0, TP)) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    done(c, c.prepare_end_txn("tx", 1000, 0, True, NOW))
    assert code(lambda: c.verify_produce("tx", 1000, 0, TP)) == ErrorCode.INVALID_TXN_STATE


def test_verify_produce_refuses_a_batch_while_the_end_is_pending() -> None:
    """Between EndTxn's Prepare record being appended and its being durable the state is still
    Ongoing: a batch then must not be answered as part of the transaction (the record's end
    offsets, and so the commit, do not cover it)."""
    c = make()
    init(c)
    begin(c)
    for commit in (True, False):
        prepare = c.prepare_end_txn("tx", 1000, 0, commit, NOW)
        assert code(lambda: c.verify_produce("tx", 1000, 0, TP)) == ErrorCode.INVALID_TXN_STATE
        c.abandon(prepare)  # the record could not be persisted: Ongoing again, nothing pending
        c.verify_produce("tx", 1000, 0, TP)


def test_replay_keeps_the_last_record_and_tombstones_remove() -> None:
    c = make()
    base = TxnTransition("tx", 1, 1, 0, -1, TIMEOUT, TxnState.EMPTY, frozenset(), -1, NOW)
    c.load("tx", base)
    c.load("tx", TxnTransition("tx", 1, 1, 0, -1, TIMEOUT, TxnState.PREPARE_COMMIT,
                               frozenset({TP}), NOW, NOW + 1))
    md = c.get("tx")
    assert (md.state, md.partitions, md.pending) == (TxnState.PREPARE_COMMIT, frozenset({TP}), None)
    assert c.unfinished() == ["tx"]
    c.load("tx", None)
    assert c.get("tx") is None and len(c) == 0


def test_a_prepare_commit_not_whole_is_listed_and_aborted_with_an_epoch_bump() -> None:
    """Recovery after a machine restart: a PrepareCommit whose record says a partition ends
    further than it now does lost batches of its round; it becomes an abort with a bumped epoch
    and the producer's own epoch forgotten (its EndTxn is fenced, not taken for a retry)."""
    c = make()
    init(c)
    other = ("orders", 1)
    begin(c, partitions=(TP, other))
    prepared = c.prepare_end_txn("tx", 1000, 0, True, NOW)
    with pytest.raises(RuntimeError):  # only the pending transition gets them
        c.record_end_offsets(prepared._replace(), {TP: 5})
    done(c, c.record_end_offsets(prepared, {TP: 5, other: 3}))
    md = c.get("tx")
    assert md.end_offsets == ((TP, 5), (other, 3))
    ends = {TP: 5, other: 3}
    assert c.lost_commits(ends.get) == {}
    ends[other] = 9  # longer: later writes survived too
    assert c.lost_commits(ends.get) == {}
    del ends[TP]  # the partition is gone: its marker reports it
    assert c.lost_commits(ends.get) == {}
    ends.update({TP: 4, other: 2})
    assert c.lost_commits(ends.get) == {"tx": [(TP, 5, 4), (other, 3, 2)]}
    # A record replayed carries them (load), and the complete record drops them.
    c2 = make()
    c2.load("tx", prepared._replace(end_offsets=md.end_offsets))
    assert c2.get("tx").end_offsets == md.end_offsets
    assert c2.lost_commits(ends.get) == {"tx": [(TP, 5, 4), (other, 3, 2)]}

    abort = c.prepare_abort_of_lost_commit("tx", NOW + 1)
    assert (abort.state, abort.producer_epoch, abort.last_producer_epoch, abort.partitions,
            abort.end_offsets) == (TxnState.PREPARE_ABORT, 1, -1, frozenset({TP, other}), ())
    assert c.prepare_abort_of_lost_commit("tx", NOW + 1) is None  # pending
    assert c.lost_commits(ends.get) == {}
    done(c, abort)
    assert code(lambda: c.prepare_end_txn("tx", 1000, 0, True, NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    complete = done(c, c.prepare_complete("tx", NOW + 2))
    assert (complete.state, complete.producer_epoch, complete.end_offsets) == \
        (TxnState.COMPLETE_ABORT, 1, ())
    assert code(lambda: c.prepare_end_txn("tx", 1000, 0, True, NOW)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    assert c.prepare_abort_of_lost_commit("tx", NOW) is None  # not in PrepareCommit


def test_a_version_2_commit_not_whole_that_exhausted_the_epoch_stays_on_its_producer_id() -> None:
    """The version-2 Prepare record is at 32767 already (above the producer's epoch) and names
    the producer id the client would continue with: the abort keeps the epoch and drops that
    id, so the id stays fenced at its last epoch and the next InitProducerId rotates."""
    c = make()
    c.load("tx", TxnTransition("tx", 7, 7, EPOCH_EXHAUSTED, -1, TIMEOUT, TxnState.ONGOING,
                               frozenset({TP}), NOW, NOW))
    prepared = c.prepare_end_txn("tx", 7, EPOCH_EXHAUSTED, True, NOW, bump_epoch=True)
    assert prepared.producer_epoch == EPOCH_EXHAUSTED + 1 and prepared.next_producer_id != -1
    done(c, c.record_end_offsets(prepared, {TP: 2}))
    abort = done(c, c.prepare_abort_of_lost_commit("tx", NOW))
    assert (abort.producer_id, abort.producer_epoch, abort.next_producer_id) == \
        (7, EPOCH_EXHAUSTED + 1, -1)
    done(c, c.prepare_complete("tx", NOW))
    assert code(lambda: c.prepare_end_txn("tx", 7, EPOCH_EXHAUSTED, True, NOW,
                                          bump_epoch=True)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert code(lambda: c.prepare_init_producer_id("tx", TIMEOUT, (7, EPOCH_EXHAUSTED), NOW)) \
        == ErrorCode.INVALID_PRODUCER_EPOCH  # fenced: the application starts a new producer
    again = init(c)
    assert (again.producer_id != 7, again.producer_epoch) == (True, 0)
