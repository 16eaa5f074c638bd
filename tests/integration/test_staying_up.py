"""Issue 36: nothing that happens on one connection ends the broker process.

Each test reproduces one finding first (they failed on main: the broker exited, or the log grew by
the client's text): an answer that cannot be encoded, a socket error that is an OSError but not a
ConnectionError, an error out of a connection's nursery, a client that writes the log.
"""

from __future__ import annotations

import errno
import socket

import pytest
import trio

from broker.config import build_config
from protocol.api_keys import ApiKey
from protocol.headers import RequestHeader, encode_request_header
from protocol.messages import encode_request
from tests.broker_process import BrokerProcess
from tests.raw_client import RawConnection
from tests.secured import secured

LONGEST = "t" * 32_767  # the longest string a non-compact (int16) length can carry


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess.configured(tmp_path_factory.mktemp("stayup"),
                                  "\n".join(secured(
                                      "listeners=PLAINTEXT://127.0.0.1:0,"
                                      "SASL_PLAINTEXT://127.0.0.1:0")) + "\n") as proc:
        yield proc


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("stayup-plain") / "data") as proc:
        yield proc


def _still_serving(proc: BrokerProcess) -> None:
    assert proc.proc is not None and proc.proc.poll() is None, "".join(proc.output[-30:])
    with RawConnection(proc.port) as conn:
        assert conn.request(ApiKey.METADATA, 1, {"topics": []}).brokers


def _answer_or_close(conn: RawConnection, api_key: int, version: int, body: dict):
    """The decoded answer, or None if the broker closed this connection instead."""
    conn.send_request(api_key, version, body)
    frame = conn.read_frame()
    if frame is None:
        return None
    from protocol.headers import parse_response_header_untrusted
    from protocol.messages import decode_response
    _, offset = parse_response_header_untrusted(frame, api_key, version)
    return decode_response(api_key, version, frame, offset)


