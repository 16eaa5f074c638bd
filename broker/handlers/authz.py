"""Authorization as the handlers ask for it: the principal and host of the current request
(broker/peer.py) against ``broker.security`` (always allowed without an authorizer)."""

from __future__ import annotations

import logging

from broker import peer
from broker.context import Broker
from broker.security.acl import Operation, ResourceType

log = logging.getLogger("minibroker.security")


def allowed(broker: Broker, operation: Operation, resource_type: ResourceType, name: str) -> bool:
    security = broker.security
    if security.authorizer is None:
        return True
    principal, host = peer.principal_and_host()
    ok = security.authorize(principal, host, operation, resource_type, name)
    if not ok:
        log.info("refused: %s from %s may not %s %s %r", principal, host or "?",
                 operation.name, resource_type.name, name)
    return ok


def any_allowed(broker: Broker, operation: Operation, resource_type: ResourceType) -> bool:
    security = broker.security
    if security.authorizer is None:
        return True
    principal, host = peer.principal_and_host()
    return security.any_allowed(principal, host, operation, resource_type)
