"""The Streams rebalance protocol (KIP-1071): StreamsGroupHeartbeat (88) and StreamsGroupDescribe
(89). The decoded request -> plain values -> ``broker.streams`` (``StreamsGroupService``) -> the
response dict, built here. A heartbeat waits for its group records to be durable (``Deferred``).

ACLs as Kafka's: Read on the group to heartbeat (and Describe+Create on the cluster, or Create
on each internal topic, for the broker to create them: a single broker lets the group's
principal create what its topology needs when it may Read the group), Describe on the group to
describe it.
"""

from __future__ import annotations

from broker.group.streams_assignor import TaskSet
from broker.group.streams_model import (
    ASSIGNOR_NAME,
    HeartbeatRequest,
    HeartbeatResult,
    MemberTaskOffsets,
)
from broker.group.streams_topology import (
    CopartitionGroup,
    Subtopology,
    TopicInfo,
    Topology,
)
from broker.handlers import peer
from broker.handlers.authz import allowed, authorized_operations
from broker.handlers.context import Broker
from broker.handlers.marks import handles
from broker.reply import reply
from broker.security.acl import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

INT32_MIN = -(1 << 31)
TOPOLOGY_DESCRIPTION_NOT_REQUESTED = 0
TOPOLOGY_DESCRIPTION_NOT_STORED = 1


def _topic_info(t) -> TopicInfo:
    return TopicInfo(t.name, t.partitions, t.replication_factor,
                     tuple((c.key, c.value) for c in t.topic_configs))


def _topology(t) -> Topology | None:
    if t is None:
        return None
    return Topology(t.epoch, tuple(
        Subtopology(
            s.subtopology_id, tuple(s.source_topics), tuple(s.source_topic_regex),
            tuple(_topic_info(c) for c in s.state_changelog_topics),
            tuple(s.repartition_sink_topics),
            tuple(_topic_info(r) for r in s.repartition_source_topics),
            tuple(CopartitionGroup(tuple(g.source_topics), tuple(g.source_topic_regex),
                                   tuple(g.repartition_source_topics))
                  for g in s.copartition_groups))
        for s in t.subtopologies))


def _tasks_in(items) -> dict[str, frozenset[int]]:
    out: dict[str, frozenset[int]] = {}
    for t in items:
        if t.partitions:
            out[t.subtopology_id] = out.get(t.subtopology_id, frozenset()) | frozenset(t.partitions)
    return out


def _owned(request) -> TaskSet | None:
    if request.active_tasks is None:
        return None
    return TaskSet(_tasks_in(request.active_tasks), _tasks_in(request.standby_tasks or ()),
                   _tasks_in(request.warmup_tasks or ()))


def _task_offsets_in(items) -> tuple[tuple[str, int, int], ...] | None:
    if items is None:
        return None
    return tuple((t.subtopology_id, t.partition, t.offset) for t in items)


def _task_offsets_out(offsets: dict[str, dict[int, int]]) -> list[dict]:
    """By subtopology id, then partition (Kafka's order)."""
    return [{"subtopology_id": s, "partition": p, "offset": o}
            for s in sorted(offsets) for p, o in sorted(offsets[s].items())]


def _tasks_out(tasks) -> list[dict]:
    return [{"subtopology_id": s, "partitions": sorted(p)} for s, p in sorted(tasks.items())]


def _topic_info_out(t: TopicInfo) -> dict:
    return {"name": t.name, "partitions": t.partitions,
            "replication_factor": t.replication_factor,
            "topic_configs": [{"key": k, "value": v} for k, v in t.configs]}


@handles(ApiKey.STREAMS_GROUP_HEARTBEAT)
def streams_group_heartbeat(broker: Broker, header, request):
    def refused(code: ErrorCode, message: str | None = None) -> dict:
        # Kafka answers an error with an otherwise empty response (no member id, no status)
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
                "member_id": "", "status": []}

    if broker.streams is None:
        return refused(ErrorCode.UNSUPPORTED_VERSION)
    if not allowed(broker, Operation.READ, ResourceType.GROUP, request.group_id):
        return refused(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    endpoint = request.user_endpoint
    heartbeat = HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        endpoint_information_epoch=request.endpoint_information_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        topology=_topology(request.topology),
        owned=_owned(request),
        process_id=request.process_id,
        user_endpoint=None if endpoint is None else (endpoint.host, endpoint.port),
        client_tags=(None if request.client_tags is None
                     else tuple((kv.key, kv.value) for kv in request.client_tags)),
        shutdown_application=request.shutdown_application,
        client_id=header.client_id or "",
        client_host=peer.client_host(),
        task_offsets=_task_offsets_in(request.task_offsets),
        task_end_offsets=_task_offsets_in(request.task_end_offsets),
        api_version=header.api_version,
    )
    def encode(result: HeartbeatResult) -> dict:
        if result.error != ErrorCode.NONE:
            return refused(result.error, result.message)
        tasks = result.tasks
        out = {
            "throttle_time_ms": 0,
            "error_code": result.error,
            "error_message": result.message,
            "member_id": result.member_id,
            "member_epoch": result.member_epoch,
            "heartbeat_interval_ms": result.heartbeat_interval_ms,
            "status": [{"status_code": int(code), "status_detail": detail}
                       for code, detail in result.status or ()],
            "active_tasks": None if tasks is None else _tasks_out(tasks.active),
            "standby_tasks": None if tasks is None else _tasks_out(tasks.standby),
            "warmup_tasks": None if tasks is None else _tasks_out(tasks.warmup),
            "endpoint_information_epoch": result.endpoint_information_epoch,
            "partitions_by_user_endpoint": (None if result.endpoints is None else [
                {"user_endpoint": {"host": host, "port": port},
                 "active_partitions": [{"topic": t, "partitions": p} for t, p in active.items()],
                 "standby_partitions": [{"topic": t, "partitions": p}
                                        for t, p in standby.items()]}
                for (host, port), active, standby in result.endpoints]),
        }
        if result.error == ErrorCode.NONE and result.heartbeat_interval_ms:
            out["task_offset_interval_ms"] = result.task_offset_interval_ms
            out["acceptable_recovery_lag"] = result.acceptable_recovery_lag
            # v0's int32 field: Kafka 4.4 leaves it 0 (it sets only v1's int64)
        return out

    return reply(broker.streams.heartbeat(heartbeat, broker.clock.now_ms()), encode)


