"""What the classic group coordinator checks and keeps besides membership: offset commits against
the group's generation (OffsetCommit, TxnOffsetCommit, KIP-447), transaction markers for pending
offsets, and the group's metadata record in ``__consumer_offsets`` (written, and read back at
start). A part of ``GroupCoordinator`` (its base class), pure like it.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.group.classic_model import (
    NO_GENERATION,
    NO_MEMBER_ID,
    Completion,
    Group,
    Member,
    Outcome,
    _member_of,
)
from broker.group.group_metadata import GroupMetadataRecord, MemberRecord
from broker.group.offsets import OffsetStore, valid_group_id
from broker.group.state import GroupState
from protocol.errors import ErrorCode


class ClassicOffsetsAndRecords:
    """Offset checks and persistence of ``GroupCoordinator`` (which provides the state)."""

    groups: dict[str, Group]
    offsets: OffsetStore
    _to_store: dict[str, None]

    def _known(self, group_id: str, now_ms: int, out: list[Completion]) -> Group | None:
        raise NotImplementedError

    def ensure_group(self, group_id: str) -> Group:
        raise NotImplementedError

    # -- offsets ----------------------------------------------------------------------------

    def validate_offset_commit(
        self, group_id: str, generation_id: int, member_id: str, now_ms: int,
        group_instance_id: str | None = None,
    ) -> Outcome:
        """May this OffsetCommit store offsets? ``Outcome(ErrorCode, completions)``.

        Generation -1 commits ("standalone", manual assignment) are allowed for a group without
        members, which is created if unknown; members of a group must give their member id and
        the current generation. Commits are accepted while a rebalance is being prepared (members
        commit before they rejoin) but not while the new generation waits for its assignment.
        """
        out: list[Completion] = []
        if not valid_group_id(group_id):
            return Outcome(ErrorCode.INVALID_GROUP_ID, out)
        group = self._known(group_id, now_ms, out)
        if group is None:
            if generation_id < 0:
                self.ensure_group(group_id)
                return Outcome(ErrorCode.NONE, out)
            return Outcome(ErrorCode.ILLEGAL_GENERATION, out)
        if group.state is GroupState.DEAD:
            return Outcome(ErrorCode.COORDINATOR_NOT_AVAILABLE, out)
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return Outcome(ErrorCode.NONE, out)
        code, member = _member_of(group, member_id, generation_id, group_instance_id)
        if member is None:
            return Outcome(code, out)
        if group.state is GroupState.COMPLETING_REBALANCE:
            return Outcome(ErrorCode.REBALANCE_IN_PROGRESS, out)
        member.last_heartbeat_ms = now_ms
        return Outcome(ErrorCode.NONE, out)

    def validate_txn_offset_commit(
        self, group_id: str, generation_id: int = NO_GENERATION, member_id: str = NO_MEMBER_ID,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        """TxnOffsetCommit v0-2 carry no member or generation: only the group must be usable.
        Creates the group if unknown (as Kafka does). v3+ (KIP-447) may carry the consumer's
        member id and generation: then they must be the group's current ones (a zombie's
        commit is fenced)."""
        if not valid_group_id(group_id):
            return ErrorCode.INVALID_GROUP_ID
        group = self.ensure_group(group_id)
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.fenced(group_instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id != NO_MEMBER_ID and member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id >= 0 and generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def on_txn_marker(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT or ABORT marker for ``producer_id`` was written to ``__consumer_offsets``
        partition ``offsets_partition``: its pending transactional offsets there become committed
        offsets (COMMIT) or are dropped (ABORT)."""
        for group_id in self.offsets.complete_txn(offsets_partition, producer_id, commit):
            if commit:
                self.ensure_group(group_id)

    # -- persistence ---------------------------------------------------------------------------


    def take_to_store(self) -> list[str]:
        """Groups whose metadata record (``group_record``) must be written now; clears the list."""
        ids, self._to_store = list(self._to_store), {}
        return ids

    def group_record(self, group_id: str, now_ms: int) -> GroupMetadataRecord | None:
        """The group's metadata record as of its last settled generation; None (a tombstone)
        for a group that is gone."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return None
        protocol = group.protocol or ""
        return GroupMetadataRecord(
            protocol_type=group.protocol_type or "",
            generation_id=group.generation_id,
            protocol=group.protocol,
            leader=group.leader_id if group.members else None,
            current_state_timestamp=now_ms,
            members=tuple(
                MemberRecord(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.rebalance_timeout_ms, m.session_timeout_ms, m.metadata_for(protocol),
                    m.assignment,
                )
                for m in group.members.values()
            ),
        )

    def load_group(self, group_id: str, record: GroupMetadataRecord, now_ms: int) -> Group:
        """Restore a group from its last record (broker start): Stable with its members, their
        assignments and generation if it had members, else Empty. Sessions restart at
        ``now_ms``, so members that do not heartbeat expire as usual."""
        group = self.groups[group_id] = Group(group_id)
        group.generation_id = record.generation_id
        group.protocol_type = record.protocol_type or None
        if record.members and record.protocol:
            group.protocol = record.protocol
            for m in record.members:
                group.members[m.member_id] = Member(
                    m.member_id, m.client_id, m.client_host, m.session_timeout_ms,
                    m.rebalance_timeout_ms, record.protocol_type,
                    ((record.protocol, m.subscription),), now_ms, m.assignment,
                    m.group_instance_id,
                )
            group.leader_id = (
                record.leader if record.leader in group.members else next(iter(group.members))
            )
            # Loaded, not transitioned: the generation was settled before the restart.
            group.state = GroupState.STABLE
        return group

    def group_ids(self) -> Iterable[str]:
        return self.groups.keys()
