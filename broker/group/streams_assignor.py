"""The Streams protocol's broker-side task assignor (KIP-1071), after Kafka's ``StickyTaskAssignor``.
Pure: no I/O, no clock.

A task is ``(subtopology id, partition)``; a subtopology with N partitions has tasks 0..N-1. The
members of one Kafka Streams instance share a process id; the assignor balances tasks over
processes (by their member count) and then over the members of each process:

1. Active tasks, sticky: each task stays with the member that owns it now (its current active
   tasks, else its previous target) while that member is under the active quota
   (ceil(tasks / members)). Every other task goes to the least-loaded member (ties: a member
   of a process that held the task as a standby, which has its state; then the member id).
2. Standby tasks, ``num_standby_replicas`` per stateful task (one with changelog topics): never on
   the process of the task's active copy or of another copy; the previous standby owner first,
   then the least-loaded member of a process without a copy. Too few processes: fewer standbys,
   as Kafka does.
3. Warm-up tasks: none (Kafka 4.4 assigns them only when ``group.streams.num.warmup.replicas``
   is set, off by default; not served here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field

Tasks = dict[str, frozenset[int]]  # subtopology id -> partitions


@dataclass(frozen=True)
class MemberSpec:
    process_id: str
    active: Tasks = field(default_factory=dict)  # what the member owns or was last given
    standby: Tasks = field(default_factory=dict)


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
    owner: dict[tuple[str, int], str] = {}

    def load(m: str) -> int:
        return len(active[m])

    # 1. sticky actives (sorted, so that two claims to one task resolve the same way every time)
    for m in ids:
        for task in sorted(_flat(members[m].active) & valid):
            if task not in owner and load(m) < quota:
                active[m].add(task)
                owner[task] = m
    previous_standby: dict[tuple[str, int], set[str]] = {}
    for m in ids:
        for task in _flat(members[m].standby) & valid:
            previous_standby.setdefault(task, set()).add(members[m].process_id)
    for task in all_tasks:
        if task in owner:
            continue
        had_state = previous_standby.get(task, set())
        best = min(ids, key=lambda m: (load(m), members[m].process_id not in had_state, m))
        active[best].add(task)
        owner[task] = best

    # 2. standbys: a copy per process at most, never beside the active copy
    standby: dict[str, set[tuple[str, int]]] = {m: set() for m in ids}
    if num_standby_replicas > 0:
        def total(m: str) -> int:
            return len(active[m]) + len(standby[m])

        for task in all_tasks:
            if task[0] not in stateful:
                continue
            used = {members[owner[task]].process_id}
            for _ in range(num_standby_replicas):
                candidates = [m for m in ids if members[m].process_id not in used]
                if not candidates:
                    break
                had = {m for m in candidates if task in _flat(members[m].standby)}
                best = min(candidates, key=lambda m: (m not in had, total(m), m))
                standby[best].add(task)
                used.add(members[best].process_id)
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
