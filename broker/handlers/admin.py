"""ApiVersions, Metadata, CreateTopics, DeleteTopics: what a client needs before it produces.

CreateTopics makes the partitions' files in a worker thread (``LogManager.prepare_topic``): a
topic of hundreds of partitions is hundreds of directories and fsyncs, which must not stop the
event loop. The partitions one request asks for are capped (``max.partitions.per.request``,
Kafka's fixed 10,000) with Kafka's answer: POLICY_VIOLATION for every topic of the request.
"""

from __future__ import annotations

import contextlib
import re

import trio

from broker.config import resources
from broker.handlers import peer
from broker.handlers.authz import allowed, authorized_operations, cluster_authorized_operations
from broker.handlers.context import Broker
from broker.handlers.marks import handles
from broker.log.manager import validate_topic_name
from broker.log.pending import PendingTopic
from broker.log.topics import INTERNAL_TOPICS
from broker.reply import Deferred
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.api_versions import ADVERTISED, TELEMETRY_APIS
from protocol.primitives import ZERO_UUID
from protocol.text import clip_message

TRANSACTION_VERSION = "transaction.version"
MAX_TRANSACTION_VERSION = 2
# The finalized features change only with the configuration, at a restart; clients keep the
# features of the highest epoch they saw (Kafka's is the metadata offset; -1 means none).
FEATURES_EPOCH = 0

INT32_MIN = -(1 << 31)  # an authorized-operations field that was not asked for

# KIP-511: what a client may call itself in ApiVersions v3+.
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@handles(ApiKey.API_VERSIONS)
def api_versions(broker: Broker, header, request) -> dict:
    if header.api_version >= 3 and not (
        _SOFTWARE.fullmatch(request.client_software_name)
        and _SOFTWARE.fullmatch(request.client_software_version)
    ):
        return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": []}
    if header.api_version >= 3:  # what client telemetry subscriptions match (KIP-714)
        current = peer.session()
        current.client_software_name = request.client_software_name
        current.client_software_version = request.client_software_version
    level = broker.config.transaction_version
    telemetry = broker.config.metrics_port is not None  # (TELEMETRY_APIS)
    return {
        "error_code": ErrorCode.NONE,
        "api_keys": [
            {"api_key": key, "min_version": r.min, "max_version": r.max}
            for key, r in sorted(ADVERTISED.items()) if telemetry or key not in TELEMETRY_APIS
        ],
        # v3+ (KIP-584): clients use transaction version 2 when it is finalized at level 2.
        "supported_features": [{"name": TRANSACTION_VERSION, "min_version": 0,
                                "max_version": MAX_TRANSACTION_VERSION}],
        "finalized_features_epoch": FEATURES_EPOCH,
        "finalized_features": [{"name": TRANSACTION_VERSION, "max_version_level": level,
                                "min_version_level": level}] if level else [],
    }


