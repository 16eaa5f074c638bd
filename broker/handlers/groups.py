"""Consumer groups and committed offsets: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DescribeGroups, OffsetCommit, OffsetFetch, TxnOffsetCommit, and the consumer group protocol's
ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848) (the versions: ``SERVED``).

The decoded request -> plain values -> ``broker.groups`` (``broker/group/service.py``, which
knows no protocol message) -> codes and results -> the response dict, built here. JoinGroup and
SyncGroup may wait for other members, OffsetCommit and TxnOffsetCommit for their fsync: those
return a ``Deferred``.
"""

from __future__ import annotations

from broker.group.assignors import Assignment
from broker.group.consumer_group import (
    MEMBER_TYPE_CLASSIC,
    MEMBER_TYPE_CONSUMER,
    HeartbeatRequest,
    HeartbeatResult,
)
from broker.group.coordinator import JoinResult, SyncResult
from broker.group.offset_service import FetchedOffset, OffsetToCommit, TxnProducer
from broker.handlers import peer
from broker.handlers.authz import allowed, authorized_operations
from broker.handlers.context import Broker
from broker.handlers.marks import handles
from broker.handlers.txn import add_group, producer_fenced
from broker.reply import Deferred, reply
from broker.security.acl import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.text import clip

INT32_MIN = -(1 << 31)  # an authorized-operations field that was not asked for


def _group_ok(broker: Broker, operation: Operation, group_id: str) -> bool:
    return allowed(broker, operation, ResourceType.GROUP, group_id)


def _split_topics(broker: Broker, request, operation: Operation) -> list:
    """Keep in ``request.topics`` the topics the principal may ``operation``; return the
    others' answers (TOPIC_AUTHORIZATION_FAILED per partition), to add to the response."""
    refused = [t for t in request.topics
               if not allowed(broker, operation, ResourceType.TOPIC, t.name)]
    if not refused:
        return []
    request.topics = [t for t in request.topics if t not in refused]
    return [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
        for p in t.partitions]} for t in refused]


def _with_refused(result, refused: list):
    if not refused:
        return result
    return reply(result, lambda r: {**r, "topics": [*r["topics"], *refused]})


def _offsets(topics) -> list[OffsetToCommit]:
    """The partitions of an (Txn)OffsetCommit request's ``topics``, in order."""
    return [OffsetToCommit(t.name, p.partition_index, p.committed_offset, p.committed_metadata)
            for t in topics for p in t.partitions]


def _commit_topics(topics, codes: list[ErrorCode]) -> list[dict]:
    """The response's topics: the request's, each partition with its code (``codes`` in the
    order of ``_offsets(topics)``)."""
    next_code = iter(codes)
    return [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": next(next_code)}
        for p in t.partitions]} for t in topics]


def _fetched_partition(f: FetchedOffset) -> dict:
    return {"partition_index": f.partition, "committed_offset": f.offset,
            "metadata": f.metadata, "error_code": f.error}


def _fetch_topics(topics, fetched: list[FetchedOffset]) -> list[dict]:
    """The response's topics: the request's (in its order), or, for all topics (``topics``
    None), one per topic of the sorted answer."""
    if topics is not None:
        rows = iter(fetched)
        return [{"name": t.name, "partitions": [_fetched_partition(next(rows))
                                                for _ in t.partition_indexes]} for t in topics]
    out: list[dict] = []
    for f in fetched:
        if not out or out[-1]["name"] != f.topic:
            out.append({"name": f.topic, "partitions": []})
        out[-1]["partitions"].append(_fetched_partition(f))
    return out


def _join_response(result: JoinResult, version: int) -> dict:
    instance_ids = result.member_instance_ids or (None,) * len(result.members)
    ok = result.error == ErrorCode.NONE
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "generation_id": result.generation_id,
        # v7+: the protocol type and name, null on errors (as Kafka); older versions: ""
        "protocol_type": result.protocol_type or None,
        "protocol_name": result.protocol_name if ok or version < 7 else None,
        "leader": result.leader,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [
            {"member_id": m, "group_instance_id": instance, "metadata": metadata}
            for (m, metadata), instance in zip(result.members, instance_ids, strict=True)
        ],
    }


@handles(ApiKey.JOIN_GROUP)
def join_group(broker: Broker, header, request):
    version = header.api_version
    if not _group_ok(broker, Operation.READ, request.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "generation_id": -1,
                "protocol_name": "" if version < 7 else None, "leader": "", "members": [],
                "member_id": request.member_id}
    rebalance_timeout_ms = request.rebalance_timeout_ms
    if rebalance_timeout_ms < 0:  # JoinGroup v0 has none: the session timeout (as Kafka)
        rebalance_timeout_ms = request.session_timeout_ms
    result = broker.groups.join_group(
        request.group_id, request.member_id, header.client_id or "", peer.client_host(),
        request.session_timeout_ms, rebalance_timeout_ms, request.protocol_type,
        [(p.name, p.metadata) for p in request.protocols], broker.clock.now_ms(),
        group_instance_id=request.get("group_instance_id"),
        require_known_member_id=version >= 4,  # KIP-394
    )
    return reply(result, lambda r: _join_response(r, version))


