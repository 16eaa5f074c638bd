"""``Socket``: a plain connection's non-blocking socket, driven with trio's readiness waits (the
server's connections, ``server.py``; TLS ones go through ``broker/security/tls_socket.py``)."""

from __future__ import annotations

import os
import socket as stdsocket
from collections.abc import Sequence

import trio

from broker.log.file_slice import FileSlice
from broker.metrics import Metrics

# Buffers per sendmsg (the system's IOV_MAX is 1024).
_IOV_MAX = 512


class Socket:
    """A non-blocking stdlib socket driven with trio's wait_readable / wait_writable.

    Trio's own socket methods yield to the scheduler on every call, which cost about three run
    loop passes (each with an epoll_wait) per request. These try the system call first and only
    wait when it would block; a connection that always has data yields every few receives so
    that it cannot starve the others. The exception is the receive after the reader answered
    everything a short receive brought (``recv_into_after_wait``): a request/response client
    sends nothing more until it reads the answers, so that receive would only raise
    BlockingIOError, and it waits for readability first.
    """

    _FAIRNESS = 16  # receives in a row without waiting before we yield anyway

    def __init__(self, raw: stdsocket.socket, metrics: Metrics | None = None) -> None:
        self.raw = raw
        self.metrics = metrics  # bytes in/out, connections (None: not counted)
        self._streak = 0
        # Called when a send that had to wait for the socket made progress (the idle deadline:
        # a peer reading a large reply slowly is not idle). A send that completes at once is
        # the caller's to account for.
        self.on_sent = _nothing

    async def recv_into(self, buffer) -> int:
        while True:
            try:
                n = self.raw.recv_into(buffer)
            except BlockingIOError:
                self._streak = 0
                await trio.lowlevel.wait_readable(self.raw)
                continue
            if self.metrics is not None:
                self.metrics.bytes_in += n
            self._streak += 1
            if self._streak >= self._FAIRNESS:
                self._streak = 0
                await trio.lowlevel.cancel_shielded_checkpoint()
            return n

    async def recv_into_after_wait(self, buffer) -> int:
        """``recv_into`` for when the socket is most likely empty (a request/response peer we
        just answered): wait for readability first instead of a receive that would raise
        BlockingIOError (a system call and an exception per request)."""
        self._streak = 0
        await trio.lowlevel.wait_readable(self.raw)
        try:
            n = self.raw.recv_into(buffer)
        except BlockingIOError:
            return await self.recv_into(buffer)  # woken for nothing: wait again
        if self.metrics is not None:
            self.metrics.bytes_in += n
        self._streak = 1
        return n

    async def send_chunks(self, chunks: Sequence) -> None:
        """Send every chunk (gather write), handling partial sends."""
        sent = self.send_now(chunks)
        if sent is not None:
            await self.send_rest(chunks, sent)

    def send_now(self, chunks: Sequence) -> int | None:
        """Send what the socket takes without waiting: None if that was everything, else the
        bytes sent (``send_rest`` sends the rest). No checkpoint: the caller's own awaits are
        the only ones (the usual reply leaves without a coroutine of its own)."""
        total = sum(map(len, chunks))
        if self.metrics is not None:
            self.metrics.bytes_out += total
        if len(chunks) > _IOV_MAX:
            return 0
        try:
            sent = self.raw.sendmsg(chunks)
        except BlockingIOError:
            return 0
        except TypeError:  # not all buffers: a FileSlice among them (a Fetch answer)
            sent = self._send_with_files(chunks, 0)
        return None if sent == total else sent

    def _send_with_files(self, chunks: Sequence, skip: int) -> int:
        """Send ``chunks`` but their first ``skip`` bytes, the buffers with sendmsg and each
        ``FileSlice`` with sendfile, until the socket would block: the bytes sent (a slice sent
        whole is closed)."""
        fileno = self.raw.fileno()
        done = 0
        i, n = 0, len(chunks)
        while i < n:
            chunk = chunks[i]
            size = len(chunk)
            if skip >= size:
                skip -= size
                i += 1
                continue
            if isinstance(chunk, FileSlice):
                want = size - skip
                try:
                    sent = os.sendfile(fileno, chunk.fd, chunk.position + skip, want)
                except BlockingIOError:
                    return done
                if sent == 0:  # the file is shorter than the answer said: cannot go on
                    raise OSError(f"sendfile found the end of a segment file ({want} bytes short)")
                done += sent
                if sent < want:
                    return done
                chunk.close()
                skip = 0
                i += 1
                continue
            views = [memoryview(chunk)[skip:]]
            skip = 0
            j = i + 1
            while j < n and len(views) < _IOV_MAX and not isinstance(chunks[j], FileSlice):
                if len(chunks[j]):
                    views.append(chunks[j])
                j += 1
            want = sum(map(len, views))
            # (No MSG_MORE for the header before a slice: measured, it made a 1 MiB answer wait
            # on loopback, 1,256 -> 361 MB/s.)
            try:
                sent = self.raw.sendmsg(views)
            except BlockingIOError:
                return done
            done += sent
            if sent < want:
                return done
            i = j
        return done

    async def send_rest(self, chunks: Sequence, sent: int) -> None:
        """Send ``chunks`` but their first ``sent`` bytes, waiting for the socket as needed."""
        if any(isinstance(c, FileSlice) for c in chunks):
            total = sum(map(len, chunks))
            while sent < total:
                await trio.lowlevel.wait_writable(self.raw)
                n = self._send_with_files(chunks, sent)
                if n:
                    sent += n
                    self.on_sent()
            return
        views = [memoryview(c) for c in chunks if len(c)]  # an empty view would never leave
        while True:
            while sent:
                first = views[0]
                if sent >= len(first):
                    sent -= len(first)
                    views.pop(0)
                else:
                    views[0] = first[sent:]
                    sent = 0
            if not views:
                return
            try:
                sent = self.raw.sendmsg(views[:_IOV_MAX])
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.raw)
                continue
            if sent:
                self.on_sent()

    def peer_name(self) -> str:
        try:
            host, port = self.raw.getpeername()[:2]
            return f"{host}:{port}"
        except OSError:
            return "?"

    def close(self) -> None:
        trio.lowlevel.notify_closing(self.raw)
        self.raw.close()


def _nothing() -> None:
    pass