@handles(ApiKey.STREAMS_GROUP_DESCRIBE)
def streams_group_describe(broker: Broker, header, request) -> dict:
    now = broker.clock.now_ms()
    groups = []
    streams = broker.streams
    if streams is not None:
        streams.run_timers(now)
    for group_id in request.group_ids:
        empty = {"group_id": group_id, "group_state": "", "group_epoch": 0,
                 "assignment_epoch": 0, "topology": None, "members": []}
        if not allowed(broker, Operation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append({**empty, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED})
            continue
        group = streams.coordinator.groups.get(group_id) if streams is not None else None
        if group is None:
            known = (group_id in broker.groups.coordinator.groups
                     or group_id in broker.groups.consumer.groups)
            groups.append({**empty, "error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                           "error_message": (f"Group {group_id} is not a streams group."
                                             if known else f"Group {group_id} not found.")})
            continue
        topology = None
        if group.topology is not None:
            topology = {"epoch": group.topology.epoch, "subtopologies": [
                {"subtopology_id": s.subtopology_id,
                 "source_topics": list(s.source_topics),
                 "repartition_sink_topics": list(s.repartition_sink_topics),
                 "state_changelog_topics": [
                     _topic_info_out(group.configured.internal_topics.get(t.name, t)
                                     if group.configured is not None else t)
                     for t in s.state_changelog_topics],
                 "repartition_source_topics": [
                     _topic_info_out(group.configured.internal_topics.get(t.name, t)
                                     if group.configured is not None else t)
                     for t in s.repartition_source_topics]}
                for s in group.topology.subtopologies]}
        members = []
        for m in group.members.values():
            target = group.target.get(m.member_id, TaskSet())
            reported = group.task_offsets.get(m.member_id, MemberTaskOffsets())
            members.append({
                "member_id": m.member_id,
                "member_epoch": m.member_epoch,
                "instance_id": m.instance_id,
                "rack_id": m.rack_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "topology_epoch": m.topology_epoch,
                "process_id": m.process_id,
                "user_endpoint": (None if m.user_endpoint is None else
                                  {"host": m.user_endpoint[0], "port": m.user_endpoint[1]}),
                "client_tags": [{"key": k, "value": v} for k, v in m.client_tags],
                "task_offsets": _task_offsets_out(reported.offsets),
                "task_end_offsets": _task_offsets_out(reported.end_offsets),
                "assignment": {"active_tasks": _tasks_out(m.assigned.active),
                               "standby_tasks": _tasks_out(m.assigned.standby),
                               "warmup_tasks": _tasks_out(m.assigned.warmup)},
                "target_assignment": {"active_tasks": _tasks_out(target.active),
                                      "standby_tasks": _tasks_out(target.standby),
                                      "warmup_tasks": _tasks_out(target.warmup)},
                "is_classic": False,
            })
        groups.append({
            "error_code": ErrorCode.NONE,
            "group_id": group_id,
            "group_state": group.state.value,
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "topology": topology,
            "members": members,
            "authorized_operations": (
                authorized_operations(broker, ResourceType.GROUP, group_id)
                if request.include_authorized_operations else INT32_MIN),
            "assignor_name": ASSIGNOR_NAME,
            # v1 (KIP-1331): Kafka 4.4 without a topology description plugin (its default)
            # stores none: NOT_STORED when asked, NOT_REQUESTED otherwise
            "topology_description": None,
            "topology_description_status": (
                TOPOLOGY_DESCRIPTION_NOT_STORED
                if getattr(request, "include_topology_description", False)
                else TOPOLOGY_DESCRIPTION_NOT_REQUESTED),
        })
    return {"throttle_time_ms": 0, "groups": groups}
