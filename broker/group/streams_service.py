"""Streams-protocol groups (KIP-1071) and the outside world: ``StreamsGroupCoordinator`` (pure)
decides; this class creates the internal topics a topology needs, writes the groups' records to
``__consumer_offsets`` (through ``GroupService.offsets_partition`` and ``Storage.append``, so they
are fsynced and compacted like every group record) and answers once they are durable, and reads
them back at start.

One group id space with the classic and consumer groups: a group id another protocol uses with
members is GROUP_ID_NOT_FOUND here (Kafka's answer); an empty classic group (committed offsets
only) becomes a streams group. Offsets are the group service's (shared store); it asks this
service (``attach_to``) to validate commits and fetches of streams groups.

Replay: the group service's one pass over ``__consumer_offsets`` at start hands the
streams-group records (types 17-23) to a ``StreamsGroupReplay`` (the composition root passes the
same one to both); the constructor builds the groups from it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import partial

from broker.clock import Clock
from broker.config import BrokerConfig
from broker.config.group_configs import GroupConfigStore
from broker.group.consumer_records import build_batch
from broker.group.service import GroupService
from broker.group.streams_group import StreamsGroupCoordinator
from broker.group.streams_model import (
    HeartbeatRequest,
    HeartbeatResult,
    StreamsGroupConfig,
    StreamsGroupSettings,
)
from broker.group.streams_records import (
    StreamsGroupReplay,
    deleted_group_records,
    group_records,
)
from broker.reply import Deferred, after
from broker.storage import Commit, Storage
from protocol.errors import CorruptFrameError, ErrorCode, KafkaError

log = logging.getLogger("minibroker")


def streams_group_settings(store: GroupConfigStore, group_id: str) -> StreamsGroupSettings:
    """A streams group's settings: its ``streams.*`` overrides, else the broker's values."""
    tags = store.value(group_id, "streams.rack.aware.assignment.tags").strip()
    return StreamsGroupSettings(
        session_timeout_ms=store.int_value(group_id, "streams.session.timeout.ms"),
        heartbeat_interval_ms=store.int_value(group_id, "streams.heartbeat.interval.ms"),
        num_standby_replicas=store.int_value(group_id, "streams.num.standby.replicas"),
        task_offset_interval_ms=store.int_value(group_id, "streams.task.offset.interval.ms"),
        acceptable_recovery_lag=store.int_value(group_id, "streams.acceptable.recovery.lag"),
        rack_aware_assignment_tags=tuple(t.strip() for t in tags.split(",")) if tags else (),
        initial_rebalance_delay_ms=store.int_value(group_id, "streams.initial.rebalance.delay.ms"),
    )


class StreamsGroupService:
    """StreamsGroupHeartbeat, StreamsGroupDescribe's data, deletion and timers."""

    def __init__(self, config: BrokerConfig, storage: Storage, clock: Clock,
                 groups: GroupService, replayed: StreamsGroupReplay,
                 configs: GroupConfigStore | None = None) -> None:
        """``replayed``: the streams-group records the group service's replay collected;
        ``configs``: the groups' ``streams.*`` GROUP configs (None: the broker's for every
        group)."""
        self._storage = storage
        self._logs = storage.logs
        self._clock = clock
        self._groups = groups
        self.coordinator = StreamsGroupCoordinator(StreamsGroupConfig(
            heartbeat_interval_ms=config.group_streams_heartbeat_interval_ms,
            session_timeout_ms=config.group_streams_session_timeout_ms,
            num_standby_replicas=config.group_streams_num_standby_replicas,
            initial_rebalance_delay_ms=config.group_streams_initial_rebalance_delay_ms,
            settings=None if configs is None else partial(streams_group_settings, configs),
        ))
        self._restore(replayed)

    # -- replay --------------------------------------------------------------------------------

    def _restore(self, replayed: StreamsGroupReplay) -> None:
        logs = self._logs
        try:
            restored = replayed.groups(self._clock.now_ms())
        except CorruptFrameError as exc:
            log.error("streams groups not restored: %s", exc)
            restored = []
        for group in restored:
            self._groups.coordinator.groups.pop(group.group_id, None)
            self.coordinator.load_group(group, logs)
        if restored:
            log.info("restored %d streams-protocol groups", len(restored))

    # -- storing -------------------------------------------------------------------------------

    def _store(self, now_ms: int) -> list[Commit]:
        events = []
        for group_id, group in self.coordinator.take_changes():
            records = (deleted_group_records(group_id) if group is None
                       else group_records(group))
            if not records:
                continue
            try:
                partition = self._groups.offsets_partition(group_id, now_ms)
                _, flushed = self._storage.append(partition, build_batch(records, now_ms), now_ms)
            except (KafkaError, ValueError) as exc:
                log.error("could not store the records of streams group %s: %s", group_id, exc)
                if group is not None:
                    group.dirty_group = group.dirty_topology = True
                    group.dirty_members.update(group.members)
                continue
            if flushed is not None:
                events.append(flushed)
        return events

    # -- the API -------------------------------------------------------------------------------

    def is_streams_group(self, group_id: str) -> bool:
        return group_id in self.coordinator.groups

    def _create_internal_topics(self, request: HeartbeatRequest, now_ms: int) -> dict[str, str]:
        """Create the internal topics the topology needs (Kafka's coordinator asks the controller
        to); ``topic -> error message`` for those that could not be created."""
        errors: dict[str, str] = {}
        wanted = self.coordinator.internal_topics_to_create(request.group_id, request.topology,
                                                            self._logs)
        for name, info in sorted(wanted.items()):
            try:
                self._logs.create_topic(name, max(info.partitions, 1), dict(info.configs),
                                        now_ms)
                log.info("created internal topic %s (%d partitions) of streams group %s",
                         name, info.partitions, request.group_id)
            except KafkaError as exc:
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    errors[name] = f"{exc.code.name}: {exc}"
        return errors

    def heartbeat(self, request: HeartbeatRequest, now_ms: int
                  ) -> HeartbeatResult | Deferred[HeartbeatResult]:
        group_id = request.group_id
        if group_id not in self.coordinator.groups:
            other = self._other_kind(group_id, now_ms)
            if other is not None:
                return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND,
                                       f"Group {group_id} is not a streams group.",
                                       request.member_id)
        errors = self._create_internal_topics(request, now_ms) \
            if request.member_epoch >= 0 else {}
        result = self.coordinator.heartbeat(request, self._logs, now_ms, errors)
        flushes = self._store(now_ms)
        return after(flushes, result) if flushes else result

    def _other_kind(self, group_id: str, now_ms: int) -> str | None:
        """The kind of group another protocol has under ``group_id`` ("classic", "consumer"),
        or None; an empty classic group (offsets only) is dropped so that the id can be used."""
        if group_id in self._groups.consumer.groups:
            return "consumer"
        classic = self._groups.coordinator.groups.get(group_id)
        if classic is None:
            return None
        if classic.members:
            return "classic"
        self._groups.coordinator.groups.pop(group_id, None)
        return None

    def run_timers(self, now_ms: int) -> None:
        deadline = self.coordinator.next_deadline()
        if deadline is not None and deadline <= now_ms:
            self.coordinator.tick(self._logs, now_ms)
            self._store(now_ms)

    def tick(self, now_ms: int) -> None:
        """Housekeeping: expire members, follow topic changes, forget Empty groups that hold
        no offsets."""
        self.coordinator.tick(self._logs, now_ms)
        self.coordinator.remove_empty_groups(self._groups.coordinator.offsets.has_group)
        self._store(now_ms)

    def list_groups(self, now_ms: int) -> list[tuple[str, str, str]]:
        """``(group_id, protocol_type, state)`` of every streams group."""
        self.run_timers(now_ms)
        return [(g.group_id, "streams", g.state.value)
                for g in self.coordinator.groups.values()]

    def delete_groups(self, group_ids: Iterable[str], now_ms: int
                      ) -> tuple[dict[str, ErrorCode], list[Commit]]:
        """Delete empty streams groups: their records' tombstones (the group service then
        tombstones their offsets)."""
        self.run_timers(now_ms)
        codes = {g: self.coordinator.delete_group(g) for g in group_ids}
        return codes, self._store(now_ms)

    # -- offsets (called by the group service) -------------------------------------------------

    def has_group(self, group_id: str) -> bool:
        return group_id in self.coordinator.groups

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int,
                               api_version: int, partitions: list[tuple[str, int]],
                               transactional: bool, now_ms: int) -> list[ErrorCode]:
        self.run_timers(now_ms)
        if group_id not in self.coordinator.groups:
            return [ErrorCode.UNKNOWN_MEMBER_ID] * len(partitions)
        return self.coordinator.validate_offset_commit(
            group_id, member_id, member_epoch, api_version, partitions, transactional)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int,
                              now_ms: int) -> ErrorCode:
        self.run_timers(now_ms)
        if group_id not in self.coordinator.groups:
            return ErrorCode.NONE
        return self.coordinator.validate_offset_fetch(group_id, member_id, member_epoch)
