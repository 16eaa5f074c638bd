"""TLS over the server's ``_Socket`` with the standard library's ``ssl.SSLObject`` and memory BIOs:
the same three calls (``recv_into``, ``send_chunks``, ``close``) so that the connection code does
not know whether it speaks TLS. Sends are serialised by a lock: TLS may need to write while
reading (session tickets, key updates), and the reader and the reply writer both send.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import cast

import trio

_CHUNK = 64 * 1024


class TlsSocket:
    def __init__(self, plain, context: ssl.SSLContext) -> None:
        self.plain = plain
        self.metrics = plain.metrics
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_side=True)
        self._buffer = bytearray(_CHUNK)
        self._send_lock = trio.Lock()

    @property
    def on_sent(self):
        return self.plain.on_sent

    @on_sent.setter
    def on_sent(self, fn) -> None:
        self.plain.on_sent = fn

    async def handshake(self) -> None:
        """Complete the TLS handshake (raises ConnectionError or ssl.SSLError on failure)."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise ConnectionError("connection closed during the TLS handshake") from None
        await self._flush()

    def peer_certificate(self) -> dict | None:
        return self._tls.getpeercert() or None

    async def _fill(self) -> bool:
        n = await self.plain.recv_into(self._buffer)
        if n == 0:
            self._in.write_eof()
            return False
        self._in.write(memoryview(self._buffer)[:n])
        return True

    async def _flush(self) -> None:
        if self._out.pending:
            async with self._send_lock:
                data = self._out.read()
                if data:
                    await self.plain.send_chunks([data])

    async def recv_into(self, buffer) -> int:
        while True:
            try:
                n = cast(int, self._tls.read(len(buffer), buffer))  # with a buffer: a count
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    return 0
                continue
            except ssl.SSLZeroReturnError:  # close_notify
                return 0
            except ssl.SSLError as exc:
                raise ConnectionError(f"TLS error: {exc}") from None
            if self._out.pending:
                await self._flush()
            return n

    async def send_chunks(self, chunks: Sequence) -> None:
        async with self._send_lock:
            for chunk in chunks:
                view = memoryview(chunk)
                while view.nbytes:
                    written = self._tls.write(view)
                    view = view[written:]
            data = self._out.read()
            if data:
                await self.plain.send_chunks([data])

    def peer_name(self) -> str:
        return self.plain.peer_name()

    def close(self) -> None:
        self.plain.close()
