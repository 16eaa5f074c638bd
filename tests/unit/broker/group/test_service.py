"""The group service on a real Broker (data dir on disk, no sockets): offsets written to
``__consumer_offsets``, durable before visible, replayed at start; transactional offsets through
the normal append path; waiting JoinGroups driven by trio's clock."""

from __future__ import annotations

import trio

from broker.app import build_broker
from broker.clock import Clock, ManualClock, TrioClock
from broker.config import build_config
from broker.group.offset_service import FetchedOffset, OffsetToCommit, TxnProducer
from broker.handlers.context import Broker
from broker.log.topics import CONSUMER_OFFSETS_TOPIC as OFFSETS_TOPIC
from broker.log.topics import partition_for
from broker.reply import Deferred
from protocol.errors import ErrorCode

NOW = 1_700_000_000_000
OFFSETS_PARTITIONS = 5


def open_broker(config, clock: Clock | None = None) -> Broker:
    return build_broker(config, clock=clock or ManualClock(NOW))


def make_broker(tmp_path, clock: Clock | None = None, **props) -> Broker:
    properties = {"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS), **props}
    broker = open_broker(build_config(properties, data_dir=tmp_path / "data"), clock)
    broker.logs.create_topic("orders", 3, None, NOW)
    return broker


def commit_request(group: str, offsets: dict[int, int], generation=-1, member="", topic="orders",
                   metadata=None) -> tuple[str, int, str, list[OffsetToCommit]]:
    """The arguments of ``commit_offsets`` before ``now_ms``."""
    return group, generation, member, [OffsetToCommit(topic, p, o, metadata)
                                       for p, o in offsets.items()]


def txn_request(group: str, offsets: dict[int, int], producer_id: int, epoch: int = 0
                ) -> tuple[str, TxnProducer, list[OffsetToCommit]]:
    """The arguments of ``txn_commit_offsets`` before ``now_ms``."""
    return group, TxnProducer("tx", producer_id, epoch), [
        OffsetToCommit("orders", p, o, None) for p, o in offsets.items()]


def fetched(broker: Broker, group: str, partitions=(0, 1, 2)) -> dict[int, int]:
    answer = broker.groups.fetch_offsets(group, [("orders", list(partitions))], NOW)
    assert [(f.topic, f.partition) for f in answer] == [("orders", p) for p in partitions]
    assert {f.error for f in answer} == {ErrorCode.NONE}
    return {f.partition: f.offset for f in answer}


def codes(answer: list[ErrorCode]) -> list[ErrorCode]:
    """The codes of a (Txn)OffsetCommit, one per offset, in order."""
    return answer


async def settle(broker: Broker, reply) -> dict:
    """Complete the group commit a durable reply waits for, then take the reply."""
    if isinstance(reply, Deferred):
        broker.storage.settle()
        return await reply.wait()
    return reply


async def later(result):
    """The transaction manager answers now, or with a coroutine function once durable."""
    return await result.wait() if isinstance(result, Deferred) else result


async def begin_txn(broker: Broker, groups=("g",), transactional_id: str = "tx") -> tuple[int, int]:
    """InitProducerId + AddOffsetsToTxn for ``groups``, as a transactional producer does before
    ``send_offsets_to_transaction`` (needs the flusher running)."""
    txns = broker.transactions
    init = await later(txns.init_producer_id(transactional_id, 60_000, None, NOW))
    assert init.error_code == ErrorCode.NONE
    partitions = [broker.cross.offsets_partition(g) for g in groups]
    added = await later(txns.add_partitions(transactional_id, init.producer_id,
                                            init.producer_epoch, partitions, NOW))
    assert added == ErrorCode.NONE
    return init.producer_id, init.producer_epoch


async def end_txn(broker: Broker, pid: int, epoch: int, commit: bool, transactional_id="tx"):
    """EndTxn: markers on every partition of the transaction, then on_txn_marker."""
    ended = await later(broker.transactions.end_txn(transactional_id, pid, epoch, commit, NOW))
    assert ended == ErrorCode.NONE


# -- offsets -------------------------------------------------------------------------------------


async def test_commit_answers_after_fsync_and_is_visible_only_then(tmp_path) -> None:
    broker = make_broker(tmp_path)
    assert OFFSETS_TOPIC not in broker.logs.topics()
    reply = broker.groups.commit_offsets(*commit_request("g", {0: 10, 1: 20}), NOW)
    if isinstance(reply, Deferred):  # storage put it in a group-commit round
        assert fetched(broker, "g") == {0: -1, 1: -1, 2: -1}  # written, not yet durable
    else:  # synced inline (alone): durable already
        assert broker.partition(OFFSETS_TOPIC, 0).dirty is False
    response = await settle(broker, reply)
    assert codes(response) == [ErrorCode.NONE, ErrorCode.NONE]
    assert fetched(broker, "g") == {0: 10, 1: 20, 2: -1}
    broker.close()


async def test_offsets_topic_layout(tmp_path) -> None:
    broker = make_broker(tmp_path)
    await settle(broker, broker.groups.commit_offsets(*commit_request("my-group", {0: 1}), NOW))
    assert broker.logs.topics()[OFFSETS_TOPIC] == OFFSETS_PARTITIONS
    config = broker.logs.topic_config(OFFSETS_TOPIC)
    assert config.segment_bytes == broker.config.offsets_topic_segment_bytes
    assert config.compact and not config.delete
    index = partition_for("my-group", OFFSETS_PARTITIONS)
    assert broker.groups.partition_for("my-group") == index
    sizes = {p: broker.logs.partition(OFFSETS_TOPIC, p).log_end_offset
             for p in range(OFFSETS_PARTITIONS)}
    assert sizes[index] == 1 and sum(sizes.values()) == 1
    broker.close()


async def test_offsets_survive_a_restart(tmp_path) -> None:
    broker = make_broker(tmp_path)
    await settle(broker, broker.groups.commit_offsets(*commit_request("g", {0: 10, 1: 20}), NOW))
    await settle(broker, broker.groups.commit_offsets(*commit_request("g", {0: 15}), NOW))
    await settle(broker, broker.groups.commit_offsets(
        *commit_request("other", {2: 7}, metadata="hello"), NOW))
    broker.close()

    again = open_broker(broker.config)
    assert again.groups.replayed_batches == 3
    assert fetched(again, "g") == {0: 15, 1: 20, 2: -1}
    everything = again.groups.fetch_offsets("other", None, NOW)
    assert everything == [FetchedOffset("orders", 2, 7, "hello", ErrorCode.NONE)]
    assert sorted(again.groups.list_groups(NOW)) == [("g", "", "Empty"), ("other", "", "Empty")]
    again.close()


async def test_unflushed_commit_survives_a_crash_only_if_flushed(tmp_path) -> None:
    broker = make_broker(tmp_path)
    await settle(broker, broker.groups.commit_offsets(*commit_request("g", {0: 10}), NOW))
    broker.groups.commit_offsets(*commit_request("g", {0: 99}), NOW)  # never answered
    # no close(): as after kill -9 (the page cache survives a process crash, so recovery may
    # keep the unflushed record; either value is a valid outcome, a torn one is not)
    again = open_broker(broker.config)
    assert fetched(again, "g")[0] in (10, 99)
    again.close()


async def test_commit_errors(tmp_path) -> None:
    broker = make_broker(tmp_path)
    groups = broker.groups
    r = await settle(broker, groups.commit_offsets(*commit_request("g", {0: 1}, topic="nope"), NOW))
    assert codes(r) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    r = await settle(broker, groups.commit_offsets(*commit_request("g", {7: 1}), NOW))
    assert codes(r) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    r = await settle(broker, groups.commit_offsets(*commit_request("g", {0: 1}, metadata="x" * 5000), NOW))
    assert codes(r) == [ErrorCode.OFFSET_METADATA_TOO_LARGE]
    r = await settle(broker, groups.commit_offsets(*commit_request("h", {0: 1, 1: 2}, generation=4), NOW))
    assert codes(r) == [ErrorCode.ILLEGAL_GENERATION] * 2
    assert OFFSETS_TOPIC not in broker.logs.topics()  # nothing was written
    r = await settle(broker, groups.commit_offsets(*commit_request("g", {0: 1, 5: 2}), NOW))
    assert codes(r) == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    broker.close()


async def test_commit_in_page_cache_mode_answers_at_once(tmp_path) -> None:
    broker = make_broker(tmp_path, **{"log.flush": "never"})
    reply = broker.groups.commit_offsets(*commit_request("g", {0: 3}), NOW)
    assert not isinstance(reply, Deferred)
    assert fetched(broker, "g")[0] == 3
    broker.close()


# -- transactional offsets -----------------------------------------------------------------------


async def test_txn_offsets_pending_until_commit(tmp_path, nursery) -> None:
    broker = make_broker(tmp_path)
    nursery.start_soon(broker.flusher.run)
    await settle(broker, broker.groups.commit_offsets(*commit_request("g", {0: 5}), NOW))
    pid, epoch = await begin_txn(broker)
    r = await settle(broker, broker.groups.txn_commit_offsets(*txn_request("g", {0: 50, 1: 60}, pid, epoch), NOW))
    assert codes(r) == [ErrorCode.NONE] * 2
    assert fetched(broker, "g") == {0: 5, 1: -1, 2: -1}  # OffsetFetch v2: last committed
    await end_txn(broker, pid, epoch, commit=True)
    assert fetched(broker, "g") == {0: 50, 1: 60, 2: -1}

    # the next transactions continue the producer's sequence on the offsets partition: every
    # TxnOffsetCommit is appended (none is mistaken for a retry), the last one wins
    partition = broker.groups.offsets_partition("g", NOW)
    for commit, values in ((False, (70, 71)), (True, (90, 91, 92))):
        pid, epoch = await begin_txn(broker)
        for value in values:
            before = partition.log_end_offset
            r = await settle(broker, broker.groups.txn_commit_offsets(
                *txn_request("g", {0: value}, pid, epoch), NOW))
            assert codes(r) == [ErrorCode.NONE]
            assert partition.log_end_offset == before + 1
        pending = broker.groups.coordinator.offsets.pending("g")
        assert {tp: v.offset for tp, v in pending[pid].items()} == {("orders", 0): values[-1]}
        await end_txn(broker, pid, epoch, commit=commit)
        assert broker.groups.coordinator.offsets.pending("g") == {}
    assert fetched(broker, "g") == {0: 92, 1: 60, 2: -1}
    broker.close()


async def test_txn_offsets_need_the_partition_in_the_transaction(tmp_path, nursery) -> None:
    broker = make_broker(tmp_path)
    nursery.start_soon(broker.flusher.run)
    pid, epoch = await begin_txn(broker, groups=("other",))
    assert broker.groups.partition_for("other") != broker.groups.partition_for("g")
    r = await settle(broker, broker.groups.txn_commit_offsets(*txn_request("g", {0: 1}, pid, epoch), NOW))
    assert codes(r) == [ErrorCode.INVALID_TXN_STATE]
    assert broker.groups.coordinator.offsets.pending("g") == {}
    broker.close()


async def test_pending_txn_offsets_survive_a_restart_and_resolve_later(tmp_path) -> None:
    broker = make_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker.flusher.run)
        pid, epoch = await begin_txn(broker)
        await settle(broker, broker.groups.txn_commit_offsets(*txn_request("g", {0: 50}, pid, epoch), NOW))
        nursery.cancel_scope.cancel()
    broker.close()  # the transaction is still open

    again = open_broker(broker.config)
    assert fetched(again, "g")[0] == -1
    index = again.groups.partition_for("g")
    assert again.groups.coordinator.offsets.pending_producers(index) == [pid]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(again.flusher.run)
        await end_txn(again, pid, epoch, commit=True)
        nursery.cancel_scope.cancel()
    assert fetched(again, "g")[0] == 50
    again.close()

    third = open_broker(broker.config)  # replay: the COMMIT marker resolves the records
    assert fetched(third, "g")[0] == 50
    assert third.groups.coordinator.offsets.pending("g") == {}
    third.close()


