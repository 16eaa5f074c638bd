"""From a request frame to a reply: header, version check, decode, handler, encode.

Handlers are marked with ``@handles(api_key, version...)``; marking registers nothing. The
composition root builds the table explicitly (``handler_table(*modules)``) and a ``Dispatcher``
over it. A handler receives ``(broker, header, request)`` where ``request`` is the decoded
Container (or, for ``raw=True`` handlers, ``(frame, body_offset)`` so that Produce can decode its
records without copying them). A handler returns one of:

- a dict/Container: the response, encoded here with the registered schema;
- ``bytes`` or a list of byte chunks: an already encoded response body;
- ``Deferred(async_fn)``: the reply comes later (acks=all fsync, long-poll fetch, a rebalance, the
  markers of EndTxn); the connection awaits it in request order and ``async_fn()`` returns one of
  the above;
- ``AnswerFirst(value, finish)``: answer ``value`` at once, then run ``finish()`` (the fsync of a
  change already decided) right after the answer is sent and before anything else runs;
- ``NO_RESPONSE`` (Produce with acks=0).

``Deferred`` is the one type for "a reply that comes later": the services return their results as
``T | Deferred[T]`` and the handlers turn them into responses with ``reply(result, encode)``.
"""

from __future__ import annotations

import functools
import logging
import struct
import time
import traceback
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

import trio

from broker.handlers import peer
from broker.handlers.marks import MARK, Handler
from broker.metrics import Metrics, error_codes
from broker.reply import NO_RESPONSE, AnswerFirst, Deferred
from broker.security.sasl import AuthenticationFailed
from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError
from protocol.headers import RequestHeader, encode_response_head, parse_request_header_untrusted
from protocol.messages import SCHEMAS, decode_request, encode_response
from protocol.messages.api_versions import (
    API_VERSIONS_FALLBACK_BODY,
    IMPLEMENTED,
)
from protocol.text import clip, clip_message, for_log

log = logging.getLogger("minibroker.dispatch")
_API_AND_VERSION = struct.Struct(">hh")  # the first fields of every request header

Body = bytes | bytearray | memoryview
Chunks = list[Body]


class CloseConnection(Exception):
    """The peer sent something we cannot answer (unknown API, bad frame): drop the connection."""


HandlerTable = dict[tuple[int, int], tuple[Handler, bool]]


def handler_table(*modules: ModuleType) -> HandlerTable:
    """The ``(api_key, version) -> (handler, raw)`` table of the marked functions of ``modules``."""
    table: HandlerTable = {}
    for module in modules:
        for fn in vars(module).values():
            for key, version, raw in getattr(fn, MARK, ()) if callable(fn) else ():
                if (key, version) in table:
                    raise ValueError(f"two handlers for {ApiKey(key).name} v{version}")
                table[(key, version)] = (fn, raw)
    return table


def implemented(table: HandlerTable) -> frozenset[tuple[int, int]]:
    """(api_key, version) pairs that have both a schema and a handler."""
    return frozenset(k for k in table if k in SCHEMAS)


def check_served(table: HandlerTable) -> None:
    """Refuse a table that does not serve exactly the served-versions table: every advertised
    (api, version) must have a codec and a handler, and no handler may serve a version outside
    the table (docs/protocol.md section 2: what ApiVersions advertises is what is implemented)."""
    wanted = frozenset((int(k), v) for k, v in IMPLEMENTED)
    missing = sorted(wanted - implemented(table))
    extra = sorted(frozenset(table) - wanted)
    if missing or extra:
        raise ValueError(
            "the handlers do not serve the served-versions table: missing "
            f"{[f'{ApiKey(k).name} v{v}' for k, v in missing]}, not in the table "
            f"{[f'{ApiKey(k).name} v{v}' for k, v in extra]}"
        )


class Dispatcher:
    """Runs the handler of one request frame, with ``context`` (what handlers may touch).
    The table must serve exactly the served-versions table (``check_served``). With ``metrics``
    it also counts each request, its error codes and its latency (until a deferred reply is
    ready)."""

    def __init__(self, table: HandlerTable, context: Any, metrics: Metrics | None = None) -> None:
        check_served(table)
        self.table = table
        self.context = context
        self.metrics = metrics
        # ``dispatch(frame)``: the module's function with the table and context bound (a
        # partial: no Python frame of its own, on the path of every request).
        self.dispatch: Callable[..., tuple[RequestHeader | None, Any]] = (
            self._dispatch_counted if metrics is not None
            else functools.partial(dispatch, table, context))

    def _dispatch_counted(self, frame: bytearray,
                          session: peer.Session | None = None) -> tuple[RequestHeader | None, Any]:
        metrics: Metrics = self.metrics  # type: ignore[assignment]  # set when counting
        started = time.perf_counter()
        try:
            header, result = dispatch(self.table, self.context, frame, session)
        except CloseConnection:
            if len(frame) >= 4:
                metrics.connection_closed_on_error(*_API_AND_VERSION.unpack_from(frame, 0))
            raise
        if header is None:  # a bare SASL token
            return header, result
        key, version = header.api_key, header.api_version
        if isinstance(result, Deferred):
            return header, Deferred(functools.partial(_timed, metrics, key, version, started,
                                                      result.wait), result.hold)
        answer = result.value if isinstance(result, AnswerFirst) else result
        metrics.request(key, version, time.perf_counter() - started, error_codes(answer))
        return header, result


async def _timed(metrics: Metrics, key: int, version: int, started: float,
                 wait: Callable[[], Awaitable[Any]]) -> Any:
    """A deferred result, counted once it is there."""
    value = await wait()
    metrics.request(key, version, time.perf_counter() - started, error_codes(value))
    return value


