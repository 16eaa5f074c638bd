"""A tiny blocking Kafka-protocol client for the broker's own command-line tools.

One connection, one request at a time: frame, send, read the reply, check the correlation id,
decode with the registered schema (flexible headers included). No ApiVersions handshake: the tools
only send versions this broker implements. Every failure (connection refused, timeout, closed
connection, undecodable reply) raises ``RequestError`` with a one-line message.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError
from protocol.headers import RequestHeader, encode_request_header, parse_response_header_untrusted
from protocol.messages import decode_response, encode_request

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 100 * 1024 * 1024


class RequestError(Exception):
    """A request could not be sent or its reply not read."""


def parse_bootstrap(address: str) -> tuple[str, int]:
    """``host:port`` (the first of a comma-separated list) -> ``(host, port)``."""
    first = address.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RequestError(f"bootstrap server {address!r} is not host:port")
    return host.strip("[]"), int(port)


class BlockingClient:
    def __init__(self, address: str, timeout_s: float = 10.0, client_id: str = "minibroker-cli"):
        host, port = parse_bootstrap(address)
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self._correlation = 0
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise RequestError(f"cannot connect to {self.address}: {exc.strerror or exc}") from None

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def request(self, api_key: ApiKey, version: int, body: dict) -> Any:
        """Send one request and return the decoded response (a construct Container)."""
        self._correlation += 1
        header = encode_request_header(
            RequestHeader(int(api_key), version, self._correlation, self.client_id)
        )
        frame = header + encode_request(api_key, version, body)
        try:
            self._sock.sendall(_SIZE.pack(len(frame)) + frame)
            (size,) = _SIZE.unpack(self._recv_exact(4))
            if not 0 < size <= MAX_RESPONSE_BYTES:
                raise RequestError(f"{self.address} sent a frame of {size} bytes")
            reply = self._recv_exact(size)
        except OSError as exc:
            raise RequestError(f"{self.address}: {exc.strerror or exc}") from None
        try:
            correlation_id, offset = parse_response_header_untrusted(reply, api_key, version)
            if correlation_id != self._correlation:
                raise RequestError(f"{self.address} answered out of order")
            return decode_response(api_key, version, reply, offset)
        except CorruptFrameError as exc:
            raise RequestError(f"{self.address} sent an undecodable reply: {exc}") from None

    def _recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self._sock.recv(min(n, 1 << 20))
            if not chunk:
                raise RequestError(f"{self.address} closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)
