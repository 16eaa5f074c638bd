"""The trio consumer: manual assignment or a classic consumer group, read_committed by default.

Usage::

    async with AsyncConsumer({"bootstrap.servers": "...", "group.id": "g"}) as consumer:
        consumer.subscribe(["topic"])
        while True:
            for record in await consumer.poll(1.0):
                ...

Theory of operation
-------------------
Positions: every assigned partition has a *position* (the next offset ``poll`` returns) and a
*fetch offset* (the next offset to ask the broker for; ahead of the position by what is
buffered). A partition without a position gets one from the group's committed offset, else from
``auto.offset.reset`` (ListOffsets; under read_committed "latest" is the last stable offset).

Fetching: a fetch-manager task keeps at most one Fetch in flight per broker, for the partitions
that broker leads which are not paused and have less than two ``max.partition.fetch.bytes``
buffered, so the next response is on its way while the application works through the last one.
A response only has its batch headers read (``next_fetch_offset``: where the next Fetch starts)
before it is queued; ``poll`` decodes and filters the records when it reaches them
(``client/fetch_decoder.py``: control batches and aborted transactions never reach the
application). Decoding in ``poll`` keeps the trio task free for I/O and, with the blocking
``Consumer``, allocates and frees the records in the application's thread: ``take_ready`` lets it
take buffered records without a round trip through the loop thread, under ``_lock`` (which guards
the queue and the positions; the loop thread holds it only for short bookkeeping). A ``seek``
bumps the partition's epoch, which voids a fetch already in flight or queued for it. With
``auto.offset.reset=none`` a partition whose fetch offset is out of range is parked in
``_out_of_range``: it is not fetched and every ``poll`` raises ``OffsetOutOfRangeError`` until the
application seeks it (or it is unassigned), as Kafka's consumer does.

Groups (classic protocol, eager rebalancing): ``subscribe`` makes ``poll`` join the group:
JoinGroup, then SyncGroup (the leader runs the assignor over the members' subscriptions), then the
committed offsets. A heartbeat task notices a rebalance (REBALANCE_IN_PROGRESS) and wakes ``poll``,
which commits (with auto-commit), calls ``on_revoke``, rejoins and calls ``on_assign``: the
callbacks always run inside ``poll``, in the caller's context. ``close`` commits (auto-commit) and
sends LeaveGroup so the others rebalance at once instead of after the session timeout.

``_poll_step`` returns either records or a ``RebalanceCallback`` for the caller to run and call
again: the blocking ``Consumer`` runs the callbacks in the application's thread this way.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any, NamedTuple

import trio

from client._loop import require_trio
from client.aio.cluster import GROUP, Cluster, is_coordinator_error
from client.config import ClientConfig, consumer_config
from client.errors import (
    CommitFailedError,
    CorruptResponseError,
    IllegalStateError,
    KafkaClientError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    error_for,
    for_code,
)
from client.fetch_decoder import decode_fetched, next_fetch_offset
from client.group_protocol import (
    ASSIGNORS,
    PROTOCOL_TYPE,
    decode_assignment_untrusted,
    decode_subscription_untrusted,
    encode_assignment,
    encode_subscription,
)
from client.structs import ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, TopicPartition
from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError, ErrorCode

log = logging.getLogger("client.consumer")

EARLIEST = -2
LATEST = -1
COORDINATOR_CHANNEL = "coordinator"

_REJOIN_CODES = (
    ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.UNKNOWN_MEMBER_ID,
)

RebalanceListener = Callable[[list[TopicPartition]], Any]


class RebalanceCallback(NamedTuple):
    """A rebalance callback ``poll`` needs run before it goes on: kind is "revoked" or "assigned"."""

    kind: str
    partitions: list[TopicPartition]


class _Partition:
    __slots__ = (
        "tp",
        "position",
        "fetch_offset",
        "epoch",
        "paused",
        "buffered_bytes",
        "fetching",
        "high_watermark",
        "last_stable_offset",
        "reset_to",
    )

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.position: int | None = None
        self.fetch_offset = -1
        self.epoch = 0
        self.paused = False
        self.buffered_bytes = 0  # fetched and not yet returned by poll (size on the wire)
        self.fetching = False
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.reset_to: int | None = None  # EARLIEST / LATEST: seek_to_* waiting for ListOffsets

    def seek(self, offset: int) -> None:
        self.position = offset
        self.fetch_offset = offset
        self.epoch += 1
        self.buffered_bytes = 0


class _Completed:
    """One partition's data from one Fetch response, taken by ``poll`` in order; decoded by the
    first ``poll`` that reaches it."""

    __slots__ = (
        "state",
        "epoch",
        "raw",
        "aborted",
        "fetch_offset",
        "records",
        "decoding",
        "index",
        "next_offset",
        "size",
    )

    def __init__(
        self,
        state: _Partition,
        epoch: int,
        raw: bytes,
        aborted: list[tuple[int, int]] | None,
        fetch_offset: int,
        next_offset: int,
    ) -> None:
        self.state = state
        self.epoch = epoch
        self.raw: bytes | None = raw  # dropped once decoded
        self.aborted = aborted
        self.fetch_offset = fetch_offset
        self.records: list[ConsumerRecord] | None = None
        self.decoding = False
        self.index = 0
        self.next_offset = next_offset
        self.size = len(raw)


# group phases
STABLE = "stable"
JOINING = "joining"
ASSIGNED = "assigned"


class AsyncConsumer:
    """A Kafka consumer on trio (see the module docstring)."""

    def __init__(self, config: Mapping[str, Any] | ClientConfig) -> None:
        cfg = config if isinstance(config, ClientConfig) else consumer_config(config)
        self.config = cfg
        self.group_id: str | None = cfg["group.id"]
        self._read_committed = cfg["isolation.level"] == "read_committed"
        self._auto_commit: bool = cfg["enable.auto.commit"]
        self._auto_commit_interval = cfg["auto.commit.interval.ms"] / 1000
        self._reset_policy: str = cfg["auto.offset.reset"]
        self._max_poll_records: int = cfg["max.poll.records"]
        # Fetch a partition again while less than two responses' worth is buffered: the next
        # response is then on its way while the application works through the last one.
        self._prefetch_bytes: int = 2 * max(cfg["max.partition.fetch.bytes"], 1)
        self._assignor = ASSIGNORS[cfg["partition.assignment.strategy"]]
        self._strategy: str = cfg["partition.assignment.strategy"]
        self._request_timeout = cfg["request.timeout.ms"] / 1000
        self._retry_backoff = cfg["retry.backoff.ms"] / 1000
        self._assignment: dict[TopicPartition, _Partition] = {}
        self._subscription: list[str] | None = None
        self._on_assign: RebalanceListener | None = None
        self._on_revoke: RebalanceListener | None = None
        self._completed: deque[_Completed] = deque()
        self._lock = threading.Lock()  # the queue and the positions (see the module docstring)
        self._data_event = trio.Event()
        self._fetch_wakeup = trio.Event()
        self._busy_nodes: set[int] = set()
        self._metadata_wanted = False
        self._fetch_failure: BaseException | None = None  # raised by the next poll
        # reset=none: partitions fetched out of range -> their fetch offset (see the docstring)
        self._out_of_range: dict[TopicPartition, int] = {}
        # group membership
        self._member_id = ""
        self._generation_id = -1
        self._phase = STABLE
        self._rejoin_needed = False
        self._heartbeat_running = False
        self._assigned_counts: dict[str, int] | None = None  # as the leader last assigned them
        self._next_auto_commit = 0.0  # time.monotonic() of the next auto-commit
        self._token: trio.lowlevel.TrioToken | None = None
        self._cluster: Cluster | None = None
        self._nursery: trio.Nursery | None = None
        self._stack: AsyncExitStack | None = None
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------------

    async def __aenter__(self) -> AsyncConsumer:
        require_trio("AsyncConsumer", "Consumer")
        self._stack = AsyncExitStack()
        self._nursery = await self._stack.enter_async_context(trio.open_nursery())
        self._cluster = Cluster(self.config, self._nursery)
        self._token = trio.lowlevel.current_trio_token()
        self._nursery.start_soon(self._fetch_manager)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await self.close(commit=exc_info[0] is None)
        finally:
            self._nursery.cancel_scope.cancel()
            await self._cluster.aclose()
            stack, self._stack = self._stack, None
            await stack.aclose()

    async def close(self, commit: bool = True) -> None:
        """Commit positions (with auto-commit) and leave the group. Idempotent."""
        if self._closed or self._stack is None:
            return
        self._closed = True  # the fetch manager sends nothing more
        # Do not wait up to fetch.max.wait.ms for long-polling Fetches: close their connections
        # (the default channel; commits and LeaveGroup use the coordinator channel). The broker
        # copes with a reset while it writes the reply (tests/integration/test_bad_input.py).
        for node in list(self._busy_nodes):
            conn = self._cluster.connection_nowait(node)
            if conn is not None:
                await conn.aclose()
        if self.group_id is not None and self._auto_commit and commit and self._assignment:
            with trio.move_on_after(self._request_timeout):
                try:
                    await self.commit()
                except KafkaClientError as exc:
                    log.info("commit on close failed: %s", exc)
        if self._subscription is not None and self._member_id:
            with trio.move_on_after(self._request_timeout):
                try:
                    await self._cluster.coordinator_request(
                        GROUP,
                        self.group_id,
                        ApiKey.LEAVE_GROUP,
                        {"group_id": self.group_id, "member_id": self._member_id},
                        channel=COORDINATOR_CHANNEL,
                    )
                except KafkaClientError as exc:
                    log.info("LeaveGroup failed: %s", exc)
        self._member_id = ""
        self._generation_id = -1
        with self._lock:
            self._assignment = {}
            self._completed.clear()

    # -- assignment and subscription -----------------------------------------------------------------

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Consume exactly these partitions (no group membership; commits still use group.id)."""
        if self._subscription is not None:
            raise IllegalStateError(
                "Subscription to topics and manual assignment are mutually exclusive"
            )
        self._set_assignment([TopicPartition(*tp) for tp in partitions])

    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: RebalanceListener | None = None,
        on_revoke: RebalanceListener | None = None,
    ) -> None:
        """Join the group (on the next ``poll``) and consume the partitions it assigns us.

        ``on_revoke(partitions)`` runs before a rebalance takes partitions away (commit there),
        ``on_assign(partitions)`` after new ones arrive; both inside ``poll``. They may be plain
        functions or coroutine functions."""
        if self.group_id is None:
            raise IllegalStateError("subscribe() needs a group.id")
        if isinstance(topics, str):
            topics = [topics]
        if self._assignment and self._subscription is None:
            raise IllegalStateError(
                "Subscription to topics and manual assignment are mutually exclusive"
            )
        self._subscription = sorted(set(topics))
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self._request_rejoin()

    def unsubscribe(self) -> None:
        self._subscription = None
        self._set_assignment([])

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def subscription(self) -> set[str]:
        return set(self._subscription or ())

    def _set_assignment(self, partitions: Sequence[TopicPartition]) -> None:
        with self._lock:
            old = self._assignment
            self._assignment = {tp: old.get(tp) or _Partition(tp) for tp in partitions}
            for tp, state in old.items():
                if tp not in self._assignment:
                    state.epoch += 1  # void a fetch in flight
                    self._out_of_range.pop(tp, None)
            self._completed = deque(
                c for c in self._completed if self._assignment.get(c.state.tp) is c.state
            )
        self._fetch_wakeup.set()

    def pause(self, partitions: Iterable[tuple[str, int]]) -> None:
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, partitions: Iterable[tuple[str, int]]) -> None:
        for tp in partitions:
            self._state(tp).paused = False
        self._fetch_wakeup.set()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._assignment.items() if s.paused}

    def _state(self, tp: tuple[str, int]) -> _Partition:
        state = self._assignment.get(tp)
        if state is None:
            raise IllegalStateError(f"No current assignment for partition {tp[0]}-{tp[1]}")
        return state

    # -- positions ---------------------------------------------------------------------------------

    def seek(self, tp: tuple[str, int], offset: int) -> None:
        """The next ``poll`` returns records of ``tp`` from ``offset`` on."""
        if offset < 0:
            raise ValueError(f"seek offset must not be negative: {offset}")
        with self._lock:
            state = self._state(tp)
            state.seek(offset)
            state.reset_to = None
            self._drop_queued(state)
            self._out_of_range.pop(state.tp, None)
        self._fetch_wakeup.set()

    def seek_to_beginning(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        self._seek_to(partitions, EARLIEST)

    def seek_to_end(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        self._seek_to(partitions, LATEST)

    def _seek_to(self, partitions: Iterable[tuple[str, int]] | None, where: int) -> None:
        targets = list(self._assignment) if partitions is None else list(partitions)
        with self._lock:
            for tp in targets:
                state = self._state(tp)
                state.seek(0)
                state.position = None
                state.reset_to = where
                self._drop_queued(state)
                self._out_of_range.pop(state.tp, None)

    def _drop_queued(self, state: _Partition) -> None:
        """Forget fetched data of ``state`` not yet returned (lock held)."""
        self._completed = deque(c for c in self._completed if c.state is not state)
        state.buffered_bytes = 0

    async def position(self, tp: tuple[str, int]) -> int:
        """The offset of the next record ``poll`` returns for ``tp``."""
        state = self._state(tp)
        if state.position is None:
            await self._resolve_positions()
        return state.position

    def highwater(self, tp: tuple[str, int]) -> int:
        """The partition's high watermark (LSO under read_committed) from the last fetch; -1 if
        unknown."""
        state = self._state(tp)
        return state.last_stable_offset if self._read_committed else state.high_watermark

    async def _resolve_positions(self) -> None:
        missing = [s for s in self._assignment.values() if s.position is None]
        if not missing:
            return
        explicit = [s for s in missing if s.reset_to is not None]
        undecided = [s for s in missing if s.reset_to is None]
        if undecided and self.group_id is not None:
            committed = await self.committed([s.tp for s in undecided])
            with self._lock:
                for state in undecided:
                    offset = committed.get(state.tp)
                    if offset is not None and state.position is None:
                        state.seek(offset.offset)
            undecided = [s for s in undecided if s.position is None]
        if undecided:
            if self._reset_policy == "none":
                raise NoOffsetForPartitionError(
                    f"Undefined offset with no reset policy for partitions: "
                    f"{sorted(s.tp for s in undecided)}"
                )
            where = EARLIEST if self._reset_policy == "earliest" else LATEST
            for state in undecided:
                state.reset_to = where
            explicit.extend(undecided)
        for where in (EARLIEST, LATEST):
            group = [s for s in explicit if s.reset_to == where]
            if not group:
                continue
            offsets = await self._list_offsets([s.tp for s in group], where)
            with self._lock:
                for state in group:
                    if (
                        state.reset_to == where
                        and state.tp in offsets
                        and self._assignment.get(state.tp) is state
                    ):
                        state.seek(offsets[state.tp])
                        state.reset_to = None
        self._fetch_wakeup.set()

    async def _list_offsets(
        self, tps: list[TopicPartition], timestamp: int | Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """Offsets at ``timestamp`` (EARLIEST / LATEST, or a time in ms; one for all partitions
        or one per partition) from each partition's leader. For a time with no record at or
        after it, the broker answers offset -1."""
        timestamps = timestamp if isinstance(timestamp, Mapping) else dict.fromkeys(tps, timestamp)
        cluster = self._cluster
        remaining = set(tps)
        result: dict[TopicPartition, int] = {}

        async def attempt() -> None:
            if any(cluster.leader_for(tp) is None for tp in remaining):
                await cluster.refresh_metadata({tp.topic for tp in remaining})
            by_node: dict[int, list[TopicPartition]] = {}
            for tp in remaining:
                node = cluster.leader_for(tp)
                if node is None:
                    raise error_for(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp.topic}-{tp.partition}")
                by_node.setdefault(node, []).append(tp)
            retry_error = None
            for node, node_tps in by_node.items():
                conn = await cluster.connection(node)
                topics: dict[str, list[dict]] = {}
                for tp in node_tps:
                    topics.setdefault(tp.topic, []).append(
                        {"partition_index": tp.partition, "timestamp": timestamps[tp]}
                    )
                response = await conn.request(
                    ApiKey.LIST_OFFSETS,
                    {
                        "replica_id": -1,
                        "isolation_level": 1 if self._read_committed else 0,
                        "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
                    },
                )
                for topic in response.topics:
                    for p in topic.partitions:
                        tp = TopicPartition(topic.name, p.partition_index)
                        if p.error_code:
                            exc = error_for(p.error_code, f"ListOffsets {tp.topic}-{tp.partition}")
                            if not exc.retriable:
                                raise exc
                            retry_error = exc
                            cluster.partition_leaders.pop(tp.topic, None)
                            continue
                        result[tp] = p.offset
                        remaining.discard(tp)
            if retry_error is not None:
                raise retry_error

        await cluster.retry_call(attempt, timeout=self._request_timeout * 2, what="ListOffsets")
        return result

    async def beginning_offsets(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, int]:
        return await self._list_offsets([TopicPartition(*tp) for tp in partitions], EARLIEST)

    async def end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        """Latest offsets: the last stable offset under read_committed, else the high watermark."""
        return await self._list_offsets([TopicPartition(*tp) for tp in partitions], LATEST)

    async def offsets_for_times(
        self, timestamps: Mapping[tuple[str, int], int]
    ) -> dict[TopicPartition, int | None]:
        """The earliest offset whose timestamp is at least the given time (ms), per partition;
        None where no record is that late (KafkaConsumer.offsetsForTimes)."""
        wanted = {TopicPartition(*tp): int(ts) for tp, ts in timestamps.items()}
        if any(ts < 0 for ts in wanted.values()):
            raise ValueError("offsets_for_times takes times in ms since the epoch (>= 0)")
        found = await self._list_offsets(list(wanted), wanted)
        return {tp: (None if offset < 0 else offset) for tp, offset in found.items()}

    async def partitions_for(self, topic: str) -> list[TopicPartition]:
        count = await self._cluster.wait_for_topic(
            topic, self._request_timeout, allow_auto_create=False
        )
        return [TopicPartition(topic, p) for p in range(count)]

    # -- polling -------------------------------------------------------------------------------------

    async def poll(
        self, timeout: float = 0.0, max_records: int | None = None
    ) -> list[ConsumerRecord]:
        """Records ready to be processed, waiting up to ``timeout`` seconds for some; rebalance
        callbacks run here."""
        deadline = trio.current_time() + timeout
        while True:
            step = await self._poll_step(max(deadline - trio.current_time(), 0), max_records)
            if isinstance(step, RebalanceCallback):
                listener = self._on_assign if step.kind == "assigned" else self._on_revoke
                if listener is not None:
                    result = listener(step.partitions)
                    if inspect.isawaitable(result):
                        await result
                continue
            return step

    async def _poll_step(
        self, timeout: float, max_records: int | None
    ) -> list[ConsumerRecord] | RebalanceCallback:
        if self._closed:
            raise IllegalStateError("This consumer has already been closed.")
        if not self._assignment and self._subscription is None:
            raise IllegalStateError(
                "Consumer is not subscribed to any topics or assigned any partitions"
            )
        self._raise_fetch_failure()
        deadline = trio.current_time() + timeout
        while True:
            if self._subscription is not None:
                callback = await self._coordinate()
                if callback is not None:
                    return callback
            if (
                self._auto_commit
                and self._assignment
                and time.monotonic() >= self._next_auto_commit
            ):
                self._next_auto_commit = time.monotonic() + self._auto_commit_interval
                self._nursery.start_soon(self._auto_commit_task)
            if any(s.position is None for s in self._assignment.values()):
                await self._resolve_positions()
            records, wake = self._take(max_records or self._max_poll_records)
            if wake:
                self._fetch_wakeup.set()
            if records:
                return records
            self._raise_fetch_failure()
            if trio.current_time() >= deadline:
                return []
            event = self._data_event
            with trio.move_on_at(deadline):
                await event.wait()
            if event is self._data_event:
                self._data_event = trio.Event()

    def _raise_fetch_failure(self) -> None:
        if self._fetch_failure is not None:
            failure, self._fetch_failure = self._fetch_failure, None
            raise failure
        if self._out_of_range:
            partitions = dict(self._out_of_range)
            raise OffsetOutOfRangeError(
                "Fetch position out of range with no reset policy for partitions: "
                + ", ".join(
                    f"{tp.topic}-{tp.partition}={o}" for tp, o in sorted(partitions.items())
                ),
                partitions=partitions,
            )

    def take_ready(self, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records already fetched, taken from any thread (the blocking ``Consumer``'s fast path);
        ``[]`` when ``poll`` must run on the loop instead: nothing decodable is queued, or a
        rebalance, an auto-commit, a position or an error is waiting."""
        if (
            self._closed
            or self._fetch_failure is not None
            or self._out_of_range
            or self._rejoin_needed
            or self._phase != STABLE
            or (
                self._auto_commit
                and self._assignment
                and time.monotonic() >= self._next_auto_commit
            )
        ):
            return []
        records, wake = self._take(max_records or self._max_poll_records)
        if wake:
            try:
                self._token.run_sync_soon(self._set_fetch_wakeup)
            except trio.RunFinishedError:
                pass
        return records

    def _set_fetch_wakeup(self) -> None:
        self._fetch_wakeup.set()

    def _take(self, limit: int) -> tuple[list[ConsumerRecord], bool]:
        """Up to ``limit`` records from the queue, decoding entries as they are reached (outside
        the lock); ``(records, wake)`` where ``wake`` says the fetch manager may fetch again."""
        out: list[ConsumerRecord] = []
        wake = False
        while len(out) < limit:
            with self._lock:
                c = self._next_completed()
                if c is None or c.decoding:
                    break
                records = c.records
                if records is None:
                    c.decoding = True  # decode it below, without the lock
                else:
                    state = c.state
                    n = limit - len(out)
                    if c.index == 0 and n >= len(records):
                        chunk = records
                    else:
                        chunk = records[c.index : c.index + n]
                    if chunk:
                        out.extend(chunk)
                        c.index += len(chunk)
                        state.position = chunk[-1].offset + 1
                    if c.index >= len(records):
                        state.position = c.next_offset
                        state.buffered_bytes -= c.size
                        self._completed.remove(c)
                        wake = True
                    continue
            tp = c.state.tp
            try:
                decoded, _ = decode_fetched(
                    c.raw, tp.topic, tp.partition, c.fetch_offset, c.aborted, self._read_committed
                )
            except CorruptFrameError as exc:
                log.error("corrupt records in %s at offset %d: %s", tp, c.fetch_offset, exc)
                decoded = None
                failure = CorruptResponseError(
                    f"corrupt records in {tp.topic}-{tp.partition} at offset {c.fetch_offset}: {exc}"
                )
            with self._lock:
                c.decoding = False
                if decoded is not None:
                    c.records, c.raw = decoded, None
                    continue
                state = c.state
                if self._assignment.get(tp) is state and state.epoch == c.epoch:
                    # Fetch again from the bad data: poll raises until the application seeks
                    # past it (as Kafka's consumer does).
                    state.seek(state.position)
                    self._drop_queued(state)
                    wake = True
                self._fetch_failure = failure
            break
        return out, wake

    def _next_completed(self) -> _Completed | None:
        """The first queued entry of a partition that is current and not paused (lock held);
        entries voided by a seek or a revocation are dropped on the way."""
        found = None
        stale = []
        for c in self._completed:
            state = c.state
            if self._assignment.get(state.tp) is not state or state.epoch != c.epoch:
                stale.append(c)
            elif not state.paused:
                found = c
                break
        for c in stale:
            self._completed.remove(c)
        return found

    def wakeup(self) -> None:
        """Make a waiting ``poll`` return early (empty)."""
        self._data_event.set()

    # -- fetching ------------------------------------------------------------------------------------

    async def _fetch_manager(self) -> None:
        cluster = self._cluster
        while not self._closed:
            by_node: dict[int, list[_Partition]] = {}
            for tp, state in self._assignment.items():
                if (
                    state.position is None
                    or state.paused
                    or state.fetching
                    or state.buffered_bytes >= self._prefetch_bytes
                    or tp in self._out_of_range
                ):
                    continue
                node = cluster.leader_for(tp)
                if node is None:
                    self._metadata_wanted = True
                    continue
                if node not in self._busy_nodes:
                    by_node.setdefault(node, []).append(state)
            for node, states in by_node.items():
                self._busy_nodes.add(node)
                requested = []
                for state in states:
                    state.fetching = True
                    requested.append((state, state.epoch, state.fetch_offset))
                self._nursery.start_soon(self._fetch_from, node, requested)
            if self._metadata_wanted and self._assignment:
                self._metadata_wanted = False
                try:
                    await cluster.refresh_metadata({tp.topic for tp in self._assignment})
                except KafkaClientError as exc:
                    log.info("metadata refresh failed: %s", exc)
                    self._metadata_wanted = True
                if self._metadata_wanted or any(
                    cluster.leader_for(tp) is None for tp in self._assignment
                ):
                    # Still no leader (a topic being created, a broker down): ask again later.
                    self._metadata_wanted = True
                    with trio.move_on_after(self._retry_backoff):
                        await self._fetch_wakeup.wait()
                    self._fetch_wakeup = trio.Event()
                continue
            await self._fetch_wakeup.wait()
            self._fetch_wakeup = trio.Event()

    async def _fetch_from(self, node: int, requested: list[tuple[_Partition, int, int]]) -> None:
        cfg = self.config
        topics: dict[str, list[dict]] = {}
        for state, _, offset in requested:
            topics.setdefault(state.tp.topic, []).append(
                {
                    "partition": state.tp.partition,
                    "fetch_offset": offset,
                    "partition_max_bytes": cfg["max.partition.fetch.bytes"],
                }
            )
        max_wait_ms = cfg["fetch.max.wait.ms"]
        try:
            conn = await self._cluster.connection(node)
            response = await conn.request(
                ApiKey.FETCH,
                {
                    "replica_id": -1,
                    "max_wait_ms": max_wait_ms,
                    "min_bytes": cfg["fetch.min.bytes"],
                    "max_bytes": cfg["fetch.max.bytes"],
                    "isolation_level": 1 if self._read_committed else 0,
                    "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
                },
                extra_timeout=max_wait_ms / 1000,
            )
        except KafkaClientError as exc:
            log.info("fetch from broker %d failed: %s", node, exc)
            self._metadata_wanted = True
            await trio.sleep(self._retry_backoff)
            response = None
        finally:
            for state, _, _ in requested:
                state.fetching = False
            self._busy_nodes.discard(node)
        if response is not None:
            self._accept_fetch(response, requested)
        self._fetch_wakeup.set()

    def _accept_fetch(self, response: Any, requested: list[tuple[_Partition, int, int]]) -> None:
        """Settle errors, advance fetch offsets from the batch headers and queue each partition's
        data, in order, for ``poll`` to decode."""
        wanted = {state.tp: (state, epoch, offset) for state, epoch, offset in requested}
        queued = False
        for topic in response.responses:
            for p in topic.partitions:
                entry = wanted.get((topic.topic, p.partition_index))
                if entry is None:
                    continue
                state, epoch, offset = entry
                with self._lock:
                    if (
                        self._assignment.get(state.tp) is not state
                        or state.epoch != epoch
                        or state.fetch_offset != offset
                    ):
                        continue  # seeked or revoked since the request left
                    if p.error_code:
                        self._fetch_error(state, p.error_code)
                        continue
                    state.high_watermark = p.high_watermark
                    state.last_stable_offset = p.last_stable_offset
                    next_offset = next_fetch_offset(p.records, offset)
                    if next_offset == offset:
                        continue
                    aborted = (
                        [(a.producer_id, a.first_offset) for a in p.aborted_transactions]
                        if p.aborted_transactions
                        else None
                    )
                    completed = _Completed(state, epoch, p.records, aborted, offset, next_offset)
                    self._completed.append(completed)
                    state.fetch_offset = next_offset
                    state.buffered_bytes += completed.size
                    queued = True
        if queued:
            self._data_event.set()

    def _fetch_error(self, state: _Partition, code: int) -> None:
        """A partition error in a Fetch response (lock held)."""
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self._reset_policy == "none":
                # Park the partition (no refetch) and make poll raise until it is sought.
                log.info(
                    "offset %d out of range for %s and no reset policy",
                    state.fetch_offset,
                    state.tp,
                )
                self._out_of_range[state.tp] = state.fetch_offset
                self._data_event.set()
                return
            log.info(
                "offset %d out of range for %s; resetting (%s)",
                state.fetch_offset,
                state.tp,
                self._reset_policy,
            )
            state.seek(0)
            state.position = None
            state.reset_to = EARLIEST if self._reset_policy == "earliest" else LATEST
            self._data_event.set()  # poll resolves the position
            return
        exc = error_for(code, f"Fetch {state.tp.topic}-{state.tp.partition}")
        if exc.retriable:
            self._metadata_wanted = True
        else:
            log.error("fetch error for %s: %s", state.tp, exc)

    # -- offsets -------------------------------------------------------------------------------------

    def _require_group(self) -> str:
        if self.group_id is None:
            raise IllegalStateError("this consumer has no group.id: offsets cannot be committed")
        return self.group_id

    async def commit(self, offsets: Mapping[Any, int | OffsetAndMetadata] | None = None) -> None:
        """Commit ``{(topic, partition): next offset}`` (default: the current positions) and wait."""
        group_id = self._require_group()
        if offsets is None:
            offsets = {
                tp: s.position for tp, s in self._assignment.items() if s.position is not None
            }
        if not offsets:
            return
        topics: dict[str, list[dict]] = {}
        for tp, offset in offsets.items():
            metadata = None
            if isinstance(offset, OffsetAndMetadata):
                offset, metadata = offset.offset, offset.metadata
            topics.setdefault(tp[0], []).append(
                {
                    "partition_index": tp[1],
                    "committed_offset": offset,
                    "committed_metadata": metadata,
                }
            )
        in_group = self._subscription is not None and self._generation_id >= 0
        body = {
            "group_id": group_id,
            "generation_id": self._generation_id if in_group else -1,
            "member_id": self._member_id if in_group else "",
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
            if worst in _REJOIN_CODES:
                if worst == ErrorCode.UNKNOWN_MEMBER_ID:
                    self._member_id = ""
                self._request_rejoin()
                raise CommitFailedError(
                    "Commit cannot be completed since the group has already rebalanced and "
                    "assigned the partitions to another member."
                ) from error_for(worst)
            exc = self._cluster.coordinator_error(GROUP, group_id, worst, "OffsetCommit")
            raise exc

        await self._cluster.retry_call(
            attempt, timeout=self._request_timeout * 2, what="OffsetCommit"
        )

    def commit_async(
        self,
        offsets: Mapping[Any, int | OffsetAndMetadata] | None = None,
        callback: Callable[[BaseException | None, Any], Any] | None = None,
    ) -> None:
        """Commit without waiting; ``callback(error, offsets)`` runs on the client's loop."""
        self._require_group()
        if offsets is None:
            offsets = {
                tp: s.position for tp, s in self._assignment.items() if s.position is not None
            }
        self._nursery.start_soon(self._commit_task, dict(offsets), callback)

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

    async def _auto_commit_task(self) -> None:
        try:
            await self.commit()
        except KafkaClientError as exc:
            log.info("auto-commit failed: %s", exc)

    async def committed(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed)."""
        group_id = self._require_group()
        tps = [TopicPartition(*tp) for tp in partitions]
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)

        async def attempt() -> Any:
            response = await self._cluster.coordinator_request(
                GROUP,
                group_id,
                ApiKey.OFFSET_FETCH,
                {
                    "group_id": group_id,
                    "topics": [{"name": t, "partition_indexes": p} for t, p in topics.items()],
                },
                channel=COORDINATOR_CHANNEL,
            )
            worst = response.error_code or _worst(
                p.error_code for t in response.topics for p in t.partitions
            )
            if worst:
                exc = self._cluster.coordinator_error(GROUP, group_id, worst, "OffsetFetch")
                raise exc
            return response

        response = await self._cluster.retry_call(
            attempt, timeout=self._request_timeout * 2, what="OffsetFetch"
        )
        result: dict[TopicPartition, OffsetAndMetadata | None] = {tp: None for tp in tps}
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                if tp in result and p.committed_offset >= 0:
                    result[tp] = OffsetAndMetadata(p.committed_offset, p.metadata)
        return result

    # -- group membership ----------------------------------------------------------------------------

    def group_metadata(self) -> ConsumerGroupMetadata:
        """What ``send_offsets_to_transaction`` needs (group id, generation, member id)."""
        group_id = self._require_group()
        return ConsumerGroupMetadata(group_id, self._generation_id, self._member_id)

    def _request_rejoin(self) -> None:
        self._rejoin_needed = True
        self._data_event.set()

    async def _coordinate(self) -> RebalanceCallback | None:
        """Advance the rebalance state machine; a callback to run, or None when stable."""
        if self._phase == STABLE:
            if not self._rejoin_needed:
                return None
            revoked = sorted(self._assignment)
            if revoked and self._auto_commit:
                try:
                    await self.commit()
                except KafkaClientError as exc:
                    log.info("commit before rebalance failed: %s", exc)
            self._phase = JOINING
            self._set_assignment([])
            if revoked and self._on_revoke is not None:
                return RebalanceCallback("revoked", revoked)
        if self._phase == JOINING:
            assigned = await self._join_and_sync()
            self._set_assignment(assigned)
            self._phase = ASSIGNED
            if not self._heartbeat_running:
                self._heartbeat_running = True
                self._nursery.start_soon(self._heartbeat_loop)
        if self._phase == ASSIGNED:
            self._phase = STABLE
            if self._on_assign is not None:
                return RebalanceCallback("assigned", sorted(self._assignment))
        return None

    async def _join_and_sync(self) -> list[TopicPartition]:
        cluster = self._cluster
        group_id = self.group_id
        cfg = self.config
        rebalance_timeout_ms = cfg["max.poll.interval.ms"]
        while True:
            self._rejoin_needed = False
            topics = list(self._subscription or ())
            try:
                join = await cluster.coordinator_request(
                    GROUP,
                    group_id,
                    ApiKey.JOIN_GROUP,
                    {
                        "group_id": group_id,
                        "session_timeout_ms": cfg["session.timeout.ms"],
                        "rebalance_timeout_ms": rebalance_timeout_ms,
                        "member_id": self._member_id,
                        "protocol_type": PROTOCOL_TYPE,
                        "protocols": [
                            {"name": self._strategy, "metadata": encode_subscription(topics)}
                        ],
                    },
                    channel=COORDINATOR_CHANNEL,
                    extra_timeout=rebalance_timeout_ms / 1000,
                )
            except KafkaClientError as exc:
                if not exc.retriable:
                    raise
                cluster.forget_coordinator(GROUP, group_id)
                await trio.sleep(self._retry_backoff)
                continue
            if join.error_code:
                if join.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                    # KIP-394 (JoinGroup v4+): the coordinator gave us our member id; join
                    # again with it at once, as Kafka's consumer does.
                    log.info("group %s: joining again with member id %s", group_id, join.member_id)
                    self._member_id = join.member_id
                    continue
                if join.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self._member_id = ""
                    continue
                exc = error_for(join.error_code, "JoinGroup")
                if exc.retriable or join.error_code in _REJOIN_CODES:
                    if is_coordinator_error(exc):
                        cluster.forget_coordinator(GROUP, group_id)
                    await trio.sleep(self._retry_backoff)
                    continue
                raise exc
            self._member_id = join.member_id
            self._generation_id = join.generation_id
            assignments = []
            self._assigned_counts = None
            if join.leader == join.member_id:
                assignments = await self._lead_assignment(join.members)
            try:
                sync = await cluster.coordinator_request(
                    GROUP,
                    group_id,
                    ApiKey.SYNC_GROUP,
                    {
                        "group_id": group_id,
                        "generation_id": self._generation_id,
                        "member_id": self._member_id,
                        "assignments": assignments,
                    },
                    channel=COORDINATOR_CHANNEL,
                    extra_timeout=rebalance_timeout_ms / 1000,
                )
            except KafkaClientError as exc:
                if not exc.retriable:
                    raise
                cluster.forget_coordinator(GROUP, group_id)
                await trio.sleep(self._retry_backoff)
                continue
            if sync.error_code:
                if sync.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self._member_id = ""
                exc = error_for(sync.error_code, "SyncGroup")
                if exc.retriable or sync.error_code in _REJOIN_CODES:
                    if is_coordinator_error(exc):
                        cluster.forget_coordinator(GROUP, group_id)
                    continue
                raise exc
            try:
                assigned = decode_assignment_untrusted(sync.assignment)
            except CorruptFrameError as exc:
                raise CorruptResponseError(f"bad assignment from the group leader: {exc}") from exc
            log.info(
                "joined group %s generation %d as %s: %s",
                group_id,
                self._generation_id,
                self._member_id,
                assigned,
            )
            return assigned

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
        next_metadata_check = trio.current_time()
        try:
            while self._subscription is not None and not self._closed:
                await trio.sleep(interval)
                if self._phase != STABLE or self._rejoin_needed or not self._member_id:
                    continue
                if self._assigned_counts is not None and trio.current_time() >= next_metadata_check:
                    next_metadata_check = trio.current_time() + await self._check_partition_counts()
                try:
                    response = await self._cluster.coordinator_request(
                        GROUP,
                        self.group_id,
                        ApiKey.HEARTBEAT,
                        {
                            "group_id": self.group_id,
                            "generation_id": self._generation_id,
                            "member_id": self._member_id,
                        },
                        channel=COORDINATOR_CHANNEL,
                    )
                except KafkaClientError as exc:
                    log.info("heartbeat failed: %s", exc)
                    self._cluster.forget_coordinator(GROUP, self.group_id)
                    continue
                code = response.error_code
                if code == ErrorCode.NONE:
                    continue
                if code in _REJOIN_CODES:
                    if code == ErrorCode.UNKNOWN_MEMBER_ID:
                        self._member_id = ""
                    log.info("group %s is rebalancing (%s)", self.group_id, ErrorCode(code).name)
                    self._request_rejoin()
                elif code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    self._cluster.forget_coordinator(GROUP, self.group_id)
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
            return self._retry_backoff * 10
        changed = [t for t, n in counts.items() if (self._cluster.partition_count(t) or 0) != n]
        if changed:
            log.info("partitions of %s changed: rebalancing group %s", changed, self.group_id)
            self._request_rejoin()
        waiting = any(n == 0 for n in counts.values())
        return 1.0 if waiting else self.config["metadata.max.age.ms"] / 1000


def _worst(codes: Iterable[int]) -> int:
    """The most severe non-zero error code: fatal, then non-retriable, then retriable."""
    worst, rank = 0, -1
    for code in codes:
        if not code:
            continue
        cls = for_code(code)
        r = 3 if cls.fatal else (1 if cls.retriable else 2)
        if code in _REJOIN_CODES:
            r = 4
        if r > rank:
            worst, rank = code, r
    return worst
