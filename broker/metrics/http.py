"""``GET /metrics`` over HTTP/1.x for Prometheus: one response per connection, then close.

Only what a scraper sends is understood; anything else gets 404 or 400. A request head larger than
8 KiB or slower than 10 s is dropped (a scraper sends ~200 bytes at once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

log = logging.getLogger("minibroker.metrics")
MAX_HEAD = 8 * 1024
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def serve_metrics(
    host: str,
    port: int,
    render: Callable[[], str],
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    log.info("metrics on http://%s:%d/metrics", host, bound)
    task_status.started(bound)

    async def handler(stream: trio.SocketStream) -> None:
        await _answer(stream, render)

    await trio.serve_listeners(handler, listeners)


async def _answer(stream: trio.abc.Stream, render: Callable[[], str]) -> None:
    async with stream:
        head = b""
        with trio.move_on_after(10):
            while b"\r\n\r\n" not in head and b"\n\n" not in head and len(head) <= MAX_HEAD:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                head += chunk
        request_line = head.split(b"\n", 1)[0].decode("latin-1").strip().split()
        if len(request_line) < 2 or request_line[0] not in ("GET", "HEAD"):
            status, body = "400 Bad Request", "bad request\n"
        elif request_line[1].split("?", 1)[0] != "/metrics":
            status, body = "404 Not Found", "see /metrics\n"
        else:
            try:
                status, body = "200 OK", render()
            except Exception:  # a bug must cost one scrape, not the broker
                log.exception("rendering metrics failed")
                status, body = "500 Internal Server Error", "error\n"
        data = body.encode("utf-8")
        head_out = (f"HTTP/1.1 {status}\r\nContent-Type: {CONTENT_TYPE}\r\n"
                    f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
        try:
            await stream.send_all(head_out + (b"" if request_line[:1] == ["HEAD"] else data))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
