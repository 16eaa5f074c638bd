"""Request handlers, one module per API family; importing this package registers them all and
checks that they serve exactly the served-versions table (``broker.dispatcher.check_served``)."""

from broker.dispatcher import check_served
from broker.handlers import admin, fetch, groups, produce, producer_id, txn  # noqa: F401

check_served()
