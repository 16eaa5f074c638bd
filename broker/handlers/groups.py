"""Consumer groups and committed offsets: JoinGroup v2, SyncGroup v0, Heartbeat v0, LeaveGroup v0,
DescribeGroups v0, OffsetCommit v2, OffsetFetch v2, TxnOffsetCommit v0.

Decode -> ``broker.groups`` (``broker/group/service.py``) -> response dict. JoinGroup and SyncGroup
may wait for other members, OffsetCommit and TxnOffsetCommit for their fsync: those return a
``Deferred``.
"""

from __future__ import annotations

from broker import peer
from broker.context import Broker
from broker.dispatcher import handles, reply
from broker.group.coordinator import JoinResult, SyncResult
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode


def _join_response(result: JoinResult) -> dict:
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "generation_id": result.generation_id,
        "protocol_name": result.protocol_name,
        "leader": result.leader,
        "member_id": result.member_id,
        "members": [{"member_id": m, "metadata": metadata} for m, metadata in result.members],
    }


def _sync_response(result: SyncResult) -> dict:
    return {"error_code": result.error, "assignment": result.assignment}


@handles(ApiKey.JOIN_GROUP, 2)
def join_group(broker: Broker, header, request):
    result = broker.groups.join_group(
        header.client_id or "", peer.client_host(), request, broker.clock.now_ms()
    )
    return reply(result, _join_response)


@handles(ApiKey.SYNC_GROUP, 0)
def sync_group(broker: Broker, header, request):
    return reply(broker.groups.sync_group(request, broker.clock.now_ms()), _sync_response)


@handles(ApiKey.HEARTBEAT, 0)
def heartbeat(broker: Broker, header, request) -> dict:
    error = broker.groups.heartbeat(
        request.group_id, request.generation_id, request.member_id, broker.clock.now_ms()
    )
    return {"error_code": error}


@handles(ApiKey.LEAVE_GROUP, 0)
def leave_group(broker: Broker, header, request) -> dict:
    now = broker.clock.now_ms()
    return {"error_code": broker.groups.leave_group(request.group_id, request.member_id, now)}


@handles(ApiKey.DESCRIBE_GROUPS, 0)
def describe_groups(broker: Broker, header, request) -> dict:
    now = broker.clock.now_ms()
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
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in summary.members
                ],
            }
        )
    return {"groups": groups}


@handles(ApiKey.OFFSET_COMMIT, 2)
def offset_commit(broker: Broker, header, request):
    return broker.groups.commit_offsets(request, broker.clock.now_ms())


@handles(ApiKey.OFFSET_FETCH, 2)
def offset_fetch(broker: Broker, header, request) -> dict:
    return broker.groups.fetch_offsets(request.group_id, request.topics, broker.clock.now_ms())


@handles(ApiKey.TXN_OFFSET_COMMIT, 0)
def txn_offset_commit(broker: Broker, header, request):
    return broker.groups.txn_commit_offsets(request, broker.clock.now_ms())
