"""The trio shell around the group coordinator: waiting replies, the offsets log, replay at start.

``GroupCoordinator`` (pure) decides; this class does what needs the outside world. It takes plain
values (ids, generations, ``(name, metadata)`` protocols, ``OffsetToCommit``) and returns codes and
dataclasses (``JoinResult``, ``SyncResult``, ``FetchedOffset``), now or in a ``Deferred``: the
handlers (``broker/handlers/groups.py``) decode the requests and build the responses.

- Waiting: a JoinGroup or SyncGroup that must wait gets a ``Deferred`` (the dispatcher's), which
  the handler returns. The coordinator's completions set the matching slot. While it waits, a reply also
  drives the coordinator's clock: it sleeps until the coordinator's next deadline (at most
  ``MAX_TIMER_SLEEP_S``) and then runs the due timers, so a rebalance completes on time without a
  background task. ``tick(now_ms)`` (housekeeping) runs every timer and forgets empty groups.
- Offsets: OffsetCommit and TxnOffsetCommit append one batch to the group's partition of
  ``__consumer_offsets`` (created on first use) through ``Storage.append_untrusted``, so the normal
  validation, producer-state checks and group-commit fsync apply, and answer once it is durable.
  A TxnOffsetCommit batch also passes the transaction check of transactional Produce (the
  partition must be in the producer's ongoing transaction): ``verify_txn_produce``, a step the
  composition root passes in (this package never sees the transaction coordinator).
- Group metadata: when a generation is settled (the leader's SyncGroup), when a rebalance ends
  without members and when a group is deleted or expires, the group's metadata record
  (``group_metadata.py``) is appended to its ``__consumer_offsets`` partition; the JoinGroup and
  SyncGroup answers that this produced wait until it is durable, as Kafka's do.
- Replay: the constructor reads every ``__consumer_offsets`` partition back into the offset store
  and restores each group from its latest metadata record, members and assignments included, so
  members keep heartbeating across a restart (before the broker accepts connections, so there is
  no loading state). Records of other protocols' groups (the Streams groups') go, in the same
  pass, to the ``record_replays`` the composition root passes in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import trio

from broker.clock import Clock
from broker.config import BrokerConfig
from broker.group.classic_members import (
    ClassicJoin,
    UpgradeRefused,
    check_upgrade,
    classic_heartbeat,
    classic_join,
    classic_leave,
    classic_members_of,
    classic_sync,
    consumer_group_from_classic,
)
from broker.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    HeartbeatRequest,
    HeartbeatResult,
    MigrationPolicy,
)
from broker.group.consumer_records import (
    ConsumerGroupReplay,
    build_batch,
    converted_group_records,
    deleted_group_records,
    group_records,
)
from broker.group.coordinator import (
    Completion,
    GroupConfig,
    GroupCoordinator,
    GroupSummary,
    JoinResult,
    Outcome,
    SyncResult,
    Waiting,
)
from broker.group.group_metadata import (
    GroupMetadataRecord,
    build_group_metadata_batch,
    decode_group_metadata_key_untrusted,
    decode_group_metadata_value_untrusted,
)
from broker.group.offset_service import (
    APPEND_ERRORS,
    INT64_MAX,
    EpochGroups,
    GroupOffsets,
    RecordReplay,
    VerifyTxnProduce,
    after_all,
)
from broker.log.cleaner import internal_topic_config
from broker.log.internal_replay import SkipLog, read_batches, restore_fixed_config
from broker.log.partition import Partition
from broker.log.topics import (
    CONSUMER_OFFSETS_TOPIC,
    INTERNAL_TOPICS,
    TopicPartition,
    offsets_partition,
    offsets_partition_count,
)
from broker.reply import Deferred, after
from broker.storage import Commit, Storage
from protocol.errors import CorruptFrameError, ErrorCode, KafkaError

log = logging.getLogger("minibroker.group")

T = TypeVar("T")


# Compacted, as in Kafka (broker/log/cleaner.py): the latest commit of each (group, topic,
# partition) stays, tombstones go after delete.retention.ms; the segment size
# (offsets.topic.segment.bytes, small by default) bounds what is left uncleaned.


def offsets_topic_config(segment_bytes: int) -> dict[str, str]:
    return internal_topic_config(segment_bytes)


# A waiting reply re-examines the coordinator's timers at least this often.
MAX_TIMER_SLEEP_S = 1.0

class _Slot:
    __slots__ = ("event", "result", "durable")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.result: Any = None
        # Set with the result when it must wait for a group metadata record to be durable.
        self.durable: list[Commit] = []


_OFFSET_KEYS = (0, 1)  # the record types of committed offsets in __consumer_offsets


class GroupService(GroupOffsets):
    """Everything about groups that the handlers and the broker call (the offsets: its base,
    ``offset_service.py``)."""

    def __init__(
        self,
        config: BrokerConfig,
        storage: Storage,
        clock: Clock,
        verify_txn_produce: VerifyTxnProduce,
        group_timing: Callable[[str], tuple[int, int]] | None = None,
        record_replays: Sequence[RecordReplay] = (),
    ) -> None:
        self._storage = storage
        self._logs = storage.logs
        self._clock = clock
        self._verify_txn_produce = verify_txn_produce
        self._offsets_partitions = config.offsets_topic_num_partitions
        self._offsets_segment_bytes = config.offsets_topic_segment_bytes
        self.coordinator = GroupCoordinator(
            GroupConfig(
                min_session_timeout_ms=config.group_min_session_timeout_ms,
                max_session_timeout_ms=config.group_max_session_timeout_ms,
                initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            )
        )
        # The consumer group protocol (KIP-848): its own groups, one id space with the classic
        # ones (a group id is one kind or the other), the offsets shared.
        self.consumer = ConsumerGroupCoordinator(ConsumerGroupConfig(
            heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            session_timeout_ms=config.group_consumer_session_timeout_ms,
            assignors=tuple(a.strip() for a in config.group_consumer_assignors.split(",")
                            if a.strip()) or ("uniform",),
            internal_topics=INTERNAL_TOPICS,
            timing=group_timing,  # consumer.* GROUP configs (broker/config/group_configs.py)
            migration_policy=MigrationPolicy.parse(config.group_consumer_migration_policy),
            assignment_interval_ms=config.group_consumer_assignment_interval_ms,
        ))
        self._slots: dict[int, _Slot] = {}
        # Groups of other member-epoch protocols (the Streams protocol, KIP-1071:
        # streams_service.py), attached by the composition root: one group id space, the offsets
        # here, their commits validated there.
        self.epoch_groups: list[EpochGroups] = []
        self._record_replays = tuple(record_replays)
        self.replayed_batches = self._replay()

    # -- the internal topic ------------------------------------------------------------------

    def offsets_partition_count(self) -> int:
        """Partitions of ``__consumer_offsets``: the topic's if it exists, else the config's."""
        return offsets_partition_count(self._logs.partition_count(CONSUMER_OFFSETS_TOPIC),
                                       self._offsets_partitions)

    def offsets_topic_partition(self, group_id: str) -> TopicPartition:
        """The ``__consumer_offsets`` partition that holds ``group_id``'s offsets (the one
        AddOffsetsToTxn adds to a transaction)."""
        return offsets_partition(group_id, self.offsets_partition_count())

    def partition_for(self, group_id: str) -> int:
        return self.offsets_topic_partition(group_id)[1]

    def offsets_partition(self, group_id: str, now_ms: int) -> Partition:
        """The group's ``__consumer_offsets`` partition, creating the topic on first use."""
        logs = self._logs
        if logs.partition_count(CONSUMER_OFFSETS_TOPIC) is None:
            logs.create_topic(
                CONSUMER_OFFSETS_TOPIC, self._offsets_partitions,
                offsets_topic_config(self._offsets_segment_bytes), now_ms,
            )
            log.info("created %s with %d partitions", CONSUMER_OFFSETS_TOPIC,
                     self._offsets_partitions)
        return logs.partition(*self.offsets_topic_partition(group_id))

    def _high_watermark(self, group_id: str) -> int:
        logs = self._logs
        if logs.partition_count(CONSUMER_OFFSETS_TOPIC) is None:
            return 0
        return logs.partition(*self.offsets_topic_partition(group_id)).high_watermark

    def _replay(self) -> int:
        logs = self._logs
        count = logs.partition_count(CONSUMER_OFFSETS_TOPIC) or 0
        if count:
            restore_fixed_config(logs, CONSUMER_OFFSETS_TOPIC,
                                 offsets_topic_config(self._offsets_segment_bytes), log)
        batches = 0
        groups: dict[str, GroupMetadataRecord | None] = {}
        consumer_replay = ConsumerGroupReplay()
        for index in range(count):
            batches += self._replay_partition(logs.partition(CONSUMER_OFFSETS_TOPIC, index), groups,
                                              consumer_replay)
        now = self._clock.now_ms()
        try:
            consumer_groups = consumer_replay.groups(logs.topic_name, now)
        except CorruptFrameError as exc:
            log.error("consumer groups not restored: %s", exc)
            consumer_groups = []
        for consumer_group in consumer_groups:
            groups.pop(consumer_group.group_id, None)
            self.consumer.load_group(consumer_group, logs)
        restored = 0
        for group_id, record in groups.items():
            if record is not None:
                self.coordinator.load_group(group_id, record, now)
                restored += bool(record.members)
        store = self.coordinator.offsets
        for group_id in store.group_ids():
            if group_id not in self.consumer.groups:
                self.coordinator.ensure_group(group_id)
        if consumer_groups:
            log.info("restored %d consumer-protocol groups", len(consumer_groups))
        if batches:
            log.info("loaded offsets of %d groups and %d groups with members from %d batches "
                     "of %s", len(store.group_ids()), restored, batches, CONSUMER_OFFSETS_TOPIC)
        return batches

    def _replay_partition(
        self, partition: Partition, groups: dict[str, GroupMetadataRecord | None],
        consumer_replay: ConsumerGroupReplay,
    ) -> int:
        """Load one partition; what cannot be read is skipped with a log line naming its offset
        (``broker/log/internal_replay.py``), everything else is loaded."""
        store = self.coordinator.offsets
        others = self._record_replays
        skips = SkipLog(log, partition)
        batches = 0
        for header, records in read_batches(partition, partition.high_watermark, skips):
            store.replay_batch(partition.index, header, records, partition.high_watermark,
                               skips.skip)
            if not header.is_control and not header.is_transactional:
                for record in records:
                    key = record.key
                    if key is None or len(key) < 2 or key[0] == 0 and key[1] in _OFFSET_KEYS:
                        continue  # offsets (key types 0 and 1): replay_batch took them
                    try:
                        if consumer_replay.apply_untrusted(record.key, record.value):
                            continue
                        group_id = decode_group_metadata_key_untrusted(record.key)
                        if group_id is not None:
                            groups[group_id] = decode_group_metadata_value_untrusted(record.value)
                            continue
                        for other in others:
                            if other.apply_untrusted(record.key, record.value):
                                break
                    except CorruptFrameError as exc:
                        skips.skip(record.offset, str(exc))
            batches += 1
        skips.close()
        return batches

    # -- waiting -----------------------------------------------------------------------------

    def _resolve(self, completions: list[Completion], durable: list[Commit]) -> None:
        for waiter, result in completions:
            slot = self._slots.pop(waiter, None)
            if slot is not None:
                slot.result = result
                slot.durable = durable
                slot.event.set()

    def _store_groups(self, now_ms: int) -> list[Commit]:
        """Append the metadata records the coordinator asked for; the events are set once
        they are durable. A failed append is logged: the group lives on in memory, and the next
        settled generation writes a record again."""
        ids = self.coordinator.take_to_store()
        if not ids:
            return []
        by_partition: dict[int, list[tuple[str, GroupMetadataRecord | None]]] = {}
        for group_id in ids:
            record = self.coordinator.group_record(group_id, now_ms)
            by_partition.setdefault(self.offsets_topic_partition(group_id)[1], []).append((group_id, record))
        events = []
        for records in by_partition.values():
            try:
                partition = self.offsets_partition(records[0][0], now_ms)
                batch = build_group_metadata_batch(records, now_ms)
                _, flushed = self._storage.append(partition, batch, now_ms)
            except (KafkaError, ValueError) as exc:
                log.error("could not store the metadata of groups %s: %s",
                          [g for g, _ in records], exc)
                continue
            if flushed is not None:
                events.append(flushed)
        return events

    def _reply(self, outcome: Outcome, now_ms: int | None = None) -> Any:
        durable = self._store_groups(self._clock.now_ms() if now_ms is None else now_ms)
        self._resolve(outcome.completions, durable)
        reply = outcome.reply
        if not isinstance(reply, Waiting):
            if durable and isinstance(reply, JoinResult | SyncResult):
                return after(durable, reply)
            return reply
        slot = self._slots[reply.waiter] = _Slot()

        async def wait() -> Any:
            while slot.result is None:
                timeout = MAX_TIMER_SLEEP_S
                deadline = self.coordinator.next_deadline()
                if deadline is not None:
                    # +1 ms: never wake before the deadline's millisecond has passed.
                    timeout = min(timeout, max(deadline - self._clock.now_ms() + 1, 0) / 1000)
                with trio.move_on_after(timeout):
                    await slot.event.wait()
                if slot.result is None:
                    self.run_timers(self._clock.now_ms())
            for event in slot.durable:
                await event.wait()
            return slot.result

        return Deferred(wait)

    def run_timers(self, now_ms: int) -> None:
        """Expire sessions and end rebalances that are due at ``now_ms``."""
        completions = self.coordinator.tick(now_ms)
        self._resolve(completions, self._store_groups(now_ms))
        deadline = self.consumer.next_deadline()
        if deadline is not None and deadline <= now_ms:
            self.consumer.tick(self._logs, now_ms)
            self._store_consumer_groups(now_ms)

    async def run_timer_task(self) -> None:
        """Expire sessions and end rebalances on time even when no request comes (a group
        whose every member died): sleep until the earliest deadline of either protocol's
        groups, at most ``MAX_TIMER_SLEEP_S`` (a deadline set meanwhile is at most that late),
        then run the due timers. Runs for the broker's life in its nursery."""
        while True:
            now = self._clock.now_ms()
            deadlines = [d for d in (self.coordinator.next_deadline(),
                                     self.consumer.next_deadline()) if d is not None]
            delay = MAX_TIMER_SLEEP_S
            if deadlines:
                delay = min(delay, max(min(deadlines) - now + 1, 0) / 1000)
            await trio.sleep(delay)
            self.run_timers(self._clock.now_ms())

    def consumer_group_stats(self) -> list[tuple[str, str, int, int, int, int, int]]:
        """Per consumer-protocol group, for the metrics: ``(group_id, state, members, classic
        members, group epoch, assignment epoch, rebalances since start)``."""
        return [(g.group_id, g.state.value, len(g.members),
                 sum(m.classic is not None for m in g.members.values()), g.group_epoch,
                 g.assignment_epoch, g.rebalances) for g in self.consumer.groups.values()]

    def tick(self, now_ms: int) -> None:
        """Housekeeping: run every due timer, forget Empty groups that hold no offsets."""
        self.run_timers(now_ms)
        self.coordinator.remove_empty_groups()
        self._store_groups(now_ms)
        # Consumer-protocol groups: subscribed topics that changed (a topic a regex matches
        # was created) bump the epoch even while nobody heartbeats; empty groups go.
        self.consumer.tick(self._logs, now_ms)
        store = self.coordinator.offsets
        self.consumer.remove_empty_groups(store.has_group)
        self._store_consumer_groups(now_ms)

    # -- the consumer group protocol (KIP-848) ----------------------------------------------

    def _store_consumer_groups(self, now_ms: int) -> list[Commit]:
        """Append the records of every consumer group that changed (one batch per group);
        the returned events are set once they are durable. A failed append is logged: the
        group lives on in memory and its next change writes its records again."""
        events = self._downgrade_groups(now_ms)
        topic_id = self._logs.topic_id
        for group_id, group in self.consumer.take_changes():
            records = (deleted_group_records(group_id) if group is None
                       else group_records(group, topic_id))
            if not records:
                continue
            try:
                partition = self.offsets_partition(group_id, now_ms)
                _, flushed = self._storage.append(partition, build_batch(records, now_ms), now_ms)
            except (KafkaError, ValueError) as exc:
                log.error("could not store the records of consumer group %s: %s", group_id, exc)
                if group is not None:
                    group.dirty_group = True
                    group.dirty_members.update(group.members)
                continue
            if flushed is not None:
                events.append(flushed)
        return events

    def _downgrade_groups(self, now_ms: int) -> list[Commit]:
        """Consumer groups whose last consumer-protocol member left become classic groups
        (``classic_members.py``): their records tombstoned, the classic group's written."""
        events: list[Commit] = []
        for group, gone, rebalance in self.consumer.take_downgrades():
            records = converted_group_records(group.group_id, [*group.members, *gone])
            try:
                partition = self.offsets_partition(group.group_id, now_ms)
                _, flushed = self._storage.append(partition, build_batch(records, now_ms), now_ms)
            except (KafkaError, ValueError) as exc:
                log.error("could not store the downgrade of group %s: %s", group.group_id, exc)
                flushed = None
            if flushed is not None:
                events.append(flushed)
            completions = self.coordinator.adopt_downgraded(
                group.group_id, group.group_epoch, "consumer",
                classic_members_of(group, now_ms), now_ms, rebalance)
            log.info("group %s: its last consumer-protocol member (%s) left or was replaced; "
                     "it is a classic group again", group.group_id, ", ".join(gone))
            self._resolve(completions, [])
        if events:
            events += self._store_groups(now_ms)
        else:
            self._store_groups(now_ms)
        return events

    def _upgrade(self, group_id: str, now_ms: int) -> HeartbeatResult | None:
        """A ConsumerGroupHeartbeat for a classic group with members: converted to a consumer
        group when the migration policy and the group allow it (None), else Kafka's refusal."""
        classic = self.coordinator.groups[group_id]
        try:
            check_upgrade(classic, self.consumer)
            group = consumer_group_from_classic(classic)
        except UpgradeRefused as refused:
            log.info("%s", refused)
            return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND, str(refused))
        self._resolve(self.coordinator.remove_for_upgrade(group_id), [])
        self._store_groups(now_ms)
        self.consumer.adopt(group, self._logs, now_ms)
        log.info("group %s: a member joined with the consumer protocol; it is a consumer "
                 "group now (generation %d)", group_id, group.group_epoch)
        return None

    def _epoch_groups_of(self, group_id: str) -> EpochGroups | None:
        for other in self.epoch_groups:
            if other.has_group(group_id):
                return other
        return None

    def is_consumer_group(self, group_id: str) -> bool:
        """Whether ``group_id`` is a consumer-protocol group (KIP-848)."""
        return group_id in self.consumer.groups

    def consumer_group_heartbeat(
        self, request: HeartbeatRequest, now_ms: int, _retry: bool = False
    ) -> HeartbeatResult | Deferred[HeartbeatResult]:
        """ConsumerGroupHeartbeat: answered once the records it produced are durable. A group
        id a classic group with members uses is GROUP_ID_NOT_FOUND (Kafka's answer when the
        group cannot be converted); an empty classic group becomes a consumer group."""
        if self._epoch_groups_of(request.group_id) is not None:
            return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND,
                                   f"Group {request.group_id} is not a consumer group.")
        classic = self.coordinator.groups.get(request.group_id)
        if classic is not None and request.group_id not in self.consumer.groups:
            self.run_timers(now_ms)
            classic = self.coordinator.groups.get(request.group_id)
        if classic is not None and request.group_id not in self.consumer.groups:
            if classic.members:
                if request.member_epoch != 0:
                    return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND,
                                           f"Group {request.group_id} is not a consumer group.")
                refused = self._upgrade(request.group_id, now_ms)
                if refused is not None:
                    return refused
            else:
                self.coordinator.delete_groups([request.group_id], now_ms)
                self._store_groups(now_ms)
        result = self.consumer.heartbeat(request, self._logs, now_ms)
        events = self._store_consumer_groups(now_ms)
        if (result.error is ErrorCode.GROUP_ID_NOT_FOUND and request.member_epoch == 0
                and request.group_id in self.coordinator.groups and not _retry):
            # Its group just became classic (its last consumer-protocol member expired):
            # this join upgrades it again, as it would have a moment later.
            return self.consumer_group_heartbeat(request, now_ms, _retry=True)
        return after_all(events, result)

    def _leave_classic_for_consumer(self, group_id: str, now_ms: int) -> ErrorCode:
        """A classic request for a consumer group: INCONSISTENT_GROUP_PROTOCOL while it has
        members; an empty one is dropped so that the classic protocol can use the id."""
        if self._epoch_groups_of(group_id) is not None:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        group = self.consumer.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE
        if group.members:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        self.consumer.delete_group(group_id)
        self._store_consumer_groups(now_ms)
        return ErrorCode.NONE

    # -- membership --------------------------------------------------------------------------

    def join_group(
        self,
        group_id: str,
        member_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        now_ms: int,
        group_instance_id: str | None = None,
        require_known_member_id: bool = False,
    ) -> JoinResult | Deferred[JoinResult]:
        """``protocols``: ``(name, metadata)`` in the member's order of preference. A consumer
        group with members answers it itself (its classic members, ``classic_members.py``)."""
        group = self._consumer_group_with_members(group_id, now_ms)
        if group is not None:
            result = classic_join(self.consumer, group, ClassicJoin(
                group_id, member_id, client_id, client_host, session_timeout_ms,
                rebalance_timeout_ms, protocol_type,
                tuple((name, bytes(metadata)) for name, metadata in protocols),
                group_instance_id, require_known_member_id), self._logs, now_ms)
            return after_all(self._store_consumer_groups(now_ms), result)
        if self._leave_classic_for_consumer(group_id, now_ms) is not ErrorCode.NONE:
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        outcome = self.coordinator.join_group(
            group_id, member_id, client_id, client_host, session_timeout_ms,
            rebalance_timeout_ms, protocol_type, list(protocols), now_ms,
            group_instance_id=group_instance_id,
            require_known_member_id=require_known_member_id,
        )
        return self._reply(outcome, now_ms)

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: dict[str, bytes],
        now_ms: int,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> SyncResult | Deferred[SyncResult]:
        """``assignments``: member id -> assignment (the leader's; empty from the others)."""
        group = self._consumer_group_with_members(group_id, now_ms)
        if group is not None:
            return classic_sync(group, member_id, generation_id, group_instance_id,
                                protocol_type, protocol_name, now_ms)
        outcome = self.coordinator.sync_group(
            group_id, generation_id, member_id, assignments, now_ms,
            group_instance_id=group_instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
        )
        return self._reply(outcome, now_ms)

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, now_ms: int,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        group = self._consumer_group_with_members(group_id, now_ms)
        if group is not None:
            return classic_heartbeat(group, member_id, generation_id, group_instance_id, now_ms,
                                     self.consumer.may_assign(group, now_ms))
        return self._reply(
            self.coordinator.heartbeat(
                group_id, generation_id, member_id, now_ms, group_instance_id
            ),
            now_ms,
        )

    def leave_group(
        self, group_id: str, member_id: str, now_ms: int, group_instance_id: str | None = None
    ) -> ErrorCode:
        group = self._consumer_group_with_members(group_id, now_ms)
        if group is not None:
            code = classic_leave(self.consumer, group, member_id, group_instance_id, self._logs,
                                 now_ms)
            self._store_consumer_groups(now_ms)
            return code
        return self._reply(
            self.coordinator.leave_group(group_id, member_id, now_ms, group_instance_id), now_ms
        )

    def _consumer_group_with_members(self, group_id: str, now_ms: int) -> ConsumerGroup | None:
        """The consumer group a classic request goes to (its timers run first), or None."""
        if group_id not in self.consumer.groups:
            return None
        self.run_timers(now_ms)
        group = self.consumer.groups.get(group_id)
        return group if group is not None and group.members else None

    def describe_group(self, group_id: str, now_ms: int) -> GroupSummary:
        summary, completions = self.coordinator.describe_group(group_id, now_ms)
        self._resolve(completions, self._store_groups(now_ms))
        return summary

    def list_groups(self, now_ms: int) -> list[tuple[str, str, str]]:
        """``(group_id, protocol_type, state)`` of every classic group (not the empty classic
        entries a transaction marker leaves for a consumer-protocol group's offsets)."""
        self.run_timers(now_ms)
        consumer = self.consumer.groups
        return [g for g in self.coordinator.list_groups()
                if g[0] not in consumer and self._epoch_groups_of(g[0]) is None]

    def list_consumer_groups(self, now_ms: int) -> list[tuple[str, str, str]]:
        """``(group_id, protocol_type, state)`` of every consumer-protocol group."""
        self.run_timers(now_ms)
        return [(g.group_id, "consumer", g.state.value) for g in self.consumer.groups.values()]

    def delete_groups(
        self, group_ids: list[str], now_ms: int
    ) -> dict[str, ErrorCode] | Deferred[dict[str, ErrorCode]]:
        """DeleteGroups: ``group_id -> error``, answered once the tombstones of the deleted
        groups (their metadata record and every committed offset) are durable."""
        store = self.coordinator.offsets
        consumer_ids = [g for g in group_ids if g in self.consumer.groups]
        others = {g: o for g in group_ids if (o := self._epoch_groups_of(g)) is not None}
        result = self.coordinator.delete_groups(
            [g for g in group_ids if g not in self.consumer.groups and g not in others], now_ms)
        self.run_timers(now_ms)
        for group_id in consumer_ids:
            result[group_id] = self.consumer.delete_group(group_id)
        flushes = self._store_groups(now_ms) + self._store_consumer_groups(now_ms)
        for other in {id(o): o for o in others.values()}.values():
            codes, stored = other.delete_groups([g for g, o in others.items() if o is other],
                                                now_ms)
            result.update(codes)
            flushes += stored
        for group_id, code in result.items():
            if code is not ErrorCode.NONE:
                continue
            partitions = sorted(store.committed(group_id, INT64_MAX))
            if not partitions:
                continue
            try:
                flushes += self._tombstone_offsets(group_id, partitions, now_ms)
            except KafkaError as exc:
                result[group_id] = APPEND_ERRORS.get(exc.code, exc.code)
        return after_all(flushes, result)
