"""What a request handler may touch: the services the composition root built, and nothing else.

``Broker`` holds them (built only by ``broker/app.py``); it has no logic of its own beyond the
auto-creation rule of Metadata. The services never see it: they get their collaborators from the
root as constructor arguments.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from broker.clock import Clock
from broker.config import BrokerConfig
from broker.config.client_metrics_configs import ClientMetricsConfigStore
from broker.config.group_configs import GroupConfigStore
from broker.group.service import GroupService
from broker.group.streams_service import StreamsGroupService
from broker.log.manager import LogManager
from broker.log.partition import Partition
from broker.log.topics import INTERNAL_TOPICS
from broker.security.service import Security
from broker.share.service import ShareService
from broker.storage import DataArrived, FlushScheduler, Storage
from broker.storage.cleaner_service import LogCleaner
from broker.storage.ordered_appends import OrderedAppends
from broker.telemetry.export import TelemetryExport
from broker.telemetry.manager import TelemetryManager
from broker.txn.manager import TransactionManager
from broker.txn.producer_ids import ProducerIdManager
from broker.wiring import CrossService
from protocol.errors import ErrorCode, KafkaError
from protocol.text import clip

log = logging.getLogger("minibroker")


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        cluster_id: str,
        storage: Storage,
        producer_ids: ProducerIdManager,
        groups: GroupService,
        transactions: TransactionManager,
        cross: CrossService,
        security: Security,
        cleaner: LogCleaner | None = None,
        share: ShareService | None = None,
        group_configs: GroupConfigStore | None = None,
        streams: StreamsGroupService | None = None,
        client_metrics: ClientMetricsConfigStore | None = None,
        telemetry: TelemetryManager | None = None,
        appends: OrderedAppends | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.cluster_id = cluster_id
        self.storage = storage
        self.producer_ids = producer_ids
        self.groups = groups
        self.transactions = transactions
        self.cross = cross  # the steps that join the group and transaction services
        self.cleaner = cleaner  # log compaction; its task runs in server.serve
        self.security = security  # SASL, SCRAM credentials, ACLs and the authorizer
        self.share = share  # share groups (KIP-932): broker/share/service.py
        # GROUP config resources (kafka-configs --entity-type groups): the share service's store
        self.group_configs = (group_configs if group_configs is not None
                              else share.configs if share is not None
                              else GroupConfigStore(config))
        self.streams = streams  # streams groups (KIP-1071): broker/group/streams_service.py
        # Client telemetry (KIP-714): the CLIENT_METRICS subscriptions (durable) and the manager
        # that hands them to clients and keeps their pushed metrics for /metrics.
        self.client_metrics = (client_metrics if client_metrics is not None
                               else ClientMetricsConfigStore(config.data_dir))
        self.telemetry = (telemetry if telemetry is not None
                          else build_telemetry(config, self.client_metrics))
        # Produce appends whose records are checked in a worker thread, in arrival order per
        # partition; its task runs in server.serve.
        self.appends = appends if appends is not None else OrderedAppends()
        # ``partition(topic, index)``: the log manager's lookup itself (no frame of ours in
        # between; Produce and AddPartitionsToTxn call it per partition). Raises KafkaError
        # UNKNOWN_TOPIC_OR_PARTITION.
        self.partition: Callable[[str, int], Partition] = storage.logs.partition
        # Topics Metadata is auto-creating (their files built in a worker thread): name -> the
        # creation the other requests for that name wait for (``auto_create_topic``).
        self._auto_creating: dict[str, _AutoCreation] = {}

    @property
    def logs(self) -> LogManager:
        return self.storage.logs

    @property
    def flusher(self) -> FlushScheduler:
        return self.storage.flusher

    @property
    def data_arrived(self) -> DataArrived:
        return self.storage.data_arrived


    def ensure_topic(self, topic: str, allow_create: bool) -> int:
        """Partition count of ``topic``, creating it when allowed (Metadata auto-creation), here
        and now (``auto_create_topic`` builds it off the event loop)."""
        count = self.logs.partition_count(topic)
        if count is not None:
            return count
        if not self.may_auto_create(topic, allow_create):
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, clip(topic))
        self.logs.create_topic(topic, self.config.num_partitions, None, self.clock.now_ms())
        log.info("auto-created topic %s with %d partitions", topic, self.config.num_partitions)
        return self.config.num_partitions

    def may_auto_create(self, topic: str, allow_create: bool) -> bool:
        """The auto-creation rule: asked for, enabled, not an internal topic."""
        return allow_create and self.config.auto_create_topics and topic not in INTERNAL_TOPICS

    async def auto_create_topic(self, topic: str) -> int:
        """Partition count of ``topic``, auto-creating it (the caller checked
        ``may_auto_create`` and the ACLs) with ``num.partitions`` partitions whose files are
        built in a worker thread, as CreateTopics does (``LogManager.prepare_topic``): hundreds
        of directories and fsyncs must not stop the event loop. Concurrent callers for the same
        name share one build and its outcome. Raises what ``prepare_topic``/``finish_topic``
        raise (TOPIC_ALREADY_EXISTS while a CreateTopics of that name builds it)."""
        count = self.logs.partition_count(topic)
        if count is not None:
            return count
        creation = self._auto_creating.get(topic)
        if creation is not None:
            await creation.done.wait()
            if creation.error is not None:
                raise creation.error
            return self.ensure_topic(topic, False)
        pending = self.logs.prepare_topic(topic, self.config.num_partitions, None,
                                          self.clock.now_ms())
        creation = self._auto_creating[topic] = _AutoCreation()
        try:
            # Not cancellable: a shutdown or a closed connection waits for the files, and the
            # build is committed (or removed) whatever happens to this caller.
            await trio.to_thread.run_sync(pending.build)
        finally:
            try:
                self.logs.finish_topic(pending)
            except KafkaError as exc:
                creation.error = exc
            del self._auto_creating[topic]
            creation.done.set()
        if creation.error is not None:
            raise creation.error
        log.info("auto-created topic %s with %d partitions", topic, pending.num_partitions)
        return pending.num_partitions

    def close(self) -> None:
        self.storage.close()


class _AutoCreation:
    """One auto-creation under way: set ``done`` when committed (``error`` None) or not."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: KafkaError | None = None


def build_telemetry(config: BrokerConfig, subscriptions: ClientMetricsConfigStore
                    ) -> TelemetryManager:
    """The telemetry manager, told of every subscription change."""
    manager = TelemetryManager(lambda: subscriptions.subscriptions,
                               TelemetryExport(config.telemetry_export_max_series),
                               config.telemetry_max_bytes)
    subscriptions.listeners.append(manager.subscriptions_changed)
    return manager
