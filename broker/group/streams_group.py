"""The Streams rebalance protocol (KIP-1071): the topology of a Kafka Streams application, its
internal topics, task assignment and the incremental reconciliation of each member. Pure: no I/O,
no clock (every entry point takes ``now_ms``), no topic store (the caller passes a
``TopicsView``).

Rules / theory of operation (Kafka 4.4's group coordinator: ``GroupMetadataManager``'s
streamsGroupHeartbeat, ``StreamsGroup``, ``streams/CurrentAssignmentBuilder``,
``streams/topics/InternalTopicManager``):

- A member heartbeats (StreamsGroupHeartbeat) every ``heartbeat_interval_ms``. It joins with
  member epoch 0 and its topology (subtopologies: source topics, repartition and changelog
  topics, copartition groups), its process id and no tasks; it leaves with -1 (-2: a static
  member that will come back). The first topology is the group's; a member joining with another
  topology epoch while others are live is refused STREAMS_INVALID_TOPOLOGY_EPOCH, and a member
  whose topology epoch is older than the group's sees the status STALE_TOPOLOGY.
- The topology is validated (STREAMS_INVALID_TOPOLOGY) and then *configured* against the topics
  that exist (``configure``): repartition topics get their partition count (given, or that of
  the subtopologies writing to them), copartitioned topics must agree, a subtopology has as
  many tasks as its largest source topic, and its changelog topics that many partitions. Missing
  source topics, or topics partitioned wrongly, leave the group NotReady with a status
  (MISSING_SOURCE_TOPICS, INCORRECTLY_PARTITIONED_TOPICS) and no tasks; missing internal topics
  are returned by ``internal_topics_to_create`` for the shell to create (a failure is the status
  MISSING_INTERNAL_TOPICS).
- The group epoch goes up whenever what the assignment depends on changes: a member joins,
  leaves or expires, its process id changes, the topology changes, or the configured task
  counts change. Then the target assignment is computed (``streams_assignor``: sticky active
  tasks, standbys per ``num_standby_replicas``) and stamped with the group epoch.
- Each member moves from its current tasks to its target by the table ``RECONCILE``: tasks it
  must give up are revoked first (it keeps its epoch until a heartbeat reports them gone); then
  it gets the target's epoch and the target tasks not owned elsewhere (an active task still
  active or being revoked at another member waits: UNRELEASED_TASKS). So an active task never
  runs in two members at once.
- Epoch checks as for consumer groups: FENCED_MEMBER_EPOCH for an unknown epoch (the previous
  one is accepted when the reported tasks fit, a lost response), UNKNOWN_MEMBER_ID.
- Timers: a member whose session expires, or who does not revoke within its rebalance timeout,
  is removed (the group epoch goes up).
- Offsets: OffsetCommit v9+ and TxnOffsetCommit carry the member id and epoch
  (``validate_offset_commit``).
- Persistence: what changed is marked dirty; ``take_changes`` hands the groups to the shell,
  which writes their records (``streams_records.py``) before answering.

Group states, as Kafka names them: Empty, NotReady (members but no configured topology),
Assigning (never seen here: the target is computed in the same call), Reconciling, Stable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from broker.group.consumer_model import RegexCompiler, TopicsView, _re2_compiler
from broker.group.modern_group import ModernGroupCoordinator
from broker.group.offsets import valid_group_id
from broker.group.reconciliation import Finding, lookup
from broker.group.streams_assignor import (
    EMPTY_TASKS,
    MemberSpec,
    MemberTasks,
    Tasks,
    TaskSet,
    assign_tasks,
    intersect,
    minus,
    normalized,
    per_kind,
    union,
)
from broker.group.streams_model import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    NEW_GROUP_EPOCH,
    STATIC_LEAVE_EPOCH,
    HeartbeatRequest,
    HeartbeatResult,
    MemberState,
    MemberTaskOffsets,
    StreamsGroup,
    StreamsGroupConfig,
    StreamsGroupSettings,
    StreamsMember,
    nested_offsets,
)
from broker.group.streams_topology import (
    Status,
    TopicInfo,
    Topology,
    configure,
    validate_topology,
)
from protocol.errors import ErrorCode

_M = MemberState
_F = Finding
RECONCILE: dict[tuple[MemberState, Finding], MemberState] = {
    (_M.STABLE, _F.UP_TO_DATE): _M.STABLE,
    (_M.STABLE, _F.REVOKE): _M.UNREVOKED_TASKS,
    (_M.STABLE, _F.UNRELEASED): _M.UNRELEASED_TASKS,
    (_M.UNREVOKED_TASKS, _F.STILL_REVOKING): _M.UNREVOKED_TASKS,
    (_M.UNREVOKED_TASKS, _F.REVOKE): _M.UNREVOKED_TASKS,
    (_M.UNREVOKED_TASKS, _F.UP_TO_DATE): _M.STABLE,
    (_M.UNREVOKED_TASKS, _F.UNRELEASED): _M.UNRELEASED_TASKS,
    (_M.UNRELEASED_TASKS, _F.UP_TO_DATE): _M.STABLE,
    (_M.UNRELEASED_TASKS, _F.UNRELEASED): _M.UNRELEASED_TASKS,
    (_M.UNRELEASED_TASKS, _F.REVOKE): _M.UNREVOKED_TASKS,
}


def next_member_state(state: MemberState, finding: Finding) -> MemberState:
    """The consumer protocol's table over tasks (Kafka's streams member states; the findings
    and the IllegalMemberTransition for a pair it lacks are ``reconciliation.py``'s)."""
    return lookup(RECONCILE, state, finding)


