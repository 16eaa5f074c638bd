"""The trio consumer: manual assignment or a classic consumer group, read_committed by default.

Usage::

    async with AsyncConsumer({"bootstrap.servers": "...", "group.id": "g"}) as consumer:
        consumer.subscribe(["topic"])
        while True:
            for record in await consumer.poll(1.0):
                ...

Three parts, as aiokafka splits its consumer, joined here:

- ``subscription.SubscriptionState``: the assigned partitions, their positions and the
  subscription (no I/O);
- ``fetcher.Fetcher``: the fetch-manager task, the queue of fetched data (decoded in ``poll``),
  ListOffsets;
- ``group_coordinator.GroupCoordinator``: group membership (join, sync, heartbeats, leave) and
  committed offsets.

``poll`` drives them: it advances a rebalance, runs the auto-commit, resolves missing positions
(the group's committed offset, else ``auto.offset.reset`` through ListOffsets; under
read_committed "latest" is the last stable offset) and takes fetched records. ``poll_step``
returns either records or a ``RebalanceCallback`` for the caller to run and call again: the
blocking ``Consumer`` runs the callbacks in the application's thread this way. The surface the
blocking facade may use from its own thread is ``take_ready`` (under the subscription's lock);
everything else runs on the loop.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import trio

from client._loop import require_trio
from client.aio._tasks import EngineTasks
from client.aio.cluster import Cluster
from client.aio.connection import OpenStream
from client.aio.fetcher import Fetcher
from client.aio.group_coordinator import (
    STABLE,
    ConsumerProtocolCoordinator,
    GroupCoordinator,
    RebalanceCallback,
)
from client.aio.subscription import (
    EARLIEST,
    LATEST,
    PartitionState,
    RebalanceListener,
    SubscriptionState,
)
from client.clock import Clock, WallClock
from client.config import ClientConfig, consumer_config
from client.errors import IllegalStateError, KafkaClientError, NoOffsetForPartitionError
from client.structs import ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, TopicPartition

log = logging.getLogger("client.consumer")

__all__ = ["AsyncConsumer", "RebalanceCallback", "RebalanceListener"]


class AsyncConsumer:
    """A Kafka consumer on trio (see the module docstring)."""

    def __init__(
        self,
        config: Mapping[str, Any] | ClientConfig,
        *,
        clock: Clock | None = None,
        open_stream: OpenStream | None = None,
    ) -> None:
        """``clock``: the time the consumer reads (default: the wall clock); ``open_stream``:
        how its connections open (default: TCP; tests pass an in-memory broker's)."""
        cfg = config if isinstance(config, ClientConfig) else consumer_config(config)
        self.config = cfg
        self.clock: Clock = clock or WallClock()
        self.group_id: str | None = cfg["group.id"]
        self._auto_commit: bool = cfg["enable.auto.commit"]
        self._auto_commit_interval_ns: int = cfg["auto.commit.interval.ms"] * 1_000_000
        self._reset_policy: str = cfg["auto.offset.reset"]
        self._max_poll_records: int = cfg["max.poll.records"]
        self._request_timeout = cfg["request.timeout.ms"] / 1000
        self._cluster = Cluster(cfg, open_stream=open_stream)
        self._tasks = EngineTasks("AsyncConsumer")
        self._subs = SubscriptionState()
        self._fetcher = Fetcher(cfg, self._subs, self._cluster)
        coordinator = (ConsumerProtocolCoordinator if cfg["group.protocol"] == "consumer"
                       else GroupCoordinator)
        self._group = coordinator(cfg, self._subs, self._cluster, self._tasks,
                                  self._set_assignment, self._fetcher.wake_poll)
        self._next_auto_commit_ns = 0  # clock.monotonic_ns() of the next auto-commit
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------------

    async def __aenter__(self) -> AsyncConsumer:
        require_trio("AsyncConsumer", "Consumer")
        nursery = await self._tasks.open()
        self._cluster.start(nursery)
        nursery.start_soon(self._fetcher.run, nursery)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await self.close(commit=exc_info[0] is None)
        finally:
            self._tasks.cancel()
            await self._cluster.aclose()
            await self._tasks.aclose()

    async def close(self, commit: bool = True) -> None:
        """Commit positions (with auto-commit) and leave the group. Idempotent."""
        if self._closed or not self._tasks.running:
            return
        self._closed = True
        fetcher, group = self._fetcher, self._group
        fetcher.closed = group.closed = True  # the fetch manager sends nothing more
        # Do not wait up to fetch.max.wait.ms for long-polling Fetches: close their connections
        # (the default channel; commits and LeaveGroup use the coordinator channel). The broker
        # copes with a reset while it writes the reply (tests/integration/test_bad_input.py).
        for node in list(fetcher.busy_nodes):
            conn = self._cluster.connection_nowait(node)
            if conn is not None:
                await conn.aclose()
        if self.group_id is not None and self._auto_commit and commit and self._subs.assignment:
            with trio.move_on_after(self._request_timeout):
                try:
                    await group.commit()
                except KafkaClientError as exc:
                    log.info("commit on close failed: %s", exc)
        await group.leave()
        with self._subs.lock:
            self._subs.assignment = {}
            fetcher.completed.clear()

    # -- assignment and subscription -----------------------------------------------------------------

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Consume exactly these partitions (no group membership; commits still use group.id)."""
        self._subs.check_assign()
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
        self._subs.subscribe(topics, on_assign, on_revoke)
        self._group.request_rejoin()

    def unsubscribe(self) -> None:
        self._subs.topics = None
        self._set_assignment([])

    def assignment(self) -> set[TopicPartition]:
        return set(self._subs.assignment)

    def subscription(self) -> set[str]:
        return set(self._subs.topics or ())

    def _set_assignment(self, partitions: Sequence[TopicPartition]) -> None:
        with self._subs.lock:
            self._subs.set_assignment(partitions)
            self._fetcher.drop_unassigned()
        self._fetcher.wake_fetcher()

    def pause(self, partitions: Iterable[tuple[str, int]]) -> None:
        for tp in partitions:
            self._subs.state(tp).paused = True

    def resume(self, partitions: Iterable[tuple[str, int]]) -> None:
        for tp in partitions:
            self._subs.state(tp).paused = False
        self._fetcher.wake_fetcher()

    def paused(self) -> set[TopicPartition]:
        return self._subs.paused()

    # -- positions ---------------------------------------------------------------------------------

    def seek(self, tp: tuple[str, int], offset: int) -> None:
        """The next ``poll`` returns records of ``tp`` from ``offset`` on."""
        if offset < 0:
            raise ValueError(f"seek offset must not be negative: {offset}")
        with self._subs.lock:
            state = self._subs.seek(tp, offset)
            self._fetcher.drop_queued(state)
        self._fetcher.wake_fetcher()

    def seek_to_beginning(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        self._seek_to(partitions, EARLIEST)

    def seek_to_end(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        self._seek_to(partitions, LATEST)

    def _seek_to(self, partitions: Iterable[tuple[str, int]] | None, where: int) -> None:
        with self._subs.lock:
            for state in self._subs.seek_to(partitions, where):
                self._fetcher.drop_queued(state)

    async def position(self, tp: tuple[str, int]) -> int:
        """The offset of the next record ``poll`` returns for ``tp``."""
        state = self._subs.state(tp)
        if state.position is None:
            await self._resolve_positions()
        if state.position is None:  # revoked or sought meanwhile
            raise IllegalStateError(f"No position for partition {tp[0]}-{tp[1]}")
        return state.position

    def highwater(self, tp: tuple[str, int]) -> int:
        """The partition's high watermark (LSO under read_committed) from the last fetch; -1 if
        unknown."""
        state = self._subs.state(tp)
        return state.last_stable_offset if self._fetcher.read_committed else state.high_watermark

    async def _resolve_positions(self) -> None:
        subs = self._subs
        missing = [s for s in subs.assignment.values() if s.position is None]
        if not missing:
            return
        explicit = [s for s in missing if s.reset_to is not None]
        undecided = [s for s in missing if s.reset_to is None]
        if undecided and self.group_id is not None:
            committed = await self.committed([s.tp for s in undecided])
            with subs.lock:
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
            group: list[PartitionState] = [s for s in explicit if s.reset_to == where]
            if not group:
                continue
            offsets = await self._fetcher.list_offsets([s.tp for s in group], where)
            with subs.lock:
                for state in group:
                    if (
                        state.reset_to == where
                        and state.tp in offsets
                        and subs.assignment.get(state.tp) is state
                    ):
                        state.seek(offsets[state.tp])
                        state.reset_to = None
        self._fetcher.wake_fetcher()

    async def beginning_offsets(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, int]:
        return await self._fetcher.list_offsets([TopicPartition(*tp) for tp in partitions],
                                                EARLIEST)

    async def end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        """Latest offsets: the last stable offset under read_committed, else the high watermark."""
        return await self._fetcher.list_offsets([TopicPartition(*tp) for tp in partitions],
                                                LATEST)

    async def offsets_for_times(
        self, timestamps: Mapping[tuple[str, int], int]
    ) -> dict[TopicPartition, int | None]:
        """The earliest offset whose timestamp is at least the given time (ms), per partition;
        None where no record is that late (KafkaConsumer.offsetsForTimes)."""
        wanted = {TopicPartition(*tp): int(ts) for tp, ts in timestamps.items()}
        if any(ts < 0 for ts in wanted.values()):
            raise ValueError("offsets_for_times takes times in ms since the epoch (>= 0)")
        found = await self._fetcher.list_offsets(list(wanted), wanted)
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
            step = await self.poll_step(max(deadline - trio.current_time(), 0), max_records)
            if isinstance(step, RebalanceCallback):
                subs = self._subs
                listener = subs.on_assign if step.kind == "assigned" else subs.on_revoke
                if listener is not None:
                    result = listener(step.partitions)
                    if inspect.isawaitable(result):
                        await result
                continue
            return step

    async def poll_step(
        self, timeout: float, max_records: int | None
    ) -> list[ConsumerRecord] | RebalanceCallback:
        """One step of ``poll`` for the blocking facade: records, or a rebalance callback for the
        caller to run in its own thread before it calls again."""
        if self._closed:
            raise IllegalStateError("This consumer has already been closed.")
        subs, fetcher, group = self._subs, self._fetcher, self._group
        if not subs.assignment and not subs.subscribed:
            raise IllegalStateError(
                "Consumer is not subscribed to any topics or assigned any partitions"
            )
        fetcher.raise_failure()
        deadline = trio.current_time() + timeout
        while True:
            if subs.subscribed:
                callback = await group.coordinate()
                if callback is not None:
                    return callback
            if self._auto_commit and subs.assignment:
                now_ns = self.clock.monotonic_ns()
                if now_ns >= self._next_auto_commit_ns:
                    self._next_auto_commit_ns = now_ns + self._auto_commit_interval_ns
                    self._tasks.start_soon(group.auto_commit_task)
            if any(s.position is None for s in subs.assignment.values()):
                await self._resolve_positions()
            records, wake = fetcher.take(max_records or self._max_poll_records)
            if wake:
                fetcher.wake_fetcher()
            if records:
                return records
            fetcher.raise_failure()
            if trio.current_time() >= deadline:
                return []
            event = fetcher.data_event
            with trio.move_on_at(deadline):
                await event.wait()
            if event is fetcher.data_event:
                fetcher.data_event = trio.Event()

    def take_ready(self, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records already fetched, taken from any thread (the blocking ``Consumer``'s fast path);
        ``[]`` when ``poll`` must run on the loop instead: nothing decodable is queued, or a
        rebalance, an auto-commit, a position or an error is waiting."""
        fetcher, group = self._fetcher, self._group
        if (
            self._closed
            or fetcher.failure is not None
            or self._subs.out_of_range
            or group.rejoin_needed
            or group.phase != STABLE
            or (
                self._auto_commit
                and self._subs.assignment
                and self.clock.monotonic_ns() >= self._next_auto_commit_ns
            )
        ):
            return []
        records, wake = fetcher.take(max_records or self._max_poll_records)
        token = self._tasks.token
        if wake and token is not None:
            try:
                token.run_sync_soon(fetcher.wake_fetcher)
            except trio.RunFinishedError:
                pass
        return records

    def wakeup(self) -> None:
        """Make a waiting ``poll`` return early (empty)."""
        self._fetcher.wake_poll()

    # -- offsets and group ---------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[Any, int | OffsetAndMetadata] | None = None) -> None:
        """Commit ``{(topic, partition): next offset}`` (default: the current positions) and wait."""
        await self._group.commit(offsets)

    def commit_async(
        self,
        offsets: Mapping[Any, int | OffsetAndMetadata] | None = None,
        callback: Callable[[BaseException | None, Any], Any] | None = None,
    ) -> None:
        """Commit without waiting; ``callback(error, offsets)`` runs on the client's loop."""
        self._group.commit_async(offsets, callback)

    async def committed(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed)."""
        return await self._group.committed(partitions)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """What ``send_offsets_to_transaction`` needs (group id, generation, member id)."""
        return self._group.metadata()
