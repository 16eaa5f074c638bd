"""The secured broker the security tests start: a SASL_PLAINTEXT listener with PLAIN users (one
JAAS line), Kafka's StandardAuthorizer and ``User:admin`` a super user; and a SASL PLAIN login
over a raw connection."""

from __future__ import annotations

from protocol.api_keys import ApiKey
from tests.raw_client import RawConnection

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret",
         "mallory": "mallory-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")


def secured(*extra: str) -> list[str]:
    """server.properties lines of the secured broker, then ``extra``."""
    return ["listeners=SASL_PLAINTEXT://127.0.0.1:0",
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin", *extra]


def sasl_plain(conn: RawConnection, user: str, password: str | None = None) -> RawConnection:
    """Authenticate ``conn`` as ``user`` (SaslHandshake v1, SaslAuthenticate v2); the password
    is ``USERS``' unless given."""
    assert conn.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
    secret = USERS[user] if password is None else password
    token = b"\0" + user.encode() + b"\0" + secret.encode()
    assert conn.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token}).error_code == 0
    return conn