async def test_fenced_producer_cannot_commit_offsets(tmp_path, nursery) -> None:
    broker = make_broker(tmp_path)
    nursery.start_soon(broker.flusher.run)
    pid, old_epoch = await begin_txn(broker)
    await settle(broker, broker.groups.txn_commit_offsets(*txn_request("g", {0: 1}, pid, old_epoch), NOW))
    # a new instance with the same transactional id: the open transaction is aborted (ABORT
    # marker with a bumped epoch on the offsets partition) and the old epoch fenced
    pid2, new_epoch = await begin_txn(broker)
    assert pid2 == pid and new_epoch > old_epoch
    assert broker.groups.coordinator.offsets.pending("g") == {}
    r = await settle(broker, broker.groups.txn_commit_offsets(*txn_request("g", {0: 2}, pid, old_epoch), NOW))
    assert codes(r) == [ErrorCode.INVALID_PRODUCER_EPOCH]
    r = await settle(broker, broker.groups.txn_commit_offsets(*txn_request("g", {0: 3}, pid, new_epoch), NOW))
    assert codes(r) == [ErrorCode.NONE]
    await end_txn(broker, pid, new_epoch, commit=True)
    assert fetched(broker, "g")[0] == 3
    broker.close()


async def test_txn_commit_for_unknown_group_creates_it(tmp_path, nursery) -> None:
    broker = make_broker(tmp_path)
    nursery.start_soon(broker.flusher.run)
    pid, epoch = await begin_txn(broker, groups=("fresh",))
    r = await settle(broker, broker.groups.txn_commit_offsets(*txn_request("fresh", {0: 1}, pid, epoch), NOW))
    assert codes(r) == [ErrorCode.NONE]
    assert ("fresh", "", "Empty") in broker.groups.list_groups(NOW)
    r = await settle(broker, broker.groups.txn_commit_offsets(*txn_request("", {0: 1}, pid, epoch), NOW))
    assert codes(r) == [ErrorCode.INVALID_GROUP_ID]
    broker.close()


