"""The Streams protocol's broker-side task assignor (KIP-1071), after Kafka's ``StickyTaskAssignor``.
Pure: no I/O, no clock.

A task is ``(subtopology id, partition)``; a subtopology with N partitions has tasks 0..N-1. The
members of one Kafka Streams instance share a process id; the assignor balances tasks over
processes (by their member count) and then over the members of each process:

1. Active tasks, sticky: each task stays with the member that owns it now (its current active
   tasks, else its previous target) while that member is under the active quota
   (ceil(tasks / members)). A task left over goes to its best *state holder* under the quota
   (below), else to the least-loaded member (ties: the member id).
2. Standby tasks, ``num_standby_replicas`` per stateful task (one with changelog topics): never on
   the process of the task's active copy or of another copy; first the member that ran it as
   active before (its state is the freshest), then its best state holder, under the total quota
   (ceil((tasks + standbys) / members)); else the least-loaded member of a process without a
   copy. Too few processes: fewer standbys, as Kafka does.
3. Warm-up tasks: none. Kafka 4.4 computes them in a refinement step that returns the target
   unchanged (``AssignmentRefiner.refine``), so ``group.streams.num.warmup.replicas`` and
   ``acceptable.recovery.lag`` change nothing there; the heartbeat still hands them out.

State holders (Kafka 4.4's StickyTaskAssignor): the members that hold the task as a standby now,
then those that only report an offset for it in their heartbeats' TaskOffsets (state on local
disk, such as an instance restarted under a new member id); within each, the highest reported
offset sum first. The best is the first in that order unless a later one is less loaded both
by its process (tasks per member) and by itself. Rack-aware standbys: none (Kafka 4.4's sticky
assignor reads no client tags or racks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field

Tasks = dict[str, frozenset[int]]  # subtopology id -> partitions


TaskOffsets = Mapping[str, Mapping[int, int]]  # subtopology id -> partition -> offset sum


@dataclass(frozen=True)
class MemberSpec:
    process_id: str
    active: Tasks = field(default_factory=dict)  # what the member owns or was last given
    standby: Tasks = field(default_factory=dict)
    task_offsets: TaskOffsets = field(default_factory=dict)  # reported in its heartbeats


@dataclass
class MemberTasks:
    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)


def _flat(tasks: Tasks) -> set[tuple[str, int]]:
    return {(s, p) for s, parts in tasks.items() for p in parts}


def _grouped(tasks: Set[tuple[str, int]]) -> Tasks:
    out: dict[str, set[int]] = {}
    for s, p in tasks:
        out.setdefault(s, set()).add(p)
    return {s: frozenset(parts) for s, parts in sorted(out.items())}


def _state_holders(members: Mapping[str, MemberSpec], ids: list[str]
                   ) -> dict[tuple[str, int], list[str]]:
    """For each task, the members that hold its state, best first (see the module's doc)."""
    ranked: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
    for m in ids:
        spec = members[m]
        standby = _flat(spec.standby)
        for task in standby:
            offset = spec.task_offsets.get(task[0], {}).get(task[1], 0)
            ranked.setdefault(task, []).append((0, -offset, m))
        for sub, parts in spec.task_offsets.items():
            for partition, offset in parts.items():
                if (sub, partition) not in standby:
                    ranked.setdefault((sub, partition), []).append((1, -offset, m))
    # a stable sort on (standby first, highest offset first); ties keep the members' order
    return {task: [m for *_, m in sorted(c, key=lambda x: (x[0], x[1]))]
            for task, c in ranked.items()}


def assign_tasks(
    members: Mapping[str, MemberSpec],
    task_counts: Mapping[str, int],
    stateful: Set[str],
    num_standby_replicas: int = 0,
) -> dict[str, MemberTasks]:
    """The target assignment of every member (every member has an entry, maybe empty)."""
    if not members:
        return {}
    ids = sorted(members)
    all_tasks = sorted((s, p) for s, n in task_counts.items() for p in range(n))
    valid = set(all_tasks)
    quota = -(-len(all_tasks) // len(ids)) if all_tasks else 0
    active: dict[str, set[tuple[str, int]]] = {m: set() for m in ids}
    standby: dict[str, set[tuple[str, int]]] = {m: set() for m in ids}
    owner: dict[tuple[str, int], str] = {}
    process_size: dict[str, int] = {}
    for m in ids:
        process_size[members[m].process_id] = process_size.get(members[m].process_id, 0) + 1

    def load(m: str) -> int:
        return len(active[m])

    def total(m: str) -> int:
        return len(active[m]) + len(standby[m])

    def process_load(m: str) -> float:
        process = members[m].process_id
        return sum(total(o) for o in ids if members[o].process_id == process) \
            / process_size[process]

    def best_holder(candidates: list[str]) -> str | None:
        best = None
        for m in candidates:
            if best is None or (process_load(m) < process_load(best) and total(m) < total(best)):
                best = m
        return best

    holders = _state_holders(members, ids)

    # 1. sticky actives (sorted, so that two claims to one task resolve the same way every time)
    previous_active: dict[tuple[str, int], str] = {}
    for m in ids:
        for task in sorted(_flat(members[m].active) & valid):
            previous_active.setdefault(task, m)
            if task not in owner and load(m) < quota:
                active[m].add(task)
                owner[task] = m
    for task in all_tasks:  # then the state holders
        if task in owner:
            continue
        best = best_holder(holders.get(task, []))
        if best is not None and load(best) < quota:
            active[best].add(task)
            owner[task] = best
    for task in all_tasks:  # then the least loaded
        if task in owner:
            continue
        best = min(ids, key=lambda m: (load(m), m))
        active[best].add(task)
        owner[task] = best

    # 2. standbys: a copy per process at most, never beside the active copy
    if num_standby_replicas > 0:
        copies = len(all_tasks) + num_standby_replicas * sum(
            1 for t in all_tasks if t[0] in stateful)
        total_quota = -(-copies // len(ids))
        for task in all_tasks:
            if task[0] not in stateful:
                continue
            used = {members[owner[task]].process_id}
            for _ in range(num_standby_replicas):
                candidates = [m for m in ids if members[m].process_id not in used]
                if not candidates:
                    break
                chosen = None
                before = previous_active.get(task)
                if before in candidates and total(before) < total_quota:
                    chosen = before
                else:
                    best = best_holder([m for m in holders.get(task, []) if m in candidates])
                    if best is not None and total(best) < total_quota:
                        chosen = best
                if chosen is None:
                    chosen = min(candidates, key=lambda m: (total(m), m))
                standby[chosen].add(task)
                used.add(members[chosen].process_id)
    return {m: MemberTasks(_grouped(active[m]), _grouped(standby[m])) for m in ids}


# -- the tasks a member holds, and set operations per subtopology --------------------------------


@dataclass(frozen=True)
class TaskSet:
    """Active, standby and warm-up tasks (subtopology id -> partitions)."""

    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)


EMPTY_TASKS = TaskSet()


def normalized(tasks: Mapping[str, Iterable[int]]) -> Tasks:
    return {s: frozenset(p) for s, p in sorted(tasks.items()) if p}


def minus(a: Tasks, b: Tasks) -> Tasks:
    return normalized({s: p - b.get(s, frozenset()) for s, p in a.items()})


def intersect(a: Tasks, b: Tasks) -> Tasks:
    return normalized({s: p & b.get(s, frozenset()) for s, p in a.items()})


def union(a: Tasks, b: Tasks) -> Tasks:
    out = dict(a)
    for s, p in b.items():
        out[s] = out.get(s, frozenset()) | p
    return normalized(out)


def per_kind(op: Callable[[Tasks, Tasks], Tasks], a: TaskSet, b: TaskSet) -> TaskSet:
    return TaskSet(op(a.active, b.active), op(a.standby, b.standby), op(a.warmup, b.warmup))
