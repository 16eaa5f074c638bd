"""The trio shell: accept connections, read frames, dispatch, write replies in order, run timers.

Per connection, the reader decodes frames and runs each request's synchronous part at once
(appends happen in arrival order); replies leave in the same order, the ones that must wait
(acks=all fsync, long-poll Fetch) through a queue that a writer task awaits. So a client that
pipelines five Produce requests gets them appended back to back and covered by one fsync.

Limits (what no client may exceed, issue 10), all from ``BrokerConfig``:

- ``max.connections`` (capped by the open-files limit, keeping room for the log's files) and
  ``max.connections.per.ip``: a connection over either is closed at once, before any byte is read.
- ``connections.max.idle.ms``: a connection with no bytes received or sent for that long is closed;
  ``request.receive.timeout.ms``: a request whose first bytes arrived must be complete within it.
- ``queued.max.request.bytes``: large requests (a frame of 64 KiB or more) reserve their size from
  one broker-wide budget when their size prefix arrives; a connection whose request does not fit
  stops reading until others finish (a request larger than the whole budget waits until nothing
  else is reserved). Small frames live in the connection's receive buffer (at most 256 KiB).
- Replies: a connection stops reading while its unsent replies exceed ``_MAX_UNSENT_REPLY_BYTES``
  or ``MAX_IN_FLIGHT`` requests wait for theirs; a client that does not read its replies therefore
  stops being read, and is closed once idle.
- Accept failures for lack of descriptors (EMFILE, ENFILE) back off and retry.
"""

from __future__ import annotations

import dataclasses
import errno
import gc
import logging
import resource
import signal
import socket as stdsocket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import trio

from broker.app import build_broker, build_dispatcher, build_metrics
from broker.config import BrokerConfig
from broker.handlers.context import Broker
from broker.handlers.peer import Peer, Session, set_peer
from broker.handlers.peer import session as peer_session
from broker.metrics import BrokerState, Metrics
from broker.metrics import render as render_metrics
from broker.metrics.http import serve_metrics
from broker.network.dispatcher import CloseConnection, Dispatcher, encode_reply
from broker.reply import AnswerFirst, Deferred
from broker.security.tls import TLS_PROTOCOLS, certificate_principal, listener_context
from broker.security.tls_socket import TlsSocket
from broker.txn.manager import CrashHook
from protocol.errors import FrameTooLargeError
from protocol.framing import FrameDecoder

log = logging.getLogger("minibroker.server")

# Requests one connection may have in flight before we stop reading from it (backpressure).
MAX_IN_FLIGHT = 32
# Bytes of encoded replies one connection may have waiting to be sent before it is not read.
_MAX_UNSENT_REPLY_BYTES = 1024 * 1024
# Frames below this size are not charged to queued.max.request.bytes (they fit the per-connection
# receive buffer, which max.connections bounds).
_POOLED_FRAME_MIN = 64 * 1024
# The largest frame a SASL listener reads before authentication (Kafka's default
# sasl.server.max.receive.size).
SASL_MAX_RECEIVE_SIZE = 524_288
# Descriptors kept free for segments, indexes, snapshots and the flusher's duplicates.
_RESERVED_FDS = 128
_ACCEPT_RETRY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
# Buffers per sendmsg (the system's IOV_MAX is 1024).
_IOV_MAX = 512


