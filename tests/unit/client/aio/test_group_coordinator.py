"""The consumer's group coordinator against a scripted group coordinator (no real broker):
joining (KIP-394's MEMBER_ID_REQUIRED), leading the assignment, a rebalance announced by a
heartbeat, and commits that fail (a rebalanced group, a coordinator that moved). Time is trio's
MockClock (autojump)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from client.aio import AsyncConsumer
from client.errors import CommitFailedError
from client.group_protocol import decode_assignment_untrusted, encode_subscription
from client.structs import TopicPartition
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.unit.client.aio.scripted_broker import Delay, Request, ScriptedBroker

CONFIG: dict[str, Any] = {
    "bootstrap.servers": "broker0:9092",
    "group.id": "g",
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "heartbeat.interval.ms": 1000,
    "fetch.max.wait.ms": 500,
}


class Group:
    """The coordinator's side of group "g": one member (ours), or ours and another one."""

    def __init__(self, broker: ScriptedBroker) -> None:
        self.generation = 0
        self.others: list[str] = []  # other members of the next generation
        self.heartbeat_error = 0
        self.commit_errors: list[int] = []
        self.committed: dict[TopicPartition, int] = {}
        broker.on(ApiKey.JOIN_GROUP, self.join)
        broker.on(ApiKey.SYNC_GROUP, self.sync)
        broker.on(ApiKey.HEARTBEAT, self.heartbeat)
        broker.on(ApiKey.OFFSET_COMMIT, self.commit)
        broker.on(ApiKey.OFFSET_FETCH, self.fetch_offsets)
        broker.on(ApiKey.LEAVE_GROUP, lambda r: {"error_code": 0})
        broker.on(ApiKey.LIST_OFFSETS, list_offsets)
        broker.on(ApiKey.FETCH, empty_fetch)

    def join(self, request: Request) -> dict[str, Any]:
        if not request.body.member_id:  # KIP-394: the member id first
            return {"error_code": ErrorCode.MEMBER_ID_REQUIRED, "member_id": "me-1",
                    "leader": "", "protocol_name": "", "members": []}
        self.generation += 1
        subscription = request.body.protocols[0].metadata
        members = [{"member_id": request.body.member_id, "metadata": subscription}] + [
            {"member_id": m, "metadata": encode_subscription(["t"])} for m in self.others]
        return {"error_code": 0, "generation_id": self.generation,
                "protocol_name": request.body.protocols[0].name, "leader": request.body.member_id,
                "member_id": request.body.member_id, "members": members}

    def sync(self, request: Request) -> dict[str, Any]:
        mine = next(a.assignment for a in request.body.assignments
                    if a.member_id == request.body.member_id)
        return {"error_code": 0, "assignment": mine}

    def heartbeat(self, request: Request) -> dict[str, Any]:
        return {"error_code": self.heartbeat_error}

    def commit(self, request: Request) -> dict[str, Any]:
        code = self.commit_errors.pop(0) if self.commit_errors else 0
        if not code:
            for t in request.body.topics:
                for p in t.partitions:
                    self.committed[TopicPartition(t.name, p.partition_index)] = p.committed_offset
        return {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": code} for p in t.partitions]}
            for t in request.body.topics]}

    def fetch_offsets(self, request: Request) -> dict[str, Any]:
        return {"error_code": 0, "topics": [{"name": t.name, "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": None, "error_code": 0}
            for p in t.partition_indexes]} for t in request.body.topics]}


def list_offsets(request: Request) -> dict[str, Any]:
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1, "offset": 0}
        for p in t.partitions]} for t in request.body.topics]}


def empty_fetch(request: Request) -> Any:
    return Delay(0.5, {"responses": [{"topic": t.topic, "partitions": [
        {"partition_index": p.partition, "error_code": 0, "high_watermark": 0,
         "last_stable_offset": 0, "log_start_offset": 0, "aborted_transactions": None,
         "records": b""} for p in t.partitions]} for t in request.body.topics]})


def consumer(broker: ScriptedBroker, clock: Any, **config: Any) -> AsyncConsumer:
    return AsyncConsumer({**CONFIG, **config}, clock=clock, open_stream=broker.open_stream)


async def poll_past_generation(c: AsyncConsumer, generation: int) -> None:
    """Poll until the consumer has rejoined past ``generation`` (5 s at the most)."""
    with trio.move_on_after(5):
        while c.group_metadata().generation_id == generation:
            await c.poll(0.5)


