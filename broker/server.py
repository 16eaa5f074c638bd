"""The trio shell: accept connections, read frames, dispatch, write replies in order, run timers.

Per connection two tasks share an in-order queue. The reader decodes frames and runs each
request's synchronous part at once (appends happen in arrival order); the writer sends replies in
the same order, awaiting the ones that must wait (acks=all fsync, long-poll Fetch). So a client
that pipelines five Produce requests gets them appended back to back and covered by one fsync.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import signal
import socket as stdsocket
from collections.abc import Sequence

import trio

import broker.handlers  # noqa: F401  (registers the handlers)
from broker.config import BrokerConfig
from broker.core import Broker, now_ms
from broker.dispatcher import CloseConnection, Pending, dispatch, encode_reply
from protocol.errors import FrameTooLargeError
from protocol.framing import NEED_DATA, FrameDecoder

log = logging.getLogger("minibroker.server")

# Requests one connection may have in flight before we stop reading from it (backpressure).
MAX_IN_FLIGHT = 32
_ACCEPT_RETRY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


async def serve(
    config: BrokerConfig,
    *,
    broker: Broker | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the broker until cancelled; ``task_status.started(port)`` once it is listening."""
    owned = broker is None
    broker = broker or Broker(config)
    try:
        listener = trio.socket.socket(stdsocket.AF_INET, stdsocket.SOCK_STREAM)
        listener.setsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_REUSEADDR, 1)
        await listener.bind((config.host, config.port))
        listener.listen(128)
        port = listener.getsockname()[1]
        if config.port == 0 and config.advertised_port is None:
            # An ephemeral port: tell clients the port we actually got.
            broker.config = dataclasses.replace(config, advertised_port=port)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.flusher.run)
            nursery.start_soon(_housekeeping, broker)
            task_status.started(port)
            with listener:
                await _accept_loop(listener, broker, nursery)
    finally:
        if owned:
            broker.close()


async def _accept_loop(listener, broker: Broker, nursery: trio.Nursery) -> None:
    while True:
        try:
            sock, _ = await listener.accept()
        except OSError as exc:
            if exc.errno in _ACCEPT_RETRY_ERRNOS:
                log.error("accept failed (%s); retrying in 100 ms", exc)
                await trio.sleep(0.1)
                continue
            raise
        sock.setsockopt(stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY, 1)
        nursery.start_soon(_serve_connection, sock, broker)


async def _housekeeping(broker: Broker) -> None:
    """Periodic work: retention, producer-state expiry."""
    interval = broker.config.log_retention_check_interval_ms / 1000
    while True:
        await trio.sleep(interval)
        now = now_ms()
        deleted = broker.logs.enforce_retention(now)
        if deleted:
            log.info("retention deleted %d segments", deleted)
        broker.logs.expire_producers(now, broker.config.producer_id_expiration_ms)


async def _serve_connection(sock, broker: Broker) -> None:
    peer = _peer_name(sock)
    send, receive = trio.open_memory_channel(MAX_IN_FLIGHT)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_write_replies, sock, receive, nursery.cancel_scope)
            await _read_requests(sock, broker, send, peer)
            await send.aclose()
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        pass
    finally:
        sock.close()


async def _read_requests(sock, broker: Broker, send, peer: str) -> None:
    decoder = FrameDecoder(broker.config.socket_request_max_bytes)
    while True:
        with decoder.get_buffer() as buffer:
            n = await sock.recv_into(buffer)
        if n == 0:
            return
        decoder.advance(n)
        while True:
            try:
                frame = decoder.next_frame()
            except FrameTooLargeError as exc:
                log.warning("closing %s: %s", peer, exc)
                return
            if frame is NEED_DATA:
                break
            try:
                header, result = dispatch(broker, frame)
            except CloseConnection as exc:
                log.warning("closing %s: %s", peer, exc)
                return
            await send.send((header, result))


async def _write_replies(sock, receive, cancel_scope: trio.CancelScope) -> None:
    try:
        async for header, result in receive:
            if isinstance(result, Pending):
                result = await result.wait()
            chunks = encode_reply(header, result)
            if chunks is not None:
                await _send_chunks(sock, chunks)
    except (trio.BrokenResourceError, ConnectionError, OSError):
        cancel_scope.cancel()  # peer gone: stop reading too
    except Exception:
        # A bug must cost one connection, never the broker.
        log.exception("closing connection after an internal error while replying")
        cancel_scope.cancel()


async def _send_chunks(sock, chunks: Sequence) -> None:
    """Send every chunk (gather write), handling partial sends."""
    views = [memoryview(c) for c in chunks]
    while views:
        sent = await sock.sendmsg(views[:512])
        while sent:
            first = views[0]
            if sent >= len(first):
                sent -= len(first)
                views.pop(0)
            else:
                views[0] = first[sent:]
                sent = 0


def _peer_name(sock) -> str:
    try:
        host, port = sock.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"


async def _serve_with(config: BrokerConfig, broker: Broker, task_status=trio.TASK_STATUS_IGNORED):
    await serve(config, broker=broker, task_status=task_status)


async def run_until_signal(config: BrokerConfig, on_listening=None) -> None:
    """Serve until SIGINT or SIGTERM, then shut down cleanly (flush, snapshots, clean marker).

    ``on_listening(broker, port)`` runs once the socket is bound.
    """
    broker = Broker(config)
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                port = await nursery.start(_serve_with, config, broker)
                if on_listening is not None:
                    on_listening(broker, port)
                async for signum in signals:
                    log.info("received %s, shutting down", signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    break
    finally:
        broker.close()
