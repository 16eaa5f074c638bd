"""The transaction state table: every allowed and every forbidden transition."""

from __future__ import annotations

import itertools

import pytest

from broker.txn.state import (
    VALID_PREVIOUS_STATES,
    IllegalTxnTransition,
    TxnState,
    check_transition,
)

S = TxnState
# Written out from Kafka's TransactionMetadata.validPreviousStates, independently of the module:
# (from, to) pairs that are allowed (one more, marked); all 64 - len(ALLOWED) others are
# forbidden.
ALLOWED = {
    (S.EMPTY, S.EMPTY), (S.COMPLETE_COMMIT, S.EMPTY), (S.COMPLETE_ABORT, S.EMPTY),
    (S.EMPTY, S.ONGOING), (S.ONGOING, S.ONGOING), (S.COMPLETE_COMMIT, S.ONGOING),
    (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT), (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
    (S.EMPTY, S.PREPARE_ABORT), (S.COMPLETE_COMMIT, S.PREPARE_ABORT),
    (S.COMPLETE_ABORT, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
    (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.EMPTY, S.DEAD), (S.COMPLETE_COMMIT, S.DEAD), (S.COMPLETE_ABORT, S.DEAD),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
    # Not Kafka's: recovery after a machine restart aborts a PrepareCommit a power cut left
    # not whole (a data partition lost the end of its batches; the commit was never answered).
    (S.PREPARE_COMMIT, S.PREPARE_EPOCH_FENCE),
}
PAIRS = list(itertools.product(TxnState, TxnState))


@pytest.mark.parametrize(("current", "target"), sorted(ALLOWED))
def test_allowed(current: TxnState, target: TxnState) -> None:
    check_transition("tx", current, target)


@pytest.mark.parametrize(("current", "target"), [p for p in PAIRS if p not in ALLOWED])
def test_forbidden(current: TxnState, target: TxnState) -> None:
    with pytest.raises(IllegalTxnTransition) as info:
        check_transition("tx", current, target)
    assert (info.value.current, info.value.target) == (current, target)
    assert info.value.transactional_id == "tx"
    assert current.display_name in str(info.value) and target.display_name in str(info.value)


def test_the_table_covers_every_state_and_nothing_leaves_dead() -> None:
    assert set(VALID_PREVIOUS_STATES) == set(TxnState)
    assert len(PAIRS) == 64 and len(ALLOWED) == 20
    assert not any(S.DEAD in previous for previous in VALID_PREVIOUS_STATES.values())
    # The fence is only ever followed by the abort it prepares.
    assert [t for t, previous in VALID_PREVIOUS_STATES.items()
            if S.PREPARE_EPOCH_FENCE in previous] == [S.PREPARE_ABORT]


def test_kafka_ids_and_names() -> None:
    assert [(s.value, s.display_name) for s in TxnState] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence"),
    ]
    for state in TxnState:
        assert TxnState.from_display_name(state.display_name) is state
    assert TxnState.from_display_name("Committed") is None
