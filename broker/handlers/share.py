"""Share groups (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge.

Decoded request -> plain values -> ``broker.share`` (``broker/share/service.py``) -> the response
dict, built here. A ShareFetch that acquired nothing waits up to its ``max_wait_ms`` for records
(new data, a release, an expired lock); a request that changed share state is answered once the
state's record in ``__share_group_state`` is durable.

Authorization (Kafka's KafkaApis): READ on the group for all four (DESCRIBE for
ShareGroupDescribe); ShareFetch and ShareAcknowledge need READ on each topic (a refused one
answers TOPIC_AUTHORIZATION_FAILED for its partitions), ShareGroupHeartbeat DESCRIBE on the
subscribed topics.
"""

from __future__ import annotations

import uuid
from typing import Any

import trio

from broker.handlers import peer
from broker.handlers.authz import allowed, authorized_operations
from broker.handlers.context import Broker
from broker.handlers.marks import handles
from broker.reply import Deferred, after
from broker.security.acl import Operation, ResourceType
from broker.share.group import ASSIGNOR
from broker.share.partition_state import AckType
from broker.share.service import AckBatch, PartitionFetch, ShareService
from broker.share.sessions import FINAL_EPOCH
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError

MAX_WAIT_CAP_MS = 60_000


def _share(broker: Broker) -> ShareService:
    share = broker.share
    assert share is not None, "the composition root builds the share service"
    return share


@handles(ApiKey.SHARE_GROUP_HEARTBEAT)
def share_group_heartbeat(broker: Broker, header, request) -> dict:
    def error(code: ErrorCode, message: str | None = None) -> dict:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
                "member_id": None, "member_epoch": 0, "heartbeat_interval_ms": 0,
                "assignment": None}

    if not allowed(broker, Operation.READ, ResourceType.GROUP, request.group_id):
        return error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    subscribed = request.subscribed_topic_names
    if subscribed is not None and any(
            not allowed(broker, Operation.DESCRIBE, ResourceType.TOPIC, t) for t in subscribed):
        return error(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    share = _share(broker)
    try:
        result = share.heartbeat(request.group_id, request.member_id, request.member_epoch,
                                 request.rack_id, list(subscribed) if subscribed is not None
                                 else None, header.client_id or "", peer.client_host())
    except KafkaError as exc:
        return error(exc.code, exc.message)
    assignment = None
    if result.assignment is not None:
        assignment = {"topic_partitions": [
            {"topic_id": tid, "partitions": sorted(parts)}
            for tid, parts in sorted(result.assignment.items(), key=lambda kv: str(kv[0]))]}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "member_id": result.member_id, "member_epoch": result.member_epoch,
            # none in the answer to a leave, as Kafka's shareGroupLeave
            "heartbeat_interval_ms": (0 if request.member_epoch == -1
                                      else share.groups.timing(request.group_id)[1]),
            "assignment": assignment}


@handles(ApiKey.SHARE_GROUP_DESCRIBE)
def share_group_describe(broker: Broker, header, request) -> dict:
    share = _share(broker)
    groups = []
    for group_id in request.group_ids:
        entry: dict[str, Any] = {"group_id": group_id, "error_code": ErrorCode.NONE,
                                 "group_state": "", "assignor_name": ASSIGNOR, "members": []}
        if not allowed(broker, Operation.DESCRIBE, ResourceType.GROUP, group_id):
            entry["error_code"] = ErrorCode.GROUP_AUTHORIZATION_FAILED
            groups.append(entry)
            continue
        group = share.describe(group_id)
        if group is None and not share.is_share_group(group_id):
            entry.update(error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                         error_message=f"Group {group_id} not found.")
            groups.append(entry)
            continue
        if group is not None:
            entry.update(group_state=group.state, group_epoch=group.epoch,
                         assignment_epoch=group.assignment_epoch)
            entry["members"] = [{
                "member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.epoch,
                "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": m.subscribed,
                "assignment": {"topic_partitions": [
                    {"topic_id": tid, "topic_name": share.topic_name(tid) or "",
                     "partitions": sorted(parts)} for tid, parts in m.assignment.items()]},
            } for m in group.members.values()]
        else:
            entry["group_state"] = "Empty"
        if request.include_authorized_operations:
            entry["authorized_operations"] = authorized_operations(
                broker, ResourceType.GROUP, group_id)
        groups.append(entry)
    return {"throttle_time_ms": 0, "groups": groups}