def dispatch(table: HandlerTable, broker: Any, frame: bytearray,
             session: peer.Session | None = None) -> tuple[RequestHeader | None, Any]:
    """Run the handler for one request frame: ``(header, handler result)``. ``session``: the
    connection's (its task passes it; else the current peer's).

    Raises CloseConnection for requests that cannot be answered.
    """
    if session is None:
        session = peer.session()
    if session.sasl_state == "tokens":
        return _bare_sasl_token(broker, session, frame)
    try:
        header, offset = parse_request_header_untrusted(frame)
    except CorruptFrameError as exc:
        raise CloseConnection(f"bad request header: {exc}") from None
    key, version, _, _ = header
    if session.sasl_state != "done" and key not in _SASL_EXCHANGE:
        # As Kafka: nothing but the SASL exchange (and ApiVersions) before authentication.
        name = ApiKey(key).name if key in _KNOWN_KEYS else str(key)
        raise CloseConnection(f"unexpected {name} request during SASL authentication")
    entry = table.get((key, version))
    if entry is None:
        if key == ApiKey.API_VERSIONS:
            # A version above ours: answer in v0 with UNSUPPORTED_VERSION and our ApiVersions
            # range, so that the client retries with one we serve (docs/protocol.md section 3).
            return header, API_VERSIONS_FALLBACK_BODY
        raise CloseConnection(f"unsupported api_key {key} version {version}")
    fn, raw = entry
    try:
        if raw:
            return header, fn(broker, header, frame, offset)
        request = decode_request(key, version, frame, offset)
        return header, fn(broker, header, request)
    except CorruptFrameError as exc:
        raise CloseConnection(f"undecodable {ApiKey(key).name} v{version}: {clip(exc)}") from None
    except CloseConnection:
        raise
    except Exception as exc:
        # A bug must cost one connection, never the broker.
        log_bug(log, exc, "%s v%d handler failed (client %s, id %s)", ApiKey(key).name, version,
                peer.client_host() or "?", for_log(header.client_id))
        raise CloseConnection(f"internal error in {ApiKey(key).name}: {clip(repr(exc))}") from None


def log_bug(logger: logging.Logger, exc: BaseException, message: str, *args: Any) -> None:
    """``message`` and the traceback of ``exc``, its text clipped and escaped: an exception's
    text may repeat what a client sent (a KeyError of its topic name)."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=20)
    text = "".join(line if len(line) <= 1000 else for_log(line, 1000) + "\n" for line in lines)
    logger.error(message + "\n%s", *args, text.rstrip("\n"))


_SASL_EXCHANGE = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_KNOWN_KEYS = frozenset(int(k) for k in ApiKey)


def _bare_sasl_token(broker: Any, session: Any, frame: bytearray) -> tuple[None, Any]:
    """After a SaslHandshake v0 the client sends its SASL tokens as bare frames and gets bare
    frames back. A failure has no answer: as in Kafka, the connection is closed after
    ``connection.failed.authentication.delay.ms`` (as on the SaslAuthenticate path), so that a
    password guesser gains nothing by choosing v0."""
    try:
        reply = session.sasl.step(bytes(frame))
    except AuthenticationFailed as exc:
        log.warning("%s (client %s)", exc, peer.client_host())
        session.close_after_reply = True
        delay = broker.config.security.connection_failed_authentication_delay_ms / 1000

        async def close_later() -> object:
            await trio.sleep(delay)
            return NO_RESPONSE

        return None, Deferred(close_later)
    if session.sasl.done:
        session.principal, session.sasl_state, session.sasl = session.sasl.principal, "done", None
    return None, reply


def encode_reply(header: RequestHeader | None, result: Any) -> Chunks | None:
    """The response frame for a handler result, as chunks (size prefix first); None: no response.
    ``header`` None: ``result`` is a bare SASL token (SaslHandshake v0)."""
    if result is NO_RESPONSE:
        return None
    if header is None:
        return [len(result).to_bytes(4, "big") + result]
    key, version, correlation_id, _ = header
    if isinstance(result, _BODY_TYPES):
        return [encode_response_head(key, version, correlation_id, len(result)), result]
    if isinstance(result, list):
        return [encode_response_head(key, version, correlation_id, sum(map(len, result))),
                *result]
    try:
        body = encode_response(key, version, result)
    except Exception as exc:  # noqa: BLE001 - whatever a codec raises, the answer is refused
        body = _encode_clipped(key, version, result, exc)
    return [encode_response_head(key, version, correlation_id, len(body)), body]


class UnencodableReply(CloseConnection):
    """An answer the codec refuses even with its error messages clipped: the connection is
    closed (the broker keeps serving the others)."""


def _encode_clipped(key: int, version: int, result: Any, exc: Exception) -> bytes:
    """The answer with every error message cut to what a string field carries (a message that
    repeats a client's 32,767-character name no longer fits an int16 length); the handlers clip
    the names they echo (``protocol.text.clip``), this is the net below them."""
    try:
        return encode_response(key, version, _clip_messages(result))
    except Exception as again:  # noqa: BLE001
        raise UnencodableReply(f"cannot encode the {_api_name(key)} v{version} answer: "
                               f"{clip(repr(again))}") from exc


def _clip_messages(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: clip_message(v) if isinstance(v, str) and k.endswith("message")
                else _clip_messages(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not isinstance(value, _BODY_TYPES):
        return [_clip_messages(v) for v in value]
    return value


def _api_name(key: int) -> str:
    return ApiKey(key).name if key in _KNOWN_KEYS else str(key)


_BODY_TYPES = (bytes, bytearray, memoryview)
