"""The consumer's group membership and committed offsets (aiokafka's GroupCoordinator):
the classic protocol with eager rebalancing, heartbeats, OffsetCommit / OffsetFetch; and
``ConsumerProtocolCoordinator``, the consumer group protocol (KIP-848, ``group.protocol``
"consumer").

``coordinate`` advances the rebalance state machine from ``poll``: a rebalance (a heartbeat
answering REBALANCE_IN_PROGRESS, a changed partition count seen by the leader, a failed commit)
sets ``rejoin_needed`` and wakes ``poll``, which commits (with auto-commit), revokes, joins
(JoinGroup, then SyncGroup, where the leader runs the assignor over the members' subscriptions)
and assigns. It returns the rebalance callbacks for ``poll`` to run in the caller's context.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import trio

from client.aio._tasks import EngineTasks
from client.aio.cluster import GROUP, Cluster, is_coordinator_error
from client.aio.subscription import SubscriptionState
from client.config import ClientConfig
from client.errors import (
    CommitFailedError,
    CorruptResponseError,
    IllegalStateError,
    KafkaClientError,
    error_for,
    for_code,
)
from client.group_protocol import (
    ASSIGNORS,
    PROTOCOL_TYPE,
    decode_assignment_untrusted,
    decode_subscription_untrusted,
    encode_assignment,
    encode_subscription,
)
from client.retry import retry
from client.structs import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    TopicPartition,
    offset_and_metadata,
)
from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError, ErrorCode

log = logging.getLogger("client.consumer")

COORDINATOR_CHANNEL = "coordinator"  # commits and membership do not queue behind long polls

REJOIN_CODES = (
    ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.UNKNOWN_MEMBER_ID,
)

# group phases
STABLE = "stable"
JOINING = "joining"
ASSIGNED = "assigned"


class RebalanceCallback(NamedTuple):
    """A rebalance callback ``poll`` needs run before it goes on: kind is "revoked" or "assigned"."""

    kind: str
    partitions: list[TopicPartition]


class GroupCoordinator:
    def __init__(
        self,
        config: ClientConfig,
        subscriptions: SubscriptionState,
        cluster: Cluster,
        tasks: EngineTasks,
        set_assignment: Callable[[Sequence[TopicPartition]], None],
        wake_poll: Callable[[], None],
    ) -> None:
        self.config = config
        self.group_id: str | None = config["group.id"]
        self._cluster = cluster
        self._tasks = tasks  # commit_async and the heartbeat task run there
        self._subs = subscriptions
        self._set_assignment = set_assignment
        self._wake_poll = wake_poll
        self.auto_commit: bool = config["enable.auto.commit"]
        self._assignor = ASSIGNORS[config["partition.assignment.strategy"]]
        self._strategy: str = config["partition.assignment.strategy"]
        self._request_timeout = config["request.timeout.ms"] / 1000
        self._backoff = cluster.backoff
        self.member_id = ""
        self.generation_id = -1
        self.phase = STABLE
        self.rejoin_needed = False
        self._heartbeat_running = False
        self._assigned_counts: dict[str, int] | None = None  # as the leader last assigned them
        self.closed = False

    def require_group(self) -> str:
        if self.group_id is None:
            raise IllegalStateError("this consumer has no group.id: offsets cannot be committed")
        return self.group_id

    def metadata(self) -> ConsumerGroupMetadata:
        """What ``send_offsets_to_transaction`` needs (group id, generation, member id)."""
        return ConsumerGroupMetadata(self.require_group(), self.generation_id, self.member_id)

    def request_rejoin(self) -> None:
        self.rejoin_needed = True
        self._wake_poll()

    # -- committed offsets ---------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[Any, int | OffsetAndMetadata] | None = None) -> None:
        """Commit ``{(topic, partition): next offset}`` (default: the current positions) and wait."""
        group_id = self.require_group()
        if offsets is None:
            offsets = self._subs.positions()
        if not offsets:
            return
        topics: dict[str, list[dict]] = {}
        for tp, value in offsets.items():
            offset, metadata = offset_and_metadata(value)
            topics.setdefault(tp[0], []).append(
                {
                    "partition_index": tp[1],
                    "committed_offset": offset,
                    "committed_metadata": metadata,
                }
            )
        in_group = self._subs.subscribed and self.generation_id >= 0
        body = {
            "group_id": group_id,
            "generation_id": self.generation_id if in_group else -1,
            "member_id": self.member_id if in_group else "",
            "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
        }

        async def attempt() -> None:
            response = await self._cluster.coordinator_request(
                GROUP, group_id, ApiKey.OFFSET_COMMIT, body, channel=COORDINATOR_CHANNEL
            )
            worst = _worst(p.error_code for t in response.topics for p in t.partitions)
            if not worst:
                return
            if worst in REJOIN_CODES:
                if worst == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self.request_rejoin()
                raise CommitFailedError(
                    "Commit cannot be completed since the group has already rebalanced and "
                    "assigned the partitions to another member."
                ) from error_for(worst)
            exc = self._cluster.coordinator_error(GROUP, group_id, worst, "OffsetCommit")
            raise exc

        await retry(
            attempt,
            backoff=self._cluster.backoff,
            timeout=self._request_timeout * 2,
            what="OffsetCommit",
        )

    def commit_async(
        self,
        offsets: Mapping[Any, int | OffsetAndMetadata] | None = None,
        callback: Callable[[BaseException | None, Any], Any] | None = None,
    ) -> None:
        self.require_group()
        if offsets is None:
            offsets = self._subs.positions()
        self._tasks.start_soon(self._commit_task, dict(offsets), callback)

    async def _commit_task(self, offsets: dict, callback: Callable | None) -> None:
        error: BaseException | None = None
        try:
            await self.commit(offsets)
        except KafkaClientError as exc:
            error = exc
            log.info("async commit failed: %s", exc)
        if callback is not None:
            try:
                callback(error, offsets)
            except Exception:
                log.exception("commit callback failed")

    async def auto_commit_task(self) -> None:
        try:
            await self.commit()
        except KafkaClientError as exc:
            log.info("auto-commit failed: %s", exc)

    async def committed(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed)."""
        tps = [TopicPartition(*tp) for tp in partitions]
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        committed = await fetch_committed(
            self._cluster, self.require_group(), topics, timeout=self._request_timeout * 2,
            channel=COORDINATOR_CHANNEL,
        )
        return {tp: committed.get(tp) for tp in tps}

    # -- membership ----------------------------------------------------------------------------------

    async def leave(self) -> None:
        """LeaveGroup (bounded by the request timeout), so the others rebalance at once."""
        if self._subs.subscribed and self.member_id:
            group_id = self.require_group()
            with trio.move_on_after(self._request_timeout):
                try:
                    await self._cluster.coordinator_request(
                        GROUP,
                        group_id,
                        ApiKey.LEAVE_GROUP,
                        {"group_id": group_id, "member_id": self.member_id},
                        channel=COORDINATOR_CHANNEL,
                    )
                except KafkaClientError as exc:
                    log.info("LeaveGroup failed: %s", exc)
        self.member_id = ""
        self.generation_id = -1

    async def coordinate(self) -> RebalanceCallback | None:
        """Advance the rebalance state machine; a callback to run, or None when stable."""
        if self.phase == STABLE:
            if not self.rejoin_needed:
                return None
            revoked = sorted(self._subs.assignment)
            if revoked and self.auto_commit:
                try:
                    await self.commit()
                except KafkaClientError as exc:
                    log.info("commit before rebalance failed: %s", exc)
            self.phase = JOINING
            self._set_assignment([])
            if revoked and self._subs.on_revoke is not None:
                return RebalanceCallback("revoked", revoked)
        if self.phase == JOINING:
            assigned = await self._join_and_sync()
            self._set_assignment(assigned)
            self.phase = ASSIGNED
            if not self._heartbeat_running:
                self._heartbeat_running = True
                self._tasks.start_soon(self._heartbeat_loop)
        if self.phase == ASSIGNED:
            self.phase = STABLE
            if self._subs.on_assign is not None:
                return RebalanceCallback("assigned", sorted(self._subs.assignment))
        return None

    async def _join_and_sync(self) -> list[TopicPartition]:
        group_id = self.require_group()
        cfg = self.config
        rebalance_timeout_ms = cfg["max.poll.interval.ms"]
        failures = 0

        async def back_off() -> None:
            nonlocal failures
            await trio.sleep(self._backoff.seconds(failures))
            failures += 1

        while True:
            self.rejoin_needed = False
            topics = list(self._subs.topics or ())
            join = await self._rebalance_call(ApiKey.JOIN_GROUP, {
                "group_id": group_id,
                "session_timeout_ms": cfg["session.timeout.ms"],
                "rebalance_timeout_ms": rebalance_timeout_ms,
                "member_id": self.member_id,
                "protocol_type": PROTOCOL_TYPE,
                "protocols": [{"name": self._strategy, "metadata": encode_subscription(topics)}],
            })
            if join is None:
                await back_off()
                continue
            if join.error_code:
                if join.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                    # KIP-394 (JoinGroup v4+): the coordinator gave us our member id; join
                    # again with it at once, as Kafka's consumer does.
                    log.info("group %s: joining again with member id %s", group_id, join.member_id)
                    self.member_id = join.member_id
                    continue
                if join.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                    continue
                self._retry_or_raise(join.error_code, "JoinGroup")
                await back_off()
                continue
            self.member_id = join.member_id
            self.generation_id = join.generation_id
            assignments = []
            self._assigned_counts = None
            if join.leader == join.member_id:
                assignments = await self._lead_assignment(join.members)
            sync = await self._rebalance_call(ApiKey.SYNC_GROUP, {
                "group_id": group_id,
                "generation_id": self.generation_id,
                "member_id": self.member_id,
                # v5+: Kafka answers INCONSISTENT_GROUP_PROTOCOL when these are null
                "protocol_type": PROTOCOL_TYPE,
                "protocol_name": join.protocol_name,
                "assignments": assignments,
            })
            if sync is None:
                await back_off()
                continue
            if sync.error_code:
                if sync.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self._retry_or_raise(sync.error_code, "SyncGroup")
                continue  # join again at once: the group is rebalancing
            try:
                assigned = decode_assignment_untrusted(sync.assignment)
            except CorruptFrameError as exc:
                raise CorruptResponseError(f"bad assignment from the group leader: {exc}") from exc
            log.info(
                "joined group %s generation %d as %s: %s",
                group_id,
                self.generation_id,
                self.member_id,
                assigned,
            )
            return assigned

    async def _rebalance_call(self, api: ApiKey, body: dict) -> Any | None:
        """One JoinGroup or SyncGroup (answered within the rebalance timeout); None when it
        failed in a way worth retrying (the coordinator is forgotten, the caller backs off)."""
        group_id = self.require_group()
        try:
            return await self._cluster.coordinator_request(
                GROUP, group_id, api, body, channel=COORDINATOR_CHANNEL,
                extra_timeout=self.config["max.poll.interval.ms"] / 1000,
            )
        except KafkaClientError as exc:
            if not exc.retriable:
                raise
            self._cluster.forget_coordinator(GROUP, group_id)
            return None

    def _retry_or_raise(self, code: int, request: str) -> None:
        """Returns when the rebalance should go on after ``code`` (a retriable error or one of
        REJOIN_CODES; a coordinator error forgets the coordinator first), raises it otherwise."""
        error = error_for(code, request)
        if not (error.retriable or code in REJOIN_CODES):
            raise error
        if is_coordinator_error(error):
            self._cluster.forget_coordinator(GROUP, self.require_group())

    async def _lead_assignment(self, members: Sequence[Any]) -> list[dict]:
        subscriptions: dict[str, list[str]] = {}
        for member in members:
            try:
                subscriptions[member.member_id] = decode_subscription_untrusted(member.metadata)
            except CorruptFrameError as exc:
                log.warning("member %s sent a bad subscription: %s", member.member_id, exc)
                subscriptions[member.member_id] = []
        topics = sorted({t for ts in subscriptions.values() for t in ts})
        counts: dict[str, int] = {}
        if topics:
            try:
                await self._cluster.refresh_metadata(topics)
            except KafkaClientError as exc:
                log.info("metadata for assignment failed: %s", exc)
            for topic in topics:
                counts[topic] = self._cluster.partition_count(topic) or 0
        self._assigned_counts = counts
        plan = self._assignor(subscriptions, counts)
        return [
            {"member_id": member_id, "assignment": encode_assignment(tps)}
            for member_id, tps in plan.items()
        ]

    async def _heartbeat_loop(self) -> None:
        interval = self.config["heartbeat.interval.ms"] / 1000
        group_id = self.require_group()
        next_metadata_check = trio.current_time()
        try:
            while self._subs.subscribed and not self.closed:
                await trio.sleep(interval)
                if self.phase != STABLE or self.rejoin_needed or not self.member_id:
                    continue
                if self._assigned_counts is not None and trio.current_time() >= next_metadata_check:
                    next_metadata_check = trio.current_time() + await self._check_partition_counts()
                try:
                    response = await self._cluster.coordinator_request(
                        GROUP,
                        group_id,
                        ApiKey.HEARTBEAT,
                        {
                            "group_id": group_id,
                            "generation_id": self.generation_id,
                            "member_id": self.member_id,
                        },
                        channel=COORDINATOR_CHANNEL,
                    )
                except KafkaClientError as exc:
                    log.info("heartbeat failed: %s", exc)
                    self._cluster.forget_coordinator(GROUP, group_id)
                    continue
                code = response.error_code
                if code == ErrorCode.NONE:
                    continue
                if code in REJOIN_CODES:
                    if code == ErrorCode.UNKNOWN_MEMBER_ID:
                        self.member_id = ""
                    log.info("group %s is rebalancing (%s)", group_id, ErrorCode(code).name)
                    self.request_rejoin()
                elif code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    self._cluster.forget_coordinator(GROUP, group_id)
                else:
                    log.warning("heartbeat error %s", error_for(code))
        finally:
            self._heartbeat_running = False

    async def _check_partition_counts(self) -> float:
        """The leader's metadata watch: a subscribed topic that appeared or grew since the
        assignment means a new rebalance. Returns the seconds until the next check (soon while
        some subscribed topic has no partitions yet)."""
        counts = self._assigned_counts or {}
        try:
            await self._cluster.refresh_metadata(list(counts))
        except KafkaClientError as exc:
            log.info("metadata check failed: %s", exc)
            return 10 * self._backoff.seconds(0)
        changed = [t for t, n in counts.items() if (self._cluster.partition_count(t) or 0) != n]
        if changed:
            log.info("partitions of %s changed: rebalancing group %s", changed, self.group_id)
            self.request_rejoin()
        waiting = any(n == 0 for n in counts.values())
        return 1.0 if waiting else self.config["metadata.max.age.ms"] / 1000