def _ack_batches(batches) -> list[AckBatch]:
    return [AckBatch(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in batches]


def _topic_read(broker: Broker, share: ShareService, topic_id: uuid.UUID,
                cache: dict[uuid.UUID, bool]) -> bool:
    ok = cache.get(topic_id)
    if ok is None:
        name = share.topic_name(topic_id)
        ok = cache[topic_id] = name is None or allowed(broker, Operation.READ,
                                                       ResourceType.TOPIC, name)
    return ok


def _leader(broker: Broker) -> dict:
    return {"leader_id": broker.config.node_id, "leader_epoch": 0}


@handles(ApiKey.SHARE_FETCH)
def share_fetch(broker: Broker, header, request):
    share = _share(broker)
    version = header.api_version

    def top_error(code: ErrorCode, message: str | None = None) -> dict:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
                "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []}

    group_id, member_id = request.group_id, request.member_id
    if group_id and not allowed(broker, Operation.READ, ResourceType.GROUP, group_id):
        return top_error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    acks = [(t.topic_id, p.partition_index, _ack_batches(p.acknowledgement_batches))
            for t in request.topics for p in t.partitions if p.acknowledgement_batches]
    if version < 2 and any(t == AckType.RENEW for _, _, bs in acks for b in bs
                           for t in b.types):
        return top_error(ErrorCode.INVALID_REQUEST, "Renew needs ShareFetch v2.")
    epoch = request.share_session_epoch
    try:
        session = share.open_request(group_id, member_id, epoch, bool(acks), fetching=True)
    except KafkaError as exc:
        return top_error(exc.code, exc.message)
    if epoch == 0 and session is not None:  # released when this connection closes
        on_close = peer.session().on_close
        if "share" not in on_close:
            on_close["share"] = share.connection_sessions()
        on_close["share"].add(session)
    readable: dict[uuid.UUID, bool] = {}
    refused = {(tid, p) for tid, p, _ in acks if not _topic_read(broker, share, tid, readable)}
    dirty: set = set()
    ack_codes = share.acknowledge(group_id, member_id,
                                  [a for a in acks if (a[0], a[1]) not in refused], dirty)
    for key in refused:
        ack_codes[key] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if session is None:  # epoch -1: acknowledge, then close
        share.close_session(group_id, member_id)
        results = [PartitionFetch(tid, p, ack_error=code) for (tid, p), code in ack_codes.items()]
        return _fetch_answer(broker, share, group_id, results, dirty)
    for forgotten in request.forgotten_topics_data:
        for p in forgotten.partitions:
            session.partitions.pop((forgotten.topic_id, p), None)
    for t in request.topics:
        for p in t.partitions:
            session.partitions[(t.topic_id, p.partition_index)] = None
    # Topics the principal may not read are answered so and not fetched.
    blocked = [k for k in session.partitions if not _topic_read(broker, share, k[0], readable)]
    for key in blocked:
        del session.partitions[key]
    max_records = request.max_records if version >= 1 else 500

    def once() -> list[PartitionFetch]:
        results = share.fetch_once(group_id, member_id, session, max_records,
                                   request.max_bytes, dirty)
        for r in results:
            r.ack_error = ack_codes.pop((r.topic_id, r.partition), None)
        for (tid, p), code in ack_codes.items():
            results.append(PartitionFetch(tid, p, ack_error=code))
        for tid, p in blocked:
            results.append(PartitionFetch(tid, p, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        return results

    results = once()
    max_wait_ms = min(request.max_wait_ms, MAX_WAIT_CAP_MS)
    if _got_any(results) or max_wait_ms <= 0 or acks or dirty:
        # Acknowledgements (and new state) are answered without waiting for records: the
        # client waits for their outcome, and its next fetch waits instead.
        return _fetch_answer(broker, share, group_id, results, dirty)

    async def long_poll():
        deadline = trio.current_time() + max_wait_ms / 1000
        res = results
        while not _got_any(res) and trio.current_time() < deadline:
            await share.wait_for_records(deadline, broker.data_arrived)
            share.tick(broker.clock.now_ms())
            current = share.sessions.get(group_id, member_id)
            if current is not session:
                break  # closed or replaced meanwhile
            res = once()
        answer = _fetch_answer(broker, share, group_id, res, dirty)
        if isinstance(answer, Deferred):
            return await answer.wait()
        return answer

    return Deferred(long_poll)


def _got_any(results: list[PartitionFetch]) -> bool:
    return any(r.acquired or r.error != ErrorCode.NONE for r in results)


def _fetch_answer(broker: Broker, share: ShareService, group_id: str,
                  results: list[PartitionFetch], dirty: set):
    by_topic: dict[uuid.UUID, list] = {}
    for r in results:
        by_topic.setdefault(r.topic_id, []).append({
            "partition_index": r.partition,
            "error_code": r.error,
            "acknowledge_error_code": r.ack_error if r.ack_error is not None else 0,
            "current_leader": _leader(broker),
            "records": r.records if r.acquired else b"",
            "acquired_records": [a._asdict() for a in r.acquired],
        })
    body = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "acquisition_lock_timeout_ms": share.lock_ms_for(group_id),
            "responses": [{"topic_id": tid, "partitions": parts}
                          for tid, parts in by_topic.items()],
            "node_endpoints": []}
    return _durable(share, dirty, body)


def _durable(share: ShareService, dirty: set, body: dict):
    if not dirty:
        return body
    try:
        commits = share.persist(dirty)
    except KafkaError as exc:
        return {**body, "error_code": exc.code, "responses": []}
    return after(commits, body) if commits else body


@handles(ApiKey.SHARE_ACKNOWLEDGE)
def share_acknowledge(broker: Broker, header, request):
    share = _share(broker)
    version = header.api_version
    group_id, member_id = request.group_id, request.member_id

    def top_error(code: ErrorCode, message: str | None = None) -> dict:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
                "responses": [], "node_endpoints": []}

    if group_id and not allowed(broker, Operation.READ, ResourceType.GROUP, group_id):
        return top_error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    acks = [(t.topic_id, p.partition_index, _ack_batches(p.acknowledgement_batches))
            for t in request.topics for p in t.partitions]
    if version < 2 and any(t == AckType.RENEW for _, _, bs in acks for b in bs
                           for t in b.types):
        return top_error(ErrorCode.INVALID_REQUEST, "Renew needs ShareAcknowledge v2.")
    epoch = request.share_session_epoch
    try:
        share.open_request(group_id, member_id, epoch, bool(acks), fetching=False)
    except KafkaError as exc:
        return top_error(exc.code, exc.message)
    readable: dict[uuid.UUID, bool] = {}
    refused = {(tid, p) for tid, p, _ in acks if not _topic_read(broker, share, tid, readable)}
    dirty: set = set()
    codes = share.acknowledge(group_id, member_id,
                              [a for a in acks if (a[0], a[1]) not in refused], dirty)
    for key in refused:
        codes[key] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if epoch == FINAL_EPOCH:
        share.close_session(group_id, member_id)
    by_topic: dict[uuid.UUID, list] = {}
    for (tid, p), code in codes.items():
        by_topic.setdefault(tid, []).append({"partition_index": p, "error_code": code,
                                             "current_leader": _leader(broker)})
    body = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "acquisition_lock_timeout_ms": share.lock_ms_for(group_id),
            "responses": [{"topic_id": tid, "partitions": parts}
                          for tid, parts in by_topic.items()],
            "node_endpoints": []}
    return _durable(share, dirty, body)