def test_create_topics_with_the_longest_name_is_answered(plain):
    with RawConnection(plain.port) as conn:
        answer = _answer_or_close(conn, ApiKey.CREATE_TOPICS, 2, {
            "topics": [{"name": LONGEST, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 1000, "validate_only": False})
    assert answer is not None
    (topic,) = answer.topics
    assert topic.name == LONGEST and topic.error_code == 17  # INVALID_TOPIC_EXCEPTION
    assert len(topic.error_message) < 1000
    _still_serving(plain)


def test_describe_configs_broker_with_the_longest_name_is_answered(plain):
    with RawConnection(plain.port) as conn:
        answer = _answer_or_close(conn, ApiKey.DESCRIBE_CONFIGS, 1, {
            "resources": [{"resource_type": 4, "resource_name": LONGEST,
                           "configuration_keys": None}],
            "include_synonyms": False})
    assert answer is not None
    (result,) = answer.results
    assert result.error_code != 0 and len(result.error_message) < 1000
    _still_serving(plain)


def _sasl_port(proc: BrokerProcess) -> int:
    line = proc.wait_for_output("(SASL_PLAINTEXT) on")
    return int(line.split(" on 127.0.0.1:")[1].split()[0])


def _log_bytes(proc: BrokerProcess) -> int:
    return sum(len(line.encode()) for line in proc.output)


def test_a_failed_plain_login_with_a_huge_user_name_logs_little_and_is_answered(broker):
    port = _sasl_port(broker)
    for version in (0, 1, 2):
        before = _log_bytes(broker)
        with RawConnection(port) as conn:
            assert conn.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
            token = b"\0" + b"u\x1b[31m\n" * 60_000 + b"\0wrong"
            answer = _answer_or_close(conn, ApiKey.SASL_AUTHENTICATE, version,
                                      {"auth_bytes": token})
            assert answer is not None, f"SaslAuthenticate v{version}: no answer"
            assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
            assert len(answer.error_message) < 1000
        broker.wait_for_output("Authentication failed")
        logged = _log_bytes(broker) - before
        assert logged <= 4096, f"{logged} bytes of log for one failed login"
        assert "\x1b" not in "".join(broker.output)  # client text is escaped in the log
    _still_serving(broker)


def test_an_unknown_mechanism_name_is_logged_clipped(broker):
    port = _sasl_port(broker)
    before = _log_bytes(broker)
    with RawConnection(port) as conn:
        answer = _answer_or_close(conn, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "M" * 32_767})
        assert answer is not None and answer.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
    broker.wait_for_output("is not enabled")
    assert _log_bytes(broker) - before <= 4096
    _still_serving(broker)


# -- in process: errors a loopback client cannot make happen ---------------------------------------


def _metadata_frame() -> bytes:
    from protocol.framing import encode_frame
    header = encode_request_header(RequestHeader(ApiKey.METADATA, 1, 7, "x"))
    return encode_frame(header + encode_request(ApiKey.METADATA, 1, {"topics": []}))


async def _serve_and_poke(tmp_path, monkeypatch, fail, *, properties: dict | None = None):
    """Serve in process, make ``fail`` raise inside one connection, then check that a second
    connection is served: an error out of the first would end the nursery (and this test)."""
    from broker.app import serve
    from broker.network import server

    config = build_config(properties or {}, port=0, data_dir=tmp_path / "data")
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve, config)
            with monkeypatch.context() as patch:
                fail(patch, server)
                first = await trio.open_tcp_stream("127.0.0.1", port)
                await first.send_all(_metadata_frame())
                try:  # closed (FIN, or RST for the unread request), not answered
                    assert await first.receive_some(100) == b""
                except trio.BrokenResourceError:
                    pass
            second = await trio.open_tcp_stream("127.0.0.1", port)
            await second.send_all(_metadata_frame())
            assert len(await second.receive_some(100)) > 8
            await first.aclose()
            await second.aclose()
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("code", [errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.EIO])
async def test_any_socket_error_costs_one_connection(tmp_path, monkeypatch, code):
    def fail(patch, server):
        def recv_into(self, buffer):
            raise OSError(code, "injected")
        patch.setattr(server.Socket, "recv_into", recv_into)

    await _serve_and_poke(tmp_path, monkeypatch, fail)


async def test_an_error_group_out_of_a_connection_costs_one_connection(tmp_path, monkeypatch):
    def fail(patch, server):
        async def group(self):
            raise ExceptionGroup("two", [ValueError("a"), TimeoutError(errno.ETIMEDOUT, "b")])
        patch.setattr(server._Connection, "read_requests", group)

    await _serve_and_poke(tmp_path, monkeypatch, fail)


async def test_a_bug_in_the_connection_task_costs_one_connection(tmp_path, monkeypatch):
    def fail(patch, server):
        async def broken(self):
            raise KeyError("a bug outside the dispatcher")
        patch.setattr(server._Connection, "read_requests", broken)

    await _serve_and_poke(tmp_path, monkeypatch, fail)


