"""The trio admin client: topics, groups, committed offsets, and ending handed-over transactions.

Topic creation goes to the controller named in Metadata; group calls go to each group's
coordinator (FindCoordinator); ListGroups and ListTransactions ask every broker;
DescribeTransactions asks the transactional id's coordinator. (ListTransactions and
DescribeTransactions are admin APIs of later Kafka versions, KIP-664; a broker that does not list
them in ApiVersions answers ``UnsupportedVersionError`` here.)

``end_transaction(handle, commit)`` finishes a transaction that a producer left open with
``transaction_handle()`` (the Spark sink's pattern). EndTxn carries (transactional_id, producer_id,
producer_epoch), so any client may send it. Tolerance rules, as a Kafka coordinator applies them:

- EndTxn for a transaction that already ended *the same way* succeeds again (a retried commit);
- ending it the other way (abort after commit, or commit after abort) is ``InvalidTxnStateError``;
- if the transactional id was taken over (a newer ``init_transactions``) or the coordinator
  aborted the transaction at its timeout, the epoch is stale: ``ProducerFencedError``. The
  transaction was aborted then, so for ``commit=False`` this outcome is what was asked for, and
  ``end_transaction`` returns normally;
- a handle with ``empty=True`` names a transaction that never reached the coordinator: nothing
  to do.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import trio

from client._loop import require_trio
from client.aio._tasks import EngineTasks
from client.aio.cluster import GROUP, TRANSACTION, Cluster, is_coordinator_error
from client.clock import Clock, WallClock
from client.config import ClientConfig, admin_config
from client.errors import (
    BrokerResponseError,
    ConcurrentTransactionsError,
    ConfigError,
    KafkaClientError,
    KafkaTimeoutError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for,
)
from client.group_protocol import decode_assignment_untrusted
from client.structs import (
    ACL_OPERATIONS,
    ACL_PATTERN_TYPES,
    ACL_PERMISSIONS,
    ACL_RESOURCE_TYPES,
    ALTER_OPS,
    CONFIG_SOURCES,
    AclBinding,
    AclBindingFilter,
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigSynonym,
    GroupDescription,
    GroupListing,
    HangingTransaction,
    LogDirDescription,
    MemberDescription,
    NewTopic,
    OffsetAndMetadata,
    PartitionInfo,
    ProducerState,
    TopicDescription,
    TopicPartition,
    TransactionDescription,
    TransactionHandle,
    TransactionListing,
)
from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError, ErrorCode

SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # Kafka's codes

log = logging.getLogger("client.admin")


class AsyncAdmin:
    """Kafka admin operations on trio (``async with AsyncAdmin(conf) as admin``)."""

    def __init__(
        self, config: Mapping[str, Any] | ClientConfig, *, clock: Clock | None = None
    ) -> None:
        self.config = config if isinstance(config, ClientConfig) else admin_config(config)
        self.clock: Clock = clock or WallClock()
        self._timeout = self.config["request.timeout.ms"] / 1000
        self._cluster = Cluster(self.config)
        self._tasks = EngineTasks("AsyncAdmin")

    async def __aenter__(self) -> AsyncAdmin:
        require_trio("AsyncAdmin", "Admin")
        self._cluster.start(await self._tasks.open())
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self._tasks.cancel()
        await self._cluster.aclose()
        await self._tasks.aclose()

    async def close(self) -> None:
        """Nothing to flush; the ``async with`` exit closes the connections."""

    # -- topics ----------------------------------------------------------------------------------

    async def create_topics(
        self,
        topics: Sequence[NewTopic],
        validate_only: bool = False,
        timeout_ms: int = 30_000,
    ) -> dict[str, BrokerResponseError | None]:
        """Create topics; per topic None (created) or the broker's error."""
        cluster = self._cluster
        await cluster.refresh_metadata([])
        conn = (
            await cluster.connection(cluster.controller_id)
            if cluster.controller_id >= 0
            else await cluster.any_connection()
        )
        response = await conn.request(
            ApiKey.CREATE_TOPICS,
            {
                "topics": [
                    {
                        "name": t.name,
                        "num_partitions": t.num_partitions,
                        "replication_factor": t.replication_factor,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (t.configs or {}).items()],
                    }
                    for t in topics
                ],
                "timeout_ms": timeout_ms,
                "validate_only": validate_only,
            },
            extra_timeout=timeout_ms / 1000,
        )
        return {
            t.name: error_for(t.error_code, t.error_message or t.name) if t.error_code else None
            for t in response.topics
        }

    async def delete_topics(
        self, names: Iterable[str], timeout_ms: int = 30_000
    ) -> dict[str, BrokerResponseError | None]:
        cluster = self._cluster
        await cluster.refresh_metadata([])
        conn = (
            await cluster.connection(cluster.controller_id)
            if cluster.controller_id >= 0
            else await cluster.any_connection()
        )
        names = list(names)
        response = await conn.request(
            ApiKey.DELETE_TOPICS,
            {"topic_names": names, "timeout_ms": timeout_ms},
            extra_timeout=timeout_ms / 1000,
        )
        for name in names:
            cluster.forget_topic(name)
        return {
            r.name: error_for(r.error_code, r.name) if r.error_code else None
            for r in response.responses
        }

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        response = await self._cluster.refresh_metadata(None)
        return sorted(
            t.name
            for t in response.topics
            if not t.error_code and (include_internal or not t.is_internal)
        )

    async def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        """Partitions, leaders and replicas; an unknown topic raises its error."""
        if names is None:
            response = await self._cluster.refresh_metadata(None)
        else:
            names = list(names)
            conn = await self._cluster.any_connection()
            response = await conn.request(
                ApiKey.METADATA,
                {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": False},
            )
        result = []
        for topic in response.topics:
            if topic.error_code:
                raise error_for(topic.error_code, f"topic {topic.name}")
            partitions = tuple(
                PartitionInfo(
                    p.partition_index,
                    p.leader_id,
                    tuple(p.replica_nodes),
                    tuple(p.isr_nodes),
                    p.error_code,
                )
                for p in sorted(topic.partitions, key=lambda p: p.partition_index)
            )
            result.append(TopicDescription(topic.name, partitions, topic.is_internal))
        return sorted(result)

    async def describe_cluster(self) -> dict[str, Any]:
        """Cluster id, controller and brokers: DescribeCluster where the broker has it, else
        Metadata."""
        conn = await self._cluster.any_connection()
        if ApiKey.DESCRIBE_CLUSTER not in conn.api_versions:
            response = await self._cluster.refresh_metadata([])
            brokers = [(b.node_id, b.host, b.port) for b in response.brokers]
        else:
            response = await conn.request(ApiKey.DESCRIBE_CLUSTER, {
                "include_cluster_authorized_operations": False, "endpoint_type": 1,
                "include_fenced_brokers": False,
            })
            if response.error_code:
                raise error_for(response.error_code, response.error_message or "DescribeCluster")
            brokers = [(b.broker_id, b.host, b.port) for b in response.brokers]
        return {
            "cluster_id": response.cluster_id,
            "controller_id": response.controller_id,
            "brokers": brokers,
        }

    async def _leader(self, topic: str, partition: int) -> int:
        cluster = self._cluster
        tp = TopicPartition(topic, partition)
        leader = cluster.leader_for(tp)
        if leader is None:
            await cluster.refresh_metadata([topic])
            leader = cluster.leader_for(tp)
        if leader is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} has no leader")
        return leader

    # -- configs ----------------------------------------------------------------------------------

    async def _resource_connection(self, resource: ConfigResource) -> Any:
        """Broker resources go to that broker; topic resources to any broker."""
        cluster = self._cluster
        if resource.type == "broker" and resource.name:
            await cluster.refresh_metadata([])
            return await cluster.connection(int(resource.name))
        return await cluster.any_connection()

    async def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        include_synonyms: bool = False,
        include_documentation: bool = False,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Every config of each resource (topic or broker) with its value and source; raises the
        first resource's error (``UnknownTopicOrPartitionError`` ...)."""
        result = {}
        for resource in resources:
            conn = await self._resource_connection(resource)
            response = await conn.request(ApiKey.DESCRIBE_CONFIGS, {
                "resources": [{"resource_type": resource.type_code,
                               "resource_name": resource.name, "configuration_keys": None}],
                "include_synonyms": include_synonyms,
                "include_documentation": include_documentation,
            })
            (r,) = response.results
            if r.error_code:
                raise error_for(r.error_code, r.error_message or f"{resource.type} {resource.name}")
            entries = {}
            for c in r.configs:
                source = getattr(c, "config_source", None)
                if source is None:  # v0: only is_default
                    source = 5 if c.is_default else (1 if resource.type == "topic" else 4)
                entries[c.name] = ConfigEntry(
                    c.name, c.value, CONFIG_SOURCES.get(source, str(source)), c.read_only,
                    c.is_sensitive,
                    tuple(ConfigSynonym(s.name, s.value, CONFIG_SOURCES.get(s.source, str(s.source)))
                          for s in getattr(c, "synonyms", None) or ()),
                    getattr(c, "documentation", None),
                )
            result[resource] = entries
        return result

    async def _alter(self, api_key: ApiKey, resource: ConfigResource, configs: list[dict],
                     validate_only: bool) -> BrokerResponseError | None:
        conn = await self._resource_connection(resource)
        response = await conn.request(api_key, {
            "resources": [{"resource_type": resource.type_code, "resource_name": resource.name,
                           "configs": configs}],
            "validate_only": validate_only,
        })
        (r,) = response.responses
        if r.error_code:
            return error_for(r.error_code, r.error_message or f"{resource.type} {resource.name}")
        return None

    async def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Sequence[AlterConfigOp]],
        validate_only: bool = False,
    ) -> dict[ConfigResource, BrokerResponseError | None]:
        """Set, delete, append to or subtract from configs; per resource None or its error."""
        result = {}
        for resource, ops in changes.items():
            configs = [{"name": op.name, "config_operation": ALTER_OPS[op.op],
                        "value": op.value} for op in ops]
            result[resource] = await self._alter(
                ApiKey.INCREMENTAL_ALTER_CONFIGS, resource, configs, validate_only
            )
        return result

    async def alter_configs(
        self, changes: Mapping[ConfigResource, Mapping[str, str]], validate_only: bool = False
    ) -> dict[ConfigResource, BrokerResponseError | None]:
        """The legacy AlterConfigs: each resource's overrides become exactly ``changes[r]``."""
        result = {}
        for resource, values in changes.items():
            configs = [{"name": k, "value": v} for k, v in values.items()]
            result[resource] = await self._alter(
                ApiKey.ALTER_CONFIGS, resource, configs, validate_only
            )
        return result

    # -- partitions and records ---------------------------------------------------------------

    async def create_partitions(
        self, counts: Mapping[str, int], validate_only: bool = False, timeout_ms: int = 30_000
    ) -> dict[str, BrokerResponseError | None]:
        """Grow topics to ``counts[topic]`` partitions; per topic None or its error."""
        cluster = self._cluster
        await cluster.refresh_metadata([])
        conn = (
            await cluster.connection(cluster.controller_id)
            if cluster.controller_id >= 0
            else await cluster.any_connection()
        )
        response = await conn.request(
            ApiKey.CREATE_PARTITIONS,
            {"topics": [{"name": t, "count": n, "assignments": None} for t, n in counts.items()],
             "timeout_ms": timeout_ms, "validate_only": validate_only},
            extra_timeout=timeout_ms / 1000,
        )
        for name in counts:
            cluster.forget_topic(name)
        return {
            r.name: error_for(r.error_code, r.error_message or r.name) if r.error_code else None
            for r in response.results
        }

    async def delete_records(
        self, offsets: Mapping[tuple[str, int], int], timeout_ms: int = 30_000
    ) -> dict[TopicPartition, int]:
        """Delete everything before ``offsets[partition]`` (-1: the high watermark); returns the
        new log start offset of each partition. Raises the first partition's error."""
        cluster = self._cluster
        by_leader: dict[int, dict[str, list[tuple[int, int]]]] = {}
        for (topic, partition), offset in offsets.items():
            leader = await self._leader(topic, partition)
            by_leader.setdefault(leader, {}).setdefault(topic, []).append((partition, offset))
        result = {}
        for leader, topics in by_leader.items():
            conn = await cluster.connection(leader)
            response = await conn.request(ApiKey.DELETE_RECORDS, {
                "topics": [{"name": t, "partitions": [
                    {"partition_index": p, "offset": o} for p, o in parts]}
                    for t, parts in topics.items()],
                "timeout_ms": timeout_ms,
            }, extra_timeout=timeout_ms / 1000)
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise error_for(p.error_code, f"DeleteRecords {t.name}-{p.partition_index}")
                    result[TopicPartition(t.name, p.partition_index)] = p.low_watermark
        return result

    async def describe_log_dirs(
        self, topics: Mapping[str, Sequence[int]] | None = None
    ) -> dict[int, list[LogDirDescription]]:
        """Per broker its log directories with the size of each partition they hold."""
        cluster = self._cluster
        await cluster.refresh_metadata([])
        wanted = None if topics is None else [
            {"topic": t, "partitions": list(ps)} for t, ps in topics.items()]
        result = {}
        for node in sorted(cluster.brokers):
            conn = await cluster.connection(node)
            response = await conn.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": wanted})
            result[node] = [
                LogDirDescription(
                    d.log_dir, d.error_code,
                    {TopicPartition(t.name, p.partition_index): p.partition_size
                     for t in d.topics for p in t.partitions},
                    getattr(d, "total_bytes", -1), getattr(d, "usable_bytes", -1),
                )
                for d in response.results
            ]
        return result

    async def describe_producers(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, list[ProducerState]]:
        """The active (idempotent or transactional) producers of each partition, from its
        leader. Raises the first partition's error."""
        cluster = self._cluster
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, partition in partitions:
            leader = await self._leader(topic, partition)
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
        result = {}
        for leader, topics in by_leader.items():
            conn = await cluster.connection(leader)
            response = await conn.request(ApiKey.DESCRIBE_PRODUCERS, {"topics": [
                {"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise error_for(p.error_code,
                                        p.error_message or f"{t.name}-{p.partition_index}")
                    result[TopicPartition(t.name, p.partition_index)] = [
                        ProducerState(a.producer_id, a.producer_epoch, a.last_sequence,
                                      a.last_timestamp, a.coordinator_epoch,
                                      a.current_txn_start_offset)
                        for a in p.active_producers
                    ]
        return result

    # -- groups ----------------------------------------------------------------------------------

    async def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> list[GroupListing]:
        """Every group known to any broker, optionally only those in ``states`` (``Stable``,
        ``Empty``, ... case-insensitive) or of ``types`` (``classic``, ``consumer``). The broker
        filters (ListGroups v4+/v5+); an older one is filtered here where it says the state."""
        cluster = self._cluster
        await cluster.refresh_metadata([])
        states = [s for s in states]
        types = [t for t in types]
        groups: dict[str, GroupListing] = {}
        for node in sorted(cluster.brokers):
            conn = await cluster.connection(node)
            response = await conn.request(
                ApiKey.LIST_GROUPS, {"states_filter": states, "types_filter": types}
            )
            if response.error_code:
                raise error_for(response.error_code, f"ListGroups on broker {node}")
            for g in response.groups:
                listing = GroupListing(g.group_id, g.protocol_type,
                                       getattr(g, "group_state", ""), getattr(g, "group_type", ""))
                if states and listing.state and listing.state.lower() not in {
                        s.lower() for s in states}:
                    continue
                groups[g.group_id] = listing
        return sorted(groups.values())

    async def delete_groups(
        self, group_ids: Iterable[str]
    ) -> dict[str, BrokerResponseError | None]:
        """Delete groups without members, with their committed offsets; per group None or its
        error (``NonEmptyGroupError``, ``GroupIdNotFoundError`` ...)."""
        result: dict[str, BrokerResponseError | None] = {}
        for group_id in group_ids:

            async def attempt(group_id: str = group_id) -> int:
                response = await self._cluster.coordinator_request(
                    GROUP, group_id, ApiKey.DELETE_GROUPS, {"groups_names": [group_id]}
                )
                (r,) = response.results
                if r.error_code and is_coordinator_error(error_for(r.error_code)):
                    raise self._cluster.coordinator_error(
                        GROUP, group_id, r.error_code, f"group {group_id}"
                    )
                return r.error_code

            code = await self._cluster.retry_call(
                attempt, timeout=self._timeout, what="DeleteGroups"
            )
            result[group_id] = error_for(code, f"group {group_id}") if code else None
        return result

    async def delete_group_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, BrokerResponseError | None]:
        """OffsetDelete: forget the group's committed offsets of ``partitions`` (refused with
        ``GroupSubscribedToTopicError`` for topics its members subscribe to). Raises a group-level
        error."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)

        async def attempt() -> Any:
            response = await self._cluster.coordinator_request(
                GROUP, group_id, ApiKey.OFFSET_DELETE, {"group_id": group_id, "topics": [
                    {"name": t, "partitions": [{"partition_index": p} for p in ps]}
                    for t, ps in by_topic.items()]},
            )
            if response.error_code:
                raise self._cluster.coordinator_error(
                    GROUP, group_id, response.error_code, f"OffsetDelete {group_id}"
                )
            return response

        response = await self._cluster.retry_call(
            attempt, timeout=self._timeout, what="OffsetDelete"
        )
        return {
            TopicPartition(t.name, p.partition_index):
                error_for(p.error_code, f"{t.name}-{p.partition_index}") if p.error_code else None
            for t in response.topics for p in t.partitions
        }

    async def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        result = []
        for group_id in group_ids:

            async def attempt(group_id: str = group_id) -> Any:
                response = await self._cluster.coordinator_request(
                    GROUP, group_id, ApiKey.DESCRIBE_GROUPS, {"groups": [group_id]}
                )
                (group,) = response.groups
                if group.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                    return group  # DescribeGroups v6+: no such group (older versions: Dead)
                if group.error_code:
                    exc = self._cluster.coordinator_error(
                        GROUP, group_id, group.error_code, f"group {group_id}"
                    )
                    raise exc
                return group

            group = await self._cluster.retry_call(
                attempt, timeout=self._timeout, what="DescribeGroups"
            )
            members = []
            for m in group.members:
                assignment: tuple[TopicPartition, ...] = ()
                if group.protocol_type == "consumer" and m.member_assignment:
                    try:
                        assignment = tuple(decode_assignment_untrusted(m.member_assignment))
                    except CorruptFrameError:
                        assignment = ()
                members.append(
                    MemberDescription(m.member_id, m.client_id, m.client_host, assignment)
                )
            result.append(
                GroupDescription(
                    group.group_id,
                    group.group_state,
                    group.protocol_type,
                    group.protocol_data,
                    tuple(members),
                    group.error_code,
                )
            )
        return result

    async def list_group_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (all of them when ``partitions`` is None)."""
        if partitions is None:
            topics = None
        else:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            topics = [{"name": t, "partition_indexes": p} for t, p in by_topic.items()]

        async def attempt() -> Any:
            response = await self._cluster.coordinator_request(
                GROUP, group_id, ApiKey.OFFSET_FETCH, {"group_id": group_id, "topics": topics}
            )
            if response.error_code:
                exc = self._cluster.coordinator_error(
                    GROUP,
                    group_id,
                    response.error_code,
                    f"OffsetFetch {group_id}",
                )
                raise exc
            return response

        response = await self._cluster.retry_call(
            attempt, timeout=self._timeout, what="OffsetFetch"
        )
        result = {}
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code:
                    raise error_for(p.error_code, f"OffsetFetch {topic.name}-{p.partition_index}")
                if p.committed_offset >= 0:
                    result[TopicPartition(topic.name, p.partition_index)] = OffsetAndMetadata(
                        p.committed_offset, p.metadata
                    )
        return result

    # -- offsets ---------------------------------------------------------------------------------

    async def list_offsets(
        self,
        specs: Mapping[tuple[str, int], int],
        read_committed: bool = True,
    ) -> dict[TopicPartition, tuple[int, int]]:
        """Kafka's ``Admin.listOffsets``: per partition a timestamp in ms, or ``LATEST`` (-1) /
        ``EARLIEST`` (-2); returns ``(offset, timestamp)`` (offset -1: no record at or after that
        time). LATEST is the last stable offset when ``read_committed``, else the high watermark."""
        cluster = self._cluster
        wanted = {TopicPartition(*tp): ts for tp, ts in specs.items()}
        result: dict[TopicPartition, tuple[int, int]] = {}

        async def attempt() -> None:
            remaining = [tp for tp in wanted if tp not in result]
            if any(cluster.leader_for(tp) is None for tp in remaining):
                await cluster.refresh_metadata(sorted({tp.topic for tp in remaining}))
            by_node: dict[int, list[TopicPartition]] = {}
            for tp in remaining:
                node = cluster.leader_for(tp)
                if node is None:
                    raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp.topic}-{tp.partition}")
                by_node.setdefault(node, []).append(tp)
            for node, tps in sorted(by_node.items()):
                topics: dict[str, list[dict]] = {}
                for tp in tps:
                    topics.setdefault(tp.topic, []).append(
                        {"partition_index": tp.partition, "timestamp": wanted[tp]}
                    )
                conn = await cluster.connection(node)
                response = await conn.request(
                    ApiKey.LIST_OFFSETS,
                    {
                        "replica_id": -1,
                        "isolation_level": 1 if read_committed else 0,
                        "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
                    },
                )
                for topic in response.topics:
                    for p in topic.partitions:
                        if p.error_code:
                            raise error_for(
                                p.error_code, f"ListOffsets {topic.name}-{p.partition_index}"
                            )
                        result[TopicPartition(topic.name, p.partition_index)] = (
                            p.offset, p.timestamp
                        )

        await cluster.retry_call(attempt, timeout=self._timeout, what="ListOffsets")
        return result

    # -- transactions ----------------------------------------------------------------------------

    async def list_transactions(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_ms: int | None = None,
    ) -> list[TransactionListing]:
        """Transactional ids known to the coordinators, optionally filtered by state name
        (``Ongoing`` ...), producer id, or (``duration_ms``) only transactions running longer
        than that (ListTransactions v1; refused by a broker that only has v0)."""
        cluster = self._cluster
        await cluster.refresh_metadata([])
        result: dict[str, TransactionListing] = {}
        for node in sorted(cluster.brokers):
            conn = await cluster.connection(node)
            request = {"state_filters": list(states), "producer_id_filters": list(producer_ids),
                       "duration_filter": -1 if duration_ms is None else duration_ms}
            if duration_ms is not None and conn.version(ApiKey.LIST_TRANSACTIONS) < 1:
                raise UnsupportedVersionError(
                    f"broker {node} cannot filter transactions by duration (ListTransactions v0)"
                )
            response = await conn.request(ApiKey.LIST_TRANSACTIONS, request)
            if response.error_code:
                raise error_for(response.error_code, f"ListTransactions on broker {node}")
            for t in response.transaction_states:
                result[t.transactional_id] = TransactionListing(
                    t.transactional_id, t.producer_id, t.transaction_state
                )
        return sorted(result.values())

    async def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> list[TransactionDescription]:
        """State, producer id/epoch, timeout and partitions of each transactional id."""
        result = []
        for transactional_id in transactional_ids:

            async def attempt(transactional_id: str = transactional_id) -> Any:
                response = await self._cluster.coordinator_request(
                    TRANSACTION,
                    transactional_id,
                    ApiKey.DESCRIBE_TRANSACTIONS,
                    {"transactional_ids": [transactional_id]},
                )
                (state,) = response.transaction_states
                if state.error_code:
                    exc = self._cluster.coordinator_error(
                        TRANSACTION,
                        transactional_id,
                        state.error_code,
                        f"transactional id {transactional_id}",
                    )
                    raise exc
                return state

            state = await self._cluster.retry_call(
                attempt, timeout=self._timeout, what="DescribeTransactions"
            )
            result.append(
                TransactionDescription(
                    state.transactional_id,
                    state.transaction_state,
                    state.producer_id,
                    state.producer_epoch,
                    state.transaction_timeout_ms,
                    state.transaction_start_time_ms,
                    tuple(
                        TopicPartition(t.topic, p)
                        for t in state.topics
                        for p in sorted(t.partitions)
                    ),
                )
            )
        return result

    async def find_hanging_transactions(
        self,
        topics: Iterable[str] | None = None,
        max_transaction_timeout_ms: int = 900_000,
    ) -> list[HangingTransaction]:
        """Open transactions on partitions of ``topics`` (all topics when None) whose LSO they
        hold back although their coordinator does not consider them ongoing (a lost marker), or
        that run longer than ``max_transaction_timeout_ms`` (Kafka's ``kafka-transactions.sh
        find-hanging``): DescribeProducers on each partition, then ListTransactions and
        DescribeTransactions for the producers with an open transaction."""
        names = await self.list_topics() if topics is None else list(topics)
        partitions = [
            (d.name, p.partition) for d in await self.describe_topics(names) for p in d.partitions
        ]
        open_txns = [
            (tp, state)
            for tp, states in (await self.describe_producers(partitions)).items()
            for state in states
            if state.current_txn_start_offset >= 0
        ]
        if not open_txns:
            return []
        listings = await self.list_transactions(
            producer_ids=sorted({s.producer_id for _, s in open_txns})
        )
        by_producer = {t.producer_id: t.transactional_id for t in listings}
        descriptions = {
            d.transactional_id: d
            for d in await self.describe_transactions(sorted(set(by_producer.values())))
        }
        now = self.clock.now_ns() // 1_000_000
        hanging = []
        for tp, state in open_txns:
            transactional_id = by_producer.get(state.producer_id)
            description = descriptions.get(transactional_id) if transactional_id else None
            age = -1
            if description is not None and description.start_time_ms >= 0:
                age = now - description.start_time_ms
            ongoing = (
                description is not None
                and description.state == "Ongoing"
                and description.producer_id == state.producer_id
                and tp in description.partitions
            )
            if ongoing and age <= max_transaction_timeout_ms:
                continue
            hanging.append(HangingTransaction(
                tp, state.producer_id, state.producer_epoch, state.coordinator_epoch,
                state.current_txn_start_offset, transactional_id, age,
            ))
        return hanging

    async def abort_transaction(
        self, partition: tuple[str, int], producer_id: int, producer_epoch: int,
        coordinator_epoch: int,
    ) -> None:
        """Abort a hanging transaction on one partition (Kafka's ``Admin.abortTransaction``): an
        ABORT marker through WriteTxnMarkers to the partition's leader, with the producer id and
        epoch ``describe_producers`` or ``find_hanging_transactions`` reported. The broker
        refuses it (CLUSTER_AUTHORIZATION_FAILED) for a transaction a coordinator still runs:
        end those through their transactional id."""
        topic, index = partition
        conn = await self._cluster.connection(await self._leader(topic, index))
        response = await conn.request(ApiKey.WRITE_TXN_MARKERS, {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch,
            "transaction_result": False, "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": topic, "partition_indexes": [index]}],
        }]})
        for marker in response.markers:
            for t in marker.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise error_for(p.error_code, f"abort of producer {producer_id} "
                                                      f"on {t.name}-{p.partition_index}")

    # -- ACLs and SCRAM credentials (README "Security") ----------------------------------------

    async def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Create the bindings (durable when this returns); raises the first refusal."""
        bindings = list(bindings)
        creations = [{
            "resource_type": _code(ACL_RESOURCE_TYPES, b.resource_type, "resource type"),
            "resource_name": b.name,
            "resource_pattern_type": _code(ACL_PATTERN_TYPES, b.pattern_type, "pattern type"),
            "principal": b.principal, "host": b.host,
            "operation": _code(ACL_OPERATIONS, b.operation, "operation"),
            "permission_type": _code(ACL_PERMISSIONS, b.permission, "permission"),
        } for b in bindings]
        conn = await self._cluster.any_connection()
        response = await conn.request(ApiKey.CREATE_ACLS, {"creations": creations})
        for binding, result in zip(bindings, response.results, strict=True):
            if result.error_code:
                raise error_for(result.error_code, result.error_message or str(binding))

    async def describe_acls(self, match: AclBindingFilter | None = None) -> list[AclBinding]:
        conn = await self._cluster.any_connection()
        response = await conn.request(ApiKey.DESCRIBE_ACLS, _filter_body(match or AclBindingFilter()))
        if response.error_code:
            raise error_for(response.error_code, response.error_message or "DescribeAcls")
        return [_binding(r.resource_type, r.resource_name, r.pattern_type, a)
                for r in response.resources for a in r.acls]

    async def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Delete what the filters match; the deleted bindings."""
        conn = await self._cluster.any_connection()
        response = await conn.request(ApiKey.DELETE_ACLS,
                                      {"filters": [_filter_body(f) for f in filters]})
        deleted: list[AclBinding] = []
        for result in response.filter_results:
            if result.error_code:
                raise error_for(result.error_code, result.error_message or "DeleteAcls")
            deleted.extend(_binding(m.resource_type, m.resource_name, m.pattern_type, m)
                           for m in result.matching_acls)
        return deleted

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, dict[str, int]]:
        """user -> mechanism -> iterations (every user when ``users`` is None)."""
        conn = await self._cluster.any_connection()
        body = {"users": None if users is None else [{"name": u} for u in users]}
        response = await conn.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, body)
        if response.error_code:
            raise error_for(response.error_code, response.error_message or "")
        result = {}
        for r in response.results:
            if r.error_code:
                raise error_for(r.error_code, r.error_message or r.user)
            result[r.user] = {SCRAM_MECHANISMS[c.mechanism]: c.iterations
                              for c in r.credential_infos}
        return result

    async def alter_user_scram_credentials(
        self,
        upserts: Iterable[tuple[str, str, str, int]] = (),
        deletions: Iterable[tuple[str, str]] = (),
    ) -> None:
        """``upserts``: (user, mechanism, password, iterations): the password is salted and
        hashed here (PBKDF2, as Kafka's clients do) and never sent; ``deletions``: (user,
        mechanism)."""
        codes = {name: code for code, name in SCRAM_MECHANISMS.items()}

        def code(mechanism: str) -> int:
            if mechanism.upper() not in codes:
                raise ConfigError(f"unknown SCRAM mechanism {mechanism!r} "
                                  f"(one of {', '.join(codes)})")
            return codes[mechanism.upper()]

        upsertions = []
        for user, mechanism, password, iterations in upserts:
            salt = os.urandom(32)
            digest = "sha256" if code(mechanism) == 1 else "sha512"
            salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
            upsertions.append({"name": user, "mechanism": code(mechanism),
                               "iterations": iterations, "salt": salt, "salted_password": salted})
        body = {"deletions": [{"name": u, "mechanism": code(m)} for u, m in deletions],
                "upsertions": upsertions}
        conn = await self._cluster.any_connection()
        response = await conn.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
        for r in response.results:
            if r.error_code:
                raise error_for(r.error_code, r.error_message or r.user)

    async def end_transaction(
        self, handle: TransactionHandle, commit: bool, timeout: float | None = None
    ) -> None:
        """Commit or abort a transaction handed over by ``transaction_handle()`` (see the module
        docstring for what is tolerated)."""
        if handle.empty:
            return
        cluster = self._cluster
        deadline = trio.current_time() + (60.0 if timeout is None else timeout)
        while True:
            try:
                node = await cluster.coordinator(TRANSACTION, handle.transactional_id)
                conn = await cluster.connection(node)
                # Transaction version 2 when the coordinator finalizes it: EndTxn v5 bumps the
                # epoch, so a late copy of this request can never end a later transaction.
                tv2 = await conn.finalized_feature("transaction.version") >= 2
                response = await cluster.coordinator_request(
                    TRANSACTION,
                    handle.transactional_id,
                    ApiKey.END_TXN,
                    {
                        "transactional_id": handle.transactional_id,
                        "producer_id": handle.producer_id,
                        "producer_epoch": handle.producer_epoch,
                        "committed": commit,
                    },
                    max_version=5 if tv2 else 4,
                )
                if response.error_code:
                    raise error_for(response.error_code, f"EndTxn {handle.transactional_id}")
                return
            except ProducerFencedError:
                if not commit:
                    return  # fenced means aborted: what was asked for
                raise
            except KafkaClientError as exc:
                if not exc.retriable:
                    raise
                if is_coordinator_error(exc):
                    cluster.forget_coordinator(TRANSACTION, handle.transactional_id)
                delay = (
                    0.02 if isinstance(exc, ConcurrentTransactionsError) else cluster.retry_backoff
                )
                if trio.current_time() + delay > deadline:
                    raise KafkaTimeoutError(
                        f"EndTxn for {handle.transactional_id} timed out: {exc}"
                    ) from exc
                await trio.sleep(delay)


