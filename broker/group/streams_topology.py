"""A Streams group's topology (KIP-1071): what a member sends (subtopologies, their source,
repartition and changelog topics, copartition groups), its validation, and ``configure``, which
sets it against the topics that exist: repartition widths, tasks per subtopology and the
heartbeat's status codes when the topology cannot run yet. Pure: no I/O, no clock. The group and
its members are ``streams_group.py``'s."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.group.consumer_model import RegexCompiler, TopicsView, _re2_compiler


class Status(enum.IntEnum):
    """StreamsGroupHeartbeatResponse's status codes."""

    STALE_TOPOLOGY = 0
    MISSING_SOURCE_TOPICS = 1
    INCORRECTLY_PARTITIONED_TOPICS = 2
    MISSING_INTERNAL_TOPICS = 3
    SHUTDOWN_APPLICATION = 4
    ASSIGNMENT_DELAYED = 5  # Kafka's initial delay / assignment interval (not used here)
    MISSING_CLIENT_TAGS = 6  # v1: the member lacks a tag of streams.rack.aware.assignment.tags


# -- the topology ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int = 0  # 0: not fixed (repartition: derived; changelog: always derived)
    replication_factor: int = 0
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class CopartitionGroup:
    source_topics: tuple[int, ...] = ()  # indexes into the subtopology's lists
    source_topic_regex: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()


