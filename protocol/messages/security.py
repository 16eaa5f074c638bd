"""Security APIs: SaslHandshake (17), SaslAuthenticate (36), DescribeAcls (29), CreateAcls (30),
DeleteAcls (31), DescribeUserScramCredentials (50), AlterUserScramCredentials (51).

SaslHandshake: v0 = the SASL tokens that follow are bare length-prefixed frames; v1 = they come in
SaslAuthenticate requests (KIP-152). SaslAuthenticate: v1 adds session_lifetime_ms (KIP-368);
v2 flexible. The ACL APIs: v1 adds the pattern type (literal, prefixed: KIP-290); v2 flexible;
v3 adds the USER_WRITE / CREATE_TOKENS operations (accepted, never granted anything here).
The SCRAM credential APIs (KIP-554) exist only in v0, flexible.
"""

from protocol.api_keys import ApiKey
from protocol.messages._declare import F, declare

SASL_HANDSHAKE = declare(
    ApiKey.SASL_HANDSHAKE, valid="0-1", flexible="none",
    request=[F("mechanism", "string")],
    response=[F("error_code", "int16"), F("mechanisms", "[]string")],
)

SASL_AUTHENTICATE = declare(
    ApiKey.SASL_AUTHENTICATE, valid="0-2", flexible="2+",
    request=[F("auth_bytes", "bytes")],
    response=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("auth_bytes", "bytes"),
        F("session_lifetime_ms", "int64", "1+"),
    ],
)

_ACL_FILTER = [
    F("resource_type_filter", "int8"),
    F("resource_name_filter", "string", nullable="0+"),
    F("pattern_type_filter", "int8", "1+", default=3),
    F("principal_filter", "string", nullable="0+"),
    F("host_filter", "string", nullable="0+"),
    F("operation", "int8"),
    F("permission_type", "int8"),
]

DESCRIBE_ACLS = declare(
    ApiKey.DESCRIBE_ACLS, valid="1-3", flexible="2+",
    request=_ACL_FILTER,
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("resources", "[]", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("pattern_type", "int8", "1+", default=3),
            F("acls", "[]", fields=[
                F("principal", "string"),
                F("host", "string"),
                F("operation", "int8"),
                F("permission_type", "int8"),
            ]),
        ]),
    ],
)

CREATE_ACLS = declare(
    ApiKey.CREATE_ACLS, valid="1-3", flexible="2+",
    request=[
        F("creations", "[]", fields=[
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("resource_pattern_type", "int8", "1+", default=3),
            F("principal", "string"),
            F("host", "string"),
            F("operation", "int8"),
            F("permission_type", "int8"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]", fields=[
            F("error_code", "int16"), F("error_message", "string", nullable="0+"),
        ]),
    ],
)

DELETE_ACLS = declare(
    ApiKey.DELETE_ACLS, valid="1-3", flexible="2+",
    request=[F("filters", "[]", fields=_ACL_FILTER)],
    response=[
        F("throttle_time_ms", "int32"),
        F("filter_results", "[]", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("matching_acls", "[]", fields=[
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
                F("resource_type", "int8"),
                F("resource_name", "string"),
                F("pattern_type", "int8", "1+", default=3),
                F("principal", "string"),
                F("host", "string"),
                F("operation", "int8"),
                F("permission_type", "int8"),
            ]),
        ]),
    ],
)

DESCRIBE_USER_SCRAM_CREDENTIALS = declare(
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, valid="0", flexible="0+",
    request=[F("users", "[]", nullable="0+", fields=[F("name", "string")])],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("results", "[]", fields=[
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("credential_infos", "[]", fields=[
                F("mechanism", "int8"), F("iterations", "int32"),
            ]),
        ]),
    ],
)

ALTER_USER_SCRAM_CREDENTIALS = declare(
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, valid="0", flexible="0+",
    request=[
        F("deletions", "[]", fields=[F("name", "string"), F("mechanism", "int8")]),
        F("upsertions", "[]", fields=[
            F("name", "string"),
            F("mechanism", "int8"),
            F("iterations", "int32"),
            F("salt", "bytes"),
            F("salted_password", "bytes"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]", fields=[
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ],
)