class StreamsGroupCoordinator(ModernGroupCoordinator[StreamsGroup]):
    """Every Streams-protocol group of this broker (their keeping, deletion and changes to
    write: ``modern_group.py``)."""

    def __init__(self, config: StreamsGroupConfig,
                 compile_regex: RegexCompiler = _re2_compiler) -> None:
        super().__init__()
        self.config = config
        self._compile_regex = compile_regex

    # -- topology and target -----------------------------------------------------------------

    def internal_topics_to_create(self, group_id: str, topology: Topology | None,
                                  topics: TopicsView) -> dict[str, TopicInfo]:
        """The internal topics the topology (``topology``, else the group's) needs and that do
        not exist yet, with their partition counts (none while source topics are missing)."""
        if topology is None:
            group = self.groups.get(group_id)
            topology = group.topology if group is not None else None
        if topology is None or validate_topology(topology) is not None:
            return {}
        configured = configure(topology, topics, self._compile_regex)
        return {n: t for n, t in configured.internal_topics.items()
                if topics.partition_count(n) is None}

    def _bump(self, group: StreamsGroup) -> None:
        group.group_epoch += 1
        group.dirty_group = True

    def _update_target(self, group: StreamsGroup, topics: TopicsView, force: bool) -> None:
        """Reconfigure the topology against the topics; bump the epoch and compute a new target
        if ``force`` (membership changed) or the configured task counts changed."""
        if group.topology is not None:
            group.configured = configure(group.topology, topics, self._compile_regex)
        else:
            group.configured = None
        counts = group.configured.task_counts if group.configured is not None \
            and group.configured.ready else {}
        if not force and counts == group.task_counts:
            return
        group.task_counts = counts
        self._bump(group)
        # stored with the epoch (Kafka's metadata record), so a heartbeat during the initial
        # delay does not take the configs for changed
        group.last_assignment_configs = self.config.of(group.group_id).assignment_configs()
        if group.assignment_delayed_until_ms is not None:
            return  # the initial rebalance delay: computed when it ends (_end_delay)
        self._compute_target(group)

    def _compute_target(self, group: StreamsGroup) -> None:
        """The target of every member for the group's configured task counts, stamped with the
        group epoch."""
        counts = group.task_counts
        settings = self.config.of(group.group_id)
        stateful = ({s.subtopology_id for s in group.topology.subtopologies
                     if s.state_changelog_topics} if group.topology is not None else set())
        specs = {m.member_id: MemberSpec(
            m.process_id,
            union(m.assigned.active, union(m.pending_revocation.active,
                                       group.target.get(m.member_id, EMPTY_TASKS).active)),
            union(m.assigned.standby, group.target.get(m.member_id, EMPTY_TASKS).standby),
            group.task_offsets.get(m.member_id, MemberTaskOffsets()).offsets)
            for m in group.members.values()}
        computed: dict[str, MemberTasks] = assign_tasks(
            specs, counts, stateful, settings.num_standby_replicas)
        target = {m: TaskSet(t.active, t.standby, t.warmup) for m, t in computed.items()}
        for member_id, tasks in target.items():
            if group.target.get(member_id) != tasks:
                group.dirty_members.add(member_id)
        group.target = target
        group.assignment_epoch = group.group_epoch
        group.dirty_group = True

    # -- reconciliation ------------------------------------------------------------------------

    @staticmethod
    def _active_elsewhere(group: StreamsGroup, member_id: str) -> set[tuple[str, int]]:
        busy: set[tuple[str, int]] = set()
        for other in group.members.values():
            if other.member_id != member_id:
                for tasks in (other.assigned.active, other.pending_revocation.active):
                    busy.update((s, p) for s, parts in tasks.items() for p in parts)
        return busy

    def _reconcile(self, group: StreamsGroup, member: StreamsMember, owned: TaskSet | None,
                   now_ms: int) -> None:
        if member.state is MemberState.STABLE and member.member_epoch == group.assignment_epoch:
            return
        target = group.target.get(member.member_id, EMPTY_TASKS)
        before = (member.member_epoch, member.state, member.assigned, member.pending_revocation)
        if member.state is MemberState.UNREVOKED_TASKS:
            still = owned is None or not per_kind(intersect, owned, member.pending_revocation).is_empty()
            if still:
                member.state = next_member_state(member.state, Finding.STILL_REVOKING)
                return
            member.pending_revocation = EMPTY_TASKS
            member.revocation_deadline_ms = None
        revoke = per_kind(minus, member.assigned, target)
        if not revoke.is_empty():
            finding = Finding.REVOKE
            member.assigned = per_kind(intersect, member.assigned, target)
            member.pending_revocation = per_kind(union, member.pending_revocation, revoke)
            member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
        else:
            busy = self._active_elsewhere(group, member.member_id)
            new_active = normalized({s: frozenset(p for p in parts if (s, p) not in busy)
                                for s, parts in minus(target.active, member.assigned.active).items()})
            member.assigned = TaskSet(union(member.assigned.active, new_active),
                                      target.standby, target.warmup)
            if member.member_epoch != group.assignment_epoch:
                member.previous_member_epoch = member.member_epoch
                member.member_epoch = group.assignment_epoch
            finding = Finding.UP_TO_DATE if member.assigned == target else Finding.UNRELEASED
        member.state = next_member_state(member.state, finding)
        if before != (member.member_epoch, member.state, member.assigned,
                      member.pending_revocation):
            group.dirty_members.add(member.member_id)

    # -- timers ------------------------------------------------------------------------------

    def _remove_member(self, group: StreamsGroup, member: StreamsMember) -> None:
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        group.task_offsets.pop(member.member_id, None)
        group.dirty_members.discard(member.member_id)
        group.removed_members.add(member.member_id)
        if not group.members:
            group.shutdown_requested_by = None
        self._store(group)

    def _expire(self, group: StreamsGroup, topics: TopicsView, now_ms: int) -> None:
        session = self.config.of(group.group_id).session_timeout_ms
        expired = [m for m in group.members.values()
                   if now_ms >= m.last_heartbeat_ms + session
                   or (m.revocation_deadline_ms is not None and now_ms >= m.revocation_deadline_ms)]
        for m in expired:
            self._remove_member(group, m)
        if expired:
            self._update_target(group, topics, force=True)

    def _end_delay(self, group: StreamsGroup, now_ms: int) -> None:
        """At the end of the initial rebalance delay, the target the joins asked for."""
        until = group.assignment_delayed_until_ms
        if until is None or now_ms < until:
            return
        group.assignment_delayed_until_ms = None
        if group.members and group.assignment_epoch < group.group_epoch:
            self._compute_target(group)

    def next_deadline(self) -> int | None:
        best: int | None = None
        for group in self.groups.values():
            until = group.assignment_delayed_until_ms
            if until is not None and (best is None or until < best):
                best = until
            if not group.members:
                continue
            session = self.config.of(group.group_id).session_timeout_ms
            for m in group.members.values():
                deadline = m.last_heartbeat_ms + session
                if m.revocation_deadline_ms is not None:
                    deadline = min(deadline, m.revocation_deadline_ms)
                if best is None or deadline < best:
                    best = deadline
        return best

    def tick(self, topics: TopicsView, now_ms: int) -> None:
        """Expire members whose session or rebalance timeout passed; follow topic changes."""
        for group in list(self.groups.values()):
            self._expire(group, topics, now_ms)
            self._end_delay(group, now_ms)
            if group.members:
                self._update_target(group, topics, force=False)
            self._store(group)

    # -- StreamsGroupHeartbeat -----------------------------------------------------------------

    @staticmethod
    def _validate(req: HeartbeatRequest) -> str | None:
        """INVALID_REQUEST's message, or None (Kafka's throwIfStreamsGroupHeartbeatRequestIsInvalid)."""
        if not req.group_id:
            return "GroupId can't be empty."
        if not valid_group_id(req.group_id):
            return "GroupId is longer than 32767 bytes."
        if not req.member_id:
            return "MemberId can't be empty."
        if req.instance_id is not None and not req.instance_id:
            return "InstanceId can't be empty."
        if req.rack_id is not None and not req.rack_id:
            return "RackId can't be empty."
        if req.member_epoch == JOIN_EPOCH:
            if req.rebalance_timeout_ms == -1:
                return "RebalanceTimeoutMs must be provided in first request."
            if req.topology is None:
                return "Topology must be non-null when (re-)joining."
            if not req.process_id:
                return "ProcessId must be provided in first request."
            if req.owned is None or not req.owned.is_empty():
                return "ActiveTasks, StandbyTasks and WarmupTasks must be empty when (re-)joining."
        elif req.member_epoch < STATIC_LEAVE_EPOCH:
            return f"MemberEpoch is {req.member_epoch}, but must be greater than or equal to -2."
        elif req.member_epoch > 0 and req.topology is not None:
            return "Topology can only be provided when (re-)joining."
        for reported in (req.task_offsets, req.task_end_offsets):
            if reported is not None:
                nested = nested_offsets(reported)
                if isinstance(nested, str):
                    return nested
        return None

    def heartbeat(self, req: HeartbeatRequest, topics: TopicsView, now_ms: int,
                  creation_errors: Mapping[str, str] | None = None) -> HeartbeatResult:
        message = self._validate(req)
        if message is not None:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, message, req.member_id)
        if req.topology is not None:
            invalid = validate_topology(req.topology)
            if invalid is not None:
                return HeartbeatResult(ErrorCode.STREAMS_INVALID_TOPOLOGY, invalid, req.member_id)
        group = self.groups.get(req.group_id)
        if group is not None:
            self._expire(group, topics, now_ms)
            self._end_delay(group, now_ms)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, req, topics)
        if group is None:
            if req.member_epoch != JOIN_EPOCH:
                return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND,
                                       f"Streams group {req.group_id} not found.", req.member_id)
            # Kafka 4.4 starts a new streams group at epoch 1 (its first bump makes it 2)
            group = self.groups[req.group_id] = StreamsGroup(
                req.group_id, group_epoch=NEW_GROUP_EPOCH, assignment_epoch=NEW_GROUP_EPOCH)
            created = True
        else:
            created = False
        was_empty = not group.members
        member, error = self._member(group, req, now_ms)
        if error is not None:
            if created:
                self.groups.pop(group.group_id, None)
            return error
        assert member is not None
        endpoint_before, tasks_before = member.user_endpoint, member.assigned
        changed = self._update_member(group, member, req)
        settings = self.config.of(group.group_id)
        if not changed and group.last_assignment_configs != settings.assignment_configs():
            changed = True  # a GROUP config the assignment depends on changed: rebalance
        member.last_heartbeat_ms = now_ms
        if was_empty and settings.initial_rebalance_delay_ms > 0 \
                and group.assignment_delayed_until_ms is None:
            # Kafka waits this long for more members before a new group's first assignment
            group.assignment_delayed_until_ms = now_ms + settings.initial_rebalance_delay_ms
        if req.task_offsets is not None or req.task_end_offsets is not None:
            old = group.task_offsets.get(member.member_id, MemberTaskOffsets())
            offsets, ends = (old.offsets if req.task_offsets is None
                             else nested_offsets(req.task_offsets),
                             old.end_offsets if req.task_end_offsets is None
                             else nested_offsets(req.task_end_offsets))
            assert isinstance(offsets, dict) and isinstance(ends, dict)  # _validate checked
            group.task_offsets[member.member_id] = MemberTaskOffsets(offsets, ends)
        if req.shutdown_application and group.shutdown_requested_by is None:
            group.shutdown_requested_by = member.member_id  # the first asker (Kafka)
        self._update_target(group, topics, force=changed)
        self._reconcile(group, member, req.owned, now_ms)
        self._store(group)
        # Kafka sends the tasks when the member joins or they changed (not for an epoch alone)
        send = req.member_epoch == JOIN_EPOCH or member.assigned != tasks_before
        # Kafka's rule: the endpoint map changes when this member's endpoint does, or its tasks
        # do while it has one; a member whose epoch of it differs gets the map (maybe empty)
        if member.user_endpoint != endpoint_before or (
                member.user_endpoint is not None and member.assigned != tasks_before):
            group.endpoint_information_epoch += 1
        endpoints = None
        if req.endpoint_information_epoch != group.endpoint_information_epoch:
            endpoints = self._endpoints(group)
        return HeartbeatResult(
            ErrorCode.NONE, None, member.member_id, member.member_epoch,
            settings.heartbeat_interval_ms,
            self._status(group, member, creation_errors, settings, req.api_version),
            member.assigned if send else None, group.endpoint_information_epoch, endpoints,
            settings.task_offset_interval_ms, settings.acceptable_recovery_lag)

    @staticmethod
    def _endpoints(group: StreamsGroup
                   ) -> list[tuple[tuple[str, int], dict[str, list[int]], dict[str, list[int]]]]:
        """For each member with an endpoint (interactive queries), the partitions of the source
        and repartition source topics its active and standby tasks read (Kafka's
        EndpointToPartitionsManager)."""
        topics_of: dict[str, list[str]] = {}
        if group.topology is not None:
            for sub in group.topology.subtopologies:
                topics_of[sub.subtopology_id] = [*sub.source_topics,
                                                 *(t.name for t in sub.repartition_source_topics)]

        def partitions(tasks: Tasks) -> dict[str, list[int]]:
            out: dict[str, set[int]] = {}
            for sub_id, parts in tasks.items():
                for topic in topics_of.get(sub_id, ()):
                    out.setdefault(topic, set()).update(parts)
            return {t: sorted(p) for t, p in sorted(out.items())}

        return [(m.user_endpoint, partitions(m.assigned.active), partitions(m.assigned.standby))
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
                if m.user_endpoint is not None]

    def _status(self, group: StreamsGroup, member: StreamsMember,
                creation_errors: Mapping[str, str] | None,
                settings: StreamsGroupSettings | None = None, api_version: int = 1,
                ) -> tuple[tuple[Status, str], ...]:
        out: list[tuple[Status, str]] = []
        if group.topology is not None and member.topology_epoch < group.topology.epoch:
            out.append((Status.STALE_TOPOLOGY,
                        f"The member's topology epoch {member.topology_epoch} is behind the "
                        f"group's topology epoch {group.topology.epoch}."))
        if group.assignment_delayed_until_ms is not None:
            out.append((Status.ASSIGNMENT_DELAYED,
                        "Assignment delayed due to the configured initial rebalance delay."))
        if group.configured is not None:
            out.extend(group.configured.status)
        if creation_errors:
            out.append((Status.MISSING_INTERNAL_TOPICS, "Unable to create internal topics: "
                        + "; ".join(f"{n}: {e}" for n, e in sorted(creation_errors.items()))))
        if group.shutdown_requested_by is not None:
            out.append((Status.SHUTDOWN_APPLICATION,
                        f"Streams group member {group.shutdown_requested_by} encountered a fatal "
                        "error and requested a shutdown for the entire application."))
        if settings is not None and api_version >= 1 and settings.rack_aware_assignment_tags:
            have = {k for k, _ in member.client_tags}
            missing = [t for t in settings.rack_aware_assignment_tags if t not in have]
            if missing:
                out.append((Status.MISSING_CLIENT_TAGS,
                            "Missing required client tags for rack-aware standby assignment: "
                            f"[{', '.join(missing)}]. Configure them via 'client.tag.<tagKey>' "
                            "in your Streams config."))
        return tuple(out)

    def _member(self, group: StreamsGroup, req: HeartbeatRequest, now_ms: int
                ) -> tuple[StreamsMember | None, HeartbeatResult | None]:
        member = group.members.get(req.member_id)
        if req.member_epoch == JOIN_EPOCH:
            if req.topology is not None and group.topology is not None \
                    and req.topology.epoch != group.topology.epoch \
                    and any(m.member_id != req.member_id for m in group.members.values()):
                return None, HeartbeatResult(
                    ErrorCode.STREAMS_INVALID_TOPOLOGY_EPOCH,
                    f"Topology updates are not supported yet. Current topology epoch is "
                    f"{group.topology.epoch}, but received {req.topology.epoch}.",
                    req.member_id)
            if member is None:
                if len(group.members) >= self.config.max_size:
                    return None, HeartbeatResult(
                        ErrorCode.GROUP_MAX_SIZE_REACHED,
                        f"The streams group has reached its maximum capacity of "
                        f"{self.config.max_size} members.", req.member_id)
                member = group.members[req.member_id] = StreamsMember(req.member_id)
                member.last_heartbeat_ms = now_ms
            else:
                member.assigned = EMPTY_TASKS
                member.pending_revocation = EMPTY_TASKS
                member.revocation_deadline_ms = None
                member.state = MemberState.STABLE
                member.member_epoch = JOIN_EPOCH
            group.dirty_members.add(member.member_id)
            return member, None
        if member is None:
            return None, HeartbeatResult(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {req.member_id} is not a member of group {req.group_id}.",
                req.member_id)
        if req.member_epoch != member.member_epoch:
            lost_response = (req.member_epoch == member.previous_member_epoch
                             and req.owned is not None
                             and per_kind(minus, req.owned, member.assigned).is_empty())
            if not lost_response:
                return None, HeartbeatResult(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The streams group member has a {'greater' if req.member_epoch > member.member_epoch else 'smaller'} "
                    f"member epoch ({req.member_epoch}) than the one known by the group "
                    f"coordinator ({member.member_epoch}). The member must abandon all its "
                    "tasks and rejoin.", req.member_id)
        return member, None

    @staticmethod
    def _update_member(group: StreamsGroup, member: StreamsMember, req: HeartbeatRequest
                       ) -> bool:
        """Apply the request's non-null fields; True if the assignment depends on a change."""
        changed = False
        if req.topology is not None:
            if group.topology != req.topology:
                group.topology = req.topology
                group.dirty_topology = True
                changed = True
            if member.topology_epoch != req.topology.epoch:
                member.topology_epoch = req.topology.epoch
                group.dirty_members.add(member.member_id)
        if req.process_id is not None and req.process_id != member.process_id:
            member.process_id = req.process_id
            changed = True
        if req.member_epoch == JOIN_EPOCH:
            changed = True
        metadata = (req.instance_id or member.instance_id, req.rack_id or member.rack_id,
                    req.client_id, req.client_host,
                    member.rebalance_timeout_ms if req.rebalance_timeout_ms == -1
                    else req.rebalance_timeout_ms,
                    req.user_endpoint if req.user_endpoint is not None else member.user_endpoint,
                    req.client_tags if req.client_tags is not None else member.client_tags)
        if changed or metadata != (member.instance_id, member.rack_id, member.client_id,
                                   member.client_host, member.rebalance_timeout_ms,
                                   member.user_endpoint, member.client_tags):
            (member.instance_id, member.rack_id, member.client_id, member.client_host,
             member.rebalance_timeout_ms, member.user_endpoint, member.client_tags) = metadata
            group.dirty_members.add(member.member_id)
        return changed

    def _leave(self, group: StreamsGroup | None, req: HeartbeatRequest, topics: TopicsView
               ) -> HeartbeatResult:
        if group is None:
            return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND,
                                   f"Streams group {req.group_id} not found.", req.member_id)
        if req.shutdown_application and group.shutdown_requested_by is None:
            group.shutdown_requested_by = req.member_id  # before the member check, as Kafka
        member = group.members.get(req.member_id)
        if member is None:
            return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                   f"Member {req.member_id} is not a member of group "
                                   f"{req.group_id}.", req.member_id)
        if req.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            if member.member_epoch != STATIC_LEAVE_EPOCH:
                member.previous_member_epoch = member.member_epoch
            member.member_epoch = STATIC_LEAVE_EPOCH
            group.dirty_members.add(member.member_id)
        else:
            self._remove_member(group, member)
            self._update_target(group, topics, force=True)
        self._store(group)
        return HeartbeatResult(ErrorCode.NONE, None, member.member_id, req.member_epoch)

    # -- offsets -------------------------------------------------------------------------------

    def validate_offset_commit(
        self, group_id: str, member_id: str, member_epoch: int, api_version: int,
        partitions: Iterable[tuple[str, int]], transactional: bool = False,
    ) -> list[ErrorCode]:
        """OffsetCommit (v9+) or TxnOffsetCommit for a streams group, one code per partition
        (Kafka's StreamsGroup.validateOffsetCommit): no member and epoch -1 while Empty (admin
        tools), else the member must exist and commit with its current epoch."""
        group = self.groups[group_id]
        wanted = list(partitions)

        def every(code: ErrorCode) -> list[ErrorCode]:
            return [code] * len(wanted)

        if member_epoch < 0 and not member_id and (transactional or not group.members):
            return every(ErrorCode.NONE)
        member = group.members.get(member_id)
        if member is None:
            return every(ErrorCode.UNKNOWN_MEMBER_ID)
        if not transactional and api_version < 9:
            return every(ErrorCode.UNSUPPORTED_VERSION)
        if member_epoch != member.member_epoch:
            return every(ErrorCode.ILLEGAL_GENERATION if transactional
                         else ErrorCode.STALE_MEMBER_EPOCH)
        return every(ErrorCode.NONE)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int
                              ) -> ErrorCode:
        group = self.groups[group_id]
        if member_id is None or (member_epoch < 0 and not member_id):
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    # -- admin and persistence -----------------------------------------------------------------

    def _has_changes(self, group: StreamsGroup) -> bool:
        return bool(group.dirty_group or group.dirty_topology or group.dirty_members
                    or group.removed_members)

    def load_group(self, group: StreamsGroup, topics: TopicsView) -> None:
        """Restore a group read back from ``__consumer_offsets``: epochs, members, assignments
        as written; the topology configured against the topics as they are now."""
        if group.topology is not None:
            group.configured = configure(group.topology, topics, self._compile_regex)
            if group.configured.ready:
                group.task_counts = group.configured.task_counts
        self.groups[group.group_id] = group
