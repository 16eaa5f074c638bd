"""Group metadata in ``__consumer_offsets``: the record codec, members restored after a restart,
DeleteGroups and OffsetDelete tombstones."""

from __future__ import annotations

import struct

import pytest
import trio

from broker.clock import TrioClock
from broker.config import build_config
from broker.group.group_metadata import (
    GroupMetadataRecord,
    MemberRecord,
    decode_group_metadata_key_untrusted,
    decode_group_metadata_value_untrusted,
    encode_group_metadata_key,
    encode_group_metadata_value,
)
from broker.group.offsets import decode_offset_key_untrusted
from broker.group.service import GroupService
from broker.handlers.context import Broker
from broker.reply import Deferred
from protocol.errors import CorruptFrameError, ErrorCode
from tests.unit.broker.group.test_service import (
    NOW,
    OFFSETS_PARTITIONS,
    codes,
    commit_request,
    make_broker,
    open_broker,
    settle,
)


def reopen(tmp_path, **props) -> Broker:
    properties = {"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS), **props}
    return open_broker(build_config(properties, data_dir=tmp_path / "data"))


def fetched(service: GroupService, group: str, topic: str = "orders") -> dict[int, int]:
    return {f.partition: f.offset for f in service.fetch_offsets(group, [(topic, [0, 1, 2])], NOW)}


RECORD = GroupMetadataRecord(
    "consumer", 7, "range", "m-1", NOW,
    (
        MemberRecord("m-1", None, "c1", "/127.0.0.1", 60_000, 10_000, b"sub1", b"asg1"),
        MemberRecord("m-2", "static-2", "c2", "", 30_000, 45_000, b"", b"asg2"),
    ),
)


def test_record_round_trip_and_layout() -> None:
    key = encode_group_metadata_key("g")
    assert key == struct.pack(">hh", 2, 1) + b"g"
    assert decode_group_metadata_key_untrusted(key) == "g"
    assert decode_offset_key_untrusted(key) is None  # offset replay skips it
    value = encode_group_metadata_value(RECORD)
    assert value[:2] == struct.pack(">h", 3)
    assert decode_group_metadata_value_untrusted(value) == RECORD
    assert decode_group_metadata_value_untrusted(None) is None
    for cut in range(len(value)):
        with pytest.raises(CorruptFrameError):
            decode_group_metadata_value_untrusted(value[:cut])


def test_version_0_values_are_read() -> None:
    s = lambda t: struct.pack(">h", len(t)) + t  # noqa: E731
    v0 = (struct.pack(">h", 0) + s(b"consumer") + struct.pack(">i", 3) + s(b"range") + s(b"m")
          + struct.pack(">i", 1) + s(b"m") + s(b"cid") + s(b"host") + struct.pack(">i", 10_000)
          + struct.pack(">i", 2) + b"sb" + struct.pack(">i", 1) + b"a")
    record = decode_group_metadata_value_untrusted(v0)
    assert record.generation_id == 3 and record.current_state_timestamp == -1
    (m,) = record.members
    assert (m.member_id, m.group_instance_id, m.rebalance_timeout_ms, m.subscription,
            m.assignment) == ("m", None, 10_000, b"sb", b"a")


def join_request(client_id: str, member_id: str = "", name: str = "range") -> tuple:
    """The arguments of ``join_group`` before ``now_ms``."""
    return ("g", member_id, client_id, "", 10_000, 60_000, "consumer",
            [(name, b"\x00\x00\x00\x00\x00\x01\x00\x06orders")])


async def stable_group(broker: Broker, service: GroupService) -> tuple[str, str]:
    """Two members joined and synced (generation 1): ``(leader, follower)``."""
    results = {}

    async def join(name: str) -> None:
        reply = service.join_group(*join_request(name), broker.clock.now_ms())
        results[name] = await reply.wait() if isinstance(reply, Deferred) else reply

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join, "a")
        nursery.start_soon(join, "b")
    leader = results["a"].leader
    follower = next(r.member_id for r in results.values() if r.member_id != leader)
    follower_sync = service.sync_group("g", 1, follower, {}, broker.clock.now_ms())
    reply = service.sync_group("g", 1, leader, {leader: b"L", follower: b"F"},
                               broker.clock.now_ms())
    # Answered once the group's record is durable (inline, or after a group-commit round).
    assert (await settle(broker, reply)).assignment == b"L"
    assert (await follower_sync.wait()).assignment == b"F"
    return leader, follower


