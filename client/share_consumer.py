"""The blocking share consumer: ``AsyncShareConsumer`` on a trio loop in a background thread.

    from client.share_consumer import AcknowledgeType, ShareConsumer

    with ShareConsumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "workers",
                        "share.acknowledgement.mode": "explicit"}) as consumer:
        consumer.subscribe(["jobs"])
        while True:
            for record in consumer.poll(1.0):
                ok = handle(record)
                consumer.acknowledge(record, AcknowledgeType.ACCEPT if ok
                                     else AcknowledgeType.RELEASE)
            consumer.commit_sync()

Share groups (KIP-932): the members of a group share its partitions' records; each record is
acknowledged (accept, release: delivered again, reject: never again). See
``client/aio/share_consumer.py`` for the modes and what each call sends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from client._loop import LoopThread
from client.aio.share_consumer import AcknowledgeType, AsyncShareConsumer
from client.structs import ConsumerRecord

__all__ = ["AcknowledgeType", "ShareConsumer"]


class ShareConsumer:
    def __init__(self, config: Mapping[str, Any]) -> None:
        self._engine = AsyncShareConsumer(config)
        self.config = self._engine.config
        self._loop = LoopThread(self._engine, "minibroker-share-consumer")
        self._loop.start()
        self._closed = False

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def subscribe(self, topics: Sequence[str] | str) -> None:
        self._loop.call_sync(self._engine.subscribe, topics)

    def assignment(self) -> set[tuple[str, int]]:
        return self._loop.call_sync(lambda: set(self._engine.assignment))

    def poll(self, timeout: float = 0.0) -> list[ConsumerRecord]:
        return self._loop.call(self._engine.poll, timeout)

    def acknowledge(self, record: ConsumerRecord,
                    type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        self._loop.call_sync(self._engine.acknowledge, record, type)

    def delivery_count(self, record: ConsumerRecord) -> int | None:
        return self._engine.delivery_counts.get((record.topic, record.partition, record.offset))

    def commit_sync(self) -> dict[tuple[str, int], Exception | None]:
        return self._loop.call(self._engine.commit_sync)

    def commit_async(self) -> None:
        """Send the acknowledgements without waiting for their outcome."""
        async def send() -> None:
            self._engine._nursery.start_soon(self._engine.commit_sync)
        self._loop.call(send)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.call(self._engine.close)
        finally:
            self._loop.stop()
