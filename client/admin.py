"""The blocking admin client: ``AsyncAdmin`` on a trio loop in a background thread.

    from client import Admin, NewTopic

    with Admin({"bootstrap.servers": "127.0.0.1:9092"}) as admin:
        admin.create_topic("events", partitions=6)
        print(admin.list_topics())

``end_transaction(handle, commit)`` finishes a transaction another producer handed over with
``Producer.transaction_handle()``; ``client/aio/admin/transactions.py`` lists what it tolerates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from client._loop import LoopThread
from client.aio.admin import AsyncAdmin, raise_first
from client.errors import BrokerResponseError
from client.structs import (
    AclBinding,
    AclBindingFilter,
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    GroupDescription,
    GroupListing,
    HangingTransaction,
    LogDirDescription,
    NewTopic,
    OffsetAndMetadata,
    ProducerState,
    ShareGroupDescription,
    SharePartitionOffset,
    TopicDescription,
    TopicPartition,
    TransactionDescription,
    TransactionHandle,
    TransactionListing,
)
from protocol.errors import ErrorCode


class Admin:
    """Kafka admin operations with blocking methods."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._engine = AsyncAdmin(config)
        self.config = self._engine.config
        self._loop = LoopThread(self._engine, "minibroker-admin")
        self._loop.start()
        self._closed = False

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False, timeout_ms: int = 30_000
    ) -> dict[str, BrokerResponseError | None]:
        return self._loop.call(self._engine.create_topics, list(topics), validate_only, timeout_ms)

    def create_topic(
        self,
        name: str,
        partitions: int = -1,
        *,
        configs: Mapping[str, str] | None = None,
        exist_ok: bool = False,
    ) -> None:
        """Create one topic (``partitions=-1``: the broker's default); raises its error."""
        results = self.create_topics([NewTopic(name, partitions, -1, dict(configs or {}))])
        raise_first(results, [ErrorCode.TOPIC_ALREADY_EXISTS] if exist_ok else [])

    def delete_topics(
        self, names: Iterable[str], *, timeout_ms: int = 30_000
    ) -> dict[str, BrokerResponseError | None]:
        return self._loop.call(self._engine.delete_topics, list(names), timeout_ms)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return self._loop.call(self._engine.list_topics, include_internal)

    def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        return self._loop.call(self._engine.describe_topics, None if names is None else list(names))

    def describe_cluster(self) -> dict[str, Any]:
        return self._loop.call(self._engine.describe_cluster)

    def api_versions(self) -> list[dict[str, Any]]:
        """Each broker's ApiVersions answer: API version ranges and features."""
        return self._loop.call(self._engine.api_versions)

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> list[GroupListing]:
        """Groups, optionally only those in ``states`` (``Stable``, ``Empty`` ...) or of
        ``types`` (``classic``)."""
        return self._loop.call(self._engine.list_groups, list(states), list(types))

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, BrokerResponseError | None]:
        """Delete groups without members and their offsets; per group None or its error."""
        return self._loop.call(self._engine.delete_groups, list(group_ids))

    def delete_group_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, BrokerResponseError | None]:
        return self._loop.call(self._engine.delete_group_offsets, group_id, list(partitions))

    # -- configs, partitions, records -----------------------------------------------------------

    def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Every config of each topic/broker resource with its value and source."""
        return self._loop.call(self._engine.describe_configs, list(resources), include_synonyms,
                               include_documentation)

    def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Sequence[AlterConfigOp]],
        *,
        validate_only: bool = False,
    ) -> dict[ConfigResource, BrokerResponseError | None]:
        return self._loop.call(self._engine.incremental_alter_configs, dict(changes), validate_only)

    def alter_configs(
        self, changes: Mapping[ConfigResource, Mapping[str, str]], *, validate_only: bool = False
    ) -> dict[ConfigResource, BrokerResponseError | None]:
        return self._loop.call(self._engine.alter_configs, dict(changes), validate_only)

    def create_partitions(
        self, counts: Mapping[str, int], *, validate_only: bool = False
    ) -> dict[str, BrokerResponseError | None]:
        return self._loop.call(self._engine.create_partitions, dict(counts), validate_only)

    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> dict[TopicPartition, int]:
        """Move log start offsets (-1: to the high watermark); returns the new ones."""
        return self._loop.call(self._engine.delete_records, dict(offsets))

    def describe_log_dirs(
        self, topics: Mapping[str, Sequence[int]] | None = None
    ) -> dict[int, list[LogDirDescription]]:
        return self._loop.call(self._engine.describe_log_dirs, topics)

    def describe_producers(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, list[ProducerState]]:
        return self._loop.call(self._engine.describe_producers, list(partitions))

    def find_hanging_transactions(
        self, topics: Iterable[str] | None = None, max_transaction_timeout_ms: int = 900_000
    ) -> list[HangingTransaction]:
        return self._loop.call(
            self._engine.find_hanging_transactions,
            None if topics is None else list(topics), max_transaction_timeout_ms,
        )

    def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        return self._loop.call(self._engine.describe_groups, list(group_ids))

    def list_group_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._loop.call(
            self._engine.list_group_offsets,
            group_id,
            None if partitions is None else list(partitions),
        )

    # -- share groups (KIP-932) -------------------------------------------------------------------

    def describe_share_groups(
        self, group_ids: Iterable[str]
    ) -> dict[str, ShareGroupDescription | BrokerResponseError]:
        """Per group its description or its error (``GroupIdNotFoundError``: no such share
        group)."""
        return self._loop.call(self._engine.describe_share_groups, list(group_ids))

    def list_share_group_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[TopicPartition, SharePartitionOffset | None]:
        """The group's start offset (and lag) per partition; None where it has none yet."""
        return self._loop.call(self._engine.list_share_group_offsets, group_id,
                               None if partitions is None else list(partitions))

    def alter_share_group_offsets(
        self, group_id: str, offsets: Mapping[tuple[str, int], int]
    ) -> dict[TopicPartition, BrokerResponseError | None]:
        """Set an empty share group's start offsets; per partition None or its error."""
        return self._loop.call(self._engine.alter_share_group_offsets, group_id, dict(offsets))

    def delete_share_group_offsets(
        self, group_id: str, topics: Iterable[str]
    ) -> tuple[BrokerResponseError | None, dict[str, BrokerResponseError | None]]:
        """Forget an empty share group's state of ``topics``: the request's error and per topic
        None or its error."""
        return self._loop.call(self._engine.delete_share_group_offsets, group_id, list(topics))

    def list_offsets(
        self, specs: Mapping[tuple[str, int], int], read_committed: bool = True
    ) -> dict[TopicPartition, tuple[int, int]]:
        """Per partition a timestamp in ms, -1 (latest) or -2 (earliest) -> (offset, timestamp)."""
        return self._loop.call(self._engine.list_offsets, dict(specs), read_committed)

    def list_transactions(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_ms: int | None = None,
    ) -> list[TransactionListing]:
        return self._loop.call(
            self._engine.list_transactions, list(states), list(producer_ids), duration_ms
        )

    def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> list[TransactionDescription]:
        return self._loop.call(self._engine.describe_transactions, list(transactional_ids))

    def abort_transaction(
        self, partition: tuple[str, int], producer_id: int, producer_epoch: int,
        coordinator_epoch: int,
    ) -> None:
        """Abort a hanging transaction on one partition (see ``AsyncAdmin.abort_transaction``)."""
        self._loop.call(self._engine.abort_transaction, tuple(partition), producer_id,
                        producer_epoch, coordinator_epoch)

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        self._loop.call(self._engine.create_acls, list(bindings))

    def describe_acls(self, match: AclBindingFilter | None = None) -> list[AclBinding]:
        return self._loop.call(self._engine.describe_acls, match)

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        return self._loop.call(self._engine.delete_acls, list(filters))

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, dict[str, int]]:
        return self._loop.call(self._engine.describe_user_scram_credentials,
                               None if users is None else list(users))

    def alter_user_scram_credentials(
        self,
        upserts: Iterable[tuple[str, str, str, int]] = (),
        deletions: Iterable[tuple[str, str]] = (),
    ) -> None:
        """``upserts``: (user, mechanism, password, iterations); ``deletions``: (user,
        mechanism). The password is salted and hashed before it leaves this process."""
        self._loop.call(self._engine.alter_user_scram_credentials, list(upserts), list(deletions))

    def end_transaction(
        self, handle: TransactionHandle, commit: bool, timeout: float | None = None
    ) -> None:
        """Commit (or abort) a transaction handed over by ``Producer.transaction_handle()``."""
        self._loop.call(self._engine.end_transaction, handle, commit, timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.stop()
