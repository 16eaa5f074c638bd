"""The shell around share groups: the log reads, the share state log, replay, long polls.

``ShareGroups`` (membership), ``SharePartitionState`` (records) and ``ShareSessionCache`` are pure;
this class gives them the outside world:

- Reads: a ShareFetch reads each partition of the member's session from the share partition's
  next fetch offset, bounded by the high watermark (read_uncommitted) or the last stable offset
  (read_committed: the same bound and the same aborted-transaction list as a read_committed Fetch,
  ``Partition.last_stable_offset`` and ``Partition.aborted_transactions``); batches of aborted
  transactions and control batches are archived, never acquired.
- Durability: a request that changed share state (acknowledgements, a new share partition's start
  offset, a released lock) appends one ShareSnapshot per changed share partition to
  ``__share_group_state`` and is answered once that batch is durable (the storage's group commit).
  Acquisitions are not written (as in Kafka): after a restart, records acquired and never
  acknowledged are Available again.
- Replay: the constructor reads ``__share_group_state`` (latest record per key) and restores each
  share partition when first used.
- Housekeeping: ``tick(now_ms)`` removes members whose session timed out (releasing their records
  and closing their share sessions) and releases expired locks; ``run_timer`` (a server task)
  calls it when the earliest deadline is due.
- Group configs (``share.*``): read from the ``GroupConfigStore`` (broker/config/group_configs.py),
  which tells ``_configs_changed`` of every change.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from broker.clock import Clock
from broker.config import BrokerConfig
from broker.config.group_configs import GroupConfigStore, reset_strategy
from broker.group.offsets import valid_group_id
from broker.log.cleaner import internal_topic_config
from broker.log.internal_replay import SkipLog, read_batches
from broker.log.partition import Partition
from broker.log.topics import partition_for
from broker.share.group import HeartbeatResult, ShareGroup, ShareGroups
from broker.share.partition_state import (
    NO_DEADLINE,
    Acquired,
    LogBatch,
    RecordState,
    SharePartitionState,
)
from broker.share.sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    ConnectionSessions,
    ShareSession,
    ShareSessionCache,
)
from broker.share.state_log import (
    SHARE_GROUP_STATE_TOPIC,
    Snapshot,
    StateKey,
    decode_key_untrusted,
    decode_value_untrusted,
    encode_key,
    encode_snapshot,
)
from broker.storage import Commit, Storage
from protocol.errors import CorruptFrameError, ErrorCode, KafkaError
from protocol.records import encode_batch, iter_batches_untrusted

log = logging.getLogger("minibroker.share")

AUTO_OFFSET_RESET = "share.auto.offset.reset"
ISOLATION_LEVEL = "share.isolation.level"
LOCK_DURATION = "share.record.lock.duration.ms"
DELIVERY_LIMIT = "share.delivery.count.limit"
RECORD_LOCKS = "share.partition.max.record.locks"
SESSION_TIMEOUT = "share.session.timeout.ms"
HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
STATE_SEGMENT_BYTES = 1 << 20
MAX_POLL_SLICE_S = 1.0
TIMER_IDLE_S = 5.0  # the timer's longest sleep (a safety net: deadlines wake it sooner)


@dataclass
class AckBatch:
    first_offset: int
    last_offset: int
    types: Sequence[int]


@dataclass
class PartitionFetch:
    topic_id: uuid.UUID
    partition: int
    error: ErrorCode = ErrorCode.NONE
    ack_error: ErrorCode | None = None
    records: Any = b""
    acquired: list[Acquired] = field(default_factory=list)


@dataclass
class FetchOutcome:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    partitions: list[PartitionFetch] = field(default_factory=list)


class ShareService:
    def __init__(self, config: BrokerConfig, storage: Storage, clock: Clock,
                 configs: GroupConfigStore | None = None) -> None:
        self._config = config
        self._storage = storage
        self._logs = storage.logs
        self._clock = clock
        self.lock_ms = config.group_share_record_lock_duration_ms
        # The groups' configs (share.* keys: broker/config/group_configs.py), durable there.
        self.configs = configs if configs is not None else GroupConfigStore(config)
        self.configs.listeners.append(self._configs_changed)
        self.groups = ShareGroups(
            session_timeout_ms=config.group_share_session_timeout_ms,
            heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
            max_size=config.group_share_max_size,
            lookup=self._lookup_topic,
            timing=lambda g: (self.configs.int_value(g, SESSION_TIMEOUT),
                              self.configs.int_value(g, HEARTBEAT_INTERVAL)),
        )
        self.sessions = ShareSessionCache(config.group_share_max_share_sessions)
        self.states: dict[StateKey, SharePartitionState] = {}
        self._restored: dict[StateKey, Snapshot] = {}
        self._names: dict[uuid.UUID, str] = {}
        self._released = trio.Event()
        self._timer_wake = trio.Event()
        self._timer_due: int | None = None
        self.replayed_records = self._replay()

    # -- topics -----------------------------------------------------------------------------

    def _lookup_topic(self, name: str) -> tuple[uuid.UUID, int] | None:
        count = self._logs.partition_count(name)
        if count is None:
            return None
        topic_id = self._logs.topic_id(name)
        if topic_id is None:
            return None
        self._names[topic_id] = name
        return topic_id, count

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        name = self._names.get(topic_id)
        if name is not None and self._logs.topic_id(name) == topic_id:
            return name
        name = self._logs.topic_name(topic_id)
        if name is not None:
            self._names[topic_id] = name
        return name

    # -- group configs ----------------------------------------------------------------------

    def group_config(self, group_id: str, key: str) -> str:
        return self.configs.value(group_id, key)

    def _configs_changed(self, group_id: str) -> None:
        """A group's configs changed: its share partitions take the new lock duration, delivery
        limit and in-flight limit at once (records already acquired keep their deadline)."""
        for state_key, state in self.states.items():
            if state_key.group_id == group_id:
                state.lock_ms = self.lock_ms_for(group_id)
                state.delivery_limit = self.configs.int_value(group_id, DELIVERY_LIMIT)
                state.max_in_flight = self.configs.int_value(group_id, RECORD_LOCKS)

    def lock_ms_for(self, group_id: str) -> int:
        """The group's acquisition lock (its ``share.record.lock.duration.ms``, else the
        broker's ``group.share.record.lock.duration.ms``)."""
        return self.configs.int_value(group_id, LOCK_DURATION)

    # -- membership -------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: list[str] | None, client_id: str, client_host: str
                  ) -> HeartbeatResult:
        now = self._clock.now_ms()
        self.tick(now)
        result = self.groups.heartbeat(group_id, member_id, member_epoch, rack_id, subscribed,
                                       client_id, client_host, now)
        if member_epoch != -1:
            self._timer_check(now + self.groups.timing(group_id)[0])
        if member_epoch == -1:
            self._member_gone(group_id, member_id)
        return result

    def _member_gone(self, group_id: str, member_id: str) -> None:
        session = self.sessions.close(group_id, member_id)
        if session is not None:
            self._release(session)

    def _release(self, session: ShareSession) -> None:
        changed = False
        for key in list(self.states):
            if key.group_id == session.group_id:
                changed |= self.states[key].release_member(session.member_id)
        if changed:
            self._wake()

    async def run_timer(self) -> None:
        """The share timer (as Kafka's): releases records whose acquisition lock ran out and
        removes members whose session timed out when they are due, not when a request happens
        to look. Sleeps until the earliest deadline; an earlier one set meanwhile (a new lock, a
        new member) wakes it (``_timer_check``)."""
        while True:
            now = self._clock.now_ms()
            try:
                self.tick(now)
            except KafkaError:  # the state log refused a write: logged, tried again next time
                pass
            due = self._next_due()
            self._timer_due = due
            self._timer_wake = trio.Event()
            delay = TIMER_IDLE_S if due is None else max(0, due - self._clock.now_ms()) / 1000
            with trio.move_on_after(min(delay, TIMER_IDLE_S)):
                await self._timer_wake.wait()

    def _next_due(self) -> int | None:
        lock = self.next_deadline()
        member = self.groups.next_deadline()
        candidates = [d for d in (member, lock if lock < NO_DEADLINE else None) if d is not None]
        return min(candidates, default=None)

    def _timer_check(self, deadline_ms: int) -> None:
        """A deadline was set: wake the timer if it sleeps past it."""
        if self._timer_due is None or deadline_ms < self._timer_due:
            self._timer_due = deadline_ms
            self._timer_wake.set()

    def tick(self, now_ms: int) -> None:
        for group_id, member_id in self.groups.expire(now_ms):
            log.info("share group %s: member %s timed out", group_id, member_id)
            self._member_gone(group_id, member_id)
        expired = [k for k, s in self.states.items() if s.expire(now_ms)]
        if expired:
            self._wake()
            self._persist(expired, now_ms)

    def metrics(self) -> list[tuple[str, str, int, int, int, int, int, int]]:
        """Per share partition in memory: ``(group, topic, partition, start offset, records in
        flight (Available or Acquired), Acquired, redelivered, archived)``; the last two count
        since the share partition was loaded (Prometheus counters: a restart resets them)."""
        rows = []
        for key, state in self.states.items():
            name = self.topic_name(key.topic_id)
            if name is None:
                continue
            rows.append((key.group_id, name, key.partition, state.start,
                         state.unfinished_count(), state.acquired_count(), state.redelivered,
                         state.archived))
        return sorted(rows)

    def describe(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    def list_groups(self) -> list[tuple[str, str]]:
        """``(group_id, state)`` of every share group, those known only by their state too."""
        known = {g: grp.state for g, grp in self.groups.groups.items()}
        for key in (*self.states, *self._restored):
            known.setdefault(key.group_id, "Empty")
        return sorted(known.items())

    def is_share_group(self, group_id: str) -> bool:
        return any(g == group_id for g, _ in self.list_groups())

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return ErrorCode.NON_EMPTY_GROUP
        if not self.is_share_group(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND
        self.groups.groups.pop(group_id, None)
        keys = [k for k in (*self.states, *self._restored) if k.group_id == group_id]
        self._tombstone(keys, self._clock.now_ms())
        return ErrorCode.NONE

    def topic_deleted(self, topic_id: uuid.UUID) -> list[Commit]:
        """A topic was deleted: every group's state on it goes (tombstones in the state log, as
        Kafka's share coordinator deletes it); a topic created again under the name has a new id
        and starts afresh."""
        keys = {k for k in (*self.states, *self._restored) if k.topic_id == topic_id}
        self._names.pop(topic_id, None)
        if not keys:
            return []
        log.info("topic %s deleted: dropped the share state of %d share partitions", topic_id,
                 len(keys))
        self._wake()
        try:
            return self._tombstone(keys, self._clock.now_ms())
        except KafkaError:  # logged; the replay at the next start drops them instead
            return []

    # -- share-group offsets (admin) ---------------------------------------------------------

    def group_topics(self, group_id: str) -> dict[str, list[int]]:
        """Topic name -> partitions for which ``group_id`` has share state."""
        out: dict[str, list[int]] = {}
        for key in (*self.states, *self._restored):
            if key.group_id == group_id:
                name = self.topic_name(key.topic_id)
                if name is not None:
                    out.setdefault(name, []).append(key.partition)
        return {t: sorted(set(p)) for t, p in sorted(out.items())}

    def start_offset(self, group_id: str, topic: str, index: int) -> tuple[int, int]:
        """``(share-partition start offset, lag)``, ``(-1, -1)`` without state; raises
        UNKNOWN_TOPIC_OR_PARTITION."""
        partition = self._logs.partition(topic, index)
        topic_id = self._logs.topic_id(topic)
        assert topic_id is not None
        key = StateKey(group_id, topic_id, index)
        state = self.states.get(key)
        if state is None:
            snapshot = self._restored.get(key)
            if snapshot is None:
                return -1, -1
            state = SharePartitionState(0, delivery_limit=1, lock_ms=1, max_in_flight=1)
            state.restore(snapshot.start_offset, snapshot.batches)
        finished = sum(r.last - r.first + 1 for r in state.runs
                       if r.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))
        return state.start, max(0, partition.high_watermark - state.start - finished)

    def _check_empty(self, group_id: str) -> None:
        """Raises INVALID_GROUP_ID for an id no group may have, NON_EMPTY_GROUP for a group with
        members (the admin offset APIs' group-level refusals)."""
        if not valid_group_id(group_id):
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "The group id is not valid.")
        group = self.groups.get(group_id)
        if group is not None and group.members:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP,
                             "The group is not empty.")  # (Kafka 4.4's text)

    def alter_offsets(self, group_id: str, topic: str, offsets: Sequence[tuple[int, int]]
                      ) -> tuple[dict[int, ErrorCode], list[Commit]]:
        """Move the start offsets of an empty group's share partitions (AlterShareGroupOffsets):
        the in-flight state is dropped; a code per partition and the commits to wait for."""
        self._check_empty(group_id)
        codes: dict[int, ErrorCode] = {}
        dirty: set[StateKey] = set()
        topic_id = self._logs.topic_id(topic)
        for index, offset in offsets:
            try:
                if topic_id is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                partition = self._logs.partition(topic, index)
                if not partition.log_start_offset <= offset <= partition.high_watermark:
                    raise KafkaError(ErrorCode.INVALID_REQUEST,
                                     f"offset {offset} is outside the log")
                key = StateKey(group_id, topic_id, index)
                self._state(key, partition, dirty).reset_start(offset)
                dirty.add(key)
                codes[index] = ErrorCode.NONE
            except KafkaError as exc:
                codes[index] = exc.code
        self.groups.ensure(group_id)
        return codes, self._persist(dirty, self._clock.now_ms())

    def delete_offsets(self, group_id: str, topic: str) -> list[Commit]:
        """Forget an empty group's share state on ``topic`` (DeleteShareGroupOffsets)."""
        self._check_empty(group_id)
        topic_id = self._logs.topic_id(topic)
        if topic_id is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        keys = [k for k in (*self.states, *self._restored)
                if k.group_id == group_id and k.topic_id == topic_id]
        return self._tombstone(keys, self._clock.now_ms())

    # -- share partitions -------------------------------------------------------------------

    def _state(self, key: StateKey, partition: Partition, dirty: set[StateKey]
               ) -> SharePartitionState:
        state = self.states.get(key)
        if state is not None:
            return state
        state = SharePartitionState(
            0, delivery_limit=self.configs.int_value(key.group_id, DELIVERY_LIMIT),
            lock_ms=self.lock_ms_for(key.group_id),
            max_in_flight=self.configs.int_value(key.group_id, RECORD_LOCKS))
        snapshot = self._restored.pop(key, None)
        if snapshot is not None:
            state.restore(max(snapshot.start_offset, partition.log_start_offset),
                          snapshot.batches)
        else:
            state.restore(self._initial_offset(key.group_id, partition), ())
            dirty.add(key)
        self.states[key] = state
        return state

    def _initial_offset(self, group_id: str, partition: Partition) -> int:
        """A new share partition's start: ``share.auto.offset.reset`` (earliest, latest, or
        by_duration:D: the first record at or after now - D, the end if none)."""
        strategy = reset_strategy(self.group_config(group_id, AUTO_OFFSET_RESET)) or ("latest", 0)
        if strategy[0] == "earliest":
            return partition.log_start_offset
        if strategy[0] == "by_duration":
            found = partition.offset_for_timestamp(self._clock.now_ms() - strategy[1])
            if found is not None:
                return min(max(found[1], partition.log_start_offset), partition.high_watermark)
        return partition.high_watermark

    def _partition(self, topic_id: uuid.UUID, index: int) -> tuple[str, Partition]:
        name = self.topic_name(topic_id)
        if name is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID)
        return name, self._logs.partition(name, index)

    # -- ShareFetch / ShareAcknowledge ------------------------------------------------------

    def open_request(self, group_id: str | None, member_id: str | None, epoch: int,
                     acks_present: bool, fetching: bool) -> ShareSession | None:
        """The session a ShareFetch (``fetching``) or ShareAcknowledge continues; raises
        KafkaError with the top-level code. None for a closing request (epoch -1)."""
        if not valid_group_id(group_id):
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "GroupId must be set, at most 32767 bytes.")
        if not member_id:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, "MemberId must be set.")
        if epoch == INITIAL_EPOCH:
            if not fetching:
                raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                 "Acknowledge requests cannot open a share session.")
            if acks_present:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Acknowledge data present on initial epoch.")
            opened, old = self.sessions.open(group_id, member_id)
            if old is not None:
                self._release(old)
            return opened
        session = self.sessions.check(group_id, member_id, epoch)
        if session is None or epoch == FINAL_EPOCH:
            return None
        self.sessions.advance(session)
        return session

    def acknowledge(self, group_id: str, member_id: str,
                    acks: Iterable[tuple[uuid.UUID, int, Sequence[AckBatch]]],
                    dirty: set[StateKey]) -> dict[tuple[uuid.UUID, int], ErrorCode]:
        """Apply acknowledgements; the code of each (topic id, partition)."""
        now = self._clock.now_ms()
        codes: dict[tuple[uuid.UUID, int], ErrorCode] = {}
        for topic_id, index, batches in acks:
            code = ErrorCode.NONE
            try:
                _, partition = self._partition(topic_id, index)
                key = StateKey(group_id, topic_id, index)
                state = self._state(key, partition, dirty)
                for batch in batches:
                    result = state.acknowledge(member_id, batch.first_offset, batch.last_offset,
                                               batch.types, now)
                    if result != ErrorCode.NONE:
                        code = result
                dirty.add(key)
                if state.next_deadline() < NO_DEADLINE:  # a renewed lock
                    self._timer_check(state.next_deadline())
            except KafkaError as exc:
                code = exc.code
            codes[(topic_id, index)] = code
        self._wake()
        return codes

    def connection_sessions(self) -> ConnectionSessions:
        return ConnectionSessions(self.sessions, self.connection_closed)

    def connection_closed(self, session: ShareSession) -> None:
        """The connection that opened ``session`` closed: if it is still the member's session,
        close it and release what the member holds (Kafka does the same)."""
        if self.sessions.get(session.group_id, session.member_id) is session:
            self.sessions.close(session.group_id, session.member_id)
            self._release(session)

    def close_session(self, group_id: str, member_id: str) -> None:
        """After the acknowledgements of a closing request (epoch -1)."""
        self._member_gone(group_id, member_id)

    def fetch_once(self, group_id: str, member_id: str, session: ShareSession,
                   max_records: int, max_bytes: int, dirty: set[StateKey]
                   ) -> list[PartitionFetch]:
        """Acquire records on every partition of the session, in turn, within the limits."""
        now = self._clock.now_ms()
        cap = self._config.fetch_max_bytes
        remaining_bytes = min(max_bytes, cap) if max_bytes > 0 else cap
        remaining = max_records if max_records > 0 else 500
        committed = self.group_config(group_id, ISOLATION_LEVEL) == "read_committed"
        out = []
        for topic_id, index in list(session.partitions):
            result = PartitionFetch(topic_id, index)
            out.append(result)
            try:
                _, partition = self._partition(topic_id, index)
            except KafkaError as exc:
                # Answered once, then forgotten: a session holds only partitions that exist
                # (a client naming random topic ids cannot grow it).
                result.error = exc.code
                del session.partitions[(topic_id, index)]
                continue
            if remaining <= 0 or remaining_bytes <= 0:
                continue
            try:
                key = StateKey(group_id, topic_id, index)
                state = self._state(key, partition, dirty)
                data, acquired = self._acquire(state, partition, member_id, remaining,
                                               remaining_bytes, committed, now, key, dirty)
            except KafkaError as exc:
                result.error = exc.code
                continue
            result.records, result.acquired = data, acquired
            remaining -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
            remaining_bytes -= len(data)
        return out

    def _acquire(self, state: SharePartitionState, partition: Partition, member_id: str,
                 max_records: int, max_bytes: int, committed: bool, now: int, key: StateKey,
                 dirty: set[StateKey]) -> tuple[Any, list[Acquired]]:
        if state.expire(now):
            dirty.add(key)
        if state.start < partition.log_start_offset:  # retention passed the share partition
            state.reset_start(partition.log_start_offset)
            dirty.add(key)
        offset = state.next_fetch_offset()
        bound = partition.last_stable_offset if committed else partition.high_watermark
        if offset is None or offset >= bound:
            return b"", []
        try:
            data = partition.read(offset, max_bytes, bound)
        except KafkaError as exc:
            if exc.code != ErrorCode.OFFSET_OUT_OF_RANGE:
                raise
            # The log no longer has the offset (records deleted, a tail lost at a power cut):
            # the share partition starts again where the log is.
            state.reset_start(min(max(offset, partition.log_start_offset),
                                  partition.high_watermark))
            dirty.add(key)
            return b"", []
        if not data:
            return b"", []
        aborted = partition.aborted_transactions(offset, bound) if committed else []
        batches, ends = _classify(data, aborted)
        acquired = state.acquire(member_id, batches, max_records, now)
        if acquired:
            self._timer_check(state.next_deadline())
        if not acquired:
            if any(not b.deliverable for b in batches):
                dirty.add(key)
            return b"", []
        top = acquired[-1].last_offset
        cut = next((end for b, end in zip(batches, ends, strict=True) if b.last >= top),
                   len(data))
        return (data[:cut] if cut < len(data) else data), acquired

    def next_deadline(self) -> int:
        return min((s.next_deadline() for s in self.states.values()), default=NO_DEADLINE)

    async def wait_for_records(self, deadline_s: float, data_arrived: Any) -> None:
        """Until new data arrives, records are released, a lock expires or ``deadline_s``
        (trio time)."""
        released = self._released
        lock_due = self.next_deadline()
        wait_until = deadline_s
        if lock_due < NO_DEADLINE:
            wait_until = min(wait_until, trio.current_time()
                             + max(0, lock_due - self._clock.now_ms()) / 1000 + 0.001)
        wait_until = min(wait_until, trio.current_time() + MAX_POLL_SLICE_S)
        with trio.move_on_at(wait_until):
            async with trio.open_nursery() as nursery:
                async def watch(event: Any) -> None:
                    await event.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(watch, data_arrived.event())
                nursery.start_soon(watch, released)

    def _wake(self) -> None:
        self._released.set()
        self._released = trio.Event()

    # -- the state log ----------------------------------------------------------------------

    def _state_partition(self, key: StateKey, now_ms: int) -> Partition:
        logs = self._logs
        count = logs.partition_count(SHARE_GROUP_STATE_TOPIC)
        if count is None:
            count = self._config.share_coordinator_state_topic_num_partitions
            logs.create_topic(SHARE_GROUP_STATE_TOPIC, count,
                              internal_topic_config(STATE_SEGMENT_BYTES), now_ms)
            log.info("created %s with %d partitions", SHARE_GROUP_STATE_TOPIC, count)
        index = partition_for(f"{key.group_id}:{key.topic_id}:{key.partition}", count)
        return logs.partition(SHARE_GROUP_STATE_TOPIC, index)

    def persist(self, keys: Iterable[StateKey]) -> list[Commit]:
        return self._persist(keys, self._clock.now_ms())

    def _persist(self, keys: Iterable[StateKey], now_ms: int) -> list[Commit]:
        records: dict[int, tuple[Partition, list]] = {}
        for key in keys:
            state = self.states.get(key)
            if state is None:
                continue
            value = encode_snapshot(Snapshot(state.start, 0, state.snapshot()), now_ms)
            self._add(records, key, value, now_ms)
        return self._append(records, now_ms)

    def _tombstone(self, keys: Iterable[StateKey], now_ms: int) -> list[Commit]:
        records: dict[int, tuple[Partition, list]] = {}
        for key in keys:
            self.states.pop(key, None)
            self._restored.pop(key, None)
            self._add(records, key, None, now_ms)
        return self._append(records, now_ms)

    def _add(self, records: dict[int, tuple[Partition, list]], key: StateKey,
             value: bytes | None, now_ms: int) -> None:
        partition = self._state_partition(key, now_ms)
        entry = records.setdefault(partition.index, (partition, []))
        entry[1].append((encode_key(key), value, (), now_ms))

    def _append(self, records: dict[int, tuple[Partition, list]], now_ms: int) -> list[Commit]:
        commits = []
        for partition, items in records.values():
            try:
                _, commit = self._storage.append(partition, bytearray(encode_batch(items)),
                                                 now_ms)
            except KafkaError as exc:
                log.error("could not store share state: %s", exc)
                raise
            if commit is not None:
                commits.append(commit)
        return commits

    def _replay(self) -> int:
        logs = self._logs
        count = logs.partition_count(SHARE_GROUP_STATE_TOPIC) or 0
        n = 0
        for index in range(count):
            partition = logs.partition(SHARE_GROUP_STATE_TOPIC, index)
            skips = SkipLog(log, partition)
            for header, records in read_batches(partition, partition.high_watermark, skips):
                if header.is_control:
                    continue
                for record in records:
                    try:
                        key = decode_key_untrusted(record.key)
                        if key is None:
                            continue
                        value = decode_value_untrusted(record.key, record.value)  # type: ignore[arg-type]
                    except CorruptFrameError as exc:
                        skips.skip(record.offset, str(exc))
                        continue
                    n += 1
                    if value is None:
                        self._restored.pop(key, None)
                    else:
                        self._restored[key] = value
            skips.close()
        if n:
            log.info("loaded the state of %d share partitions from %d records of %s",
                     len(self._restored), n, SHARE_GROUP_STATE_TOPIC)
        # State of a topic deleted before its tombstones were durable goes now.
        gone = {k for k in self._restored if logs.topic_name(k.topic_id) is None}
        if gone:
            self._tombstone(gone, self._clock.now_ms())
        return n


def _classify(data: Any, aborted: list[tuple[int, int]]) -> tuple[list[LogBatch], list[int]]:
    """The batches of ``data`` as acquisition sees them, and where each ends in ``data``:
    control batches and (``aborted``: a read_committed read's aborted transactions,
    ``(producer_id, first_offset)``) the batches of aborted transactions are not deliverable."""
    pending = sorted(aborted, key=lambda a: a[1])
    active: set[int] = set()
    k = 0
    out: list[LogBatch] = []
    ends: list[int] = []
    for pos, header in iter_batches_untrusted(data):
        last = header.last_offset
        while k < len(pending) and pending[k][1] <= last:
            active.add(pending[k][0])
            k += 1
        if header.is_control:
            active.discard(header.producer_id)
            deliverable = False
        else:
            deliverable = not (header.is_transactional and header.producer_id in active)
        out.append(LogBatch(header.base_offset, last, deliverable))
        ends.append(pos + header.size)
    return out, ends
