"""The group coordinator: classic consumer-group membership, generations and rebalances. Pure.

Rules / theory of operation (Kafka's ``GroupCoordinator.scala`` of the 2.x line, which the pinned
JoinGroup v2 / SyncGroup v0 / Heartbeat v0 / LeaveGroup v0 belong to; states in ``state.py``):

- Nothing here does I/O or reads a clock. Every entry point takes ``now_ms`` and first runs the
  group's due timers (expired sessions, the end of a rebalance), so time moves forward only through
  the arguments; ``tick(now_ms)`` runs every group's timers and ``next_deadline()`` says when the
  next one is due.
- Requests that must wait (JoinGroup until the rebalance completes, SyncGroup until the leader's
  assignment) get ``Waiting(waiter)``; their answers come later as *completions*
  ``(waiter, JoinResult | SyncResult)`` returned by whichever call (or tick) produced them. The
  trio shell owns the waiting; every waiter is answered eventually (the rebalance completes, the
  member is removed, or a newer request from the same member supersedes it).
- JoinGroup: a member with an empty member id gets ``"<client_id>-<uuid>"`` and is added in the same
  round (v2 predates MEMBER_ID_REQUIRED). The first member of a group leads; when the leader goes,
  the next member in join order leads. A join moves the group to PreparingRebalance, except a
  follower rejoining a Stable or CompletingRebalance group with unchanged metadata, which gets the
  current generation at once.
- A rebalance completes when every member has rejoined (or at the rebalance timeout, the largest
  rebalance_timeout_ms of the members, dropping those that did not rejoin). The first rebalance of
  an Empty group waits ``initial_rebalance_delay_ms`` instead, extended by the same delay while new
  members keep arriving (at most up to the rebalance timeout). Completion bumps the generation,
  picks the protocol every member supports that most members prefer, and answers every waiting
  JoinGroup; only the leader's answer lists the members with their metadata.
- SyncGroup in CompletingRebalance waits; the leader's SyncGroup stores the assignments (missing
  members get empty ones), moves the group to Stable and answers all waiting SyncGroups.
- Heartbeat: NONE when Stable; REBALANCE_IN_PROGRESS during a rebalance; UNKNOWN_MEMBER_ID for
  unknown members; ILLEGAL_GENERATION for a stale generation. Heartbeats, commits and syncs renew
  the member's session; a member waiting in JoinGroup or SyncGroup cannot expire (the rebalance
  timeout bounds the first, the leader's session the second).
- LeaveGroup and session expiry remove the member and start a rebalance (Stable,
  CompletingRebalance) or let a running one complete without it.
- Offsets (``offsets.py``) belong to the group too: OffsetCommit is checked here
  (``validate_offset_commit``); an Empty group without offsets is dropped (-> Dead) by
  ``remove_empty_groups``.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from broker.group.classic_model import NO_GENERATION as NO_GENERATION
from broker.group.classic_model import NO_MEMBER_ID as NO_MEMBER_ID
from broker.group.classic_model import Completion as Completion
from broker.group.classic_model import Group as Group
from broker.group.classic_model import GroupConfig as GroupConfig
from broker.group.classic_model import GroupSummary as GroupSummary
from broker.group.classic_model import JoinResult as JoinResult
from broker.group.classic_model import Member as Member
from broker.group.classic_model import MemberSummary as MemberSummary
from broker.group.classic_model import Outcome as Outcome
from broker.group.classic_model import SyncResult as SyncResult
from broker.group.classic_model import Waiting as Waiting
from broker.group.classic_model import _inconsistent, _member_of, _subscription_topics
from broker.group.classic_store import ClassicOffsetsAndRecords
from broker.group.offsets import OffsetStore, valid_group_id
from broker.group.state import GroupState, check_transition
from protocol.errors import ErrorCode


def _random_member_id(client_id: str) -> str:
    return f"{client_id}-{uuid.uuid4()}"


class GroupCoordinator(ClassicOffsetsAndRecords):
    """All groups of this broker (the coordinator of every group) and their committed offsets."""

    def __init__(
        self,
        config: GroupConfig,
        new_member_id: Callable[[str], str] = _random_member_id,
    ) -> None:
        self.config = config
        self.groups: dict[str, Group] = {}
        self.offsets = OffsetStore()
        self._new_member_id = new_member_id
        self._next_waiter = 0
        # Groups whose metadata record must be written (a settled generation, a group that
        # became Empty, or a removed group: tombstone), in order; see take_to_store().
        self._to_store: dict[str, None] = {}

    # -- state changes -----------------------------------------------------------------------

    @staticmethod
    def _transition(group: Group, target: GroupState) -> None:
        group.state = check_transition(group.group_id, group.state, target)

    def _waiter(self) -> int:
        self._next_waiter += 1
        return self._next_waiter

    def ensure_group(self, group_id: str) -> Group:
        """The group, created Empty if unknown (offset commits, offsets loaded at start)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        return group

    def _prepare_rebalance(self, group: Group, now_ms: int, out: list[Completion]) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Members waiting for the old generation's assignment must rejoin instead.
            for member in group.members.values():
                member.assignment = b""
                if member.sync_waiter is not None:
                    out.append((member.sync_waiter, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)))
                    member.sync_waiter = None
                    member.last_heartbeat_ms = now_ms
        timeout = group.rebalance_timeout_ms
        if group.state is GroupState.EMPTY:
            delay = self.config.initial_rebalance_delay_ms
            group.initial_delay = True
            group.initial_remaining_ms = max(timeout - delay, 0)
            group.new_member_added = False
            group.rebalance_deadline_ms = now_ms + delay
        else:
            group.initial_delay = False
            group.rebalance_deadline_ms = now_ms + timeout
        self._transition(group, GroupState.PREPARING_REBALANCE)
        self._maybe_complete_join(group, now_ms, out)

    def _maybe_prepare_rebalance(self, group: Group, now_ms: int, out: list[Completion]) -> None:
        if group.state in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms, out)

    def _maybe_complete_join(self, group: Group, now_ms: int, out: list[Completion]) -> None:
        # The initial delayed join only ends on its timer (Kafka's InitialDelayedJoin).
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and not group.initial_delay
            and group.all_joined()
        ):
            self._complete_join(group, now_ms, out)

    def _complete_join(self, group: Group, now_ms: int, out: list[Completion]) -> None:
        for member in [m for m in group.members.values() if m.join_waiter is None]:
            self._drop_member(group, member, out)
        group.rebalance_deadline_ms = None
        group.initial_delay = False
        group.new_member_added = False
        group.generation_id += 1
        if not group.members:
            group.protocol = None
            group.leader_id = None
            self._transition(group, GroupState.EMPTY)
            self._to_store[group.group_id] = None
            return
        group.protocol = self._select_protocol(group)
        self._transition(group, GroupState.COMPLETING_REBALANCE)
        for member in group.members.values():
            out.append((member.join_waiter, self._join_result(group, member)))  # type: ignore[arg-type]
            member.join_waiter = None
            member.last_heartbeat_ms = now_ms

    def _join_result(self, group: Group, member: Member, skip_assignment: bool = False) -> JoinResult:
        members: tuple[tuple[str, bytes], ...] = ()
        instance_ids: tuple[str | None, ...] = ()
        if member.member_id == group.leader_id:
            protocol = group.protocol or ""
            members = tuple((m.member_id, m.metadata_for(protocol)) for m in group.members.values())
            instance_ids = tuple(m.group_instance_id for m in group.members.values())
        return JoinResult(
            ErrorCode.NONE,
            generation_id=group.generation_id,
            protocol_name=group.protocol or "",
            leader=group.leader_id or "",
            member_id=member.member_id,
            members=members,
            member_instance_ids=instance_ids,
            protocol_type=group.protocol_type or "",
            skip_assignment=skip_assignment and bool(members),
        )

    @staticmethod
    def _select_protocol(group: Group) -> str:
        """The protocol all members support that most members list first among those."""
        members = list(group.members.values())
        candidates = frozenset.intersection(*(m.protocol_names for m in members))
        votes = Counter(
            next(name for name, _ in m.protocols if name in candidates)
            for m in members
            if m.protocol_names & candidates
        )
        if not votes:  # unreachable while joins are checked with _supports_protocols
            return members[0].protocols[0][0]
        best = max(votes.values())
        leader = group.members.get(group.leader_id or "", members[0])
        for name, _ in leader.protocols:
            if votes.get(name) == best:
                return name
        return next(name for name, count in votes.items() if count == best)

    def _drop_member(self, group: Group, member: Member, out: list[Completion]) -> None:
        """Remove ``member``, answering its waiting requests; no rebalance decision here."""
        if member.join_waiter is not None:
            out.append((member.join_waiter, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID)))
            member.join_waiter = None
        if member.sync_waiter is not None:
            out.append((member.sync_waiter, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)))
            member.sync_waiter = None
        del group.members[member.member_id]
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), None)

    def _remove_member(
        self, group: Group, member: Member, now_ms: int, out: list[Completion]
    ) -> None:
        """A member left or expired: drop it and rebalance (or let a rebalance finish)."""
        self._drop_member(group, member, out)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms, out)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, now_ms, out)

    # -- timers ------------------------------------------------------------------------------

    def _advance(self, group: Group, now_ms: int, out: list[Completion]) -> None:
        """Run the group's timers that are due at ``now_ms``."""
        if group.pending_members:
            group.pending_members = {
                m: expiry for m, expiry in group.pending_members.items() if expiry > now_ms
            }
        for member in list(group.members.values()):
            deadline = member.session_deadline()
            if deadline is not None and now_ms >= deadline and member.member_id in group.members:
                self._remove_member(group, member, now_ms, out)
        deadline = group.rebalance_deadline_ms
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and deadline is not None
            and now_ms >= deadline
        ):
            if group.initial_delay and group.new_member_added and group.initial_remaining_ms > 0:
                # New members arrived during the delay: wait once more for stragglers.
                delay = min(self.config.initial_rebalance_delay_ms, group.initial_remaining_ms)
                group.initial_remaining_ms -= delay
                group.new_member_added = False
                group.rebalance_deadline_ms = now_ms + delay
            else:
                self._complete_join(group, now_ms, out)

    def tick(self, now_ms: int) -> list[Completion]:
        """Run every group's due timers; returns the answers this produced."""
        out: list[Completion] = []
        for group in list(self.groups.values()):
            self._advance(group, now_ms, out)
        return out

    def next_deadline(self) -> int | None:
        """The earliest time a timer is due (ms), or None if nothing is pending."""
        best: int | None = None
        for group in self.groups.values():
            if group.state is GroupState.PREPARING_REBALANCE and group.rebalance_deadline_ms is not None:
                best = group.rebalance_deadline_ms if best is None else min(best, group.rebalance_deadline_ms)
            for member in group.members.values():
                deadline = member.session_deadline()
                if deadline is not None and (best is None or deadline < best):
                    best = deadline
        return best

    def remove_empty_groups(self) -> list[str]:
        """Drop Empty groups that hold no offsets (committed or pending): -> Dead, forgotten."""
        dead = [
            g for g in self.groups.values()
            if g.state is GroupState.EMPTY and not g.members and not g.pending_members
            and not self.offsets.has_group(g.group_id)
        ]
        for group in dead:
            self._transition(group, GroupState.DEAD)
            del self.groups[group.group_id]
            if group.generation_id > 0:
                self._to_store[group.group_id] = None  # it may have a record: tombstone
        return [g.group_id for g in dead]

    # -- requests ----------------------------------------------------------------------------

    def _known(self, group_id: str, now_ms: int, out: list[Completion]) -> Group | None:
        group = self.groups.get(group_id)
        if group is not None:
            self._advance(group, now_ms, out)
        return group

    def _supports_protocols(
        self, group: Group, protocol_type: str, names: frozenset[str], member_id: str
    ) -> bool:
        if not protocol_type or not names:
            return False
        others = [m for mid, m in group.members.items() if mid != member_id]
        if not others:
            return True
        if group.protocol_type != protocol_type:
            return False
        return any(all(name in m.protocol_names for m in others) for name in names)

    @staticmethod
    def _settle(waiter: int, out: list[Completion]) -> JoinResult | SyncResult | Waiting:
        """The caller's own reply: taken out of ``out`` if this very call produced it."""
        for i, (w, result) in enumerate(out):
            if w == waiter:
                del out[i]
                return result
        return Waiting(waiter)

    def join_group(
        self,
        group_id: str,
        member_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        now_ms: int,
        group_instance_id: str | None = None,
        require_known_member_id: bool = False,
    ) -> Outcome:
        """JoinGroup: ``Outcome(JoinResult | Waiting, completions)``.

        ``require_known_member_id`` (JoinGroup v4+, KIP-394): a new dynamic member gets its id
        with MEMBER_ID_REQUIRED and joins with it. ``group_instance_id`` (v5+, KIP-345): a static
        member; one that rejoins with an empty member id takes over its old membership (new
        member id, same assignment) without a rebalance when the group is Stable and its
        protocols are unchanged; the old member id is fenced (FENCED_INSTANCE_ID)."""
        out: list[Completion] = []
        if not valid_group_id(group_id):
            return Outcome(JoinResult(ErrorCode.INVALID_GROUP_ID, member_id=member_id))
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return Outcome(JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id))
        group = self._known(group_id, now_ms, out)
        if group is None:
            if member_id != NO_MEMBER_ID:
                return Outcome(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id), out)
            group = self.ensure_group(group_id)
        if group.state is GroupState.DEAD:
            return Outcome(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id), out)
        protocols = tuple((name, bytes(metadata)) for name, metadata in protocols)
        names = frozenset(name for name, _ in protocols)
        if not self._supports_protocols(group, protocol_type, names, member_id):
            return Outcome(
                JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id), out
            )
        static = group.static_member(group_instance_id)
        if member_id == NO_MEMBER_ID and static is not None:
            return self._rejoin_static(
                group, static, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                protocol_type, protocols, now_ms, out,
            )
        if member_id != NO_MEMBER_ID and static is not None and static.member_id != member_id:
            return Outcome(JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=member_id), out)
        new_member_id = None
        if member_id == NO_MEMBER_ID:
            new_member_id = self._new_member_id(client_id)
            if require_known_member_id and group_instance_id is None:
                group.pending_members[new_member_id] = now_ms + session_timeout_ms
                return Outcome(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_member_id), out)
        elif member_id in group.pending_members and member_id not in group.members:
            del group.pending_members[member_id]
            new_member_id = member_id  # KIP-394: the second join of a new member
        waiter = self._waiter()
        if not any(mid != member_id for mid in group.members):
            group.protocol_type = protocol_type  # the only member decides
        if new_member_id is not None:
            member = Member(
                new_member_id, client_id, client_host, session_timeout_ms,
                rebalance_timeout_ms, protocol_type, protocols, now_ms, join_waiter=waiter,
                group_instance_id=group_instance_id,
            )
            if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
                group.new_member_added = True
            group.members[member.member_id] = member
            if group.leader_id is None:
                group.leader_id = member.member_id
            self._maybe_prepare_rebalance(group, now_ms, out)
        else:
            member = group.members.get(member_id)  # type: ignore[assignment]
            if member is None:
                return Outcome(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id), out)
            unchanged = member.protocols == protocols
            state = group.state
            if (state is GroupState.COMPLETING_REBALANCE and unchanged) or (
                state is GroupState.STABLE and unchanged and member_id != group.leader_id
            ):
                # It lost the answer for the current generation (or is a follower with nothing
                # new to say): hand the current generation back without a rebalance.
                member.last_heartbeat_ms = now_ms
                result = self._join_result(group, member)
                if state is GroupState.STABLE:
                    result = JoinResult(
                        result.error, result.generation_id, result.protocol_name, result.leader,
                        result.member_id, (),
                    )
                return Outcome(result, out)
            if state is GroupState.EMPTY:  # members imply not Empty; kept for safety
                return Outcome(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id), out)
            if member.join_waiter is not None:
                # A retried JoinGroup replaces the older one, which must still get an answer.
                out.append((member.join_waiter, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS,
                                                           member_id=member_id)))
            member.protocols = protocols
            member.protocol_type = protocol_type
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
            member.join_waiter = waiter
            self._maybe_prepare_rebalance(group, now_ms, out)
        self._maybe_complete_join(group, now_ms, out)
        return Outcome(self._settle(waiter, out), out)

    def _rejoin_static(
        self, group: Group, member: Member, client_id: str, client_host: str,
        session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
        protocols: tuple[tuple[str, bytes], ...], now_ms: int, out: list[Completion],
    ) -> Outcome:
        """A static member came back with an empty member id (a restarted instance): it takes
        over the membership under a new member id; the old id is fenced (Kafka's
        updateStaticMemberAndRebalance)."""
        old_id = member.member_id
        new_id = self._new_member_id(client_id)
        if member.join_waiter is not None:
            out.append((member.join_waiter, JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id)))
            member.join_waiter = None
        if member.sync_waiter is not None:
            out.append((member.sync_waiter, SyncResult(ErrorCode.FENCED_INSTANCE_ID)))
            member.sync_waiter = None
        group.members = {(new_id if k == old_id else k): m for k, m in group.members.items()}
        if group.leader_id == old_id:
            group.leader_id = new_id
        unchanged = member.protocols == protocols
        member.member_id = new_id
        member.client_id, member.client_host = client_id, client_host
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.protocol_type = protocol_type
        member.protocols = protocols
        member.last_heartbeat_ms = now_ms
        self._to_store[group.group_id] = None  # the new member id must survive a restart
        if group.state is GroupState.STABLE and unchanged:
            # Same generation and assignment, no rebalance; a leader gets the members but must
            # not assign again (skip_assignment; older clients' SyncGroup gets the assignment).
            result = self._join_result(group, member, skip_assignment=True)
            return Outcome(result, out)
        waiter = member.join_waiter = self._waiter()
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, now_ms, out)
        else:
            self._prepare_rebalance(group, now_ms, out)
        return Outcome(self._settle(waiter, out), out)

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: Mapping[str, bytes],
        now_ms: int,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Outcome:
        """SyncGroup: ``Outcome(SyncResult | Waiting, completions)``. From v5 (KIP-559) the
        request names the protocol type and name, which must be the group's (checked after the
        member and generation, as Kafka's GroupMetadataManager.validateSyncGroup)."""
        out: list[Completion] = []
        if not valid_group_id(group_id):
            return Outcome(SyncResult(ErrorCode.INVALID_GROUP_ID))
        group = self._known(group_id, now_ms, out)
        if group is None:
            return Outcome(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID), out)
        if group.state is GroupState.DEAD:
            return Outcome(SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE), out)
        code, member = _member_of(group, member_id, generation_id, group_instance_id)
        if member is None:
            return Outcome(SyncResult(code), out)
        if (_inconsistent(protocol_type, group.protocol_type)
                or _inconsistent(protocol_name, group.protocol)):
            return Outcome(SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL), out)
        if group.state is GroupState.PREPARING_REBALANCE:
            return Outcome(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS), out)
        if group.state is GroupState.STABLE:
            member.last_heartbeat_ms = now_ms
            return Outcome(SyncResult(ErrorCode.NONE, member.assignment), out)
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return Outcome(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID), out)
        if member.sync_waiter is not None:
            out.append((member.sync_waiter, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)))
        waiter = member.sync_waiter = self._waiter()
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = bytes(assignments.get(m.member_id, b""))
            self._transition(group, GroupState.STABLE)
            self._to_store[group.group_id] = None
            for m in group.members.values():
                if m.sync_waiter is not None:
                    out.append((m.sync_waiter, SyncResult(ErrorCode.NONE, m.assignment)))
                    m.sync_waiter = None
                    m.last_heartbeat_ms = now_ms
        return Outcome(self._settle(waiter, out), out)

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, now_ms: int,
        group_instance_id: str | None = None,
    ) -> Outcome:
        """Heartbeat: ``Outcome(ErrorCode, completions)``."""
        out: list[Completion] = []
        if not valid_group_id(group_id):
            return Outcome(ErrorCode.INVALID_GROUP_ID)
        group = self._known(group_id, now_ms, out)
        if group is None:
            return Outcome(ErrorCode.UNKNOWN_MEMBER_ID, out)
        if group.state is GroupState.DEAD:
            return Outcome(ErrorCode.COORDINATOR_NOT_AVAILABLE, out)
        code, member = _member_of(group, member_id, generation_id, group_instance_id)
        if member is None:
            return Outcome(code, out)
        if group.state is GroupState.EMPTY:
            return Outcome(ErrorCode.UNKNOWN_MEMBER_ID, out)
        member.last_heartbeat_ms = now_ms
        if group.state is GroupState.STABLE:
            return Outcome(ErrorCode.NONE, out)
        return Outcome(ErrorCode.REBALANCE_IN_PROGRESS, out)

    def leave_group(
        self, group_id: str, member_id: str, now_ms: int, group_instance_id: str | None = None
    ) -> Outcome:
        """LeaveGroup: ``Outcome(ErrorCode, completions)``. A static member may leave by its
        group.instance.id alone (empty member id); a stale member id of it is fenced."""
        out: list[Completion] = []
        if not valid_group_id(group_id):
            return Outcome(ErrorCode.INVALID_GROUP_ID)
        group = self._known(group_id, now_ms, out)
        if group is None:
            return Outcome(ErrorCode.UNKNOWN_MEMBER_ID, out)
        if group.state is GroupState.DEAD:
            return Outcome(ErrorCode.COORDINATOR_NOT_AVAILABLE, out)
        static = group.static_member(group_instance_id)
        if static is not None and member_id in (NO_MEMBER_ID, static.member_id):
            member_id = static.member_id
        elif group_instance_id is not None and static is not None:
            return Outcome(ErrorCode.FENCED_INSTANCE_ID, out)
        member = group.members.get(member_id)
        if member is None:
            return Outcome(ErrorCode.UNKNOWN_MEMBER_ID, out)
        self._remove_member(group, member, now_ms, out)
        return Outcome(ErrorCode.NONE, out)
    # -- admin -------------------------------------------------------------------------------

    def describe_group(self, group_id: str, now_ms: int) -> tuple[GroupSummary, list[Completion]]:
        """DescribeGroups: member metadata and assignments only for a Stable group (as Kafka);
        an unknown group is reported Dead."""
        out: list[Completion] = []
        group = self._known(group_id, now_ms, out)
        if group is None:
            return GroupSummary(group_id, GroupState.DEAD.value, "", "", ()), out
        stable = group.state is GroupState.STABLE
        protocol = (group.protocol or "") if stable else ""
        members = tuple(
            MemberSummary(
                m.member_id, m.client_id, m.client_host,
                m.metadata_for(protocol) if stable else b"",
                m.assignment if stable else b"",
                m.group_instance_id,
            )
            for m in group.members.values()
        )
        return (
            GroupSummary(group_id, group.state.value, group.protocol_type or "", protocol, members),
            out,
        )

    def list_groups(self) -> list[tuple[str, str, str]]:
        """``(group_id, protocol_type, state)`` of every group this coordinator knows."""
        return [(g.group_id, g.protocol_type or "", g.state.value) for g in self.groups.values()]

    def delete_groups(self, group_ids: Iterable[str], now_ms: int) -> dict[str, ErrorCode]:
        """DeleteGroups: an Empty group goes (Dead, forgotten, its record tombstoned; the
        caller tombstones its offsets); one with members is NON_EMPTY_GROUP, an unknown one
        GROUP_ID_NOT_FOUND, as Kafka answers."""
        out: list[Completion] = []
        result: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            if not valid_group_id(group_id):
                result[group_id] = ErrorCode.INVALID_GROUP_ID
                continue
            group = self._known(group_id, now_ms, out)
            if group is None or group.state is GroupState.DEAD:
                result[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.state is not GroupState.EMPTY:
                result[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                self._transition(group, GroupState.DEAD)
                del self.groups[group_id]
                self._to_store[group_id] = None
                result[group_id] = ErrorCode.NONE
        return result

    # -- groups that change protocol (classic_members.py) ------------------------------------

    def remove_for_upgrade(self, group_id: str) -> list[Completion]:
        """The group becomes a consumer group: forgotten here (its record tombstoned, its
        offsets kept), its waiting JoinGroup and SyncGroup answered REBALANCE_IN_PROGRESS so
        that the members rejoin the consumer group (Kafka's convertToConsumerGroup)."""
        out: list[Completion] = []
        group = self.groups.pop(group_id, None)
        if group is None:
            return out
        for member in group.members.values():
            if member.join_waiter is not None:
                out.append((member.join_waiter, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS,
                                                           member_id=member.member_id)))
                member.join_waiter = None
            if member.sync_waiter is not None:
                out.append((member.sync_waiter, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)))
                member.sync_waiter = None
        self._to_store[group_id] = None
        return out

    def adopt_downgraded(self, group_id: str, generation_id: int, protocol_type: str,
                         members: Sequence[Member], now_ms: int,
                         rebalance: bool = True) -> list[Completion]:
        """A consumer group whose last consumer-protocol member left becomes this classic group:
        Stable at ``generation_id`` with ``members`` (their assignments set), written, then a
        rebalance starts so that they rejoin (Kafka's convertToClassicGroup); without
        ``rebalance`` (a static member replaced it and kept its assignment) it stays Stable."""
        out: list[Completion] = []
        group = self.groups[group_id] = Group(group_id)
        group.generation_id = generation_id
        group.protocol_type = protocol_type
        for member in members:
            member.last_heartbeat_ms = now_ms
            group.members[member.member_id] = member
        group.leader_id = next(iter(group.members), None)
        group.protocol = self._select_protocol(group)
        group.state = GroupState.STABLE  # built, not transitioned: as a loaded group
        self._to_store[group_id] = None
        if rebalance:
            self._prepare_rebalance(group, now_ms, out)
        return out

    def subscribed_topics(self, group_id: str) -> set[str]:
        """Topics the members of a "consumer" group subscribe to (their subscriptions for the
        chosen protocol; an undecodable one counts as none)."""
        group = self.groups.get(group_id)
        topics: set[str] = set()
        if group is None:
            return topics
        for member in group.members.values():
            topics.update(_subscription_topics(member.metadata_for(group.protocol or "")))
        return topics