async def fetch_committed(
    cluster: Cluster, group_id: str, topics: Mapping[str, Sequence[int]] | None, *,
    timeout: float, channel: str = "default",
) -> dict[TopicPartition, OffsetAndMetadata]:
    """The group's committed offsets (OffsetFetch; ``topics`` None: all of them), the partitions
    with nothing committed left out. Retried within ``timeout`` while the group's error, or the
    worst partition error, is retriable (an offset commit still pending in a transaction answers
    UNSTABLE_OFFSET_COMMIT); any other error is raised."""
    body = {"group_id": group_id, "topics": None if topics is None else [
        {"name": t, "partition_indexes": list(p)} for t, p in topics.items()]}

    async def attempt() -> Any:
        response = await cluster.coordinator_request(GROUP, group_id, ApiKey.OFFSET_FETCH, body,
                                                     channel=channel)
        worst = response.error_code or _worst(
            p.error_code for t in response.topics for p in t.partitions)
        if worst:
            raise cluster.coordinator_error(GROUP, group_id, worst, f"OffsetFetch {group_id}")
        return response

    response = await retry(attempt, backoff=cluster.backoff, timeout=timeout, what="OffsetFetch")
    return {TopicPartition(t.name, p.partition_index): OffsetAndMetadata(p.committed_offset,
                                                                        p.metadata)
            for t in response.topics for p in t.partitions if p.committed_offset >= 0}


