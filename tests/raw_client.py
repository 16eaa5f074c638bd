"""A minimal blocking Kafka-protocol connection for tests that need to send exact bytes."""

from __future__ import annotations

import socket
import struct
from typing import Any

from protocol.headers import RequestHeader, encode_request_header, parse_response_header_untrusted
from protocol.messages import decode_response, encode_request


class RawConnection:
    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_request(self, api_key: int, version: int, body: bytes | dict, client_id: str = "raw") -> int:
        self._correlation += 1
        header = encode_request_header(RequestHeader(api_key, version, self._correlation, client_id))
        payload = body if isinstance(body, bytes) else encode_request(api_key, version, body)
        frame = header + payload
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        return self._correlation

    def read_frame(self) -> bytes | None:
        """The next response frame, or None if the broker closed the connection."""
        head = self._recv_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._recv_exact(size)

    def request(self, api_key: int, version: int, body: bytes | dict) -> Any:
        correlation_id = self.send_request(api_key, version, body)
        frame = self.read_frame()
        assert frame is not None, "broker closed the connection"
        got, offset = parse_response_header_untrusted(frame, api_key, version)
        assert got == correlation_id
        return decode_response(api_key, version, frame, offset)

    def is_closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _recv_exact(self, n: int) -> bytes | None:
        chunks = []
        while n:
            try:
                chunk = self.sock.recv(n)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)