class RequestMemory:
    """The broker-wide budget of ``queued.max.request.bytes`` for requests being received."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.reserved = 0
        self._released = trio.Event()

    async def reserve(self, n: int) -> None:
        while self.reserved and self.reserved + n > self.limit:
            await self._released.wait()
        self.reserved += n

    def release(self, n: int) -> None:
        self.reserved -= n
        self._released.set()
        self._released = trio.Event()


class ConnectionLimits:
    """``max.connections`` and ``max.connections.per.ip``: counts of open connections."""

    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        try:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        except (OSError, ValueError):
            soft = resource.RLIM_INFINITY
        if soft != resource.RLIM_INFINITY:
            max_connections = min(max_connections, max(soft - _RESERVED_FDS, 16))
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self.refused = 0

    def admit(self, ip: str) -> bool:
        if self.total >= self.max_connections or self.per_ip.get(ip, 0) >= self.max_per_ip:
            self.refused += 1
            return False
        self.total += 1
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        return True

    def leave(self, ip: str) -> None:
        self.total -= 1
        left = self.per_ip[ip] - 1
        if left:
            self.per_ip[ip] = left
        else:
            del self.per_ip[ip]


async def serve(
    config: BrokerConfig,
    *,
    broker: Broker | None = None,
    metrics: Metrics | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the broker until cancelled; ``task_status.started(port)`` once it is listening."""
    owned = broker is None
    if broker is None:
        metrics = build_metrics(config)
        broker = build_broker(config, metrics=metrics)
    dispatcher = build_dispatcher(broker, metrics)
    tls = listener_context(config)
    extra: list = []
    try:
        listener = await _bind(config.host, config.port)
        port = listener.getsockname()[1]
        if config.port == 0 and config.advertised_port is None:
            # An ephemeral port: tell clients the port we actually got.
            broker.config = dataclasses.replace(config, advertised_port=port)
        def listener_info(advertised, protocol: str) -> _ListenerInfo:
            return _ListenerInfo(advertised, protocol, tls if protocol in TLS_PROTOCOLS else None)

        main = listener_info(None, config.security_protocol)
        # Kafka's other listeners (e.g. an external one beside the internal): each tells its
        # clients its own advertised address.
        for spec in config.extra_listeners:
            sock = await _bind(spec.host, spec.port)
            bound = sock.getsockname()[1]
            host = spec.advertised_host or (
                spec.host if spec.host not in ("0.0.0.0", "::", "") else config.advertised[0]
            )
            extra.append((sock, listener_info((host, spec.advertised_port or bound),
                                              spec.security_protocol)))
            log.info("listener %s (%s) on %s:%d (advertised %s:%d)", spec.name,
                     spec.security_protocol, spec.host, bound, host,
                     spec.advertised_port or bound)
        shared = _Shared(broker, dispatcher)  # the limits count every listener's connections
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.flusher.run)
            nursery.start_soon(_housekeeping, broker)
            nursery.start_soon(_transaction_housekeeping, broker)
            if broker.cleaner is not None:
                nursery.start_soon(broker.cleaner.run)
            for sock, info in extra:
                nursery.start_soon(_accept_loop, sock, shared, nursery, info)
            if metrics is not None and config.metrics_port is not None:
                state = BrokerState(broker)
                await nursery.start(serve_metrics, config.metrics_host, config.metrics_port,
                                    lambda: render_metrics(metrics, state))
            task_status.started(port)
            with listener:
                await _accept_loop(listener, shared, nursery, main)
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


@dataclasses.dataclass(frozen=True)
class _ListenerInfo:
    advertised: tuple[str, int] | None  # None: the broker's main advertised address
    security_protocol: str
    tls: ssl.SSLContext | None  # the server context, for SSL and SASL_SSL listeners


class _Shared:
    """What every connection uses: the broker, the dispatcher, the limits."""

    def __init__(self, broker: Broker, dispatcher: Dispatcher) -> None:
        config = broker.config
        self.broker = broker
        self.dispatcher = dispatcher
        self.memory = RequestMemory(config.queued_max_request_bytes)
        self.limits = ConnectionLimits(config.max_connections, config.max_connections_per_ip)
        self.idle_s = config.connections_max_idle_ms / 1000
        self.receive_timeout_s = config.request_receive_timeout_ms / 1000


