"""One TCP connection to one broker: framing, correlation ids, in-order pipelining, ApiVersions.

Requests are written in the order ``send`` is called and may be pipelined (many unanswered at
once). Kafka answers a connection's requests strictly in order, so responses are matched to the
queue of pending requests by position, and the correlation id is checked: a mismatch means the
stream is out of step and the connection is closed.

A reader task (started in the owner's nursery) decodes responses. A pending request either has a
callback, run in the reader task with ``(response, None)`` or ``(None, error)`` (the producer uses
this: no task per request), or is awaited by ``request``. Every request has a deadline
(``request.timeout.ms``, plus the broker-side wait of a Fetch); when the oldest passes, the
connection is closed and every pending request fails with ``KafkaTimeoutError``, as Kafka clients do.

On connect the client sends ApiVersions v3 (with its software name and version, KIP-511) and keeps
the broker's table; a broker that does not speak v3 answers UNSUPPORTED_VERSION with its own
ApiVersions range, and the client asks again with the newest version in that range (v0 at
worst). ``version(api_key)`` is then the highest version both sides speak; ours are the versions
with a codec up to ``CLIENT_MAX_VERSION`` (what this client's code builds and reads).
"""

from __future__ import annotations

import logging
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from client.aio.security import ClientSecurity, authenticate, protocol_hint
from client.errors import (
    BrokerConnectionError,
    CorruptResponseError,
    IllegalStateError,
    KafkaClientError,
    KafkaTimeoutError,
    UnsupportedVersionError,
    error_for,
)
from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError, ErrorCode
from protocol.framing import FrameDecoder
from protocol.headers import RequestHeader, encode_request_header, parse_response_header_untrusted
from protocol.messages import SCHEMAS, decode_response, encode_request

log = logging.getLogger("client.connection")

ResponseCallback = Callable[[Any, BaseException | None], None]
# Opens the byte stream to (host, port): trio.open_tcp_stream, or a test's in-memory broker.
OpenStream = Callable[[str, int], Awaitable[trio.abc.Stream]]

# The newest version of each API that this client's code speaks: the requests it builds and the
# response fields it reads are those of every version up to this one (below each cap, the
# reason). Absent: up to the newest version with a codec.
CLIENT_MAX_VERSION: dict[int, int] = {
    ApiKey.FIND_COORDINATOR: 3,  # v4+ batch the keys in another layout
    ApiKey.OFFSET_FETCH: 7,  # v8+ batch the groups in another layout
    ApiKey.LEAVE_GROUP: 2,  # v3+ batch the members in another layout
    ApiKey.OFFSET_COMMIT: 9,  # v9 carries the member epoch (KIP-848); v10 names topics by id
    ApiKey.LIST_OFFSETS: 9,  # v10 adds a timeout for tiered storage
}

# The versions this client can encode/decode: those with a registered schema, up to the cap.
OUR_VERSIONS: dict[int, tuple[int, ...]] = {}
for _key, _version in sorted(SCHEMAS):
    if _version <= CLIENT_MAX_VERSION.get(_key, _version):
        OUR_VERSIONS[_key] = (*OUR_VERSIONS.get(_key, ()), _version)

SOFTWARE_NAME = "minibroker-client"
SOFTWARE_VERSION = "1.0"
API_VERSIONS_FIRST = 3  # the version a connection opens with

_MAX_RESPONSE_SIZE = 512 * 1024 * 1024


def _discard(queue: deque[_Pending], pending: _Pending) -> bool:
    """Remove ``pending`` (by identity) from ``queue``; whether it was there."""
    for i, queued in enumerate(queue):
        if queued is pending:
            del queue[i]
            return True
    return False


