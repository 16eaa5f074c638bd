"""Transactions: FindCoordinator v1, AddPartitionsToTxn v0, AddOffsetsToTxn v0, EndTxn v0,
WriteTxnMarkers v0, DescribeTransactions v0, ListTransactions v0. (InitProducerId is in
``producer_id.py``.)

Decode -> ``broker.transactions`` (``broker/txn/manager.py``) -> response. EndTxn answers once
its outcome is durable (a ``Deferred`` or ``AnswerFirst`` reply); AddPartitionsToTxn and
AddOffsetsToTxn answer once their record is appended (the transaction's Prepare record makes it
durable).
"""

from __future__ import annotations

from functools import partial

from broker.handlers import peer
from broker.handlers.authz import allowed
from broker.handlers.context import Broker
from broker.handlers.marks import handles
from broker.log.topics import INTERNAL_TOPICS
from broker.reply import Deferred, reply
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from broker.txn.state import TxnState
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError

COORDINATOR_KEY_TYPES = (0, 1)  # 0 = group, 1 = transaction


@handles(ApiKey.FIND_COORDINATOR)
def find_coordinator(broker: Broker, header, request) -> dict:
    """This broker coordinates every group and transactional id: the same node, host and port as
    Metadata (docs/protocol.md section 7.2)."""
    host, port = peer.advertised(broker.config.advertised)

    def coordinator(key: str) -> dict:
        if request.key_type not in COORDINATOR_KEY_TYPES:
            return {"key": key, "error_code": ErrorCode.INVALID_REQUEST,
                    "error_message": f"unknown key type {request.key_type}",
                    "node_id": -1, "host": "", "port": -1}
        # Describe on the group or transactional id (Kafka's rule).
        resource = ResourceType.TRANSACTIONAL_ID if request.key_type == 1 else ResourceType.GROUP
        if not allowed(broker, Operation.DESCRIBE, resource, key):
            code = (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if request.key_type == 1
                    else ErrorCode.GROUP_AUTHORIZATION_FAILED)
            return {"key": key, "error_code": code, "error_message": None,
                    "node_id": -1, "host": "", "port": -1}
        return {"key": key, "error_code": ErrorCode.NONE, "error_message": None,
                "node_id": broker.config.node_id, "host": host, "port": port}

    if header.api_version >= 4:  # a batch of keys (KIP-699)
        return {"throttle_time_ms": 0,
                "coordinators": [coordinator(k) for k in request.coordinator_keys]}
    return {"throttle_time_ms": 0, **coordinator(request.key)}


def producer_fenced(code: ErrorCode, version: int, first: int) -> ErrorCode:
    """The coordinator raises INVALID_PRODUCER_EPOCH for a stale epoch; from version ``first`` of
    the API on (KIP-588) Kafka answers PRODUCER_FENCED for it, older versions keep the old code."""
    if code == ErrorCode.INVALID_PRODUCER_EPOCH and version >= first:
        return ErrorCode.PRODUCER_FENCED
    return code


