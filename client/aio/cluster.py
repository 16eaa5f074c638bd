"""Connections to the cluster, the metadata cache, and coordinator lookup.

``Cluster`` owns one connection per (broker, channel): the consumer keeps group traffic on its own
"coordinator" channel so that a long-polling Fetch never delays a Heartbeat (PROTOCOL.md section 1).
Metadata (brokers, partition leaders, controller) is refreshed on demand (an unknown topic, a
NOT_LEADER answer) and at least every ``metadata.max.age.ms``. Coordinators are found with
FindCoordinator and forgotten on NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE, so the next call
looks them up again.

Every retry of the client's calls follows ``backoff`` (``client/retry.py``: retry.backoff.ms
doubling up to retry.backoff.max.ms, with jitter), one per client.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterable
from typing import Any, TypeVar

import trio

from client.aio.connection import BrokerConnection, OpenStream
from client.aio.security import ClientSecurity
from client.config import ClientConfig
from client.errors import (
    BrokerConnectionError,
    CoordinatorNotAvailableError,
    IllegalStateError,
    KafkaClientError,
    LeaderNotAvailableError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    SaslAuthenticationFailedError,
    UnknownTopicOrPartitionError,
    UnsupportedSaslMechanismError,
    error_for,
)
from client.retry import Backoff, retry
from client.structs import TopicPartition
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

log = logging.getLogger("client.cluster")

T = TypeVar("T")

GROUP = 0
TRANSACTION = 1

# Errors after which the metadata is stale.
_METADATA_ERRORS = (NotLeaderOrFollowerError, UnknownTopicOrPartitionError, LeaderNotAvailableError)
_COORDINATOR_ERRORS = (NotCoordinatorError, CoordinatorNotAvailableError)


class Cluster:
    """Brokers, topics and coordinators as last seen, and the connections to them."""

    def __init__(self, config: ClientConfig, *, open_stream: OpenStream | None = None) -> None:
        self.config = config
        self._open_stream = open_stream  # None: TCP (trio.open_tcp_stream)
        self._nursery: trio.Nursery | None = None  # where connections run their readers
        self.bootstrap: tuple[tuple[str, int], ...] = config["bootstrap.servers"]
        self.client_id: str = config["client.id"]
        self.request_timeout_ms: int = config["request.timeout.ms"]
        self.security: ClientSecurity | None = None
        self.backoff = Backoff.from_config(config)  # every retry of this client's calls
        self.brokers: dict[int, tuple[str, int]] = {}
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.partition_leaders: dict[str, list[int]] = {}  # topic -> leader per partition
        # topic ids (Metadata v10+): the consumer group protocol's assignments name topics by id
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        self.topic_errors: dict[str, int] = {}
        self.internal_topics: set[str] = set()
        self.last_refresh: float = -1e9
        self._coordinators: dict[tuple[int, str], int] = {}  # (key_type, key) -> node id
        self._connections: dict[tuple[int, str], BrokerConnection] = {}
        self._connect_locks: dict[tuple[int, str], trio.Lock] = {}
        self._bootstrap_conn: BrokerConnection | None = None
        self._refresh_lock = trio.Lock()
        self._wanted_topics: set[str] = set()
        self.metadata_updated = trio.Event()  # replaced after each refresh
        self._closed = False

    def start(self, nursery: trio.Nursery) -> None:
        """Open for business: connections run their reader tasks in ``nursery`` (the engine's,
        entered by its ``async with``); the TLS context is built here, once."""
        self.security = ClientSecurity.from_config(self.config)
        self._nursery = nursery
        self._closed = False

    # -- connections -------------------------------------------------------------------------------

    async def connection(self, node_id: int, channel: str = "default") -> BrokerConnection:
        """A connected ``BrokerConnection`` to broker ``node_id``, opened on first use."""
        key = (node_id, channel)
        conn = self._connections.get(key)
        if conn is not None and not conn.closed:
            return conn
        lock = self._connect_locks.setdefault(key, trio.Lock())
        async with lock:
            conn = self._connections.get(key)
            if conn is not None and not conn.closed:
                return conn
            if self._closed:
                raise BrokerConnectionError("client is closed")
            address = self.brokers.get(node_id)
            if address is None:
                await self.refresh_metadata()
                address = self.brokers.get(node_id)
                if address is None:
                    raise BrokerConnectionError(f"broker {node_id} is not in the metadata")
            conn = await self._open(address, node_id)
            existing = self._connections.get(key)
            if existing is not None and not existing.closed:  # any_connection() got there first
                await conn.aclose()
                return existing
            self._connections[key] = conn  # before any await: nobody may slip in between
            if existing is not None:
                await existing.aclose()
            return conn

    def connection_nowait(self, node_id: int, channel: str = "default") -> BrokerConnection | None:
        conn = self._connections.get((node_id, channel))
        return conn if conn is not None and not conn.closed else None

    async def any_connection(self) -> BrokerConnection:
        """A connection to some broker: a known one first, else a bootstrap address."""
        for (_, channel), conn in list(self._connections.items()):
            if channel == "default" and not conn.closed:
                return conn
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        candidates = list(self.brokers.items()) or [(-1, a) for a in self.bootstrap]
        random.shuffle(candidates)
        errors = []
        for node_id, address in candidates:
            try:
                conn = await self._open(address, node_id)
            except (SaslAuthenticationFailedError, UnsupportedSaslMechanismError):
                raise  # refused credentials: another address or a retry will not help
            except KafkaClientError as exc:
                errors.append(str(exc))
                continue
            # Another task may have connected meanwhile: keep one connection, close the other
            # (a connection dropped without closing leaks its socket).
            existing = (
                self._connections.get((node_id, "default")) if node_id >= 0
                else self._bootstrap_conn
            )
            if existing is not None and not existing.closed:
                await conn.aclose()
                return existing
            if node_id >= 0:  # before any await: nobody may slip in between
                self._connections[(node_id, "default")] = conn
            else:
                self._bootstrap_conn = conn
            if existing is not None:
                await existing.aclose()
            return conn
        raise BrokerConnectionError("no broker reachable: " + "; ".join(errors))

    async def _open(self, address: tuple[str, int], node_id: int) -> BrokerConnection:
        nursery = self._nursery
        if nursery is None:
            raise IllegalStateError("the client is not started: use it in `async with`")
        conn = BrokerConnection(
            address[0],
            address[1],
            node_id=node_id,
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            security=self.security,
            open_stream=self._open_stream,
        )
        timeout = self.config["socket.connection.setup.timeout.ms"] / 1000
        try:
            await conn.connect(nursery, timeout)
            if self._closed:  # aclose() ran while this connected: nobody would close it
                raise BrokerConnectionError("client is closed")
        except BaseException:
            await conn.aclose()
            raise
        log.debug("connected to %s", conn)
        return conn

    async def aclose(self) -> None:
        self._closed = True
        conns = list(self._connections.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._connections.clear()
        for conn in conns:
            await conn.aclose()

    # -- metadata ----------------------------------------------------------------------------------

    def partition_count(self, topic: str) -> int | None:
        leaders = self.partition_leaders.get(topic)
        return len(leaders) if leaders else None

    def leader_for(self, tp: TopicPartition) -> int | None:
        leaders = self.partition_leaders.get(tp.topic)
        if leaders is None or tp.partition >= len(leaders):
            return None
        leader = leaders[tp.partition]
        return leader if leader >= 0 else None

    def metadata_is_stale(self) -> bool:
        return trio.current_time() - self.last_refresh > self.config["metadata.max.age.ms"] / 1000

    async def refresh_metadata(
        self, topics: Iterable[str] | None = None, *, allow_auto_create: bool = False
    ) -> Any:
        """Fetch metadata for ``topics`` (plus every topic asked for before; None: all topics)."""
        if topics is not None:
            self._wanted_topics.update(topics)
        async with self._refresh_lock:
            conn = await self.any_connection()
            names = None if topics is None else sorted(self._wanted_topics)
            response = await conn.request(
                ApiKey.METADATA,
                {
                    "topics": None if names is None else [{"name": n} for n in names],
                    "allow_auto_topic_creation": allow_auto_create,
                },
            )
            self._apply_metadata(response)
            return response

    def _apply_metadata(self, response: Any) -> None:
        self.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        self.cluster_id = response.cluster_id
        self.controller_id = response.controller_id
        for topic in response.topics:
            if topic.error_code:
                self.topic_errors[topic.name] = topic.error_code
                self.partition_leaders.pop(topic.name, None)
                continue
            self.topic_errors.pop(topic.name, None)
            leaders = [-1] * len(topic.partitions)
            for p in topic.partitions:
                if 0 <= p.partition_index < len(leaders):
                    leaders[p.partition_index] = p.leader_id if not p.error_code else -1
            self.partition_leaders[topic.name] = leaders
            topic_id = getattr(topic, "topic_id", None)
            if topic_id is not None and topic_id.int:  # Metadata v10+ (KIP-516)
                self.topic_ids[topic.name] = topic_id
                self.topic_names[topic_id] = topic.name
            if topic.is_internal:
                self.internal_topics.add(topic.name)
        self.last_refresh = trio.current_time()
        event, self.metadata_updated = self.metadata_updated, trio.Event()
        event.set()

    def forget_topic(self, topic: str) -> None:
        self._wanted_topics.discard(topic)
        self.partition_leaders.pop(topic, None)

    async def wait_for_topic(self, topic: str, timeout: float, *, allow_auto_create: bool) -> int:
        """The partition count of ``topic``, refreshing metadata until it is known."""
        count = self.partition_count(topic)
        if count is not None:
            return count

        async def attempt() -> int:
            await self.refresh_metadata([topic], allow_auto_create=allow_auto_create)
            count = self.partition_count(topic)
            if count is not None:
                return count
            # Not there yet (being created, or no leader yet: retriable), or refused.
            code = self.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            raise error_for(code, f"topic {topic}")

        return await retry(
            attempt,
            backoff=self.backoff,
            timeout=timeout,
            what=f"metadata of {topic}",
            timeout_message=f"Topic {topic} not present in metadata after {timeout * 1000:.0f} ms.",
        )

    # -- coordinators ------------------------------------------------------------------------------

    async def coordinator(self, key_type: int, key: str) -> int:
        """Node id of the group (key_type 0) or transaction (1) coordinator of ``key``."""
        node = self._coordinators.get((key_type, key))
        if node is not None:
            return node
        conn = await self.any_connection()
        response = await conn.request(ApiKey.FIND_COORDINATOR, {"key": key, "key_type": key_type})
        if response.error_code:
            raise error_for(response.error_code, response.error_message or f"coordinator of {key}")
        self.brokers.setdefault(response.node_id, (response.host, response.port))
        self._coordinators[(key_type, key)] = response.node_id
        return response.node_id

    def forget_coordinator(self, key_type: int, key: str) -> None:
        self._coordinators.pop((key_type, key), None)

    def coordinator_error(self, key_type: int, key: str, code: int, message: str) -> Exception:
        """The exception for error ``code`` of a coordinator request; a coordinator error
        (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, ...) also makes the coordinator be looked up
        again next time."""
        exc = error_for(code, message)
        if is_coordinator_error(exc):
            self.forget_coordinator(key_type, key)
        return exc

    async def coordinator_request(
        self,
        key_type: int,
        key: str,
        api_key: int,
        body: dict,
        *,
        channel: str = "default",
        extra_timeout: float = 0.0,
        max_version: int | None = None,
    ) -> Any:
        """Send ``body`` to the coordinator of ``key`` (no retry); coordinator errors found in the
        response's top-level ``error_code`` make the coordinator be looked up again next time.
        ``max_version`` caps the version (the transaction version decides EndTxn's)."""
        node = await self.coordinator(key_type, key)
        try:
            conn = await self.connection(node, channel)
            version = conn.version(api_key)
            if max_version is not None:
                version = min(version, max_version)
            response = await conn.request(api_key, body, version=version,
                                          extra_timeout=extra_timeout)
        except BrokerConnectionError:
            self.forget_coordinator(key_type, key)
            raise
        code = getattr(response, "error_code", 0)
        if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            self.forget_coordinator(key_type, key)
        return response


def raise_for_code(code: int, message: str = "") -> None:
    if code:
        raise error_for(code, message)


def is_metadata_error(exc: BaseException) -> bool:
    return isinstance(exc, _METADATA_ERRORS)


def is_coordinator_error(exc: BaseException) -> bool:
    return isinstance(exc, _COORDINATOR_ERRORS)
