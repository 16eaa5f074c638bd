"""ACLs with Kafka's semantics (its AclAuthorizer / StandardAuthorizer rules), pure.

A binding says: ``principal`` from ``host`` is ALLOWed or DENYed ``operation`` on resources of
``resource_type`` whose name equals ``name`` (LITERAL; ``*`` is every name) or starts with it
(PREFIXED). ``Authorizer.authorize`` decides one action:

1. a super user (``super.users``) may do anything;
2. a DENY binding that matches principal (or ``User:*``), host (or ``*``) and the operation (or
   ALL) refuses, whatever allows it;
3. an ALLOW binding that matches allows; DESCRIBE is implied by READ, WRITE, DELETE and ALTER,
   DESCRIBE_CONFIGS by ALTER_CONFIGS;
4. with no binding at all on the resource: ``allow.everyone.if.no.acl.found``; else refused.

Codes are Kafka's (``ResourceType``, ``AclOperation``, ``AclPermissionType``, ``PatternType``),
so that the ACL APIs carry them unchanged. ``AclStore`` keeps the bindings in
``<data dir>/acls.json``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from broker.security import durable_json


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource's name, as in Kafka
WILDCARD = "*"

# The operations an ALLOW of the key also grants (Kafka's implied operations).
_IMPLIED = {
    Operation.DESCRIBE: {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                         Operation.ALTER},
    Operation.DESCRIBE_CONFIGS: {Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS},
}


class AclBinding(NamedTuple):
    resource_type: ResourceType
    name: str
    pattern_type: PatternType  # LITERAL or PREFIXED
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def covers(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name in (name, WILDCARD)


class AclFilter(NamedTuple):
    """DescribeAcls / DeleteAcls: None and the ANY codes match everything; MATCH pattern type:
    every binding that applies to the named resource (literal, wildcard or prefix)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.name is not None and not b.covers(b.resource_type, self.name):
                return False
        else:
            if self.pattern_type != PatternType.ANY and self.pattern_type != b.pattern_type:
                return False
            if self.name is not None and self.name != b.name:
                return False
        return (
            (self.principal is None or self.principal == b.principal)
            and (self.host is None or self.host == b.host)
            and (self.operation == Operation.ANY or self.operation == b.operation)
            and (self.permission == Permission.ANY or self.permission == b.permission)
        )


def validate(b: AclBinding) -> str | None:
    """Why a binding cannot be created (CreateAcls answers INVALID_REQUEST), or None."""
    if b.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        return "resource type must be concrete"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "pattern type must be LITERAL or PREFIXED"
    if b.operation in (Operation.ANY, Operation.UNKNOWN):
        return "operation must be concrete"
    if b.permission not in (Permission.ALLOW, Permission.DENY):
        return "permission must be ALLOW or DENY"
    if not b.name:
        return "resource name must not be empty"
    if b.resource_type == ResourceType.CLUSTER and b.name != CLUSTER_NAME:
        return f"the cluster resource is named {CLUSTER_NAME!r}"
    kind, sep, name = b.principal.partition(":")
    if not sep or not kind or not name:
        return f"principal {b.principal!r} is not of the form Type:name (User:alice)"
    if not b.host:
        return "host must not be empty ('*' is every host)"
    return None


class Authorizer:
    """Decides actions from the bindings (see the module rules)."""

    def __init__(self, bindings: Iterable[AclBinding], super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.set_bindings(bindings)

    def set_bindings(self, bindings: Iterable[AclBinding]) -> None:
        by_type: dict[ResourceType, list[AclBinding]] = {}
        for b in bindings:
            by_type.setdefault(b.resource_type, []).append(b)
        self._by_type = by_type

    def authorize(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        relevant = [b for b in self._by_type.get(resource_type, ()) if b.covers(resource_type, name)]
        if not relevant:
            return self.allow_if_no_acl
        allowed_ops = _IMPLIED.get(operation, {operation})
        allowed = False
        for b in relevant:
            if b.principal not in (principal, "User:*") or b.host not in (host, WILDCARD):
                continue
            if b.permission == Permission.DENY:
                if b.operation in (operation, Operation.ALL):
                    return False
            elif b.operation == Operation.ALL or b.operation in allowed_ops:
                allowed = True
        return allowed

    def any_allowed(self, principal: str, host: str, operation: Operation,
                    resource_type: ResourceType) -> bool:
        """Whether some resource of the type may get ``operation`` (Kafka's
        authorizeByResourceType, used for idempotent producers: Write on any topic)."""
        if principal in self.super_users:
            return True
        for b in self._by_type.get(resource_type, ()):
            if (b.permission == Permission.ALLOW and b.principal in (principal, "User:*")
                    and b.host in (host, WILDCARD)
                    and b.operation in (operation, Operation.ALL)
                    and self.authorize(principal, host, operation, resource_type, b.name)):
                return True
        return False


class AclStore:
    """The bindings, durable in one JSON file; changes go through ``add`` and ``remove``, which
    change ``bindings`` only once the file is saved (an OSError leaves both as they were)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bindings: list[AclBinding] = [
            AclBinding(ResourceType(r[0]), r[1], PatternType(r[2]), r[3], r[4], Operation(r[5]),
                       Permission(r[6]))
            for r in durable_json.load(path, [])
        ]

    def add(self, new: Iterable[AclBinding]) -> None:
        bindings = list(self.bindings)
        known = set(bindings)
        for b in new:
            if b not in known:
                known.add(b)
                bindings.append(b)
        self._save(bindings)
        self.bindings = bindings

    def remove(self, filters: Iterable[AclFilter]) -> list[list[AclBinding]]:
        """Delete what each filter matches; the deleted bindings per filter."""
        matched = [[b for b in self.bindings if f.matches(b)] for f in filters]
        gone = {b for group in matched for b in group}
        if gone:
            bindings = [b for b in self.bindings if b not in gone]
            self._save(bindings)
            self.bindings = bindings
        return matched

    def _save(self, bindings: list[AclBinding]) -> None:
        durable_json.save(self.path, [[int(b.resource_type), b.name, int(b.pattern_type),
                                       b.principal, b.host, int(b.operation), int(b.permission)]
                                      for b in bindings])