@handles(ApiKey.SYNC_GROUP)
def sync_group(broker: Broker, header, request):
    version = header.api_version
    group_id = request.group_id
    if not _group_ok(broker, Operation.READ, group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "assignment": b""}

    def encode(result: SyncResult) -> dict:
        response = {"throttle_time_ms": 0, "error_code": result.error,
                    "assignment": result.assignment}
        if version >= 5 and result.error == ErrorCode.NONE:
            if broker.groups.is_consumer_group(group_id):
                # a classic member of a consumer group: Kafka echoes the request's (checked)
                # protocol type and name (classicGroupSyncToConsumerGroup)
                response["protocol_type"] = request.get("protocol_type")
                response["protocol_name"] = request.get("protocol_name")
                return response
            summary = broker.groups.describe_group(group_id, broker.clock.now_ms())
            response["protocol_type"] = summary.protocol_type
            response["protocol_name"] = summary.protocol
        return response

    # v5 (KIP-559): the protocol type and name must be the group's (the coordinator checks).
    result = broker.groups.sync_group(
        group_id, request.generation_id, request.member_id,
        {a.member_id: a.assignment for a in request.assignments}, broker.clock.now_ms(),
        group_instance_id=request.get("group_instance_id"),
        protocol_type=request.get("protocol_type"),
        protocol_name=request.get("protocol_name"),
    )
    return reply(result, encode)


@handles(ApiKey.HEARTBEAT)
def heartbeat(broker: Broker, header, request) -> dict:
    if not _group_ok(broker, Operation.READ, request.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    error = broker.groups.heartbeat(
        request.group_id, request.generation_id, request.member_id, broker.clock.now_ms(),
        request.group_instance_id,
    )
    return {"throttle_time_ms": 0, "error_code": error}


@handles(ApiKey.LEAVE_GROUP)
def leave_group(broker: Broker, header, request) -> dict:
    now = broker.clock.now_ms()
    if not _group_ok(broker, Operation.READ, request.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                "members": []}
    if header.api_version < 3:
        return {"throttle_time_ms": 0,
                "error_code": broker.groups.leave_group(request.group_id, request.member_id, now)}
    # v3+ (KIP-345): a batch of members, each by member id and/or group.instance.id
    members = [
        {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
         "error_code": broker.groups.leave_group(
             request.group_id, m.member_id, now, m.group_instance_id)}
        for m in request.members
    ]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "members": members}


@handles(ApiKey.DESCRIBE_GROUPS)
def describe_groups(broker: Broker, header, request) -> dict:
    now = broker.clock.now_ms()
    # v3+: the operations the principal may do on each group it may describe (Kafka's bits).
    with_operations = header.api_version >= 3 and request.include_authorized_operations
    groups = []
    for group_id in request.groups:
        if not _group_ok(broker, Operation.DESCRIBE, group_id):
            groups.append({"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                           "group_id": group_id, "group_state": "", "protocol_type": "",
                           "protocol_data": "", "members": []})
            continue
        summary = broker.groups.describe_group(group_id, now)
        if header.api_version >= 6 and (broker.groups.is_consumer_group(group_id) or (
                broker.streams is not None and broker.streams.is_streams_group(group_id))):
            # A consumer-protocol group is not a classic group (Kafka's answer; tools then ask
            # ConsumerGroupDescribe).
            groups.append({"error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                           "error_message": f"Group {group_id} is not a classic group.",
                           "group_id": group_id, "group_state": "Dead", "protocol_type": "",
                           "protocol_data": "", "members": []})
            continue
        if header.api_version >= 6 and summary.state == "Dead":
            # v6+ (KIP-1043): a group that does not exist is an error, as Kafka 4 answers it
            groups.append({"error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                           "error_message": f"Group {clip(group_id)} not found.", "group_id": group_id,
                           "group_state": "Dead", "protocol_type": "", "protocol_data": "",
                           "members": []})
            continue
        groups.append(
            {
                "error_code": ErrorCode.NONE,
                "group_id": summary.group_id,
                "group_state": summary.state,
                "protocol_type": summary.protocol_type,
                "protocol_data": summary.protocol,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in summary.members
                ],
                "authorized_operations": (
                    authorized_operations(broker, ResourceType.GROUP, group_id)
                    if with_operations else INT32_MIN),
            }
        )
    return {"throttle_time_ms": 0, "groups": groups}


