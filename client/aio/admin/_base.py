"""What every part of ``AsyncAdmin`` shares: the cluster, the request timeout, the clock, and
finding a partition's leader or the controller."""

from __future__ import annotations

from typing import Any

from client.aio.cluster import Cluster
from client.clock import Clock
from client.errors import UnknownTopicOrPartitionError
from client.structs import TopicPartition


class AdminBase:
    def __init__(self, cluster: Cluster, timeout: float, clock: Clock) -> None:
        self._cluster = cluster
        self._timeout = timeout  # request.timeout.ms, in seconds: the retry deadline of a call
        self.clock = clock

    async def _leader(self, topic: str, partition: int) -> int:
        cluster = self._cluster
        tp = TopicPartition(topic, partition)
        leader = cluster.leader_for(tp)
        if leader is None:
            await cluster.refresh_metadata([topic])
            leader = cluster.leader_for(tp)
        if leader is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} has no leader")
        return leader


    async def _controller_connection(self) -> Any:
        """A connection to the controller (any broker when the metadata names none)."""
        cluster = self._cluster
        await cluster.refresh_metadata([])
        if cluster.controller_id >= 0:
            return await cluster.connection(cluster.controller_id)
        return await cluster.any_connection()
