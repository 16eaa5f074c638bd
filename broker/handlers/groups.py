"""Consumer groups and committed offsets: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups,
DescribeGroups, OffsetCommit, OffsetFetch, TxnOffsetCommit (the versions: ``SERVED``).

Decode -> ``broker.groups`` (``broker/group/service.py``) -> response dict. JoinGroup and SyncGroup
may wait for other members, OffsetCommit and TxnOffsetCommit for their fsync: those return
``Pending``.
"""

from __future__ import annotations

from typing import Any

from broker.core import Broker, now_ms
from broker.dispatcher import Pending, handles
from broker.group.coordinator import JoinResult, SyncResult
from broker.group.service import Deferred
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

# The handlers do not see the peer address; DescribeGroups shows this as the client host.
UNKNOWN_CLIENT_HOST = ""


def _join_response(result: JoinResult) -> dict:
    instance_ids = result.member_instance_ids or (None,) * len(result.members)
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "generation_id": result.generation_id,
        # v7+: the protocol type and name (null on errors, as Kafka)
        "protocol_type": result.protocol_type or None,
        "protocol_name": result.protocol_name if result.error == ErrorCode.NONE else None,
        "leader": result.leader,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [
            {"member_id": m, "group_instance_id": instance, "metadata": metadata}
            for (m, metadata), instance in zip(result.members, instance_ids, strict=True)
        ],
    }


def _null_for_old(response: dict, version: int, first_nullable: int, *fields: str) -> dict:
    """Fields that are nullable only from ``first_nullable`` on: "" below it."""
    if version < first_nullable:
        for name in fields:
            if response[name] is None:
                response[name] = ""
    return response


def _maybe_pending(reply: Any, encode) -> Any:
    if isinstance(reply, Deferred):

        async def wait() -> dict:
            return encode(await reply.wait())

        return Pending(wait)
    return encode(reply)


@handles(ApiKey.JOIN_GROUP)
def join_group(broker: Broker, header, request):
    version = header.api_version
    reply = broker.groups.join_group(
        header.client_id or "", UNKNOWN_CLIENT_HOST, request, now_ms(),
        require_known_member_id=version >= 4,  # KIP-394
    )
    return _maybe_pending(
        reply,
        lambda r: _null_for_old(_join_response(r), version, 7, "protocol_name"),
    )


@handles(ApiKey.SYNC_GROUP)
def sync_group(broker: Broker, header, request):
    version = header.api_version
    group_id = request.group_id

    def encode(result: SyncResult) -> dict:
        response = {"throttle_time_ms": 0, "error_code": result.error,
                    "assignment": result.assignment}
        if version >= 5 and result.error == ErrorCode.NONE:
            summary = broker.groups.describe_group(group_id, now_ms())
            response["protocol_type"] = summary.protocol_type
            response["protocol_name"] = summary.protocol
        return response

    if version >= 5:
        # v5 (KIP-559): the protocol type and name must match the group's.
        summary = broker.groups.describe_group(group_id, now_ms())
        if summary.state != "Dead" and (
            (request.protocol_type is not None and request.protocol_type != summary.protocol_type)
            or (request.protocol_name is not None and summary.protocol
                and request.protocol_name != summary.protocol)
        ):
            return {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "assignment": b""}
    return _maybe_pending(broker.groups.sync_group(request, now_ms()), encode)


@handles(ApiKey.HEARTBEAT)
def heartbeat(broker: Broker, header, request) -> dict:
    error = broker.groups.heartbeat(
        request.group_id, request.generation_id, request.member_id, now_ms(),
        request.group_instance_id,
    )
    return {"throttle_time_ms": 0, "error_code": error}


@handles(ApiKey.LEAVE_GROUP)
def leave_group(broker: Broker, header, request) -> dict:
    if header.api_version < 3:
        return {"throttle_time_ms": 0, "error_code": broker.groups.leave_group(
            request.group_id, request.member_id, now_ms())}
    # v3+ (KIP-345): a batch of members, each by member id and/or group.instance.id
    members = [
        {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
         "error_code": broker.groups.leave_group(
             request.group_id, m.member_id, now_ms(), m.group_instance_id)}
        for m in request.members
    ]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "members": members}


@handles(ApiKey.LIST_GROUPS)
def list_groups(broker: Broker, header, request) -> dict:
    groups = broker.groups.list_groups(now_ms())
    return {
        "error_code": ErrorCode.NONE,
        "groups": [{"group_id": g, "protocol_type": t} for g, t, _ in sorted(groups)],
    }


@handles(ApiKey.DESCRIBE_GROUPS)
def describe_groups(broker: Broker, header, request) -> dict:
    now = now_ms()
    groups = []
    for group_id in request.groups:
        summary = broker.groups.describe_group(group_id, now)
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
            }
        )
    return {"throttle_time_ms": 0, "groups": groups}


@handles(ApiKey.OFFSET_COMMIT)
def offset_commit(broker: Broker, header, request):
    return _maybe_pending(broker.groups.commit_offsets(request, now_ms()), lambda r: r)


@handles(ApiKey.OFFSET_FETCH)
def offset_fetch(broker: Broker, header, request) -> dict:
    now = now_ms()
    stable = request.require_stable
    if header.api_version < 8:
        response = broker.groups.fetch_offsets(request.group_id, request.topics, now, stable)
        return {"throttle_time_ms": 0, **response}
    # v8+: a batch of groups (KIP-709)
    return {"throttle_time_ms": 0, "groups": [
        {"group_id": g.group_id, **broker.groups.fetch_offsets(g.group_id, g.topics, now, stable)}
        for g in request.groups
    ]}


@handles(ApiKey.TXN_OFFSET_COMMIT)
def txn_offset_commit(broker: Broker, header, request):
    return _maybe_pending(broker.groups.txn_commit_offsets(request, now_ms()), lambda r: r)
