"""Request handlers, one module per API family; importing this package registers them all."""

from broker.handlers import admin, fetch, groups, produce, producer_id, txn  # noqa: F401
