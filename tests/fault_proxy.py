"""Test helpers that need no broker internals: an ApiVersions probe and a fault-injecting proxy.

``FaultyProxy`` sits between a client and a broker on 127.0.0.1 and relays bytes both ways. It can
lose acknowledgements: with ``drop_produce_responses_every=n`` every n-th Produce *response* is
not relayed and the connection is cut instead, after the broker has already appended the batch.
The client cannot tell whether its in-flight batches were written and must resend them; an
idempotent producer's resends are then recognised as duplicates by the broker. ``drop_all()``
cuts every open connection at once. ``requests`` counts the relayed requests by API key.

``HoldingProxy`` holds, delays and reorders requests across connections (below).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter, deque
from collections.abc import Callable

from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError
from protocol.framing import encode_frame
from protocol.headers import RequestHeader, encode_request_header
from protocol.messages import decode_response
from tests.raw_client import SocketFrames

_API_KEY = struct.Struct(">h")


def _next_frame(frames: SocketFrames) -> bytearray:
    frame = frames.next_frame()
    if frame is None:
        raise ConnectionError("connection closed")
    return frame


def broker_api_versions(bootstrap: str, timeout: float = 10.0) -> dict[int, tuple[int, int]]:
    """``{api_key: (min, max)}`` as the broker at ``host:port`` advertises them (ApiVersions v0);
    of a list (``host:port,host:port``), the first."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        header = encode_request_header(RequestHeader(ApiKey.API_VERSIONS, 0, 1, "probe"))
        sock.sendall(encode_frame(header))
        frame = _next_frame(SocketFrames(sock))
    response = decode_response(ApiKey.API_VERSIONS, 0, frame, 4)
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def broker_supports(bootstrap: str, *api_keys: int) -> bool:
    versions = broker_api_versions(bootstrap)
    return all(int(k) in versions for k in api_keys)


