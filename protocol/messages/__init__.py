"""Message schemas of the pinned protocol subset, one module per API family.

Importing this package registers every schema; use ``decode_request`` / ``encode_response`` (broker)
and ``encode_request`` / ``decode_response`` (client) with an (api_key, api_version) pair. The
Produce request and Fetch response also have hand-written fast paths for the broker
(``produce.decode_produce_request_v3_untrusted``, ``produce.encode_produce_response_v3``,
``fetch.encode_fetch_response_v4_parts``); ``api_versions`` holds the advertised-versions table.
"""

from protocol.messages import (  # noqa: F401  (each module registers its schemas)
    admin,
    admin_apis,
    api_versions,
    describe_transactions,
    fetch,
    find_coordinator,
    groups,
    init_producer_id,
    list_offsets,
    metadata,
    offsets,
    produce,
    txn,
)
from protocol.messages._registry import (
    SCHEMAS,
    Schema,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

__all__ = [
    "SCHEMAS",
    "Schema",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
]