async def _accept_loop(
    listener,
    shared: _Shared,
    nursery: trio.Nursery,
    info: _ListenerInfo,
) -> None:
    limits = shared.limits
    while True:
        try:
            sock, address = await listener.accept()
        except OSError as exc:
            if exc.errno in _ACCEPT_RETRY_ERRNOS:
                log.error("accept failed (%s); retrying in 100 ms", exc)
                await trio.sleep(0.1)
                continue
            raise
        ip = address[0] if isinstance(address, tuple) else str(address)
        if not limits.admit(ip):
            sock.close()  # Kafka closes a connection over the limits the same way
            if limits.refused in (1, 10, 100) or limits.refused % 1000 == 0:
                log.warning("refused a connection from %s: %d open (max.connections %d, "
                            "max.connections.per.ip %d); %d refused so far", ip, limits.total,
                            limits.max_connections, limits.max_per_ip, limits.refused)
            continue
        try:
            raw = stdsocket.socket(fileno=sock.detach())
            raw.setblocking(False)
            raw.setsockopt(stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY, 1)
        except OSError:
            limits.leave(ip)
            continue
        nursery.start_soon(_serve_connection, _Socket(raw, shared.dispatcher.metrics), shared, ip,
                           info)


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
    shared: _Shared,
    ip: str,
    info: _ListenerInfo,
) -> None:
    session = Session.for_listener(info.security_protocol)
    set_peer(Peer("/" + ip, info.advertised, session))  # this task's requests (broker/network/peer.py)
    if sock.metrics is not None:
        sock.metrics.connections_opened += 1
    stream: _Socket | TlsSocket = sock
    try:
        if info.tls is not None:
            stream = TlsSocket(sock, info.tls)
            with trio.move_on_after(shared.receive_timeout_s) as handshake:
                await stream.handshake()
            if handshake.cancelled_caught:
                log.info("closing %s: no TLS handshake within %g s", sock.peer_name(),
                         shared.receive_timeout_s)
                return
            if info.security_protocol == "SSL":
                session.principal = (certificate_principal(
                    stream.peer_certificate(),
                    shared.broker.config.security.ssl_principal_mapping_rules)
                                     or session.principal)
        await _serve_requests(_Connection(stream, shared))
    except (ssl.SSLError, ConnectionError, OSError) as exc:
        hint = ""
        if isinstance(exc, ssl.SSLError) and exc.reason == "WRONG_VERSION_NUMBER":
            # What a Kafka request looks like to TLS: the client's security.protocol is wrong.
            hint = (f" (a client without TLS at this {info.security_protocol} listener? its "
                    f"security.protocol must be {info.security_protocol})")
        log.info("closing %s: %s%s", sock.peer_name(), exc, hint)
    finally:
        if session.refusals is not None:
            session.refusals.close()  # the count of refusal lines left out, if any
        for closed in session.on_close.values():
            try:
                closed()
            except Exception:
                log.exception("a connection-close step failed")
        if sock.metrics is not None:
            sock.metrics.connections_closed += 1
        sock.close()
        shared.limits.leave(ip)


async def _serve_requests(connection: _Connection) -> None:
    try:
        with connection.deadline:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(connection.write_queued, nursery.cancel_scope)
                await connection.read_requests()
                await connection.drain()
                nursery.cancel_scope.cancel()
        if connection.deadline.cancelled_caught:
            log.info("closing %s: %s", connection.peer, connection.timeout_reason())
    except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        # except*: the reader's error (a peer's RST: ConnectionResetError) leaves the nursery
        # inside an ExceptionGroup; a plain except missed it and the broker died.
        pass
    finally:
        connection.release_memory()


class _Socket:
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
        return None if sent == total else sent

    async def send_rest(self, chunks: Sequence, sent: int) -> None:
        """Send ``chunks`` but their first ``sent`` bytes, waiting for the socket as needed."""
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


