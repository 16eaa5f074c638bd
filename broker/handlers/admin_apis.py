"""Admin APIs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, CreatePartitions,
DeleteRecords, DeleteGroups, OffsetDelete, DescribeClientQuotas (none), DescribeCluster, DescribeLogDirs, DescribeProducers,
ListGroups, ListTransactions, ListConfigResources. Every advertised version of each (``admin_apis.py`` in
``protocol/messages`` declares them); the version only decides which fields exist, so one
handler serves them all and returns every field (the encoder skips the absent ones).
"""

from __future__ import annotations

import contextlib
import shutil
from typing import Any

import trio

from broker.config import resources
from broker.config.resources import ConfigSource, ResourceType
from broker.handlers.authz import allowed, cluster_authorized_operations
from broker.handlers.context import Broker
from broker.handlers.marks import handles
from broker.log.pending import PendingPartitions
from broker.log.topics import INTERNAL_TOPICS
from broker.reply import Deferred, reply
from broker.security.acl import CLUSTER_NAME, Operation
from broker.security.acl import ResourceType as AclResource
from broker.txn.state import TxnState
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.api_versions import ADVERTISED
from protocol.text import clip_message

INT32_MIN = -(1 << 31)
BROKER_ENDPOINTS = 1  # DescribeCluster endpoint_type: 1 brokers, 2 controllers (KIP-919)
CLASSIC = "classic"
SHARE = "share"


def _versions(api_key: ApiKey) -> range:
    r = ADVERTISED[api_key]
    return range(r.min, r.max + 1)


def _error(exc: KafkaError) -> tuple[ErrorCode, str | None]:
    return exc.code, clip_message(exc.message) or None


# -- configs ------------------------------------------------------------------------------


def _may(broker: Broker, operation: Operation, kind: ResourceType, name: str) -> None:
    """Raise the authorization error of a config resource (topic or broker = the cluster)."""
    if kind is ResourceType.TOPIC:
        if not allowed(broker, operation, AclResource.TOPIC, name):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    elif kind is ResourceType.GROUP:
        if not allowed(broker, operation, AclResource.GROUP, name):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    elif not allowed(broker, operation, AclResource.CLUSTER, CLUSTER_NAME):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


def _may_topic(broker: Broker, operation: Operation, topic: str) -> None:
    if not allowed(broker, operation, AclResource.TOPIC, topic):
        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


@handles(ApiKey.DESCRIBE_CONFIGS, *_versions(ApiKey.DESCRIBE_CONFIGS))
def describe_configs(broker: Broker, header, request) -> dict:
    version = header.api_version
    include_synonyms = version >= 1 and request.include_synonyms
    include_docs = version >= 3 and request.include_documentation
    results = []
    for resource in request.resources:
        code, message, entries = ErrorCode.NONE, None, []
        try:
            kind = resources.check_resource_type(resource.resource_type)
            _may(broker, Operation.DESCRIBE_CONFIGS, kind, resource.resource_name)
            if kind is ResourceType.TOPIC:
                entries = resources.describe_topic(
                    broker.logs, broker.config, resource.resource_name,
                    resource.configuration_keys,
                )
            elif kind is ResourceType.GROUP:
                entries = broker.group_configs.describe(resource.resource_name,
                                                        resource.configuration_keys)
            elif kind is ResourceType.CLIENT_METRICS:  # broker/config/client_metrics_configs.py
                entries = broker.client_metrics.describe(resource.resource_name,
                                                         resource.configuration_keys)
            else:
                entries = resources.describe_broker(
                    broker.config, resource.resource_name, resource.configuration_keys
                )
        except KafkaError as exc:
            code, message = _error(exc)
        results.append({
            "error_code": code,
            "error_message": message,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "configs": [
                {
                    "name": e.name,
                    "value": e.value,
                    "read_only": e.read_only,
                    "is_default": e.source is ConfigSource.DEFAULT_CONFIG,
                    "config_source": e.source,
                    "is_sensitive": False,
                    "synonyms": [
                        {"name": s.name, "value": s.value, "source": s.source}
                        for s in (e.synonyms if include_synonyms else ())
                    ],
                    "config_type": e.type,
                    "documentation": e.documentation if include_docs else None,
                }
                for e in entries
            ],
        })
    return {"throttle_time_ms": 0, "results": results}