@handles(ApiKey.METADATA)
def metadata(broker: Broker, header, request) -> dict | Deferred[dict]:
    """The topics asked for (or all). A topic to auto-create is built in a worker thread
    (``Broker.auto_create_topic``): the answer waits for it."""
    node = broker.config.node_id
    host, port = peer.advertised(broker.config.advertised)
    if request.topics is None or (header.api_version == 0 and not request.topics):
        # null = every topic (v0: an empty list)
        names = sorted(broker.logs.topics())
        allow_create = False
    else:
        names = [t.name for t in request.topics]
        allow_create = request.allow_auto_topic_creation
    topics: list[dict | None] = []
    # (position in ``topics``, name, authorized operations) of the topics to auto-create.
    creating: list[tuple[int, str, int]] = []
    if header.api_version >= 10 and request.topics:
        # v10+: a topic may be named by its id alone (KIP-516; the consumer protocol's
        # assignments name topics by id): an unknown id is UNKNOWN_TOPIC_ID, as Kafka answers.
        resolved: list[str] = []
        for t, name in zip(request.topics, names, strict=True):
            if name is None:
                found = broker.logs.topic_name(t.topic_id)
                if found is None:
                    topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None,
                                   "topic_id": t.topic_id, "is_internal": False,
                                   "partitions": []})
                    continue
                name = found
            resolved.append(name)
        names = resolved
    listing_all = request.topics is None or (header.api_version == 0 and not request.topics)
    # v8+: the operations the principal may do on each topic it may describe (Kafka's bits).
    with_operations = header.api_version >= 8 and request.include_topic_authorized_operations
    for name in names:
        # Describe before existence (Kafka: an undescribable topic is never disclosed): left
        # out of the all-topics answer (without a refusal line, as Kafka), TOPIC_AUTHORIZATION_
        # FAILED when named.
        if not allowed(broker, Operation.DESCRIBE, ResourceType.TOPIC, name,
                       log_refusal=not listing_all):
            if not listing_all:
                topics.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name,
                               "is_internal": False, "partitions": []})
            continue
        operations = (authorized_operations(broker, ResourceType.TOPIC, name)
                      if with_operations else INT32_MIN)
        count = broker.logs.partition_count(name)
        if count is None:
            # Create is asked only of a topic that does not exist and would be auto-created.
            auto = broker.may_auto_create(name, allow_create)
            create = auto and may_create(broker, name)
            if create:
                creating.append((len(topics), name, operations))
                topics.append(None)  # (filled in once built)
                continue
            try:
                count = broker.ensure_topic(name, False)
            except KafkaError as exc:
                topics.append(_topic_error(name, exc, auto, operations))
                continue
        topics.append(_topic_entry(broker, name, count, operations))
    cluster_operations = INT32_MIN
    if 8 <= header.api_version <= 10 and request.include_cluster_authorized_operations:
        cluster_operations = cluster_authorized_operations(broker)
    answer = {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": node, "host": host, "port": port, "rack": None}],
        "cluster_id": broker.cluster_id,
        "controller_id": node,
        "topics": topics,
        "cluster_authorized_operations": cluster_operations,
    }
    if not creating:
        return answer

    async def auto_create() -> dict:
        for i, name, operations in creating:
            try:
                count = await broker.auto_create_topic(name)
            except KafkaError as exc:
                topics[i] = _topic_error(name, exc, False, operations)
            else:
                topics[i] = _topic_entry(broker, name, count, operations)
        return answer

    return Deferred(auto_create)


def _topic_entry(broker: Broker, name: str, count: int, operations: int) -> dict:
    """A topic of a Metadata answer (one broker: it leads every partition)."""
    node = broker.config.node_id
    partitions = [
        {
            "error_code": ErrorCode.NONE,
            "partition_index": index,
            "leader_id": node,
            "replica_nodes": [node],
            "isr_nodes": [node],
        }
        for index in range(count)
    ]
    return {
        "error_code": ErrorCode.NONE,
        "name": name,
        "topic_id": broker.logs.topic_id(name) or ZERO_UUID,
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": partitions,
        "topic_authorized_operations": operations,
    }


def _topic_error(name: str, exc: KafkaError, refused: bool, operations: int) -> dict:
    """A Metadata answer's entry for a topic that is not there: ``exc`` is why (creating it
    failed, or it was not to be created; ``refused``: auto-creation was asked for and enabled,
    but the principal may not create it)."""
    code = exc.code
    if code == ErrorCode.TOPIC_ALREADY_EXISTS:
        # A CreateTopics of that name is making its files: Kafka's answer for a topic without
        # a leader yet (retriable).
        code = ErrorCode.LEADER_NOT_AVAILABLE
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and refused:
        code, operations = ErrorCode.TOPIC_AUTHORIZATION_FAILED, INT32_MIN
    elif code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        # A name no topic can have: INVALID_TOPIC_EXCEPTION (Kafka's
        # KafkaApis.getTopicMetadata validates the names it does not know).
        try:
            validate_topic_name(name)
        except KafkaError as invalid:
            code = invalid.code
    return {"error_code": code, "name": name, "is_internal": False, "partitions": [],
            "topic_authorized_operations": operations}


