"""What connections that never authenticate cost the broker (issue 36), measured by hand:

    python -m tests.fuzz.preauth_memory [CONNECTIONS] [NONCE_BYTES ...]

Starts a broker with a SASL_PLAINTEXT listener and a SCRAM user, then for each nonce size opens
CONNECTIONS connections that each send SaslHandshake(SCRAM-SHA-256) and a SaslAuthenticate with
a client-first message holding that nonce, for the known user, and stay open: the broker's RSS
(VmRSS) before, while they are open, and after they closed. First CONNECTIONS idle connections.
Then the bytes of log per failed PLAIN login with a 500 KB user name. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

from protocol.api_keys import ApiKey
from protocol.headers import RequestHeader, encode_request_header
from protocol.messages import encode_request
from tests.broker_process import BrokerProcess
from tests.raw_client import RawConnection
from tests.secured import sasl_plain, secured


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _settled_rss(pid: int, seconds: float = 2.0) -> float:
    time.sleep(seconds)
    return _rss_mb(pid)


def _request(api_key: int, version: int, body: dict, correlation_id: int) -> bytes:
    data = encode_request_header(RequestHeader(api_key, version, correlation_id, "m")) + \
        encode_request(api_key, version, body)
    return struct.pack(">i", len(data)) + data


def _read_frame(sock: socket.socket) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(min(1 << 16, size - len(body)))
        if not chunk:
            return None
        body += chunk
    return bytes(body)


def _scram_user(port: int) -> None:
    from broker.security.scram import salted_password

    salt = os.urandom(16)
    with RawConnection(port) as conn:
        sasl_plain(conn, "admin")
        answer = conn.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
            "deletions": [], "upsertions": [{
                "name": "scram-user", "mechanism": 1, "iterations": 4096, "salt": salt,
                "salted_password": salted_password("SCRAM-SHA-256", "pw", salt, 4096)}]})
        assert answer.results[0].error_code == 0, answer


def _open_scram(port: int, count: int, nonce_bytes: int) -> tuple[list[socket.socket], int]:
    """``count`` connections, each after its client-first message; ``(sockets, still open)``."""
    first = b"n,,n=scram-user,r=" + b"N" * nonce_bytes
    socks = []
    for i in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(_request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}, 1))
        _read_frame(sock)
        sock.sendall(_request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": first}, 2))
        socks.append(sock)
        if i % 100 == 99:
            for s in socks[-100:]:
                _read_frame(s)
    for s in socks[len(socks) - len(socks) % 100:]:
        _read_frame(s)
    time.sleep(0.5)  # failed ones are closed after connection.failed.authentication.delay.ms
    still_open = 0
    for s in socks:
        s.setblocking(False)
        try:
            still_open += s.recv(1) != b""
        except BlockingIOError:
            still_open += 1
        except OSError:
            pass
        s.setblocking(True)
    return socks, still_open


def measure(count: int, nonces: list[int]) -> dict:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, max(soft, 2 * count + 512))
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))  # the broker inherits it
    result: dict = {"connections": count, "scram": []}
    with tempfile.TemporaryDirectory(prefix="preauth-") as tmp:
        properties = "\n".join(secured()) + "\n"
        with BrokerProcess.configured(Path(tmp), properties) as proc:
            assert proc.proc is not None
            pid = proc.proc.pid
            _scram_user(proc.port)
            result["baseline_mb"] = base = _settled_rss(pid)
            idle = [socket.create_connection(("127.0.0.1", proc.port)) for _ in range(count)]
            result["idle_mb"] = round(_settled_rss(pid, 2.0) - base, 1)
            for s in idle:
                s.close()
            base = _settled_rss(pid, 3.0)
            for nonce in nonces:
                socks, still_open = _open_scram(proc.port, count, nonce)
                open_mb = _settled_rss(pid, 1.0)
                for s in socks:
                    s.close()
                after_mb = _settled_rss(pid, 3.0)
                result["scram"].append({"nonce_bytes": nonce, "still_open": still_open,
                                        "open_mb": round(open_mb - base, 1),
                                        "after_close_mb": round(after_mb - base, 1)})
            # Log bytes per failed PLAIN login with a huge user name.
            logins = 20
            before = sum(len(line.encode()) for line in proc.output)
            for _ in range(logins):
                with RawConnection(proc.port) as conn:
                    conn.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
                    token = b"\0" + b"u" * 500_000 + b"\0wrong"
                    conn.send_request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
                    conn.read_frame()
            time.sleep(1.0)
            logged = sum(len(line.encode()) for line in proc.output) - before
            result["log_bytes_per_failed_login"] = logged // logins
            result["exited"] = proc.proc.poll() is not None
    return result


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    sizes = [int(a) for a in sys.argv[2:]] or [400_000, 4_000]
    print(json.dumps(measure(n, sizes)))
