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
import gc
import logging
import math
import os
import resource
import socket as stdsocket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import trio

from broker.config import BrokerConfig, ConfigError
from broker.handlers.context import Broker
from broker.handlers.peer import Peer, Session, set_peer
from broker.handlers.peer import session as peer_session
from broker.log.file_slice import SENDFILE, FileSlice
from broker.metrics import BrokerState, Metrics
from broker.metrics import render as render_metrics
from broker.metrics.http import serve_metrics
from broker.network.dispatcher import CloseConnection, Dispatcher, encode_reply, log_bug
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
# Descriptors kept free for segments, indexes, snapshots and the flusher's duplicates.
_RESERVED_FDS = 128
_ACCEPT_RETRY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
_ACCEPT_FATAL_ERRNOS = {errno.EBADF, errno.ENOTSOCK, errno.EINVAL, errno.EOPNOTSUPP}
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
    """``max.connections``, ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``:
    counts of open connections, as Kafka's ConnectionQuotas keeps them. At ``max.connections``
    the listeners stop accepting (new connections wait in the kernel's backlog, as Kafka's
    acceptor waits for a slot); a connection over its address's limit is closed at once."""

    def __init__(self, max_connections: int, max_per_ip: int,
                 overrides: Sequence[tuple[str, int]] = ()) -> None:
        try:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        except (OSError, ValueError):
            soft = resource.RLIM_INFINITY
        if soft != resource.RLIM_INFINITY:
            max_connections = min(max_connections, max(soft - _RESERVED_FDS, 16))
        if max_per_ip == 0 and not overrides:
            raise ConfigError("max.connections.per.ip can be 0 only with "
                              "max.connections.per.ip.overrides (Kafka's rule)")
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.per_ip_overrides = _resolve(overrides)
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self.refused = 0
        self._slot = trio.Event()

    @classmethod
    def of(cls, config: BrokerConfig) -> ConnectionLimits:
        """The limits ``config`` sets; ConfigError for values Kafka refuses at start."""
        return cls(config.max_connections, config.max_connections_per_ip,
                   config.max_connections_per_ip_overrides)

    def limit_for(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.max_per_ip)

    async def wait_for_slot(self) -> None:
        """Until fewer than ``max.connections`` are open."""
        while self.total >= self.max_connections:
            await self._slot.wait()

    def admit(self, ip: str) -> bool:
        if self.total >= self.max_connections or self.per_ip.get(ip, 0) >= self.limit_for(ip):
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
        if self.total < self.max_connections:
            self._slot.set()
            self._slot = trio.Event()


def _resolve(overrides: Sequence[tuple[str, int]]) -> dict[str, int]:
    """Host names of max.connections.per.ip.overrides as the addresses connections come from
    (Kafka resolves them at start too); a name that does not resolve is a config error."""
    out: dict[str, int] = {}
    for host, count in overrides:
        try:
            infos = stdsocket.getaddrinfo(host, None, type=stdsocket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise ConfigError(f"invalid value for max.connections.per.ip.overrides: cannot "
                              f"resolve {host!r} ({exc})") from None
        for info in infos:
            out[str(info[4][0])] = count
    return out


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
            nursery.start_soon(_transaction_housekeeping, broker)
            nursery.start_soon(_release_memory)
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
    sock: _Socket,
    shared: _Shared,
    ip: str,
    info: _ListenerInfo,
) -> None:
    session = Session.for_listener(info.security_protocol)
    set_peer(Peer("/" + ip, info.advertised, session))  # this task's requests (broker/handlers/peer.py)
    if info.tls is None:
        SENDFILE.set(True)  # Fetch may answer with FileSlices (broker/log/file_slice.py)
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
        _closed_connection()


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
                    header, result = dispatch(frame, session)
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


# Connections closed since the last collection. A closed connection leaves garbage cycles
# (its task's coroutine frames, exceptions and their tracebacks) that reference counting does
# not free; with the young threshold raised (below) and a connection's objects promoted while it
# lived, they waited for a collection that a quiet broker does not run soon, and the C heap kept
# the freed pages: 1,000 closed connections kept about 45 MB. A collection of the two young
# generations frees them (measured: +2.4 MB left of 1,000 connections' +33 MB) and, unlike a full
# one, does not walk what the broker built since start.
_COLLECT_AFTER_CLOSES = 32
_closes = 0


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("c")
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None  # not glibc


_malloc_trim = _load_malloc_trim()


def _trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc keeps them otherwise: the receive
    buffers and messages of 1,000 closed connections stayed in the broker's RSS)."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _closed_connection() -> None:
    global _closes
    _closes += 1


async def _release_memory() -> None:
    """Once a second: after at least ``_COLLECT_AFTER_CLOSES`` connections closed, a collection
    of the young generations and the heap trimmed, so that what they held goes back to the
    system."""
    global _closes
    while True:
        await trio.sleep(1.0)
        if _closes >= _COLLECT_AFTER_CLOSES:
            _closes = 0
            gc.collect(1)
            _trim_heap()


def settle_garbage_collector() -> None:
    """After recovery, before serving: what start built is kept for good (``gc.freeze``: the
    collector no longer walks it), and young collections run less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