MAX_PARTITIONS_PER_DESCRIBE = 2000  # Kafka's max.request.partition.size.limit


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
def describe_topic_partitions(broker: Broker, header, request) -> dict:
    """KIP-966: the topics (all when none are named: those the principal may describe), sorted
    by name, from the cursor on, at most ``response_partition_limit`` partitions (and at most
    Kafka's 2000); ``next_cursor`` names the first partition left out. One broker: leader =
    replicas = isr = this node, no eligible leader replicas."""
    node = broker.config.node_id
    logs = broker.logs
    listing_all = not request.topics
    names = sorted(logs.topics()) if listing_all else sorted({t.name for t in request.topics})
    cursor = request.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    limit = max(0, min(request.response_partition_limit, MAX_PARTITIONS_PER_DESCRIBE))
    topics: list[dict] = []
    next_cursor = None
    for name in names:
        if not allowed(broker, Operation.DESCRIBE, ResourceType.TOPIC, name,
                       log_refusal=not listing_all):
            if not listing_all:
                topics.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name,
                               "topic_id": ZERO_UUID, "is_internal": False, "partitions": []})
            continue
        count = logs.partition_count(name)
        if count is None:
            topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                           "topic_id": ZERO_UUID, "is_internal": False, "partitions": []})
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        if limit <= 0:
            next_cursor = {"topic_name": name, "partition_index": first}
            break
        last = min(count, first + limit)
        topics.append({
            "error_code": ErrorCode.NONE,
            "name": name,
            "topic_id": logs.topic_id(name) or ZERO_UUID,
            "is_internal": name in INTERNAL_TOPICS,
            "partitions": [
                {"error_code": ErrorCode.NONE, "partition_index": index, "leader_id": node,
                 "replica_nodes": [node], "isr_nodes": [node], "eligible_leader_replicas": [],
                 "last_known_elr": [], "offline_replicas": []}
                for index in range(first, last)
            ],
            "topic_authorized_operations": authorized_operations(broker, ResourceType.TOPIC,
                                                                 name),
        })
        limit -= last - first
        if last < count:
            next_cursor = {"topic_name": name, "partition_index": last}
            break
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}


def may_create(broker: Broker, topic: str) -> bool:
    """Create on the cluster, or on the topic (Kafka's rule for CreateTopics and auto-creation;
    as Kafka, only the refusal on the topic is logged)."""
    return (allowed(broker, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME,
                    log_refusal=False)
            or allowed(broker, Operation.CREATE, ResourceType.TOPIC, topic))


# Kafka's message (ReplicationControlManager: more than 10,000 partitions in one CreateTopics).
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."


def _requested_partitions(broker: Broker, topic) -> int:
    """What a topic of a CreateTopics asks for, as Kafka counts it against its limit."""
    if topic.assignments:
        return len(topic.assignments)
    if topic.num_partitions == -1:
        return broker.config.num_partitions
    return max(topic.num_partitions, 0)