class _Connection:
    """One client connection: requests run in arrival order, replies leave in the same order.

    A reply that is ready while nothing is queued is sent by the reader itself, together with
    the other ready replies of the same receive (one sendmsg). Once a reply must wait (Deferred),
    it and every later reply go through ``queue``, which ``write_queued`` sends in order; the
    queue holds ready chunk lists or ``(header, Deferred)``.
    """

    def __init__(self, sock: _Socket | TlsSocket, shared: _Shared) -> None:
        self.sock = sock
        self.broker = shared.broker
        self.dispatch = shared.dispatcher.dispatch
        self.memory = shared.memory
        self.peer = sock.peer_name()
        self.session = peer_session()
        self.queue: deque = deque()
        self.unsent = 0  # bytes of ready replies in ``queue``
        self._writer: trio.lowlevel.Task | None = None  # write_queued, while the queue is empty
        self._drained = trio.Event()
        self._reserved = 0  # bytes of queued.max.request.bytes held for the frame being received
        self._idle_s = shared.idle_s
        self._receive_timeout_s = shared.receive_timeout_s
        self._request_started: float | None = None  # when the partial request began to arrive
        self._now = trio.lowlevel.current_clock().current_time  # trio.current_time, one call less
        self._deadline = self._now() + self._idle_s
        self.deadline = trio.CancelScope(deadline=self._deadline)
        sock.on_sent = self._active

    def _active(self) -> None:
        """Bytes moved: push the idle deadline (and keep the request-assembly one)."""
        deadline = self._now() + self._idle_s
        if self._request_started is not None:
            deadline = min(deadline, self._request_started + self._receive_timeout_s)
        # Moving a cancel scope's deadline costs a heap update: later only by whole seconds.
        if deadline < self._deadline or deadline - self._deadline > 1.0:
            self._deadline = deadline
            self.deadline.deadline = deadline

    def timeout_reason(self) -> str:
        if self._request_started is not None:
            return f"a request took longer than {self._receive_timeout_s:g} s to arrive"
        return f"idle for {self._idle_s:g} s"

    def release_memory(self) -> None:
        if self._reserved:
            self.memory.release(self._reserved)
            self._reserved = 0

    async def read_requests(self) -> None:
        max_bytes = self.broker.config.socket_request_max_bytes
        session = self.session
        sock = self.sock
        dispatch = self.dispatch
        # Before SASL authentication only small frames (Kafka's sasl.server.max.receive.size):
        # an unauthenticated peer cannot make the broker hold a large request.
        decoder = FrameDecoder(max_bytes if session.sasl_state == "done"
                               else min(max_bytes, SASL_MAX_RECEIVE_SIZE))
        next_frame = decoder.next_frame
        limited = decoder.max_frame_size != max_bytes  # until authenticated
        # A plain socket can skip the receive that would find nothing: after a receive that
        # emptied the socket (fewer bytes than room) and held whole requests, a request/response
        # client waits for its answers before it sends more. A pipelining client's next bytes
        # are then found by the run loop's epoll instead (ready at once if they have arrived).
        plain = sock if isinstance(sock, _Socket) else None
        recv_into = sock.recv_into
        recv_after_wait = plain.recv_into_after_wait if plain is not None else recv_into
        send = _send_now_or_later(sock)
        receive = recv_into
        while True:
            with decoder.get_buffer() as buffer:
                room = len(buffer)
                n = await receive(buffer)
            if n == 0:
                return
            decoder.advance(n)
            ready: list = []  # chunks of replies nothing queued is ahead of
            ready_bytes = 0
            handled = False
            while True:
                try:
                    frame = next_frame()
                except FrameTooLargeError as exc:
                    log.warning("closing %s: %s", self.peer, exc)
                    return
                if not isinstance(frame, bytearray):  # NEED_DATA
                    break
                handled = True
                try:
                    header, result = dispatch(frame)
                except CloseConnection as exc:
                    log.warning("closing %s: %s", self.peer, exc)
                    return
                finally:
                    del frame
                    if self._reserved:
                        self.release_memory()
                if limited and session.sasl_state == "done":
                    decoder.max_frame_size = max_bytes  # authenticated
                    limited = False
                if isinstance(result, _NOT_READY) or session.close_after_reply:
                    if isinstance(result, AnswerFirst):
                        answer = encode_reply(header, result.value) or []
                        if self.queue:  # the answer waits behind another: finish, then queue it
                            _finish(result)
                            self._enqueue(answer, _size(answer))
                            continue
                        ready.extend(answer)
                        try:
                            rest = send(ready)
                            if rest is not None:
                                await rest
                        finally:  # even for a peer that is gone: the work is the broker's
                            _finish(result)  # no checkpoint since the send: nothing ran between
                        ready, ready_bytes = [], 0
                        continue
                    if session.close_after_reply:
                        # A failed authentication: its answer is the last thing sent.
                        if ready:
                            self._enqueue(ready, ready_bytes)
                        self._enqueue((header, result) if isinstance(result, Deferred)
                                      else encode_reply(header, result), 0)
                        return
                    # Deferred
                    if ready:
                        self._enqueue(ready, ready_bytes)
                        ready, ready_bytes = [], 0
                    self._enqueue((header, result), 0)
                    continue
                chunks = encode_reply(header, result)
                if chunks is None:
                    continue
                if self.queue:
                    self._enqueue(chunks, _size(chunks))
                    continue
                ready += chunks
                ready_bytes += _size(chunks)
                if ready_bytes > _MAX_UNSENT_REPLY_BYTES:
                    # Many requests in one receive: send before answering more.
                    await sock.send_chunks(ready)
                    ready, ready_bytes = [], 0
            if ready:
                rest = send(ready)
                if rest is not None:  # the socket is full: wait for the peer to read
                    await rest
            # Idle and request-assembly deadlines (also for what was just sent: a send that had
            # to wait pushes them itself, through on_sent).
            buffered = decoder.buffered
            if buffered:
                if self._request_started is None:
                    self._request_started = self._now()
            else:
                self._request_started = None
            self._active()
            if buffered:
                pending = decoder.pending_frame_size
                if pending >= _POOLED_FRAME_MIN and not self._reserved:
                    await self.memory.reserve(pending)  # stop reading until the budget allows
                    self._reserved = pending
            # Backpressure: stop reading while replies wait.
            while self.queue and (len(self.queue) >= MAX_IN_FLIGHT
                                  or self.unsent > _MAX_UNSENT_REPLY_BYTES):
                await self._wait_drained()
            receive = recv_after_wait if handled and n < room else recv_into

    def _enqueue(self, item, size: int) -> None:
        self.queue.append((item, size))
        self.unsent += size
        writer = self._writer
        if writer is not None:  # waiting for work
            self._writer = None
            trio.lowlevel.reschedule(writer)

    async def _wait_drained(self) -> None:
        self._drained = trio.Event()
        await self._drained.wait()

    async def drain(self) -> None:
        """Wait until every queued reply is sent (the peer closed its sending side)."""
        while self.queue:
            await self._wait_drained()

    def _abort_writer_wait(self, _) -> trio.lowlevel.Abort:
        self._writer = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def write_queued(self, cancel_scope: trio.CancelScope) -> None:
        try:
            while True:
                if not self.queue:
                    self._drained.set()
                    # Wait for _enqueue (a parked task rather than an Event per wait).
                    self._writer = trio.lowlevel.current_task()
                    await trio.lowlevel.wait_task_rescheduled(self._abort_writer_wait)
                    continue
                item, size = self.queue[0]
                if isinstance(item, tuple):
                    header, pending = item
                    item = encode_reply(header, await pending.wait())
                if item:
                    await self.sock.send_chunks(item)
                    self._active()
                self.queue.popleft()  # only now: the reader must not send while this one is out
                self.unsent -= size
                self._drained.set()
        except (trio.BrokenResourceError, ConnectionError, OSError):
            cancel_scope.cancel()  # peer gone: stop reading too
        except Exception:
            # A bug must cost one connection, never the broker.
            log.exception("closing %s after an internal error while replying", self.peer)
            cancel_scope.cancel()


