"""SCRAM credentials (RFC 5802 / 7677), as Kafka keeps them: per user and mechanism the salt, the
iteration count, StoredKey and ServerKey. The password itself is never stored; clients send the
salted password (AlterUserScramCredentials), from which the keys are derived here.

Stored in ``<data dir>/scram-credentials.json`` (written atomically, mode 0600).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path
from typing import NamedTuple

from broker.security import durable_json

# Kafka's ScramMechanism codes, and the hash of each.
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
CODES = {name: code for code, name in MECHANISMS.items()}
_HASH = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
MIN_ITERATIONS = 4096  # Kafka's bounds
MAX_ITERATIONS = 16384


class Credential(NamedTuple):
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def derive(mechanism: str, salted_password: bytes, salt: bytes, iterations: int) -> Credential:
    digest = _HASH[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    return Credential(salt, digest(client_key).digest(), server_key, iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) (what a client sends in AlterUserScramCredentials)."""
    name = _HASH[mechanism]().name
    return hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)


class ScramStore:
    """user -> mechanism -> Credential, persisted on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        raw = durable_json.load(path, {})
        self._users: dict[str, dict[str, Credential]] = {
            user: {
                mech: Credential(base64.b64decode(c["salt"]), base64.b64decode(c["stored_key"]),
                                 base64.b64decode(c["server_key"]), int(c["iterations"]))
                for mech, c in mechs.items()
            }
            for user, mechs in raw.items()
        }

    def get(self, user: str, mechanism: str) -> Credential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, int]]:
        """user -> mechanism -> iterations (DescribeUserScramCredentials: never the keys)."""
        return {u: {m: c.iterations for m, c in ms.items()} for u, ms in self._users.items()}

    def apply(self, upserts: list[tuple[str, str, Credential]],
              deletions: list[tuple[str, str]]) -> None:
        """Upsert and delete credentials durably; the credentials in use change only once the
        file is saved (an OSError leaves both as they were)."""
        users = {user: dict(mechs) for user, mechs in self._users.items()}
        for user, mechanism, credential in upserts:
            users.setdefault(user, {})[mechanism] = credential
        for user, mechanism in deletions:
            mechs = users.get(user, {})
            mechs.pop(mechanism, None)
            if not mechs:
                users.pop(user, None)
        self._save(users)
        self._users = users

    def _save(self, users: dict[str, dict[str, Credential]]) -> None:
        def enc(b: bytes) -> str:
            return base64.b64encode(b).decode()

        durable_json.save(self.path, {
            user: {mech: {"salt": enc(c.salt), "stored_key": enc(c.stored_key),
                          "server_key": enc(c.server_key), "iterations": c.iterations}
                   for mech, c in mechs.items()}
            for user, mechs in users.items()
        })
