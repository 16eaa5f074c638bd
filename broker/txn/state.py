"""Transaction states and the one table of allowed transitions.

Rules / theory of operation (seeds 000, 001, 003; Kafka's ``TransactionMetadata.scala``):

- ``Empty``: a transactional id with a producer id and epoch but no transaction. InitProducerId
  (first time, or an epoch bump) lands here.
- ``Ongoing``: the first AddPartitionsToTxn / AddOffsetsToTxn started a transaction (and its
  timer); more of them keep it Ongoing and add partitions.
- ``PrepareCommit`` / ``PrepareAbort``: EndTxn decided. Once this record is durable the outcome is
  fixed: the coordinator writes COMMIT / ABORT markers to every partition of the transaction, even
  after a crash (recovery and the periodic task finish it). One exception: a PrepareCommit
  record that a power cut kept while the end of a data partition of its round was lost
  (recovery after a machine restart sees the partition shorter than the record says) becomes
  an abort; its EndTxn was never answered.
- ``CompleteCommit`` / ``CompleteAbort``: every marker is durable; the transaction is over and its
  partition set is cleared. A retried EndTxn with the same outcome answers NONE from here.
- ``Dead``: the id expired (``transactional.id.expiration.ms`` idle); a tombstone is written and
  the id forgotten.
- ``PrepareEpochFence``: never stored. It is the *pending* state while the coordinator bumps the
  epoch of an Ongoing transaction that it is about to abort by itself (timeout, InitProducerId
  from a new instance, or recovery after a machine restart), so that the old producer is fenced;
  the abort then continues as ``PrepareAbort`` with the bumped epoch. Recovery after a machine
  restart also enters it from ``PrepareCommit``: a commit whose record survived a power cut
  that took the end of one of its data partitions (never answered) is aborted instead.

Each state lists the states it may be entered from (Kafka's ``validPreviousStates``);
``check_transition`` is the only place that consults the table. Every transition is prepared (the
pending state blocks other transitions: CONCURRENT_TRANSACTIONS), persisted to
``__transaction_state`` and only then completed (``coordinator.py``).

The numeric ids are the ones Kafka stores in its transaction log; the names are what
DescribeTransactions / ListTransactions show.
"""

from __future__ import annotations

import enum


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """Kafka's name of the state (``PrepareCommit``), as the admin APIs show it."""
        return _NAMES[self]

    @classmethod
    def from_display_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES: dict[TxnState, str] = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

S = TxnState
# target state -> the states it may be entered from
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    # From Empty/Complete*: transaction version 2's abort of a transaction that added no
    # partition (the client cannot know whether its first batch got here; Kafka 4 allows it).
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT,
                                S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    # From PrepareCommit: recovery only, a commit a power cut left not whole (its record
    # durable, the end of a data partition's batches lost; never answered) is aborted instead.
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING, S.PREPARE_COMMIT}),
}
del S

# States an idle transactional id may expire from (nothing in flight).
EXPIRABLE_STATES = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


class IllegalTxnTransition(Exception):
    """A transition the table forbids: a bug in the caller, never a client error."""

    def __init__(self, transactional_id: str, current: TxnState, target: TxnState) -> None:
        super().__init__(
            f"transactional id {transactional_id!r}: illegal transition "
            f"{current.display_name} -> {target.display_name}"
        )
        self.transactional_id = transactional_id
        self.current = current
        self.target = target


def check_transition(transactional_id: str, current: TxnState, target: TxnState) -> None:
    """Raise ``IllegalTxnTransition`` unless ``target`` may follow ``current``."""
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalTxnTransition(transactional_id, current, target)
