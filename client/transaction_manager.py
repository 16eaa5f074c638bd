"""The producer's transaction state: a table of allowed transitions and the bookkeeping around it.

Pure state: no I/O, no clock. The engine (``client/aio/transactions.py``,
``client/aio/sender.py``) asks this object what is allowed, does the network work, and reports the
outcome back.

Rules / theory of operation
---------------------------
The states are the Java client's (``TransactionManager.State``) plus HANDED_OFF::

    UNINITIALIZED --init_transactions--> INITIALIZING --InitProducerId ok--> READY
    READY --begin_transaction--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction--> COMMITTING_TRANSACTION --EndTxn ok--> READY
    IN_TRANSACTION / ABORTABLE_ERROR --abort_transaction--> ABORTING_TRANSACTION --EndTxn ok--> READY
    ABORTING_TRANSACTION --(epoch bump needed)--> INITIALIZING --InitProducerId v3 ok--> READY
    COMMITTING_TRANSACTION --(EndTxn timed out once, version 1)--> INITIALIZING (the same bump)
    IN_TRANSACTION / COMMITTING / ABORTING --abortable error--> ABORTABLE_ERROR
    any --fatal error--> FATAL_ERROR (terminal: every transactional call raises)
    IN_TRANSACTION --transaction_handle()--> HANDED_OFF (terminal: another process ends it)

``transition`` is the one function that checks the table (``VALID_PREVIOUS``: each state lists the
states it may be entered from) and raises ``IllegalStateError`` for anything else.

Within a transaction: a partition gets a record only after the coordinator added it
(AddPartitionsToTxn), so ``add_partition`` queues new partitions and the sender drains a
partition only once ``is_partition_added``. A group's offsets need AddOffsetsToTxn once per
transaction (``add_group``). EndTxn is skipped for a transaction that added nothing (as
librdkafka does: the coordinator has nothing to end).
"""

from __future__ import annotations

import enum
import threading

from client.errors import IllegalStateError, KafkaClientError, TransactionAbortableError
from client.structs import TopicPartition

MSG_NOT_TRANSACTIONAL = (
    "Cannot use transactional methods without enabling transactions by setting the "
    "transactional.id configuration property."
)


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"
    HANDED_OFF = "HANDED_OFF"


S = TxnState

# Each state, and the states it may be entered from. FATAL_ERROR may be entered from any state.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.UNINITIALIZED: frozenset(),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset(
        {S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION, S.ABORTABLE_ERROR}
    ),
    S.FATAL_ERROR: frozenset(TxnState),
    S.HANDED_OFF: frozenset({S.IN_TRANSACTION}),
}


