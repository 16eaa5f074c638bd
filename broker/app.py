"""The composition root: builds and wires the broker, and starts it (``serve``).

One of each: config (given), clock (``WallClock`` unless a test passes another), log manager,
group-commit flusher, producer-id allocator, group service, transaction service, handler table.
Every service gets its collaborators here as constructor arguments; the steps that join the group
and transaction services are ``broker/wiring.py``'s, passed in as callbacks. Order matters at start:
the group service replays ``__consumer_offsets`` before the transaction service recovers, so the
markers recovery writes reach the replayed offsets.

``crash_hook`` exists for tests only (``tests/crash_broker.py``): called at the crash points of
EndTxn (``broker.txn.manager.CRASH_POINTS``) and of a log cleaning
(``broker.log.cleaner.CRASH_POINTS``). The ``minibroker`` command never passes one.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import trio

from broker import handlers
from broker.clock import Clock, WallClock
from broker.config import BrokerConfig
from broker.config.client_metrics_configs import ClientMetricsConfigStore
from broker.config.group_configs import GroupConfigStore
from broker.group.service import GroupService
from broker.group.streams_records import StreamsGroupReplay
from broker.group.streams_service import StreamsGroupService
from broker.handlers.context import Broker, build_telemetry
from broker.log.manager import LogManager
from broker.metrics import Metrics
from broker.network import memory, server
from broker.network.dispatcher import Dispatcher, HandlerTable, handler_table
from broker.security.service import Security
from broker.share.service import ShareService
from broker.storage import DataArrived, FlushScheduler, Storage, load_cluster_id, lock_data_dir
from broker.storage.cleaner_service import LogCleaner
from broker.storage.ordered_appends import OrderedAppends
from broker.storage.store import file_system_sync
from broker.txn.manager import CrashHook, TransactionManager
from broker.txn.markers import MarkerWriter
from broker.txn.producer_ids import ProducerIdManager
from broker.wiring import CrossService


def build_handler_table() -> HandlerTable:
    """Every request handler, registered explicitly."""
    return handler_table(*handlers.MODULES)


def build_broker(
    config: BrokerConfig,
    *,
    clock: Clock | None = None,
    crash_hook: CrashHook | None = None,
    metrics: Metrics | None = None,
) -> Broker:
    """Open the data directory, recover, and return the broker ready to serve."""
    clock = clock or WallClock()
    data_dir = Path(config.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    # Before anything is read or written: a second broker on this dir stops here
    # (DataDirLocked); the lock is held until storage.close().
    lock = lock_data_dir(data_dir)
    cluster_id = load_cluster_id(data_dir)
    logs = LogManager(data_dir, config.log, clock.now_ms(), max_partitions=config.max_partitions,
                      sync_policy=file_system_sync)
    data_arrived = DataArrived()
    flusher = FlushScheduler(data_arrived, on_round=metrics.fsync if metrics else None)
    storage = Storage(logs, flusher, data_arrived,
                      durable=config.log.flush == "always", lock=lock)
    producer_ids = ProducerIdManager(data_dir / "producer_ids")

    cross = CrossService()
    transactions = TransactionManager(
        config, storage, producer_ids.next_id, clock,
        MarkerWriter(storage, on_durable=cross.markers_durable), crash_hook,
    )
    # Replays __consumer_offsets. Housekeeping: groups.tick(now).
    # GROUP config resources (kafka-configs --entity-type groups), durable in the data dir.
    group_configs = GroupConfigStore(config)
    # The Streams groups' records are read in the same pass (built into groups further down).
    streams_replay = StreamsGroupReplay()
    groups = GroupService(config, storage, clock, verify_txn_produce=cross.verify_txn_produce,
                          group_timing=lambda g: (
                              group_configs.int_value(g, "consumer.session.timeout.ms"),
                              group_configs.int_value(g, "consumer.heartbeat.interval.ms")),
                          record_replays=[streams_replay])
    cross.attach(groups, transactions)
    # Replays __transaction_state, aborts the ongoing transactions when unsynced writes may have
    # been lost (an unclean shutdown and a machine restart), completes prepared ones, and then
    # (same condition) aborts the transactions partitions have open that it does not run there
    # (after the groups, which then see the markers it writes).
    transactions.recover(clock.now_ms(), unclean=logs.unsynced_writes_lost)
    storage.settle()
    # Recovery is complete and durable (the scans synced what they rewrote, the settle what the
    # transactions' recovery wrote): from here on a crash is a process crash on this boot. Its
    # outcome becomes the partitions' recovery points once the broker serves (``serve``).
    logs.record_boot()
    # Log compaction in the background (network/server.py runs it); none with log.cleaner.enable=false.
    cleaner = (
        LogCleaner(
            logs.all_partitions,
            clock.now_ms,
            threads=config.log_cleaner_threads,
            backoff_ms=config.log_cleaner_backoff_ms,
            dedupe_buffer_size=config.log_cleaner_dedupe_buffer_size,
            io_max_bytes_per_second=config.log_cleaner_io_max_bytes_per_second,
            crash_hook=crash_hook,
        )
        if config.log_cleaner_enable
        else None
    )
    security = Security(config.security, data_dir)
    # Share groups: replays __share_group_state. Housekeeping: share.tick(now).
    share = ShareService(config, storage, clock, group_configs)
    # Streams groups (KIP-1071): built from their records the group service's replay collected;
    # their offsets are the group service's, which asks them to validate commits.
    # Housekeeping: streams.tick(now).
    streams = StreamsGroupService(config, storage, clock, groups, streams_replay, group_configs)
    groups.epoch_groups.append(streams)
    # Client telemetry (KIP-714): CLIENT_METRICS subscriptions, durable in the data dir; the
    # manager re-evaluates its clients when one changes and keeps their pushes for /metrics.
    client_metrics = ClientMetricsConfigStore(data_dir)
    telemetry = build_telemetry(config, client_metrics)
    # Produce appends whose compressed records inflate beyond what the event loop may take:
    # checked in worker threads, appended in arrival order per partition.
    appends = OrderedAppends()
    return Broker(config, clock, cluster_id, storage, producer_ids, groups, transactions, cross,
                  security, cleaner, share, group_configs, streams, client_metrics, telemetry,
                  appends)


def build_metrics(config: BrokerConfig) -> Metrics | None:
    """The metrics collaborator, only when they are served (``metrics.port``): without it the
    dispatcher, server and flusher count nothing."""
    return Metrics() if config.metrics_port is not None else None


def build_dispatcher(broker: Broker, metrics: Metrics | None = None) -> Dispatcher:
    return Dispatcher(build_handler_table(), broker, metrics)


async def serve(
    config: BrokerConfig,
    *,
    crash_hook: CrashHook | None = None,
    on_listening: Callable[[Broker, int], None] | None = None,
    settle_collector: bool = False,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Build the broker (recovery included), serve it until cancelled, then close it (flush,
    snapshots, clean marker). ``task_status.started(port)`` and ``on_listening(broker, port)``
    once the listeners are bound. ``settle_collector``: the long-lived process's garbage
    collector settings (``memory.settle_garbage_collector``), not for brokers inside tests."""
    metrics = build_metrics(config)
    broker = build_broker(config, crash_hook=crash_hook, metrics=metrics)
    try:
        if settle_collector:
            memory.settle_garbage_collector()
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(
                server.serve, config, broker=broker, dispatcher=build_dispatcher(broker, metrics),
                metrics=metrics))
            if on_listening is not None:
                on_listening(broker, port)
            task_status.started(port)
            # The recovery's outcome as recovery points, so that the next unclean start scans
            # only what changed since: the points file written by a worker thread, put in place
            # here (a SIGTERM meanwhile waits for the write; a crash before the rename leaves
            # the old file, still true).
            points = broker.storage.prepare_recovery_points()
            if points is not None:
                await trio.to_thread.run_sync(points.write)
                points.commit()
    finally:
        broker.close()
