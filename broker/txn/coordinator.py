"""The transaction coordinator: pure state, no I/O, time as an argument.

Theory of operation (seeds 000/001/003, Kafka's ``TransactionCoordinator`` and
``TransactionMetadata``): one ``TxnMetadata`` (``metadata.py``) per transactional id holds the
producer id and epoch handed out by InitProducerId, the transaction timeout, the state
(``state.py``) and the partitions of the current transaction. Every change goes through two phases:

1. ``prepare_*`` validates a request against the metadata and returns an immutable
   ``TxnTransition`` (the complete target metadata). The metadata remembers it as ``pending``; while
   a transition is pending every other request for that id answers CONCURRENT_TRANSACTIONS.
2. The caller persists the transition in ``__transaction_state`` (``txn_log.py``) and then calls
   ``complete(transition)``, which applies it. If persisting fails it calls ``abandon``.

So a crash between the two phases loses only the pending, never-acknowledged change; replaying the
log (``load``) rebuilds exactly what was acknowledged. A prepare returning ``None`` means "nothing
to change, answer NONE" (e.g. a retried EndTxn after the transaction completed).

Errors are raised as ``KafkaError``. Stale epochs raise INVALID_PRODUCER_EPOCH (47): Kafka's
PRODUCER_FENCED (90) only exists from InitProducerId v4 / EndTxn v2 / AddPartitionsToTxn v2 on,
and the pinned versions (docs/protocol.md section 6) get 47 instead, as Kafka sends them.

Epochs: a normal commit or abort keeps the epoch. InitProducerId bumps it (fencing older
instances); when it reaches 32766 (``EPOCH_EXHAUSTED``) the next InitProducerId rotates to a new
producer id at epoch 0 (the coordinator always keeps one epoch in reserve to fence with). An
Ongoing transaction that the coordinator must end itself (timeout, or InitProducerId from a new
instance) is aborted with the epoch bumped first (``PrepareEpochFence``, then ``PrepareAbort`` with
the new epoch), so that the old instance can no longer write or commit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from broker.log.topics import TopicPartition
from broker.txn.metadata import (
    EPOCH_EXHAUSTED,
    INT16_MAX,
    AbortFirst,
    TxnConfig,
    TxnMetadata,
    TxnTransition,
    new_transition,
)
from broker.txn.state import EXPIRABLE_STATES, TxnState, check_transition
from protocol.errors import ErrorCode, KafkaError
from protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID


def _fenced(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH, message)


class TransactionCoordinator:
    """All transactional ids of this broker (it leads every ``__transaction_state`` partition)."""

    def __init__(self, config: TxnConfig, next_producer_id: Callable[[], int]) -> None:
        self.config = config
        self._next_producer_id = next_producer_id
        self._txns: dict[str, TxnMetadata] = {}

    # -- queries -----------------------------------------------------------------------------

    def get(self, transactional_id: str) -> TxnMetadata | None:
        return self._txns.get(transactional_id)

    def transactions(self) -> Iterable[TxnMetadata]:
        return list(self._txns.values())

    def __len__(self) -> int:
        return len(self._txns)

    # -- the two phases ----------------------------------------------------------------------

    def _prepare(self, md: TxnMetadata, target: TxnTransition) -> TxnTransition:
        check_transition(md.transactional_id, md.state, target.state)
        md.pending = target
        return target

    def complete(self, transition: TxnTransition) -> None:
        """Apply a transition after it was persisted. A Dead transition forgets the id."""
        md = self._txns.get(transition.transactional_id)
        if md is None or md.pending is not transition:
            raise RuntimeError(f"completing a transition that is not pending: {transition}")
        md.pending = None
        md.commit_ahead_ms = -1
        if transition.state is TxnState.DEAD:
            del self._txns[transition.transactional_id]
            return
        # Every field but the id, in the order both declare them.
        (_, md.producer_id, md.last_producer_id, md.producer_epoch, md.last_producer_epoch,
         md.txn_timeout_ms, md.state, md.partitions, md.txn_start_ms, md.txn_last_update_ms,
         md.next_producer_id, md.txn_version, md.end_offsets) = transition

    def abandon(self, transition: TxnTransition) -> None:
        """Drop a pending transition that could not be persisted; the metadata is unchanged."""
        md = self._txns.get(transition.transactional_id)
        if md is not None and md.pending is transition:
            md.pending = None

    def load(self, transactional_id: str, transition: TxnTransition | None) -> None:
        """Replay one record of the transaction log (``None``: a tombstone)."""
        if transition is None:
            self._txns.pop(transactional_id, None)
        else:
            self._txns[transactional_id] = TxnMetadata.from_transition(transition)

    # -- InitProducerId ----------------------------------------------------------------------

    def prepare_init_producer_id(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        expected: tuple[int, int] | None,
        now_ms: int,
    ) -> TxnTransition | AbortFirst:
        """InitProducerId with a transactional id (Kafka's ``handleInitProducerId``).

        ``expected`` is the ``(producer_id, producer_epoch)`` an InitProducerId v3 carries
        (KIP-360), or None. Returns the transition to persist (answer with its producer id and
        epoch), or ``AbortFirst`` for an Ongoing transaction. Raises INVALID_REQUEST,
        INVALID_TRANSACTION_TIMEOUT, CONCURRENT_TRANSACTIONS or INVALID_PRODUCER_EPOCH.
        """
        if not transactional_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "empty transactional id")
        if not 0 < transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            raise KafkaError(
                ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                f"transaction timeout {transaction_timeout_ms} ms outside "
                f"(0, {self.config.transaction_max_timeout_ms}] (transaction.max.timeout.ms)",
            )
        md = self._txns.get(transactional_id)
        if md is None:
            # As Kafka: the id exists from here on (epoch -1); the first persisted transition
            # gives it epoch 0.
            md = TxnMetadata(transactional_id, self._next_producer_id(), NO_PRODUCER_ID,
                             NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, transaction_timeout_ms,
                             TxnState.EMPTY, frozenset(), -1, now_ms)
            self._txns[transactional_id] = md
        if md.pending is not None:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "a transition is in progress")
        if expected is not None and not _valid_expected_producer(md, expected):
            raise _fenced(
                f"producer {expected[0]} epoch {expected[1]} is not the current producer "
                f"{md.producer_id} of {transactional_id!r}"
            )
        state = md.state
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "the transaction is completing")
        if state is TxnState.ONGOING:
            return AbortFirst(transactional_id)
        if state not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            raise RuntimeError(f"{transactional_id!r} found in state {state.display_name}")

        if md.epoch_exhausted and (expected is None or expected[1] == md.producer_epoch):
            # Rotate to a new producer id; remember the old id/epoch so that a retry of this
            # request (the answer lost) is recognised.
            return self._prepare(md, md._target(
                TxnState.EMPTY, now_ms,
                producer_id=self._next_producer_id(),
                producer_epoch=0,
                last_producer_epoch=md.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
                txn_timeout_ms=transaction_timeout_ms,
                partitions=frozenset(),
                txn_start_ms=-1,
            ))
        if expected is None:
            epoch, last_epoch = md.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif md.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == md.producer_epoch:
            # The producer recovers after an abortable error and nobody else initialised since.
            epoch, last_epoch = md.producer_epoch + 1, md.producer_epoch
        elif expected[1] == md.last_producer_epoch:
            # A retry of a bump whose answer was lost: answer the same epoch again.
            epoch, last_epoch = md.producer_epoch, md.last_producer_epoch
        else:
            raise _fenced(
                f"expected epoch {expected[1]} is neither the current epoch {md.producer_epoch} "
                f"nor the previous one {md.last_producer_epoch} of {transactional_id!r}"
            )
        if epoch > EPOCH_EXHAUSTED:
            raise _fenced(f"producer {md.producer_id} of {transactional_id!r} has no epochs left")
        return self._prepare(md, md._target(
            TxnState.EMPTY, now_ms,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            txn_timeout_ms=transaction_timeout_ms,
            partitions=frozenset(),
            txn_start_ms=-1,
        ))

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------

    def _checked(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        if not transactional_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "empty transactional id")
        md = self._txns.get(transactional_id)
        if md is None:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                             f"no producer id for {transactional_id!r}")
        if md.producer_id != producer_id:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                f"{transactional_id!r} belongs to producer {md.producer_id}, not {producer_id}",
            )
        if md.producer_epoch != producer_epoch:
            raise _fenced(
                f"producer {producer_id} epoch {producer_epoch} is not the current epoch "
                f"{md.producer_epoch} of {transactional_id!r}"
            )
        if md.pending is not None:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "a transition is in progress")
        return md

    def prepare_add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> TxnTransition | None:
        """Add partitions to the transaction (starting it, and its timer, if there is none).
        None: they are all in it already. Raises INVALID_REQUEST, INVALID_PRODUCER_ID_MAPPING,
        INVALID_PRODUCER_EPOCH or CONCURRENT_TRANSACTIONS."""
        md = self._checked(transactional_id, producer_id, producer_epoch)
        added = frozenset(partitions)
        if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "the previous transaction is completing")
        if md.state is TxnState.ONGOING and added <= md.partitions:
            return None
        starting = md.state is not TxnState.ONGOING
        return self._prepare(md, md._target(
            TxnState.ONGOING, now_ms,
            partitions=md.partitions | added,
            txn_start_ms=now_ms if starting else md.txn_start_ms,
        ))

    # -- EndTxn ------------------------------------------------------------------------------

    def prepare_end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
        bump_epoch: bool = False,
    ) -> TxnTransition | None:
        """EndTxn: PrepareCommit / PrepareAbort from Ongoing. None: the transaction already
        completed with this outcome (a retry). Raises INVALID_REQUEST,
        INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH, CONCURRENT_TRANSACTIONS (the same
        outcome is being written; or, version 2, a commit ahead of its transaction's first
        batch after a completed transaction, for up to the transaction timeout) or
        INVALID_TXN_STATE (no transaction, or the other outcome).

        ``bump_epoch`` is transaction version 2 (EndTxn v5): the Prepare record carries the epoch
        + 1 (the markers are written with it, so everything the old epoch still has in flight is
        fenced), or, when the epoch is exhausted, the last epoch and a fresh ``next_producer_id``
        that Complete switches to at epoch 0. Either way ``last_producer_id/last_producer_epoch``
        keep the request's pair, so that a retry of this EndTxn (the answer lost) is recognised
        while the id is still in Prepare*/Complete* and answered with the new pair
        (``producer_after_end``); once the next transaction has started, the old pair is fenced.
        """
        wanted = "commit" if commit else "abort"
        if bump_epoch:
            md = self._txns.get(transactional_id) if transactional_id else None
            if (md is not None and md.pending is None and md.txn_version == 2
                    and md.state in _ENDED_STATES
                    and (producer_id, producer_epoch) == (md.last_producer_id,
                                                          md.last_producer_epoch)
                    and (producer_id, producer_epoch) != (md.producer_id, md.producer_epoch)):
                # A retry of the EndTxn that ended the current (or just completed) transaction.
                if _outcome_is_commit(md.state) != commit:
                    raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                                     f"cannot {wanted} {transactional_id!r}: it was "
                                     f"{'committed' if commit is False else 'aborted'}")
                if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                    raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS,
                                     f"the {wanted} is being written")
                return None
        md = self._checked(transactional_id, producer_id, producer_epoch)
        state = md.state
        if state is TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            if not bump_epoch:
                return self._prepare(md, md._target(target, now_ms, txn_version=1))
            return self._prepare(md, md._target(target, now_ms, **self._bumped(md)))
        if bump_epoch and not commit and state in _NOTHING_STARTED:
            # Transaction version 2: the client cannot know whether its first batch reached us,
            # so it may abort a transaction that added no partition. The epoch is bumped all the
            # same (what it sent late is fenced); nothing to mark; it starts now (Kafka's
            # noPartitionAdded).
            return self._prepare(md, md._target(
                TxnState.PREPARE_ABORT, now_ms, partitions=frozenset(), txn_start_ms=now_ms,
                **self._bumped(md)))
        if bump_epoch and md.txn_version == 2 and state in _ENDED_BY_CLIENT:
            # A commit at the epoch the last EndTxn answered, with no transaction begun yet.
            # Kafka 4.4's Java client sends it when its Sender thread is preempted between
            # finding no unsent batch and taking the EndTxn off its queue while the application
            # begins a transaction, sends one record and commits: the EndTxn overtakes the
            # transaction's only batch (version 2 has no AddPartitionsToTxn in between). Kafka
            # answers its EndTxn before writing the markers and CONCURRENT_TRANSACTIONS while they
            # are written, which is where that commit lands there as a rule (INVALID_TXN_STATE,
            # fatal for that client, only when it comes later); the markers here are written
            # before the answer, so it always found the transaction complete. So:
            # CONCURRENT_TRANSACTIONS (the client re-queues the EndTxn and holds it until the
            # batch is acknowledged, which adds the partition), until the transaction timeout
            # from its first attempt; then Kafka's answer. (After InitProducerId, Empty, Kafka
            # has nothing in flight and answers INVALID_TXN_STATE: so does this coordinator.)
            if md.commit_ahead_ms < 0:
                md.commit_ahead_ms = now_ms
            if now_ms - md.commit_ahead_ms <= md.txn_timeout_ms:  # (an abort returned above)
                raise KafkaError(
                    ErrorCode.CONCURRENT_TRANSACTIONS,
                    f"{transactional_id!r} has no transaction at epoch {producer_epoch} yet: "
                    "its first batch may still be on the way",
                )
            raise KafkaError(
                ErrorCode.INVALID_TXN_STATE,
                f"cannot {wanted} {transactional_id!r} in state {state.display_name}: no batch "
                f"came within {md.txn_timeout_ms} ms",
            )
        if md.txn_version == 2 and bump_epoch:
            # Empty (InitProducerId: nothing begun, as Kafka answers), or the epoch is being
            # ended (Prepare*: the client learns that epoch only from the answer).
            raise KafkaError(
                ErrorCode.INVALID_TXN_STATE,
                f"cannot {wanted} {transactional_id!r} in state {state.display_name}",
            )
        same_complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        same_prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if state is same_complete:
            return None
        if state is same_prepare:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, f"the {wanted} is being written")
        raise KafkaError(
            ErrorCode.INVALID_TXN_STATE,
            f"cannot {wanted} {transactional_id!r} in state {state.display_name}",
        )

    def record_end_offsets(
        self, transition: TxnTransition, end_offsets: Mapping[TopicPartition, int]
    ) -> TxnTransition:
        """The pending PrepareCommit or PrepareAbort ``transition`` (from ``prepare_end_txn``),
        now carrying the log end offset each data partition of the transaction has as its
        record is appended: a commit's record and those partitions are committed in one round,
        so a power cut can keep the record and lose the end of a partition (``lost_commits``);
        and every batch of the transaction lies below them, its markers and the producer's next
        transaction above. Replaces the pending transition: persist and complete the one
        returned."""
        md = self._txns.get(transition.transactional_id)
        if md is None or md.pending is not transition or \
                transition.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise RuntimeError(f"end offsets for a transition that is not a pending "
                               f"PrepareCommit or PrepareAbort: {transition}")
        t = transition
        md.pending = new_transition((
            t.transactional_id, t.producer_id, t.last_producer_id, t.producer_epoch,
            t.last_producer_epoch, t.txn_timeout_ms, t.state, t.partitions, t.txn_start_ms,
            t.txn_last_update_ms, t.next_producer_id, t.txn_version,
            tuple(sorted(end_offsets.items()))))
        return md.pending

    def _bumped(self, md: TxnMetadata) -> dict[str, Any]:
        """The changes of a transaction-version-2 end: the epoch + 1, or, when it is exhausted,
        the last epoch and a fresh id the client continues with at epoch 0."""
        if md.producer_epoch >= EPOCH_EXHAUSTED:
            changes: dict[str, Any] = dict(producer_epoch=INT16_MAX,
                                           next_producer_id=self._next_producer_id())
        else:
            changes = dict(producer_epoch=md.producer_epoch + 1)
        return dict(last_producer_epoch=md.producer_epoch, txn_version=2, **changes)

    def producer_after_end(self, transactional_id: str) -> tuple[int, int]:
        """The producer id and epoch a transaction-version-2 client continues with after the
        EndTxn that ended the id's last transaction (EndTxn v5's answer)."""
        md = self._txns.get(transactional_id)
        if md is None:
            return NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if md.next_producer_id != NO_PRODUCER_ID:
            return md.next_producer_id, 0
        return md.producer_id, md.producer_epoch

    def prepare_fenced_abort(self, transactional_id: str, now_ms: int) -> TxnTransition | None:
        """The coordinator aborts an Ongoing transaction by itself: bump the epoch
        (PrepareEpochFence) and go to PrepareAbort with it. None if there is nothing to abort
        (not Ongoing, or a transition is pending)."""
        md = self._txns.get(transactional_id)
        if md is None or md.pending is not None or md.state is not TxnState.ONGOING:
            return None
        if md.producer_epoch >= INT16_MAX:
            raise RuntimeError(f"cannot fence {transactional_id!r}: epoch {md.producer_epoch}")
        check_transition(transactional_id, md.state, TxnState.PREPARE_EPOCH_FENCE)
        fence = md._target(TxnState.PREPARE_EPOCH_FENCE, now_ms,
                           producer_epoch=md.producer_epoch + 1,
                           last_producer_epoch=NO_PRODUCER_EPOCH)
        # The fence itself is never stored: the abort continues from it with the new epoch.
        check_transition(transactional_id, fence.state, TxnState.PREPARE_ABORT)
        md.pending = fence._replace(state=TxnState.PREPARE_ABORT)
        return md.pending

    def prepare_abort_of_lost_commit(
        self, transactional_id: str, now_ms: int
    ) -> TxnTransition | None:
        """Recovery after a machine restart: abort a PrepareCommit whose round a power cut left
        not whole (``lost_commits``: the record durable, the end of a data partition lost). Its
        EndTxn was never answered (the answer waits for the whole round), so the commit may
        still become an abort, with the epoch bumped first (PrepareEpochFence, as
        ``prepare_fenced_abort``): the producer's retried EndTxn is fenced instead of answered
        as a retry of a commit that is not whole. The bumped epoch forgets the producer's own
        (``last_producer_epoch`` -1) so that no EndTxn is taken for a retry. A transaction-
        version-2 commit that exhausted the epoch (at 32767 already, above the producer's) keeps
        it and drops the producer id it would have moved to: the next InitProducerId rotates.
        None if the id is not in PrepareCommit with nothing pending."""
        md = self._txns.get(transactional_id)
        if md is None or md.pending is not None or md.state is not TxnState.PREPARE_COMMIT:
            return None
        check_transition(transactional_id, md.state, TxnState.PREPARE_EPOCH_FENCE)
        fence = md._target(TxnState.PREPARE_EPOCH_FENCE, now_ms,
                           producer_epoch=min(md.producer_epoch + 1, INT16_MAX),
                           last_producer_epoch=NO_PRODUCER_EPOCH,
                           next_producer_id=NO_PRODUCER_ID)
        check_transition(transactional_id, fence.state, TxnState.PREPARE_ABORT)
        md.pending = fence._replace(state=TxnState.PREPARE_ABORT)
        return md.pending

    def prepare_restart_fence(
        self, transactional_id: str, now_ms: int
    ) -> TxnTransition | None:
        """Recovery after a machine restart: fence the producer of an id with no transaction
        recorded (Empty, CompleteCommit, CompleteAbort; nothing pending). Its next transaction
        may have begun before the power cut, its add record and batches answered once appended
        and lost with the page cache: an EndTxn(commit) from it would be taken for a retry of
        the last one and answered NONE, or an AddPartitionsToTxn would start a transaction
        without the lost batches. The epoch is bumped (``last_producer_epoch`` -1: nothing is a
        retry any more), state Empty, as an InitProducerId would leave it but answered to no
        one: every request of the old instance is fenced (INVALID_PRODUCER_EPOCH /
        PRODUCER_FENCED) and its application initializes again. An exhausted epoch rotates to a
        new producer id at epoch 0 instead. None if the id is not in such a state."""
        md = self._txns.get(transactional_id)
        if md is None or md.pending is not None or md.state not in _NOTHING_STARTED \
                or md.producer_epoch < 0:
            return None
        if md.producer_epoch + 1 >= EPOCH_EXHAUSTED:
            target = md._target(TxnState.EMPTY, now_ms, producer_id=self._next_producer_id(),
                                last_producer_id=md.producer_id, producer_epoch=0,
                                last_producer_epoch=NO_PRODUCER_EPOCH, partitions=frozenset(),
                                txn_start_ms=-1, next_producer_id=NO_PRODUCER_ID)
        else:
            target = md._target(TxnState.EMPTY, now_ms, producer_epoch=md.producer_epoch + 1,
                                last_producer_epoch=NO_PRODUCER_EPOCH, partitions=frozenset(),
                                txn_start_ms=-1, next_producer_id=NO_PRODUCER_ID)
        return self._prepare(md, target)

    def prepare_complete(self, transactional_id: str, now_ms: int) -> TxnTransition:
        """CompleteCommit / CompleteAbort once every marker is durable."""
        md = self._txns[transactional_id]
        if md.pending is not None:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "a transition is in progress")
        target = (TxnState.COMPLETE_COMMIT if md.state is TxnState.PREPARE_COMMIT
                  else TxnState.COMPLETE_ABORT)
        if md.next_producer_id != NO_PRODUCER_ID:
            # Transaction version 2, epoch exhausted: switch to the new producer id at epoch 0;
            # the old id and the epoch the EndTxn carried stay as "last" for its retries.
            return self._prepare(md, md._target(
                target, now_ms, partitions=frozenset(), producer_id=md.next_producer_id,
                producer_epoch=0, last_producer_id=md.producer_id,
                next_producer_id=NO_PRODUCER_ID))
        return self._prepare(md, md._target(target, now_ms, partitions=frozenset(),
                                            last_producer_id=md.last_producer_id))

    def prepare_dead(self, transactional_id: str, now_ms: int) -> TxnTransition | None:
        """Expire an idle id (tombstone). None if it is busy after all."""
        md = self._txns.get(transactional_id)
        if md is None or md.pending is not None or md.state not in EXPIRABLE_STATES:
            return None
        return self._prepare(md, md._target(TxnState.DEAD, md.txn_last_update_ms))

    def knows_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, tp: TopicPartition
    ) -> bool:
        """Whether a WriteTxnMarkers marker matches a transaction this coordinator runs: same
        producer id and epoch, the partition in the transaction, and an outcome the transaction
        can still have (Ongoing: either; PrepareCommit: COMMIT; PrepareAbort: ABORT). Anything
        else would be a forged marker (WriteTxnMarkers is inter-broker in Kafka)."""
        allowed = {
            TxnState.ONGOING: (True, False),
            TxnState.PREPARE_COMMIT: (True,),
            TxnState.PREPARE_ABORT: (False,),
        }
        for md in self._txns.values():
            if md.producer_id == producer_id and md.producer_epoch == producer_epoch:
                return commit in allowed.get(md.state, ()) and tp in md.partitions
        return False

    def runs_on(self, producer_id: int, tp: TopicPartition) -> bool:
        """Whether a transaction this coordinator has not finished (Ongoing, PrepareCommit,
        PrepareAbort) of ``producer_id`` includes ``tp``. An open transaction on a partition
        that no coordinator runs is *hanging* (a marker was lost): only an ABORT marker sent by
        an operator (``transactions abort --topic --partition``) can end it."""
        unfinished = (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
        return any(
            md.producer_id == producer_id and md.state in unfinished and tp in md.partitions
            for md in self._txns.values()
        )

    def holder(self, producer_id: int, producer_epoch: int) -> str | None:
        """The transactional id whose producer is ``producer_id`` at ``producer_epoch`` with no
        transaction (Empty, CompleteCommit, CompleteAbort; nothing pending): the producer may
        still believe in a transaction the coordinator has no record of (recovery then records
        and aborts it). None if there is none."""
        for md in self._txns.values():
            if (md.producer_id == producer_id and md.producer_epoch == producer_epoch
                    and md.producer_epoch < INT16_MAX  # (a fenced abort needs an epoch left)
                    and md.pending is None and md.state in _NOTHING_STARTED):
                return md.transactional_id
        return None

    # -- the periodic task -------------------------------------------------------------------

    def timed_out(self, now_ms: int) -> list[str]:
        """Ongoing transactions older than their timeout (to abort with an epoch bump)."""
        return [
            md.transactional_id
            for md in self._txns.values()
            if md.state is TxnState.ONGOING
            and md.pending is None
            and md.txn_start_ms + md.txn_timeout_ms < now_ms
        ]

    def ongoing(self) -> list[str]:
        """Ongoing transactions with nothing in flight (recovery after an unclean shutdown
        aborts them: batches they were told were appended may be lost)."""
        return [md.transactional_id for md in self._txns.values()
                if md.state is TxnState.ONGOING and md.pending is None]

    def unfinished(self) -> list[str]:
        """Transactions whose outcome is decided but not yet complete (markers to write)."""
        return [
            md.transactional_id
            for md in self._txns.values()
            if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) and md.pending is None
        ]

    def lost_commits(
        self, log_end_offset: Callable[[TopicPartition], int | None]
    ) -> dict[str, list[tuple[TopicPartition, int, int]]]:
        """PrepareCommit transactions (nothing pending) that are not whole: a data partition
        whose log end offset now (``log_end_offset``; None: the partition is gone) is below the
        one the record carries, so the end of the transaction's batches there was lost (a power
        cut between the fsyncs of the round that synced the record and the data). Each with
        ``(partition, recorded end, end found)`` of the short partitions. Only meaningful at
        recovery after a machine restart, before anything is appended; a record without end
        offsets (an older version) is never listed."""
        out: dict[str, list[tuple[TopicPartition, int, int]]] = {}
        for md in self._txns.values():
            if md.state is not TxnState.PREPARE_COMMIT or md.pending is not None:
                continue
            short = []
            for tp, recorded in md.end_offsets:
                found = log_end_offset(tp)
                if found is not None and found < recorded:
                    short.append((tp, recorded, found))
            if short:
                out[md.transactional_id] = short
        return out

    def expired(self, now_ms: int) -> list[str]:
        """Idle ids past ``transactional.id.expiration.ms`` with nothing in flight."""
        limit = self.config.transactional_id_expiration_ms
        return [
            md.transactional_id
            for md in self._txns.values()
            if md.state in EXPIRABLE_STATES
            and md.pending is None
            and md.txn_last_update_ms + limit <= now_ms
        ]

    # -- the Produce path (KIP-890 part 1) ---------------------------------------------------

    def _producer_of(self, transactional_id: str, producer_id: int,
                     producer_epoch: int) -> TxnMetadata:
        """The id's metadata when ``producer_id`` at ``producer_epoch`` or later is its producer
        (a newer epoch than the coordinator's is the caller's to judge). Raises
        INVALID_PRODUCER_ID_MAPPING (an unknown id, another producer) or INVALID_PRODUCER_EPOCH
        (the producer was replaced, or its epoch is older: fenced)."""
        md = self._txns.get(transactional_id)
        if md is None:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                             f"no producer id for {transactional_id!r}")
        if md.producer_id != producer_id:
            if producer_id == md.last_producer_id:
                raise _fenced(f"producer {producer_id} of {transactional_id!r} was replaced")
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                f"{transactional_id!r} belongs to producer {md.producer_id}, not {producer_id}",
            )
        if producer_epoch < md.producer_epoch:
            raise _fenced(
                f"producer {producer_id} epoch {producer_epoch} is older than {md.producer_epoch}"
            )
        return md

    def prepare_produce(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition,
        now_ms: int,
    ) -> TxnTransition | None:
        """Transaction version 2 (Produce v12): the first transactional batch for a partition adds
        it to the producer's transaction (starting one if none is Ongoing), as AddPartitionsToTxn
        did. None: it is in the Ongoing transaction already. Raises INVALID_PRODUCER_ID_MAPPING,
        INVALID_PRODUCER_EPOCH (a stale epoch: a late batch of an ended transaction, or a zombie),
        INVALID_TXN_STATE (an epoch the coordinator never handed out) or CONCURRENT_TRANSACTIONS
        (the previous transaction is still completing)."""
        md = self._producer_of(transactional_id, producer_id, producer_epoch)
        if producer_epoch > md.producer_epoch:
            raise KafkaError(
                ErrorCode.INVALID_TXN_STATE,
                f"{transactional_id!r} has no epoch {producer_epoch} (current "
                f"{md.producer_epoch})",
            )
        if md.state is TxnState.ONGOING and tp in md.partitions and md.pending is None:
            return None
        return self.prepare_add_partitions(transactional_id, producer_id, producer_epoch, [tp],
                                           now_ms)

    def verify_produce(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> None:
        """A transactional batch may be written only to a partition of its producer's Ongoing
        transaction, not while its end is pending. Raises INVALID_PRODUCER_ID_MAPPING (unknown id or producer),
        INVALID_PRODUCER_EPOCH (a fenced producer) or INVALID_TXN_STATE."""
        md = self._producer_of(transactional_id, producer_id, producer_epoch)
        if producer_epoch > md.producer_epoch or md.state is not TxnState.ONGOING:
            raise KafkaError(
                ErrorCode.INVALID_TXN_STATE,
                f"{transactional_id!r} has no ongoing transaction for epoch {producer_epoch}",
            )
        if md.pending is not None:
            # Its end is being made durable (PrepareCommit/PrepareAbort, or a fencing abort):
            # the Prepare record covers only what was appended before it, so a batch now would
            # be answered as part of a transaction whose commit cannot include it.
            raise KafkaError(
                ErrorCode.INVALID_TXN_STATE,
                f"the transaction of {transactional_id!r} is ending "
                f"({md.pending.state.display_name})",
            )
        if tp not in md.partitions:
            raise KafkaError(
                ErrorCode.INVALID_TXN_STATE,
                f"{tp[0]}-{tp[1]} was not added to the transaction of {transactional_id!r}",
            )


# States in which a producer's current epoch has no transaction (yet).
_NOTHING_STARTED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
_ENDED_STATES = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT,
                           TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
# States a transaction-version-2 EndTxn leaves an id in once complete.
_ENDED_BY_CLIENT = _NOTHING_STARTED - {TxnState.EMPTY}


def _outcome_is_commit(state: TxnState) -> bool:
    return state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)


def _valid_expected_producer(md: TxnMetadata, expected: tuple[int, int]) -> bool:
    """KIP-360: whether an InitProducerId naming ``expected`` may go on (else it is fenced)."""
    producer_id, epoch = expected
    return (
        md.producer_epoch == NO_PRODUCER_EPOCH  # just created: a producer recovering from
        # UNKNOWN_PRODUCER_ID may have the new id
        or producer_id == md.producer_id  # the epoch is checked when bumping
        or (producer_id == md.last_producer_id and epoch >= EPOCH_EXHAUSTED)  # retry of a rotation
    )
