"""The trio shell: accept connections, read frames, dispatch, write replies in order, run timers.

Per connection, the reader decodes frames and runs each request's synchronous part at once
(appends happen in arrival order); replies leave in the same order, the ones that must wait
(acks=all fsync, long-poll Fetch) through a queue that a writer task awaits. So a client that
pipelines five Produce requests gets them appended back to back and covered by one fsync.

Limits (what no client may exceed, issue 10), all from ``BrokerConfig``:

- ``max.connections`` (capped by the open-files limit, keeping room for the log's files): the
  listeners stop accepting until a connection closes (Kafka's acceptor waits for a slot too);
  ``max.connections.per.ip`` and its ``.overrides``: a connection over its address's limit is
  closed at once, before any byte is read.
- ``sasl.server.authentication.timeout.ms``: a SASL listener's connection must authenticate
  within it (before that it reads frames of at most ``sasl.server.max.receive.size``, Kafka's
  524,288 bytes, and a SCRAM client-first of at most 4 KiB).
- Nothing that happens on one connection ends the process: the whole connection task is guarded
  (any error, an error group out of its nursery, a failed principal mapping, an answer that
  cannot be encoded: that connection is closed with one clipped log line).
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
import logging
import math
import socket as stdsocket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable

import trio

from broker.config import BrokerConfig
from broker.handlers.context import Broker
from broker.handlers.peer import Peer, Session, set_peer
from broker.handlers.peer import session as peer_session
from broker.log.file_slice import SENDFILE
from broker.metrics import BrokerState, Metrics
from broker.metrics import render as render_metrics
from broker.metrics.http import serve_metrics
from broker.network.dispatcher import CloseConnection, Dispatcher, encode_reply, log_bug
from broker.network.limits import ConnectionLimits, RequestMemory
from broker.network.memory import closed_connection, release_memory
from broker.network.sockets import Socket
from broker.reply import AnswerFirst, Deferred
from broker.security.tls import TLS_PROTOCOLS, certificate_principal, listener_context
from broker.security.tls_socket import TlsSocket
from protocol.errors import FrameTooLargeError
from protocol.framing import FrameDecoder
from protocol.text import clip

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
_ACCEPT_RETRY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
_ACCEPT_FATAL_ERRNOS = {errno.EBADF, errno.ENOTSOCK, errno.EINVAL, errno.EOPNOTSUPP}


async def serve(
    config: BrokerConfig,
    *,
    broker: Broker,
    dispatcher: Dispatcher,
    metrics: Metrics | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``broker`` on the configured listeners until cancelled; ``task_status.started(port)``
    once listening. The caller built the broker and closes it (``broker.app.serve`` does both)."""
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
            nursery.start_soon(broker.groups.run_timer_task)
            nursery.start_soon(_transaction_housekeeping, broker)
            nursery.start_soon(release_memory)
            nursery.start_soon(broker.appends.run)  # Produce checks in worker threads
            if broker.share is not None:
                nursery.start_soon(broker.share.run_timer)  # lock and member-session expiry
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
        self.limits = ConnectionLimits.of(config)
        self.authentication_timeout_s = config.sasl_server_authentication_timeout_ms / 1000
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
        await limits.wait_for_slot()  # max.connections: stop accepting, as Kafka's acceptor
        try:
            sock, address = await listener.accept()
        except OSError as exc:
            if exc.errno in _ACCEPT_RETRY_ERRNOS:
                log.error("accept failed (%s); retrying in 100 ms", exc)
                await trio.sleep(0.1)
                continue
            if exc.errno in _ACCEPT_FATAL_ERRNOS:
                raise  # the listening socket itself is unusable
            # One connection's failure (ECONNABORTED, EPROTO, EPERM from a firewall, ...): as
            # Kafka's acceptor, log it and accept the next.
            log.warning("accept failed (%s)", exc)
            await trio.sleep(0.01)
            continue
        ip = address[0] if isinstance(address, tuple) else str(address)
        if not limits.admit(ip):
            sock.close()  # Kafka closes a connection over the limits the same way
            if limits.refused in (1, 10, 100) or limits.refused % 1000 == 0:
                log.warning("refused a connection from %s: %d open from it "
                            "(max.connections.per.ip %d); %d refused so far", ip,
                            limits.per_ip.get(ip, 0), limits.limit_for(ip), limits.refused)
            continue
        try:
            raw = stdsocket.socket(fileno=sock.detach())
            raw.setblocking(False)
            raw.setsockopt(stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY, 1)
        except OSError:
            limits.leave(ip)
            continue
        nursery.start_soon(_serve_connection, Socket(raw, shared.dispatcher.metrics), shared, ip,
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
        if broker.streams is not None:
            broker.streams.tick(now)


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
    sock: Socket,
    shared: _Shared,
    ip: str,
    info: _ListenerInfo,
) -> None:
    session = Session.for_listener(info.security_protocol)
    try:
        session.client_port = sock.raw.getpeername()[1]  # client telemetry's match selector
    except (OSError, IndexError, TypeError):
        pass
    set_peer(Peer("/" + ip, info.advertised, session))  # this task's requests (broker/handlers/peer.py)
    if info.tls is None:
        SENDFILE.set(True)  # Fetch may answer with FileSlices (broker/log/file_slice.py)
    if sock.metrics is not None:
        sock.metrics.connections_opened += 1
    stream: Socket | TlsSocket = sock
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
        connection = _Connection(stream, shared)
        if session.sasl_state != "done":
            # A SASL listener: authenticate within the timeout (the reader lifts the deadline
            # once authenticated), else the connection is closed.
            connection.authentication = trio.CancelScope(
                deadline=trio.current_time() + shared.authentication_timeout_s)
        with connection.authentication:
            await _serve_requests(connection)
        if connection.authentication.cancelled_caught:
            log.info("closing %s: not authenticated within %g s", connection.peer,
                     shared.authentication_timeout_s)
    except BaseException as exc:  # noqa: BLE001 - the guard of the whole connection, see below
        # Nothing that happens on one connection ends the broker (issue 36): a socket error of
        # any kind (ETIMEDOUT, EHOSTUNREACH: OSErrors that are not ConnectionErrors), an error
        # group out of the connection's nursery, a failed principal mapping, a bug. The
        # connection is closed with one log line; only a cancellation (the broker stopping)
        # goes on.
        errors, rest = _split_errors(exc)
        if errors is not None:
            _log_closing(sock.peer_name(), errors, info)
        if rest is not None:
            if rest is exc:
                raise
            raise rest from None
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
        closed_connection()


