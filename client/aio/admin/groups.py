"""Admin calls on consumer groups and their committed offsets: each group's calls go to its
coordinator (FindCoordinator), ListGroups asks every broker."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from client.aio.admin._base import AdminBase
from client.aio.cluster import GROUP, is_coordinator_error
from client.aio.group_coordinator import fetch_committed
from client.errors import (
    BrokerResponseError,
    UnsupportedVersionError,
    error_for,
)
from client.group_protocol import decode_assignment_untrusted
from client.retry import retry
from client.structs import (
    GroupDescription,
    GroupListing,
    MemberDescription,
    OffsetAndMetadata,
    TopicPartition,
)
from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError, ErrorCode


class GroupsAdmin(AdminBase):
    # -- groups ----------------------------------------------------------------------------------

    async def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> list[GroupListing]:
        """Every group known to any broker, optionally only those in ``states`` (``Stable``,
        ``Empty``, ... case-insensitive) or of ``types`` (``classic``, ``consumer``). The broker
        filters (ListGroups v4+/v5+); an older one is filtered here where it says the state."""
        cluster = self._cluster
        await cluster.refresh_metadata([])
        states = [s for s in states]
        types = [t for t in types]
        groups: dict[str, GroupListing] = {}
        for node in sorted(cluster.brokers):
            conn = await cluster.connection(node)
            response = await conn.request(
                ApiKey.LIST_GROUPS, {"states_filter": states, "types_filter": types}
            )
            if response.error_code:
                raise error_for(response.error_code, f"ListGroups on broker {node}")
            for g in response.groups:
                listing = GroupListing(g.group_id, g.protocol_type,
                                       getattr(g, "group_state", ""), getattr(g, "group_type", ""))
                if states and listing.state and listing.state.lower() not in {
                        s.lower() for s in states}:
                    continue
                groups[g.group_id] = listing
        return sorted(groups.values())

    async def delete_groups(
        self, group_ids: Iterable[str]
    ) -> dict[str, BrokerResponseError | None]:
        """Delete groups without members, with their committed offsets; per group None or its
        error (``NonEmptyGroupError``, ``GroupIdNotFoundError`` ...)."""
        result: dict[str, BrokerResponseError | None] = {}
        for group_id in group_ids:

            async def attempt(group_id: str = group_id) -> int:
                response = await self._cluster.coordinator_request(
                    GROUP, group_id, ApiKey.DELETE_GROUPS, {"groups_names": [group_id]}
                )
                (r,) = response.results
                if r.error_code and is_coordinator_error(error_for(r.error_code)):
                    raise self._cluster.coordinator_error(
                        GROUP, group_id, r.error_code, f"group {group_id}"
                    )
                return r.error_code

            code = await retry(
                attempt, backoff=self._cluster.backoff, timeout=self._timeout, what="DeleteGroups"
            )
            result[group_id] = error_for(code, f"group {group_id}") if code else None
        return result

    async def delete_group_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, BrokerResponseError | None]:
        """OffsetDelete: forget the group's committed offsets of ``partitions`` (refused with
        ``GroupSubscribedToTopicError`` for topics its members subscribe to). Raises a group-level
        error."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)

        async def attempt() -> Any:
            response = await self._cluster.coordinator_request(
                GROUP, group_id, ApiKey.OFFSET_DELETE, {"group_id": group_id, "topics": [
                    {"name": t, "partitions": [{"partition_index": p} for p in ps]}
                    for t, ps in by_topic.items()]},
            )
            if response.error_code:
                raise self._cluster.coordinator_error(
                    GROUP, group_id, response.error_code, f"OffsetDelete {group_id}"
                )
            return response

        response = await retry(
            attempt, backoff=self._cluster.backoff, timeout=self._timeout, what="OffsetDelete"
        )
        return {
            TopicPartition(t.name, p.partition_index):
                error_for(p.error_code, f"{t.name}-{p.partition_index}") if p.error_code else None
            for t in response.topics for p in t.partitions
        }

    async def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        result = []
        for group_id in group_ids:

            async def attempt(group_id: str = group_id) -> Any:
                response = await self._cluster.coordinator_request(
                    GROUP, group_id, ApiKey.DESCRIBE_GROUPS, {"groups": [group_id]}
                )
                (group,) = response.groups
                if group.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                    return group  # DescribeGroups v6+: no such group (older versions: Dead)
                if group.error_code:
                    exc = self._cluster.coordinator_error(
                        GROUP, group_id, group.error_code, f"group {group_id}"
                    )
                    raise exc
                return group

            group = await retry(
                attempt, backoff=self._cluster.backoff, timeout=self._timeout, what="DescribeGroups"
            )
            if group.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                # Not a classic group: maybe a consumer-protocol one (KIP-848).
                consumer = await self._describe_consumer_group(group_id)
                if consumer is not None:
                    result.append(consumer)
                    continue
            members = []
            for m in group.members:
                assignment: tuple[TopicPartition, ...] = ()
                if group.protocol_type == "consumer" and m.member_assignment:
                    try:
                        assignment = tuple(decode_assignment_untrusted(m.member_assignment))
                    except CorruptFrameError:
                        assignment = ()
                members.append(
                    MemberDescription(m.member_id, m.client_id, m.client_host, assignment)
                )
            result.append(
                GroupDescription(
                    group.group_id,
                    group.group_state,
                    group.protocol_type,
                    group.protocol_data,
                    tuple(members),
                    group.error_code,
                )
            )
        return result

    async def _describe_consumer_group(self, group_id: str) -> GroupDescription | None:
        """ConsumerGroupDescribe (KIP-848): the group as a GroupDescription (protocol type
        "consumer", the assignor as the protocol, members' current assignments); None if it is
        no such group or the broker does not serve the API."""

        async def attempt() -> Any:
            response = await self._cluster.coordinator_request(
                GROUP, group_id, ApiKey.CONSUMER_GROUP_DESCRIBE,
                {"group_ids": [group_id], "include_authorized_operations": False})
            (group,) = response.groups
            if group.error_code and group.error_code != ErrorCode.GROUP_ID_NOT_FOUND:
                raise self._cluster.coordinator_error(
                    GROUP, group_id, group.error_code, f"group {group_id}")
            return group

        try:
            group = await retry(attempt, backoff=self._cluster.backoff, timeout=self._timeout,
                                what="ConsumerGroupDescribe")
        except UnsupportedVersionError:
            return None
        if group.error_code:
            return None
        members = tuple(
            MemberDescription(
                m.member_id, m.client_id, m.client_host,
                tuple(sorted(TopicPartition(tp.topic_name, p)
                             for tp in m.assignment.topic_partitions for p in tp.partitions)))
            for m in group.members)
        return GroupDescription(group.group_id, group.group_state, "consumer",
                                group.assignor_name, members)

    async def list_group_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (all of them when ``partitions`` is None)."""
        topics: dict[str, list[int]] | None = None
        if partitions is not None:
            topics = {}
            for topic, partition in partitions:
                topics.setdefault(topic, []).append(partition)
        return await fetch_committed(self._cluster, group_id, topics, timeout=self._timeout)