class _Pending:
    __slots__ = (
        "correlation_id",
        "api_key",
        "version",
        "deadline",
        "callback",
        "done",
        "response",
        "error",
    )

    def __init__(
        self,
        correlation_id: int,
        api_key: int,
        version: int,
        deadline: float,
        callback: ResponseCallback | None,
    ) -> None:
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.version = version
        self.deadline = deadline
        self.callback = callback
        self.done: trio.Event | None = None if callback is not None else trio.Event()
        self.response: Any = None
        self.error: BaseException | None = None

    def resolve(self, response: Any, error: BaseException | None) -> None:
        if self.callback is not None:
            callback, self.callback = self.callback, None
            try:
                callback(response, error)
            except Exception:  # a bug in a callback must not take the connection down
                log.exception("response callback failed")
        elif self.done is not None:
            self.response, self.error = response, error
            self.done.set()


class BrokerConnection:
    """A connection to ``host:port`` (``node_id`` -1 for a bootstrap address)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        client_id: str = "",
        request_timeout_ms: int = 30_000,
        security: ClientSecurity | None = None,
        open_stream: OpenStream | None = None,
    ) -> None:
        self.host = host
        self._open_stream: OpenStream = open_stream or trio.open_tcp_stream
        self.security = security
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._stream: trio.abc.Stream | None = None
        self._socket: Any = None  # the TCP socket under it (closed by _fail)
        self._send_lock = trio.Lock()
        self._pending: deque[_Pending] = deque()
        self._correlation_id = 0
        self._closed = False
        self._close_error: BaseException | None = None
        self._reader_scope: trio.CancelScope | None = None
        self._receive_scope: trio.CancelScope | None = None
        self._chosen: dict[int, int] = {}
        self._features: dict[str, int] | None = None  # finalized feature levels, once asked
        self._features_lock = trio.Lock()

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    # -- lifecycle ---------------------------------------------------------------------------------

    async def connect(self, nursery: trio.Nursery, timeout: float) -> None:
        """Open the socket, start the reader in ``nursery``, and negotiate versions."""
        security = self.security
        try:
            with trio.fail_after(timeout):
                tcp = await self._open_stream(self.host, self.port)
                self._stream = tcp
                if isinstance(tcp, trio.SocketStream):
                    self._socket = tcp.socket
                    tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if security is not None and security.tls is not None:
                    tls = trio.SSLStream(tcp, security.tls, server_hostname=self.host,
                                         https_compatible=True)
                    self._stream = tls
                    await tls.do_handshake()
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            self._closed = True
            if self._socket is not None:
                self._socket.close()
            cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
            raise BrokerConnectionError(
                f"cannot connect to {self.host}:{self.port}: {cause or 'timed out'}"
            ) from None
        await nursery.start(self._reader)
        response = await self.request(ApiKey.API_VERSIONS, {
            "client_software_name": SOFTWARE_NAME, "client_software_version": SOFTWARE_VERSION,
        }, version=API_VERSIONS_FIRST)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # The broker answered in v0 with its ApiVersions range: ask again at its newest.
            theirs = {k.api_key: k.max_version for k in response.api_keys}
            retry = min(theirs.get(int(ApiKey.API_VERSIONS), 0), API_VERSIONS_FIRST - 1)
            response = await self.request(ApiKey.API_VERSIONS, {}, version=max(retry, 0))
        if response.error_code:
            await self.aclose(error_for(response.error_code, "ApiVersions"))
            raise error_for(response.error_code, f"ApiVersions from {self.host}:{self.port}")
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        if security is not None and security.sasl:
            try:
                await authenticate(self.request, security, f"{self.host}:{self.port}")
            except KafkaClientError as exc:
                await self.aclose(exc)
                raise

    async def aclose(self, error: BaseException | None = None) -> None:
        self._fail(error or BrokerConnectionError(f"connection to {self} closed"))
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with trio.CancelScope(shield=True):
                try:
                    await stream.aclose()
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                    pass

    def _fail(self, error: BaseException) -> None:
        """Mark closed and fail every pending request (synchronous: safe from any task)."""
        if not self._closed:
            self._closed = True
            self._close_error = error
        if self._reader_scope is not None:
            self._reader_scope.cancel()
        pending, self._pending = self._pending, deque()
        for p in pending:
            p.resolve(None, error)
        if self._socket is not None:
            # Closing the socket here lets a concurrent send_all fail at once.
            try:
                self._socket.close()
            except OSError:
                pass

    # -- versions -------------------------------------------------------------------------------

    def supports_version(self, api_key: int, version: int) -> bool:
        """Whether both we and the broker speak ``version`` of ``api_key``."""
        theirs = self.api_versions.get(int(api_key))
        return (theirs is not None and theirs[0] <= version <= theirs[1]
                and version in OUR_VERSIONS.get(int(api_key), ()))

    async def finalized_feature(self, name: str) -> int:
        """The level the broker finalized for a feature (``transaction.version``...): asked once
        with ApiVersions v3 (which carries the features, KIP-584); 0 if the broker does not say."""
        async with self._features_lock:
            if self._features is None:
                features: dict[str, int] = {}
                if self.supports_version(ApiKey.API_VERSIONS, 3):
                    response = await self.request(ApiKey.API_VERSIONS, {
                        "client_software_name": "minibroker-client",
                        "client_software_version": "1",
                    }, version=3)
                    if not response.error_code:
                        features = {f.name: f.max_version_level
                                    for f in response.finalized_features}
                self._features = features
        return self._features.get(name, 0)

    def version(self, api_key: int) -> int:
        """The highest version of ``api_key`` both we and the broker speak."""
        chosen = self._chosen.get(api_key)
        if chosen is not None:
            return chosen
        theirs = self.api_versions.get(int(api_key))
        ours = OUR_VERSIONS.get(int(api_key), ())
        if theirs is None:
            raise UnsupportedVersionError(
                f"broker {self.node_id} does not support {ApiKey(api_key).name}"
            )
        usable = [v for v in ours if theirs[0] <= v <= theirs[1]]
        if not usable:
            raise UnsupportedVersionError(
                f"no common version of {ApiKey(api_key).name}: ours {ours}, broker {theirs}"
            )
        self._chosen[api_key] = usable[-1]
        return usable[-1]

    def supports(self, api_key: int) -> bool:
        try:
            self.version(api_key)
        except UnsupportedVersionError:
            return False
        return True

    # -- requests -------------------------------------------------------------------------------

    async def send(
        self,
        api_key: int,
        version: int,
        body: bytes,
        *,
        callback: ResponseCallback | None = None,
        expect_response: bool = True,
        extra_timeout: float = 0.0,
    ) -> _Pending | None:
        """Write one request; returns its pending entry (None when no response is expected).

        A request's outcome is reported exactly once: if ``send`` raises, the request was never
        registered and its callback never runs; if it returns, the outcome arrives through the
        pending entry (its callback or ``done``), failures included."""
        if self._closed:
            raise self._close_error or BrokerConnectionError(f"{self} is closed")
        async with self._send_lock:
            stream = self._stream
            if self._closed or stream is None:
                raise self._close_error or BrokerConnectionError(f"{self} is closed")
            self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
            correlation_id = self._correlation_id
            header = encode_request_header(
                RequestHeader(int(api_key), version, correlation_id, self.client_id)
            )
            size = len(header) + len(body)
            frame = b"".join((size.to_bytes(4, "big"), header, body))
            pending = None
            if expect_response:
                deadline = trio.current_time() + self.request_timeout + extra_timeout
                pending = _Pending(correlation_id, int(api_key), version, deadline, callback)
                self._pending.append(pending)
                if len(self._pending) == 1 and self._receive_scope is not None:
                    self._receive_scope.deadline = deadline
            try:
                await stream.send_all(frame)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                error = BrokerConnectionError(f"sending to {self} failed: {exc}")
                ours = pending is not None and _discard(self._pending, pending)
                self._fail(error)
                if pending is not None and not ours:
                    return pending  # a concurrent failure answered it already
                raise error from None
            return pending

    async def request(
        self,
        api_key: int,
        body: dict,
        *,
        version: int | None = None,
        extra_timeout: float = 0.0,
    ) -> Any:
        """Send a request built from ``body`` (schema field names) and await its decoded response."""
        if version is None:
            version = self.version(api_key)
        data = encode_request(int(api_key), version, body)
        pending = await self.send(api_key, version, data, extra_timeout=extra_timeout)
        if pending is None or pending.done is None:  # cannot happen: a response is expected
            raise IllegalStateError(f"{ApiKey(api_key).name} request without a response entry")
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.response

    # -- the reader -----------------------------------------------------------------------------

    async def _reader(
        self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        decoder = FrameDecoder(_MAX_RESPONSE_SIZE, preallocate=True)
        with trio.CancelScope() as scope:
            self._reader_scope = scope
            task_status.started()
            try:
                await self._read_loop(decoder)
            except KafkaClientError as exc:
                self._fail(exc)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._fail(BrokerConnectionError(f"connection to {self} lost: {exc}"))
            except CorruptFrameError as exc:
                self._fail(CorruptResponseError(f"bad response from {self}: {exc}"))

    async def _read_loop(self, decoder: FrameDecoder) -> None:
        stream = self._stream
        recv_into: Callable[[memoryview], Awaitable[int]]
        if isinstance(stream, trio.SocketStream):
            recv_into = stream.socket.recv_into
        elif stream is not None:  # TLS (or a test's in-memory stream): received, then copied
            other = stream

            async def receive_copy(buffer: memoryview) -> int:
                data = await other.receive_some(len(buffer))
                buffer[:len(data)] = data
                return len(data)

            recv_into = receive_copy
        else:
            raise BrokerConnectionError(f"{self} is closed")
        inf = float("inf")
        while True:
            # The receive is bounded by the oldest pending request's deadline; ``send`` moves the
            # deadline in when the first request is queued on an idle connection. Bytes go
            # straight into the frame decoder's buffer (large frames: their own buffer).
            deadline = self._pending[0].deadline if self._pending else inf
            n = -1
            with trio.CancelScope(deadline=deadline) as scope:
                self._receive_scope = scope
                with decoder.get_buffer() as buffer:
                    n = await recv_into(buffer)
            self._receive_scope = None
            if scope.cancelled_caught:
                if self._pending and trio.current_time() >= self._pending[0].deadline:
                    raise KafkaTimeoutError(
                        f"no response from {self} within {self.request_timeout:.1f} s"
                    )
                continue
            if n == 0:
                hint = ""
                if not self.api_versions:  # closed before answering ApiVersions
                    hint = protocol_hint(self.security.protocol if self.security else "PLAINTEXT")
                raise BrokerConnectionError(f"{self} closed by the broker{hint}")
            decoder.advance(n)
            while True:
                frame = decoder.next_frame()
                if not isinstance(frame, bytearray):  # NEED_DATA
                    break
                self._dispatch(frame)

    def _dispatch(self, frame: bytearray) -> None:
        if not self._pending:
            raise CorruptResponseError(f"{self} sent a response nobody asked for")
        pending = self._pending[0]
        correlation_id, offset = parse_response_header_untrusted(
            frame, pending.api_key, pending.version
        )
        if correlation_id != pending.correlation_id:
            raise CorruptResponseError(
                f"{self}: correlation id {correlation_id}, expected {pending.correlation_id}"
            )
        self._pending.popleft()
        # (a Fetch response's records stay views into the frame: no copy of megabytes)
        if pending.api_key == ApiKey.API_VERSIONS and pending.version > 0:
            try:
                response = decode_response(pending.api_key, pending.version, frame, offset)
            except CorruptFrameError:
                # A broker that does not speak this version answers in v0 (as Java clients, try
                # that before giving up).
                response = decode_response(pending.api_key, 0, frame, offset)
        else:
            response = decode_response(pending.api_key, pending.version, frame, offset)
        pending.resolve(response, None)
