"""The security collaborator handlers use: SASL servers for new exchanges, SCRAM credentials,
ACLs and the authorizer (None when ``authorizer.class.name`` is not set: everything is allowed,
as in Kafka without an authorizer)."""

from __future__ import annotations

from pathlib import Path

from broker.config import SecurityConfig
from broker.security.acl import AclBinding, AclFilter, AclStore, Authorizer, Operation, ResourceType
from broker.security.sasl import SaslServer
from broker.security.scram import ScramStore


class Security:
    def __init__(self, config: SecurityConfig, data_dir: Path) -> None:
        self.config = config
        self.scram = ScramStore(data_dir / "scram-credentials.json")
        self.acls = AclStore(data_dir / "acls.json")
        self._plain_users = dict(config.plain_users)
        self.authorizer = (
            Authorizer(self.acls.bindings, config.super_users,
                       config.allow_everyone_if_no_acl_found)
            if config.authorizer else None
        )

    def sasl_server(self, mechanism: str) -> SaslServer:
        return SaslServer(mechanism, self._plain_users, self.scram.get)

    def authorize(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> bool:
        authorizer = self.authorizer
        return authorizer is None or authorizer.authorize(principal, host, operation,
                                                          resource_type, name)

    def any_allowed(self, principal: str, host: str, operation: Operation,
                    resource_type: ResourceType) -> bool:
        authorizer = self.authorizer
        return authorizer is None or authorizer.any_allowed(principal, host, operation,
                                                            resource_type)

    def add_acls(self, bindings: list[AclBinding]) -> None:
        self.acls.add(bindings)
        self._reload()

    def remove_acls(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        removed = self.acls.remove(filters)
        self._reload()
        return removed

    def _reload(self) -> None:
        if self.authorizer is not None:
            self.authorizer.set_bindings(self.acls.bindings)
