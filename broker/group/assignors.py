"""The broker-side assignors of the consumer group protocol (KIP-848): ``uniform`` and ``range``.
Pure functions: subscriptions and partition counts in, a target assignment out.

An assignment is ``{topic: frozenset(partitions)}``; a target assignment maps each member id to
one. What each assignor promises (Kafka's ``UniformAssignor`` and ``RangeAssignor`` of the
group coordinator, by their documented behaviour; the algorithms here are our own):

- ``uniform`` (the default, ``group.consumer.assignors``' first): every partition of every
  subscribed topic goes to one member subscribed to its topic; the counts are balanced (with one
  subscription shared by all members: they differ by at most one); the assignment is sticky (a
  partition stays with its member of the previous target assignment unless balance needs it
  elsewhere), so a rebalance moves as few partitions as it can.
- ``range``: per topic, the members subscribed to it, in member id order, take contiguous ranges
  of its partitions; the first ``partitions % members`` ranges are one longer. The same members
  subscribed to co-partitioned topics get the same partition numbers of each (joins on keys).

``assign(name, ...)`` raises ``KeyError`` for an unknown assignor (the coordinator checks names
against the configured list first: UNSUPPORTED_ASSIGNOR).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

Assignment = dict[str, frozenset[int]]
# member id -> the topics it subscribes to (names; resolved regexes included)
Subscriptions = Mapping[str, frozenset[str]]
# topic -> partition count (topics that do not exist are absent)
PartitionCounts = Mapping[str, int]
TargetAssignment = dict[str, Assignment]

UNIFORM = "uniform"
RANGE = "range"


def _to_assignment(partitions: set[tuple[str, int]]) -> Assignment:
    out: dict[str, set[int]] = {}
    for topic, index in partitions:
        out.setdefault(topic, set()).add(index)
    return {topic: frozenset(indexes) for topic, indexes in sorted(out.items())}


def uniform(
    subscriptions: Subscriptions, partitions: PartitionCounts, previous: Mapping[str, Assignment]
) -> TargetAssignment:
    """Balanced and sticky; see the module's docstring."""
    members = sorted(subscriptions)
    owned: dict[str, set[tuple[str, int]]] = {m: set() for m in members}
    owner: dict[tuple[str, int], str] = {}
    # 1. Stickiness: keep what each member had, where it is still subscribed and still exists.
    for member in members:
        topics = subscriptions[member]
        for topic, indexes in previous.get(member, {}).items():
            count = partitions.get(topic)
            if topic not in topics or count is None:
                continue
            for index in indexes:
                tp = (topic, index)
                if index < count and tp not in owner:
                    owner[tp] = member
                    owned[member].add(tp)
    subscribers: dict[str, list[str]] = {}
    for member in members:
        for topic in subscriptions[member]:
            if topic in partitions:
                subscribers.setdefault(topic, []).append(member)
    # 2. Members above their fair share (equal subscriptions) give back the excess first, so
    #    that step 3 hands it to the members below.
    total = sum(partitions[t] for t in subscribers)
    if members and all(subscriptions[m] == subscriptions[members[0]] for m in members):
        quota, extra = divmod(total, len(members))
        for member in sorted(members, key=lambda m: -len(owned[m])):
            keep = quota + (1 if extra > 0 else 0)
            if len(owned[member]) >= quota + 1 and extra > 0:
                extra -= 1
            elif len(owned[member]) > quota:
                keep = quota
            for tp in sorted(owned[member])[keep:]:
                owned[member].discard(tp)
                del owner[tp]
    # 3. Unassigned partitions, topics with the fewest subscribers first, each to the subscribed
    #    member that holds the fewest partitions (ties: member id).
    for topic in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        candidates = subscribers[topic]
        for index in range(partitions[topic]):
            tp = (topic, index)
            if tp in owner:
                continue
            member = min(candidates, key=lambda m: (len(owned[m]), m))
            owner[tp] = member
            owned[member].add(tp)
    # 4. Balance (unequal subscriptions): move a partition from a member to another subscriber
    #    of its topic holding at least two fewer, until no such move exists.
    moved = True
    while moved:
        moved = False
        for tp, member in sorted(owner.items()):
            target = min(subscribers[tp[0]], key=lambda m: (len(owned[m]), m))
            if len(owned[target]) + 1 < len(owned[member]):
                owned[member].discard(tp)
                owned[target].add(tp)
                owner[tp] = target
                moved = True
    return {member: _to_assignment(owned[member]) for member in members}


def range_(
    subscriptions: Subscriptions, partitions: PartitionCounts, previous: Mapping[str, Assignment]
) -> TargetAssignment:
    """Contiguous ranges per topic; see the module's docstring."""
    result: dict[str, dict[str, frozenset[int]]] = {m: {} for m in sorted(subscriptions)}
    topics = sorted({t for topics in subscriptions.values() for t in topics if t in partitions})
    for topic in topics:
        members = sorted(m for m, subscribed in subscriptions.items() if topic in subscribed)
        quota, extra = divmod(partitions[topic], len(members))
        start = 0
        for i, member in enumerate(members):
            size = quota + (1 if i < extra else 0)
            if size:
                result[member][topic] = frozenset(range(start, start + size))
            start += size
    return result


ASSIGNORS: dict[str, Callable[[Subscriptions, PartitionCounts, Mapping[str, Assignment]],
                              TargetAssignment]] = {UNIFORM: uniform, RANGE: range_}


def assign(
    name: str,
    subscriptions: Subscriptions,
    partitions: PartitionCounts,
    previous: Mapping[str, Assignment],
) -> TargetAssignment:
    """The target assignment of assignor ``name`` (KeyError if unknown)."""
    return ASSIGNORS[name](subscriptions, partitions, previous)
