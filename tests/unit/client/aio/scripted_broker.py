"""A scripted broker at the far end of the client's connections, in memory (a real fake, STYLE.md 9).

The client's real ``Cluster`` and ``BrokerConnection`` run unchanged over
``trio.testing.memory_stream_pair`` streams (``Cluster(config, open_stream=broker.open_stream)``):
framing, correlation ids, pipelining, request deadlines and ApiVersions negotiation are the real
ones. This side cuts each request frame, decodes it with the protocol's codecs (so a test sees
what the client really sent, record batches included) and answers with what the test's handler
for that API returns, encoded with the protocol's codecs:

- a ``dict``: the response body (absent fields take their declared defaults);
- ``Delay(seconds, answer)``: the answer after a pause (later answers on that connection wait, as
  a broker answers a connection's requests in order);
- ``DISCONNECT``: the connection is closed without an answer;
- ``SILENCE``: no answer ever (the client's request deadline decides).

ApiVersions (the broker's own served-versions table), Metadata (from ``topics`` and ``brokers``),
FindCoordinator (``coordinators``) and InitProducerId (a counter) have default handlers; every
request is logged in ``received``. A broker listed in ``down`` refuses connections.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import crc32c
import trio
import trio.testing

from protocol.api_keys import ApiKey
from protocol.headers import encode_response_header, parse_request_header_untrusted
from protocol.messages import decode_request, encode_response
from protocol.messages.api_versions import SERVED
from protocol.records import CRC_OFFSET, LAST_OFFSET_DELTA_OFFSET

DISCONNECT = object()
SILENCE = object()


@dataclass
class Delay:
    seconds: float
    answer: Any


@dataclass
class Request:
    node: int
    api_key: ApiKey
    version: int
    body: Any  # the decoded request (construct Container: attribute access)
    connection: int  # which connection to that broker it came on (0, 1, ... in opening order)
    time: float  # trio time it arrived


Handler = Callable[[Request], "Any | Awaitable[Any]"]


@dataclass
class ScriptedBroker:
    """``brokers``: node id -> (host, port); ``topics``: topic -> leader node per partition;
    ``coordinators``: (key_type, key) -> node (default: node 0)."""

    brokers: dict[int, tuple[str, int]] = field(default_factory=lambda: {0: ("broker0", 9092)})
    topics: dict[str, list[int]] = field(default_factory=dict)
    coordinators: dict[tuple[int, str], int] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)
    handlers: dict[int, Handler] = field(default_factory=dict)
    received: list[Request] = field(default_factory=list)
    down: set[int] = field(default_factory=set)
    cluster_id: str = "scripted"
    controller_id: int = 0
    producer_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))
    connections: dict[int, int] = field(default_factory=dict)  # node -> connections opened
    nursery: trio.Nursery | None = None

    # -- what a test uses ------------------------------------------------------------------------

    def on(self, api_key: ApiKey, handler: Handler) -> None:
        self.handlers[int(api_key)] = handler

    def script(self, api_key: ApiKey, *answers: Any, then: Handler | None = None) -> None:
        """Answer the next requests of ``api_key`` with ``answers`` in turn, then with ``then``
        (default: the default handler, else an error)."""
        queue = list(answers)
        fallback = then or self.handlers.get(int(api_key))

        def scripted(request: Request) -> Any:
            if queue:
                answer = queue.pop(0)
                return answer(request) if callable(answer) else answer
            return (fallback or self._default(api_key))(request)

        self.handlers[int(api_key)] = scripted

    def requests(self, api_key: ApiKey) -> list[Request]:
        return [r for r in self.received if r.api_key == api_key]

    async def open_stream(self, host: str, port: int) -> trio.abc.Stream:
        """``Cluster(config, open_stream=...)``: a connection to ``host:port``."""
        node = next((n for n, a in self.brokers.items() if a == (host, port)), None)
        if node is None or node in self.down or self.nursery is None:
            raise OSError(f"connection refused: {host}:{port}")
        client_end, broker_end = trio.testing.memory_stream_pair()
        number = self.connections.get(node, 0)
        self.connections[node] = number + 1
        self.nursery.start_soon(self._serve, broker_end, node, number)
        return client_end

    # -- the broker side -------------------------------------------------------------------------

    async def _serve(self, stream: trio.abc.Stream, node: int, number: int) -> None:
        buffer = bytearray()
        try:
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buffer += data
                while len(buffer) >= 4:
                    (size,) = struct.unpack_from(">i", buffer)
                    if len(buffer) < 4 + size:
                        break
                    frame, buffer = buffer[4 : 4 + size], buffer[4 + size :]
                    if not await self._answer(stream, frame, node, number):
                        await stream.aclose()
                        return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return

    async def _answer(self, stream: trio.abc.Stream, frame: bytearray, node: int, number: int) -> bool:
        header, offset = parse_request_header_untrusted(frame)
        api_key = ApiKey(header.api_key)
        body = decode_request(api_key, header.api_version, frame, offset)
        request = Request(node, api_key, header.api_version, body, number, trio.current_time())
        self.received.append(request)
        handler = self.handlers.get(int(api_key)) or self._default(api_key)
        answer = handler(request)
        if isinstance(answer, Awaitable):
            answer = await answer
        while isinstance(answer, Delay):
            await trio.sleep(answer.seconds)
            answer = answer.answer
        if answer is DISCONNECT:
            return False
        if answer is SILENCE:
            return True
        if answer is None and api_key == ApiKey.PRODUCE and body.acks == 0:
            return True
        payload = encode_response_header(api_key, header.api_version, header.correlation_id)
        payload += encode_response(api_key, header.api_version, answer)
        await stream.send_all(len(payload).to_bytes(4, "big") + payload)
        return True

    def _default(self, api_key: ApiKey) -> Handler:
        defaults: dict[ApiKey, Handler] = {
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.METADATA: self._metadata,
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
        }
        handler = defaults.get(api_key)
        if handler is None:
            raise AssertionError(f"the test has no answer for {api_key.name}")
        return handler

    def _api_versions(self, request: Request) -> dict[str, Any]:
        return {
            "error_code": 0,
            "api_keys": [
                {"api_key": int(k), "min_version": s.versions.min, "max_version": s.versions.max}
                for k, s in SERVED.items()
            ],
            "finalized_features": [
                {"name": n, "max_version_level": v, "min_version_level": v}
                for n, v in self.features.items()
            ],
        }

    def _metadata(self, request: Request) -> dict[str, Any]:
        wanted = self.topics if request.body.topics is None else [t.name for t in request.body.topics]
        topics = []
        for name in wanted:
            leaders = self.topics.get(name)
            if leaders is None:
                topics.append({"error_code": 3, "name": name, "partitions": []})
                continue
            topics.append({
                "error_code": 0, "name": name, "is_internal": False,
                "partitions": [
                    {"error_code": 0 if leader >= 0 else 5, "partition_index": i,
                     "leader_id": leader, "replica_nodes": [max(leader, 0)],
                     "isr_nodes": [max(leader, 0)]}
                    for i, leader in enumerate(leaders)
                ],
            })
        return {
            "brokers": [{"node_id": n, "host": h, "port": p} for n, (h, p) in self.brokers.items()],
            "cluster_id": self.cluster_id,
            "controller_id": self.controller_id,
            "topics": topics,
        }

    def _find_coordinator(self, request: Request) -> dict[str, Any]:
        node = self.coordinators.get((request.body.key_type, request.body.key), 0)
        host, port = self.brokers[node]
        return {"error_code": 0, "node_id": node, "host": host, "port": port}

    def _init_producer_id(self, request: Request) -> dict[str, Any]:
        body = request.body
        if body.producer_id >= 0:  # KIP-360: the same id, the next epoch
            return {"error_code": 0, "producer_id": body.producer_id,
                    "producer_epoch": body.producer_epoch + 1}
        return {"error_code": 0, "producer_id": next(self.producer_ids), "producer_epoch": 0}


def produce_answer(request: Request, *codes: int, base_offset: int = 0) -> dict[str, Any]:
    """A Produce response for every partition of ``request``: the error codes in turn (the last
    one repeats), base offsets counting up from ``base_offset``."""
    responses = []
    n = 0
    for topic in request.body.topic_data:
        parts = []
        for p in topic.partition_data:
            code = codes[min(n, len(codes) - 1)] if codes else 0
            parts.append({"index": p.index, "error_code": code,
                          "base_offset": base_offset + n if code == 0 else -1,
                          "log_append_time_ms": -1, "log_start_offset": 0})
            n += 1
        responses.append({"name": topic.name, "partition_responses": parts})
    return {"responses": responses}


def with_last_offset_delta(batch: bytes, last_offset_delta: int) -> bytes:
    """``batch`` as compaction leaves it when it removed the batch's last records: the header
    keeps the original last offset delta (so readers move past the removed offsets)."""
    out = bytearray(batch)
    struct.pack_into(">i", out, LAST_OFFSET_DELTA_OFFSET, last_offset_delta)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(bytes(out[CRC_OFFSET + 4 :])))
    return bytes(out)