def _code(table: dict[str, int], value: str, what: str) -> int:
    try:
        return table[value.lower()]
    except KeyError:
        raise ConfigError(f"unknown ACL {what} {value!r} (one of {', '.join(table)})") from None


def _filter_body(f: AclBindingFilter) -> dict:
    return {
        "resource_type_filter": _code(ACL_RESOURCE_TYPES, f.resource_type, "resource type"),
        "resource_name_filter": f.name,
        "pattern_type_filter": _code(ACL_PATTERN_TYPES, f.pattern_type, "pattern type"),
        "principal_filter": f.principal, "host_filter": f.host,
        "operation": _code(ACL_OPERATIONS, f.operation, "operation"),
        "permission_type": _code(ACL_PERMISSIONS, f.permission, "permission"),
    }


def _name(table: dict[str, int], code: int) -> str:
    return next((k for k, v in table.items() if v == code), str(code))


def _binding(resource_type: int, name: str, pattern_type: int, a: Any) -> AclBinding:
    return AclBinding(_name(ACL_RESOURCE_TYPES, resource_type), name, a.principal,
                      _name(ACL_OPERATIONS, a.operation), _name(ACL_PERMISSIONS, a.permission_type),
                      _name(ACL_PATTERN_TYPES, pattern_type), a.host)


def raise_first(
    results: Mapping[str, BrokerResponseError | None], ignore: Iterable[int] = ()
) -> None:
    """Raise the first error of a create/delete result dict, skipping codes in ``ignore``."""
    skip = {int(c) for c in ignore}
    for error in results.values():
        if error is not None and error.wire_code not in skip:
            raise error