class TransactionManager:
    """Producer id, epoch and transaction state of one producer (idempotent or transactional)."""

    def __init__(self, transactional_id: str | None) -> None:
        self.transactional_id = transactional_id
        # Guards the partition sets: the application's threads add partitions (send) while the
        # loop thread reads them and moves them on.
        self.lock = threading.Lock()
        self.state = TxnState.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self.last_error: BaseException | None = None
        # Set after an error that leaves the broker's sequence state unknown (a batch given up
        # after it was sent, UNKNOWN_PRODUCER_ID): the abort must be followed by an epoch bump.
        self.needs_epoch_bump = False
        self.partitions: set[TopicPartition] = set()  # added to the transaction at the coordinator
        self.pending_partitions: set[TopicPartition] = set()  # waiting for AddPartitionsToTxn
        self.groups: set[str] = set()  # AddOffsetsToTxn done for these groups
        # Transaction version 2 (KIP-890 part 2), decided at init_transactions from what the
        # coordinator finalizes: partitions join with their first Produce (v12), and every EndTxn
        # (v5) bumps the epoch, so a request of an ended transaction can never act on a later one.
        self.tv2 = False

    @property
    def is_transactional(self) -> bool:
        return self.transactional_id is not None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    # -- the table ---------------------------------------------------------------------------------

    def transition(self, target: TxnState, error: BaseException | None = None) -> None:
        """Move to ``target`` if the table allows it; ``IllegalStateError`` otherwise."""
        if self.state is TxnState.FATAL_ERROR and target is not TxnState.FATAL_ERROR:
            raise self._fatal_state_error()
        if self.state not in VALID_PREVIOUS[target]:
            raise IllegalStateError(
                f"TransactionalId {self.transactional_id}: Invalid transition attempted from "
                f"state {self.state.name} to state {target.name}"
            )
        if target in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
            self.last_error = error
        self.state = target

    def _fatal_state_error(self) -> IllegalStateError:
        err = IllegalStateError(
            "Cannot execute transactional method because we are in an error state: "
            f"{self.last_error!r}"
        )
        err.__cause__ = self.last_error
        return err

    # -- checks before public calls ----------------------------------------------------------------

    def require_transactional(self) -> str:
        """The transactional id; ``IllegalStateError`` for a producer without one."""
        if self.transactional_id is None:
            raise IllegalStateError(MSG_NOT_TRANSACTIONAL)
        return self.transactional_id

    def raise_if_fatal(self) -> None:
        if self.state is TxnState.FATAL_ERROR:
            raise self._fatal_state_error()

    def check_send(self) -> None:
        """May ``send()`` be called now? Raises the reason why not."""
        state = self.state
        if state is TxnState.FATAL_ERROR:
            raise self._fatal_state_error()
        if not self.is_transactional:
            return
        if state is TxnState.IN_TRANSACTION:
            return
        if state is TxnState.ABORTABLE_ERROR:
            raise TransactionAbortableError(
                "Cannot perform send because at least one previous transactional or idempotent "
                "request has failed with errors."
            ) from self.last_error
        if state in (TxnState.UNINITIALIZED, TxnState.INITIALIZING):
            raise IllegalStateError(
                "Cannot perform a 'send' before completing a call to init_transactions when "
                "transactions are enabled."
            )
        raise IllegalStateError(f"Cannot call send in state {state.name}")

    # -- lifecycle -----------------------------------------------------------------------------------

    def begin_init(self) -> None:
        self.require_transactional()
        if self.state is TxnState.INITIALIZING:
            return  # resuming an init_transactions that timed out
        self.transition(TxnState.INITIALIZING)

    def init_done(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.needs_epoch_bump = False
        if self.is_transactional:
            self.transition(TxnState.READY)

    def set_idempotent_producer(self, producer_id: int, producer_epoch: int) -> None:
        """The producer id of a producer without transactions (no state change)."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch

    def begin_transaction(self) -> None:
        self.require_transactional()
        self.transition(TxnState.IN_TRANSACTION)
        self.partitions.clear()
        self.pending_partitions.clear()
        self.groups.clear()

    def add_partition(self, tp: TopicPartition) -> bool:
        """Note that ``tp`` gets records in this transaction; True if the coordinator must be told."""
        if tp in self.partitions or tp in self.pending_partitions:
            return False
        if self.tv2:
            self.partitions.add(tp)  # the broker adds it with the first batch (Produce v12)
            return False
        self.pending_partitions.add(tp)
        return True

    def is_partition_added(self, tp: tuple[str, int]) -> bool:
        """(``tp`` may be a plain ``(topic, partition)`` tuple: it equals the TopicPartition.)"""
        return tp in self.partitions

    def partitions_added(self, added: list[TopicPartition]) -> None:
        for tp in added:
            self.pending_partitions.discard(tp)
            self.partitions.add(tp)

    def add_group(self, group_id: str) -> bool:
        """True if AddOffsetsToTxn must be sent for ``group_id`` (once per transaction)."""
        if self.state is not TxnState.IN_TRANSACTION:
            self.check_send()  # raises the right error for the state
            raise IllegalStateError(f"Cannot send offsets in state {self.state.name}")
        return group_id not in self.groups

    def group_added(self, group_id: str) -> None:
        self.groups.add(group_id)

    @property
    def is_empty_transaction(self) -> bool:
        """Nothing was added at the coordinator: there is no transaction for EndTxn to end."""
        return not self.partitions and not self.groups

    def begin_commit(self) -> None:
        self.require_transactional()
        if self.state is TxnState.ABORTABLE_ERROR:
            raise TransactionAbortableError(
                "Cannot commit transaction since a previous operation failed; abort it."
            ) from self.last_error
        if self.state is TxnState.COMMITTING_TRANSACTION:
            return  # resuming a commit that timed out
        self.transition(TxnState.COMMITTING_TRANSACTION)

    def begin_abort(self) -> None:
        self.require_transactional()
        if self.state is TxnState.ABORTING_TRANSACTION:
            return  # resuming an abort that timed out
        self.transition(TxnState.ABORTING_TRANSACTION)

    def epoch_bumped(self, producer_id: int, producer_epoch: int) -> None:
        """EndTxn v5 answered the producer id and epoch of the next transaction (the epoch + 1,
        or a new producer id at epoch 0 once the epoch is exhausted)."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.needs_epoch_bump = False  # the bump restarted every sequence already

    def transaction_completed(self) -> None:
        """EndTxn succeeded (or was not needed)."""
        self.transition(TxnState.READY)
        self.partitions.clear()
        self.pending_partitions.clear()
        self.groups.clear()

    def begin_epoch_bump(self) -> None:
        """After an abort that left sequence state unknown: InitProducerId with our id/epoch."""
        self.transition(TxnState.INITIALIZING)

    def abortable_error(self, error: BaseException) -> None:
        """An error that dooms the current transaction (idempotent producers just record it)."""
        if self.is_transactional and self.state in VALID_PREVIOUS[TxnState.ABORTABLE_ERROR]:
            self.transition(TxnState.ABORTABLE_ERROR, error)
        elif not self.is_transactional:
            self.last_error = error

    def fatal_error(self, error: BaseException) -> None:
        self.transition(TxnState.FATAL_ERROR, error)

    def handoff(self) -> None:
        self.require_transactional()
        self.transition(TxnState.HANDED_OFF)

    def classify(self, error: BaseException) -> None:
        """Route an error from a transactional request to fatal or abortable."""
        if isinstance(error, KafkaClientError) and error.fatal:
            self.fatal_error(error)
        else:
            self.abortable_error(error)
