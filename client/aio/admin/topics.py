"""Admin calls on topics, partitions, configs and records: topic creation and deletion goes to
the controller named in Metadata, configs of a broker to that broker, records calls to each
partition's leader."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from client.aio.admin._base import AdminBase
from client.errors import (
    BrokerResponseError,
    error_for,
)
from client.retry import retry
from client.structs import (
    ALTER_OPS,
    CONFIG_SOURCES,
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigSynonym,
    LogDirDescription,
    NewTopic,
    PartitionInfo,
    TopicDescription,
    TopicPartition,
)
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode


class TopicsAdmin(AdminBase):
    # -- topics ----------------------------------------------------------------------------------

    async def create_topics(
        self,
        topics: Sequence[NewTopic],
        validate_only: bool = False,
        timeout_ms: int = 30_000,
    ) -> dict[str, BrokerResponseError | None]:
        """Create topics; per topic None (created) or the broker's error."""
        conn = await self._controller_connection()
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
        conn = await self._controller_connection()
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
            topic_id = getattr(topic, "topic_id", None)
            result.append(TopicDescription(topic.name, partitions, topic.is_internal,
                                           topic_id if topic_id is not None and topic_id.int
                                           else None))
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

    async def api_versions(self) -> list[dict[str, Any]]:
        """Each broker's ApiVersions answer (kafka-broker-api-versions.sh, kafka-features.sh
        describe): its node, ``api_keys`` [(key, min, max)], ``supported_features`` and
        ``finalized_features`` [(name, min, max)], ``finalized_features_epoch``."""
        await self._cluster.refresh_metadata([])
        answers = []
        for node_id, (host, port) in sorted(self._cluster.brokers.items()):
            conn = await self._cluster.connection(node_id)
            version = 3 if conn.supports_version(ApiKey.API_VERSIONS, 3) else 0
            response = await conn.request(ApiKey.API_VERSIONS, {
                "client_software_name": "minibroker-client", "client_software_version": "1",
            }, version=version)
            if response.error_code:
                raise error_for(response.error_code, "ApiVersions")
            answers.append({
                "node_id": node_id, "host": host, "port": port,
                "api_keys": [(k.api_key, k.min_version, k.max_version)
                             for k in response.api_keys],
                "supported_features": [(f.name, f.min_version, f.max_version)
                                       for f in getattr(response, "supported_features", ())],
                "finalized_features": [(f.name, f.min_version_level, f.max_version_level)
                                       for f in getattr(response, "finalized_features", ())],
                "finalized_features_epoch": getattr(response, "finalized_features_epoch", -1),
            })
        return answers

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
        conn = await self._controller_connection()
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

        await retry(attempt, backoff=cluster.backoff, timeout=self._timeout, what="ListOffsets")
        return result