def _alter_response(results: list[tuple[Any, ErrorCode, str | None]]) -> dict:
    return {
        "throttle_time_ms": 0,
        "responses": [
            {"error_code": code, "error_message": message,
             "resource_type": r.resource_type, "resource_name": r.resource_name}
            for r, code, message in results
        ],
    }


def _alter(broker: Broker, request, alter_topic, keys_of, alter_group, ops_of, replace: bool
           ) -> dict:
    results = []
    seen: set[tuple[int, str]] = set()
    for resource in request.resources:
        code, message = ErrorCode.NONE, None
        try:
            ident = (resource.resource_type, resource.resource_name)
            if ident in seen:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "resource listed twice")
            seen.add(ident)
            kind = resources.check_resource_type(resource.resource_type)
            _may(broker, Operation.ALTER_CONFIGS, kind, resource.resource_name)
            if kind is ResourceType.TOPIC:
                alter_topic(resource)
            elif kind is ResourceType.GROUP:
                alter_group(resource)
            elif kind is ResourceType.CLIENT_METRICS:  # replace: AlterConfigs' whole set
                broker.client_metrics.alter(resource.resource_name, ops_of(resource),
                                            request.validate_only, replace)
            else:
                resources.alter_broker(broker.config, resource.resource_name, keys_of(resource))
        except KafkaError as exc:
            code, message = _error(exc)
        results.append((resource, code, message))
    return _alter_response(results)


@handles(ApiKey.ALTER_CONFIGS, *_versions(ApiKey.ALTER_CONFIGS))
def alter_configs(broker: Broker, header, request) -> dict:
    def alter_topic(resource) -> None:
        resources.alter_topic(
            broker.logs, resource.resource_name, [(c.name, c.value) for c in resource.configs],
            request.validate_only,
        )

    def alter_group(resource) -> None:  # the whole set of the group's configs
        broker.group_configs.alter(resource.resource_name,
                                   [(c.name, 0, c.value) for c in resource.configs],
                                   request.validate_only, replace=True)

    return _alter(broker, request, alter_topic, lambda r: [c.name for c in r.configs],
                  alter_group, lambda r: [(c.name, 0, c.value) for c in r.configs], True)


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, *_versions(ApiKey.INCREMENTAL_ALTER_CONFIGS))
def incremental_alter_configs(broker: Broker, header, request) -> dict:
    def alter_topic(resource) -> None:
        resources.incremental_alter_topic(
            broker.logs, resource.resource_name,
            [(c.name, c.config_operation, c.value) for c in resource.configs],
            request.validate_only,
        )

    def alter_group(resource) -> None:  # broker/config/group_configs.py
        broker.group_configs.alter(
            resource.resource_name,
            [(c.name, c.config_operation, c.value) for c in resource.configs],
            request.validate_only)

    return _alter(broker, request, alter_topic, lambda r: [c.name for c in r.configs],
                  alter_group,
                  lambda r: [(c.name, c.config_operation, c.value) for c in r.configs], False)




# -- topics and records -------------------------------------------------------------------


@handles(ApiKey.CREATE_PARTITIONS, *_versions(ApiKey.CREATE_PARTITIONS))
def create_partitions(broker: Broker, header, request) -> dict | Deferred[dict]:
    """The new partitions' files are made in a worker thread, as CreateTopics' (thousands of
    directories and fsyncs must not stop the event loop); the answer waits for them."""
    results: list[dict] = []
    pending: list[tuple[dict, PendingPartitions]] = []
    seen: set[str] = set()
    for topic in request.topics:
        code, message = ErrorCode.NONE, None
        try:
            if topic.name in seen:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "topic listed twice in one request")
            seen.add(topic.name)
            _may_topic(broker, Operation.ALTER, topic.name)
            if topic.name in INTERNAL_TOPICS:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"{topic.name} is internal: its partition count is fixed")
            if topic.assignments:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "manual replica assignments are not supported")
            growing = broker.logs.prepare_partitions(topic.name, topic.count,
                                                     broker.clock.now_ms(), request.validate_only)
        except KafkaError as exc:
            code, message = _error(exc)
            growing = None
        results.append({"name": topic.name, "error_code": code, "error_message": message})
        if growing is not None:
            pending.append((results[-1], growing))
    if not pending:
        return {"throttle_time_ms": 0, "results": results}

    async def grow() -> dict:
        finished: set[int] = set()
        try:
            for i, (result, partitions) in enumerate(pending):
                # Not cancellable: a shutdown or a closed connection waits for the files.
                await trio.to_thread.run_sync(partitions.build)
                finished.add(i)
                try:
                    broker.logs.finish_partitions(partitions)
                except KafkaError as exc:
                    result["error_code"], result["error_message"] = _error(exc)
        finally:
            for i, (_, partitions) in enumerate(pending):
                if i not in finished:  # cancelled: commit what was built, release the topic
                    with contextlib.suppress(KafkaError):
                        broker.logs.finish_partitions(partitions)
        return {"throttle_time_ms": 0, "results": results}

    return Deferred(grow)


