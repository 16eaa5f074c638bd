"""The broker container's health check: a Kafka ApiVersions request (v0) to the broker's INTERNAL
listener, whose answer must come within a timeout. A TCP connection alone is not enough: the
kernel accepts connections for a broker that is frozen (SIGSTOP) or stuck, and only an answer
shows that it serves. Exit status 0 when healthy, 1 with one line on stdout when not.

    python /usr/local/bin/minibroker-healthcheck [PORT] [TIMEOUT_SECONDS]
"""

from __future__ import annotations

import socket
import struct
import sys
import time

API_VERSIONS = 18
CORRELATION_ID = 0x4D42  # any number; the answer must carry it back


def check(port: int, timeout: float, host: str = "127.0.0.1") -> str | None:
    """None when the broker answered ApiVersions without an error within ``timeout`` seconds,
    else why not."""
    client_id = b"healthcheck"
    header = struct.pack(">hhih", API_VERSIONS, 0, CORRELATION_ID, len(client_id)) + client_id
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout) as sock:
            sock.sendall(struct.pack(">i", len(header)) + header)
            answer = b""
            while len(answer) < 10:  # size, correlation id, error code
                left = deadline - time.monotonic()
                if left <= 0:
                    return f"no ApiVersions answer within {timeout:g} s"
                sock.settimeout(left)
                chunk = sock.recv(10 - len(answer))
                if not chunk:
                    return "the broker closed the connection"
                answer += chunk
    except TimeoutError:
        return f"no ApiVersions answer within {timeout:g} s"
    except OSError as exc:
        return f"cannot reach {host}:{port}: {exc}"
    _size, correlation, error = struct.unpack(">iih", answer)
    if correlation != CORRELATION_ID:
        return f"answer for correlation id {correlation}, not {CORRELATION_ID}"
    if error:
        return f"ApiVersions answered error code {error}"
    return None


def main(argv: list[str]) -> int:
    port = int(argv[0]) if argv else 29092
    timeout = float(argv[1]) if len(argv) > 1 else 2.0
    problem = check(port, timeout)
    if problem is not None:
        print(f"unhealthy: {problem}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
