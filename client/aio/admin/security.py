"""Admin calls on ACLs and SCRAM credentials (docs/security.md): Kafka's names for resource
types, operations and permissions, their wire codes here."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from typing import Any

from client.aio.admin._base import AdminBase
from client.errors import (
    ConfigError,
    error_for,
)
from client.structs import (
    ACL_OPERATIONS,
    ACL_PATTERN_TYPES,
    ACL_PERMISSIONS,
    ACL_RESOURCE_TYPES,
    AclBinding,
    AclBindingFilter,
)
from protocol.api_keys import ApiKey

SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # Kafka's codes

class SecurityAdmin(AdminBase):
    # -- ACLs and SCRAM credentials (docs/security.md) ----------------------------------------

    async def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Create the bindings (durable when this returns); raises the first refusal."""
        bindings = list(bindings)
        creations = [{
            "resource_type": _code(ACL_RESOURCE_TYPES, b.resource_type, "resource type"),
            "resource_name": b.name,
            "resource_pattern_type": _code(ACL_PATTERN_TYPES, b.pattern_type, "pattern type"),
            "principal": b.principal, "host": b.host,
            "operation": _code(ACL_OPERATIONS, b.operation, "operation"),
            "permission_type": _code(ACL_PERMISSIONS, b.permission, "permission"),
        } for b in bindings]
        conn = await self._cluster.any_connection()
        response = await conn.request(ApiKey.CREATE_ACLS, {"creations": creations})
        for binding, result in zip(bindings, response.results, strict=True):
            if result.error_code:
                raise error_for(result.error_code, result.error_message or str(binding))

    async def describe_acls(self, match: AclBindingFilter | None = None) -> list[AclBinding]:
        conn = await self._cluster.any_connection()
        response = await conn.request(ApiKey.DESCRIBE_ACLS, _filter_body(match or AclBindingFilter()))
        if response.error_code:
            raise error_for(response.error_code, response.error_message or "DescribeAcls")
        return [_binding(r.resource_type, r.resource_name, r.pattern_type, a)
                for r in response.resources for a in r.acls]

    async def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Delete what the filters match; the deleted bindings."""
        conn = await self._cluster.any_connection()
        response = await conn.request(ApiKey.DELETE_ACLS,
                                      {"filters": [_filter_body(f) for f in filters]})
        deleted: list[AclBinding] = []
        for result in response.filter_results:
            if result.error_code:
                raise error_for(result.error_code, result.error_message or "DeleteAcls")
            deleted.extend(_binding(m.resource_type, m.resource_name, m.pattern_type, m)
                           for m in result.matching_acls)
        return deleted

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, dict[str, int]]:
        """user -> mechanism -> iterations (every user when ``users`` is None)."""
        conn = await self._cluster.any_connection()
        body = {"users": None if users is None else [{"name": u} for u in users]}
        response = await conn.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, body)
        if response.error_code:
            raise error_for(response.error_code, response.error_message or "")
        result = {}
        for r in response.results:
            if r.error_code:
                raise error_for(r.error_code, r.error_message or r.user)
            result[r.user] = {SCRAM_MECHANISMS[c.mechanism]: c.iterations
                              for c in r.credential_infos}
        return result

    async def alter_user_scram_credentials(
        self,
        upserts: Iterable[tuple[str, str, str, int]] = (),
        deletions: Iterable[tuple[str, str]] = (),
    ) -> None:
        """``upserts``: (user, mechanism, password, iterations): the password is salted and
        hashed here (PBKDF2, as Kafka's clients do) and never sent; ``deletions``: (user,
        mechanism)."""
        codes = {name: code for code, name in SCRAM_MECHANISMS.items()}

        def code(mechanism: str) -> int:
            if mechanism.upper() not in codes:
                raise ConfigError(f"unknown SCRAM mechanism {mechanism!r} "
                                  f"(one of {', '.join(codes)})")
            return codes[mechanism.upper()]

        upsertions = []
        for user, mechanism, password, iterations in upserts:
            salt = os.urandom(32)
            digest = "sha256" if code(mechanism) == 1 else "sha512"
            salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
            upsertions.append({"name": user, "mechanism": code(mechanism),
                               "iterations": iterations, "salt": salt, "salted_password": salted})
        body = {"deletions": [{"name": u, "mechanism": code(m)} for u, m in deletions],
                "upsertions": upsertions}
        conn = await self._cluster.any_connection()
        response = await conn.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
        for r in response.results:
            if r.error_code:
                raise error_for(r.error_code, r.error_message or r.user)


def _code(table: dict[str, int], value: str, what: str) -> int:
    try:
        return table[value.lower()]
    except KeyError:
        raise ConfigError(f"unknown ACL {what} {value!r} (one of {', '.join(table)})") from None


def _filter_body(f: AclBindingFilter) -> dict:
    return {
        "resource_type_filter": _code(ACL_RESOURCE_TYPES, f.resource_type, "resource type"),
        "resource_name_filter": f.name,
        "pattern_type_filter": _code(ACL_PATTERN_TYPES, f.pattern_type, "pattern type"),
        "principal_filter": f.principal, "host_filter": f.host,
        "operation": _code(ACL_OPERATIONS, f.operation, "operation"),
        "permission_type": _code(ACL_PERMISSIONS, f.permission, "permission"),
    }


def _name(table: dict[str, int], code: int) -> str:
    return next((k for k, v in table.items() if v == code), str(code))


def _binding(resource_type: int, name: str, pattern_type: int, a: Any) -> AclBinding:
    return AclBinding(_name(ACL_RESOURCE_TYPES, resource_type), name, a.principal,
                      _name(ACL_OPERATIONS, a.operation), _name(ACL_PERMISSIONS, a.permission_type),
                      _name(ACL_PATTERN_TYPES, pattern_type), a.host)

