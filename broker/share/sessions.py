"""Share sessions (Kafka's ShareSessionCache): the partitions a member fetches, and the epoch
that orders its requests.

Rules (KIP-932):
- Epoch 0 opens a session (replacing the member's previous one; acknowledgements are not allowed
  in that request). The session then expects epoch 1, 2, ... (after INT32_MAX, 1 again).
- Epoch -1 closes it (after the request's acknowledgements): the member's acquired records on its
  partitions are released.
- Any other epoch must be the one expected: INVALID_SHARE_SESSION_EPOCH, or
  SHARE_SESSION_NOT_FOUND when the member has no session.
- A ShareFetch adds its partitions to the session and removes the forgotten ones; the fetch
  covers every partition of the session.
- The cache holds at most ``max_sessions`` sessions (``group.share.max.share.sessions``): a new one
  beyond it is SHARE_SESSION_LIMIT_REACHED.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from collections.abc import Callable

INT32_MAX = (1 << 31) - 1
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
SessionKey = tuple[str, str]  # (group id, member id)
SharePartitionKey = tuple[uuid.UUID, int]  # (topic id, partition)


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1  # the next expected
    partitions: dict[SharePartitionKey, None] = field(default_factory=dict)  # ordered set


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[SessionKey, ShareSession] = {}

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def check(self, group_id: str, member_id: str, epoch: int) -> ShareSession | None:
        """The session a request at ``epoch`` continues (None for epoch 0, which opens one:
        ``open``); raises KafkaError for an unknown session or a wrong epoch."""
        if epoch == INITIAL_EPOCH:
            return None
        session = self.sessions.get((group_id, member_id))
        if session is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                             f"Share session for member {member_id} not found.")
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                             f"Share session epoch {epoch} is not the expected {session.epoch}.")
        return session

    def open(self, group_id: str, member_id: str) -> tuple[ShareSession, ShareSession | None]:
        """A new session for the member, and the one it replaces (whose records the caller
        releases)."""
        key = (group_id, member_id)
        old = self.sessions.pop(key, None)
        if len(self.sessions) >= self.max_sessions:
            if old is not None:
                self.sessions[key] = old
            raise KafkaError(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                             "The share session cache is full.")
        session = self.sessions[key] = ShareSession(group_id, member_id)
        return session, old

    def advance(self, session: ShareSession) -> None:
        session.epoch = next_epoch(session.epoch)

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)

    def of_group(self, group_id: str) -> list[ShareSession]:
        return [s for (g, _), s in self.sessions.items() if g == group_id]


class ConnectionSessions:
    """The share sessions one connection opened; called when it closes. Sessions since
    replaced or closed are pruned as new ones come, so a connection holds no more entries than
    the cache holds sessions opened on it (and at most ``MAX_PER_CONNECTION`` stale ones)."""

    MAX_PER_CONNECTION = 64

    def __init__(self, cache: ShareSessionCache,
                 closed: Callable[[ShareSession], None]) -> None:
        self._cache = cache
        self._closed = closed  # what the service does with a session its connection closed
        self._opened: dict[tuple[str, str], ShareSession] = {}

    def add(self, session: ShareSession) -> None:
        self._opened[(session.group_id, session.member_id)] = session
        if len(self._opened) > self.MAX_PER_CONNECTION:
            self._opened = {k: s for k, s in self._opened.items() if self._cache.get(*k) is s}

    def __call__(self) -> None:
        for session in self._opened.values():
            self._closed(session)
