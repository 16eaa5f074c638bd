"""Classic consumer-group APIs: JoinGroup v2 (11), SyncGroup v0 (14), Heartbeat v0 (12),
LeaveGroup v0 (13), DescribeGroups v0 (15). (ListGroups: admin_apis.py.)

JoinGroup v2
Request:  group_id STRING, session_timeout_ms INT32, rebalance_timeout_ms INT32, member_id STRING,
          protocol_type STRING, protocols [name STRING, metadata BYTES]
Response: throttle_time_ms INT32, error_code INT16, generation_id INT32, protocol_name STRING,
          leader STRING, member_id STRING, members [member_id STRING, metadata BYTES]

SyncGroup v0
Request:  group_id STRING, generation_id INT32, member_id STRING,
          assignments [member_id STRING, assignment BYTES]
Response: error_code INT16, assignment BYTES

Heartbeat v0
Request:  group_id STRING, generation_id INT32, member_id STRING
Response: error_code INT16

LeaveGroup v0
Request:  group_id STRING, member_id STRING
Response: error_code INT16


DescribeGroups v0
Request:  groups [STRING]
Response: groups [error_code INT16, group_id STRING, group_state STRING, protocol_type STRING,
                  protocol_data STRING,
                  members [member_id STRING, client_id STRING, client_host STRING,
                           member_metadata BYTES, member_assignment BYTES]]

A new member joins with member_id ""; only the leader's JoinGroup response lists the members
(with the metadata of their protocol), and only the leader's SyncGroup carries assignments.
"""

from construct import Struct

from protocol.api_keys import ApiKey
from protocol.messages._registry import register
from protocol.primitives import Array, Bytes, Int16, Int32, String

JoinGroupRequestV2 = Struct(
    "group_id" / String,
    "session_timeout_ms" / Int32,
    "rebalance_timeout_ms" / Int32,
    "member_id" / String,
    "protocol_type" / String,
    "protocols" / Array(Struct("name" / String, "metadata" / Bytes)),
)

JoinGroupResponseV2 = Struct(
    "throttle_time_ms" / Int32,
    "error_code" / Int16,
    "generation_id" / Int32,
    "protocol_name" / String,
    "leader" / String,
    "member_id" / String,
    "members" / Array(Struct("member_id" / String, "metadata" / Bytes)),
)

JOIN_GROUP_V2 = register(ApiKey.JOIN_GROUP, 2, JoinGroupRequestV2, JoinGroupResponseV2)

SyncGroupRequestV0 = Struct(
    "group_id" / String,
    "generation_id" / Int32,
    "member_id" / String,
    "assignments" / Array(Struct("member_id" / String, "assignment" / Bytes)),
)

SyncGroupResponseV0 = Struct(
    "error_code" / Int16,
    "assignment" / Bytes,
)

SYNC_GROUP_V0 = register(ApiKey.SYNC_GROUP, 0, SyncGroupRequestV0, SyncGroupResponseV0)

HeartbeatRequestV0 = Struct(
    "group_id" / String,
    "generation_id" / Int32,
    "member_id" / String,
)

HeartbeatResponseV0 = Struct(
    "error_code" / Int16,
)

HEARTBEAT_V0 = register(ApiKey.HEARTBEAT, 0, HeartbeatRequestV0, HeartbeatResponseV0)

LeaveGroupRequestV0 = Struct(
    "group_id" / String,
    "member_id" / String,
)

LeaveGroupResponseV0 = Struct(
    "error_code" / Int16,
)

LEAVE_GROUP_V0 = register(ApiKey.LEAVE_GROUP, 0, LeaveGroupRequestV0, LeaveGroupResponseV0)

# ListGroups (all versions) is declared in admin_apis.py.

DescribeGroupsRequestV0 = Struct(
    "groups" / Array(String),
)

DescribeGroupsResponseV0 = Struct(
    "groups" / Array(
        Struct(
            "error_code" / Int16,
            "group_id" / String,
            "group_state" / String,
            "protocol_type" / String,
            "protocol_data" / String,
            "members" / Array(
                Struct(
                    "member_id" / String,
                    "client_id" / String,
                    "client_host" / String,
                    "member_metadata" / Bytes,
                    "member_assignment" / Bytes,
                )
            ),
        )
    ),
)

DESCRIBE_GROUPS_V0 = register(
    ApiKey.DESCRIBE_GROUPS, 0, DescribeGroupsRequestV0, DescribeGroupsResponseV0
)