_NOT_READY = (AnswerFirst, Deferred)  # results the reader does not just encode and send


def _send_now_or_later(sock: _Socket | TlsSocket) -> Callable[[list], Awaitable[None] | None]:
    """``send(chunks)``: sends what the socket takes at once and returns None, or the awaitable
    that sends the rest (a plain socket's usual reply leaves without a coroutine of its own)."""
    if not isinstance(sock, _Socket):
        return sock.send_chunks

    def send(chunks: list) -> Awaitable[None] | None:
        sent = sock.send_now(chunks)
        return None if sent is None else sock.send_rest(chunks, sent)

    return send


def _finish(result: AnswerFirst) -> None:
    try:
        result.finish()
    except Exception:
        # A bug costs this completion, never the broker (the periodic task completes prepared
        # transactions).
        log.exception("finishing after an answer failed")


def _size(chunks: list) -> int:
    return sum(map(len, chunks))


def _nothing() -> None:
    pass


# Young-generation threshold of the cyclic garbage collector while serving (Python's default:
# 700). Each request allocates a few dozen containers that reference counting frees; at the
# default the collector ran about every dozen requests and, through the full collections, kept
# walking every object recovery built (indexes, producer states, partitions): 3.8% of the broker's
# CPU samples at 50 transactional producers (perf, cpu-clock), 1.0% with this and ``gc.freeze``.
# The garbage cycles it collects (exceptions with their tracebacks, finished coroutines) wait at
# most this many allocations more: a few MB.
GC_YOUNG_THRESHOLD = 20_000


def settle_garbage_collector() -> None:
    """After recovery, before serving: what start built is kept for good (``gc.freeze``: the
    collector no longer walks it), and young collections run less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


async def _serve_with(config: BrokerConfig, broker: Broker, metrics: Metrics | None,
                      task_status=trio.TASK_STATUS_IGNORED):
    await serve(config, broker=broker, metrics=metrics, task_status=task_status)


async def run_until_signal(
    config: BrokerConfig, on_listening=None, *, crash_hook: CrashHook | None = None
) -> None:
    """Serve until SIGINT or SIGTERM, then shut down cleanly (flush, snapshots, clean marker).

    ``on_listening(broker, port)`` runs once the socket is bound. ``crash_hook``: tests only
    (``broker/app.py``).
    """
    metrics = build_metrics(config)
    broker = build_broker(config, crash_hook=crash_hook, metrics=metrics)
    settle_garbage_collector()
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                port = await nursery.start(_serve_with, config, broker, metrics)
                if on_listening is not None:
                    on_listening(broker, port)
                async for signum in signals:
                    log.info("received %s, shutting down", signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    break
    finally:
        broker.close()
