"""Request handlers, one module per API family; importing this package registers them all."""

from broker.handlers import (  # noqa: F401
    admin,
    admin_apis,
    fetch,
    groups,
    produce,
    producer_id,
    txn,
)
