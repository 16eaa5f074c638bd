"""A share consumer (KIP-932, Kafka's KafkaShareConsumer) on trio.

    async with AsyncShareConsumer({"bootstrap.servers": ..., "group.id": "workers"}) as c:
        c.subscribe(["jobs"])
        while True:
            for record in await c.poll(1.0):
                handle(record)               # implicit mode: accepted at the next poll
                # explicit mode: c.acknowledge(record, AcknowledgeType.RELEASE) ...
            await c.commit_sync()            # optional: acknowledgements now, with results

Membership is ShareGroupHeartbeat (the broker assigns partitions; members share them), records
come from ShareFetch in a share session per broker, acknowledgements ride on the next ShareFetch
or go in a ShareAcknowledge (``commit_sync``/``commit_async``). ``share.acknowledgement.mode``:
``implicit`` (default: every record a poll returned is accepted at the next poll or commit) or
``explicit`` (each record must be acknowledged before the next poll). Each record carries its
delivery count (``delivery_counts[(topic, partition, offset)]``). Offsets inside acquired ranges
that hold no record (transaction markers, compacted records) are acknowledged as gaps.

Besides Kafka's consumer keys (``consumer_config``), one share key: ``share.acknowledgement.mode``.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from client._loop import require_trio
from client.aio._tasks import EngineTasks
from client.aio.cluster import Cluster
from client.config import ConfigError, consumer_config
from client.errors import IllegalStateError, KafkaClientError, error_for
from client.fetch_decoder import decode_fetched
from client.structs import ConsumerRecord, TopicPartition
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

log = logging.getLogger("minibroker.client.share")

GROUP_KEY = 0
MODES = ("implicit", "explicit")


class AcknowledgeType(enum.IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


@dataclass
class _Delivered:
    """The acquired ranges of one partition from the last poll, and the types given so far."""

    ranges: list[tuple[int, int]]
    types: dict[int, int] = field(default_factory=dict)  # offset -> type (delivered records)


class AsyncShareConsumer:
    def __init__(self, config: Mapping[str, Any]) -> None:
        conf = dict(config)
        mode = str(conf.pop("share.acknowledgement.mode", "implicit")).lower()
        if mode not in MODES:
            raise ConfigError(f"Invalid value {mode!r} for configuration "
                              f"share.acknowledgement.mode: must be implicit or explicit")
        cfg = consumer_config(conf)
        if cfg["group.id"] is None:
            raise ConfigError("a share consumer needs group.id")
        self.config = cfg
        self.mode = mode
        self.group_id: str = cfg["group.id"]
        self.member_id = str(uuid.uuid4())
        self.member_epoch = 0
        self._max_records: int = cfg["max.poll.records"]
        self._max_wait_ms: int = min(cfg["fetch.max.wait.ms"], 500)
        self._cluster = Cluster(cfg, open_stream=None)
        self._tasks = EngineTasks("AsyncShareConsumer")
        self._topics: list[str] = []
        self._names: dict[uuid.UUID, str] = {}
        self._ids: dict[str, uuid.UUID] = {}
        self.assignment: set[tuple[str, int]] = set()
        self._session_epochs: dict[int, int] = {}  # node -> next share session epoch
        self._delivered: dict[tuple[str, int], _Delivered] = {}
        self.delivery_counts: dict[tuple[str, int, int], int] = {}
        self._heartbeat_interval = 5.0
        self._assigned = trio.Event()
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> AsyncShareConsumer:
        require_trio("AsyncShareConsumer", "ShareConsumer")
        nursery = await self._tasks.open()
        self._cluster.start(nursery)
        self._nursery = nursery
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await self.close()
        finally:
            self._tasks.cancel()
            await self._cluster.aclose()
            await self._tasks.aclose()

    def subscribe(self, topics: Sequence[str] | str) -> None:
        self._topics = [topics] if isinstance(topics, str) else sorted(set(topics))
        self._nursery.start_soon(self._heartbeat_loop)

    # -- membership --------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            try:
                await self._heartbeat()
            except KafkaClientError as exc:
                log.info("share group heartbeat failed: %s", exc)
                await trio.sleep(0.5)
                continue
            await trio.sleep(self._heartbeat_interval)

    async def _heartbeat(self, leave: bool = False) -> None:
        body = {"group_id": self.group_id, "member_id": self.member_id,
                "member_epoch": -1 if leave else self.member_epoch,
                "subscribed_topic_names": self._topics if self.member_epoch == 0 else None}
        response = await self._cluster.coordinator_request(
            GROUP_KEY, self.group_id, ApiKey.SHARE_GROUP_HEARTBEAT, body, channel="coordinator")
        code = response.error_code
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH):
            self.member_epoch = 0  # rejoin with the same member id
            return
        if code:
            raise error_for(code, response.error_message or "ShareGroupHeartbeat")
        if leave:
            return
        self.member_epoch = response.member_epoch
        self._heartbeat_interval = max(response.heartbeat_interval_ms, 100) / 1000
        if response.assignment is not None:
            ids = [tp.topic_id for tp in response.assignment.topic_partitions]
            await self._resolve(ids)
            self.assignment = {(self._names[tp.topic_id], p)
                               for tp in response.assignment.topic_partitions
                               if tp.topic_id in self._names for p in tp.partitions}
            self._assigned.set()

    async def _resolve(self, topic_ids: Iterable[uuid.UUID]) -> None:
        """Topic names of ``topic_ids`` (Metadata v10+ carries topic ids)."""
        if all(t in self._names for t in topic_ids):
            return
        conn = await self._cluster.any_connection()
        response = await conn.request(ApiKey.METADATA, {
            "topics": [{"name": t} for t in self._topics], "allow_auto_topic_creation": False},
            version=min(conn.version(ApiKey.METADATA), 12))
        self._cluster._apply_metadata(response)
        for topic in response.topics:
            if not topic.error_code:
                self._names[topic.topic_id] = topic.name
                self._ids[topic.name] = topic.topic_id

    # -- acknowledgement ---------------------------------------------------------------------

    def acknowledge(self, record: ConsumerRecord,
                    type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        delivered = self._delivered.get((record.topic, record.partition))
        if delivered is None or not any(a <= record.offset <= b for a, b in delivered.ranges):
            raise IllegalStateError(f"record {record.topic}-{record.partition}@{record.offset} "
                                    "was not delivered by the last poll")
        delivered.types[record.offset] = int(type)

    def _pending_acks(self) -> dict[tuple[str, int], list[dict]]:
        """The acknowledgement batches of the last poll's records, which are then done."""
        out: dict[tuple[str, int], list[dict]] = {}
        for tp, delivered in self._delivered.items():
            batches = []
            for first, last in delivered.ranges:
                types = []
                for offset in range(first, last + 1):
                    given = delivered.types.get(offset)
                    if given is None:
                        if (tp[0], tp[1], offset) in self.delivery_counts:  # a record
                            if self.mode == "explicit":
                                raise IllegalStateError(
                                    f"record {tp[0]}-{tp[1]}@{offset} was not acknowledged")
                            given = AcknowledgeType.ACCEPT
                        else:
                            given = AcknowledgeType.GAP
                    types.append(int(given))
                if len(set(types)) == 1:
                    types = types[:1]
                batches.append({"first_offset": first, "last_offset": last,
                                "acknowledge_types": types})
            out[tp] = batches
        self._delivered = {}
        self.delivery_counts = {}
        return out

    def _topics_body(self, acks: dict[tuple[str, int], list[dict]],
                     fetch: Iterable[tuple[str, int]]) -> list[dict]:
        by_topic: dict[uuid.UUID, dict[int, list[dict]]] = {}
        for (topic, p), batches in acks.items():
            by_topic.setdefault(self._ids[topic], {})[p] = batches
        for topic, p in fetch:
            if topic in self._ids:
                by_topic.setdefault(self._ids[topic], {}).setdefault(p, [])
        return [{"topic_id": tid, "partitions": [
            {"partition_index": p, "acknowledgement_batches": b} for p, b in parts.items()]}
            for tid, parts in by_topic.items()]

    async def commit_sync(self) -> dict[tuple[str, int], Exception | None]:
        """Send the acknowledgements now (ShareAcknowledge); the outcome per partition."""
        acks = self._pending_acks()
        if not acks:
            return {}
        return await self._send_acks(acks, close=False)

    async def _send_acks(self, acks: dict[tuple[str, int], list[dict]], close: bool
                         ) -> dict[tuple[str, int], Exception | None]:
        node = self._leader()
        epoch = self._session_epochs.get(node, 0)
        if epoch == 0:  # no session yet: acknowledgements cannot open one
            return {tp: IllegalStateError("no share session") for tp in acks}
        conn = await self._cluster.connection(node)
        response = await conn.request(ApiKey.SHARE_ACKNOWLEDGE, {
            "group_id": self.group_id, "member_id": self.member_id,
            "share_session_epoch": -1 if close else epoch,
            "topics": self._topics_body(acks, ())})
        if response.error_code:
            self._session_epochs[node] = 0
            exc = error_for(response.error_code, response.error_message or "ShareAcknowledge")
            return {tp: exc for tp in acks}
        self._session_epochs[node] = 0 if close else _next(epoch)
        out: dict[tuple[str, int], Exception | None] = {}
        for topic in response.responses:
            name = self._names.get(topic.topic_id, "?")
            for p in topic.partitions:
                out[(name, p.partition_index)] = (error_for(p.error_code, "acknowledge")
                                                  if p.error_code else None)
        return out

    # -- polling -----------------------------------------------------------------------------

    def _leader(self) -> int:
        for tp in sorted(self.assignment):
            leader = self._cluster.leader_for(TopicPartition(*tp))
            if leader is not None:
                return leader
        return next(iter(self._cluster.brokers), 0)

    async def poll(self, timeout: float = 0.0) -> list[ConsumerRecord]:
        """Records acquired for this member, waiting up to ``timeout`` seconds for some; the
        previous poll's records are acknowledged with this one's fetch."""
        deadline = trio.current_time() + timeout
        acks = self._pending_acks()
        while True:
            if not self.assignment:
                with trio.move_on_at(deadline):
                    await self._assigned.wait()
                if not self.assignment:
                    return []
            left_ms = max(0, int((deadline - trio.current_time()) * 1000))
            records = await self._fetch(acks, min(left_ms, self._max_wait_ms))
            acks = {}
            if records or trio.current_time() >= deadline:
                return records

    async def _fetch(self, acks: dict[tuple[str, int], list[dict]], wait_ms: int
                     ) -> list[ConsumerRecord]:
        node = self._leader()
        epoch = self._session_epochs.get(node, 0)
        if epoch == 0 and acks:  # acknowledgements cannot ride on a session's first fetch
            acks = {}
        conn = await self._cluster.connection(node)
        response = await conn.request(ApiKey.SHARE_FETCH, {
            "group_id": self.group_id, "member_id": self.member_id,
            "share_session_epoch": epoch, "max_wait_ms": wait_ms, "min_bytes": 1,
            "max_bytes": self.config["fetch.max.bytes"], "max_records": self._max_records,
            "batch_size": self._max_records,
            "topics": self._topics_body(acks, sorted(self.assignment))},
            extra_timeout=wait_ms / 1000)
        if response.error_code in (ErrorCode.SHARE_SESSION_NOT_FOUND,
                                   ErrorCode.INVALID_SHARE_SESSION_EPOCH):
            self._session_epochs[node] = 0
            return []
        if response.error_code:
            raise error_for(response.error_code, response.error_message or "ShareFetch")
        self._session_epochs[node] = _next(epoch)
        out: list[ConsumerRecord] = []
        for topic in response.responses:
            name = self._names.get(topic.topic_id)
            if name is None:
                continue
            for p in topic.partitions:
                if p.error_code or not p.acquired_records:
                    continue
                ranges = [(a.first_offset, a.last_offset) for a in p.acquired_records]
                counts = [(a.first_offset, a.last_offset, a.delivery_count)
                          for a in p.acquired_records]
                records, _ = decode_fetched(p.records or b"", name, p.partition_index,
                                            ranges[0][0], None, False)
                for record in records:
                    for first, last, count in counts:
                        if first <= record.offset <= last:
                            out.append(record)
                            self.delivery_counts[(name, p.partition_index, record.offset)] = count
                            break
                self._delivered[(name, p.partition_index)] = _Delivered(ranges)
        return out

    async def close(self) -> None:
        """Acknowledge what the last poll returned (implicit mode), close the share session
        (what is still acquired is released) and leave the group."""
        if self._closed or not self._tasks.running:
            return
        self._closed = True
        with trio.move_on_after(self.config["request.timeout.ms"] / 1000):
            try:
                acks = self._pending_acks() if self.mode == "implicit" else {}
                if self._session_epochs.get(self._leader(), 0):
                    await self._send_acks(acks, close=True)
                if self.member_epoch:
                    await self._heartbeat(leave=True)
            except (KafkaClientError, IllegalStateError) as exc:
                log.info("share consumer close: %s", exc)


def _next(epoch: int) -> int:
    return 1 if epoch >= (1 << 31) - 1 else epoch + 1
