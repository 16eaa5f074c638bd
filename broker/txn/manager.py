"""The trio side of the transaction coordinator: persist, complete, markers, timers, recovery.

``TransactionCoordinator`` (pure) decides; this class does what needs the disk and the clock:

- Two phases per transition: prepare (the id answers CONCURRENT_TRANSACTIONS meanwhile), append
  the record to ``__transaction_state``, fdatasync it, then complete. The records are small, so
  they are fsync'd inline (``_persist``): InitProducerId and AddPartitionsToTxn answer at once,
  durably. (With one producer, AddPartitionsToTxn answers just before that fsync: see
  ``add_partitions``.)
- EndTxn: PrepareCommit/PrepareAbort durable -> markers appended to every partition of the
  transaction (the ``__consumer_offsets`` partition included), made durable by one group-commit
  round -> the markers' ``on_durable`` step (wired by the root: pending offsets materialised or
  dropped) -> CompleteCommit/CompleteAbort written -> reply. Everything after the Prepare record
  runs in the manager's own task (``run``), so a reply that is never sent (a reset connection)
  cannot leave a decided transaction unfinished. When no group-commit round is under way (one
  producer) all of it runs in the request instead, the markers fsync'd inline, and the answer
  goes out just before that fsync (``end_txn``). A marker write that failed leaves the
  transaction prepared (the reply is still NONE: the outcome is decided) and the periodic task
  retries it. The epoch is unchanged by a normal commit or abort.
- InitProducerId of an id with an Ongoing transaction first aborts it with a bumped epoch (the old
  instance is fenced), then bumps the epoch again for the new instance (Kafka makes the client retry
  for that second step; here the request simply waits).
- ``housekeeping(now_ms)``, run by the server every
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms``: aborts Ongoing transactions
  older than their timeout (epoch bump first), finishes PrepareCommit/PrepareAbort left behind
  (a failed marker write), expires idle ids (tombstone).
- Recovery (``recover``, called by the root before the broker serves): replay
  ``__transaction_state``, then finish every transaction found in PrepareCommit/PrepareAbort
  (markers, then Complete*), synchronously.
  The data partitions already rebuilt their open transactions and LSOs when they were loaded.

Ordering that makes kill -9 (and power loss) safe: a transition's record is durable before its
effects are visible or acknowledged; a Prepare record is durable before any of its markers is
written; the markers are durable before the Complete record is written and before any other
request is handled. (An answer sent just before the last fsync, ``AnswerFirst``, promises only
what is already durable, and the fsync runs before the loop handles anything else.)

``verify_produce`` is the KIP-890 part-1 check of the Produce path: a transactional batch must
belong to its producer's Ongoing transaction, with the partition added to it.

Collaborators come in through the constructor (built by ``broker/app.py``): the config, the
``Storage`` (log and group commit), the producer-id allocator, the clock and the ``MarkerWriter``
(which tells whoever the root wired in once markers are durable). Recovery runs when the root calls
``recover(now_ms)``, after the services that must see the markers it writes exist.

Crash points for tests: ``crash_hook(point)`` is called at ``after_prepare_commit`` /
``after_prepare_abort`` (the Prepare record is durable, no marker written yet) and
``after_markers`` (markers durable, no Complete record). Only tests pass a hook (see
``tests/crash_broker.py``); the broker itself passes none.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

import trio

from broker.clock import Clock
from broker.config import BrokerConfig
from broker.core import Storage
from broker.dispatcher import AnswerFirst, Deferred
from broker.log.partition import Partition
from broker.topics import TRANSACTION_STATE_TOPIC, TopicPartition
from broker.txn.coordinator import AbortFirst, TransactionCoordinator, TxnConfig, TxnTransition
from broker.txn.markers import COORDINATOR_EPOCH, MarkerWrite, MarkerWriter
from broker.txn.state import TxnState
from broker.txn.txn_log import TxnLog
from protocol.errors import CorruptFrameError, ErrorCode, KafkaError
from protocol.records import (
    ATTRIBUTES_LOW_BYTE_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_BIT,
    parse_header_untrusted,
)

log = logging.getLogger("minibroker.txn")

CRASH_POINTS = frozenset({"after_prepare_commit", "after_prepare_abort", "after_markers"})
# Called with a point of CRASH_POINTS when EndTxn passes it; tests only.
CrashHook = Callable[[str], None]
# Marker errors that leave nothing to retry: the topic is gone, the partition already knows a
# newer epoch of the producer (whose transaction this marker would end is long over), or it is
# the transaction log (the marker writer refuses it: a transaction recorded by an older version
# that let a client add it completes without it).
_MARKER_DONE = frozenset({ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                          ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_TOPIC_EXCEPTION})


@dataclass(frozen=True)
class InitResult:
    error_code: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True)
class TxnRecovery:
    records: int  # transaction-log records replayed
    transactional_ids: int
    completed: int  # transactions found prepared and completed


class TransactionManager:
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
        # ids whose markers are being written right now -> set once they are complete
        self._completing: dict[str, trio.Event] = {}
        self._crash_hook = crash_hook
        self.recovery: TxnRecovery | None = None
        # Where markers are finished while the broker serves (``run``); None: in the reply.
        self._nursery: trio.Nursery | None = None
        # AddPartitionsToTxn records answered before their fsync (``answer_first``) and not
        # known durable yet: transactional id -> (transaction-log partition, record offset).
        self._unsynced_adds: dict[str, tuple[Partition, int]] = {}

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the tasks that finish transactions (the server runs this while it serves).

        A decided transaction's markers are finished here, not in the reply that announces
        it: replies go out in request order and a connection that is reset drops the ones not
        sent yet, which left such a transaction prepared with its id marked as completing, so
        neither the periodic task nor a new request could ever finish it (the LSO stuck).
        """
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    def _finish_soon(self, transactional_id: str, written: MarkerWrite) -> Callable[[], Any]:
        """Finish the markers of ``written`` (``_start_markers`` registered the id): in the
        ``run`` task when there is one, else when the returned coroutine function is awaited
        (the manager driven directly, in unit tests). Await the result for the outcome."""
        done = self._completing[transactional_id]
        if self._nursery is None:
            return lambda: self._finish_markers(transactional_id, written)
        self._nursery.start_soon(self._finish_in_background, transactional_id, written)
        return done.wait

    async def _finish_in_background(self, transactional_id: str, written: MarkerWrite) -> None:
        try:
            await self._finish_markers(transactional_id, written)
        except Exception:
            # A bug costs this completion, never the broker: the periodic task retries it.
            log.exception("completing the transaction of %r failed; retrying later",
                          transactional_id)

    def _after_completion(
        self, transactional_id: str, retry: Callable[[int], Any]
    ) -> Deferred[Any] | None:
        """A coordinator request for an id whose last transaction is still completing waits for
        that (instead of CONCURRENT_TRANSACTIONS and a client-side retry), then runs again."""
        done = self._completing.get(transactional_id)
        if done is None:
            return None

        async def again() -> Any:
            await done.wait()
            result = retry(self._clock.now_ms())
            return await result.wait() if isinstance(result, Deferred) else result

        return Deferred(again)

    # -- recovery ----------------------------------------------------------------------------

    def recover(self, now_ms: int) -> TxnRecovery:
        """Replay ``__transaction_state`` and complete every prepared transaction (at start)."""
        self.recovery = self._recover(now_ms)
        return self.recovery

    def _recover(self, now_ms: int) -> TxnRecovery:
        records = 0
        for transactional_id, transition in self.log.replay():
            self.coordinator.load(transactional_id, transition)
            records += 1
        unfinished = self.coordinator.unfinished()
        for transactional_id in unfinished:
            self._finish_now(transactional_id, now_ms)
        if records:
            log.info("transaction log: %d records, %d transactional ids, %d prepared "
                     "transactions completed", records, len(self.coordinator), len(unfinished))
        return TxnRecovery(records, len(self.coordinator), len(unfinished))

    def _finish_now(self, transactional_id: str, now_ms: int) -> None:
        md = self.coordinator.get(transactional_id)
        if md is None:
            return
        commit = md.state is TxnState.PREPARE_COMMIT
        errors = self.markers.write_now(md.producer_id, md.producer_epoch, commit, md.partitions,
                                        now_ms)
        if any(code not in _MARKER_DONE for code in errors.values()):
            log.error("recovery: markers of %r failed (%s); the periodic task retries",
                      transactional_id, errors)
            return
        self._persist(self.coordinator.prepare_complete(transactional_id, now_ms), now_ms)
        log.info("recovery: completed %s of %r (producer %d epoch %d, %d partitions)",
                 "commit" if commit else "abort", transactional_id, md.producer_id,
                 md.producer_epoch, len(errors))

    # -- two phases --------------------------------------------------------------------------

    def _begin(self, transition: TxnTransition, now_ms: int) -> Partition:
        """Append the transition's record; abandon the transition if that fails."""
        try:
            return self.log.append(transition, now_ms)
        except BaseException:
            self.coordinator.abandon(transition)
            raise

    def _persist(self, transition: TxnTransition, now_ms: int) -> None:
        """Append, fdatasync inline, then apply the transition.

        Inline rather than through the group-commit task: a transaction-log record is ~100 bytes
        and its fdatasync costs ~0.1 ms here, while a round through the flusher's worker thread
        costs ~0.4 ms of latency and more CPU than the fsync itself (bench/transactions.py).
        """
        partition = self._begin(transition, now_ms)
        try:
            partition.flush()
        except OSError as exc:
            self.coordinator.abandon(transition)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc
        self.coordinator.complete(transition)

    def _persist_shared(
        self, transition: TxnTransition, now_ms: int,
        then: Callable[[], Callable[[], Awaitable[Any]] | None] | None = None,
    ) -> ErrorCode | Deferred[ErrorCode]:
        """``_persist``, sharing the fdatasync of a group-commit round that is under way.

        With no round under way (one producer) the record is synced inline as ``_persist``
        does. Otherwise (many producers: their data and markers keep rounds going) it joins
        the next round, and the manager's own task applies the transition once that round is
        durable, or abandons it (KAFKA_STORAGE_ERROR). ``then`` runs once the transition is
        applied; what it returns, if anything, is awaited before the answer. Raises KafkaError
        only for a failed write, as ``_persist``.
        """
        if self._nursery is None or not self._storage.flusher.busy:
            self._persist(transition, now_ms)
            wait = then() if then is not None else None
            if wait is None:
                return ErrorCode.NONE

            async def answer_after() -> ErrorCode:
                await wait()
                return ErrorCode.NONE

            return Deferred(answer_after)
        partition = self._begin(transition, now_ms)
        last = partition.log_end_offset - 1
        round_done = self._storage.mark_dirty(partition)
        outcome: list[ErrorCode] = []
        done = trio.Event()

        async def complete() -> None:
            try:
                await round_done.wait()
                if partition.high_watermark <= last:  # the round's fdatasync failed
                    self.coordinator.abandon(transition)
                    outcome.append(ErrorCode.KAFKA_STORAGE_ERROR)
                    return
                self.coordinator.complete(transition)
                wait = then() if then is not None else None
                if wait is not None:
                    await wait()
                outcome.append(ErrorCode.NONE)
            except Exception:
                # A bug costs this request, never the broker.
                log.exception("persisting a transition of %r failed",
                              transition.transactional_id)
            finally:
                done.set()

        self._nursery.start_soon(complete)

        async def answer() -> ErrorCode:
            await done.wait()
            return outcome[0] if outcome else ErrorCode.UNKNOWN_SERVER_ERROR

        return Deferred(answer)

    def _crash_point(self, point: str) -> None:
        if self._crash_hook is not None:
            self._crash_hook(point)

    # -- completing a decided transaction ------------------------------------------------------

    def _start_markers(self, transactional_id: str, now_ms: int,
                       wake: bool = True) -> MarkerWrite | None:
        """Append the markers of a PrepareCommit/PrepareAbort transaction (synchronous part).
        None if it is not in such a state or someone else is completing it. ``wake=False``: the
        caller syncs them inline (``_markers_inline``), not the group-commit task."""
        md = self.coordinator.get(transactional_id)
        if (transactional_id in self._completing or md is None or md.pending is not None
                or md.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)):
            return None
        self._completing[transactional_id] = trio.Event()
        try:
            return self.markers.write(md.producer_id, md.producer_epoch,
                                      md.state is TxnState.PREPARE_COMMIT, COORDINATOR_EPOCH,
                                      md.partitions, now_ms, wake)
        except BaseException:
            self._completing.pop(transactional_id).set()
            raise

    async def _finish_markers(self, transactional_id: str, written: MarkerWrite) -> None:
        """Wait for the markers' group-commit round, then ``_markers_durable``."""
        try:
            for event in written.flushes:
                await event.wait()
        except BaseException:
            self._completed(transactional_id)
            raise
        self._markers_durable(transactional_id, written)

    def _markers_durable(self, transactional_id: str, written: MarkerWrite) -> None:
        """Tell the markers' partitions' other owners, then CompleteCommit/CompleteAbort.

        The Complete record is appended but not fsync'd on its own (Kafka does not wait for it
        either): the markers are durable, so losing it only makes recovery write the same
        markers again, and every later record of this id is appended after it to the same
        partition and fsync'd, which makes it durable too. (One fsync less per transaction.)
        """
        try:
            md = self.coordinator.get(transactional_id)
            if md is None:
                return
            self.markers.durable(written, md.producer_id, md.state is TxnState.PREPARE_COMMIT)
            failed = {tp: code for tp, code in written.errors.items() if code not in _MARKER_DONE}
            if failed:
                log.error("markers of %r not all written (%s); retrying later", transactional_id,
                          {f"{t}-{p}": c.name for (t, p), c in failed.items()})
                return
            self._crash_point("after_markers")
            now = self._clock.now_ms()
            complete = self.coordinator.prepare_complete(transactional_id, now)
            try:
                self._begin(complete, now)  # not marked for a flush: see above
            except KafkaError as exc:
                log.error("writing the completion of %r failed (%s); retrying later",
                          transactional_id, exc)
                return
            self.coordinator.complete(complete)
        finally:
            self._completed(transactional_id)

    def _completed(self, transactional_id: str) -> None:
        done = self._completing.pop(transactional_id, None)
        if done is not None:
            done.set()

    async def _complete_transaction(self, transactional_id: str) -> None:
        written = self._start_markers(transactional_id, self._clock.now_ms())
        if written is not None:
            await self._finish_markers(transactional_id, written)

    def _fenced_abort(self, transactional_id: str, now_ms: int) -> MarkerWrite | None:
        """Bump the epoch and go to PrepareAbort (durable), then start its markers."""
        abort = self.coordinator.prepare_fenced_abort(transactional_id, now_ms)
        if abort is None:
            return None
        self._persist(abort, now_ms)
        return self._start_markers(transactional_id, now_ms)

    # -- InitProducerId ----------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        expected: tuple[int, int] | None,
        now_ms: int,
    ) -> InitResult | Deferred[InitResult]:
        """The answer, or a coroutine function producing it once the markers of an aborted
        transaction are durable."""
        if not self.log.available(transactional_id):
            return InitResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        waiting = self._after_completion(transactional_id, lambda now: self.init_producer_id(
            transactional_id, transaction_timeout_ms, expected, now))
        if waiting is not None:
            return waiting
        try:
            step = self.coordinator.prepare_init_producer_id(
                transactional_id, transaction_timeout_ms, expected, now_ms
            )
            if not isinstance(step, AbortFirst):
                self._persist(step, now_ms)
                return InitResult(ErrorCode.NONE, step.producer_id, step.producer_epoch)
            written = self._fenced_abort(transactional_id, now_ms)
        except KafkaError as exc:
            return InitResult(exc.code)
        if written is None:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)

        finished = self._finish_soon(transactional_id, written)

        async def after_abort() -> InitResult:
            await finished()
            # The new instance's request was validated before the abort bumped the epoch: bump
            # again as for a plain InitProducerId (Kafka makes the client retry for this step).
            try:
                now = self._clock.now_ms()
                again = self.coordinator.prepare_init_producer_id(
                    transactional_id, transaction_timeout_ms, None, now
                )
                if isinstance(again, AbortFirst):
                    return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
                self._persist(again, now)
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
        answer_first: bool = False,
    ) -> ErrorCode | Deferred[ErrorCode] | AnswerFirst[ErrorCode]:
        """Record partitions in the transaction, durably, before answering.

        ``answer_first`` (AddPartitionsToTxn, when no group-commit round is under way): the
        answer goes out before the record's fsync, which follows at once, before anything else
        runs (``AnswerFirst``); the producer prepares its batch meanwhile. Nothing can depend on
        the record before it is durable: a batch of the transaction is appended only after it
        (``verify_produce`` syncs it if it is not yet), and EndTxn's Prepare record follows it in
        the same file. Lost to a power cut in between, it only makes the producer's next batch
        fail (INVALID_TXN_STATE): no batch was appended for it.
        """
        if not self.log.available(transactional_id):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        partitions = list(partitions)
        if any(topic == TRANSACTION_STATE_TOPIC for topic, _ in partitions):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED  # the handlers refuse it first
        waiting = self._after_completion(transactional_id, lambda now: self.add_partitions(
            transactional_id, producer_id, producer_epoch, partitions, now))
        if waiting is not None:
            return waiting
        try:
            transition = self.coordinator.prepare_add_partitions(
                transactional_id, producer_id, producer_epoch, partitions, now_ms
            )
            if transition is None:
                return ErrorCode.NONE
            if not answer_first or self._storage.flusher.busy:
                return self._persist_shared(transition, now_ms)
            partition = self._begin(transition, now_ms)
        except KafkaError as exc:
            return exc.code
        self.coordinator.complete(transition)
        self._unsynced_adds[transactional_id] = (partition, partition.log_end_offset - 1)
        return AnswerFirst(ErrorCode.NONE, lambda: self._sync_add_logged(transactional_id))

    def _sync_add(self, transactional_id: str) -> None:
        """Make the record of an AddPartitionsToTxn answered before its fsync durable, if it
        is not yet. Raises KafkaError (KAFKA_STORAGE_ERROR, retriable) if it cannot be now."""
        pending = self._unsynced_adds.pop(transactional_id, None)
        if pending is None:
            return
        partition, offset = pending
        if partition.high_watermark > offset:
            return
        if not partition.dirty:
            reason = "a group-commit round is syncing it"
        else:
            try:
                partition.flush()
                return
            except OSError as exc:
                reason = str(exc)
        self._unsynced_adds[transactional_id] = pending
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                         f"the transaction's AddPartitionsToTxn record is not durable: {reason}")

    def _sync_add_logged(self, transactional_id: str) -> None:
        try:
            self._sync_add(transactional_id)
        except KafkaError as exc:
            log.error("%s (transactional id %r); its next batch retries", exc, transactional_id)

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
        """PrepareCommit/PrepareAbort durable and the markers appended at once; the answer once
        the markers are durable and CompleteCommit/CompleteAbort is appended.

        Kafka answers as soon as the Prepare record is durable and writes the markers after. We
        write them first (docs/protocol.md 7.4): a committed transaction is then visible to every
        read_committed reader (and ListOffsets) handled after the answer, and the next
        transaction never waits for the previous one's markers.

        ``answer_first`` (the EndTxn handler): when no group-commit round is under way (one
        producer) the answer goes out once the Prepare record is durable and the markers are
        appended, and their fsync and the Complete record follow at once, before anything else
        runs (``AnswerFirst``), while the producer prepares its next transaction. What the
        answer promises holds either way: the outcome is durable, and no request is handled
        between the answer and the markers' fsync."""
        if not self.log.available(transactional_id):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        waiting = self._after_completion(transactional_id, lambda now: self.end_txn(
            transactional_id, producer_id, producer_epoch, commit, now, bump_epoch))
        if waiting is not None:
            return waiting
        def start_markers(wake: bool) -> MarkerWrite | None:
            # The Prepare record is durable and applied: the markers now. None: decided and
            # durable, and the periodic task completes it.
            self._crash_point("after_prepare_commit" if commit else "after_prepare_abort")
            return self._start_markers(transactional_id, self._clock.now_ms(), wake)

        try:
            transition = self.coordinator.prepare_end_txn(
                transactional_id, producer_id, producer_epoch, commit, now_ms, bump_epoch
            )
            if transition is None:
                return ErrorCode.NONE  # a retry: already complete with this outcome
            # No group-commit round under way (one producer): all of it here, the markers
            # fsync'd inline as ``_persist`` does the record: no task, no round.
            inline = not self._storage.flusher.busy
            if inline:
                self._persist(transition, now_ms)
        except KafkaError as exc:
            return exc.code
        if inline:
            written = start_markers(wake=False)
            if written is None:
                return ErrorCode.NONE
            finish = partial(self._markers_inline, transactional_id, written)
            if answer_first:
                return AnswerFirst(ErrorCode.NONE, finish)
            finish()
            return ErrorCode.NONE

        def after_prepare() -> Callable[[], Awaitable[Any]] | None:
            written = start_markers(wake=True)
            return None if written is None else self._finish_soon(transactional_id, written)

        try:
            return self._persist_shared(transition, now_ms, then=after_prepare)
        except KafkaError as exc:
            return exc.code

    def _markers_inline(self, transactional_id: str, written: MarkerWrite) -> None:
        """Sync the markers now (no round is under way), then complete the transaction.

        A round that started meanwhile (the answer's send waited, and another request woke the
        group-commit task) may have taken the markers: their events then tell, and the
        transaction completes once that round is done, never before the markers are durable.
        """
        try:
            self._storage.flush_now()
        except BaseException:
            self._completed(transactional_id)  # left prepared: the periodic task completes it
            raise
        if self._nursery is not None and not all(e.is_set() for e in written.flushes):
            self._nursery.start_soon(self._finish_in_background, transactional_id, written)
            return
        self._markers_durable(transactional_id, written)

    # -- the periodic task -------------------------------------------------------------------

    async def housekeeping(self, now_ms: int) -> None:
        """Abort timed-out transactions, finish prepared ones, expire idle ids."""
        coordinator = self.coordinator
        for transactional_id in coordinator.timed_out(now_ms):
            try:
                md = coordinator.get(transactional_id)
                timeout = md.txn_timeout_ms if md is not None else -1
                written = self._fenced_abort(transactional_id, now_ms)
                if written is None:
                    continue
                log.info("aborting the transaction of %r: older than its timeout of %d ms",
                         transactional_id, timeout)
                await self._finish_markers(transactional_id, written)
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
                if dead is not None:
                    self._persist(dead, now_ms)
                    log.info("transactional id %r expired", transactional_id)
            except KafkaError as exc:
                log.error("expiring %r failed: %s", transactional_id, exc)

    # -- the Produce path --------------------------------------------------------------------

    @staticmethod
    def needs_verification(records: Any, transactional_id: str | None) -> bool:
        """Cheap test for the Produce hot path: a transactional id, or a transactional batch."""
        return transactional_id is not None or (
            len(records) > ATTRIBUTES_LOW_BYTE_OFFSET
            and bool(records[ATTRIBUTES_LOW_BYTE_OFFSET] & TRANSACTIONAL_BIT)
        )

    def verify_produce(
        self, partition: Partition, records: Any, transactional_id: str | None,
        now_ms: int = 0, add_partition: bool = False,
    ) -> None:
        """KIP-890 part 1: every transactional batch must belong to its producer's Ongoing
        transaction with this partition in it. Raises KafkaError (INVALID_TXN_STATE,
        INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING). Malformed batches are left to the
        partition's own checks.

        ``add_partition`` is transaction version 2 (Produce v12): the batch's producer must hold
        the current epoch, and the partition joins the transaction (durably, before the batch is
        appended) if it is not in it yet; CONCURRENT_TRANSACTIONS while the previous transaction
        is still completing (the client retries)."""
        tp = (partition.topic, partition.index)
        checked: set[tuple[int, int]] = set()
        pos, n = 0, len(records)
        while n - pos >= HEADER_SIZE:
            try:
                header = parse_header_untrusted(records, pos)
            except CorruptFrameError:
                return
            if header.is_transactional and not header.is_control:  # control: the log refuses it
                if transactional_id is None:
                    raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                                     "a transactional batch needs a transactional id")
                key = (header.producer_id, header.producer_epoch)
                if key not in checked:
                    if not add_partition:
                        self.coordinator.verify_produce(transactional_id, key[0], key[1], tp)
                        if self._unsynced_adds:  # the batch only after the record adding tp
                            self._sync_add(transactional_id)
                    elif transactional_id in self._completing:
                        raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS,
                                         "the previous transaction is completing")
                    else:
                        added = self.coordinator.prepare_produce(transactional_id, key[0], key[1],
                                                                 tp, now_ms)
                        if added is not None:
                            self._persist(added, now_ms)
                    checked.add(key)
            if header.length < HEADER_SIZE - LOG_OVERHEAD:
                return
            pos += header.length + LOG_OVERHEAD