async def test_join_then_a_rebalance_announced_by_a_heartbeat(broker, clock, autojump_clock):
    broker.topics["t"] = [0, 0]
    group = Group(broker)
    events: list[tuple[str, list[TopicPartition]]] = []
    async with consumer(broker, clock) as c:
        c.subscribe(["t"], on_assign=lambda ps: events.append(("assigned", ps)),
                    on_revoke=lambda ps: events.append(("revoked", ps)))
        assert await c.poll(0.1) == []
        assert c.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
        assert c.group_metadata().generation_id == 1
        # Another member arrives: the coordinator answers heartbeats REBALANCE_IN_PROGRESS.
        group.others = ["other-1"]
        group.heartbeat_error = ErrorCode.REBALANCE_IN_PROGRESS
        await poll_past_generation(c, 1)
        group.heartbeat_error = 0
        assert c.group_metadata().generation_id == 2
        assert c.assignment() == {TopicPartition("t", 0)}  # range: t-1 went to the other
    assert events == [
        ("assigned", [TopicPartition("t", 0), TopicPartition("t", 1)]),
        ("revoked", [TopicPartition("t", 0), TopicPartition("t", 1)]),
        ("assigned", [TopicPartition("t", 0)]),
    ]
    joins = broker.requests(ApiKey.JOIN_GROUP)
    assert [j.body.member_id for j in joins] == ["", "me-1", "me-1"]  # KIP-394, then rejoin
    (_, second_sync) = broker.requests(ApiKey.SYNC_GROUP)
    assignments = {a.member_id: decode_assignment_untrusted(a.assignment)
                   for a in second_sync.body.assignments}
    assert assignments == {"me-1": [TopicPartition("t", 0)], "other-1": [TopicPartition("t", 1)]}
    assert len(broker.requests(ApiKey.LEAVE_GROUP)) == 1


async def test_a_commit_after_the_group_rebalanced_fails_and_rejoins(broker, clock, autojump_clock):
    broker.topics["t"] = [0]
    group = Group(broker)
    async with consumer(broker, clock) as c:
        c.subscribe(["t"])
        await c.poll(0.1)
        group.commit_errors = [ErrorCode.ILLEGAL_GENERATION]
        with pytest.raises(CommitFailedError):
            await c.commit({("t", 0): 5})
        assert group.committed == {}
        await c.poll(0.1)  # rejoins
        assert c.group_metadata().generation_id == 2
        await c.commit({("t", 0): 5})
    assert group.committed == {TopicPartition("t", 0): 5}
    assert len(broker.requests(ApiKey.OFFSET_COMMIT)) == 2  # the failed one was not retried


async def test_a_commit_follows_the_coordinator_when_it_moves(broker, clock, autojump_clock):
    """NOT_COORDINATOR: the client forgets the coordinator, asks FindCoordinator again and
    retries the commit (after the retry backoff) at the new one."""
    broker.brokers[1] = ("broker1", 9092)
    broker.topics["t"] = [0]
    group = Group(broker)
    async with consumer(broker, clock) as c:
        c.subscribe(["t"])
        await c.poll(0.1)
        group.commit_errors = [ErrorCode.NOT_COORDINATOR]
        broker.coordinators[(0, "g")] = 1
        await c.commit({("t", 0): 3})
    commits = broker.requests(ApiKey.OFFSET_COMMIT)
    assert [r.node for r in commits] == [0, 1]
    assert group.committed == {TopicPartition("t", 0): 3}
    assert len(broker.requests(ApiKey.FIND_COORDINATOR)) == 2


async def test_an_unknown_member_id_rejoins_with_a_new_one(broker, clock, autojump_clock):
    """The coordinator no longer knows us (our session expired): the heartbeat answers
    UNKNOWN_MEMBER_ID and the consumer joins again from an empty member id."""
    broker.topics["t"] = [0]
    group = Group(broker)
    async with consumer(broker, clock) as c:
        c.subscribe(["t"])
        await c.poll(0.1)
        group.heartbeat_error = ErrorCode.UNKNOWN_MEMBER_ID
        await poll_past_generation(c, 1)
        group.heartbeat_error = 0
        assert c.group_metadata().generation_id == 2
    assert [j.body.member_id for j in broker.requests(ApiKey.JOIN_GROUP)] == ["", "me-1", "", "me-1"]


async def test_auto_commit_runs_on_the_injected_clock(broker, clock, autojump_clock):
    """auto.commit.interval.ms counts on the consumer's clock (here trio's mock time): poll
    commits the positions once per interval, not more often."""
    broker.topics["t"] = [0]
    group = Group(broker)
    async with consumer(broker, clock, **{"enable.auto.commit": True,
                                          "auto.commit.interval.ms": 5000}) as c:
        c.subscribe(["t"])
        start = trio.current_time()
        while trio.current_time() - start < 12:
            await c.poll(0.5)
    times = [r.time - start for r in broker.requests(ApiKey.OFFSET_COMMIT)]
    assert group.committed == {TopicPartition("t", 0): 0}
    # at the first poll nothing had a position yet (nothing to commit); then every 5 s, and
    # once more on close
    assert [round(t, 1) for t in times] == [5.0, 10.0, 12.0]
