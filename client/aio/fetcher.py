"""Fetching for the consumer (aiokafka's Fetcher): a fetch-manager task, the queue of fetched
data, decoding in ``poll``, ListOffsets.

The fetch manager keeps at most one Fetch in flight per broker, for the partitions that broker
leads which have a position, are not paused and have less than two ``max.partition.fetch.bytes``
buffered, so the next response is on its way while the application works through the last one.
A response only has its batch headers read (``next_fetch_offset``: where the next Fetch starts)
before it is queued; ``take`` decodes and filters the records when ``poll`` reaches them
(``client/fetch_decoder.py``: control batches and aborted transactions never reach the
application). Decoding there keeps the trio task free for I/O and, with the blocking ``Consumer``,
allocates the records in the application's thread (under the subscription's lock, held only for
bookkeeping). With ``auto.offset.reset=none`` a partition whose fetch offset is out of range is
parked in ``out_of_range``: not fetched, and every ``poll`` raises ``OffsetOutOfRangeError`` until
it is sought, as Kafka's consumer does.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping
from typing import Any

import trio

from client.aio.cluster import Cluster
from client.aio.subscription import EARLIEST, LATEST, PartitionState, SubscriptionState
from client.config import ClientConfig
from client.errors import (
    CorruptResponseError,
    KafkaClientError,
    OffsetOutOfRangeError,
    error_for,
)
from client.fetch_decoder import decode_fetched, next_fetch_offset
from client.retry import retry
from client.structs import ConsumerRecord, TopicPartition
from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError, ErrorCode

log = logging.getLogger("client.consumer")


class Completed:
    """One partition's data from one Fetch response, taken by ``poll`` in order; decoded by the
    first ``take`` that reaches it."""

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
        state: PartitionState,
        epoch: int,
        raw: bytes,
        aborted: list[tuple[int, int]] | None,
        fetch_offset: int,
        next_offset: int,
    ) -> None:
        self.state = state
        self.epoch = epoch
        self.raw = raw  # emptied once decoded
        self.aborted = aborted
        self.fetch_offset = fetch_offset
        self.records: list[ConsumerRecord] | None = None
        self.decoding = False
        self.index = 0
        self.next_offset = next_offset
        self.size = len(raw)


class Fetcher:
    def __init__(
        self, config: ClientConfig, subscriptions: SubscriptionState, cluster: Cluster
    ) -> None:
        self.config = config
        self._cluster = cluster
        self._subs = subscriptions
        self.read_committed = config["isolation.level"] == "read_committed"
        self._reset_policy: str = config["auto.offset.reset"]
        self._prefetch_bytes: int = 2 * max(config["max.partition.fetch.bytes"], 1)
        self._request_timeout = config["request.timeout.ms"] / 1000
        self._backoff = cluster.backoff
        self._metadata_attempts = 0  # metadata refreshes in a row that left a partition leaderless
        self._node_failures: dict[int, int] = {}  # node -> Fetches in a row that failed
        self.completed: deque[Completed] = deque()
        self.data_event = trio.Event()  # set when poll has something to look at
        self.wakeup = trio.Event()  # set when the fetch manager has something to do
        self.busy_nodes: set[int] = set()
        self._metadata_wanted = False
        self.failure: BaseException | None = None  # raised by the next poll
        self.closed = False

    # -- the queue (taken by poll, possibly from the blocking Consumer's thread) --------------------

    def wake_poll(self) -> None:
        self.data_event.set()

    def wake_fetcher(self) -> None:
        self.wakeup.set()

    def drop_queued(self, state: PartitionState) -> None:
        """Forget fetched data of ``state`` not yet returned (lock held)."""
        self.completed = deque(c for c in self.completed if c.state is not state)
        state.buffered_bytes = 0

    def drop_unassigned(self) -> None:
        """Forget fetched data of partitions no longer assigned (lock held)."""
        assignment = self._subs.assignment
        self.completed = deque(c for c in self.completed if assignment.get(c.state.tp) is c.state)

    def raise_failure(self) -> None:
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        if self._subs.out_of_range:
            partitions = dict(self._subs.out_of_range)
            raise OffsetOutOfRangeError(
                "Fetch position out of range with no reset policy for partitions: "
                + ", ".join(
                    f"{tp.topic}-{tp.partition}={o}" for tp, o in sorted(partitions.items())
                ),
                partitions=partitions,
            )

    def take(self, limit: int) -> tuple[list[ConsumerRecord], bool]:
        """Up to ``limit`` records from the queue, decoding entries as they are reached (outside
        the lock); ``(records, wake)`` where ``wake`` says the fetch manager may fetch again."""
        lock = self._subs.lock
        out: list[ConsumerRecord] = []
        wake = False
        while len(out) < limit:
            with lock:
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
                        self.completed.remove(c)
                        wake = True
                    continue
            tp = c.state.tp
            try:
                decoded, _ = decode_fetched(
                    c.raw, tp.topic, tp.partition, c.fetch_offset, c.aborted, self.read_committed
                )
            except CorruptFrameError as exc:
                log.error("corrupt records in %s at offset %d: %s", tp, c.fetch_offset, exc)
                decoded = None
                failure = CorruptResponseError(
                    f"corrupt records in {tp.topic}-{tp.partition} at offset {c.fetch_offset}: {exc}"
                )
            with lock:
                c.decoding = False
                if decoded is not None:
                    c.records, c.raw = decoded, b""
                    continue
                state = c.state
                if self._subs.is_current(state, c.epoch) and state.position is not None:
                    # Fetch again from the bad data: poll raises until the application seeks
                    # past it (as Kafka's consumer does).
                    state.seek(state.position)
                    self.drop_queued(state)
                    wake = True
                self.failure = failure
            break
        return out, wake

    def _next_completed(self) -> Completed | None:
        """The first queued entry of a partition that is current and not paused (lock held);
        entries voided by a seek or a revocation are dropped on the way."""
        found = None
        stale = []
        for c in self.completed:
            if not self._subs.is_current(c.state, c.epoch):
                stale.append(c)
            elif not c.state.paused:
                found = c
                break
        for c in stale:
            self.completed.remove(c)
        return found

    # -- the fetch manager ---------------------------------------------------------------------------

    async def run(self, nursery: trio.Nursery) -> None:
        """The fetch-manager task (until ``closed``); fetches run in ``nursery``."""
        cluster = self._cluster
        subs = self._subs
        while not self.closed:
            by_node: dict[int, list[PartitionState]] = {}
            for tp, state in subs.assignment.items():
                if (
                    state.position is None
                    or state.paused
                    or state.fetching
                    or state.buffered_bytes >= self._prefetch_bytes
                    or tp in subs.out_of_range
                ):
                    continue
                node = cluster.leader_for(tp)
                if node is None:
                    self._metadata_wanted = True
                    continue
                if node not in self.busy_nodes:
                    by_node.setdefault(node, []).append(state)
            for node, states in by_node.items():
                self.busy_nodes.add(node)
                requested = []
                for state in states:
                    state.fetching = True
                    requested.append((state, state.epoch, state.fetch_offset))
                nursery.start_soon(self._fetch_from, node, requested)
            if self._metadata_wanted and subs.assignment:
                self._metadata_wanted = False
                try:
                    await cluster.refresh_metadata({tp.topic for tp in subs.assignment})
                except KafkaClientError as exc:
                    log.info("metadata refresh failed: %s", exc)
                    self._metadata_wanted = True
                if self._metadata_wanted or any(
                    cluster.leader_for(tp) is None for tp in subs.assignment
                ):
                    # Still no leader (a topic being created, a broker down): ask again later.
                    self._metadata_wanted = True
                    with trio.move_on_after(self._backoff.seconds(self._metadata_attempts)):
                        await self.wakeup.wait()
                    self._metadata_attempts += 1
                    self.wakeup = trio.Event()
                else:
                    self._metadata_attempts = 0
                continue
            await self.wakeup.wait()
            self.wakeup = trio.Event()

    async def _fetch_from(
        self, node: int, requested: list[tuple[PartitionState, int, int]]
    ) -> None:
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
                    "isolation_level": 1 if self.read_committed else 0,
                    "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
                },
                extra_timeout=max_wait_ms / 1000,
            )
        except KafkaClientError as exc:
            log.info("fetch from broker %d failed: %s", node, exc)
            self._metadata_wanted = True
            failures = self._node_failures.get(node, 0)
            self._node_failures[node] = failures + 1
            await trio.sleep(self._backoff.seconds(failures))
            response = None
        else:
            self._node_failures.pop(node, None)
        finally:
            for state, _, _ in requested:
                state.fetching = False
            self.busy_nodes.discard(node)
        if response is not None:
            self._accept(response, requested)
        self.wakeup.set()

    def _accept(self, response: Any, requested: list[tuple[PartitionState, int, int]]) -> None:
        """Settle errors, advance fetch offsets from the batch headers and queue each partition's
        data, in order, for ``take`` to decode."""
        wanted: dict[tuple[str, int], tuple[PartitionState, int, int]] = {
            state.tp: (state, epoch, offset) for state, epoch, offset in requested
        }
        queued = False
        for topic in response.responses:
            for p in topic.partitions:
                entry = wanted.get((topic.topic, p.partition_index))
                if entry is None:
                    continue
                state, epoch, offset = entry
                with self._subs.lock:
                    if not self._subs.is_current(state, epoch) or state.fetch_offset != offset:
                        continue  # seeked or revoked since the request left
                    if p.error_code:
                        self._error(state, p.error_code)
                        continue
                    state.high_watermark = p.high_watermark
                    state.last_stable_offset = p.last_stable_offset
                    if p.records is None:  # null: nothing (Kafka's schema allows it)
                        continue
                    next_offset = next_fetch_offset(p.records, offset)
                    if next_offset == offset:
                        continue
                    aborted = (
                        [(a.producer_id, a.first_offset) for a in p.aborted_transactions]
                        if p.aborted_transactions
                        else None
                    )
                    completed = Completed(state, epoch, p.records, aborted, offset, next_offset)
                    self.completed.append(completed)
                    state.fetch_offset = next_offset
                    state.buffered_bytes += completed.size
                    queued = True
        if queued:
            self.data_event.set()

    def _error(self, state: PartitionState, code: int) -> None:
        """A partition error in a Fetch response (lock held)."""
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self._reset_policy == "none":
                # Park the partition (no refetch) and make poll raise until it is sought.
                log.info(
                    "offset %d out of range for %s and no reset policy",
                    state.fetch_offset,
                    state.tp,
                )
                self._subs.out_of_range[state.tp] = state.fetch_offset
                self.data_event.set()
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
            self.data_event.set()  # poll resolves the position
            return
        exc = error_for(code, f"Fetch {state.tp.topic}-{state.tp.partition}")
        if exc.retriable:
            self._metadata_wanted = True
        else:
            log.error("fetch error for %s: %s", state.tp, exc)

    # -- ListOffsets ---------------------------------------------------------------------------------

    async def list_offsets(
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
                        "isolation_level": 1 if self.read_committed else 0,
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

        await retry(
            attempt,
            backoff=cluster.backoff,
            timeout=self._request_timeout * 2,
            what="ListOffsets",
        )
        return result
