"""Test helpers that need no broker internals: an ApiVersions probe and a fault-injecting proxy.

``FaultyProxy`` sits between a client and a broker on 127.0.0.1 and relays bytes both ways. It can
lose acknowledgements: with ``drop_produce_responses_every=n`` every n-th Produce *response* is
not relayed and the connection is cut instead, after the broker has already appended the batch.
The client cannot tell whether its in-flight batches were written and must resend them; an
idempotent producer's resends are then recognised as duplicates by the broker. ``drop_all()``
cuts every open connection at once. ``requests`` counts the relayed requests by API key.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter, deque

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
    """``{api_key: (min, max)}`` as the broker at ``host:port`` advertises them (ApiVersions v0)."""
    host, _, port = bootstrap.rpartition(":")
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