# -- waiting, driven by trio's clock -------------------------------------------------------------


def join_request(client_id: str, member_id: str = "", session: int = 10_000) -> tuple:
    """The arguments of ``join_group`` before ``now_ms``."""
    return "g", member_id, client_id, "", session, 60_000, "consumer", [("range", b"m")]


async def test_waiting_join_completes_after_the_initial_delay(tmp_path, autojump_clock) -> None:
    clock = TrioClock(NOW)
    broker = make_broker(tmp_path, clock)  # group.initial.rebalance.delay.ms defaults to 3000
    service = broker.groups
    start = trio.current_time()
    reply = service.join_group(*join_request("client"), clock.now_ms())
    assert isinstance(reply, Deferred)
    result = await reply.wait()
    assert result.error == ErrorCode.NONE and result.generation_id == 1
    assert result.member_id.startswith("client-") and result.leader == result.member_id
    assert 3.0 <= trio.current_time() - start < 3.1
    broker.close()


async def test_rebalance_waits_for_rejoin_and_expires_silent_members(tmp_path, autojump_clock) -> None:
    clock = TrioClock(NOW)
    broker = make_broker(tmp_path, clock, **{"group.initial.rebalance.delay.ms": "100"})
    service = broker.groups
    results = {}

    async def join(name: str, member_id: str = "") -> None:
        reply = service.join_group(*join_request(name, member_id), clock.now_ms())
        results[name] = await reply.wait() if isinstance(reply, Deferred) else reply

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join, "a")
        nursery.start_soon(join, "b")
    assert results["a"].generation_id == results["b"].generation_id == 1
    a = results["a"].leader  # whichever joined first leads
    b = results["b"].member_id if a == results["a"].member_id else results["a"].member_id
    sync_b = service.sync_group("g", 1, b, {}, clock.now_ms())
    assert isinstance(sync_b, Deferred)
    leader = service.sync_group("g", 1, a, {b: b"B"}, clock.now_ms())
    leader = await settle(broker, leader)  # answered once the group's record is durable
    assert leader.error == ErrorCode.NONE and (await sync_b.wait()).assignment == b"B"

    # a rejoins; b goes silent: the rebalance completes when b's session (10 s) expires, even
    # though the rebalance timeout (60 s) is far away
    start = trio.current_time()
    await join("a", a)
    assert 10.0 <= trio.current_time() - start < 10.2
    assert results["a"].generation_id == 2
    assert [m for m, _ in results["a"].members] == [a]
    assert service.heartbeat("g", 1, b, clock.now_ms()) == ErrorCode.UNKNOWN_MEMBER_ID
    broker.close()


async def test_tick_forgets_empty_groups_without_offsets(tmp_path, autojump_clock) -> None:
    clock = TrioClock(NOW)
    broker = make_broker(tmp_path, clock, **{"group.initial.rebalance.delay.ms": "0"})
    service = broker.groups
    reply = service.join_group(*join_request("c"), clock.now_ms())
    member = (await reply.wait()).member_id
    assert service.leave_group("g", member, clock.now_ms()) == ErrorCode.NONE
    assert service.describe_group("g", clock.now_ms()).state == "Empty"
    service.tick(clock.now_ms())
    assert service.describe_group("g", clock.now_ms()).state == "Dead"
    assert service.list_groups(clock.now_ms()) == []
    broker.close()
