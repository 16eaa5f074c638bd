"""Recovery of the transaction coordinator at start: the part of ``TransactionManager`` that
runs once, before the broker serves (the manager inherits it; ``broker/txn/manager.py`` is the
serving part).

``recover`` (called by the root before the broker serves): replay
``__transaction_state``. When writes not yet fsynced may have been lost (an unclean shutdown
after which the machine restarted: ``LogManager.unsynced_writes_lost``), first, before any
marker is written, abort with an epoch bump every PrepareCommit that is not whole
(``_abort_not_whole``: its record carries each data partition's log end offset when it was
appended, and a partition came back shorter: a power cut between the fsyncs of the round that
synced the record and the data; its EndTxn was never answered, so the producer's retry is
fenced instead of answered NONE for a commit missing records); then abort every Ongoing
transaction with an epoch bump (its batches were answered once appended and may be lost: the
producer gets INVALID_PRODUCER_EPOCH / PRODUCER_FENCED, as for a transaction the coordinator
aborted on timeout, and re-initializes). After a kill -9 on the same boot the page cache kept
every write, so neither happens: ongoing transactions go on, as on a Kafka broker restart.
Then finish every transaction found in PrepareCommit or PrepareAbort (markers, then
Complete*), synchronously; after a machine restart, not on a partition where its marker is
already written and followed by the producer's next transaction (``_marked_ahead``: a power
cut between the fsyncs of one round lost the Complete record, not the next batch; the marker
written again would end that transaction too). The data partitions already rebuilt their
open transactions and LSOs when they were loaded. After a machine restart, last, abort the
transactions partitions have open that the coordinator does not run there (``abort_hanging``:
a power cut between the fsyncs of one round lost the record that added the partition, or the
Complete record before it, not the batch), fencing their producer if it still holds that
epoch. Then, still only after a machine restart, fence every other producer
(``_fence_after_restart``: an epoch bump, state Empty): a transaction begun before the cut
may have lost its add records and its answered batches with the page cache, and its
EndTxn(commit) would otherwise be taken for a retry of the previous commit (issue 42). One
fsync round at start; nothing on the serving path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.log.partition import Partition
from broker.log.topics import TRANSACTION_STATE_TOPIC, TopicPartition
from broker.txn.markers import COORDINATOR_EPOCH
from broker.txn.state import TxnState
from protocol.errors import CorruptFrameError, KafkaError
from protocol.records import iter_batches_untrusted

if TYPE_CHECKING:
    from broker.storage import Commit, Storage
    from broker.txn.coordinator import TransactionCoordinator
    from broker.txn.markers import MarkerWrite, MarkerWriter
    from broker.txn.metadata import TxnMetadata, TxnTransition
    from broker.txn.txn_log import TxnLog

log = logging.getLogger("minibroker.txn")


@dataclass(frozen=True)
class TxnRecovery:
    records: int  # transaction-log records replayed
    transactional_ids: int
    completed: int  # transactions found prepared and completed
    aborted: int = 0  # Ongoing transactions aborted after an unclean shutdown
    hanging: int = 0  # transactions open on partitions with no coordinator, aborted (the same)
    # PrepareCommit transactions a power cut left not whole (a data partition came back shorter
    # than the record says), aborted instead (the same)
    not_whole: int = 0
    # partitions of a prepared transaction whose marker was found written and followed by the
    # producer's next transaction (its Complete record lost): not written again (the same)
    marked: int = 0
    # producers of ids with no transaction recorded, fenced after a machine restart (the same)
    fenced: int = 0


def _control_batch_of(p: Partition, producer_id: int, start: int, stop: int) -> bool:
    """Whether a control batch (a transaction marker) of ``producer_id`` lies in ``p`` between
    the offsets ``start`` and ``stop`` (recovery: reads the batch headers of that stretch).
    False if it cannot be read."""
    offset = max(start, p.log_start_offset)
    try:
        while offset < stop:
            data = p.read(offset, 1 << 16, stop)
            if not data:
                return False
            for _, header in iter_batches_untrusted(data):
                if header.is_control and header.producer_id == producer_id:
                    return True
                offset = header.last_offset + 1
    except (KafkaError, CorruptFrameError):
        return False
    return False


class Recovery:
    """``recover`` and its steps. What they use of the manager: its coordinator, log, storage
    and marker writer, and its two-phase steps (declared here for the type checker)."""

    coordinator: TransactionCoordinator
    log: TxnLog
    markers: MarkerWriter
    _storage: Storage
    recovery: TxnRecovery | None
    _fence_when_complete: set[str]

    if TYPE_CHECKING:
        def _commit(
            self, transition: TxnTransition, now_ms: int, data: Iterable[Partition] = (),
            then: Callable[[bool], None] | None = None,
        ) -> Commit: ...
        def _apply(self, transition: TxnTransition, now_ms: int) -> Partition: ...
        def _abort(self, abort: TxnTransition, now_ms: int) -> Commit: ...
        def _fenced_abort(self, transactional_id: str, now_ms: int) -> Commit | None: ...
        def _start_markers(self, transactional_id: str, now_ms: int, answered: bool = False,
                           skip: frozenset[TopicPartition] = frozenset()) -> MarkerWrite | None: ...

    def recover(self, now_ms: int, unclean: bool = False) -> TxnRecovery:
        """Replay ``__transaction_state``; ``unclean`` (writes not yet fsynced may be lost: an
        unclean shutdown, then a machine restart): abort every PrepareCommit that is not whole
        (``_abort_not_whole``) and every Ongoing transaction; then complete every prepared one
        (``unclean``: but where its marker is already followed by the next transaction,
        ``_marked_ahead``); then, ``unclean``, abort the hanging ones (``abort_hanging``). At
        start, no loop."""
        self.recovery = self._recover(now_ms, unclean)
        return self.recovery

    def _recover(self, now_ms: int, unclean: bool) -> TxnRecovery:
        records = 0
        for transactional_id, transition in self.log.replay():
            self.coordinator.load(transactional_id, transition)
            records += 1
        # Each id's producer as the log left it: after a machine restart, every one that
        # recovery does not fence on the way is fenced at the end (``_fence_after_restart``).
        replayed = {md.transactional_id: (md.producer_id, md.producer_epoch)
                    for md in self.coordinator.transactions()}
        aborted = not_whole = 0
        if unclean:
            # First, before any marker is appended: the end offsets found are the recovered ones.
            not_whole = self._abort_not_whole(now_ms)
            for transactional_id in self.coordinator.ongoing():
                if self._fenced_abort(transactional_id, now_ms) is not None:
                    aborted += 1
                    log.info("recovery: aborting the ongoing transaction of %r (unclean "
                             "shutdown and a machine restart: its batches may be lost)",
                             transactional_id)
            self._storage.settle()  # the PrepareAbort records, and their markers
        prepared = {}
        marked: dict[str, list[tuple[TopicPartition, int, int]]] = {}
        for transactional_id in self.coordinator.unfinished():
            md = self.coordinator.get(transactional_id)
            if md is None:
                continue
            prepared[transactional_id] = (md.state is TxnState.PREPARE_COMMIT, md.producer_id,
                                          md.producer_epoch, len(md.partitions))
            if unclean:  # (before any marker of this loop is appended)
                marked[transactional_id] = self._marked_ahead(md)
        for transactional_id, (commit, producer_id, epoch, _) in prepared.items():
            ahead = marked.get(transactional_id)
            if ahead:
                log.warning("recovery: the %s marker of %r (producer %d epoch %d) is already "
                            "on %s, followed by the producer's next transaction (its Complete "
                            "record lost in a machine restart): not written again there, the "
                            "next transaction is aborted as hanging",
                            "COMMIT" if commit else "ABORT", transactional_id, producer_id,
                            epoch, ", ".join(f"{t}-{i} (recorded end {end}, next transaction "
                                             f"from {first})" for (t, i), end, first in ahead))
            self._start_markers(transactional_id, now_ms,
                                skip=frozenset(tp for tp, _, _ in ahead or ()))
        self._storage.settle()  # the markers: their callbacks append the Complete records
        left = set(self.coordinator.unfinished())
        for transactional_id, (commit, producer_id, epoch, count) in prepared.items():
            if transactional_id in left:
                log.error("recovery: the markers of %r failed; the periodic task retries",
                          transactional_id)
            else:
                log.info("recovery: completed %s of %r (producer %d epoch %d, %d partitions)",
                         "commit" if commit else "abort", transactional_id, producer_id, epoch,
                         count)
        completed = len(prepared) - len(left & prepared.keys())
        # After the skipped markers: the next transaction open there is hanging now.
        hanging = self.abort_hanging(now_ms) if unclean else 0
        fenced = self._fence_after_restart(replayed, now_ms) if unclean else 0
        skipped = sum(len(ahead) for ahead in marked.values())
        if records or hanging:
            log.info("transaction log: %d records, %d transactional ids, %d prepared "
                     "transactions completed (%d markers found already written), %d commits "
                     "not whole aborted, %d ongoing ones aborted, %d hanging ones aborted, "
                     "%d idle producers fenced", records, len(self.coordinator), completed,
                     skipped, not_whole, aborted, hanging, fenced)
        return TxnRecovery(records, len(self.coordinator), completed, aborted, hanging, not_whole,
                           skipped, fenced)

    def _fence_after_restart(self, replayed: dict[str, tuple[int, int]], now_ms: int) -> int:
        """After a machine restart, last: fence the producer of every id that recovery did not
        already fence (an ongoing, not-whole or hanging transaction bumped its epoch), Empty,
        CompleteCommit or CompleteAbort now (``prepare_restart_fence``); returns how many.

        Records that add partitions to a transaction are answered once appended (durable with
        its Prepare record, one fsync round per transaction), and so are its batches; a power
        cut can take the record and the batches of a transaction under way while the
        coordinator's durable state shows the previous one complete at the same epoch. Nothing
        on disk then tells whether that producer had begun another transaction, so every
        producer whose epoch the log shows with no transaction is fenced: its EndTxn(commit)
        would otherwise be answered as a retry of the last commit (DESIGN.md section 3) and its
        next AddPartitionsToTxn would start a transaction without the lost batches. The
        records are committed in one round (``settle``); only a machine restart pays it."""
        fenced = 0
        for transactional_id, before in sorted(replayed.items()):
            md = self.coordinator.get(transactional_id)
            if md is None or (md.producer_id, md.producer_epoch) != before:
                continue  # gone, or fenced on the way
            if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                # Its markers failed: fenced once the periodic task completes it.
                self._fence_when_complete.add(transactional_id)
                continue
            try:
                fence = self.coordinator.prepare_restart_fence(transactional_id, now_ms)
                if fence is None:
                    continue
                self._commit(fence, now_ms)
            except KafkaError as exc:
                log.error("recovery: fencing the producer of %r failed: %s", transactional_id,
                          exc)
                continue
            fenced += 1
        if fenced:
            self._storage.settle()
            log.info("recovery: fenced the producers of %d transactional ids with no transaction "
                     "recorded (a machine restart: a transaction begun before it may have lost "
                     "its answered batches and its add records)", fenced)
        return fenced

    def _marked_ahead(self, md: TxnMetadata) -> list[tuple[TopicPartition, int, int]]:
        """The partitions of the prepared transaction ``md`` whose marker is already written
        and followed by an open transaction of the same producer, which the marker written
        again would end too (recovery after a machine restart); each with ``(partition,
        recorded end offset, first offset of the open transaction)``.

        The markers of a transaction are durable before its Complete record is appended, and
        the producer's next transaction starts after that record; but a group-commit round that
        syncs a batch of the next transaction syncs its partition and ``__transaction_state``
        side by side, so a power cut can keep the marker and the batch and lose the Complete
        record. Its Prepare record carries each partition's log end offset when it was appended
        (``end_offsets``): every batch of the transaction lies below it but for one accepted
        while the record was being synced, and its marker at or above it. A torn tail is
        truncated at the first bad batch, so an open transaction of the producer that starts at
        or beyond the recorded end, with a control batch of the producer between the two, is
        the next transaction, behind this one's marker. Where none is found the open
        transaction is this one's (its marker lost), and the marker is written. A record without
        end offsets (an older version, or an abort the coordinator started with an epoch bump,
        which no later batch of that epoch can follow) finds nothing."""
        out = []
        for tp, recorded in md.end_offsets:
            try:
                p = self._storage.partition(*tp)
            except KafkaError:
                continue  # deleted: its marker reports it
            entry = p.producers.get(md.producer_id)
            first = None if entry is None else entry.current_txn_first_offset
            if first is not None and first >= recorded and \
                    _control_batch_of(p, md.producer_id, recorded, first):
                out.append((tp, recorded, first))
        return out

    def _abort_not_whole(self, now_ms: int) -> int:
        """After a machine restart, abort every PrepareCommit transaction that is not whole;
        returns how many.

        EndTxn(commit) commits its PrepareCommit record and the transaction's data partitions
        in one group-commit round whose fdatasyncs run side by side, so a power cut inside the
        round can keep the record and lose the end of a partition's batches. The record carries
        each data partition's log end offset when it was appended; a partition recovered
        shorter lost batches the commit would cover. That EndTxn was never answered (its answer
        waits for the whole round), so the transaction is aborted instead, with an epoch bump
        as for an ongoing one: the producer's retried EndTxn is fenced and its application
        initializes again, instead of a commit answered NONE that lacks records. A record
        without end offsets (written by an older version) completes as before."""
        def log_end_offset(tp: TopicPartition) -> int | None:
            try:
                return self._storage.partition(*tp).log_end_offset
            except KafkaError:
                return None  # deleted: its marker reports it

        not_whole = self.coordinator.lost_commits(log_end_offset)
        for transactional_id, short in sorted(not_whole.items()):
            md = self.coordinator.get(transactional_id)
            abort = self.coordinator.prepare_abort_of_lost_commit(transactional_id, now_ms)
            if md is None or abort is None:
                continue
            log.warning("recovery: the commit of %r (producer %d epoch %d) is not whole after a "
                        "machine restart: %s; it was never answered, aborting it with an epoch "
                        "bump", transactional_id, md.producer_id, md.producer_epoch,
                        ", ".join(f"{t}-{i} ends at {found}, the PrepareCommit record says "
                                  f"{recorded}" for (t, i), recorded, found in short))
            try:
                self._abort(abort, now_ms)
            except KafkaError as exc:
                log.error("recovery: aborting the transaction of %r failed: %s",
                          transactional_id, exc)
        return len(not_whole)

    def abort_hanging(self, now_ms: int) -> int:
        """Abort every transaction a partition has open that this coordinator does not run
        there (recovery after a machine restart, once the ongoing transactions are aborted and
        the prepared ones completed); returns how many (one per producer and epoch).

        Records that add a partition to a transaction are not committed on their own, so a
        power cut can take one while a batch it admitted survived (synced in the same round, the
        cut falling between their fsyncs): the partition's LSO would then hang and
        read_committed readers wait forever (Kafka's hanging transaction, KIP-664, which an
        operator ends with ``kafka-transactions.sh abort``). Here recovery ends it: an ABORT
        marker with the producer id and the epoch of the partition's producer state. When that
        producer still holds that epoch at the coordinator (it believes its transaction open,
        and a commit of it would be answered as a retry of the last one), the transaction is
        recorded with those partitions and aborted with an epoch bump instead, as every ongoing
        transaction after an unclean restart: the producer is fenced and initializes again.
        Harmless where nothing hangs: a transaction the coordinator runs is left alone."""
        hanging: dict[tuple[int, int], list[TopicPartition]] = {}
        for partition in self._storage.logs.all_partitions():
            if partition.topic == TRANSACTION_STATE_TOPIC:
                continue
            tp = (partition.topic, partition.index)
            for producer_id in partition.producers.open_transactions():
                entry = partition.producers.get(producer_id)
                if entry is None or self.coordinator.runs_on(producer_id, tp):
                    continue
                hanging.setdefault((producer_id, entry.producer_epoch), []).append(tp)
        for (producer_id, epoch), partitions in sorted(hanging.items()):
            holder = self.coordinator.holder(producer_id, epoch)
            names = ", ".join(f"{t}-{i}" for t, i in partitions)
            if holder is not None:
                log.info("recovery: aborting the transaction of %r (producer %d epoch %d) "
                         "found open on %s with its record lost (a machine restart); its "
                         "producer is fenced", holder, producer_id, epoch, names)
                try:
                    recorded = self.coordinator.prepare_add_partitions(
                        holder, producer_id, epoch, partitions, now_ms)
                    if recorded is not None:  # (None only if it were Ongoing with them)
                        self._apply(recorded, now_ms)
                    self._fenced_abort(holder, now_ms)
                except KafkaError as exc:
                    log.error("recovery: aborting the transaction of %r failed: %s", holder, exc)
                continue
            log.info("recovery: aborting the hanging transaction of producer %d epoch %d on %s "
                     "(no coordinator runs it there)", producer_id, epoch, names)
            self.markers.write(producer_id, epoch, False, COORDINATOR_EPOCH, partitions, now_ms)
        self._storage.settle()  # the PrepareAbort records and the markers (as above)
        return len(hanging)

