"""The pure group coordinator with a driven clock: join, sync, heartbeat, leave, expiry, rebalance
timeouts, generations, protocol selection, offset-commit checks."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.group.coordinator import (
    GroupConfig,
    GroupCoordinator,
    JoinResult,
    Outcome,
    SyncResult,
    Waiting,
)
from broker.group.offsets import OffsetAndMetadata
from broker.group.state import GroupState
from protocol.errors import ErrorCode

SESSION = 10_000
REBALANCE = 30_000
DELAY = 100
RANGE = (("range", b"range-meta"),)


class Harness:
    """A coordinator, a clock, and the answers delivered to waiting requests."""

    def __init__(self, delay: int = DELAY, min_session: int = 1_000, max_session: int = 60_000):
        ids = itertools.count(1)
        self.c = GroupCoordinator(
            GroupConfig(min_session, max_session, delay),
            new_member_id=lambda client: f"{client}-{next(ids)}",
        )
        self.now = 0
        self.answers: dict[int, JoinResult | SyncResult] = {}

    def absorb(self, outcome: Outcome):
        for waiter, result in outcome.completions:
            assert waiter not in self.answers, f"waiter {waiter} answered twice"
            self.answers[waiter] = result
        return outcome.reply

    def answer(self, reply):
        """The result for a reply: itself, or what its waiter got (None while it waits)."""
        if isinstance(reply, Waiting):
            return self.answers.get(reply.waiter)
        return reply

    def at(self, t: int) -> Harness:
        self.now = t
        return self

    def tick(self, t: int) -> None:
        self.now = t
        for waiter, result in self.c.tick(t):
            assert waiter not in self.answers
            self.answers[waiter] = result

    def join(self, member_id="", client="c", protocols=RANGE, session=SESSION,
             rebalance=REBALANCE, group="g", protocol_type="consumer"):
        return self.absorb(self.c.join_group(group, member_id, client, "/127.0.0.1", session,
                                             rebalance, protocol_type, protocols, self.now))

    def sync(self, member_id, generation, assignments=None, group="g"):
        return self.absorb(self.c.sync_group(group, generation, member_id, assignments or {},
                                             self.now))

    def heartbeat(self, member_id, generation, group="g"):
        return self.absorb(self.c.heartbeat(group, generation, member_id, self.now))

    def leave(self, member_id, group="g"):
        return self.absorb(self.c.leave_group(group, member_id, self.now))

    def state(self, group="g") -> GroupState:
        return self.c.groups[group].state

    def end_initial_delay(self) -> None:
        """Members that joined together: the delay runs out once, then once more for them."""
        self.tick(self.now + DELAY)
        self.tick(self.now + DELAY)

    def stable_group(self, n: int) -> list[str]:
        """n members joined in the initial delay, synced: a Stable group at generation 1."""
        replies = [self.join(client=f"m{i}") for i in range(n)]
        self.end_initial_delay()
        results = [self.answer(r) for r in replies]
        assert all(r is not None and r.error == ErrorCode.NONE for r in results)
        ids = [r.member_id for r in results]
        leader = results[0].leader
        follower_syncs = [self.sync(m, 1) for m in ids if m != leader]
        self.sync(leader, 1, {m: m.encode() for m in ids})
        assert all(self.answer(s).error == ErrorCode.NONE for s in follower_syncs)
        assert self.state() is GroupState.STABLE
        return ids


# -- joining -------------------------------------------------------------------------------------


def test_first_join_waits_for_the_initial_delay_then_leads() -> None:
    h = Harness()
    reply = h.join(client="app")
    assert isinstance(reply, Waiting)
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.c.next_deadline() == DELAY
    h.tick(DELAY - 1)
    assert h.answer(reply) is None
    h.tick(DELAY)
    result = h.answer(reply)
    assert result.error == ErrorCode.NONE
    assert result.generation_id == 1
    assert result.member_id == "app-1" and result.leader == "app-1"
    assert result.protocol_name == "range"
    assert result.members == (("app-1", b"range-meta"),)
    assert h.state() is GroupState.COMPLETING_REBALANCE
    sync = h.sync("app-1", 1, {"app-1": b"assignment"})
    assert sync == SyncResult(ErrorCode.NONE, b"assignment")
    assert h.state() is GroupState.STABLE


def test_default_member_id_is_client_id_dash_uuid() -> None:
    c = GroupCoordinator(GroupConfig(1000, 60000, 0))
    c.join_group("g", "", "my-client", "", SESSION, REBALANCE, "consumer", RANGE, 0)
    (member_id,) = c.groups["g"].members
    assert re.fullmatch(r"my-client-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", member_id)


def test_members_joining_during_the_delay_extend_it_and_share_a_generation() -> None:
    h = Harness()
    a = h.at(0).join(client="a")
    b = h.at(50).join(client="b")
    h.tick(DELAY)  # b arrived during the delay: wait once more
    assert h.answer(a) is None and h.c.next_deadline() == 2 * DELAY
    h.tick(2 * DELAY)
    ra, rb = h.answer(a), h.answer(b)
    assert ra.generation_id == rb.generation_id == 1
    assert ra.leader == rb.leader == "a-1"
    assert [m for m, _ in ra.members] == ["a-1", "b-2"]
    assert rb.members == ()  # only the leader gets the member list


def test_initial_delay_is_bounded_by_the_rebalance_timeout() -> None:
    h = Harness()
    a = h.at(0).join(client="a", rebalance=250)
    h.at(50).join(client="b", rebalance=250)
    h.tick(100)  # extended to 200, 50 ms of budget left
    h.at(150).join(client="c", rebalance=250)
    h.tick(200)  # extended by min(100, 50) to 250; budget exhausted
    h.at(220).join(client="d", rebalance=250)
    h.tick(249)
    assert h.answer(a) is None
    h.tick(250)
    assert len(h.answer(a).members) == 4


def test_zero_initial_delay_completes_on_the_next_tick() -> None:
    h = Harness(delay=0)
    reply = h.join()
    assert isinstance(reply, Waiting) and h.c.next_deadline() == 0
    h.tick(0)
    assert h.answer(reply).generation_id == 1


@pytest.mark.parametrize(
    ("protocols", "expected"),
    [
        # only roundrobin is supported by everyone
        ([[("range", b""), ("roundrobin", b"")], [("roundrobin", b""), ("range", b"")],
          [("roundrobin", b"")]], "roundrobin"),
        # both are common; range is the first choice of two members out of three
        ([[("range", b""), ("roundrobin", b"")], [("range", b""), ("roundrobin", b"")],
          [("roundrobin", b""), ("range", b"")]], "range"),
        # a tie is broken by the leader's preference
        ([[("roundrobin", b""), ("range", b"")], [("range", b""), ("roundrobin", b"")]],
         "roundrobin"),
    ],
)
def test_protocol_selection(protocols, expected) -> None:
    h = Harness()
    replies = [h.join(client=f"m{i}", protocols=tuple(p)) for i, p in enumerate(protocols)]
    h.end_initial_delay()
    assert {h.answer(r).protocol_name for r in replies} == {expected}


def test_leader_gets_each_members_metadata_of_the_chosen_protocol() -> None:
    h = Harness()
    a = h.join(client="a", protocols=(("range", b"a-range"), ("roundrobin", b"a-rr")))
    h.join(client="b", protocols=(("roundrobin", b"b-rr"),))
    h.end_initial_delay()
    assert h.answer(a).members == (("a-1", b"a-rr"), ("b-2", b"b-rr"))


@pytest.mark.parametrize(
    ("protocol_type", "protocols"),
    [("consumer", (("sticky", b""),)), ("connect", RANGE), ("consumer", ()), ("", RANGE)],
)
def test_inconsistent_protocol(protocol_type, protocols) -> None:
    h = Harness()
    h.join(client="a")
    reply = h.join(client="b", protocol_type=protocol_type, protocols=protocols)
    assert reply.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert len(h.c.groups["g"].members) == 1


def test_a_lone_member_may_change_its_protocols() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    result = h.join(member_id=a, protocol_type="connect", protocols=(("sessioned", b"s"),))
    assert (result.generation_id, result.protocol_name) == (2, "sessioned")
    assert h.c.groups["g"].protocol_type == "connect"
    assert h.join(client="b").error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL  # consumer/range


@pytest.mark.parametrize("stable", [False, True])
def test_sync_names_the_groups_protocol(stable) -> None:
    """SyncGroup v5 (KIP-559): a protocol type or name other than the group's is refused after
    the generation check, in CompletingRebalance as in Stable (Kafka's validateSyncGroup)."""
    h = Harness()
    reply = h.join(client="a")
    h.end_initial_delay()
    a = h.answer(reply).member_id
    if stable:
        h.sync(a, 1, {a: b"x"})

    def sync(generation=1, protocol_type="consumer", protocol_name="range"):
        return h.absorb(h.c.sync_group("g", generation, a, {a: b"x"}, h.now,
                                       protocol_type=protocol_type, protocol_name=protocol_name))

    assert sync(protocol_name="roundrobin").error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert sync(protocol_type="connect").error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert sync(generation=2, protocol_name="roundrobin").error == ErrorCode.ILLEGAL_GENERATION
    assert sync(protocol_type=None, protocol_name=None).error == ErrorCode.NONE


def test_empty_group_needs_a_protocol() -> None:
    h = Harness()
    assert h.join(protocols=()).error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(protocol_type="").error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


@pytest.mark.parametrize("session", [999, 60_001, -1])
def test_session_timeout_out_of_range(session) -> None:
    h = Harness()
    assert h.join(session=session).error == ErrorCode.INVALID_SESSION_TIMEOUT
    assert "g" not in h.c.groups


@pytest.mark.parametrize("session", [6_000, 10_000, 30_000, 45_000, 1_800_000])
def test_kafka_default_bounds_accept_what_clients_send(session) -> None:
    c = GroupCoordinator(GroupConfig())  # group.min/max.session.timeout.ms defaults
    out = c.join_group("g", "", "c", "", session, REBALANCE, "consumer", RANGE, 0)
    assert isinstance(out.reply, Waiting)


def test_unknown_member_and_invalid_group() -> None:
    h = Harness()
    assert h.join(member_id="ghost").error == ErrorCode.UNKNOWN_MEMBER_ID  # unknown group
    h.join(client="a")
    assert h.join(member_id="ghost").error == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.join(group="").error == ErrorCode.INVALID_GROUP_ID


# -- rebalances of a stable group ----------------------------------------------------------------


def test_new_member_triggers_rebalance_existing_members_learn_from_heartbeat() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    assert h.heartbeat(a, 1) == ErrorCode.NONE
    c = h.at(1_000).join(client="new")
    assert isinstance(c, Waiting) and h.state() is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(a, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    ra = h.join(member_id=a)
    assert isinstance(ra, Waiting)
    rb = h.join(member_id=b)  # the last one: completes at once, no timer needed
    results = [h.answer(r) for r in (ra, rb, c)]
    assert all(r.generation_id == 2 for r in results)
    assert h.answer(rb).generation_id == 2 and rb.member_id == b
    assert {r.leader for r in results} == {a}  # the first member still leads
    assert [m for m, _ in h.answer(ra).members] == [a, b, "new-3"]
    assert h.state() is GroupState.COMPLETING_REBALANCE
    assert h.heartbeat(a, 1) == ErrorCode.ILLEGAL_GENERATION


def test_follower_rejoin_with_same_metadata_keeps_the_generation() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    reply = h.join(member_id=b)
    assert reply == JoinResult(ErrorCode.NONE, 1, "range", a, b, ())
    assert h.state() is GroupState.STABLE


def test_leader_rejoin_or_changed_metadata_rebalances() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    assert isinstance(h.join(member_id=a), Waiting)
    assert h.state() is GroupState.PREPARING_REBALANCE
    h2 = Harness()
    a, b = h2.stable_group(2)
    assert isinstance(h2.join(member_id=b, protocols=(("range", b"new"),)), Waiting)
    assert h2.state() is GroupState.PREPARING_REBALANCE


def test_single_member_rejoin_completes_immediately() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    result = h.join(member_id=a)
    assert result.generation_id == 2 and result.members == ((a, b"range-meta"),)


def test_retried_join_supersedes_the_waiting_one() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    first = h.join(member_id=a)
    second = h.join(member_id=a)
    assert h.answer(first).error == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.answer(second) is None
    h.join(member_id=b)
    assert h.answer(second).generation_id == 2


def test_rebalance_timeout_drops_members_that_did_not_rejoin() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    start = h.now
    ra = h.join(member_id=a, rebalance=5_000)
    # The largest rebalance timeout of the group's members bounds the join phase.
    assert h.c.groups["g"].rebalance_deadline_ms == start + REBALANCE
    for t in range(start, start + REBALANCE, 2_000):  # b stays alive but never rejoins
        assert h.at(t).heartbeat(b, 1) == ErrorCode.REBALANCE_IN_PROGRESS
        h.tick(t)
    h.tick(start + REBALANCE - 1)
    assert h.answer(ra) is None
    h.tick(start + REBALANCE)
    result = h.answer(ra)
    assert result.generation_id == 2 and [m for m, _ in result.members] == [a]
    assert h.heartbeat(b, 1) == ErrorCode.UNKNOWN_MEMBER_ID


def test_waiting_members_do_not_expire() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    start = h.now
    ra = h.join(member_id=a)
    # a waits in JoinGroup longer than its session; b heartbeats
    for t in range(start, start + 3 * SESSION, 2_000):
        h.at(t).heartbeat(b, 1)
        h.tick(t)
    assert a in h.c.groups["g"].members and h.answer(ra) is None
    h.join(member_id=b)
    assert h.answer(ra).generation_id == 2


# -- sync ----------------------------------------------------------------------------------------


def test_followers_wait_for_the_leaders_assignment() -> None:
    h = Harness()
    ra, rb, rc = h.join(client="a"), h.join(client="b"), h.join(client="c")
    h.end_initial_delay()
    a, b, c = (h.answer(r).member_id for r in (ra, rb, rc))
    sb = h.sync(b, 1)
    assert isinstance(sb, Waiting) and h.answer(sb) is None
    assert h.heartbeat(b, 1) == ErrorCode.REBALANCE_IN_PROGRESS  # not Stable yet
    sa = h.sync(a, 1, {a: b"A", b: b"B", "stranger": b"X"})  # c missing: gets nothing
    assert sa == SyncResult(ErrorCode.NONE, b"A")
    assert h.answer(sb) == SyncResult(ErrorCode.NONE, b"B")
    assert h.sync(c, 1) == SyncResult(ErrorCode.NONE, b"")  # Stable: answered at once
    assert h.sync(b, 1) == SyncResult(ErrorCode.NONE, b"B")
    assert h.heartbeat(c, 1) == ErrorCode.NONE


def test_sync_errors() -> None:
    h = Harness()
    assert h.sync("x", 1).error == ErrorCode.UNKNOWN_MEMBER_ID  # unknown group
    a, b = h.stable_group(2)
    assert h.sync("x", 1).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.sync(a, 7).error == ErrorCode.ILLEGAL_GENERATION
    h.join(member_id=a)
    assert h.sync(b, 1).error == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.sync("", 1, group="").error == ErrorCode.INVALID_GROUP_ID


def test_join_during_completing_rebalance_sends_waiting_syncs_back() -> None:
    h = Harness()
    h.join(client="a")
    rb = h.join(client="b")
    h.end_initial_delay()
    b = h.answer(rb).member_id
    sb = h.sync(b, 1)
    h.join(client="late")
    assert h.answer(sb) == SyncResult(ErrorCode.REBALANCE_IN_PROGRESS, b"")
    assert h.state() is GroupState.PREPARING_REBALANCE


def test_rejoin_in_completing_rebalance_with_same_metadata_returns_current_generation() -> None:
    h = Harness()
    ra, rb = h.join(client="a"), h.join(client="b")
    h.end_initial_delay()
    a, b = h.answer(ra).member_id, h.answer(rb).member_id
    again = h.join(member_id=a)  # the leader lost its answer: gets it again, members included
    assert again == h.answer(ra)
    assert h.join(member_id=b) == h.answer(rb)
    assert h.state() is GroupState.COMPLETING_REBALANCE


def test_leader_session_expiry_releases_waiting_followers() -> None:
    h = Harness()
    h.join(client="a")
    rb = h.join(client="b")
    h.end_initial_delay()
    b = h.answer(rb).member_id
    joined = h.now
    sb = h.sync(b, 1)  # the leader never sends its SyncGroup
    assert h.c.next_deadline() == joined + SESSION
    h.tick(joined + SESSION)
    assert h.answer(sb).error == ErrorCode.REBALANCE_IN_PROGRESS
    assert list(h.c.groups["g"].members) == [b] and h.c.groups["g"].leader_id == b


# -- heartbeat, leave, expiry --------------------------------------------------------------------


def test_heartbeat_errors() -> None:
    h = Harness()
    assert h.heartbeat("x", 1) == ErrorCode.UNKNOWN_MEMBER_ID  # unknown group
    a, _ = h.stable_group(2)
    assert h.heartbeat("x", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat(a, 0) == ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat(a, 1) == ErrorCode.NONE
    assert h.heartbeat("", 1, group="") == ErrorCode.INVALID_GROUP_ID


def test_leave_rebalances_and_moves_leadership() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    assert h.leave(a) == ErrorCode.NONE
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(b, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    result = h.join(member_id=b)
    assert result.generation_id == 2 and result.leader == b and result.members == ((b, b"range-meta"),)
    assert h.leave(a) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.leave("x", group="nope") == ErrorCode.UNKNOWN_MEMBER_ID


def test_last_member_leaving_empties_the_group() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    assert h.leave(a) == ErrorCode.NONE
    group = h.c.groups["g"]
    assert group.state is GroupState.EMPTY and group.generation_id == 2 and not group.members
    assert group.leader_id is None and group.protocol is None


def test_leaving_while_waiting_in_join_answers_the_join() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    ra = h.join(member_id=a)
    assert h.leave(a) == ErrorCode.NONE
    assert h.answer(ra).error == ErrorCode.UNKNOWN_MEMBER_ID


def test_expired_session_removes_member_and_rebalances() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    start = h.now
    for t in range(start, start + SESSION, 2_000):
        h.at(t).heartbeat(b, 1)  # only b heartbeats
    assert h.c.next_deadline() == start + SESSION  # a's session
    h.tick(start + SESSION - 1)
    assert a in h.c.groups["g"].members
    h.tick(start + SESSION)
    assert a not in h.c.groups["g"].members
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(b, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.join(member_id=b).generation_id == 2


def test_expiry_is_also_driven_by_requests_without_tick() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    h.at(h.now + 5_000).heartbeat(b, 1)
    assert h.at(h.now + SESSION - 4_999).heartbeat(a, 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.state() is GroupState.PREPARING_REBALANCE


def test_next_deadline_none_when_idle() -> None:
    h = Harness()
    assert h.c.next_deadline() is None
    (a,) = h.stable_group(1)
    h.leave(a)
    assert h.c.next_deadline() is None


# -- offsets and admin ---------------------------------------------------------------------------


def commit(h: Harness, generation: int, member_id: str, group="g") -> ErrorCode:
    return h.absorb(h.c.validate_offset_commit(group, generation, member_id, h.now))


def test_offset_commit_checks() -> None:
    h = Harness()
    assert commit(h, 3, "", group="standalone") == ErrorCode.ILLEGAL_GENERATION
    assert "standalone" not in h.c.groups
    assert commit(h, -1, "", group="standalone") == ErrorCode.NONE
    assert h.c.groups["standalone"].state is GroupState.EMPTY
    assert commit(h, -1, "", group="standalone") == ErrorCode.NONE

    ra, rb = h.join(client="a"), h.join(client="b")
    assert commit(h, -1, "") == ErrorCode.UNKNOWN_MEMBER_ID  # the group has members now
    h.end_initial_delay()
    a, b = h.answer(ra).member_id, h.answer(rb).member_id
    assert commit(h, 1, a) == ErrorCode.REBALANCE_IN_PROGRESS  # awaiting the assignment
    h.sync(b, 1)
    h.sync(a, 1, {})
    assert commit(h, 1, a) == ErrorCode.NONE
    assert commit(h, 0, a) == ErrorCode.ILLEGAL_GENERATION
    assert commit(h, 1, "stranger") == ErrorCode.UNKNOWN_MEMBER_ID
    h.join(client="c")  # PreparingRebalance: members may still commit what they processed
    assert commit(h, 1, b) == ErrorCode.NONE


def test_commit_renews_the_session() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    start = h.now
    h.at(start + SESSION - 1)
    assert commit(h, 1, a) == ErrorCode.NONE
    h.tick(start + SESSION + 1)
    assert a in h.c.groups["g"].members


def test_empty_groups_without_offsets_are_removed() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    commit(h, -1, "", group="keeps-offsets")
    h.c.offsets.put("keeps-offsets", ("t", 0), 0, OffsetAndMetadata(5, "", 0))
    h.leave(a)
    assert h.c.remove_empty_groups() == ["g"]
    assert set(h.c.groups) == {"keeps-offsets"}
    summary, _ = h.c.describe_group("g", h.now)
    assert summary.state == "Dead" and summary.members == ()


def test_describe_and_list() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    summary, _ = h.c.describe_group("g", h.now)
    assert summary.state == "Stable" and summary.protocol_type == "consumer"
    assert summary.protocol == "range"
    assert [(m.member_id, m.client_id, m.metadata, m.assignment) for m in summary.members] == [
        (a, "m0", b"range-meta", a.encode()),
        (b, "m1", b"range-meta", b.encode()),
    ]
    h.join(client="late")
    summary, _ = h.c.describe_group("g", h.now)
    assert summary.state == "PreparingRebalance" and summary.protocol == ""
    assert all(m.metadata == b"" and m.assignment == b"" for m in summary.members)
    commit(h, -1, "", group="manual")
    assert sorted(h.c.list_groups()) == [
        ("g", "consumer", "PreparingRebalance"), ("manual", "", "Empty")
    ]


def test_txn_offset_commit_group_checks() -> None:
    h = Harness()
    assert h.c.validate_txn_offset_commit("") == ErrorCode.INVALID_GROUP_ID
    assert h.c.validate_txn_offset_commit("txn-group") == ErrorCode.NONE
    assert h.c.groups["txn-group"].state is GroupState.EMPTY


# -- every waiting request is answered exactly once ----------------------------------------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(["join_new", "rejoin", "sync", "heartbeat", "leave", "advance"]),
        st.integers(min_value=0, max_value=5),
        st.integers(min_value=0, max_value=12_000),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_random_schedules_answer_every_waiter_once(ops) -> None:
    h = Harness()
    waiting: set[int] = set()
    known: list[str] = []
    generations: dict[str, int] = {}

    def track(reply):
        if isinstance(reply, Waiting):
            waiting.add(reply.waiter)
        elif isinstance(reply, JoinResult) and reply.error == ErrorCode.NONE:
            generations[reply.member_id] = reply.generation_id

    for op, who, dt in ops:
        member = known[who % len(known)] if known else ""
        generation = generations.get(member, 0)
        if op == "join_new":
            track(h.join(client="c", session=5_000, rebalance=8_000))
            known[:] = list(h.c.groups["g"].members) if "g" in h.c.groups else []
        elif op == "rejoin" and member:
            track(h.join(member_id=member, session=5_000, rebalance=8_000))
        elif op == "sync" and member:
            track(h.sync(member, generation, {m: b"x" for m in known}))
        elif op == "heartbeat" and member:
            h.heartbeat(member, generation)
        elif op == "leave" and member:
            h.leave(member)
        elif op == "advance":
            h.tick(h.now + dt)
        for result in h.answers.values():
            if isinstance(result, JoinResult) and result.error == ErrorCode.NONE:
                generations[result.member_id] = result.generation_id
        _check_invariants(h)
    # With time alone every waiter gets its answer: rebalances end, sessions expire.
    for _ in range(4):
        h.tick(h.now + 10_000)
        _check_invariants(h)
    assert waiting <= set(h.answers)


def _check_invariants(h: Harness) -> None:
    group = h.c.groups.get("g")
    if group is None:
        return
    state = group.state
    if state is GroupState.EMPTY:
        assert not group.members
    if state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
        assert group.members and group.leader_id in group.members
        assert group.protocol is not None
    if group.members:
        assert group.leader_id in group.members
    for m in group.members.values():
        if m.join_waiter is not None:
            assert state is GroupState.PREPARING_REBALANCE
        if m.sync_waiter is not None:
            assert state is GroupState.COMPLETING_REBALANCE
