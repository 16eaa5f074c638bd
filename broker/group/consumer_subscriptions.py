"""What the members of a consumer-protocol group subscribe to (KIP-848): topic names and RE2
regexes, resolved against the topics that exist, and the server assignor the group uses. Pure:
no I/O, no clock (``now_ms`` passed in); ``consumer_group.py`` decides what a change does to the
group epoch.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.group.consumer_model import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerMember,
    RegexCompiler,
    TopicsView,
)


class Subscriptions:
    """The subscription rules of one coordinator, with its cache of compiled regexes."""

    def __init__(self, config: ConsumerGroupConfig, compile_regex: RegexCompiler) -> None:
        self.config = config
        self._compile_regex = compile_regex
        self._regexes: dict[str, Callable[[str], bool]] = {}

    def matcher(self, pattern: str) -> Callable[[str], bool]:
        matcher = self._regexes.get(pattern)
        if matcher is None:
            if len(self._regexes) > 1024:
                self._regexes.clear()
            matcher = self._regexes[pattern] = self._compile_regex(pattern)
        return matcher

    def member_topics(self, group: ConsumerGroup, member: ConsumerMember,
                       topics: TopicsView) -> set[str]:
        """The existing topics the member subscribes to (names, and its regex's topics as
        last resolved: ``_resolve_regexes``)."""
        names = {t for t in member.subscribed_topic_names if topics.partition_count(t) is not None}
        if member.subscribed_topic_regex is not None:
            names.update(t for t in group.resolved.get(member.subscribed_topic_regex, ())
                         if topics.partition_count(t) is not None)
        return names

    def of(self, group: ConsumerGroup, topics: TopicsView
                       ) -> tuple[dict[str, frozenset[str]], dict[str, int]]:
        subscriptions = {m.member_id: frozenset(self.member_topics(group, m, topics))
                         for m in group.members.values()}
        counts: dict[str, int] = {}
        for subscribed in subscriptions.values():
            for topic in subscribed:
                if topic not in counts:
                    counts[topic] = topics.partition_count(topic) or 0
        return subscriptions, counts

    def choose_assignor(self, group: ConsumerGroup) -> str:
        votes: dict[str, int] = {}
        for m in group.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return self.config.assignors[0]
        best = max(votes.values())
        return min(name for name, n in votes.items() if n == best)

    def watch(self, group: ConsumerGroup) -> None:
        """What a heartbeat checks for topic changes without visiting every member: the
        topics subscribed by name or by a resolved regex (after a membership or subscription
        change); the resolutions of regexes no member uses any more are dropped."""
        regexes = {m.subscribed_topic_regex for m in group.members.values()
                   if m.subscribed_topic_regex}
        group.resolved = {r: t for r, t in group.resolved.items() if r in regexes}
        group.has_regex = bool(regexes)
        group.watched = frozenset(
            [t for m in group.members.values() for t in m.subscribed_topic_names]
            + [t for resolved in group.resolved.values() for t in resolved])

    def resolve_regexes(self, group: ConsumerGroup, topics: TopicsView, now_ms: int) -> bool:
        """Kafka resolves a group's regexes off the request path (a background task whose
        result bumps the group epoch if the matched topics changed): a member subscribing to
        a regex no other member uses gets its answer first, at the unchanged epoch, and its
        partitions once the resolution bumped the epoch. Here the resolution runs right after
        such a heartbeat, and after others at most once per heartbeat interval (new topics).
        Returns whether a regex now matches other topics (the caller bumps the epoch)."""
        if not group.regex_pending and (not group.has_regex
                                        or now_ms < group.next_regex_check_ms):
            return False
        group.regex_pending = False
        group.next_regex_check_ms = now_ms + self.config.heartbeat_interval_ms
        names = [t for t in topics.topics() if t not in self.config.internal_topics]
        changed = False
        for regex in {m.subscribed_topic_regex for m in group.members.values()
                      if m.subscribed_topic_regex}:
            try:
                match = self.matcher(regex)
            except ValueError:
                continue
            matched = frozenset(t for t in names if match(t))
            if matched != group.resolved.get(regex, frozenset()):
                changed = True
            group.resolved[regex] = matched
        self.watch(group)
        return changed
