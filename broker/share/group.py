"""Share groups' membership (Kafka's ShareGroup in the group coordinator): pure, time passed in.

Rules (KIP-932, as Kafka 4.4's GroupMetadataManager runs them for share groups):
- A member joins with member epoch 0 and its subscribed topics (the client makes up its member
  id; an empty one gets a new id). Every change of membership, subscriptions or the partitions
  of the subscribed topics bumps the group epoch and recomputes the target assignment with the
  ``simple`` assignor; the assignment epoch is then the group epoch.
- Share groups have no revocation: a member moves to the assignment epoch at its next heartbeat
  and gets its new assignment then (it is sent whenever the member's epoch moves).
- A heartbeat with an epoch other than the member's is FENCED_MEMBER_EPOCH; with an unknown
  member (epoch > 0), UNKNOWN_MEMBER_ID. Epoch -1 leaves.
- A member that sends no heartbeat for ``session_timeout_ms`` is removed (``expire``).
- The simple assignor: partitions of the subscribed topics are spread over the members
  subscribed to them; with more members than partitions, partitions are shared (member i takes
  partition i mod n), so every member has something to fetch.
- Group states (Kafka's strings): Empty (no member), Stable.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from broker.group.offsets import valid_group_id
from protocol.errors import ErrorCode, KafkaError

ASSIGNOR = "simple"
# (topic name) -> (topic id, partition count), or None for a topic that does not exist.
TopicLookup = Callable[[str], "tuple[uuid.UUID, int] | None"]
Assignment = dict[uuid.UUID, list[int]]


@dataclass
class ShareMember:
    member_id: str
    epoch: int
    subscribed: list[str]
    client_id: str
    client_host: str
    rack_id: str | None
    deadline_ms: int
    assignment: Assignment = field(default_factory=dict)


# A new group's epoch and assignment epoch, as Kafka 4.4's ModernGroup starts them: the first
# member's join (a subscription change) moves the group to epoch 2.
NEW_GROUP_EPOCH = 1


@dataclass
class ShareGroup:
    group_id: str
    epoch: int = NEW_GROUP_EPOCH
    assignment_epoch: int = NEW_GROUP_EPOCH
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    topology: tuple = ()  # the subscribed topics' (name, id, partitions) the target was built on

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


@dataclass
class HeartbeatResult:
    member_id: str
    member_epoch: int
    assignment: Assignment | None  # None: unchanged since the last answer


def simple_assign(members: Iterable[ShareMember], lookup: TopicLookup) -> dict[str, Assignment]:
    """The target assignment of ``members`` (sorted by id for a stable answer)."""
    ordered = sorted(members, key=lambda m: m.member_id)
    out: dict[str, Assignment] = {m.member_id: {} for m in ordered}
    topics = sorted({t for m in ordered for t in m.subscribed})
    for name in topics:
        found = lookup(name)
        if found is None:
            continue
        topic_id, count = found
        subscribers = [m.member_id for m in ordered if name in m.subscribed]
        n = len(subscribers)
        if n == 0 or count == 0:
            continue
        if n <= count:
            for p in range(count):
                out[subscribers[p % n]].setdefault(topic_id, []).append(p)
        else:
            for i, member_id in enumerate(subscribers):
                out[member_id].setdefault(topic_id, []).append(i % count)
    return out


class ShareGroups:
    def __init__(self, *, session_timeout_ms: int, heartbeat_interval_ms: int,
                 max_size: int, lookup: TopicLookup,
                 timing: Callable[[str], tuple[int, int]] | None = None) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self._lookup = lookup
        # group id -> (session timeout, heartbeat interval): the group's share.session.timeout.ms
        # and share.heartbeat.interval.ms (group configs), else the broker's
        self._timing = timing
        self.groups: dict[str, ShareGroup] = {}

    def timing(self, group_id: str) -> tuple[int, int]:
        if self._timing is None:
            return self.session_timeout_ms, self.heartbeat_interval_ms
        return self._timing(group_id)

    def get(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    def ensure(self, group_id: str) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
        return group

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: list[str] | None, client_id: str, client_host: str,
                  now_ms: int) -> HeartbeatResult:
        """One ShareGroupHeartbeat; raises KafkaError with Kafka's code on a refusal."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if not valid_group_id(group_id):
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "GroupId is longer than 32767 bytes.")
        if member_epoch == 0 and not subscribed:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "SubscribedTopicNames must be set in first request.")
        if member_epoch < -1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"MemberEpoch is {member_epoch}.")
        if member_epoch != 0 and not member_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        group = self.groups.get(group_id)
        if member_epoch == -1:
            if group is not None and member_id in group.members:
                self._remove(group, member_id)
            return HeartbeatResult(member_id, -1, None)
        group = self.ensure(group_id)
        member = group.members.get(member_id) if member_id else None
        changed = False
        if member_epoch == 0:
            if member is None:
                if len(group.members) >= self.max_size:
                    raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                     f"The share group has reached its maximum capacity of "
                                     f"{self.max_size} members.")
                member = ShareMember(member_id or str(uuid.uuid4()), 0, [], client_id,
                                     client_host, rack_id, 0)
                group.members[member.member_id] = member
                changed = True
            else:
                member.epoch = 0  # a rejoin: the assignment is sent again
        else:
            if member is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group_id}.")
            if member_epoch != member.epoch:
                raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                                 f"The share group member has a smaller or larger member epoch"
                                 f" ({member_epoch}) than the one known by the group"
                                 f" coordinator ({member.epoch}).")
        member.deadline_ms = now_ms + self.timing(group_id)[0]
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed is not None and sorted(subscribed) != sorted(member.subscribed):
            member.subscribed = sorted(set(subscribed))
            changed = True
        self._refresh(group, changed)
        answer = None
        if member.epoch != group.assignment_epoch:
            member.epoch = group.assignment_epoch
            member.assignment = group.target.get(member.member_id, {})
            answer = member.assignment
        elif member_epoch == 0:
            answer = member.assignment
        return HeartbeatResult(member.member_id, member.epoch, answer)

    def _topology(self, group: ShareGroup) -> tuple:
        names = sorted({t for m in group.members.values() for t in m.subscribed})
        return tuple((n, self._lookup(n)) for n in names)

    def _refresh(self, group: ShareGroup, changed: bool) -> None:
        topology = self._topology(group)
        if changed or topology != group.topology:
            group.epoch += 1
            group.topology = topology
            group.target = simple_assign(group.members.values(), self._lookup)
            group.assignment_epoch = group.epoch

    def _remove(self, group: ShareGroup, member_id: str) -> None:
        del group.members[member_id]
        self._refresh(group, True)

    def next_deadline(self) -> int | None:
        """The earliest member session deadline (None: no members)."""
        return min((m.deadline_ms for g in self.groups.values() for m in g.members.values()),
                   default=None)

    def expire(self, now_ms: int) -> list[tuple[str, str]]:
        """Remove the members whose session timed out; their ``(group_id, member_id)``."""
        gone = []
        for group in self.groups.values():
            for member in list(group.members.values()):
                if member.deadline_ms <= now_ms:
                    self._remove(group, member.member_id)
                    gone.append((group.group_id, member.member_id))
        return gone

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def delete(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        del self.groups[group_id]
        return ErrorCode.NONE
