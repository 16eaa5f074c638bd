"""The trio shell: accept connections, read frames, dispatch, write replies in order, run timers.

Per connection, the reader decodes frames and runs each request's synchronous part at once
(appends happen in arrival order); replies leave in the same order, the ones that must wait
(acks=all fsync, long-poll Fetch) through a queue that a writer task awaits. So a client that
pipelines five Produce requests gets them appended back to back and covered by one fsync.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import signal
import socket as stdsocket
from collections import deque
from collections.abc import Sequence

import trio

from broker.app import build_broker, build_dispatcher
from broker.config import BrokerConfig
from broker.context import Broker
from broker.dispatcher import CloseConnection, Deferred, Dispatcher, encode_reply
from broker.peer import Peer, set_peer
from broker.txn.manager import CrashHook
from protocol.errors import FrameTooLargeError
from protocol.framing import FrameDecoder

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
    broker = broker or build_broker(config)
    dispatcher = build_dispatcher(broker)
    extra: list = []
    try:
        listener = await _bind(config.host, config.port)
        port = listener.getsockname()[1]
        if config.port == 0 and config.advertised_port is None:
            # An ephemeral port: tell clients the port we actually got.
            broker.config = dataclasses.replace(config, advertised_port=port)
        # Kafka's other listeners (e.g. an external one beside the internal): each tells its
        # clients its own advertised address.
        for spec in config.extra_listeners:
            sock = await _bind(spec.host, spec.port)
            bound = sock.getsockname()[1]
            host = spec.advertised_host or (
                spec.host if spec.host not in ("0.0.0.0", "::", "") else config.advertised[0]
            )
            extra.append((sock, (host, spec.advertised_port or bound)))
            log.info("listener %s on %s:%d (advertised %s:%d)", spec.name, spec.host, bound,
                     host, spec.advertised_port or bound)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.flusher.run)
            nursery.start_soon(_housekeeping, broker)
            nursery.start_soon(_transaction_housekeeping, broker)
            for sock, advertised in extra:
                nursery.start_soon(_accept_loop, sock, broker, dispatcher, nursery, advertised)
            task_status.started(port)
            with listener:
                await _accept_loop(listener, broker, dispatcher, nursery)
    finally:
        for sock, _ in extra:
            sock.close()
        if owned:
            broker.close()


async def _bind(host: str, port: int):
    listener = trio.socket.socket(stdsocket.AF_INET, stdsocket.SOCK_STREAM)
    listener.setsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_REUSEADDR, 1)
    await listener.bind((host, port))
    listener.listen(128)
    return listener


async def _accept_loop(
    listener,
    broker: Broker,
    dispatcher: Dispatcher,
    nursery: trio.Nursery,
    advertised: tuple[str, int] | None = None,
) -> None:
    while True:
        try:
            sock, _ = await listener.accept()
        except OSError as exc:
            if exc.errno in _ACCEPT_RETRY_ERRNOS:
                log.error("accept failed (%s); retrying in 100 ms", exc)
                await trio.sleep(0.1)
                continue
            raise
        raw = stdsocket.socket(fileno=sock.detach())
        raw.setblocking(False)
        raw.setsockopt(stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY, 1)
        nursery.start_soon(_serve_connection, _Socket(raw), broker, dispatcher, advertised)


async def _housekeeping(broker: Broker) -> None:
    """Periodic work: retention, producer-state expiry, dropping empty groups."""
    interval = broker.config.log_retention_check_interval_ms / 1000
    while True:
        await trio.sleep(interval)
        now = broker.clock.now_ms()
        deleted = broker.logs.enforce_retention(now)
        if deleted:
            log.info("retention deleted %d segments", deleted)
        broker.logs.expire_producers(now, broker.config.producer_id_expiration_ms)
        broker.groups.tick(now)


async def _transaction_housekeeping(broker: Broker) -> None:
    """Transaction timeouts, unfinished markers, transactional-id expiry: every
    ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` (default 10 s)."""
    interval = broker.config.transaction_abort_timed_out_interval_ms / 1000
    while True:
        await trio.sleep(interval)
        try:
            await broker.transactions.housekeeping(broker.clock.now_ms())
        except Exception:
            log.exception("transaction housekeeping failed")  # retried at the next interval


async def _serve_connection(
    sock: _Socket,
    broker: Broker,
    dispatcher: Dispatcher,
    advertised: tuple[str, int] | None = None,
) -> None:
    set_peer(Peer("/" + sock.peer_host(), advertised))  # this task's requests (broker/peer.py)
    connection = _Connection(sock, broker, dispatcher)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(connection.write_queued, nursery.cancel_scope)
            await connection.read_requests()
            await connection.drain()
            nursery.cancel_scope.cancel()
    except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        # except*: the reader's error (a peer's RST: ConnectionResetError) leaves the nursery
        # inside an ExceptionGroup; a plain except missed it and the broker died.
        pass
    finally:
        sock.close()


class _Socket:
    """A non-blocking stdlib socket driven with trio's wait_readable / wait_writable.

    Trio's own socket methods yield to the scheduler on every call, which cost about three run
    loop passes (each with an epoll_wait) per request. These try the system call first and only
    wait when it would block; a connection that always has data yields every few receives so
    that it cannot starve the others.
    """

    _FAIRNESS = 16  # receives in a row without waiting before we yield anyway

    def __init__(self, raw: stdsocket.socket) -> None:
        self.raw = raw
        self._streak = 0

    async def recv_into(self, buffer) -> int:
        while True:
            try:
                n = self.raw.recv_into(buffer)
            except BlockingIOError:
                self._streak = 0
                await trio.lowlevel.wait_readable(self.raw)
                continue
            self._streak += 1
            if self._streak >= self._FAIRNESS:
                self._streak = 0
                await trio.lowlevel.cancel_shielded_checkpoint()
            return n

    async def send_chunks(self, chunks: Sequence) -> None:
        """Send every chunk (gather write), handling partial sends."""
        views = [memoryview(c) for c in chunks]
        while views:
            try:
                sent = self.raw.sendmsg(views[:512])
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.raw)
                continue
            while sent:
                first = views[0]
                if sent >= len(first):
                    sent -= len(first)
                    views.pop(0)
                else:
                    views[0] = first[sent:]
                    sent = 0

    def peer_host(self) -> str:
        try:
            return str(self.raw.getpeername()[0])
        except OSError:
            return "?"

    def peer_name(self) -> str:
        try:
            host, port = self.raw.getpeername()[:2]
            return f"{host}:{port}"
        except OSError:
            return "?"

    def close(self) -> None:
        trio.lowlevel.notify_closing(self.raw)
        self.raw.close()


class _Connection:
    """One client connection: requests run in arrival order, replies leave in the same order.

    A reply that is ready while nothing is queued is sent by the reader itself, together with
    the other ready replies of the same receive (one sendmsg). Once a reply must wait (Deferred),
    it and every later reply go through ``queue``, which ``write_queued`` sends in order; the
    queue holds ready chunk lists or ``(header, Deferred)``.
    """

    def __init__(self, sock: _Socket, broker: Broker, dispatcher: Dispatcher) -> None:
        self.sock = sock
        self.broker = broker
        self.dispatch = dispatcher.dispatch
        self.peer = sock.peer_name()
        self.queue: deque = deque()
        self._queued = trio.Event()
        self._drained = trio.Event()

    async def read_requests(self) -> None:
        decoder = FrameDecoder(self.broker.config.socket_request_max_bytes)
        while True:
            with decoder.get_buffer() as buffer:
                n = await self.sock.recv_into(buffer)
            if n == 0:
                return
            decoder.advance(n)
            ready: list = []  # chunks of replies nothing queued is ahead of
            while True:
                try:
                    frame = decoder.next_frame()
                except FrameTooLargeError as exc:
                    log.warning("closing %s: %s", self.peer, exc)
                    return
                if not isinstance(frame, bytearray):  # NEED_DATA
                    break
                try:
                    header, result = self.dispatch(frame)
                except CloseConnection as exc:
                    log.warning("closing %s: %s", self.peer, exc)
                    return
                if isinstance(result, Deferred):
                    if ready:
                        self._enqueue(ready)
                        ready = []
                    self._enqueue((header, result))
                    continue
                chunks = encode_reply(header, result)
                if chunks is None:
                    continue
                if self.queue:
                    self._enqueue(chunks)
                else:
                    ready.extend(chunks)
            if ready:
                await self.sock.send_chunks(ready)
            while len(self.queue) >= MAX_IN_FLIGHT:  # backpressure: stop reading for a while
                await self._wait_drained()

    def _enqueue(self, item) -> None:
        self.queue.append(item)
        self._queued.set()

    async def _wait_drained(self) -> None:
        self._drained = trio.Event()
        await self._drained.wait()

    async def drain(self) -> None:
        """Wait until every queued reply is sent (the peer closed its sending side)."""
        while self.queue:
            await self._wait_drained()

    async def write_queued(self, cancel_scope: trio.CancelScope) -> None:
        try:
            while True:
                while not self.queue:
                    self._drained.set()
                    self._queued = trio.Event()
                    await self._queued.wait()
                item = self.queue[0]
                if isinstance(item, tuple):
                    header, pending = item
                    item = encode_reply(header, await pending.wait())
                if item:
                    await self.sock.send_chunks(item)
                self.queue.popleft()  # only now: the reader must not send while this one is out
                self._drained.set()
        except (trio.BrokenResourceError, ConnectionError, OSError):
            cancel_scope.cancel()  # peer gone: stop reading too
        except Exception:
            # A bug must cost one connection, never the broker.
            log.exception("closing %s after an internal error while replying", self.peer)
            cancel_scope.cancel()


async def _serve_with(config: BrokerConfig, broker: Broker, task_status=trio.TASK_STATUS_IGNORED):
    await serve(config, broker=broker, task_status=task_status)


async def run_until_signal(
    config: BrokerConfig, on_listening=None, *, crash_hook: CrashHook | None = None
) -> None:
    """Serve until SIGINT or SIGTERM, then shut down cleanly (flush, snapshots, clean marker).

    ``on_listening(broker, port)`` runs once the socket is bound. ``crash_hook``: tests only
    (``broker/app.py``).
    """
    broker = build_broker(config, crash_hook=crash_hook)
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