async def test_members_survive_a_restart(tmp_path, autojump_clock) -> None:
    props = {"group.initial.rebalance.delay.ms": "100"}
    broker = make_broker(tmp_path, TrioClock(NOW), **props)
    service = broker.groups
    leader, follower = await stable_group(broker, service)
    broker.close()

    again = reopen(tmp_path, **props)
    summary = again.groups.describe_group("g", NOW)
    assert summary.state == "Stable" and summary.protocol == "range"
    assert {(m.member_id, m.assignment) for m in summary.members} == {
        (leader, b"L"), (follower, b"F")}
    assert again.groups.heartbeat("g", 1, follower, NOW) == ErrorCode.NONE
    assert again.groups.heartbeat("g", 1, leader, NOW) == ErrorCode.NONE
    # the same generation's SyncGroup still hands out the stored assignment
    reply = again.groups.sync_group("g", 1, follower, {}, NOW)
    assert reply.assignment == b"F"
    # silent members still expire: sessions restart at load time
    assert again.groups.heartbeat("g", 1, leader, NOW + 20_000) == ErrorCode.UNKNOWN_MEMBER_ID
    again.close()


async def test_delete_groups_tombstones_survive_a_restart(tmp_path, autojump_clock) -> None:
    props = {"group.initial.rebalance.delay.ms": "100"}
    broker = make_broker(tmp_path, TrioClock(NOW), **props)
    service = broker.groups
    leader, follower = await stable_group(broker, service)
    await settle(broker, service.commit_offsets(
        *commit_request("g", {0: 5}, generation=1, member=leader), broker.clock.now_ms()))
    await settle(broker, service.commit_offsets(*commit_request("idle", {1: 9}), broker.clock.now_ms()))
    assert fetched(service, "idle") == {0: -1, 1: 9, 2: -1}
    assert fetched(service, "g") == {0: 5, 1: -1, 2: -1}
    result = await settle(broker, service.delete_groups(["g", "idle", "nope", ""], broker.clock.now_ms()))
    assert result == {"g": ErrorCode.NON_EMPTY_GROUP, "idle": ErrorCode.NONE,
                      "nope": ErrorCode.GROUP_ID_NOT_FOUND, "": ErrorCode.INVALID_GROUP_ID}
    assert fetched(service, "idle") == {0: -1, 1: -1, 2: -1}
    assert fetched(service, "g") == {0: 5, 1: -1, 2: -1}
    for member in (leader, follower):
        assert service.leave_group("g", member, broker.clock.now_ms()) == ErrorCode.NONE
    # the rebalance without members wrote an Empty record; the group still holds offsets
    assert (await settle(broker, service.delete_groups(["g"], broker.clock.now_ms()))) == {
        "g": ErrorCode.NONE}
    assert service.describe_group("g", broker.clock.now_ms()).state == "Dead"
    broker.close()

    again = reopen(tmp_path, **props)
    assert again.groups.describe_group("g", NOW).state == "Dead"
    assert again.groups.list_groups(NOW) == []
    assert fetched(again.groups, "g") == {0: -1, 1: -1, 2: -1}
    assert fetched(again.groups, "idle") == {0: -1, 1: -1, 2: -1}
    again.close()


async def test_offset_delete(tmp_path, autojump_clock) -> None:
    props = {"group.initial.rebalance.delay.ms": "100"}
    broker = make_broker(tmp_path, TrioClock(NOW), **props)
    broker.logs.create_topic("other", 1, None, NOW)
    service = broker.groups
    assert service.delete_offsets("g", [("orders", 0)], broker.clock.now_ms()) == (
        ErrorCode.GROUP_ID_NOT_FOUND, {})
    leader, _ = await stable_group(broker, service)
    for topic, offsets in [("orders", {0: 5, 1: 6}), ("other", {0: 7})]:
        response = await settle(broker, service.commit_offsets(
            *commit_request("g", offsets, generation=1, member=leader, topic=topic), broker.clock.now_ms()))
        assert set(codes(response)) == {ErrorCode.NONE}
    code, errors = await settle(broker, service.delete_offsets(
        "g", [("orders", 0), ("other", 0)], broker.clock.now_ms()))
    # the members subscribe to "orders" (see join_request): only "other" may go
    assert code == ErrorCode.NONE
    assert errors == {("orders", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
                      ("other", 0): ErrorCode.NONE}
    assert fetched(service, "g") == {0: 5, 1: 6, 2: -1}
    assert fetched(service, "g", "other")[0] == -1
    broker.close()
