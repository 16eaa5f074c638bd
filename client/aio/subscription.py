"""What the consumer consumes: the assigned partitions with their positions, the subscription
and its rebalance listeners (aiokafka's SubscriptionState). No I/O.

Every assigned partition has a *position* (the next offset ``poll`` returns) and a *fetch offset*
(the next offset to ask the broker for; ahead of the position by what is buffered). ``seek``
bumps the partition's epoch, which voids a fetch in flight or data queued for it. ``lock`` guards
the positions and the fetcher's queue: the blocking ``Consumer`` takes records from its own
thread (``AsyncConsumer.take_ready``); the loop thread holds it only for short bookkeeping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from client.errors import IllegalStateError
from client.structs import TopicPartition

EARLIEST = -2
LATEST = -1

RebalanceListener = Callable[[list[TopicPartition]], Any]


class PartitionState:
    __slots__ = (
        "tp",
        "position",
        "fetch_offset",
        "epoch",
        "paused",
        "buffered_bytes",
        "fetching",
        "high_watermark",
        "last_stable_offset",
        "reset_to",
    )

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.position: int | None = None
        self.fetch_offset = -1
        self.epoch = 0
        self.paused = False
        self.buffered_bytes = 0  # fetched and not yet returned by poll (size on the wire)
        self.fetching = False
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.reset_to: int | None = None  # EARLIEST / LATEST: seek_to_* waiting for ListOffsets

    def seek(self, offset: int) -> None:
        self.position = offset
        self.fetch_offset = offset
        self.epoch += 1
        self.buffered_bytes = 0


class SubscriptionState:
    def __init__(self) -> None:
        self.assignment: dict[TopicPartition, PartitionState] = {}
        self.topics: list[str] | None = None  # subscribe(); None: manual assignment or nothing
        self.on_assign: RebalanceListener | None = None
        self.on_revoke: RebalanceListener | None = None
        # reset=none: partitions fetched out of range -> their fetch offset
        self.out_of_range: dict[TopicPartition, int] = {}
        self.lock = threading.Lock()

    @property
    def subscribed(self) -> bool:
        return self.topics is not None

    def check_assign(self) -> None:
        if self.topics is not None:
            raise IllegalStateError(
                "Subscription to topics and manual assignment are mutually exclusive"
            )

    def subscribe(self, topics: Sequence[str], on_assign: RebalanceListener | None,
                  on_revoke: RebalanceListener | None) -> None:
        if self.assignment and self.topics is None:
            raise IllegalStateError(
                "Subscription to topics and manual assignment are mutually exclusive"
            )
        self.topics = sorted(set(topics))
        self.on_assign, self.on_revoke = on_assign, on_revoke

    def set_assignment(self, partitions: Sequence[TopicPartition]) -> None:
        """Assign exactly ``partitions`` (lock held): kept ones keep their state, dropped ones
        have their epoch bumped (a fetch in flight for them is void)."""
        old = self.assignment
        self.assignment = {tp: old.get(tp) or PartitionState(tp) for tp in partitions}
        for tp, state in old.items():
            if tp not in self.assignment:
                state.epoch += 1
                self.out_of_range.pop(tp, None)

    def is_current(self, state: PartitionState, epoch: int) -> bool:
        """Whether data fetched for ``state`` at ``epoch`` may still be returned."""
        return self.assignment.get(state.tp) is state and state.epoch == epoch

    def state(self, tp: tuple[str, int]) -> PartitionState:
        state = self.assignment.get(tp)  # type: ignore[call-overload]
        if state is None:
            raise IllegalStateError(f"No current assignment for partition {tp[0]}-{tp[1]}")
        return state

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self.assignment.items() if s.paused}

    def seek(self, tp: tuple[str, int], offset: int) -> PartitionState:
        """Lock held."""
        state = self.state(tp)
        state.seek(offset)
        state.reset_to = None
        self.out_of_range.pop(state.tp, None)
        return state

    def seek_to(self, partitions: Iterable[tuple[str, int]] | None, where: int) -> list:
        """Lock held: the partitions' positions wait for ListOffsets at EARLIEST / LATEST."""
        targets = list(self.assignment) if partitions is None else list(partitions)
        states = []
        for tp in targets:
            state = self.state(tp)
            state.seek(0)
            state.position = None
            state.reset_to = where
            self.out_of_range.pop(state.tp, None)
            states.append(state)
        return states

    def positions(self) -> dict[TopicPartition, int]:
        return {tp: s.position for tp, s in self.assignment.items() if s.position is not None}