class FaultyProxy:
    """A TCP relay to ``upstream`` (host, port) listening on 127.0.0.1 (see the module docstring)."""

    def __init__(self, upstream: tuple[str, int], drop_produce_responses_every: int = 0) -> None:
        self.upstream = upstream
        self.drop_every = drop_produce_responses_every
        self.dropped = 0
        self.produce_responses = 0
        self.requests: Counter[int] = Counter()  # relayed requests by API key
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            api_keys: deque[int] = deque()
            with self._lock:
                self._pairs.append((client, server))
            threading.Thread(
                target=self._requests, args=(client, server, api_keys), daemon=True
            ).start()
            threading.Thread(
                target=self._responses, args=(server, client, api_keys), daemon=True
            ).start()

    def _requests(self, client: socket.socket, server: socket.socket, api_keys: deque[int]) -> None:
        frames = SocketFrames(client)
        try:
            while True:
                frame = _next_frame(frames)
                (api_key,) = _API_KEY.unpack_from(frame, 0)
                # acks=0 Produce gets no response; our tests use acks=all.
                api_keys.append(api_key)
                with self._lock:
                    self.requests[api_key] += 1
                server.sendall(encode_frame(frame))
        except (OSError, ConnectionError, struct.error, CorruptFrameError):
            self._cut(client, server)

    def _responses(
        self, server: socket.socket, client: socket.socket, api_keys: deque[int]
    ) -> None:
        frames = SocketFrames(server)
        try:
            while True:
                frame = _next_frame(frames)
                api_key = api_keys.popleft() if api_keys else -1
                if api_key == ApiKey.PRODUCE and self.drop_every:
                    with self._lock:
                        self.produce_responses += 1
                        drop = self.produce_responses % self.drop_every == 0
                        if drop:
                            self.dropped += 1
                    if drop:
                        self._cut(client, server)
                        return
                client.sendall(encode_frame(frame))
        except (OSError, ConnectionError, struct.error, IndexError, CorruptFrameError):
            self._cut(client, server)

    def _cut(self, client: socket.socket, server: socket.socket) -> None:
        for s in (client, server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def drop_all(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for client, server in pairs:
            self._cut(client, server)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.drop_all()

    def __enter__(self) -> FaultyProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# -- holding requests across connections -------------------------------------------------------

# HoldingProxy: a loopback TCP proxy that holds, delays and reorders Kafka requests across
# connections.
#
# Each client connection gets its own upstream connection to the broker. Requests are read frame by
# frame (int32 size + body; the api key is the body's first two bytes). A *hold* makes one
# connection stop forwarding: from the first request that matches (an api key) on, that
# connection's requests are kept in order; ``release()`` sends them upstream later, after whatever
# newer connections sent meanwhile, so they arrive late and out of order with respect to the other
# connections, as after a network stall. The client usually gives up on the held connection
# (request timeout) and closes it; the proxy keeps the upstream side open until the held requests
# are delivered, exactly as TCP would deliver bytes that were in flight before a close.
#
# Only for tests: it listens on 127.0.0.1 and stops by ``close()``.

_SIZE = struct.Struct(">i")


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    data = bytearray()
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return bytes(data)


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, proxy: HoldingProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.held: list[bytes] | None = None  # frames kept back while holding
        self.lock = threading.Lock()
        self.client_gone = False
        self.released = threading.Event()

    def pump_requests(self) -> None:
        while True:
            head = _recv_exact(self.client, 4)
            body = None if head is None else _recv_exact(self.client, _SIZE.unpack(head)[0])
            if body is None:
                break
            frame = head + body
            api_key = struct.unpack_from(">h", body)[0] if len(body) >= 2 else -1
            with self.lock:
                if self.held is None and self.proxy._take_hold(api_key):
                    self.held = []
                if self.held is not None:
                    self.held.append(frame)
                    continue
            try:
                self.upstream.sendall(frame)
            except OSError:
                break
        with self.lock:
            self.client_gone = True
            holding = self.held is not None
        if holding:
            self.released.wait(60)  # the held requests go upstream first, then the close
        self._shutdown_upstream()

    def pump_responses(self) -> None:
        while True:
            try:
                data = self.upstream.recv(65536)
            except OSError:
                break
            if not data:
                break
            try:
                self.client.sendall(data)
            except OSError:
                pass  # the client left; keep reading so the broker is never blocked
        try:
            self.client.close()
        except OSError:
            pass

    def release(self) -> int:
        with self.lock:
            frames, self.held = self.held or [], None
            gone = self.client_gone
        for frame in frames:
            try:
                self.upstream.sendall(frame)
            except OSError:
                break
        self.released.set()
        if gone:
            self._shutdown_upstream()
        return len(frames)

    def _shutdown_upstream(self) -> None:
        try:
            self.upstream.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class HoldingProxy:
    """``hold(api_key)``: the next connection that sends a request with that api key holds it
    and everything after it; ``release()`` delivers what every holding connection kept."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._hold_when: Callable[[int], bool] | None = None
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="fault-proxy").start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def hold(self, api_key: int) -> None:
        with self._lock:
            self._hold_when = lambda key: key == api_key

    def _take_hold(self, api_key: int) -> bool:
        with self._lock:
            if self._hold_when is not None and self._hold_when(api_key):
                self._hold_when = None
                return True
        return False

    @property
    def holding(self) -> int:
        """Requests held right now, over all connections."""
        with self._lock:
            links = list(self._links)
        return sum(len(link.held or ()) for link in links)

    def release(self) -> int:
        """Deliver every held request upstream (in each connection's order); how many."""
        with self._lock:
            links = list(self._links)
            self._hold_when = None
        return sum(link.release() for link in links)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(self, client, upstream)
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._links.append(link)
            threading.Thread(target=link.pump_requests, daemon=True).start()
            threading.Thread(target=link.pump_responses, daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            links, self._links = self._links, []
        try:
            self._listener.close()
        except OSError:
            pass
        for link in links:
            link.released.set()
            for s in (link.client, link.upstream):
                try:
                    s.close()
                except OSError:
                    pass

    def __enter__(self) -> HoldingProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
