"""The blocking consumer: ``AsyncConsumer`` on a trio loop in a background thread.

    from client import Consumer

    with Consumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "g"}) as consumer:
        consumer.subscribe(["events"], on_assign=print)
        while True:
            for record in consumer.poll(1.0):
                print(record.offset, record.value)

``isolation.level`` is read_committed by default: records of open or aborted transactions are
never returned. Rebalance callbacks run inside ``poll`` in the calling thread, so they may call
``commit`` and the other methods. ``poll`` takes records already fetched without leaving the
calling thread (they are decoded there); anything else runs on the client's loop. Methods may be
called from several threads, though a consumer is normally polled by one thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from client._loop import LoopThread
from client.aio.consumer import AsyncConsumer, RebalanceCallback
from client.clock import monotonic_s
from client.structs import ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, TopicPartition


class Consumer:
    """A Kafka consumer with blocking methods (see the module docstring)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._engine = AsyncConsumer(config)
        self.config = self._engine.config
        self._loop = LoopThread(self._engine, "minibroker-consumer")
        self._loop.start()
        self._on_assign: Callable[[list[TopicPartition]], Any] | None = None
        self._on_revoke: Callable[[list[TopicPartition]], Any] | None = None
        self._closed = False

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- assignment ------------------------------------------------------------------------------

    def subscribe(
        self,
        topics: Sequence[str] | str,
        on_assign: Callable[[list[TopicPartition]], Any] | None = None,
        on_revoke: Callable[[list[TopicPartition]], Any] | None = None,
    ) -> None:
        """Join ``group.id`` for ``topics``; callbacks run in the thread that calls ``poll``."""
        self._on_assign, self._on_revoke = on_assign, on_revoke
        # The engine only needs to know that callbacks exist; they run here, not on the loop.
        marker = _marker if on_assign else None, _marker if on_revoke else None
        self._loop.call_sync(self._engine.subscribe, topics, *marker)

    def unsubscribe(self) -> None:
        self._loop.call_sync(self._engine.unsubscribe)

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._loop.call_sync(self._engine.assign, list(partitions))

    def assignment(self) -> set[TopicPartition]:
        return self._loop.call_sync(self._engine.assignment)

    def subscription(self) -> set[str]:
        return self._loop.call_sync(self._engine.subscription)

    # -- polling ---------------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Up to ``max.poll.records`` records, waiting up to ``timeout`` seconds for some."""
        # Fast path: records already fetched are taken (and decoded) in this thread, without a
        # round trip through the client's loop.
        records = self._engine.take_ready(max_records)
        if records:
            return records
        clock = self._engine.clock
        deadline = monotonic_s(clock) + timeout
        while True:
            remaining = max(deadline - monotonic_s(clock), 0.0)
            step = self._loop.call(self._engine.poll_step, remaining, max_records)
            if isinstance(step, RebalanceCallback):
                listener = self._on_assign if step.kind == "assigned" else self._on_revoke
                if listener is not None:
                    listener(step.partitions)
                continue
            return step

    def wakeup(self) -> None:
        self._loop.call_sync(self._engine.wakeup)

    # -- positions and offsets -------------------------------------------------------------------

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        self._loop.call_sync(self._engine.seek, partition, offset)

    def seek_to_beginning(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        self._loop.call_sync(
            self._engine.seek_to_beginning, None if partitions is None else list(partitions)
        )

    def seek_to_end(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        self._loop.call_sync(
            self._engine.seek_to_end, None if partitions is None else list(partitions)
        )

    def position(self, partition: tuple[str, int]) -> int:
        return self._loop.call(self._engine.position, partition)

    def committed(
        self, partitions: Iterable[tuple[str, int]], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self._loop.call(self._engine.committed, list(partitions), timeout=timeout)

    def commit(
        self,
        offsets: Mapping[Any, int | OffsetAndMetadata] | None = None,
        asynchronous: bool = False,
        callback: Callable[[BaseException | None, Any], Any] | None = None,
    ) -> None:
        """Commit ``offsets`` (default: current positions); with ``asynchronous`` do not wait
        (``callback(error, offsets)`` then runs on the client's thread)."""
        if asynchronous:
            self._loop.call_sync(self._engine.commit_async, offsets, callback)
        else:
            self._loop.call(self._engine.commit, offsets)

    def beginning_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        return self._loop.call(self._engine.beginning_offsets, list(partitions))

    def end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        return self._loop.call(self._engine.end_offsets, list(partitions))

    def offsets_for_times(
        self, timestamps: Mapping[tuple[str, int], int]
    ) -> dict[TopicPartition, int | None]:
        """The earliest offset at or after each partition's time (ms); None where there is none."""
        return self._loop.call(self._engine.offsets_for_times, dict(timestamps))

    def partitions_for(self, topic: str) -> list[TopicPartition]:
        return self._loop.call(self._engine.partitions_for, topic)

    def pause(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._loop.call_sync(self._engine.pause, list(partitions))

    def resume(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._loop.call_sync(self._engine.resume, list(partitions))

    def paused(self) -> set[TopicPartition]:
        return self._loop.call_sync(self._engine.paused)

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._loop.call_sync(self._engine.group_metadata)

    def close(self) -> None:
        """Commit positions (with auto-commit), leave the group, stop the client thread."""
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.call(self._engine.close)
        finally:
            self._loop.stop()


def _marker(partitions: list[TopicPartition]) -> None:
    """Stands for a listener that the facade runs itself (never called)."""