@handles(ApiKey.ADD_PARTITIONS_TO_TXN)
def add_partitions_to_txn(broker: Broker, header, request):
    version = header.api_version
    topics = []  # (topic, its partitions)
    requested = []
    unknown = set()
    for t in request.topics:
        topic, indexes = t.name, t.partitions
        topics.append((topic, indexes))
        for index in indexes:
            requested.append((topic, index))
            try:
                broker.partition(topic, index)
            except KafkaError:
                unknown.add((topic, index))

    transactional_id = request.transactional_id
    if not allowed(broker, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return _every_partition(topics, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    # Internal topics are refused whoever asks (Kafka: TOPIC_AUTHORIZATION_FAILED, authorizer
    # or not): the markers EndTxn writes would land in the broker's own logs.
    refused = set()
    for topic, _ in topics:
        if topic in INTERNAL_TOPICS or not allowed(broker, Operation.WRITE, ResourceType.TOPIC,
                                                   topic):
            refused.add(topic)
    if refused or unknown:
        # As Kafka: nothing is added; the others are reported as not attempted.
        return _answer(
            [(topic, [(p, ErrorCode.TOPIC_AUTHORIZATION_FAILED if topic in refused
                       else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if (topic, p) in unknown
                       else ErrorCode.OPERATION_NOT_ATTEMPTED) for p in indexes])
             for topic, indexes in topics])
    result = broker.transactions.add_partitions(
        transactional_id, request.producer_id, request.producer_epoch, requested,
        broker.clock.now_ms(),
    )
    if isinstance(result, Deferred):  # only while the previous transaction completes
        return result.then(partial(_added, topics, version))
    return _every_partition(topics, producer_fenced(result, version, 2))


def _answer(results: list[tuple[str, list[tuple[int, ErrorCode]]]]) -> dict:
    """The AddPartitionsToTxn answer: ``[(topic, [(partition, error code), ...]), ...]``."""
    return {"throttle_time_ms": 0, "results": [
        {"name": topic, "results": [{"partition_index": p, "error_code": code}
                                    for p, code in answers]}
        for topic, answers in results]}


def _every_partition(topics: list[tuple[str, list[int]]], code: ErrorCode) -> dict:
    """The AddPartitionsToTxn answer with ``code`` for every partition."""
    return _answer([(topic, [(p, code) for p in indexes]) for topic, indexes in topics])


def _added(topics: list[tuple[str, list[int]]], version: int, code: ErrorCode) -> dict:
    """The answer once the transaction service decided (``code``: for every partition)."""
    return _every_partition(topics, producer_fenced(code, version, 2))


def add_group(broker: Broker, request):
    """The group's ``__consumer_offsets`` partition joins the producer's transaction (what
    AddOffsetsToTxn does, and TxnOffsetCommit v5 by itself)."""
    return broker.transactions.add_partitions(
        request.transactional_id, request.producer_id, request.producer_epoch,
        [broker.cross.offsets_partition(request.group_id)], broker.clock.now_ms(),
    )


@handles(ApiKey.ADD_OFFSETS_TO_TXN)
def add_offsets_to_txn(broker: Broker, header, request):
    if not allowed(broker, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                   request.transactional_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not allowed(broker, Operation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if not request.group_id:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_GROUP_ID}
    result = add_group(broker, request)
    version = header.api_version
    return reply(result, lambda code: {"throttle_time_ms": 0,
                                       "error_code": producer_fenced(code, version, 2)})


TV2_END_TXN = 5  # the first version of transaction version 2 (KIP-890 part 2)


@handles(ApiKey.END_TXN)
def end_txn(broker: Broker, header, request):
    """v5+ (transaction version 2): every end bumps the producer epoch (a late request of this
    transaction then carries a stale epoch) and the answer carries the pair to go on with."""
    version = header.api_version
    if not allowed(broker, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                   request.transactional_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    tv2 = version >= TV2_END_TXN
    transactions = broker.transactions
    transactional_id = request.transactional_id
    result = transactions.end_txn(
        transactional_id, request.producer_id, request.producer_epoch,
        request.committed, broker.clock.now_ms(), bump_epoch=tv2, answer_first=True,
    )
    return reply(result, partial(_ended, transactions, transactional_id, version))


def _ended(transactions, transactional_id: str, version: int, code: ErrorCode) -> dict:
    """The EndTxn answer for ``code``; from v5 (transaction version 2) with the producer id and
    epoch to go on with."""
    if version >= TV2_END_TXN and code == ErrorCode.NONE:
        producer_id, epoch = transactions.producer_after_end(transactional_id)
        return {"throttle_time_ms": 0, "error_code": code, "producer_id": producer_id,
                "producer_epoch": epoch}
    return {"throttle_time_ms": 0, "error_code": producer_fenced(code, version, 2)}


@handles(ApiKey.WRITE_TXN_MARKERS)
def write_txn_markers(broker: Broker, header, request):
    """The broker-internal marker API: the same path the coordinator uses for its own markers.
    Answers once every marker written is durable; which markers are accepted is the transaction
    service's rule (``TransactionManager.write_markers``), after Kafka's ClusterAction check."""

    cluster_action = allowed(broker, Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)

    async def write_all() -> dict:
        markers = []
        for marker in request.markers:
            pid, epoch, commit = marker.producer_id, marker.producer_epoch, marker.transaction_result
            errors: dict = {}
            partitions = []
            for t in marker.topics:
                for p in t.partition_indexes:
                    if not cluster_action:  # ClusterAction: Kafka's rule
                        errors[(t.name, p)] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    elif not commit and _still_running(broker, pid, (t.name, p)):
                        errors[(t.name, p)] = ErrorCode.TRANSACTION_COORDINATOR_FENCED
                    else:
                        partitions.append((t.name, p))
            if partitions:
                errors.update(await broker.transactions.write_markers(
                    pid, epoch, commit, marker.coordinator_epoch, partitions,
                    broker.clock.now_ms(),
                ).wait())
            markers.append({
                "producer_id": marker.producer_id,
                "topics": [
                    {
                        "name": t.name,
                        "partitions": [
                            {"partition_index": p, "error_code": errors[(t.name, p)]}
                            for p in t.partition_indexes
                        ],
                    }
                    for t in marker.topics
                ],
            })
        return {"markers": markers}

    return Deferred(write_all)


def _still_running(broker: Broker, producer_id: int, tp: tuple[str, int]) -> bool:
    """Whether the coordinator still runs (Ongoing, not yet ending) a transaction of
    ``producer_id`` on ``tp``. An operator's ABORT marker for it (kafka-transactions.sh abort
    --topic --partition) is refused with TRANSACTION_COORDINATOR_FENCED, the partition leader's
    code for a marker from a coordinator that is not the transaction's: Kafka's broker, which
    cannot ask the coordinator, writes it; this one is its own coordinator. The transaction is
    ended through its id (``transactions abort --transactional-id``) or by its producer."""
    return any(md.producer_id == producer_id and md.state is TxnState.ONGOING
               and tp in md.partitions for md in broker.transactions.transactions())


@handles(ApiKey.DESCRIBE_TRANSACTIONS)
def describe_transactions(broker: Broker, header, request) -> dict:
    states = []
    for transactional_id in request.transactional_ids:
        md = broker.transactions.get(transactional_id) if transactional_id else None
        refused = not allowed(broker, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                              transactional_id)
        if md is None or refused:
            # Kafka (TransactionCoordinator.handleDescribeTransactions, and KafkaApis for a refused
            # id) sets only the id and the error: the other fields keep the schema's defaults, 0.
            states.append({
                "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if refused
                else ErrorCode.INVALID_REQUEST if not transactional_id
                else ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                "transactional_id": transactional_id, "transaction_state": "",
                "transaction_timeout_ms": 0, "transaction_start_time_ms": 0,
                "producer_id": 0, "producer_epoch": 0, "topics": [], "tagged_fields": {},
            })
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(md.partitions):
            by_topic.setdefault(topic, []).append(index)
        states.append({
            "error_code": ErrorCode.NONE,
            "transactional_id": transactional_id,
            "transaction_state": md.state.display_name,
            "transaction_timeout_ms": md.txn_timeout_ms,
            "transaction_start_time_ms": md.txn_start_ms,
            "producer_id": md.producer_id,
            "producer_epoch": md.producer_epoch,
            "topics": [{"topic": t, "partitions": ps, "tagged_fields": {}}
                       for t, ps in by_topic.items()],
            "tagged_fields": {},
        })
    return {"throttle_time_ms": 0, "transaction_states": states, "tagged_fields": {}}