@handles(ApiKey.DELETE_RECORDS, *_versions(ApiKey.DELETE_RECORDS))
def delete_records(broker: Broker, header, request) -> dict:
    """Moves each partition's log start offset (durably, before the answer); -1 means the high
    watermark. Internal topics are refused (INVALID_TOPIC_EXCEPTION), as Kafka does."""
    topics = []
    for topic in request.topics:
        partitions = []
        for part in topic.partitions:
            low, code = -1, ErrorCode.NONE
            try:
                _may_topic(broker, Operation.DELETE, topic.name)
                if topic.name in INTERNAL_TOPICS:
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "internal topic")
                low = broker.partition(topic.name, part.partition_index).delete_records(part.offset)
            except KafkaError as exc:
                code = exc.code
            partitions.append(
                {"partition_index": part.partition_index, "low_watermark": low, "error_code": code}
            )
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


# -- groups -------------------------------------------------------------------------------


@handles(ApiKey.DELETE_GROUPS, *_versions(ApiKey.DELETE_GROUPS))
def delete_groups(broker: Broker, header, request):
    names = list(request.groups_names)
    refused = {g for g in names if not allowed(broker, Operation.DELETE, AclResource.GROUP, g)}
    share = broker.share
    # Share groups (KIP-932) are deleted by the share service: their state goes too.
    shared = {g: share.delete_group(g) for g in dict.fromkeys(names)
              if g not in refused and share is not None and share.is_share_group(g)}
    result = broker.groups.delete_groups(
        [g for g in dict.fromkeys(names) if g not in refused and g not in shared],
        broker.clock.now_ms())

    def encode(codes: dict[str, ErrorCode]) -> dict:
        codes = {**codes, **shared, **{g: ErrorCode.GROUP_AUTHORIZATION_FAILED for g in refused}}
        return {
            "throttle_time_ms": 0,
            "results": [{"group_id": g, "error_code": codes[g]} for g in dict.fromkeys(names)],
        }

    return reply(result, encode)


@handles(ApiKey.OFFSET_DELETE, *_versions(ApiKey.OFFSET_DELETE))
def offset_delete(broker: Broker, header, request):
    if not allowed(broker, Operation.DELETE, AclResource.GROUP, request.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "throttle_time_ms": 0,
                "topics": []}
    refused = {t.name for t in request.topics
               if not allowed(broker, Operation.READ, AclResource.TOPIC, t.name)}
    requested = [(t.name, p.partition_index) for t in request.topics for p in t.partitions
                 if t.name not in refused]
    result = broker.groups.delete_offsets(request.group_id, requested, broker.clock.now_ms())

    def encode(result) -> dict:
        code, errors = result
        topics = [] if code else [
            {"name": t.name, "partitions": [
                {"partition_index": p.partition_index,
                 "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED if t.name in refused
                 else errors[(t.name, p.partition_index)]}
                for p in t.partitions
            ]}
            for t in request.topics
        ]
        return {"error_code": code, "throttle_time_ms": 0, "topics": topics}

    return reply(result, encode)