def test_process_survives_a_reset_storm(broker):
    """Connections reset mid-request (SO_LINGER 0) while a request is half sent."""
    for _ in range(50):
        s = socket.create_connection(("127.0.0.1", broker.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        s.sendall(_metadata_frame()[:9])
        s.close()
    _still_serving(broker)


# -- before authentication: bounded in time and size; connection limits --------------------------


def _metadata_answered(conn: RawConnection) -> bool:
    try:
        conn.send_request(ApiKey.METADATA, 1, {"topics": []})
        return conn.read_frame() is not None
    except OSError:
        return False


def test_max_connections_per_ip_overrides(tmp_path):
    with BrokerProcess.configured(tmp_path, "max.connections.per.ip=1\n"
                                  "max.connections.per.ip.overrides=localhost:3\n") as proc:
        conns = [RawConnection(proc.port) for _ in range(4)]
        try:
            assert [_metadata_answered(c) for c in conns] == [True, True, True, False]
        finally:
            for c in conns:
                c.close()


def test_max_connections_waits_for_a_slot_as_kafka(tmp_path):
    with BrokerProcess.configured(tmp_path, "max.connections=2\n") as proc:
        first, second = RawConnection(proc.port), RawConnection(proc.port)
        assert _metadata_answered(first) and _metadata_answered(second)
        third = RawConnection(proc.port, timeout=1.0)  # in the backlog: not accepted yet
        third.send_request(ApiKey.METADATA, 1, {"topics": []})
        with pytest.raises(TimeoutError):
            third.read_frame()
        first.close()  # a slot: the third is accepted and answered
        third.sock.settimeout(10)
        assert third.read_frame() is not None
        for c in (second, third):
            c.close()


def test_per_ip_zero_needs_overrides(tmp_path):
    import subprocess
    import sys
    config = tmp_path / "server.properties"
    config.write_text("max.connections.per.ip=0\n")
    done = subprocess.run([sys.executable, "-c", "from broker.cli import main; main()", "serve",
                           "--host", "127.0.0.1", "--port", "0", "--data-dir",
                           str(tmp_path / "data"), "--config", str(config)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip().endswith("max.connections.per.ip can be 0 only with "
                                        "max.connections.per.ip.overrides (Kafka's rule)")


def test_a_sasl_connection_must_authenticate_in_time(tmp_path):
    from tests.secured import sasl_plain
    properties = "\n".join(secured("sasl.server.authentication.timeout.ms=700")) + "\n"
    with BrokerProcess.configured(tmp_path, properties) as proc:
        with RawConnection(proc.port) as idle, RawConnection(proc.port) as user:
            assert idle.request(ApiKey.API_VERSIONS, 0, {}).error_code == 0
            sasl_plain(user, "alice")
            trio.run(trio.sleep, 1.5)
            assert idle.read_frame() is None  # closed: not authenticated in time
            assert _metadata_answered(user)  # authenticated: the deadline is lifted
        proc.wait_for_output("not authenticated within 0.7 s")


def test_a_scram_client_first_message_is_capped(tmp_path):
    properties = "\n".join(secured()) + "\n"
    with BrokerProcess.configured(tmp_path, properties) as proc:
        with RawConnection(proc.port) as conn:
            assert conn.request(ApiKey.SASL_HANDSHAKE, 1,
                                {"mechanism": "SCRAM-SHA-256"}).error_code == 0
            first = b"n,,n=alice,r=" + b"x" * 400_000
            answer = conn.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": first})
            assert answer.error_code == 58 and "at most 4096" in answer.error_message
            assert conn.read_frame() is None  # then closed


def test_a_group_id_longer_than_a_key_can_carry_is_refused(plain):
    """Found by the order fuzzer: OffsetCommit v9 (flexible: compact strings) with a 32,768-byte
    group id reached the __consumer_offsets key encoder (2-byte lengths) and raised; the group
    is now INVALID_GROUP_ID before anything is stored, and ListGroups v2 (2-byte strings) still
    answers."""
    too_long = "g" * 32_768
    with RawConnection(plain.port) as conn:
        created = conn.request(ApiKey.CREATE_TOPICS, 2, {
            "topics": [{"name": "gid", "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 5000, "validate_only": False})
        assert created.topics[0].error_code in (0, 36)
        answer = _answer_or_close(conn, ApiKey.OFFSET_COMMIT, 9, {
            "group_id": too_long, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": "gid", "partitions": [{
                "partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                "committed_metadata": None}]}]})
        assert answer is not None
        assert answer.topics[0].partitions[0].error_code == 24  # INVALID_GROUP_ID
        listed = _answer_or_close(conn, ApiKey.LIST_GROUPS, 2, {})
        assert listed is not None and listed.error_code == 0
        assert all(g.group_id != too_long for g in listed.groups)
    _still_serving(plain)
