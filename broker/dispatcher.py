"""From a request frame to a reply: header, version check, decode, handler, encode.

Handlers register with ``@handles(api_key)`` (every version the table ``SERVED`` /
``UNADVERTISED`` in ``protocol.messages.api_versions`` lists for that API; ``check_served`` holds
the handlers to exactly that table, so what ApiVersions advertises is what is implemented) and
receive ``(broker, header, request)``
where ``request`` is the decoded Container (or, for ``raw=True`` handlers, ``(frame, body_offset)``
so that Produce can decode its records without copying them). A handler returns one of:

- a dict/Container: the response, encoded here with the registered schema;
- ``bytes`` or a list of byte chunks: an already encoded response body;
- ``Pending(async_fn)``: the reply comes later (acks=all fsync, long-poll fetch); the connection
  awaits it in request order and ``async_fn()`` returns one of the above;
- ``NO_RESPONSE`` (Produce with acks=0).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError
from protocol.headers import RequestHeader, encode_response_header, parse_request_header_untrusted
from protocol.messages import SCHEMAS, decode_request, encode_response
from protocol.messages.api_versions import (
    API_VERSIONS_FALLBACK_BODY,
    IMPLEMENTED,
    SERVED,
    UNADVERTISED,
)

log = logging.getLogger("minibroker.dispatch")

Body = bytes | bytearray | memoryview
Chunks = list[Body]


class Pending:
    """A reply that needs waiting for; awaited by the connection in request order."""

    __slots__ = ("wait",)

    def __init__(self, wait: Callable[[], Awaitable[Any]]) -> None:
        self.wait = wait


NO_RESPONSE = object()


class CloseConnection(Exception):
    """The peer sent something we cannot answer (unknown API, bad frame): drop the connection."""


Handler = Callable[..., Any]
_HANDLERS: dict[tuple[int, int], tuple[Handler, bool]] = {}


def handles(api_key: ApiKey, *versions: int, raw: bool = False) -> Callable[[Handler], Handler]:
    """Register ``fn`` for ``versions`` of ``api_key``; none given: every served version."""
    if not versions:
        served = (SERVED.get(api_key) or UNADVERTISED[api_key]).versions
        versions = tuple(range(served.min, served.max + 1))

    def register(fn: Handler) -> Handler:
        for version in versions:
            _HANDLERS[(int(api_key), version)] = (fn, raw)
        return fn

    return register


def dispatch(broker: Any, frame: bytearray) -> tuple[RequestHeader, Any]:
    """Run the handler for one request frame: ``(header, handler result)``.

    Raises CloseConnection for requests that cannot be answered.
    """
    try:
        header, offset = parse_request_header_untrusted(frame)
    except CorruptFrameError as exc:
        raise CloseConnection(f"bad request header: {exc}") from None
    key, version = header.api_key, header.api_version
    entry = _HANDLERS.get((key, version))
    if entry is None:
        if key == ApiKey.API_VERSIONS:
            # librdkafka and kafka-python open with ApiVersions v3/v4: answer in v0 with
            # UNSUPPORTED_VERSION so that they retry with v0 (PROTOCOL.md section 3).
            return header, API_VERSIONS_FALLBACK_BODY
        raise CloseConnection(f"unsupported api_key {key} version {version}")
    fn, raw = entry
    try:
        if raw:
            return header, fn(broker, header, frame, offset)
        request = decode_request(key, version, frame, offset)
        return header, fn(broker, header, request)
    except CorruptFrameError as exc:
        raise CloseConnection(f"undecodable {ApiKey(key).name} v{version}: {exc}") from None
    except CloseConnection:
        raise
    except Exception as exc:
        # A bug must cost one connection, never the broker.
        log.exception("%s v%d handler failed", ApiKey(key).name, version)
        raise CloseConnection(f"internal error in {ApiKey(key).name}: {exc!r}") from None


def encode_reply(header: RequestHeader, result: Any) -> Chunks | None:
    """The response frame for a handler result, as chunks (size prefix first); None: no response."""
    if result is NO_RESPONSE:
        return None
    if isinstance(result, bytes | bytearray | memoryview):
        chunks: Chunks = [result]
    elif isinstance(result, list):
        chunks = result
    else:
        chunks = [encode_response(header.api_key, header.api_version, result)]
    head = encode_response_header(header.api_key, header.api_version, header.correlation_id)
    size = len(head) + sum(len(c) for c in chunks)
    return [size.to_bytes(4, "big") + head, *chunks]


def implemented() -> frozenset[tuple[int, int]]:
    """(api_key, version) pairs that have both a schema and a handler."""
    return frozenset(k for k in _HANDLERS if k in SCHEMAS)


def check_served() -> None:
    """Refuse to run unless the handlers serve exactly the served table (every advertised version
    has a codec and a handler; no handler serves a version that is not in the table)."""
    handled = frozenset(_HANDLERS)
    table = frozenset((int(k), v) for k, v in IMPLEMENTED)
    missing = sorted(table - implemented())
    extra = sorted(handled - table)
    if missing or extra:
        names = [f"{ApiKey(k).name} v{v}" for k, v in missing]
        raise RuntimeError(
            f"served versions without codec or handler: {names}; "
            f"handlers outside the served table: {[f'{ApiKey(k).name} v{v}' for k, v in extra]}"
        )