@handles(ApiKey.LIST_GROUPS, *_versions(ApiKey.LIST_GROUPS))
def list_groups(broker: Broker, header, request) -> dict:
    """v4+ filter by state, v5+ by type (case-insensitive, as Kafka): "classic" groups, the
    consumer group protocol's "consumer" groups and "share" groups."""
    version = header.api_version
    states = {s.lower() for s in request.states_filter} if version >= 4 else set()
    types = {t.lower() for t in request.types_filter} if version >= 5 else set()
    groups = []
    listed: list[tuple[str, str, str, str]] = []  # (group type, id, protocol type, state)
    # As Kafka: every group with Describe on the cluster, else those the principal may describe;
    # the others are left out without a refusal line each.
    everything = allowed(broker, Operation.DESCRIBE, AclResource.CLUSTER, CLUSTER_NAME,
                         log_refusal=False)
    now_ms = broker.clock.now_ms()
    kinds = [(CLASSIC, broker.groups.list_groups),
             ("consumer", broker.groups.list_consumer_groups)]  # the consumer protocol's (KIP-848)
    if broker.streams is not None:
        kinds.append(("streams", broker.streams.list_groups))  # the Streams protocol's (KIP-1071)
    for group_type, listing in kinds:
        if not types or group_type in types:
            listed.extend((group_type, *group) for group in sorted(listing(now_ms)))
    if broker.share is not None and (not types or SHARE in types):  # KIP-932
        listed.extend((SHARE, group_id, SHARE, state)
                      for group_id, state in broker.share.list_groups())
    for group_type, group_id, protocol_type, state in listed:
        if states and state.lower() not in states:
            continue
        if not everything and not allowed(broker, Operation.DESCRIBE, AclResource.GROUP,
                                          group_id, log_refusal=False):
            continue
        groups.append({"group_id": group_id, "protocol_type": protocol_type,
                       "group_state": state, "group_type": group_type})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "groups": groups}


# -- cluster, log dirs, producers, transactions --------------------------------------------


@handles(ApiKey.DESCRIBE_CLIENT_QUOTAS, *_versions(ApiKey.DESCRIBE_CLIENT_QUOTAS))
def describe_client_quotas(broker: Broker, header, request) -> dict:
    """No quotas on this broker: every filter matches nothing (Kafka's check: DescribeConfigs on
    the cluster)."""
    if not allowed(broker, Operation.DESCRIBE_CONFIGS, AclResource.CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": None, "entries": None}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "entries": []}


# ListConfigResources resource types (Kafka's ConfigResource.Type ids): v0 (it was
# ListClientMetricsResources) knows CLIENT_METRICS only; v1 the five, in the order Kafka answers.
BROKER_LOGGER = 8
_LISTABLE = {0: (ResourceType.CLIENT_METRICS,),
             1: (ResourceType.GROUP, ResourceType.CLIENT_METRICS, BROKER_LOGGER,
                 ResourceType.BROKER, ResourceType.TOPIC)}


@handles(ApiKey.LIST_CONFIG_RESOURCES, *_versions(ApiKey.LIST_CONFIG_RESOURCES))
def list_config_resources(broker: Broker, header, request) -> dict:
    """The config resources of the types asked for (none asked: every type the version knows),
    as Kafka's KafkaApis lists them: groups with configs, client-metrics resources, this broker
    (as BROKER_LOGGER and BROKER), every topic. DescribeConfigs on the cluster is required; a
    type the version does not know fails the whole request with UNSUPPORTED_VERSION."""
    def answer(error: ErrorCode, resources: list[dict]) -> dict:
        return {"throttle_time_ms": 0, "error_code": error, "config_resources": resources}

    if not allowed(broker, Operation.DESCRIBE_CONFIGS, AclResource.CLUSTER, CLUSTER_NAME):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    listable = _LISTABLE[min(header.api_version, 1)]
    asked = set(request.resource_types) or set(listable)
    if not asked <= set(listable):
        return answer(ErrorCode.UNSUPPORTED_VERSION, [])
    node = str(broker.config.node_id)
    names = {
        ResourceType.GROUP: lambda: sorted(broker.group_configs.configs),
        ResourceType.CLIENT_METRICS: broker.client_metrics.names,  # the KIP-714 subscriptions
        BROKER_LOGGER: lambda: [node],
        ResourceType.BROKER: lambda: [node],
        ResourceType.TOPIC: lambda: sorted(broker.logs.topics()),
    }
    return answer(ErrorCode.NONE, [
        {"resource_name": name, "resource_type": int(kind)}
        for kind in listable if kind in asked for name in names[kind]()])


@handles(ApiKey.DESCRIBE_CLUSTER, *_versions(ApiKey.DESCRIBE_CLUSTER))
def describe_cluster(broker: Broker, header, request) -> dict:
    host, port = broker.config.advertised
    node = broker.config.node_id
    response = {
        "throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
        "endpoint_type": BROKER_ENDPOINTS, "cluster_id": broker.cluster_id, "controller_id": node,
        "brokers": [{"broker_id": node, "host": host, "port": port, "rack": None,
                     "is_fenced": False}],
        "cluster_authorized_operations": (
            cluster_authorized_operations(broker)
            if request.include_cluster_authorized_operations else INT32_MIN
        ),
    }
    if header.api_version >= 1 and request.endpoint_type != BROKER_ENDPOINTS:
        response.update(error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE,
                        error_message="this is a broker: ask it for broker endpoints",
                        brokers=[])
    return response


@handles(ApiKey.DESCRIBE_LOG_DIRS, *_versions(ApiKey.DESCRIBE_LOG_DIRS))
def describe_log_dirs(broker: Broker, header, request) -> dict:
    """One log directory (the data dir); ``topics`` null means every partition."""
    if not allowed(broker, Operation.DESCRIBE, AclResource.CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "results": []}
    logs = broker.logs
    if request.topics is None:
        wanted = [(name, list(range(count))) for name, count in sorted(logs.topics().items())]
    else:
        wanted = [(t.topic, list(t.partitions)) for t in request.topics]
    topics = []
    for name, indexes in wanted:
        partitions = []
        for index in indexes:
            try:
                partition = logs.partition(name, index)
            except KafkaError:
                continue  # Kafka leaves out partitions it does not host
            partitions.append({"partition_index": index, "partition_size": partition.size_bytes,
                               "offset_lag": 0, "is_future_key": False})
        if partitions:
            topics.append({"name": name, "partitions": partitions})
    usage = shutil.disk_usage(logs.data_dir)
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "results": [{
            "error_code": ErrorCode.NONE, "log_dir": str(logs.data_dir.resolve()),
            "topics": topics, "total_bytes": usage.total, "usable_bytes": usage.free,
        }],
    }


