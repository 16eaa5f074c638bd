"""Requests with maximal strings (issue 36): for every API and version the broker serves, requests
whose string fields hold the longest text their encoding carries (32,767 bytes in an int16-length
string), and, in flexible versions (compact strings, a varint length), longer ones still.

An error message that repeats such a name no longer fits its answer; a log line that repeats it
is as long as the client likes. The fuzzers send these frames and hold the invariant that the
broker process never exits.

``frames(rng)`` yields ``(api_key, version, field path, request frame body)`` (the frame without
its size prefix, as the seeds are).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

from protocol.headers import RequestHeader, encode_request_header
from protocol.messages import encode_request
from protocol.messages._declare import APIS, F, in_range
from protocol.messages.api_versions import IMPLEMENTED

LONGEST = 32_767  # bytes of an int16-length string
OVER = (32_768, 65_536, 200_000)  # compact strings only (flexible versions)


def _text(size: int, rng: random.Random) -> str:
    """``size`` bytes of UTF-8: ASCII, multi-byte characters or control characters."""
    kind = rng.randrange(3)
    if kind == 0:
        return "t" * size
    if kind == 1:
        return "\u00e9" * (size // 2) + "t" * (size % 2)  # two bytes each
    return ("\x1b[31m\n\r\u2028" * (size // 10 + 1)).encode()[:size].decode("utf-8", "ignore")


def _value(f: F, version: int, path: str, target: str, big: str) -> Any:
    if f.type == "string":
        return big if path == target else "t"
    if f.type == "[]string":
        return [big] if path == target else ["t"]
    if f.type in ("struct", "[]") or (f.type.startswith("[]") and f.fields):
        inner = _build(f.fields, version, path, target, big)
        return [inner] if f.type.startswith("[]") else inner
    if f.type.startswith("[]"):
        return []
    return f.default_for(version)


def _build(fields: Sequence[F], version: int, prefix: str, target: str, big: str) -> dict:
    out = {}
    for f in fields:
        if not in_range(version, f.versions) or f.tag is not None:
            continue
        value = _value(f, version, f"{prefix}.{f.name}" if prefix else f.name, target, big)
        if f.type == "records":
            value = None
        elif f.name == "acks":
            value = 1  # acks=0 has no answer
        out[f.name] = value
    return out


def string_fields(fields: Sequence[F], version: int, prefix: str = "") -> list[str]:
    """The paths of the string fields a version carries (array and struct members included)."""
    paths = []
    for f in fields:
        if not in_range(version, f.versions) or f.tag is not None:
            continue
        path = f"{prefix}.{f.name}" if prefix else f.name
        if f.type in ("string", "[]string"):
            paths.append(path)
        elif f.fields:
            paths.extend(string_fields(f.fields, version, path))
    return paths


def frame(api_key: int, version: int, body: dict, correlation_id: int = 1) -> bytes | None:
    """The request frame body, or None when the codec cannot carry it (a string over 32,767
    bytes in a non-flexible version)."""
    try:
        payload = encode_request(api_key, version, body)
    except Exception:  # noqa: BLE001 - the client-side codec refuses what it cannot encode
        return None
    header = encode_request_header(RequestHeader(api_key, version, correlation_id, "maximal"))
    return header + payload


def frames(rng: random.Random, sizes: Sequence[int] = (LONGEST,)) -> Iterator[tuple[int, int, str,
                                                                                   bytes]]:
    """For every served (api, version) and every string field: that field maximal, the others
    short, at each of ``sizes`` (a size over 32,767 only where the version is flexible)."""
    for api_key, version in sorted(IMPLEMENTED):
        api = APIS[api_key]
        flexible = api.is_flexible(version)
        for path in string_fields(api.request, version):
            for size in sizes:
                if size > LONGEST and not flexible:
                    continue
                body = _build(api.request, version, "", path, _text(size, rng))
                data = frame(api_key, version, body)
                if data is not None:
                    yield int(api_key), version, path, data


def one(rng: random.Random) -> bytes:
    """One random maximal-string frame (any API, version and string field, any size)."""
    while True:
        api_key, version = rng.choice(sorted(IMPLEMENTED))
        api = APIS[api_key]
        paths = string_fields(api.request, version)
        if not paths:
            continue
        sizes = [LONGEST, *OVER] if api.is_flexible(version) else [LONGEST]
        body = _build(api.request, version, "", rng.choice(paths),
                      _text(rng.choice(sizes), rng))
        data = frame(api_key, version, body, rng.randrange(1 << 31))
        if data is not None:
            return data


class SweepReport:
    def __init__(self) -> None:
        self.requests = 0
        self.answered = 0
        self.closed = 0  # the broker closed the connection instead of answering
        self.slow = 0  # no answer within the timeout (a long poll, a rebalance): reconnected
        self.slow_apis: set[tuple[int, int]] = set()
        self.apis: set[tuple[int, int]] = set()
        self.exits = 0

    def __repr__(self) -> str:
        return (f"SweepReport(requests={self.requests}, answered={self.answered}, "
                f"closed={self.closed}, slow={self.slow}, api_versions={len(self.apis)}, exits={self.exits})")


def sweep(port: int, alive: Any, items: Iterator[tuple[int, int, str, bytes]],
          report: SweepReport | None = None, timeout: float = 3.0) -> SweepReport:
    """Send every frame of ``items`` to ``port`` (one at a time: its answer, or the broker's
    close, before the next), reconnecting after a close; ``alive()`` is checked after each and
    an exit ends the sweep."""
    import socket
    import struct

    from tests.raw_client import SocketFrames

    report = report or SweepReport()
    sock: socket.socket | None = None
    frames_in: SocketFrames | None = None
    for api_key, version, _path, data in items:
        if sock is None:
            sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            frames_in = SocketFrames(sock)
        report.requests += 1
        report.apis.add((api_key, version))
        try:
            sock.sendall(struct.pack(">i", len(data)) + data)
            answer = frames_in.next_frame() if frames_in is not None else None
        except TimeoutError:
            report.slow += 1
            report.slow_apis.add((api_key, version))
            sock.close()
            sock = None
            answer = b""
        except OSError:
            answer = None
        if answer == b"":
            pass
        elif answer is None:
            report.closed += 1
            sock.close()
            sock = None
        else:
            report.answered += 1
        if not alive():
            report.exits += 1
            break
    if sock is not None:
        sock.close()
    return report
