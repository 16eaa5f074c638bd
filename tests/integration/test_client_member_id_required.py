"""MEMBER_ID_REQUIRED (79, KIP-394): a coordinator answers a JoinGroup without a member id with
error 79 and the id the member must use; the consumer joins again with that id.

The broker (JoinGroup v2) does not send 79 itself, so a scripted peer sits between our consumer
and the real broker: it relays every request to the broker, and answers the first JoinGroup that
carries no member id with error 79 and the member id the broker assigned in its (real) answer,
as a JoinGroup v4+ coordinator does (once the broker answers 79 itself, that answer is relayed as
it is). Everything else is relayed unchanged.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import deque

import pytest

from client import Admin, Consumer, Producer
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.headers import parse_request_header_untrusted, parse_response_header_untrusted
from protocol.messages import decode_request, decode_response, encode_response
from tests.broker_process import BrokerProcess

_SIZE = struct.Struct(">i")


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


class MemberIdRequiredPeer:
    """Relays to ``upstream``; the first JoinGroup with an empty member id gets error 79."""

    def __init__(self) -> None:
        self.upstream: tuple[str, int] | None = None
        self.join_member_ids: list[str] = []  # member_id of every JoinGroup relayed
        self.answered_79: list[str] = []  # member ids handed out with error 79
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            with self._lock:
                self._socks += [client, server]
            pending: deque = deque()
            threading.Thread(target=self._up, args=(client, server, pending), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, pending), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, pending: deque) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(_recv_exactly(client, 4))
                frame = _recv_exactly(client, size)
                header, offset = parse_request_header_untrusted(frame)
                script = False
                if header.api_key == ApiKey.JOIN_GROUP:
                    request = decode_request(ApiKey.JOIN_GROUP, header.api_version, frame, offset)
                    with self._lock:
                        self.join_member_ids.append(request.member_id)
                        script = request.member_id == "" and not self.answered_79
                        if script:
                            self.answered_79.append("")  # claimed; the id comes with the answer
                pending.append((header, script))
                server.sendall(_SIZE.pack(size) + frame)
        except (OSError, ConnectionError):
            pass

    def _down(self, server: socket.socket, client: socket.socket, pending: deque) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(_recv_exactly(server, 4))
                frame = _recv_exactly(server, size)
                header, script = pending.popleft()
                if script:
                    _, offset = parse_response_header_untrusted(
                        frame, ApiKey.JOIN_GROUP, header.api_version
                    )
                    real = decode_response(ApiKey.JOIN_GROUP, header.api_version, frame, offset)
                    self.answered_79[-1] = real.member_id
                    if real.error_code != ErrorCode.MEMBER_ID_REQUIRED:
                        # The broker accepted the member: answer as a v4+ coordinator does
                        # (an id to join again with, nothing else).
                        real.error_code = ErrorCode.MEMBER_ID_REQUIRED
                        real.generation_id = -1
                        real.protocol_name = ""
                        real.leader = ""
                        real.members = []
                        body = encode_response(ApiKey.JOIN_GROUP, header.api_version, real)
                        frame = frame[:offset] + body
                client.sendall(_SIZE.pack(len(frame)) + frame)
        except (OSError, ConnectionError, IndexError):
            pass

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@pytest.fixture
def peer_and_broker(tmp_path):
    peer = MemberIdRequiredPeer()
    broker = BrokerProcess(tmp_path / "data", "--advertised-port", str(peer.port))
    try:
        broker.start()
        peer.upstream = ("127.0.0.1", broker.port)
        yield peer, f"127.0.0.1:{peer.port}"
    finally:
        peer.close()
        broker.stop()


def test_consumer_rejoins_with_the_member_id_the_coordinator_gave(peer_and_broker):
    peer, bootstrap = peer_and_broker
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic("mid", 2)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 1}) as producer:
        for i in range(10):
            producer.send("mid", b"%d" % i, partition=i % 2)
        producer.flush(30)
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": "g-mid",
        "auto.offset.reset": "earliest",
        "heartbeat.interval.ms": 200,
    }
    with Consumer(config) as consumer:
        consumer.subscribe(["mid"])
        records: list = []
        deadline = time.monotonic() + 30
        while len(records) < 10 and time.monotonic() < deadline:
            records.extend(consumer.poll(0.2))
        assert sorted(int(r.value) for r in records) == list(range(10))
        given = peer.answered_79[0]
        assert given  # the broker's member id, handed out with error 79
        # The consumer joined again at once with exactly that id, and kept it.
        assert peer.join_member_ids[:2] == ["", given]
        assert consumer.group_metadata().member_id == given
        assert consumer.assignment() == {("mid", 0), ("mid", 1)}