@dataclass(frozen=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()


@dataclass(frozen=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...] = ()


def validate_topology(topology: Topology) -> str | None:
    """STREAMS_INVALID_TOPOLOGY's message, or None (Kafka's topology checks)."""
    seen: set[str] = set()
    sources: set[str] = set()
    for sub in topology.subtopologies:
        if not sub.subtopology_id:
            return "Subtopology IDs must be non-empty."
        if sub.subtopology_id in seen:
            return f"Subtopology ID {sub.subtopology_id} is not unique."
        seen.add(sub.subtopology_id)
        if not sub.source_topics and not sub.source_topic_regex \
                and not sub.repartition_source_topics:
            return f"Subtopology {sub.subtopology_id} has no source topics."
        for group in sub.copartition_groups:
            for indexes, items in ((group.source_topics, sub.source_topics),
                                   (group.source_topic_regex, sub.source_topic_regex),
                                   (group.repartition_source_topics,
                                    sub.repartition_source_topics)):
                for i in indexes:
                    if not 0 <= i < len(items):
                        return (f"Copartition group of subtopology {sub.subtopology_id} refers "
                                f"to index {i}, which is out of range.")
        for t in sub.repartition_source_topics:
            if t.partitions < 0:
                return f"Repartition topic {t.name} has a negative partition count."
        sources.update(sub.source_topics)
        sources.update(t.name for t in sub.repartition_source_topics)
    internal = {t.name for sub in topology.subtopologies for t in sub.state_changelog_topics}
    clash = sorted(internal & sources)
    if clash:
        return f"Changelog topics {clash} are also source topics."
    return None


@dataclass
class ConfiguredTopology:
    """What the topology is against the topics that exist now."""

    task_counts: dict[str, int] = field(default_factory=dict)  # subtopology -> tasks
    internal_topics: dict[str, TopicInfo] = field(default_factory=dict)  # with partitions
    status: list[tuple[Status, str]] = field(default_factory=list)
    ready: bool = False


def _regex_matches(patterns: Iterable[str], topics: TopicsView,
                   compile_regex: RegexCompiler) -> list[str]:
    all_topics = topics.topics()
    out: set[str] = set()
    for pattern in patterns:
        try:
            match = compile_regex(pattern)
        except ValueError:
            continue
        out.update(t for t in all_topics if not t.startswith("__") and match(t))
    return sorted(out)


def configure(topology: Topology, topics: TopicsView,
              compile_regex: RegexCompiler = _re2_compiler) -> ConfiguredTopology:
    """Partition counts of the repartition and changelog topics and of every subtopology's tasks
    (Kafka's InternalTopicManager.configureTopics), with the statuses that keep it not ready."""
    out = ConfiguredTopology()
    missing = sorted({t for sub in topology.subtopologies for t in sub.source_topics
                      if topics.partition_count(t) is None})
    regex_sources = {sub.subtopology_id: _regex_matches(sub.source_topic_regex, topics,
                                                         compile_regex)
                     for sub in topology.subtopologies if sub.source_topic_regex}
    for sub in topology.subtopologies:
        if sub.source_topic_regex and not regex_sources[sub.subtopology_id] \
                and not sub.source_topics:
            missing.append(f"regex {list(sub.source_topic_regex)}")
    if missing:
        out.status.append((Status.MISSING_SOURCE_TOPICS,
                           f"Source topics {', '.join(missing)} are missing."))
        return out
    # Repartition topics: fixed counts first, then the writers' counts to a fixed point.
    repartition: dict[str, int] = {}
    for sub in topology.subtopologies:
        for t in sub.repartition_source_topics:
            if t.partitions > 0:
                repartition[t.name] = t.partitions

    def source_count(sub: Subtopology) -> int | None:
        counts = [topics.partition_count(t) or 0 for t in sub.source_topics]
        counts += [topics.partition_count(t) or 0 for t in regex_sources.get(sub.subtopology_id, ())]
        for t in sub.repartition_source_topics:
            if t.name not in repartition:
                return None
            counts.append(repartition[t.name])
        return max(counts) if counts else None

    names = {t.name for sub in topology.subtopologies for t in sub.repartition_source_topics}
    for _ in range(len(names) + 1):
        progress = False
        for name in sorted(names - repartition.keys()):
            writers = [source_count(s) for s in topology.subtopologies
                       if name in s.repartition_sink_topics]
            known = [c for c in writers if c is not None]
            if known and len(known) == len(writers):
                repartition[name] = max(known)
                progress = True
        if not progress:
            break
    unresolved = sorted(names - repartition.keys())
    if unresolved:
        out.status.append((Status.INCORRECTLY_PARTITIONED_TOPICS,
                           f"Number of partitions of repartition topics {unresolved} could "
                           "not be determined."))
        return out
    # Copartition groups: every topic of a group has one count (repartition topics not fixed
    # by the topology follow the others).
    for sub in topology.subtopologies:
        for group in sub.copartition_groups:
            external = [sub.source_topics[i] for i in group.source_topics]
            internal = [sub.repartition_source_topics[i] for i in group.repartition_source_topics]
            counts = {t: topics.partition_count(t) or 0 for t in external}
            if len(set(counts.values())) > 1:
                out.status.append((Status.INCORRECTLY_PARTITIONED_TOPICS,
                                   f"Following topics do not have the same number of "
                                   f"partitions: [{', '.join(sorted(counts))}]"))
                return out
            target = (next(iter(counts.values())) if counts
                      else max((repartition[t.name] for t in internal), default=0))
            for t in internal:
                if t.partitions <= 0:
                    repartition[t.name] = target
    for sub in topology.subtopologies:
        count = source_count(sub) or 0
        out.task_counts[sub.subtopology_id] = count
        for t in sub.repartition_source_topics:
            out.internal_topics[t.name] = TopicInfo(t.name, repartition[t.name],
                                                    t.replication_factor, t.configs)
        for t in sub.state_changelog_topics:
            out.internal_topics[t.name] = TopicInfo(t.name, count, t.replication_factor,
                                                    t.configs)
    wrong = sorted(name for name, t in out.internal_topics.items()
                   if topics.partition_count(name) not in (None, t.partitions))
    if wrong:
        out.status.append((Status.INCORRECTLY_PARTITIONED_TOPICS,
                           f"Internal topics {', '.join(wrong)} have the wrong number of "
                           "partitions."))
        return out
    absent = sorted(n for n in out.internal_topics if topics.partition_count(n) is None)
    if absent:
        out.status.append((Status.MISSING_INTERNAL_TOPICS,
                           f"Internal topics are missing: [{', '.join(absent)}]"))
        return out
    out.ready = True
    return out
