"""The client's Cluster against scripted brokers (no real broker): metadata refreshes and their
backoff, coordinators that move, brokers that refuse connections, requests nobody answers.
Time is trio's MockClock (autojump)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from client.aio.cluster import GROUP, Cluster
from client.config import admin_config
from client.errors import KafkaTimeoutError, NotCoordinatorError
from client.structs import TopicPartition
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.unit.client.aio.scripted_broker import SILENCE, Request, ScriptedBroker


@asynccontextmanager
async def cluster(broker: ScriptedBroker, **config: Any) -> AsyncIterator[Cluster]:
    c = Cluster(admin_config({"bootstrap.servers": "broker0:9092", **config}),
                open_stream=broker.open_stream)
    async with trio.open_nursery() as nursery:
        c.start(nursery)
        try:
            yield c
        finally:
            await c.aclose()
            nursery.cancel_scope.cancel()


async def test_wait_for_topic_refreshes_metadata_with_the_growing_backoff(broker, autojump_clock):
    """The topic is being created (LEADER_NOT_AVAILABLE twice): metadata is asked again after
    retry.backoff.ms, then twice that (20% jitter either way)."""
    answers = iter([5, 5, 0])

    def metadata(request: Request) -> Any:
        answer = broker._metadata(request)
        code = next(answers)
        if code:
            answer["topics"] = [{"error_code": code, "name": "t", "partitions": []}]
        return answer

    broker.topics["t"] = [0, 0, 0]
    broker.on(ApiKey.METADATA, metadata)
    async with cluster(broker, **{"retry.backoff.ms": 100, "retry.backoff.max.ms": 1000}) as c:
        assert await c.wait_for_topic("t", 10, allow_auto_create=True) == 3
    times = [r.time for r in broker.requests(ApiKey.METADATA)]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(gaps) == 2
    assert 0.08 <= gaps[0] <= 0.12 and 0.16 <= gaps[1] <= 0.24
    assert broker.requests(ApiKey.METADATA)[0].body.allow_auto_topic_creation is True


async def test_a_topic_that_never_appears_times_out_with_kafkas_message(broker, autojump_clock):
    async with cluster(broker) as c:
        start = trio.current_time()
        with pytest.raises(KafkaTimeoutError, match="Topic nope not present in metadata after 2000 ms"):
            await c.wait_for_topic("nope", 2.0, allow_auto_create=False)
        assert trio.current_time() - start <= 2.0


async def test_a_refresh_follows_a_leader_that_moved(broker, autojump_clock):
    broker.brokers[1] = ("broker1", 9092)
    broker.topics["t"] = [0, 1]
    async with cluster(broker, **{"metadata.max.age.ms": 5000}) as c:
        await c.refresh_metadata(["t"])
        assert [c.leader_for(TopicPartition("t", p)) for p in (0, 1)] == [0, 1]
        assert not c.metadata_is_stale()
        broker.topics["t"] = [1, -1]  # partition 1 has no leader for now
        await c.refresh_metadata()
        assert [c.leader_for(TopicPartition("t", p)) for p in (0, 1)] == [1, None]
        await trio.sleep(6)
        assert c.metadata_is_stale()


async def test_a_coordinator_that_moved_is_looked_up_again(broker, autojump_clock):
    broker.brokers[1] = ("broker1", 9092)
    heartbeats: list[int] = []

    def heartbeat(request: Request) -> Any:
        heartbeats.append(request.node)
        return {"error_code": ErrorCode.NOT_COORDINATOR if request.node == 0 else 0}

    broker.on(ApiKey.HEARTBEAT, heartbeat)
    body = {"group_id": "g", "generation_id": 1, "member_id": "m"}
    async with cluster(broker) as c:
        response = await c.coordinator_request(GROUP, "g", ApiKey.HEARTBEAT, body)
        assert response.error_code == ErrorCode.NOT_COORDINATOR  # and it is forgotten
        assert isinstance(c.coordinator_error(GROUP, "g", response.error_code, "x"),
                          NotCoordinatorError)
        broker.coordinators[(GROUP, "g")] = 1
        response = await c.coordinator_request(GROUP, "g", ApiKey.HEARTBEAT, body)
        assert response.error_code == 0
        await c.coordinator_request(GROUP, "g", ApiKey.HEARTBEAT, body)  # remembered now
    assert heartbeats == [0, 1, 1]
    assert len(broker.requests(ApiKey.FIND_COORDINATOR)) == 2


async def test_a_refused_broker_is_skipped_for_another(broker, autojump_clock):
    broker.brokers[1] = ("broker1", 9092)
    async with cluster(broker) as c:
        await c.refresh_metadata([])
        assert set(c.brokers) == {0, 1}
        await c.aclose()  # every connection closed; broker 0 now refuses
    broker.down.add(0)
    async with cluster(broker, **{"bootstrap.servers": "broker0:9092,broker1:9092"}) as c:
        conn = await c.any_connection()
        assert (conn.host, conn.port) == ("broker1", 9092)


async def test_a_request_nobody_answers_times_out_and_closes_the_connection(
    broker, autojump_clock
):
    broker.on(ApiKey.DESCRIBE_CLUSTER, lambda r: SILENCE)
    async with cluster(broker, **{"request.timeout.ms": 3000}) as c:
        conn = await c.any_connection()
        start = trio.current_time()
        with pytest.raises(KafkaTimeoutError, match="no response"):
            await conn.request(ApiKey.DESCRIBE_CLUSTER, {
                "include_cluster_authorized_operations": False, "endpoint_type": 1,
                "include_fenced_brokers": False})
        assert trio.current_time() - start == pytest.approx(3.0)
        assert conn.closed
        assert (await c.any_connection()) is not conn  # a new one
