"""A minimal blocking Kafka-protocol connection for tests that need to send exact bytes.

Frames are cut by protocol's ``FrameDecoder`` (``SocketFrames``), as the broker and the client
cut them; the fault-injecting proxy (``tests/fault_proxy.py``) reads through the same class.
"""

from __future__ import annotations

import socket
from typing import Any

from protocol.framing import NEED_DATA, FrameDecoder, encode_frame
from protocol.headers import RequestHeader, encode_request_header, parse_response_header_untrusted
from protocol.messages import decode_response, encode_request


class SocketFrames:
    """The frames arriving on a blocking socket, through ``FrameDecoder``."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = FrameDecoder()

    def next_frame(self) -> bytearray | None:
        """The next frame body (no size prefix); None once the peer closed or reset."""
        while True:
            frame = self.decoder.next_frame()
            if isinstance(frame, bytearray):
                return frame
            assert frame is NEED_DATA
            try:
                with self.decoder.get_buffer() as buffer:
                    n = self.sock.recv_into(buffer)
            except ConnectionResetError:
                return None
            if n == 0:
                return None
            self.decoder.advance(n)


class RawConnection:
    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self._frames = SocketFrames(self.sock)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, api_key: int, version: int, body: bytes | dict, client_id: str = "raw") -> bytes:
        """The next request's frame (size prefix included), to send later (pipelining)."""
        self._correlation += 1
        header = encode_request_header(RequestHeader(api_key, version, self._correlation, client_id))
        payload = body if isinstance(body, bytes) else encode_request(api_key, version, body)
        return encode_frame(header + payload)

    def send_request(self, api_key: int, version: int, body: bytes | dict, client_id: str = "raw") -> int:
        self.sock.sendall(self.frame(api_key, version, body, client_id))
        return self._correlation

    def read_frame(self) -> bytearray | None:
        """The next response frame, or None if the broker closed the connection."""
        return self._frames.next_frame()

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
