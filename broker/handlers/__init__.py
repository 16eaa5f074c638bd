"""Request handlers, one module per API family, marked with ``marks.handles``. Importing registers
nothing: the composition root builds the table from ``MODULES``
(``broker.network.dispatcher.handler_table``). ``context.Broker`` is what a handler may touch,
``peer`` what it may know of the connection its request came on."""

from broker.handlers import (
    admin,
    admin_apis,
    fetch,
    groups,
    leader_epoch,
    produce,
    producer_id,
    security,
    share,
    streams,
    telemetry,
    txn,
)

MODULES = (admin, admin_apis, fetch, groups, leader_epoch, produce, producer_id, security, share,
           streams, telemetry, txn)