@handles(ApiKey.DESCRIBE_PRODUCERS, *_versions(ApiKey.DESCRIBE_PRODUCERS))
def describe_producers(broker: Broker, header, request) -> dict:
    """The idempotent/transactional producers each partition knows: epoch, last sequence, last
    timestamp, coordinator epoch of the last marker, first offset of the open transaction."""
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            code, message, active = ErrorCode.NONE, None, []
            try:
                _may_topic(broker, Operation.READ, topic.name)
                state = broker.partition(topic.name, index).producers
                for producer_id, entry in sorted(state.producers.items()):
                    txn_first = entry.current_txn_first_offset
                    active.append({
                        "producer_id": producer_id,
                        "producer_epoch": entry.producer_epoch,
                        "last_sequence": entry.last_seq,
                        "last_timestamp": entry.last_timestamp,
                        "coordinator_epoch": entry.coordinator_epoch,
                        "current_txn_start_offset": -1 if txn_first is None else txn_first,
                    })
            except KafkaError as exc:
                code, message = _error(exc)
            partitions.append({"partition_index": index, "error_code": code,
                               "error_message": message, "active_producers": active})
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


@handles(ApiKey.LIST_TRANSACTIONS, *_versions(ApiKey.LIST_TRANSACTIONS))
def list_transactions(broker: Broker, header, request) -> dict:
    """Filters (all optional, combined with AND): states by name (unknown names are echoed in
    ``unknown_state_filters``), producer ids, and (v1+) ``duration_filter``: only transactions
    running for longer than that many ms (those that have started one)."""
    wanted_states = set()
    unknown = []
    for name in request.state_filters:
        state = TxnState.from_display_name(name)
        if state is None:
            unknown.append(name)
        else:
            wanted_states.add(state)
    wanted_pids = set(request.producer_id_filters)
    duration = request.duration_filter if header.api_version >= 1 else -1
    now = broker.clock.now_ms()
    listed = []
    for md in sorted(broker.transactions.transactions(),
                     key=lambda m: m.transactional_id):
        if request.state_filters and md.state not in wanted_states:
            continue
        if wanted_pids and md.producer_id not in wanted_pids:
            continue
        if duration >= 0 and (md.txn_start_ms < 0 or now - md.txn_start_ms <= duration):
            continue
        if not allowed(broker, Operation.DESCRIBE, AclResource.TRANSACTIONAL_ID,
                       md.transactional_id, log_refusal=False):
            continue  # only the ids the principal may describe, no refusal line for each
        listed.append({"transactional_id": md.transactional_id, "producer_id": md.producer_id,
                       "transaction_state": md.state.display_name})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "unknown_state_filters": unknown, "transaction_states": listed}

