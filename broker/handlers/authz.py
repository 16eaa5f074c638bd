"""Authorization as the handlers ask for it: the principal and host of the current request
(broker/handlers/peer.py) against ``broker.security`` (always allowed without an authorizer).

A refusal is logged ("refused: ..."), as Kafka's authorizer logs denials, except where Kafka
does not log them either (``log_refusal=False``: resources left out of a listing, such as the
topics of an all-topics Metadata, the groups of ListGroups, the cluster check before a per-topic
one). At most ``REFUSAL_LINES_PER_SECOND`` refusal lines are logged per connection each second;
the number of those left out is logged with the next line, or when the connection closes.
"""

from __future__ import annotations

import logging
import time

from broker.handlers import peer
from broker.handlers.context import Broker
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from protocol.text import for_log

log = logging.getLogger("minibroker.security")

REFUSAL_LINES_PER_SECOND = 10

# The operations each resource type supports (Kafka's AclEntry.supportedOperations, 4.x): the
# bits of the authorized-operations fields of DescribeCluster, Metadata and DescribeGroups.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
                         Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE,
                         Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                           Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}


def allowed(broker: Broker, operation: Operation, resource_type: ResourceType, name: str,
            *, log_refusal: bool = True) -> bool:
    security = broker.security
    if security.authorizer is None:
        return True
    principal, host = peer.principal_and_host()
    ok = security.authorize(principal, host, operation, resource_type, name)
    if not ok and log_refusal:
        session = peer.session()
        if session.refusals is None:
            session.refusals = RefusalLog(principal, host)
        session.refusals.refused(operation, resource_type, name, time.monotonic())
    return ok


def any_allowed(broker: Broker, operation: Operation, resource_type: ResourceType) -> bool:
    security = broker.security
    if security.authorizer is None:
        return True
    principal, host = peer.principal_and_host()
    return security.any_allowed(principal, host, operation, resource_type)


def authorized_operations(broker: Broker, resource_type: ResourceType, name: str) -> int:
    """The operations the principal may do on the resource, as Kafka's bit field (bit ``code``
    of each allowed operation among those the type supports); no refusal is logged."""
    security = broker.security
    principal, host = peer.principal_and_host()
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if security.authorize(principal, host, operation, resource_type, name):
            bits |= 1 << operation
    return bits


def cluster_authorized_operations(broker: Broker) -> int:
    """As Kafka (DescribeCluster, Metadata v8-10): the operations the principal may do on the
    cluster, 0 without Describe on it."""
    if not allowed(broker, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    return authorized_operations(broker, ResourceType.CLUSTER, CLUSTER_NAME)


def _shown(principal: str) -> str:
    """A principal in a refusal line: as it is when it is printable and short (``User:alice``,
    as Kafka's authorizer log shows it), else clipped, quoted and escaped (a SASL or
    certificate name is the client's text)."""
    return principal if len(principal) <= 512 and principal.isprintable() else for_log(principal, 512)


class RefusalLog:
    """The refusal lines of one connection (``Session.refusals``): at most
    ``REFUSAL_LINES_PER_SECOND`` in each one-second window; the others are counted, and the
    count is logged when the next window logs a line, or when the connection closes
    (``close``), so that a client cannot flood the log with refused requests."""

    __slots__ = ("_host", "_lines", "_principal", "_suppressed", "_window")

    def __init__(self, principal: str, host: str) -> None:
        self._principal = principal
        self._host = host or "?"
        self._window = float("-inf")
        self._lines = 0
        self._suppressed = 0

    def refused(self, operation: Operation, resource_type: ResourceType, name: str,
                now: float) -> None:
        if now - self._window >= 1.0:
            self._report_suppressed()
            self._window, self._lines = now, 0
        if self._lines < REFUSAL_LINES_PER_SECOND:
            self._lines += 1
            log.info("refused: %s from %s may not %s %s %s", _shown(self._principal),
                     self._host, operation.name, resource_type.name, for_log(name))
        else:
            self._suppressed += 1

    def close(self) -> None:
        self._report_suppressed()

    def _report_suppressed(self) -> None:
        if self._suppressed:
            log.info("refused: %d more refusals of %s from %s not logged (at most %d lines a "
                     "second per connection)", self._suppressed, _shown(self._principal), self._host,
                     REFUSAL_LINES_PER_SECOND)
            self._suppressed = 0
