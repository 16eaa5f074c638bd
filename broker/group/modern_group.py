"""What the coordinators of the member-epoch protocols (the consumer protocol's,
``consumer_group.py``, and the Streams protocol's, ``streams_group.py``) do alike with their
groups: keep them by id, note which changed for the shell to write (``take_changes``), delete an
empty one, forget empty ones that hold no offsets. Pure: no I/O, no clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from protocol.errors import ErrorCode


class ModernGroup(Protocol):
    group_id: str
    members: dict[str, Any]


G = TypeVar("G", bound=ModernGroup)


class ModernGroupCoordinator(Generic[G]):
    """The groups of one member-epoch protocol, and what changed in them."""

    def __init__(self) -> None:
        self.groups: dict[str, G] = {}
        # Groups whose records must be written (take_changes), in order; a deleted group maps
        # to True (its tombstones).
        self._to_store: dict[str, bool] = {}

    def _has_changes(self, group: G) -> bool:
        """Records to write for ``group`` (its dirty flags): each protocol's own."""
        raise NotImplementedError

    def _store(self, group: G) -> None:
        if self._has_changes(group):
            self._to_store.setdefault(group.group_id, False)

    def take_changes(self) -> list[tuple[str, G | None]]:
        """``(group_id, group)`` of every group with changes to write since the last call
        (None: the group was deleted); the caller writes their records, which clears the
        groups' dirty flags."""
        out = [(group_id, None if deleted else self.groups.get(group_id))
               for group_id, deleted in self._to_store.items()]
        self._to_store = {}
        return out

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        del self.groups[group_id]
        self._to_store[group_id] = True
        return ErrorCode.NONE

    def remove_empty_groups(self, keep: Callable[[str], bool]) -> None:
        """Forget Empty groups for which ``keep(group_id)`` (offsets left) is False."""
        for group_id, group in list(self.groups.items()):
            if not group.members and not keep(group_id):
                self.delete_group(group_id)
