"""Message declarations, one module per API family (``_declare.declare``: each field with its
version range, the codec of every version follows).

Importing this package registers every codec; use ``decode_request`` / ``encode_response``
(broker) and ``encode_request`` / ``decode_response`` (client) with an (api_key, api_version)
pair. The Produce request and the Fetch response also have hand-written fast paths
(``produce.decode_produce_request_untrusted``, ``produce.encode_produce_response``,
``fetch.encode_fetch_response_parts``, ``fetch.decode_fetch_response_untrusted``), checked against
the declared codecs by tests, and so do the transaction requests and responses (``txn_fast``,
registered with their schemas: ``decode_request`` / ``encode_response`` use them);
``api_versions.SERVED`` is the table of served versions.
"""

from protocol.messages import (  # noqa: F401  (each module registers its schemas)
    admin,
    admin_apis,
    api_versions,
    consumer_groups,
    describe_topic_partitions,
    describe_transactions,
    fetch,
    find_coordinator,
    groups,
    init_producer_id,
    list_offsets,
    metadata,
    offsets,
    produce,
    security,
    share,
    streams_groups,
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