# The errors of a connection that say the peer or the network is gone or misbehaved (one info
# line), unlike a bug (one error record with its traceback).
_PEER_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, CloseConnection)


def _split_errors(exc: BaseException) -> tuple[Exception | None, BaseException | None]:
    """``(errors, rest)``: the Exceptions in ``exc`` (a group, possibly) and what is not one
    (trio.Cancelled, KeyboardInterrupt), either None when there is none."""
    if isinstance(exc, BaseExceptionGroup):
        errors, rest = exc.split(Exception)
        return errors, rest
    if isinstance(exc, Exception):
        return exc, None
    return None, exc


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def _log_closing(peer: str, exc: Exception, info: _ListenerInfo) -> None:
    leaves = _leaves(exc)
    if all(isinstance(e, _PEER_ERRORS) for e in leaves):
        first = leaves[0]
        hint = ""
        if isinstance(first, ssl.SSLError) and first.reason == "WRONG_VERSION_NUMBER":
            # What a Kafka request looks like to TLS: the client's security.protocol is wrong.
            hint = (f" (a client without TLS at this {info.security_protocol} listener? its "
                    f"security.protocol must be {info.security_protocol})")
        more = f" (and {len(leaves) - 1} more)" if len(leaves) > 1 else ""
        log.info("closing %s: %s%s%s", peer, clip(first) or type(first).__name__, hint, more)
        return
    # A bug must cost one connection, never the broker.
    log_bug(log, exc, "closing %s after an internal error", peer)


async def _serve_requests(connection: _Connection) -> None:
    try:
        with connection.deadline:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(connection.write_queued, nursery.cancel_scope)
                await connection.read_requests()
                # Nothing more is read: the budget held for a frame being received goes back
                # now, not after the replies still waiting (a rebalance, a long-poll fetch).
                connection.release_memory()
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


class _Connection:
    """One client connection: requests run in arrival order, replies leave in the same order.

    A reply that is ready while nothing is queued is sent by the reader itself, together with
    the other ready replies of the same receive (one sendmsg). Once a reply must wait (Deferred),
    it and every later reply go through ``queue``, which ``write_queued`` sends in order; the
    queue holds ready chunk lists or ``(header, Deferred)``.
    """

    def __init__(self, sock: Socket | TlsSocket, shared: _Shared) -> None:
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
        self.authentication = trio.CancelScope()  # a deadline until a SASL peer authenticated
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
        limited = session.sasl_state != "done"  # until authenticated
        # A plain socket can skip the receive that would find nothing: after a receive that
        # emptied the socket (fewer bytes than room) and held whole requests, a request/response
        # client waits for its answers before it sends more. A pipelining client's next bytes
        # are then found by the run loop's epoll instead (ready at once if they have arrived).
        plain = sock if isinstance(sock, Socket) else None
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
                    header, result = dispatch(frame, session)
                except CloseConnection as exc:
                    log.warning("closing %s: %s", self.peer, exc)
                    return
                finally:
                    del frame
                if self._reserved and not (isinstance(result, Deferred)
                                           and result.hold is not None):
                    self.release_memory()  # (a held request keeps it: released below)
                if limited and session.sasl_state == "done":
                    decoder.max_frame_size = max_bytes  # authenticated
                    limited = False
                    self.authentication.deadline = math.inf
                if isinstance(result, _NOT_READY) or session.close_after_reply:
                    if isinstance(result, AnswerFirst):
                        try:
                            answer = encode_reply(header, result.value) or []
                        except BaseException:
                            _finish(result)  # the change is decided: durable even unanswered
                            raise
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
                    if result.hold is not None:
                        # Nothing more is read from this connection until the request lets go
                        # of its frame (a Produce whose appends wait for a worker thread).
                        await result.hold()
                        if self._reserved:
                            self.release_memory()
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
        except Exception as exc:
            # A bug (or an answer that cannot be encoded) must cost one connection, never the
            # broker.
            log_bug(log, exc, "closing %s after an internal error while replying", self.peer)
            cancel_scope.cancel()


_NOT_READY = (AnswerFirst, Deferred)  # results the reader does not just encode and send


def _send_now_or_later(sock: Socket | TlsSocket) -> Callable[[list], Awaitable[None] | None]:
    """``send(chunks)``: sends what the socket takes at once and returns None, or the awaitable
    that sends the rest (a plain socket's usual reply leaves without a coroutine of its own)."""
    if not isinstance(sock, Socket):
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