# -- share-group offsets (admin) ---------------------------------------------------------------


@handles(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
def describe_share_group_offsets(broker: Broker, header, request) -> dict:
    """Kafka: DESCRIBE on the group, DESCRIBE on each topic (partitions of a refused topic are
    answered TOPIC_AUTHORIZATION_FAILED); null topics = every topic the group has state on."""
    share = _share(broker)
    groups = []
    for group in request.groups:
        entry: dict[str, Any] = {"group_id": group.group_id, "topics": [], "error_code": 0}
        if not allowed(broker, Operation.DESCRIBE, ResourceType.GROUP, group.group_id):
            entry["error_code"] = ErrorCode.GROUP_AUTHORIZATION_FAILED
            groups.append(entry)
            continue
        wanted = ({t.topic_name: list(t.partitions) for t in group.topics}
                  if group.topics is not None else share.group_topics(group.group_id))
        for name, partitions in wanted.items():
            ok = allowed(broker, Operation.DESCRIBE, ResourceType.TOPIC, name)
            rows = []
            for index in partitions:
                row = {"partition_index": index, "start_offset": -1, "leader_epoch": 0,
                       "lag": -1, "error_code": 0}
                try:
                    if not ok:
                        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    row["start_offset"], row["lag"] = share.start_offset(group.group_id, name,
                                                                         index)
                except KafkaError as exc:
                    row["error_code"], row["error_message"] = exc.code, exc.message or None
                rows.append(row)
            topic_id = broker.logs.topic_id(name) if ok else None
            entry["topics"].append({"topic_name": name, "partitions": rows,
                                    **({"topic_id": topic_id} if topic_id else {})})
        groups.append(entry)
    return {"throttle_time_ms": 0, "groups": groups}


# The admin offset APIs' refusals of the whole group (the others are per topic).
_GROUP_ERRORS = (ErrorCode.NON_EMPTY_GROUP, ErrorCode.INVALID_GROUP_ID)


@handles(ApiKey.ALTER_SHARE_GROUP_OFFSETS)
def alter_share_group_offsets(broker: Broker, header, request):
    """Kafka: READ on the group and on each topic; the group must have no members."""
    share = _share(broker)
    if not allowed(broker, Operation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                "responses": []}
    responses, commits = [], []
    for topic in request.topics:
        parts = [(p.partition_index, p.start_offset) for p in topic.partitions]
        try:
            if not allowed(broker, Operation.READ, ResourceType.TOPIC, topic.topic_name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            codes, waits = share.alter_offsets(request.group_id, topic.topic_name, parts)
            commits += waits
        except KafkaError as exc:
            if exc.code in _GROUP_ERRORS:
                return {"throttle_time_ms": 0, "error_code": exc.code,
                        "error_message": exc.message, "responses": []}
            codes = {index: exc.code for index, _ in parts}
        topic_id = broker.logs.topic_id(topic.topic_name)
        responses.append({"topic_name": topic.topic_name,
                          **({"topic_id": topic_id} if topic_id else {}),
                          "partitions": [{"partition_index": i, "error_code": c}
                                         for i, c in codes.items()]})
    body = {"throttle_time_ms": 0, "error_code": 0, "responses": responses}
    return after(commits, body) if commits else body


@handles(ApiKey.DELETE_SHARE_GROUP_OFFSETS)
def delete_share_group_offsets(broker: Broker, header, request):
    """Kafka: DELETE on the group, READ on each topic; the group must have no members."""
    share = _share(broker)
    if not allowed(broker, Operation.DELETE, ResourceType.GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                "responses": []}
    responses, commits = [], []
    for topic in request.topics:
        code, message = ErrorCode.NONE, None
        try:
            if not allowed(broker, Operation.READ, ResourceType.TOPIC, topic.topic_name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            commits += share.delete_offsets(request.group_id, topic.topic_name)
        except KafkaError as exc:
            if exc.code in _GROUP_ERRORS:
                return {"throttle_time_ms": 0, "error_code": exc.code,
                        "error_message": exc.message, "responses": []}
            code, message = exc.code, exc.message or None
        topic_id = broker.logs.topic_id(topic.topic_name)
        responses.append({"topic_name": topic.topic_name, "error_code": code,
                          "error_message": message,
                          **({"topic_id": topic_id} if topic_id else {})})
    body = {"throttle_time_ms": 0, "error_code": 0, "responses": responses}
    return after(commits, body) if commits else body
