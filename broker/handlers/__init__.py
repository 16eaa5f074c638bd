"""Request handlers, one module per API family; importing this package registers them all."""

from broker.handlers import admin, fetch, produce, producer_id  # noqa: F401
