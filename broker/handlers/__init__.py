"""Request handlers, one module per API family. Importing registers nothing: the composition root
builds the table from ``MODULES`` (``broker.network.dispatcher.handler_table``)."""

from broker.handlers import (
    admin,
    admin_apis,
    fetch,
    groups,
    produce,
    producer_id,
    security,
    share,
    txn,
)

MODULES = (admin, admin_apis, fetch, groups, produce, producer_id, security, share, txn)