@handles(ApiKey.OFFSET_COMMIT)
def offset_commit(broker: Broker, header, request):
    if not _group_ok(broker, Operation.READ, request.group_id):
        return _txn_offsets_refused(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    refused = _split_topics(broker, request, Operation.READ)
    topics = request.topics
    codes = broker.groups.commit_offsets(
        request.group_id, request.generation_id, request.member_id, _offsets(topics),
        broker.clock.now_ms(), request.get("group_instance_id"), header.api_version,
    )
    return _with_refused(reply(codes, lambda c: {"topics": _commit_topics(topics, c)}), refused)


@handles(ApiKey.OFFSET_FETCH)
def offset_fetch(broker: Broker, header, request) -> dict:
    now = broker.clock.now_ms()
    stable = request.require_stable

    def fetch(group_id: str, topics, member_id: str | None = None, member_epoch: int = -1
              ) -> dict:
        # Describe on the group; partitions of topics it may not describe are left out (all
        # topics, without a refusal line each) or answered TOPIC_AUTHORIZATION_FAILED (named
        # topics), as in Kafka.
        if not _group_ok(broker, Operation.DESCRIBE, group_id):
            if header.api_version < 2:
                # v0-1 have no top-level error: as Kafka, the error on every requested
                # partition (an empty answer would send the client to auto.offset.reset).
                return {"topics": [{"name": t.name, "partitions": [
                    {"partition_index": index, "committed_offset": -1, "metadata": "",
                     "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
                    for index in t.partition_indexes]} for t in topics or ()],
                        "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
            return {"topics": [], "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
        # v9+ (KIP-848): a member of a consumer-protocol group names itself and its epoch.
        error = broker.groups.validate_offset_fetch(group_id, member_id, member_epoch, now)
        if error != ErrorCode.NONE:
            return {"topics": [], "error_code": error}
        fetched = broker.groups.fetch_offsets(
            group_id, None if topics is None else [(t.name, t.partition_indexes) for t in topics],
            now, stable)
        answered = _fetch_topics(topics, fetched)
        if broker.security.authorizer is None:
            return {"topics": answered, "error_code": ErrorCode.NONE}
        kept = []
        for t in answered:
            if allowed(broker, Operation.DESCRIBE, ResourceType.TOPIC, t["name"],
                       log_refusal=topics is not None):
                kept.append(t)
            elif topics is not None:
                kept.append({"name": t["name"], "partitions": [
                    {"partition_index": p["partition_index"], "committed_offset": -1,
                     "metadata": "", "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
                    for p in t["partitions"]]})
        return {"topics": kept, "error_code": ErrorCode.NONE}

    if header.api_version < 8:
        return {"throttle_time_ms": 0, **fetch(request.group_id, request.topics)}
    # v8+: a batch of groups (KIP-709)
    return {"throttle_time_ms": 0, "groups": [
        {"group_id": g.group_id, **fetch(g.group_id, g.topics, g.member_id, g.member_epoch)}
        for g in request.groups
    ]}


TV2_TXN_OFFSET_COMMIT = 5  # the first version of transaction version 2 (KIP-890 part 2)


@handles(ApiKey.TXN_OFFSET_COMMIT)
def txn_offset_commit(broker: Broker, header, request):
    """v5+ (transaction version 2): no AddOffsetsToTxn before it; the group's offsets partition
    joins the transaction here, then the offsets are stored as in v0-4. Authorization as in
    Kafka: Write on the transactional id, Read on the group, Read on each topic."""
    if not allowed(broker, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                   request.transactional_id):
        return _txn_offsets_refused(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not _group_ok(broker, Operation.READ, request.group_id):
        return _txn_offsets_refused(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    refused = _split_topics(broker, request, Operation.READ)
    return _with_refused(_txn_offset_commit(broker, header, request), refused)


def _store_txn_offsets(broker: Broker, request):
    topics = request.topics
    codes = broker.groups.txn_commit_offsets(
        request.group_id,
        TxnProducer(request.transactional_id, request.producer_id, request.producer_epoch),
        _offsets(topics), broker.clock.now_ms(),
        generation_id=request.get("generation_id", -1), member_id=request.get("member_id", ""),
        group_instance_id=request.get("group_instance_id"),
    )
    return reply(codes, lambda c: {"throttle_time_ms": 0, "topics": _commit_topics(topics, c)})


def _txn_offset_commit(broker: Broker, header, request):
    if header.api_version < TV2_TXN_OFFSET_COMMIT:
        return _store_txn_offsets(broker, request)
    if not request.group_id:
        return _txn_offsets_refused(request, ErrorCode.INVALID_GROUP_ID)
    added = add_group(broker, request)

    def store(code: ErrorCode):
        if code != ErrorCode.NONE:
            return _txn_offsets_refused(request, producer_fenced(code, header.api_version, 2))
        return _store_txn_offsets(broker, request)

    if not isinstance(added, Deferred):
        return store(added)

    async def stored():
        result = store(await added.wait())
        return await result.wait() if isinstance(result, Deferred) else result

    return Deferred(stored)


def _txn_offsets_refused(request, code: ErrorCode) -> dict:
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": code} for p in t.partitions]}
        for t in request.topics]}


# -- the consumer group protocol (KIP-848) ------------------------------------------------------


def _by_name(broker: Broker, topic_partitions) -> Assignment:
    """Owned partitions named by topic id -> by name (ids of topics gone are dropped)."""
    owned: dict[str, frozenset[int]] = {}
    for tp in topic_partitions:
        name = broker.logs.topic_name(tp.topic_id)
        if name is not None and tp.partitions:
            owned[name] = owned.get(name, frozenset()) | frozenset(tp.partitions)
    return owned


def _by_id(broker: Broker, assignment: Assignment, with_names: bool = False) -> list[dict]:
    out = []
    for topic, partitions in sorted(assignment.items()):
        topic_id = broker.logs.topic_id(topic)
        if topic_id is None:
            continue
        entry = {"topic_id": topic_id, "partitions": sorted(partitions)}
        if with_names:
            entry["topic_name"] = topic
        out.append(entry)
    return out


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT)
def consumer_group_heartbeat(broker: Broker, header, request):
    """v0: a member joining with an empty member id gets one; v1 (KIP-1082): the member
    chooses it, and may subscribe by regex (RE2)."""
    if not _group_ok(broker, Operation.READ, request.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                "member_epoch": 0, "heartbeat_interval_ms": 0}
    names = request.subscribed_topic_names
    heartbeat = HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=request.subscribed_topic_regex,
        server_assignor=request.server_assignor,
        owned=(None if request.topic_partitions is None
               else _by_name(broker, request.topic_partitions)),
        client_id=header.client_id or "",
        client_host=peer.client_host(),
        version=header.api_version,
    )

    def encode(result: HeartbeatResult) -> dict:
        return {
            "throttle_time_ms": 0,
            "error_code": result.error,
            "error_message": result.message,
            "member_id": result.member_id,
            "member_epoch": result.member_epoch,
            "heartbeat_interval_ms": result.heartbeat_interval_ms,
            "assignment": (None if result.assignment is None
                           else {"topic_partitions": _by_id(broker, result.assignment)}),
        }

    return reply(broker.groups.consumer_group_heartbeat(heartbeat, broker.clock.now_ms()),
                 encode)


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE)
def consumer_group_describe(broker: Broker, header, request) -> dict:
    now = broker.clock.now_ms()
    broker.groups.run_timers(now)
    groups = []
    for group_id in request.group_ids:
        empty = {"group_id": group_id, "group_state": "", "group_epoch": 0,
                 "assignment_epoch": 0, "assignor_name": "", "members": []}
        if not _group_ok(broker, Operation.DESCRIBE, group_id):
            groups.append({**empty, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED})
            continue
        group = broker.groups.consumer.groups.get(group_id)
        if group is None:
            message = (f"Group {group_id} is not a consumer group."
                       if group_id in broker.groups.coordinator.groups
                       else f"Group {group_id} not found.")
            groups.append({**empty, "error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                           "error_message": message})
            continue
        groups.append({
            "error_code": ErrorCode.NONE,
            "group_id": group_id,
            "group_state": group.state.value,
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor_name": group.assignor,
            "members": [
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "rack_id": m.rack_id,
                    "member_epoch": m.member_epoch,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed_topic_names),
                    # "" without a regex, as Kafka answers
                    "subscribed_topic_regex": m.subscribed_topic_regex or "",
                    # what it is still responsible for: its partitions and those it has
                    # yet to revoke (Kafka's asConsumerGroupDescribeMember)
                    "assignment": {"topic_partitions": _by_id(broker, {
                        t: m.assigned.get(t, frozenset()) | m.pending_revocation.get(
                            t, frozenset()) for t in {*m.assigned, *m.pending_revocation}},
                        True)},
                    "target_assignment": {"topic_partitions": _by_id(
                        broker, group.target.get(m.member_id, {}), True)},
                    "member_type": (MEMBER_TYPE_CONSUMER if m.classic is None
                                    else MEMBER_TYPE_CLASSIC),
                }
                for m in group.members.values()
            ],
            "authorized_operations": (
                authorized_operations(broker, ResourceType.GROUP, group_id)
                if request.include_authorized_operations else INT32_MIN),
        })
    return {"throttle_time_ms": 0, "groups": groups}
