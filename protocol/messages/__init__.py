"""Message declarations, one module per API family (``_declare.declare``: each field with its
version range, the codec of every version follows).

Importing this package registers every codec; use ``decode_request`` / ``encode_response``
(broker; ``encode_response_parts`` for a Fetch answer whose records are sent as they are) and
``encode_request`` / ``decode_response`` (client) with an (api_key, api_version) pair. The broker's
request path (``_codegen.FAST_APIS``) decodes requests and encodes responses with codecs
generated from the same declarations (``_codegen``, registered with their schemas: those
functions use them); ``api_versions.SERVED`` is the table of served versions.
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
    offset_for_leader_epoch,
    offsets,
    produce,
    security,
    share,
    streams_groups,
    telemetry,
    txn,
)
from protocol.messages._codegen import install as _install_generated_codecs
from protocol.messages._registry import (
    SCHEMAS,
    Schema,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_parts,
)

_install_generated_codecs()

__all__ = [
    "SCHEMAS",
    "Schema",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_parts",
]