def _worst(codes: Iterable[int]) -> int:
    """The most severe non-zero error code: fatal, then non-retriable, then retriable."""
    worst, rank = 0, -1
    for code in codes:
        if not code:
            continue
        cls = for_code(code)
        r = 3 if cls.fatal else (1 if cls.retriable else 2)
        if code in REJOIN_CODES:
            r = 4
        if r > rank:
            worst, rank = code, r
    return worst


class ConsumerProtocolCoordinator(GroupCoordinator):
    """``group.protocol=consumer`` (KIP-848): the broker assigns, the member reconciles.

    A heartbeat task sends ConsumerGroupHeartbeat every interval the coordinator asks for: a full
    request to join (member epoch 0, the subscription, ``group.remote.assignor``, no partitions),
    then only what changed (the subscription, the partitions it owns). An answer that carries an
    assignment (topics by id, resolved through metadata) becomes the *target*; ``coordinate``
    (from ``poll``) reconciles towards it: partitions not in the target are revoked first (with
    auto-commit, their positions committed; the revocation callback runs), then the new ones are
    added (the assignment callback runs with just those), and the next heartbeat goes out at once
    to report what the member owns, so the coordinator can hand the freed partitions on. Kept
    partitions never stop being fetched. FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: every
    partition is given up and the member joins again with epoch 0. The member chooses its own
    member id (KIP-1082); commits carry it with the member epoch (OffsetCommit v9)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.member_id = str(uuid.uuid4())
        self.member_epoch = 0
        self._remote_assignor: str | None = self.config["group.remote.assignor"]
        self._interval = 1.0  # until the coordinator says
        self._target: list[TopicPartition] | None = None
        self._sent_topics: tuple[str, ...] | None = None
        self._sent_owned: tuple[TopicPartition, ...] | None = None
        self._beat_now = trio.Event()

    def metadata(self) -> ConsumerGroupMetadata:
        """send_offsets_to_transaction's group metadata: the member epoch as the generation."""
        return ConsumerGroupMetadata(self.require_group(), self.member_epoch, self.member_id)

    async def coordinate(self) -> RebalanceCallback | None:
        if not self._heartbeat_running and self._subs.subscribed and not self.closed:
            self._heartbeat_running = True
            self._tasks.start_soon(self._heartbeat_loop)
        target = self._target
        if target is None:
            return None
        current = set(self._subs.assignment)
        revoked = sorted(current - set(target))
        if revoked:
            if self.auto_commit:
                try:
                    await self.commit({tp: s.position for tp, s in self._subs.assignment.items()
                                       if tp in revoked and s.position is not None})
                except KafkaClientError as exc:
                    log.info("commit before revocation failed: %s", exc)
            self._set_assignment(sorted(current - set(revoked)))
            if self._subs.on_revoke is not None:
                return RebalanceCallback("revoked", revoked)
        added = sorted(set(target) - set(self._subs.assignment))
        self._set_assignment(sorted(target))
        self._target = None
        self.rejoin_needed = False
        self._beat_now.set()  # report the reconciled assignment at once
        if self._subs.on_assign is not None and (added or revoked or not current):
            return RebalanceCallback("assigned", added)
        return None

    def _owned_by_id(self, owned: Sequence[TopicPartition]) -> list[dict] | None:
        by_topic: dict[str, list[int]] = {}
        for tp in owned:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        out = []
        for topic, partitions in sorted(by_topic.items()):
            topic_id = self._cluster.topic_ids.get(topic)
            if topic_id is None:
                return None  # not known yet: say nothing this time
            out.append({"topic_id": topic_id, "partitions": sorted(partitions)})
        return out

    def _heartbeat_body(self) -> tuple[dict, tuple[str, ...], tuple[TopicPartition, ...]]:
        joining = self.member_epoch == 0
        topics = tuple(sorted(self._subs.topics or ()))
        owned = tuple(sorted(self._subs.assignment)) if self._target is None else None
        owned_ids: list[dict] | None = None
        if joining:
            owned_ids = []
        elif owned is not None and owned != self._sent_owned:
            owned_ids = self._owned_by_id(owned)
        body = {
            "group_id": self.require_group(),
            "member_id": self.member_id,
            "member_epoch": self.member_epoch,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout_ms": self.config["max.poll.interval.ms"] if joining else -1,
            "subscribed_topic_names": (list(topics) if joining or topics != self._sent_topics
                                       else None),
            "subscribed_topic_regex": None,
            "server_assignor": self._remote_assignor if joining else None,
            "topic_partitions": owned_ids,
        }
        sent_owned = (owned if owned_ids is not None and owned is not None
                      else self._sent_owned or ())
        return body, topics, sent_owned

    async def _resolve(self, topic_partitions: Sequence[Any]) -> list[TopicPartition]:
        """An assignment by topic id -> by name (metadata refreshed for ids not known yet)."""
        ids = self._cluster.topic_names
        if any(tp.topic_id not in ids for tp in topic_partitions):
            try:
                await self._cluster.refresh_metadata(None)
            except KafkaClientError as exc:
                log.info("metadata for the assignment failed: %s", exc)
        out = []
        for tp in topic_partitions:
            name = ids.get(tp.topic_id)
            if name is None:
                log.warning("assigned partitions of an unknown topic id %s", tp.topic_id)
                continue
            out += [TopicPartition(name, p) for p in tp.partitions]
        return sorted(out)

    async def _heartbeat_loop(self) -> None:
        group_id = self.require_group()
        failures = 0
        try:
            while self._subs.subscribed and not self.closed:
                body, topics, owned = self._heartbeat_body()
                try:
                    response = await self._cluster.coordinator_request(
                        GROUP, group_id, ApiKey.CONSUMER_GROUP_HEARTBEAT, body,
                        channel=COORDINATOR_CHANNEL)
                except KafkaClientError as exc:
                    log.info("heartbeat failed: %s", exc)
                    self._cluster.forget_coordinator(GROUP, group_id)
                    await trio.sleep(self._backoff.seconds(failures))
                    failures += 1
                    continue
                code = response.error_code
                if code == ErrorCode.NONE:
                    failures = 0
                    self._sent_topics = topics
                    self._sent_owned = owned
                    self.member_epoch = self.generation_id = response.member_epoch
                    if response.heartbeat_interval_ms > 0:
                        self._interval = response.heartbeat_interval_ms / 1000
                    if response.assignment is not None:
                        self._target = await self._resolve(response.assignment.topic_partitions)
                        self.request_rejoin()
                elif code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
                    log.info("group %s: %s, joining again", group_id, ErrorCode(code).name)
                    self.member_epoch = self.generation_id = 0
                    self._sent_topics = self._sent_owned = None
                    self._target = []  # every partition is lost
                    self.request_rejoin()
                    continue
                elif code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                              ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                    self._cluster.forget_coordinator(GROUP, group_id)
                    await trio.sleep(self._backoff.seconds(failures))
                    failures += 1
                    continue
                else:
                    log.warning("heartbeat error %s: %s", error_for(code),
                                response.error_message)
                with trio.move_on_after(self._interval):
                    await self._beat_now.wait()
                self._beat_now = trio.Event()
        finally:
            self._heartbeat_running = False

    async def leave(self) -> None:
        """A heartbeat with epoch -1: the coordinator hands the partitions on at once."""
        if self._subs.subscribed and self.member_epoch > 0:
            group_id = self.require_group()
            with trio.move_on_after(self._request_timeout):
                try:
                    await self._cluster.coordinator_request(
                        GROUP, group_id, ApiKey.CONSUMER_GROUP_HEARTBEAT,
                        {"group_id": group_id, "member_id": self.member_id,
                         "member_epoch": -1},
                        channel=COORDINATOR_CHANNEL)
                except KafkaClientError as exc:
                    log.info("leaving the group failed: %s", exc)
        self.closed = True
        self.member_epoch = 0
        self.generation_id = -1
