"""The trio side of the transaction coordinator: persist, complete, markers, timers, recovery.

``TransactionCoordinator`` (pure) decides; this class does what needs the disk and the clock.
Every transition goes one way (``_commit``): prepare (the id answers CONCURRENT_TRANSACTIONS
meanwhile), append the record to ``__transaction_state``, commit it through ``Storage.commit``
(inline or in a group-commit round: storage decides, nowhere else), then complete it, or abandon
it if the fsync failed, in the commit's callback. Two kinds of record are applied once appended,
without a commit of their own (``_apply``): those that add partitions to a transaction, and the
Complete record. Nothing here fsyncs or asks whether a round is under way.

- InitProducerId answers once its record is durable.
- AddPartitionsToTxn, AddOffsetsToTxn and transaction version 2's implicit add (Produce v12,
  TxnOffsetCommit v5) answer at once: their record becomes durable with the transaction's
  Prepare record (the same partition, appended after it) or any earlier commit of that
  partition; whatever syncs one of the transaction's batches first syncs that partition with it
  (``Storage.sync_together``, tied in ``verify_produce``). A durable one-record transaction so
  costs three fdatasyncs: the PrepareCommit round (the record and the data) and the markers.
- EndTxn: the Prepare record is committed together with the transaction's partitions (its
  transactional batches were answered once appended: they become durable here, in the same
  round, so a transaction waits for one fsync) -> markers appended to every partition of the
  transaction (the ``__consumer_offsets`` partition included) and committed -> the markers'
  ``on_durable`` step (wired by the root: pending offsets materialised or dropped) ->
  CompleteCommit/CompleteAbort appended -> reply. The steps after the Prepare record run in the
  commits' callbacks, so a reply that is never sent (a reset connection) cannot leave a decided
  transaction unfinished. When storage syncs the Prepare record inline, the answer goes out as
  soon as it is durable, and the markers, their fsync and the Complete record follow right after
  it, before anything else runs (``AnswerFirst``; the server runs the finish even when the send
  fails). A marker write
  that failed leaves the transaction prepared (the reply is still NONE: the outcome is decided)
  and the periodic task retries it. The epoch is unchanged by a normal commit or abort.
- InitProducerId of an id with an Ongoing transaction first aborts it with a bumped epoch (the old
  instance is fenced), then bumps the epoch again for the new instance (Kafka makes the client retry
  for that second step; here the request simply waits).
- ``housekeeping(now_ms)``, run by the server every
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms``: aborts Ongoing transactions
  older than their timeout (epoch bump first), finishes PrepareCommit/PrepareAbort left behind
  (a failed marker write), expires idle ids (tombstone).
- Recovery at start (``recover``, called by the root before the broker serves) is
  ``broker/txn/recovery.py``'s: replay ``__transaction_state``, and after a machine restart end
  what the power cut may have left incomplete.

Ordering that makes kill -9 (and power loss) safe: a committed transition's record is durable
before its effects are visible or acknowledged (an add record's effect, a batch, is durable no
earlier than it but for a power cut inside one round: recovery aborts what that leaves open); a
Prepare record is durable, with the transaction's batches and add records, before any of its
markers is written (a power cut inside that round that keeps the PrepareCommit record but not
all of the batches makes recovery abort it); the markers are durable before the Complete record is
written and before any other request is handled. The high watermark (every reader's limit) only
covers synced data, so no reader sees a batch that a power loss could take back.

``verify_produce`` is the KIP-890 part-1 check of the Produce path: a transactional batch must
belong to its producer's Ongoing transaction, with the partition added to it (version 2: added
there).

Collaborators come in through the constructor (built by ``broker/app.py``): the config, the
``Storage``, the producer-id allocator, the clock and the ``MarkerWriter`` (which tells whoever the
root wired in once markers are durable). Recovery runs when the root calls ``recover(now_ms)``,
after the services that must see the markers it writes exist.

Crash points for tests: ``crash_hook(point)`` is called at ``after_prepare_commit`` /
``after_prepare_abort`` (the Prepare record is durable, no marker written yet) and
``after_markers`` (markers durable, no Complete record). Only tests pass a hook (see
``tests/crash_broker.py``); the broker itself passes none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import trio

from broker.clock import Clock
from broker.config import BrokerConfig
from broker.log.partition import Partition
from broker.log.topics import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicPartition
from broker.reply import AnswerFirst, Deferred
from broker.storage import Commit, Storage
from broker.txn.coordinator import TransactionCoordinator
from broker.txn.markers import COORDINATOR_EPOCH, MarkerWrite, MarkerWriter
from broker.txn.metadata import AbortFirst, TxnConfig, TxnMetadata, TxnTransition
from broker.txn.recovery import Recovery, TxnRecovery
from broker.txn.state import TxnState
from broker.txn.txn_log import TxnLog
from protocol.errors import CorruptFrameError, ErrorCode, KafkaError
from protocol.records import (
    ATTRIBUTES_LOW_BYTE_OFFSET,
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_BIT,
    parse_header_untrusted,
)

log = logging.getLogger("minibroker.txn")
_TRANSACTIONAL_NOT_CONTROL = TRANSACTIONAL_BIT | CONTROL_BIT

CRASH_POINTS = frozenset({"after_prepare_commit", "after_prepare_abort", "after_markers"})
# Called with a point of CRASH_POINTS when EndTxn passes it; tests only.
CrashHook = Callable[[str], None]
# Marker errors that leave nothing to retry: the topic is gone, the partition already knows a
# newer epoch of the producer (whose transaction this marker would end is long over), or it is
# the transaction log (the marker writer refuses it: a transaction recorded by an older version
# that let a client add it completes without it).
_MARKER_DONE = frozenset({ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                          ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_TOPIC_EXCEPTION})

T = TypeVar("T")


@dataclass(frozen=True)
class InitResult:
    error_code: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionManager(Recovery):
    """The transaction service (see the module docstring); its recovery at start is
    ``Recovery``'s (``broker/txn/recovery.py``)."""

    def __init__(
        self,
        config: BrokerConfig,
        storage: Storage,
        next_producer_id: Callable[[], int],
        clock: Clock,
        markers: MarkerWriter,
        crash_hook: CrashHook | None = None,
    ) -> None:
        self._storage = storage
        self._clock = clock
        self.markers = markers
        self.coordinator = TransactionCoordinator(
            TxnConfig(config.transaction_max_timeout_ms, config.transactional_id_expiration_ms),
            next_producer_id,
        )
        self.log = TxnLog(storage.logs, config.transaction_state_log_num_partitions,
                          config.transaction_state_log_segment_bytes)
        # ids whose markers are being written right now -> the event set once they are complete,
        # made when someone waits (``_completion``): most transactions complete unwaited for
        self._completing: dict[str, trio.Event | None] = {}
        self._crash_hook = crash_hook
        self.recovery: TxnRecovery | None = None
        # ids recovery after a machine restart could not fence yet (prepared, their markers
        # failed): fenced as soon as they complete (``_markers_decided``)
        self._fence_when_complete: set[str] = set()
        # id -> its __transaction_state partition, for the ids that wrote a record since start
        # (the partitions of their unsynced batches are tied to it: ``verify_produce``)
        self._log_partitions: dict[str, Partition] = {}

    def _after_completion(
        self, transactional_id: str, retry: Callable[[int], Any]
    ) -> Deferred[Any]:
        """A coordinator request for an id whose last transaction is still completing waits for
        that (instead of CONCURRENT_TRANSACTIONS and a client-side retry), then runs again.
        Only for an id in ``_completing``: the callers test that first, so that no ``retry``
        function is made for the usual request."""
        done = self._completion(transactional_id)
        assert done is not None, "not completing"

        async def again() -> Any:
            await done.wait()
            result = retry(self._clock.now_ms())
            return await result.wait() if isinstance(result, Deferred) else result

        return Deferred(again)

    # -- two phases --------------------------------------------------------------------------

    def _begin(self, transition: TxnTransition, now_ms: int) -> Partition:
        """Append the transition's record; abandon the transition if that fails."""
        try:
            partition = self.log.append(transition, now_ms)
        except BaseException:
            self.coordinator.abandon(transition)
            raise
        if transition.state is TxnState.DEAD:
            self._log_partitions.pop(transition.transactional_id, None)
        else:
            self._log_partitions[transition.transactional_id] = partition
        return partition

    def _apply(self, transition: TxnTransition, now_ms: int) -> Partition:
        """Append the transition's record and apply it at once, without committing it: it
        becomes durable with the next commit of its partition (for an added partition, at the
        latest the transaction's Prepare record, appended after it). Raises KafkaError if the
        record cannot be appended (the transition is then abandoned)."""
        partition = self._begin(transition, now_ms)
        self.coordinator.complete(transition)
        return partition

    def _commit(
        self, transition: TxnTransition, now_ms: int, data: Iterable[Partition] = (),
        then: Callable[[bool], None] | None = None,
    ) -> Commit:
        """Append the transition's record and commit it (with ``data``, partitions to make
        durable in the same round); once durable the transition is applied, else abandoned,
        and then ``then(ok)`` runs. Raises KafkaError if the record cannot be appended."""
        partition = self._begin(transition, now_ms)

        def applied(ok: bool) -> None:
            if ok:
                self.coordinator.complete(transition)
            else:
                self.coordinator.abandon(transition)
                log.error("the record of %r is not durable (fdatasync failed); abandoned",
                          transition.transactional_id)
            if then is not None:
                then(ok)

        return self._storage.commit([partition, *data], applied)

    @staticmethod
    def _reply(commit: Commit, value: T, failed: T) -> T | Deferred[T]:
        """``value`` once ``commit`` is durable (``failed`` if it cannot be): now or later."""
        if commit.done:
            return value if commit.ok else failed

        async def answer() -> T:
            return value if await commit.wait() else failed

        return Deferred(answer)

    def _crash_point(self, point: str) -> None:
        if self._crash_hook is not None:
            self._crash_hook(point)

    # -- completing a decided transaction ------------------------------------------------------

    def _start_markers(self, transactional_id: str, now_ms: int, answered: bool = False,
                       skip: frozenset[TopicPartition] = frozenset()) -> MarkerWrite | None:
        """Write the markers of a PrepareCommit/PrepareAbort transaction (but on ``skip``:
        recovery found them written, ``_marked_ahead``); the transaction completes in their
        commit's callback. None if it is not in such a state or someone else is completing
        it."""
        md = self.coordinator.get(transactional_id)
        if (transactional_id in self._completing or md is None or md.pending is not None
                or md.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)):
            return None
        self._completing[transactional_id] = None
        try:
            return self.markers.write(
                md.producer_id, md.producer_epoch, md.state is TxnState.PREPARE_COMMIT,
                COORDINATOR_EPOCH, md.partitions - skip if skip else md.partitions, now_ms,
                lambda written: self._markers_decided(transactional_id, written), answered)
        except BaseException:
            self._completed(transactional_id)
            raise

    def _markers_decided(self, transactional_id: str, written: MarkerWrite) -> None:
        """The markers are durable (or failed): CompleteCommit/CompleteAbort.

        The Complete record is appended but not committed on its own (Kafka does not wait for
        it either): the markers are durable, so losing it only makes recovery write the same
        markers again, and every later record of this id is appended after it to the same
        partition and committed, which makes it durable too. (One fsync less per transaction.)
        """
        try:
            md = self.coordinator.get(transactional_id)
            if md is None:
                return
            if not _MARKER_DONE.issuperset(written.errors.values()):
                failed = {tp: code for tp, code in written.errors.items()
                          if code not in _MARKER_DONE}
                log.error("markers of %r not all written (%s); retrying later", transactional_id,
                          {f"{t}-{p}": c.name for (t, p), c in failed.items()})
                return
            self._crash_point("after_markers")
            now = self._clock.now_ms()
            complete = self.coordinator.prepare_complete(transactional_id, now)
            try:
                self._apply(complete, now)  # not committed: see above
            except KafkaError as exc:
                log.error("writing the completion of %r failed (%s); retrying later",
                          transactional_id, exc)
                return
            if transactional_id in self._fence_when_complete:
                self._fence_when_complete.discard(transactional_id)
                fence = self.coordinator.prepare_restart_fence(transactional_id, now)
                if fence is not None:
                    self._commit(fence, now)
        finally:
            self._completed(transactional_id)

    def _completion(self, transactional_id: str) -> trio.Event | None:
        """The event set once the markers of ``transactional_id`` are complete; None if none
        are being written."""
        if transactional_id not in self._completing:
            return None
        done = self._completing[transactional_id]
        if done is None:
            done = self._completing[transactional_id] = trio.Event()
        return done

    def _completed(self, transactional_id: str) -> None:
        done = self._completing.pop(transactional_id, None)
        if done is not None:
            done.set()

    async def _complete_transaction(self, transactional_id: str) -> None:
        written = self._start_markers(transactional_id, self._clock.now_ms())
        if written is not None and written.commit is not None:
            await written.commit.wait()

    def _fenced_abort(self, transactional_id: str, now_ms: int) -> Commit | None:
        """Bump the epoch and go to PrepareAbort; its markers follow once that is durable.
        None if there is nothing to abort."""
        abort = self.coordinator.prepare_fenced_abort(transactional_id, now_ms)
        return None if abort is None else self._abort(abort, now_ms)

    def _abort(self, abort: TxnTransition, now_ms: int) -> Commit:
        """Commit a prepared PrepareAbort; its markers follow once that is durable."""
        transactional_id = abort.transactional_id

        def prepared(ok: bool) -> None:
            if ok:
                self._start_markers(transactional_id, self._clock.now_ms())

        return self._commit(abort, now_ms, then=prepared)

    async def _aborted(self, transactional_id: str, prepared: Commit) -> bool:
        """Wait for a ``_fenced_abort`` to complete (its markers durable); False if the abort
        itself is not durable."""
        if not await prepared.wait():
            return False
        done = self._completion(transactional_id)
        if done is not None:
            await done.wait()
        return True

    # -- InitProducerId ----------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        expected: tuple[int, int] | None,
        now_ms: int,
    ) -> InitResult | Deferred[InitResult]:
        """The answer once the new epoch is durable (after the markers of an aborted
        transaction, if there was one)."""
        if transactional_id in self._completing:
            return self._after_completion(transactional_id, lambda now: self.init_producer_id(
                transactional_id, transaction_timeout_ms, expected, now))
        try:
            step = self.coordinator.prepare_init_producer_id(
                transactional_id, transaction_timeout_ms, expected, now_ms
            )
            if not isinstance(step, AbortFirst):
                return self._reply(self._commit(step, now_ms),
                                   InitResult(ErrorCode.NONE, step.producer_id,
                                              step.producer_epoch),
                                   InitResult(ErrorCode.KAFKA_STORAGE_ERROR))
            # Started here, not in the reply: a reply that is never sent (a reset connection)
            # must not leave the transaction unaborted.
            aborting = self._fenced_abort(transactional_id, now_ms)
        except KafkaError as exc:
            return InitResult(exc.code)
        if aborting is None:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)

        async def after_abort() -> InitResult:
            try:
                if not await self._aborted(transactional_id, aborting):
                    return InitResult(ErrorCode.KAFKA_STORAGE_ERROR)
                # The new instance's request was validated before the abort bumped the epoch:
                # bump again as for a plain InitProducerId (Kafka makes the client retry for
                # this step).
                now = self._clock.now_ms()
                again = self.coordinator.prepare_init_producer_id(
                    transactional_id, transaction_timeout_ms, None, now
                )
                if isinstance(again, AbortFirst):
                    return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
                if not await self._commit(again, now).wait():
                    return InitResult(ErrorCode.KAFKA_STORAGE_ERROR)
            except KafkaError as exc:
                return InitResult(exc.code)
            return InitResult(ErrorCode.NONE, again.producer_id, again.producer_epoch)

        return Deferred(after_abort)

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> ErrorCode | Deferred[ErrorCode]:
        """Add partitions to the transaction (AddPartitionsToTxn; AddOffsetsToTxn and
        TxnOffsetCommit v5 with the group's ``__consumer_offsets`` partition), answered at once.

        The record is appended to ``__transaction_state`` and applied, not committed on its
        own: it becomes durable with the transaction's Prepare record (the same partition,
        appended after it, so committing that syncs it) or any earlier commit of that
        partition, and whatever syncs a batch of the transaction syncs it too
        (``verify_produce``). A machine restart that loses it finds the transaction unknown to
        the coordinator where its batches survived: recovery aborts it there
        (``_abort_hanging``). A Deferred only while the previous transaction completes.
        """
        partitions = list(partitions)
        for topic, _ in partitions:
            if topic == TRANSACTION_STATE_TOPIC:
                return ErrorCode.TOPIC_AUTHORIZATION_FAILED  # the handlers refuse it first
        if transactional_id in self._completing:
            return self._after_completion(transactional_id, lambda now: self.add_partitions(
                transactional_id, producer_id, producer_epoch, partitions, now))
        try:
            transition = self.coordinator.prepare_add_partitions(
                transactional_id, producer_id, producer_epoch, partitions, now_ms
            )
            if transition is not None:
                self._apply(transition, now_ms)
        except KafkaError as exc:
            return exc.code
        return ErrorCode.NONE

    # -- EndTxn ------------------------------------------------------------------------------

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
        bump_epoch: bool = False,
        answer_first: bool = False,
    ) -> ErrorCode | Deferred[ErrorCode] | AnswerFirst[ErrorCode]:
        """PrepareCommit/PrepareAbort durable, with the transaction's partitions, and the
        markers appended at once; the answer once the markers are durable and
        CompleteCommit/CompleteAbort is appended.

        Kafka answers as soon as the Prepare record is durable and writes the markers after. We
        write them first (docs/protocol.md 7.4): a committed transaction is then visible to every
        read_committed reader (and ListOffsets) handled after the answer, and the next
        transaction never waits for the previous one's markers.

        ``answer_first`` (the EndTxn handler): when storage commits the Prepare record inline
        (always with ``--flush never``), the answer goes out as soon as it is durable, and the
        markers (appended and synced), their ``on_durable`` step and the Complete record follow
        at once, before anything else runs (``AnswerFirst``), while the producer prepares its
        next transaction. What the answer promises holds either way: the outcome is durable, and
        no request is handled between the answer and the markers."""
        if transactional_id in self._completing:
            return self._after_completion(transactional_id, lambda now: self.end_txn(
                transactional_id, producer_id, producer_epoch, commit, now, bump_epoch))
        in_request = True
        started: list[MarkerWrite | None] = []

        def prepared(ok: bool) -> None:
            # The Prepare record is durable and applied: the markers now (in the round's
            # callback), or right after the answer when this runs in the request.
            if ok:
                self._crash_point("after_prepare_commit" if commit else "after_prepare_abort")
                if answer_first and in_request:
                    return
                started.append(self._start_markers(transactional_id, self._clock.now_ms()))

        try:
            transition = self.coordinator.prepare_end_txn(
                transactional_id, producer_id, producer_epoch, commit, now_ms, bump_epoch
            )
            if transition is None:
                return ErrorCode.NONE  # a retry: already complete with this outcome
            # A commit makes the transaction's batches durable with its Prepare record (they
            # were answered once appended); an abort's markers cover its partitions anyway. The
            # record carries the partitions' end offsets: a power cut inside the round can keep
            # the record and lose a partition's end (recovery then aborts the commit), or keep
            # a marker and a batch of the next transaction after it and lose the Complete
            # record (recovery then does not write that marker again: ``_marked_ahead``).
            data = self._partitions(transition.partitions)
            transition = self.coordinator.record_end_offsets(
                transition, {(p.topic, p.index): p.log_end_offset for p in data})
            prepare = self._commit(transition, now_ms, data if commit else (), then=prepared)
        except KafkaError as exc:
            if exc.code == ErrorCode.INVALID_TXN_STATE:  # fatal to Kafka's Java producer
                md = self.coordinator.get(transactional_id)
                log.warning("EndTxn of %r from producer %d epoch %d answered INVALID_TXN_STATE "
                            "(%s); the coordinator held %s", transactional_id, producer_id,
                            producer_epoch, exc, "nothing" if md is None else md.summary())
            return exc.code
        in_request = False
        if prepare.done:
            if not prepare.ok:
                return ErrorCode.KAFKA_STORAGE_ERROR
            if answer_first:
                return AnswerFirst(ErrorCode.NONE,
                                   lambda: self._markers_after_answer(transactional_id))
            written = started[0] if started else None
            if written is None or written.commit is None:
                return ErrorCode.NONE  # decided and durable: the periodic task completes it
            return self._reply(written.commit, ErrorCode.NONE, ErrorCode.NONE)

        async def answer() -> ErrorCode:
            if not await prepare.wait():
                return ErrorCode.KAFKA_STORAGE_ERROR
            written = started[0] if started else None
            if written is not None and written.commit is not None:
                await written.commit.wait()
            return ErrorCode.NONE

        return Deferred(answer)

    def _markers_after_answer(self, transactional_id: str) -> None:
        """EndTxn's ``AnswerFirst`` finish: the markers of a transaction whose Prepare record
        was made durable in the request, appended and committed (storage syncs them inline: it
        was idle a moment ago, and nothing ran since), then the Complete record."""
        try:
            self._start_markers(transactional_id, self._clock.now_ms(), answered=True)
        except KafkaError as exc:
            log.error("writing the markers of %r failed (%s); retrying later", transactional_id,
                      exc)

    def _partitions(self, partitions: Iterable[TopicPartition]) -> list[Partition]:
        out = []
        for tp in partitions:
            try:
                out.append(self._storage.partition(*tp))
            except KafkaError:
                continue  # deleted meanwhile: its marker reports it
        return out

    # -- what the handlers read, and WriteTxnMarkers -------------------------------------------

    def get(self, transactional_id: str) -> TxnMetadata | None:
        return self.coordinator.get(transactional_id)

    def transactions(self) -> list[TxnMetadata]:
        return list(self.coordinator.transactions())

    def producer_after_end(self, transactional_id: str) -> tuple[int, int]:
        """Transaction version 2: the producer id and epoch to go on with after EndTxn."""
        return self.coordinator.producer_after_end(transactional_id)

    def write_markers(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
        partitions: Iterable[TopicPartition], now_ms: int,
    ) -> Deferred[dict[TopicPartition, ErrorCode]]:
        """WriteTxnMarkers (the caller checked ClusterAction): the errors per partition once the
        markers written are durable. Accepted: a marker of a transaction this coordinator runs,
        and an ABORT of a *hanging* transaction (open on the partition at that epoch, run by no
        coordinator: Kafka's ``kafka-transactions.sh abort --topic --partition``). Anything
        else gets CLUSTER_AUTHORIZATION_FAILED and writes nothing: a client may not forge
        markers or write into the internal logs. Never into ``__transaction_state``; into
        ``__consumer_offsets`` only the ABORT of a hanging transaction (the repair of a pending
        TxnOffsetCommit whose coordinator forgot it): the coordinator writes its own markers
        there."""
        errors: dict[TopicPartition, ErrorCode] = {}
        accepted = []
        for tp in partitions:
            if self._marker_accepted(producer_id, producer_epoch, commit, tp):
                accepted.append(tp)
            else:
                errors[tp] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        written = (self.markers.write(producer_id, producer_epoch, commit, coordinator_epoch,
                                      accepted, now_ms) if accepted else None)

        async def answer() -> dict[TopicPartition, ErrorCode]:
            if written is not None:
                if written.commit is not None:
                    await written.commit.wait()
                errors.update(written.errors)
            return errors

        return Deferred(answer)

    def _marker_accepted(self, producer_id: int, producer_epoch: int, commit: bool,
                         tp: TopicPartition) -> bool:
        if tp[0] == TRANSACTION_STATE_TOPIC:
            return False
        if tp[0] == CONSUMER_OFFSETS_TOPIC:
            return not commit and self._hanging(producer_id, producer_epoch, tp)
        return self.coordinator.knows_marker(producer_id, producer_epoch, commit, tp) or (
            not commit and self._hanging(producer_id, producer_epoch, tp))

    def _hanging(self, producer_id: int, producer_epoch: int, tp: TopicPartition) -> bool:
        try:
            entry = self._storage.partition(*tp).producers.get(producer_id)
        except KafkaError:
            return False
        return (
            entry is not None
            and entry.current_txn_first_offset is not None
            and entry.producer_epoch == producer_epoch
            and not self.coordinator.runs_on(producer_id, tp)
        )

    # -- the periodic task -------------------------------------------------------------------

    async def housekeeping(self, now_ms: int) -> None:
        """Abort timed-out transactions, finish prepared ones, expire idle ids."""
        coordinator = self.coordinator
        for transactional_id in coordinator.timed_out(now_ms):
            try:
                md = coordinator.get(transactional_id)
                timeout = md.txn_timeout_ms if md is not None else -1
                aborting = self._fenced_abort(transactional_id, now_ms)
                if aborting is None:
                    continue
                log.info("aborting the transaction of %r: older than its timeout of %d ms",
                         transactional_id, timeout)
                if not await self._aborted(transactional_id, aborting):
                    log.error("the abort of %r is not durable; retrying later", transactional_id)
            except KafkaError as exc:
                log.error("aborting the timed-out transaction of %r failed: %s",
                          transactional_id, exc)
        for transactional_id in coordinator.unfinished():
            try:
                await self._complete_transaction(transactional_id)
            except KafkaError as exc:
                log.error("completing the transaction of %r failed: %s", transactional_id, exc)
        for transactional_id in coordinator.expired(now_ms):
            try:
                dead = coordinator.prepare_dead(transactional_id, now_ms)
                if dead is not None and await self._commit(dead, now_ms).wait():
                    log.info("transactional id %r expired", transactional_id)
            except KafkaError as exc:
                log.error("expiring %r failed: %s", transactional_id, exc)

    # -- the Produce path --------------------------------------------------------------------

    @staticmethod
    def is_transactional(records: Any) -> bool:
        """Cheap test for the Produce hot path: the first batch is transactional."""
        return (len(records) > ATTRIBUTES_LOW_BYTE_OFFSET
                and bool(records[ATTRIBUTES_LOW_BYTE_OFFSET] & TRANSACTIONAL_BIT))

    @staticmethod
    def needs_verification(transactional: bool, transactional_id: str | None) -> bool:
        """Cheap test for the Produce hot path: a transactional id, or a transactional batch
        (``transactional``: ``is_transactional`` of the partition's records, asked once)."""
        return transactional or transactional_id is not None

    def verify_produce(
        self, partition: Partition, records: Any, transactional_id: str | None,
        now_ms: int = 0, add_partition: bool = False,
    ) -> None:
        """KIP-890 part 1: every transactional batch must belong to its producer's Ongoing
        transaction with this partition in it. Raises KafkaError (INVALID_TXN_STATE,
        INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING). Malformed batches are left to the
        partition's own checks.

        ``add_partition`` is transaction version 2 (Produce v12): the batch's producer must hold
        the current epoch, and the partition joins the transaction if it is not in it yet (its
        record appended and applied before the batch, as ``add_partitions``);
        CONCURRENT_TRANSACTIONS while the previous transaction is still completing (the client
        retries), KAFKA_STORAGE_ERROR if the record cannot be appended.

        A batch that passes is answered once appended and synced no later than its
        transaction's Prepare record; whatever syncs it earlier (another producer's round on the
        partition, the unwaited round) syncs the transaction's ``__transaction_state`` partition
        with it (``Storage.sync_together``), so that a batch never becomes durable without the
        records that admitted it, save for a power cut in the middle of that round."""
        tp = (partition.topic, partition.index)
        checked: set[tuple[int, int]] = set()
        pos, n = 0, len(records)
        while n - pos >= HEADER_SIZE:
            try:
                header = parse_header_untrusted(records, pos)
            except CorruptFrameError:
                return
            # Transactional and not control (the log refuses a control batch); the bits, not the
            # BatchHeader properties: no call per batch.
            if header.attributes & _TRANSACTIONAL_NOT_CONTROL == TRANSACTIONAL_BIT:
                if transactional_id is None:
                    raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                                     "a transactional batch needs a transactional id")
                key = (header.producer_id, header.producer_epoch)
                if key not in checked:
                    if not add_partition:
                        self.coordinator.verify_produce(transactional_id, key[0], key[1], tp)
                    elif transactional_id in self._completing:
                        raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS,
                                         "the previous transaction is completing")
                    else:
                        added = self.coordinator.prepare_produce(transactional_id, key[0], key[1],
                                                                 tp, now_ms)
                        if added is not None:
                            self._apply(added, now_ms)
                    log_partition = self._log_partitions.get(transactional_id)
                    if log_partition is not None:
                        self._storage.sync_together(partition, log_partition)
                    checked.add(key)
            if header.length < HEADER_SIZE - LOG_OVERHEAD:
                return
            pos += header.length + LOG_OVERHEAD
