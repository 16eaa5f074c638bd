"""The server side of SASL PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, 7677; the exchange
is ``scramp``'s), one ``SaslServer`` per connection and mechanism. Pure: no I/O.

``step(token)`` takes the client's next token and returns the server's reply; ``principal`` is
set once the exchange succeeded. A failure raises ``AuthenticationFailed`` whose message names
the user and the mechanism, never a password.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable, Mapping
from typing import Any

from scramp import ScramException, ScramMechanism

from broker.security.scram import Credential
from protocol.text import for_log

_DIGESTS = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
# The longest SCRAM client-first message read (a real one is about 100 bytes: a user name and a
# nonce of 24-48 characters). Without a bound a peer that has not authenticated makes the broker
# keep its nonce several times (the message, the bare part, the nonce, the server-first that
# repeats it) until the exchange ends: 2.5 MB per connection for a 400 KB nonce. The client-final
# repeats the nonce, so it may be a little longer.
MAX_CLIENT_FIRST_BYTES = 4096
MAX_CLIENT_FINAL_BYTES = MAX_CLIENT_FIRST_BYTES + 512


class AuthenticationFailed(Exception):
    pass


def _saslname(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


class SaslServer:
    def __init__(
        self,
        mechanism: str,
        plain_users: Mapping[str, str],
        scram_credential: Callable[[str, str], Credential | None],
    ) -> None:
        self.mechanism = mechanism
        self.principal: str | None = None
        self._plain_users = plain_users
        self._credential = scram_credential
        self._scram: Any = None  # scramp.ScramServer once the client-first arrived
        self._server_first = ""
        self._channel = ""  # base64 of the client's GS2 header, which c= must repeat
        self._user = "?"

    @property
    def done(self) -> bool:
        return self.principal is not None

    def step(self, token: bytes) -> bytes:
        if self.done:
            raise AuthenticationFailed("authentication already completed")
        if self.mechanism == "PLAIN":
            return self._plain(token)
        return self._scram_step(token)

    def _fail(self, why: str = "invalid credentials") -> AuthenticationFailed:
        # The user name is the client's text: clipped and escaped (it is logged, and answered in
        # a string field that holds at most 32,767 bytes).
        return AuthenticationFailed(
            f"Authentication failed: {why} for user {for_log(self._user)} with SASL mechanism "
            f"{self.mechanism}"
        )

    def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Authentication failed: malformed PLAIN message")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        self._user = user
        if authzid and authzid != user:
            raise self._fail("authorization id differs from the user")
        expected = self._plain_users.get(user)
        # compare_digest: no timing hint about the password; unknown users compare too.
        if not hmac.compare_digest((expected or "\0").encode(), password.encode()) \
                or expected is None:
            raise self._fail()
        self.principal = f"User:{user}"
        return b""

    def _scram_step(self, token: bytes) -> bytes:
        limit = MAX_CLIENT_FIRST_BYTES if self._scram is None else MAX_CLIENT_FINAL_BYTES
        if len(token) > limit:
            raise self._fail(f"a SCRAM message of {len(token)} bytes (at most {limit})")
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("malformed SCRAM message") from None
        try:
            if self._scram is None:
                # auth_fn does not refer to self: the scramp server keeps it, and a cycle
                # (self -> server -> auth_fn -> self) would keep each connection's exchange
                # until a full garbage collection, long after the connection closed.
                credential_of, mechanism, seen = self._credential, self.mechanism, []

                def auth_fn(name: str):
                    seen.append(_saslname(name))
                    credential = credential_of(seen[-1], mechanism)
                    if credential is None:
                        raise ScramException("unknown user")
                    return (credential.salt, credential.stored_key, credential.server_key,
                            credential.iterations)

                server = ScramMechanism(self.mechanism).make_server(auth_fn)
                try:
                    server.set_client_first(message)
                finally:
                    if seen:
                        self._user = seen[-1]
                self._scram = server
                gs2_header = message[: len(message) - len(server.client_first_bare)]
                self._channel = base64.b64encode(gs2_header.encode()).decode()
                self._server_first = server.get_server_first()
                return self._server_first.encode()
            reply = self._client_final(message)
        except ScramException:
            raise self._fail() from None
        self.principal = f"User:{self._user}"
        return reply

    def _client_final(self, message: str) -> bytes:
        """Verify the client's proof (RFC 5802 section 3) and answer the server signature.

        scramp's own check wants the nonce to equal the server's; librdkafka up to 2.0 (Debian's
        kcat) sends its own nonce in front of it, and Kafka accepts a nonce that *ends with* the
        server's. Accepted here: exactly the server's, or the client's nonce followed by it."""
        server = self._scram
        without_proof, sep, proof = message.rpartition(",p=")
        fields = dict(part.split("=", 1) for part in without_proof.split(",") if "=" in part)
        nonce, server_part = str(server.nonce), str(server.s_nonce)
        client_nonce = nonce[: len(nonce) - len(server_part)]
        if not sep or fields.get("c") != self._channel or fields.get("r") not in (
                nonce, client_nonce + nonce):
            raise ScramException("bad client-final message")
        digest = _DIGESTS[self.mechanism]
        auth_message = ",".join((server.client_first_bare, self._server_first,
                                 without_proof)).encode()
        signature = hmac.new(server.stored_key, auth_message, digest).digest()
        try:
            client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof, validate=True),
                                                     signature, strict=True))
        except (ValueError, binascii.Error):
            raise ScramException("bad proof") from None
        if not hmac.compare_digest(digest(client_key).digest(), server.stored_key):
            raise ScramException("wrong proof")
        server_signature = hmac.new(server.server_key, auth_message, digest).digest()
        return b"v=" + base64.b64encode(server_signature)
