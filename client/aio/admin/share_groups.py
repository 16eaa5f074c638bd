"""Admin calls on share groups (KIP-932) and their start offsets, each sent to the group's
coordinator: ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets and
DeleteShareGroupOffsets. Listing and deleting share groups are ListGroups (type ``share``) and
DeleteGroups (``groups.py``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from client.aio.admin._base import AdminBase
from client.aio.cluster import GROUP, is_coordinator_error
from client.errors import BrokerResponseError, error_for
from client.retry import retry
from client.structs import (
    ShareGroupDescription,
    ShareMemberDescription,
    SharePartitionOffset,
    TopicPartition,
)
from protocol.api_keys import ApiKey


class ShareGroupsAdmin(AdminBase):
    async def _share_request(self, group_id: str, api_key: int, body: dict, what: str,
                             error_of: Any) -> Any:
        """``body`` to the group's coordinator, retried while ``error_of(response)`` is a
        coordinator error (the coordinator moved or is loading)."""

        async def attempt() -> Any:
            response = await self._cluster.coordinator_request(GROUP, group_id, api_key, body)
            code = error_of(response)
            if code:
                exc = self._cluster.coordinator_error(GROUP, group_id, code, f"{what} {group_id}")
                if is_coordinator_error(exc):
                    raise exc
            return response

        return await retry(attempt, backoff=self._cluster.backoff, timeout=self._timeout,
                           what=what)

    async def describe_share_groups(
        self, group_ids: Iterable[str]
    ) -> dict[str, ShareGroupDescription | BrokerResponseError]:
        """ShareGroupDescribe: per group its description, or its error (``GroupIdNotFoundError``
        for no such share group)."""
        result: dict[str, ShareGroupDescription | BrokerResponseError] = {}
        for group_id in group_ids:
            response = await self._share_request(
                group_id, ApiKey.SHARE_GROUP_DESCRIBE,
                {"group_ids": [group_id], "include_authorized_operations": False},
                "ShareGroupDescribe", lambda r: r.groups[0].error_code)
            (group,) = response.groups
            if group.error_code:
                result[group_id] = error_for(
                    group.error_code, group.error_message or f"group {group_id}")
                continue
            members = tuple(
                ShareMemberDescription(
                    m.member_id, m.client_id, m.client_host, m.member_epoch,
                    tuple(sorted(TopicPartition(tp.topic_name, p)
                                 for tp in m.assignment.topic_partitions for p in tp.partitions)))
                for m in group.members)
            result[group_id] = ShareGroupDescription(
                group.group_id, group.group_state, group.group_epoch, group.assignment_epoch,
                group.assignor_name, members)
        return result

    async def list_share_group_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[TopicPartition, SharePartitionOffset | None]:
        """DescribeShareGroupOffsets: the group's start offset per partition (all the partitions
        it has a share state for when ``partitions`` is None); None where it has none yet, as
        Kafka's admin client answers. Raises the group's error."""
        topics: list[dict] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            topics = [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]
        response = await self._share_request(
            group_id, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
            {"groups": [{"group_id": group_id, "topics": topics}]},
            "DescribeShareGroupOffsets", lambda r: r.groups[0].error_code)
        (group,) = response.groups
        if group.error_code:
            raise error_for(group.error_code, group.error_message or f"group {group_id}")
        result: dict[TopicPartition, SharePartitionOffset | None] = {}
        for topic in group.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic_name, p.partition_index)
                if p.error_code:
                    raise error_for(p.error_code, p.error_message or f"{tp.topic}-{tp.partition}")
                result[tp] = (SharePartitionOffset(p.start_offset, p.leader_epoch, p.lag)
                              if p.start_offset >= 0 else None)
        return result

    async def alter_share_group_offsets(
        self, group_id: str, offsets: Mapping[tuple[str, int], int]
    ) -> dict[TopicPartition, BrokerResponseError | None]:
        """AlterShareGroupOffsets: set the group's start offsets (the group must be empty); per
        partition None or its error. Raises the request's error."""
        by_topic: dict[str, list[dict]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "start_offset": offset})
        response = await self._share_request(
            group_id, ApiKey.ALTER_SHARE_GROUP_OFFSETS,
            {"group_id": group_id,
             "topics": [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]},
            "AlterShareGroupOffsets", lambda r: r.error_code)
        if response.error_code:
            raise error_for(response.error_code, response.error_message or f"group {group_id}")
        return {
            TopicPartition(t.topic_name, p.partition_index):
                error_for(p.error_code, p.error_message or f"{t.topic_name}-{p.partition_index}")
                if p.error_code else None
            for t in response.responses for p in t.partitions
        }

    async def delete_share_group_offsets(
        self, group_id: str, topics: Iterable[str]
    ) -> tuple[BrokerResponseError | None, dict[str, BrokerResponseError | None]]:
        """DeleteShareGroupOffsets: forget the group's share state of ``topics`` (the group must
        be empty). The request's error (or None) and per topic None or its error."""
        response = await self._share_request(
            group_id, ApiKey.DELETE_SHARE_GROUP_OFFSETS,
            {"group_id": group_id, "topics": [{"topic_name": t} for t in topics]},
            "DeleteShareGroupOffsets", lambda r: r.error_code)
        # (the broker's message, else the error's own: Kafka's tool prints them)
        top = (error_for(response.error_code, response.error_message)
               if response.error_code else None)
        return top, {
            t.topic_name: error_for(t.error_code, t.error_message)
            if t.error_code else None
            for t in response.responses
        }
