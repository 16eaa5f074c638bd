"""Partitions being made off the event loop: ``LogManager.prepare_topic`` /
``prepare_partitions`` reserve them, ``build`` makes them (in a worker thread when called through
``trio.to_thread``), then ``LogManager.finish_topic`` / ``finish_partitions`` commit them on the
event loop."""

from __future__ import annotations

from collections.abc import Callable

from broker.log.partition import Partition
from broker.log.topic_config import LogConfig

# The manager's ``_build_partitions``: (topic, indexes, config, now_ms, out) appends the
# partitions it made to ``out``; raises OSError.
BuildPartitions = Callable[[str, range, LogConfig, int, list[Partition]], None]


class PendingPartitions:
    """New partitions of a topic being made (``LogManager.prepare_partitions``)."""

    def __init__(self, build_partitions: BuildPartitions, topic: str, indexes: range, config: LogConfig,
                 now_ms: int) -> None:
        self._build_partitions = build_partitions
        self.topic = topic
        self.indexes = indexes
        self.config = config
        self.now_ms = now_ms
        self.parts: list[Partition] = []
        self.error: OSError | None = None

    def build(self) -> None:
        """Create and fsync the partitions' directories; an OSError is kept for the finishing
        step. Touches no state of the manager but reads ``on_roll``."""
        try:
            self._build_partitions(self.topic, self.indexes, self.config, self.now_ms,
                                   self.parts)
        except OSError as exc:
            self.error = exc


class PendingTopic(PendingPartitions):
    """A topic being created (``LogManager.prepare_topic``): its name is reserved, its
    partitions built as ``PendingPartitions``' are."""

    def __init__(self, build_partitions: BuildPartitions, name: str, num_partitions: int,
                 overrides: dict[str, str], config: LogConfig, now_ms: int) -> None:
        super().__init__(build_partitions, name, range(num_partitions), config, now_ms)
        self.name = name
        self.num_partitions = num_partitions
        self.overrides = overrides
