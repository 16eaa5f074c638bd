"""A transactional id's metadata and its transitions: what the coordinator (``coordinator.py``)
holds per id and what the transaction log (``txn_log.py``) stores. Pure data, no rules: the
rules that change it are the coordinator's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from broker.log.topics import TopicPartition
from broker.txn.state import TxnState
from protocol.records import NO_PRODUCER_ID
from protocol.trusted import trusted

INT16_MAX = 32767
# Kafka's TransactionMetadata.isEpochExhausted: at 32766 the last epoch is kept for fencing.
EPOCH_EXHAUSTED = INT16_MAX - 1


@dataclass(frozen=True)
class TxnConfig:
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000


class TxnTransition(NamedTuple):
    """The complete metadata of a transactional id after a transition (what the log stores).
    Immutable."""

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    txn_start_ms: int  # when the first partition joined the current transaction; -1 if none
    txn_last_update_ms: int
    # Transaction version 2 (KIP-890 part 2): the producer id the client continues with once a
    # Prepare that exhausted the epoch completes; -1 otherwise.
    next_producer_id: int = NO_PRODUCER_ID
    # The transaction version the last EndTxn spoke (1, or 2: that EndTxn bumped the epoch).
    txn_version: int = 1
    # The Prepare record of a client's EndTxn only: ((topic, partition), log end offset) of each
    # data partition of the transaction when the record was appended, sorted: what a commit's
    # group-commit round makes durable (the end covers the transaction's batches, the markers
    # follow it). Recovery after a machine restart aborts a commit if a partition came back
    # shorter (``lost_commits``), and does not write a marker again where the producer's next
    # transaction already follows it (``TransactionManager._marked_ahead``). Empty otherwise.
    end_offsets: tuple[tuple[TopicPartition, int], ...] = ()


new_transition = trusted(TxnTransition)


@dataclass(eq=False)
class TxnMetadata:
    """The coordinator's live view of one transactional id (mutated by ``complete``; the
    prepares set only ``pending`` and ``commit_ahead_ms``)."""

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    txn_start_ms: int
    txn_last_update_ms: int
    next_producer_id: int = NO_PRODUCER_ID
    txn_version: int = 1
    end_offsets: tuple[tuple[TopicPartition, int], ...] = ()
    pending: TxnTransition | None = field(default=None)
    # When a transaction-version-2 commit first arrived ahead of its transaction's first batch
    # (the current epoch, no transaction begun: ``prepare_end_txn``); -1: none since the last
    # transition. Not stored: ``complete`` clears it, a replay starts without it.
    commit_ahead_ms: int = -1

    @classmethod
    def from_transition(cls, t: TxnTransition) -> TxnMetadata:
        return cls(t.transactional_id, t.producer_id, t.last_producer_id, t.producer_epoch,
                   t.last_producer_epoch, t.txn_timeout_ms, t.state, t.partitions,
                   t.txn_start_ms, t.txn_last_update_ms, t.next_producer_id, t.txn_version,
                   t.end_offsets)

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= EPOCH_EXHAUSTED

    def summary(self) -> str:
        """One line for the log: the producer, its state and what is pending."""
        pending = self.pending.state.display_name if self.pending else None
        return (f"producer {self.producer_id} epoch {self.producer_epoch} (last "
                f"{self.last_producer_id} epoch {self.last_producer_epoch}), "
                f"{self.state.display_name}, txn version {self.txn_version}, pending {pending}")

    def _target(
        self, state: TxnState, now_ms: int, *, producer_id: int | None = None,
        last_producer_id: int | None = None, producer_epoch: int | None = None,
        last_producer_epoch: int | None = None, txn_timeout_ms: int | None = None,
        partitions: frozenset[TopicPartition] | None = None, txn_start_ms: int | None = None,
        next_producer_id: int | None = None, txn_version: int | None = None,
    ) -> TxnTransition:
        """The metadata in ``state`` at ``now_ms`` with the fields given changed (None: kept;
        named parameters rather than ``_replace(**changes)``, which costs as much again)."""
        return new_transition((
            self.transactional_id,
            self.producer_id if producer_id is None else producer_id,
            # Kafka records the producer id the transition starts from as the "last" one.
            self.producer_id if last_producer_id is None else last_producer_id,
            self.producer_epoch if producer_epoch is None else producer_epoch,
            self.last_producer_epoch if last_producer_epoch is None else last_producer_epoch,
            self.txn_timeout_ms if txn_timeout_ms is None else txn_timeout_ms,
            state,
            self.partitions if partitions is None else partitions,
            self.txn_start_ms if txn_start_ms is None else txn_start_ms,
            now_ms,  # txn_last_update_ms
            self.next_producer_id if next_producer_id is None else next_producer_id,
            self.txn_version if txn_version is None else txn_version,
            (),  # end_offsets: not carried over, only a Prepare record has them
        ))


@dataclass(frozen=True)
class AbortFirst:
    """InitProducerId met an Ongoing transaction: the caller must run the fenced abort of it
    (``prepare_fenced_abort`` ...) and then prepare the InitProducerId again."""

    transactional_id: str