def _check_one(broker: Broker, topic) -> tuple[ErrorCode, str | None]:
    """The checks of one topic before the log manager's (authorization is checked before)."""
    if topic.replication_factor == 0 or topic.replication_factor < -1:
        return (ErrorCode.INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.")
    if topic.replication_factor > 1:  # Kafka's message: this is a cluster of one broker
        return (ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {topic.replication_factor} time(s): The target "
                f"replication factor of {topic.replication_factor} cannot be reached because only "
                "1 broker(s) are registered or some brokers have all their log directories cordoned.")
    if topic.assignments:
        return ErrorCode.INVALID_REQUEST, "manual replica assignments are not supported"
    if topic.name in INTERNAL_TOPICS:
        # Kafka creates its internal topics with the first coordinator lookup, then answers
        # TOPIC_ALREADY_EXISTS as for any topic; here the coordinators serve from the start.
        return ErrorCode.TOPIC_ALREADY_EXISTS, f"{topic.name} is an internal topic: it exists"
    return ErrorCode.NONE, None


@handles(ApiKey.CREATE_TOPICS)
def create_topics(broker: Broker, header, request) -> dict | Deferred[dict]:
    topics = list(request.topics)
    outcome: list[tuple[ErrorCode, str | None]] = [(ErrorCode.NONE, None)] * len(topics)
    todo: list[int] = []
    seen: set[str] = set()
    for i, topic in enumerate(topics):
        if topic.name in seen:
            outcome[i] = ErrorCode.INVALID_REQUEST, "topic listed twice in one request"
        elif not may_create(broker, topic.name):
            outcome[i] = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
        else:
            todo.append(i)
        seen.add(topic.name)
    # Kafka counts what the request asks for before any other check of its topics.
    if sum(_requested_partitions(broker, topics[i]) for i in todo) > (
            broker.config.max_partitions_per_request):
        for i in todo:
            outcome[i] = ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS
        todo = []
    pending: list[tuple[int, PendingTopic]] = []
    for i in todo:
        topic = topics[i]
        outcome[i] = _check_one(broker, topic)
        if outcome[i][0] != ErrorCode.NONE:
            continue
        count = broker.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        overrides = {c.name: c.value for c in topic.configs}
        try:
            if request.validate_only:
                broker.logs.validate_topic(topic.name, count, overrides)
            else:
                pending.append((i, broker.logs.prepare_topic(topic.name, count, overrides,
                                                             broker.clock.now_ms())))
        except KafkaError as exc:
            outcome[i] = exc.code, clip_message(exc.message) or None
    if not pending:
        return _create_topics_answer(broker, request, topics, outcome)

    async def create() -> dict:
        finished: set[int] = set()
        try:
            for i, topic_files in pending:
                # Not cancellable: a shutdown or a closed connection waits for the files.
                await trio.to_thread.run_sync(topic_files.build)
                finished.add(i)
                try:
                    broker.logs.finish_topic(topic_files)
                except KafkaError as exc:
                    outcome[i] = exc.code, clip_message(exc.message) or None
        finally:
            for i, topic_files in pending:
                if i not in finished:  # cancelled: commit what was built, release the name
                    with contextlib.suppress(KafkaError):
                        broker.logs.finish_topic(topic_files)
        return _create_topics_answer(broker, request, topics, outcome)

    return Deferred(create)


def _create_topics_answer(broker: Broker, request, topics: list,
                          outcome: list[tuple[ErrorCode, str | None]]) -> dict:
    results = []
    for topic, (code, message) in zip(topics, outcome, strict=True):
        count = broker.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        ok = code == ErrorCode.NONE
        result = {
            "name": topic.name, "error_code": code, "error_message": message,
            # v5+: what was (or would be) created and its configs, as DescribeConfigs has them
            # (Kafka's Java Admin reads them: null configs on a success is a NullPointerException)
            "num_partitions": count if ok else -1, "replication_factor": 1 if ok else -1,
            # a topic not created (or whose configs may not be described): an empty list, the
            # default of Kafka's generated CreatableTopicResult
            "configs": [],
        }
        if ok:
            result.update(_created_configs(broker, topic, request.validate_only))
        results.append(result)
    return {"throttle_time_ms": 0, "topics": results}


def _created_configs(broker: Broker, topic, validate_only: bool) -> dict:
    if not allowed(broker, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, topic.name):
        return {"topic_config_error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    overrides = ({c.name: c.value for c in topic.configs if c.value is not None}
                 if validate_only else None)
    entries = resources.describe_topic(broker.logs, broker.config, topic.name, None, overrides)
    return {"configs": [
        {"name": e.name, "value": e.value, "read_only": e.read_only, "config_source": e.source,
         "is_sensitive": False}
        for e in entries
    ]}


@handles(ApiKey.DELETE_TOPICS)
def delete_topics(broker: Broker, header, request) -> dict:
    responses = []
    for name in request.topic_names:  # (v6 names topics by name or id: not served)
        code = ErrorCode.NONE
        if not allowed(broker, Operation.DELETE, ResourceType.TOPIC, name):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif name in INTERNAL_TOPICS:
            code = ErrorCode.INVALID_REQUEST  # Kafka: TOPIC_AUTHORIZATION_FAILED-like refusal
        else:
            try:
                topic_id = broker.logs.topic_id(name)
                broker.logs.delete_topic(name)
                if broker.share is not None and topic_id is not None:
                    broker.share.topic_deleted(topic_id)  # share-partition state goes too
            except KafkaError as exc:
                code = exc.code
        responses.append({"name": name, "error_code": code})
    return {"throttle_time_ms": 0, "responses": responses}
