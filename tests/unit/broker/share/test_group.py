"""Share-group membership (broker/share/group.py) and share sessions (sessions.py)."""

from __future__ import annotations

import uuid

import pytest

from broker.share.group import ShareGroups, ShareMember, simple_assign
from broker.share.sessions import ShareSessionCache
from protocol.errors import ErrorCode, KafkaError

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
TOPICS = {"one": (T1, 1), "four": (T2, 4)}


def groups(**kw) -> ShareGroups:
    args = {"session_timeout_ms": 1000, "heartbeat_interval_ms": 100, "max_size": 3,
            "lookup": TOPICS.get} | kw
    return ShareGroups(**args)


def join(g: ShareGroups, member: str, topics: list[str], now: int = 0):
    return g.heartbeat("g", member, 0, None, topics, "c", "h", now)


def test_simple_assignor_shares_partitions_when_members_outnumber_them() -> None:
    members = [ShareMember(m, 0, ["one", "four"], "", "", None, 0) for m in "abc"]
    out = simple_assign(members, TOPICS.get)
    assert all(out[m][T1] == [0] for m in "abc")  # one partition, three members
    assert sorted(p for m in "abc" for p in out[m][T2]) == [0, 1, 2, 3]  # each once


def test_join_heartbeat_epochs_and_reassignment() -> None:
    # A new group is at epoch 1 (Kafka 4.4's ModernGroup); the first join moves it to 2.
    g = groups()
    a = join(g, "a", ["one"])
    assert (a.member_id, a.member_epoch, a.assignment) == ("a", 2, {T1: [0]})
    b = join(g, "b", ["one"])
    assert b.member_epoch == 3 and b.assignment == {T1: [0]}
    # a learns the new epoch at its next heartbeat; nothing to revoke in a share group
    again = g.heartbeat("g", "a", 2, None, None, "c", "h", 10)
    assert again.member_epoch == 3 and again.assignment == {T1: [0]}
    same = g.heartbeat("g", "a", 3, None, None, "c", "h", 20)
    assert same.member_epoch == 3 and same.assignment is None
    with pytest.raises(KafkaError) as fenced:
        g.heartbeat("g", "a", 2, None, None, "c", "h", 30)
    assert fenced.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(KafkaError) as unknown:
        g.heartbeat("g", "zz", 3, None, None, "c", "h", 30)
    assert unknown.value.code == ErrorCode.UNKNOWN_MEMBER_ID


def test_join_needs_topics_and_the_group_has_a_size_limit() -> None:
    g = groups(max_size=1)
    with pytest.raises(KafkaError) as bad:
        join(g, "a", [])
    assert bad.value.code == ErrorCode.INVALID_REQUEST
    assert join(g, "", ["one"]).member_id  # an id made up for an empty one
    with pytest.raises(KafkaError) as full:
        join(g, "b", ["one"])
    assert full.value.code == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_leave_and_session_timeout_bump_the_group_epoch() -> None:
    g = groups()
    join(g, "a", ["four"], now=0)
    join(g, "b", ["four"], now=500)
    assert g.get("g").epoch == 3
    assert g.heartbeat("g", "b", -1, None, None, "c", "h", 600).member_epoch == -1
    assert g.get("g").epoch == 4 and list(g.get("g").members) == ["a"]
    assert g.expire(999) == []
    assert g.expire(1000) == [("g", "a")]
    assert g.get("g").state == "Empty" and g.delete("g") == ErrorCode.NONE


def test_sessions_epochs() -> None:
    cache = ShareSessionCache(max_sessions=1)
    assert cache.check("g", "m", 0) is None
    session, old = cache.open("g", "m")
    assert old is None and session.epoch == 1
    assert cache.check("g", "m", 1) is session
    cache.advance(session)
    with pytest.raises(KafkaError) as wrong:
        cache.check("g", "m", 1)
    assert wrong.value.code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    with pytest.raises(KafkaError) as missing:
        cache.check("g", "other", 1)
    assert missing.value.code == ErrorCode.SHARE_SESSION_NOT_FOUND
    with pytest.raises(KafkaError) as full:
        cache.open("g", "other")
    assert full.value.code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    again, replaced = cache.open("g", "m")
    assert replaced is session and again.epoch == 1
    assert cache.close("g", "m") is again and cache.get("g", "m") is None
