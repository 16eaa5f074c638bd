"""The trio admin client: topics, configs, records, groups and their offsets, producers and
transactions (ending handed-over ones), ACLs and SCRAM credentials.

``AsyncAdmin`` is split by concern, one module each: ``topics`` (topics, partitions, configs,
records, log dirs, offsets), ``groups`` (groups and committed offsets), ``share_groups``
(share groups' descriptions and start offsets), ``transactions``
(producers, transactions, hanging ones, ``end_transaction`` and its tolerance rules) and
``security`` (ACLs, SCRAM credentials); ``_base`` holds what they share. Every call that is
retried follows the client's one retry policy (``client/retry.py``) until the request timeout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from client._loop import require_trio
from client.aio._tasks import EngineTasks
from client.aio.admin.groups import GroupsAdmin
from client.aio.admin.security import SecurityAdmin
from client.aio.admin.share_groups import ShareGroupsAdmin
from client.aio.admin.transactions import TransactionsAdmin
from client.aio.cluster import Cluster
from client.aio.connection import OpenStream
from client.clock import Clock, WallClock
from client.config import ClientConfig, admin_config
from client.errors import BrokerResponseError

__all__ = ["AsyncAdmin", "raise_first"]


class AsyncAdmin(TransactionsAdmin, GroupsAdmin, ShareGroupsAdmin, SecurityAdmin):
    """Kafka admin operations on trio (``async with AsyncAdmin(conf) as admin``)."""

    def __init__(
        self,
        config: Mapping[str, Any] | ClientConfig,
        *,
        clock: Clock | None = None,
        open_stream: OpenStream | None = None,
    ) -> None:
        """``clock``: the time the admin reads (default: the wall clock); ``open_stream``: how
        its connections open (default: TCP; tests pass an in-memory broker's)."""
        self.config = config if isinstance(config, ClientConfig) else admin_config(config)
        super().__init__(Cluster(self.config, open_stream=open_stream),
                         self.config["request.timeout.ms"] / 1000, clock or WallClock())
        self._tasks = EngineTasks("AsyncAdmin")

    async def __aenter__(self) -> AsyncAdmin:
        require_trio("AsyncAdmin", "Admin")
        self._cluster.start(await self._tasks.open())
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self._tasks.cancel()
        await self._cluster.aclose()
        await self._tasks.aclose()

    async def close(self) -> None:
        """Nothing to flush; the ``async with`` exit closes the connections."""


def raise_first(
    results: Mapping[str, BrokerResponseError | None], ignore: Iterable[int] = ()
) -> None:
    """Raise the first error of a create/delete result dict, skipping codes in ``ignore``."""
    skip = {int(c) for c in ignore}
    for error in results.values():
        if error is not None and error.wire_code not in skip:
            raise error

