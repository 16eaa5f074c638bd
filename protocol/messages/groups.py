"""Classic consumer-group APIs: JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13),
DescribeGroups (15). (ListGroups: admin_apis.py.)

JoinGroup: v1 rebalance_timeout_ms (v0: the session timeout); v2 throttle_time_ms; v4 a new
member (member_id "") is answered MEMBER_ID_REQUIRED with its id and rejoins with it (KIP-394);
v5 group_instance_id (static membership, KIP-345); v6 flexible; v7 protocol_type in the response;
v8 reason; v9 skip_assignment (KIP-814).
SyncGroup: v1 throttle_time_ms; v3 group_instance_id; v4 flexible; v5 protocol type and name.
Heartbeat: v1 throttle_time_ms; v3 group_instance_id; v4 flexible.
LeaveGroup: v1 throttle_time_ms; v3 a batch of members with instance ids (KIP-345); v4 flexible;
v5 reason.
DescribeGroups: v1 throttle_time_ms; v3 authorized operations; v4 group_instance_id; v5 flexible.

A new member joins with member_id ""; only the leader's JoinGroup response lists the members
(with the metadata of their protocol), and only the leader's SyncGroup carries assignments.
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

JOIN_GROUP = declare(
    ApiKey.JOIN_GROUP, valid="0-9", flexible="6+",
    request=[
        F("group_id", "string"),
        F("session_timeout_ms", "int32"),
        F("rebalance_timeout_ms", "int32", "1+", default=-1),
        F("member_id", "string"),
        F("group_instance_id", "string", "5+", nullable="5+", default=None),
        F("protocol_type", "string"),
        F("protocols", "[]", fields=[F("name", "string"), F("metadata", "bytes")]),
        F("reason", "string", "8+", nullable="8+", default=None),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        F("error_code", "int16"),
        F("generation_id", "int32", default=-1),
        F("protocol_type", "string", "7+", nullable="7+", default=None),
        F("protocol_name", "string", nullable="7+"),
        F("leader", "string"),
        F("skip_assignment", "bool", "9+"),
        F("member_id", "string"),
        F("members", "[]", fields=[
            F("member_id", "string"),
            F("group_instance_id", "string", "5+", nullable="5+", default=None),
            F("metadata", "bytes"),
        ]),
    ],
)

SYNC_GROUP = declare(
    ApiKey.SYNC_GROUP, valid="0-5", flexible="4+",
    request=[
        F("group_id", "string"),
        F("generation_id", "int32"),
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
        F("protocol_type", "string", "5+", nullable="5+", default=None),
        F("protocol_name", "string", "5+", nullable="5+", default=None),
        F("assignments", "[]", fields=[F("member_id", "string"), F("assignment", "bytes")]),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F("protocol_type", "string", "5+", nullable="5+", default=None),
        F("protocol_name", "string", "5+", nullable="5+", default=None),
        F("assignment", "bytes"),
    ],
)

HEARTBEAT = declare(
    ApiKey.HEARTBEAT, valid="0-4", flexible="4+",
    request=[
        F("group_id", "string"),
        F("generation_id", "int32"),
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
    ],
    response=[F("throttle_time_ms", "int32", "1+"), F("error_code", "int16")],
)

LEAVE_GROUP = declare(
    ApiKey.LEAVE_GROUP, valid="0-5", flexible="4+",
    request=[
        F("group_id", "string"),
        F("member_id", "string", "0-2"),
        F("members", "[]", "3+", fields=[
            F("member_id", "string"),
            F("group_instance_id", "string", nullable="0+", default=None),
            F("reason", "string", "5+", nullable="5+", default=None),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F("members", "[]", "3+", fields=[
            F("member_id", "string"),
            F("group_instance_id", "string", nullable="0+", default=None),
            F("error_code", "int16"),
        ]),
    ],
)

DESCRIBE_GROUPS = declare(
    ApiKey.DESCRIBE_GROUPS, valid="0-6", flexible="5+",
    request=[
        F("groups", "[]string"),
        F("include_authorized_operations", "bool", "3+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("groups", "[]", fields=[
            F("error_code", "int16"),
            F("error_message", "string", "6+", nullable="6+", default=None),
            F("group_id", "string"),
            F("group_state", "string"),
            F("protocol_type", "string"),
            F("protocol_data", "string"),
            F("members", "[]", fields=[
                F("member_id", "string"),
                F("group_instance_id", "string", "4+", nullable="4+", default=None),
                F("client_id", "string"),
                F("client_host", "string"),
                F("member_metadata", "bytes"),
                F("member_assignment", "bytes"),
            ]),
            F("authorized_operations", "int32", "3+", default=-(2**31)),
        ]),
    ],
)

# ListGroups (all versions) is declared with the admin APIs (admin_apis.py).
