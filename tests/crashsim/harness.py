"""The broker in-process over the recording file layer, workloads, and the checks of one crash
state (tests only; see ``tests/crashsim/README.md``).

A workload runs once, on the real broker (``build_broker``, the real handlers through the
dispatcher, the real group-commit task), under ``fs.Recorder``: every answer it gets is noted
with the number of file operations done when it got it. A crash state "after operation k" is
then materialized in a fresh directory (``fs.Model``), the boot id changed (a machine restart),
and the real start-up path recovers it; the checks compare what was answered before k with what
the recovered broker serves.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import os
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

import broker.log.manager as log_manager
from broker.app import build_broker, build_dispatcher
from broker.clock import ManualClock
from broker.config import build_config
from broker.handlers import peer
from broker.handlers.context import Broker
from broker.log.topics import TRANSACTION_STATE_TOPIC
from broker.reply import AnswerFirst, Deferred
from broker.txn.state import TxnState
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader, encode_request_header, parse_response_header_untrusted
from protocol.messages import decode_response, encode_request
from protocol.records import (
    ControlType,
    decode_batches_untrusted,
    encode_batch,
    parse_control_record,
)
from tests.crashsim.fs import Model, Recorder, no_real_syncs
from tests.crashsim.fs import write as write_state

NOW = 1_700_000_000_000
TOPIC = "sim"
PARTITIONS = 3


@contextlib.contextmanager
def boot_id(directory: Path, value: str) -> Iterator[None]:
    """The operating system's boot id, as the broker reads it, is ``value``."""
    path = directory / f"boot-{value}"
    path.write_text(value + "\n")
    saved = log_manager.BOOT_ID_SOURCE
    log_manager.BOOT_ID_SOURCE = path
    try:
        yield
    finally:
        log_manager.BOOT_ID_SOURCE = saved


def broker_config(data_dir: Path, flush: str = "always", **extra: str) -> Any:
    props = {"transaction.state.log.num.partitions": "2", "offsets.topic.num.partitions": "2",
             "authorizer.class.name": "sim", "allow.everyone.if.no.acl.found": "true",
             "log.flush": flush, "log.preallocate": "false", "num.partitions": str(PARTITIONS),
             **extra}
    return build_config(props, data_dir=data_dir)


def crash(b: Broker) -> None:
    """The process dies: no flush, no snapshot, no clean-shutdown marker."""
    for p in b.logs.all_partitions():
        with contextlib.suppress(Exception):
            p.txn_index.close(sync=False)
        for seg in p.segments:
            seg.close()
    lock = getattr(b.storage, "_lock", None)
    if lock is not None:
        lock.release()


class Client:
    """Requests through the broker's own dispatcher (the real handlers), answers decoded as a
    client would; ``answered`` is the recorder's operation count when each answer came."""

    def __init__(self, b: Broker, recorder: Recorder | None) -> None:
        self.broker = b
        self.dispatcher = build_dispatcher(b)
        # a connection of its own (share sessions are released when it closes)
        peer.set_peer(peer.Peer("/127.0.0.1"))
        self.recorder = recorder
        self._cid = 0

    def _ops(self) -> int:
        return len(self.recorder.ops) if self.recorder is not None else 0

    def topic_id(self, name: str) -> Any:
        return self.broker.logs.topic_id(name)

    async def request(self, key: int, version: int, body: dict) -> tuple[Any, int]:
        self._cid += 1
        frame = bytearray(encode_request_header(RequestHeader(key, version, self._cid, "sim"))
                          + encode_request(key, version, body))
        header, result = self.dispatcher.dispatch(frame)
        at = None
        if isinstance(result, AnswerFirst):
            value = result.value
            at = self._ops()  # answered here; the finish runs after the answer is sent
            result.finish()
        elif isinstance(result, Deferred):
            value = await result.wait()
        else:
            value = result
        if at is None:
            at = self._ops()
        from broker.network.dispatcher import encode_reply
        chunks = encode_reply(header, value)
        assert chunks is not None
        raw = bytearray(b"".join(bytes(c) for c in chunks)[4:])
        _, offset = parse_response_header_untrusted(raw, key, version)
        return decode_response(key, version, raw, offset), at


    async def fetch(self, partition: int, offset: int) -> Any:
        r, _ = await self.request(ApiKey.FETCH, 7, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 1, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": partition, "fetch_offset": offset, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": []})
        return r


# -- what the workload was told ------------------------------------------------------------


@dataclass
class Produced:
    """An idempotent acks=all Produce answered NONE."""

    partition: int
    base_offset: int
    values: list[bytes]
    answered: int


@dataclass
class Txn:
    transactional_id: str
    producer_id: int
    epoch: int
    values: dict[int, list[bytes]] = field(default_factory=dict)  # partition -> values sent
    commit: bool = True
    started: int = 0  # ops count when its first AddPartitions was answered
    end_sent: int | None = None  # ops count when EndTxn was sent
    answered: int | None = None  # ops count when EndTxn was answered NONE
    offsets: dict[int, int] = field(default_factory=dict)  # TxnOffsetCommit: partition -> offset


@dataclass
class Journal:
    produced: list[Produced] = field(default_factory=list)
    txns: list[Txn] = field(default_factory=list)
    ids: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (pid, epoch) last given
    # OffsetCommit answered NONE: (group, partition, offset, at)
    group_commits: list[tuple[str, int, int, int]] = field(default_factory=list)
    admin: list[tuple[str, Any, int]] = field(default_factory=list)  # (what, which, at)
    # ConsumerGroupHeartbeat answered NONE: (group, member id, member epoch, at)
    heartbeats: list[tuple[str, str, int, int]] = field(default_factory=list)
    # the compacted topic: (key, value or None for a tombstone, at: None until answered)
    keyed: list[list] = field(default_factory=list)
    # share group: (first, last offset of TOPIC-0, at) acquired / ACCEPTed (ack sent with at
    # None until answered)
    acquired: list[tuple[int, int, int]] = field(default_factory=list)
    accepted: list[list[Any]] = field(default_factory=list)
    # the highest log start offset of each partition of TOPIC the broker ever had (retention)
    log_start_max: dict[int, int] = field(default_factory=dict)


# -- workloads -----------------------------------------------------------------------------


class Workload:
    def __init__(self, client: Client, journal: Journal, rng: random.Random) -> None:
        self.c, self.j, self.rng = client, journal, rng
        self._seq: dict[tuple[int, str, int], int] = {}
        self._n = 0
        self.last_at = 0

    def _values(self, n: int, tag: str) -> list[bytes]:
        out = []
        for _ in range(n):
            self._n += 1
            out.append(f"{tag}-{self._n}".encode())
        return out

    async def create_topic(self, name: str = TOPIC, partitions: int = PARTITIONS,
                           configs: dict[str, str] | None = None) -> None:
        r, at = await self.c.request(ApiKey.CREATE_TOPICS, 2, {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [], "configs": [
                            {"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout_ms": 5000, "validate_only": False})
        assert r.topics[0].error_code == ErrorCode.NONE, r
        self.j.admin.append(("created", name, at))

    async def delete_topic(self, name: str) -> None:
        r, at = await self.c.request(ApiKey.DELETE_TOPICS, 1, {"topic_names": [name],
                                                               "timeout_ms": 5000})
        assert r.responses[0].error_code == ErrorCode.NONE, r
        self.j.admin.append(("deleted", name, at))

    async def delete_records(self, partition: int, offset: int) -> None:
        r, at = await self.c.request(ApiKey.DELETE_RECORDS, 0, {"topics": [{
            "name": TOPIC, "partitions": [{"partition_index": partition, "offset": offset}]}],
            "timeout_ms": 5000})
        assert r.topics[0].partitions[0].error_code == ErrorCode.NONE, r
        self.j.admin.append(("log-start", (partition, offset), at))

    async def create_acl(self, user: str) -> None:
        r, at = await self.c.request(ApiKey.CREATE_ACLS, 2, {"creations": [{
            "resource_type": 2, "resource_name": "elsewhere", "resource_pattern_type": 3,
            "principal": f"User:{user}", "host": "*", "operation": 3, "permission_type": 3}]})
        assert [x.error_code for x in r.results] == [ErrorCode.NONE], r
        self.j.admin.append(("acl", user, at))

    async def scram_user(self, user: str) -> None:
        r, at = await self.c.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
            "deletions": [], "upsertions": [{"name": user, "mechanism": 1, "iterations": 4096,
                                             "salt": b"s" * 16, "salted_password": b"p" * 32}]})
        assert [x.error_code for x in r.results] == [ErrorCode.NONE], r
        self.j.admin.append(("scram", user, at))

    async def init(self, tid: str | None) -> tuple[int, int]:
        body = {"transactional_id": tid, "transaction_timeout_ms": 60_000}
        r, _ = await self.c.request(ApiKey.INIT_PRODUCER_ID, 0, body)
        assert r.error_code == ErrorCode.NONE, r
        if tid is not None:
            self.j.ids[tid] = (r.producer_id, r.producer_epoch)
        return r.producer_id, r.producer_epoch

    async def produce(self, pid: int, epoch: int, partition: int, values: list[Any],
                      tid: str | None = None, topic: str = TOPIC,
                      keys: list[bytes] | None = None) -> Any:
        seq = self._seq.get((pid, topic, partition), 0)
        batch = encode_batch([(None if keys is None else keys[i], v, (), NOW)
                              for i, v in enumerate(values)], producer_id=pid,
                             producer_epoch=epoch, base_sequence=seq,
                             transactional=tid is not None)
        r, at = await self.c.request(ApiKey.PRODUCE, 3, {
            "transactional_id": tid, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": partition, "records": batch}]}]})
        part = r.responses[0].partition_responses[0]
        self.last_at = at
        if part.error_code == ErrorCode.NONE:
            self._seq[(pid, topic, partition)] = seq + len(values)
            if tid is None and topic == TOPIC:
                self.j.produced.append(Produced(partition, part.base_offset, values, at))
        return part.error_code

    async def idempotent(self, batches: int, partition: int | None = None) -> None:
        pid, epoch = await self.init(None)
        for _ in range(batches):
            p = self.rng.randrange(PARTITIONS) if partition is None else partition
            await self.produce(pid, epoch, p, self._values(self.rng.randint(1, 3), "i"))

    async def transaction(self, tid: str, commit: bool, parts: list[int],
                          offsets: dict[int, int] | None = None, group: str = "g") -> Txn:
        pid, epoch = self.j.ids.get(tid) or await self.init(tid)
        txn = Txn(tid, pid, epoch, commit=commit)
        self.j.txns.append(txn)
        ids = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch}
        r, at = await self.c.request(ApiKey.ADD_PARTITIONS_TO_TXN, 0, {
            **ids, "topics": [{"name": TOPIC, "partitions": parts}]})
        assert all(x.error_code == ErrorCode.NONE for t in r.results for x in t.results), r
        txn.started = at
        for p in parts:
            values = self._values(self.rng.randint(1, 2), f"t{tid}")
            code = await self.produce(pid, epoch, p, values, tid)
            assert code == ErrorCode.NONE, code
            txn.values.setdefault(p, []).extend(values)
        if offsets:
            r, _ = await self.c.request(ApiKey.ADD_OFFSETS_TO_TXN, 0, {**ids, "group_id": group})
            assert r.error_code == ErrorCode.NONE, r
            r, _ = await self.c.request(ApiKey.TXN_OFFSET_COMMIT, 0, {
                **ids, "group_id": group, "topics": [{"name": TOPIC, "partitions": [
                    {"partition_index": p, "committed_offset": o, "committed_metadata": None}
                    for p, o in offsets.items()]}]})
            assert all(x.error_code == ErrorCode.NONE for t in r.topics for x in t.partitions), r
            txn.offsets = dict(offsets)
        txn.end_sent = self.c._ops()
        r, at = await self.c.request(ApiKey.END_TXN, 0, {**ids, "committed": commit})
        assert r.error_code == ErrorCode.NONE, r
        txn.answered = at
        return txn

    async def group_commit(self, group: str, partition: int, offset: int,
                           member: tuple[str, int] | None = None) -> None:
        """OffsetCommit (v2 for a group without members; v9 with ``member``: its id and
        epoch, for a consumer-protocol group)."""
        member_id, epoch = member or ("", -1)
        r, at = await self.c.request(ApiKey.OFFSET_COMMIT, 9 if member else 2, {
            "group_id": group, "generation_id": epoch, "member_id": member_id,
            "retention_time_ms": -1,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": partition, "committed_offset": offset,
                 "committed_metadata": None}]}]})
        assert r.topics[0].partitions[0].error_code == ErrorCode.NONE, r
        self.j.group_commits.append((group, partition, offset, at))

    async def heartbeat(self, group: str, member_id: str, epoch: int,
                        owned: list[int] | None = None) -> tuple[str, int, list[int]]:
        """ConsumerGroupHeartbeat v0 of a member subscribed to TOPIC: (member id, epoch,
        partitions of TOPIC assigned)."""
        joining = epoch == 0
        topic_id = self.c.topic_id(TOPIC)
        r, at = await self.c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {
            "group_id": group, "member_id": member_id, "member_epoch": epoch,
            "rebalance_timeout_ms": 30_000 if joining else -1,
            "subscribed_topic_names": [TOPIC] if joining else None,
            "server_assignor": None,
            "topic_partitions": ([] if joining else None) if owned is None else [
                {"topic_id": topic_id, "partitions": owned}]})
        assert r.error_code == ErrorCode.NONE, r
        self.j.heartbeats.append((group, r.member_id, r.member_epoch, at))
        assigned = (owned or []) if r.assignment is None else [  # (None: unchanged)
            p for t in r.assignment.topic_partitions for p in t.partitions]
        return r.member_id, r.member_epoch, sorted(assigned)

    async def share_join(self, group: str, member: str) -> None:
        r, _ = await self.c.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
            "group_id": group, "member_id": member, "member_epoch": 0,
            "subscribed_topic_names": [TOPIC]})
        assert r.error_code == ErrorCode.NONE, r

    async def share_fetch(self, group: str, member: str, session_epoch: int,
                          accept: list[tuple[int, int]], max_records: int) -> list[tuple[int, int]]:
        """ShareFetch v1 of TOPIC-0, ACCEPTing ``accept`` (first, last) with it: the ranges
        acquired."""
        topic_id = self.c.topic_id(TOPIC)
        entries: list[list[Any]] = [[a, b, None] for a, b in accept]
        self.j.accepted.extend(entries)
        r, at = await self.c.request(ApiKey.SHARE_FETCH, 1, {
            "group_id": group, "member_id": member, "share_session_epoch": session_epoch,
            "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": max_records,
            "batch_size": max_records, "topics": [{"topic_id": topic_id, "partitions": [{
                "partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": a, "last_offset": b, "acknowledge_types": [1]}
                    for a, b in accept]}]}],
            "forgotten_topics_data": []})
        assert r.error_code == ErrorCode.NONE, r
        part = r.responses[0].partitions[0]
        assert part.error_code == ErrorCode.NONE and part.acknowledge_error_code == 0, r
        for e in entries:
            e[2] = at
        got = [(a.first_offset, a.last_offset) for a in part.acquired_records]
        self.j.acquired.extend((a, b, at) for a, b in got)
        return got

    async def share_accept(self, group: str, member: str, session_epoch: int,
                           accept: list[tuple[int, int]]) -> None:
        """ShareAcknowledge v1: ACCEPT ``accept`` (first, last) of TOPIC-0."""
        entries: list[list[Any]] = [[a, b, None] for a, b in accept]
        self.j.accepted.extend(entries)
        r, at = await self.c.request(ApiKey.SHARE_ACKNOWLEDGE, 1, {
            "group_id": group, "member_id": member, "share_session_epoch": session_epoch,
            "topics": [{"topic_id": self.c.topic_id(TOPIC), "partitions": [{
                "partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": a, "last_offset": b, "acknowledge_types": [1]}
                    for a, b in accept]}]}]})
        assert r.error_code == ErrorCode.NONE, r
        assert r.responses[0].partitions[0].error_code == ErrorCode.NONE, r
        for e in entries:
            e[2] = at

    async def clean(self) -> None:
        """The cleaner compacts every partition due (under the recorder)."""
        cleaner = self.c.broker.cleaner
        assert cleaner is not None
        while await cleaner.clean_once():
            pass

    def retention(self, later_ms: int = 0) -> None:
        """Retention runs (``later_ms`` from now): old segments of TOPIC go."""
        b = self.c.broker
        b.logs.enforce_retention(b.clock.now_ms() + later_ms)
        for part in range(PARTITIONS):
            start = b.partition(TOPIC, part).log_start_offset
            self.j.log_start_max[part] = max(self.j.log_start_max.get(part, 0), start)

    async def keyed(self, pid: int, epoch: int, pairs: list[tuple[bytes, bytes | None]]) -> None:
        """An idempotent acks=all batch of keyed records to the compacted topic ``kv``."""
        entries: list[list[Any]] = [[k, v, None] for k, v in pairs]
        self.j.keyed.extend(entries)
        code = await self.produce(pid, epoch, 0, [v for _, v in pairs], topic="kv",
                                  keys=[k for k, _ in pairs])
        if code == ErrorCode.NONE:
            for e in entries:
                e[2] = self.last_at


async def _run_workload(b: Broker, recorder: Recorder, journal: Journal, name: str,
                        rng: random.Random) -> None:
    client = Client(b, recorder)
    w = Workload(client, journal, rng)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(b.flusher.run)
            await _steps(w, name)
            if name == "compaction" and b.cleaner is not None:
                # Compact the transaction log (and the compacted topic) under the recorder.
                while await b.cleaner.clean_once():
                    pass
            nursery.cancel_scope.cancel()


LARGE_ROUNDS = 150  # ~26,000 file operations, ~1,100,000 crash states with --flush always

TOPIC_CONFIGS = {"rolls": {"segment.bytes": "600"}, "large": {"segment.bytes": "1000"},
                 # retention by size: segments of ~2 batches, ~3 batches kept
                 "retention": {"segment.bytes": "300", "retention.bytes": "450",
                               "retention.ms": "3600000"}}

# The broker settings of a workload (beyond ``broker_config``'s).
BROKER_SETTINGS = {
    "compaction": {"transaction.state.log.segment.bytes": "600", "log.cleaner.backoff.ms": "1"},
    # __consumer_offsets rolls every few commits; the cleaner compacts it
    "groups": {"offsets.topic.segment.bytes": "400", "log.cleaner.min.cleanable.ratio": "0.01",
               "log.cleaner.backoff.ms": "1"},
    "compact-topic": {"log.cleaner.backoff.ms": "1"},
    "share": {"share.coordinator.state.topic.num.partitions": "1"},
    "large": {"transaction.state.log.segment.bytes": "600", "offsets.topic.segment.bytes": "400",
              "log.cleaner.min.cleanable.ratio": "0.01", "log.cleaner.backoff.ms": "1",
              "share.coordinator.state.topic.num.partitions": "1"},
}


async def _steps(w: Workload, name: str) -> None:
    await w.create_topic(configs=TOPIC_CONFIGS.get(name))
    if name == "txn":
        await w.transaction("a", True, [0, 1])
        await w.transaction("a", True, [1, 2])  # the same epoch: a second commit
        await w.transaction("a", False, [0])
        await w.transaction("a", True, [0, 2])
    elif name == "txn-offsets":
        await w.transaction("b", True, [0], offsets={0: 5})
        await w.group_commit("plain", 1, 3)
        await w.transaction("b", True, [1, 2], offsets={1: 7})
        await w.transaction("b", False, [0], offsets={0: 9})
    elif name == "idempotent":
        await w.idempotent(8)
    elif name == "mixed":
        await w.idempotent(3)
        await w.transaction("c", True, [0, 1, 2])
        await w.idempotent(2)
        await w.transaction("c", False, [1])
        await w.group_commit("plain", 0, 4)
        await w.transaction("c", True, [2])
    elif name == "admin":  # topics made and deleted, retention, the ACL and SCRAM stores
        await w.idempotent(2, partition=0)
        await w.create_topic("other", 2)
        await w.create_acl("alice")
        await w.delete_records(0, 1)
        await w.scram_user("carol")
        await w.delete_topic("other")
        await w.create_acl("bob")
        await w.idempotent(2)
    elif name == "compaction":  # the transaction log rolls; the cleaner compacts it (above)
        await w.create_topic("kv", 1, {"cleanup.policy": "compact", "segment.bytes": "300",
                                       "min.cleanable.dirty.ratio": "0.01"})
        for i in range(6):
            await w.transaction("z", i % 3 != 2, [i % PARTITIONS])
    elif name == "groups":  # group commits, KIP-848 members, __consumer_offsets compacted
        for i in range(4):
            await w.group_commit("plain", i % PARTITIONS, 10 + i)
        await w.clean()
        member, epoch, owned = await w.heartbeat("cg", "", 0)
        member, epoch, owned = await w.heartbeat("cg", member, epoch, owned)
        await w.group_commit("cg", owned[0], 5, (member, epoch))
        other, other_epoch, other_owned = await w.heartbeat("cg", "", 0)  # the group epoch moves
        member, epoch, owned = await w.heartbeat("cg", member, epoch, owned)
        other, other_epoch, other_owned = await w.heartbeat("cg", other, other_epoch, other_owned)
        member, epoch, owned = await w.heartbeat("cg", member, epoch, owned)
        await w.group_commit("cg", owned[0], 8, (member, epoch))
        for i in range(4):
            await w.group_commit("plain", i % PARTITIONS, 20 + i)
        await w.clean()
        await w.group_commit("plain", 0, 30)
    elif name == "compact-topic":  # live idempotent producers, the cleaner between batches
        await w.create_topic("kv", 1, {"cleanup.policy": "compact", "segment.bytes": "250",
                                       "min.cleanable.dirty.ratio": "0.01"})
        producers = [await w.init(None), await w.init(None)]
        for i in range(8):
            pid, epoch = producers[i % 2]
            pairs: list[tuple[bytes, bytes | None]] = []
            for _ in range(w.rng.randint(1, 3)):
                key = f"k{w.rng.randrange(3)}".encode()
                value = None if w.rng.random() < 0.15 else w._values(1, "kv")[0]
                pairs.append((key, value))
            await w.keyed(pid, epoch, pairs)
            if i % 2:
                await w.clean()
    elif name == "retention":  # retention by size deletes old segments between batches, then by time
        pid, epoch = await w.init(None)
        for i in range(10):
            await w.produce(pid, epoch, 0, w._values(2, "i"))
            if i % 3 == 2:
                w.retention()
        w.retention(later_ms=7_200_000)  # by time: every segment expired (the active one rolls)
        await w.produce(pid, epoch, 0, w._values(2, "i"))
    elif name == "share":  # a share group acquires and ACCEPTs records of sim-0
        pid, epoch = await w.init(None)
        await w.share_join("sg", "member-a")
        # (the share partition starts at the end: share.auto.offset.reset is latest)
        assert await w.share_fetch("sg", "member-a", 0, [], 3) == []
        for _ in range(4):
            await w.produce(pid, epoch, 0, w._values(2, "i"))
        got = await w.share_fetch("sg", "member-a", 1, [], 3)
        first, last = got[0]
        await w.share_accept("sg", "member-a", 2, [(first, first)])
        got2 = await w.share_fetch("sg", "member-a", 3, [(first + 1, last)], 4)
        await w.produce(pid, epoch, 0, w._values(2, "i"))
        await w.share_accept("sg", "member-a", 4, [(got2[0][0], got2[0][0])])
        await w.share_fetch("sg", "member-a", 5, [], 3)
    elif name == "large":  # all of it, longer (the sampled run): > 1,000,000 crash states
        await w.create_topic("kv", 1, {"cleanup.policy": "compact", "segment.bytes": "250",
                                       "min.cleanable.dirty.ratio": "0.01"})
        kv = await w.init(None)
        member, epoch, owned = await w.heartbeat("cg", "", 0)
        await w.share_join("sg", "member-a")
        assert await w.share_fetch("sg", "member-a", 0, [], 3) == []
        session = 1
        for i in range(LARGE_ROUNDS):
            await w.idempotent(3)
            await w.transaction("x", i % 3 != 2, [i % PARTITIONS, (i + 1) % PARTITIONS],
                                offsets={i % PARTITIONS: 10 * i + 1} if i % 2 else None)
            await w.group_commit("plain", i % PARTITIONS, 100 + i)
            member, epoch, owned = await w.heartbeat("cg", member, epoch, owned)
            await w.group_commit("cg", owned[i % len(owned)], 200 + i, (member, epoch))
            await w.keyed(*kv, [(f"k{w.rng.randrange(4)}".encode(),
                                 None if w.rng.random() < 0.15 else w._values(1, "kv")[0])
                                for _ in range(2)])
            got = await w.share_fetch("sg", "member-a", session, [], 3)
            session += 1
            if got:  # in the last rounds ranges stay acquired (before, the state stays short)
                await w.share_accept("sg", "member-a", session,
                                     got[:1] if i >= LARGE_ROUNDS - 3 else got)
                session += 1
            await w.transaction("y", True, [(i + 2) % PARTITIONS])
            await w.clean()
    elif name == "rolls":  # small segments: every few batches a roll
        await w.create_topic("rolled", 1, {"segment.bytes": "400"})
        await w.idempotent(6)
        await w.transaction("r", True, [0, 1])
        await w.idempotent(4)
    else:
        raise ValueError(name)


@dataclass
class Recording:
    workdir: Path
    ops: list
    initial: Model
    journal: Journal
    flush: str
    name: str
    extra: dict[str, str] = field(default_factory=dict)  # the workload's broker settings

    def initial_copy(self) -> Model:
        """The model of the start, to advance (``initial`` itself stays as it is)."""
        return copy.deepcopy(self.initial)


@contextlib.contextmanager
def seeded_uuids(seed: int) -> Iterator[None]:
    """``uuid.uuid4`` (topic ids, member ids, the cluster id) draws from ``seed``: a workload
    writes the same bytes each time it runs, so that a violation's state is found again."""
    rng = random.Random(seed)
    saved = uuid.uuid4
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
    try:
        yield
    finally:
        uuid.uuid4 = saved


def record(workdir: Path, name: str, flush: str = "always", seed: int = 0,
           skip_sync: int | None = None) -> Recording:
    """Run workload ``name`` once on a fresh data dir under the recorder."""
    data = workdir / "data"
    data.mkdir(parents=True)
    journal = Journal()
    with boot_id(workdir, "boot-a"):
        recorder = Recorder(data)
        initial = recorder.initial()
        recorder.skip_sync = skip_sync
        with recorder, seeded_uuids(seed):
            extra = BROKER_SETTINGS.get(name, {})
            b = build_broker(broker_config(data, flush, **extra), clock=ManualClock(NOW))
            try:
                trio.run(_run_workload, b, recorder, journal, name, random.Random(seed))
            finally:
                crash(b)
    return Recording(workdir, list(recorder.ops), initial, journal, flush, name, extra)


# -- the checks of one crash state -----------------------------------------------------------


class Violation(AssertionError):
    pass


def _committed_view(b: Broker, partition: int) -> tuple[list[bytes], list[bytes]]:
    """(every record below the high watermark, the records read_committed shows: below the
    LSO, non-transactional or in a transaction whose marker is COMMIT), from the log itself."""
    p = b.partition(TOPIC, partition)
    batches = []
    offset = p.log_start_offset
    while offset < p.high_watermark:
        data = p.read(offset, 1 << 20, p.high_watermark)
        if not data:
            break
        for header, records in decode_batches_untrusted(bytes(data)):
            if header.last_offset >= p.log_start_offset:  # (a read may start lower)
                batches.append((header, records))
            offset = header.last_offset + 1
    every, committed = [], []
    lso = p.last_stable_offset
    for i, (header, records) in enumerate(batches):
        if header.is_control:
            continue
        values = [bytes(r.value or b"") for r in records]
        every.extend(values)
        if header.base_offset >= lso:
            continue
        if not header.is_transactional:
            committed.extend(values)
            continue
        outcome = None
        for later, recs in batches[i + 1:]:
            if later.is_control and later.producer_id == header.producer_id:
                outcome = parse_control_record(recs[0])[0]
                break
        if outcome is None:
            raise Violation(f"{TOPIC}-{partition}: a transactional batch at "
                            f"{header.base_offset} below the LSO {lso} has no marker")
        if outcome == ControlType.COMMIT:
            committed.extend(values)
    return every, committed


async def _fetch_committed(client: Client, partition: int, start: int) -> list[bytes]:
    """The records a read_committed consumer gets from ``start`` (Fetch v7 through the real
    handler, the aborted transactions filtered out as Kafka's consumer does)."""
    out: list[bytes] = []
    offset = start
    while True:
        r = await client.fetch(partition, offset)
        part = r.responses[0].partitions[0]
        data = bytes(part.records)
        if part.error_code != ErrorCode.NONE or not data:
            return out
        aborted = sorted((a.first_offset, a.producer_id) for a in part.aborted_transactions or [])
        skipping: set[int] = set()
        for header, records in decode_batches_untrusted(data):
            while aborted and aborted[0][0] <= header.last_offset:
                skipping.add(aborted.pop(0)[1])
            offset = header.last_offset + 1
            if header.is_control:
                if parse_control_record(records[0])[0] == ControlType.ABORT:
                    skipping.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in skipping:
                continue
            out.extend(bytes(x.value or b"") for x in records)


def snapshot(b: Broker) -> dict:
    """What a recovered broker serves (for the idempotence of recovery)."""
    out: dict = {}
    for p in b.logs.all_partitions():
        out[(p.topic, p.index)] = (p.log_start_offset, p.log_end_offset, p.high_watermark,
                                   p.last_stable_offset)
    for md in b.transactions.transactions():
        out[("txn", md.transactional_id)] = (md.producer_id, md.producer_epoch, md.state)
    for group_id, group in b.groups.consumer.groups.items():
        out[("group", group_id)] = (group.group_epoch, group.assignment_epoch, sorted(
            (m.member_id, m.member_epoch) for m in group.members.values()))
    return out


async def _check(b: Broker, rec: Recording, k: int) -> dict:
    """The checks after recovery of the state after operation ``k`` (raises Violation)."""
    j = rec.journal
    client = Client(b, None)
    views = {p: _committed_view(b, p) for p in range(PARTITIONS)}
    committed = {p: set(views[p][1]) for p in range(PARTITIONS)}
    durable = rec.flush == "always"
    # The coordinator's state and the markers agree: after a machine restart nothing is left
    # open (ongoing transactions aborted, prepared ones completed, hanging ones aborted).
    for p in b.logs.all_partitions():
        if p.topic == TRANSACTION_STATE_TOPIC:
            continue
        if p.producers.open_transactions() or p.last_stable_offset != p.high_watermark:
            raise Violation(f"{p.topic}-{p.index}: open after recovery "
                            f"{p.producers.open_transactions()} (LSO {p.last_stable_offset}, "
                            f"HW {p.high_watermark})")
    for md in b.transactions.transactions():
        if md.state not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            raise Violation(f"{md.transactional_id} left {md.state.display_name} by recovery")
    for part in range(PARTITIONS):
        start = b.partition(TOPIC, part).log_start_offset
        fetched = await _fetch_committed(client, part, start)
        if fetched != views[part][1]:
            raise Violation(f"{TOPIC}-{part}: a read_committed Fetch returns {fetched}, the log "
                            f"says {views[part][1]}")
    if durable:
        for pr in j.produced:
            if pr.answered <= k:
                p = b.partition(TOPIC, pr.partition)
                if pr.base_offset < p.log_start_offset and any(
                        w == "log-start" and x[0] == pr.partition for w, x, _ in j.admin):
                    continue  # deleted by a DeleteRecords it sent
                if pr.base_offset < p.log_start_offset and pr.partition in j.log_start_max:
                    continue  # deleted by retention (its log start is checked below)
                data = p.read(pr.base_offset, 1 << 20, p.high_watermark)
                got = [bytes(r.value or b"") for _, rs in decode_batches_untrusted(bytes(data or b""))
                       for r in rs][:len(pr.values)]
                if got != pr.values:
                    raise Violation(f"answered produce at {TOPIC}-{pr.partition}@"
                                    f"{pr.base_offset} {pr.values} reads {got}")
    else:
        # --flush never promises less: what survived of each partition is a prefix of what was
        # appended to it (the answered idempotent batches, in offset order).
        for part in range(PARTITIONS):
            start = b.partition(TOPIC, part).log_start_offset  # (DeleteRecords moves it)
            appended = [v for pr in sorted(j.produced, key=lambda x: x.base_offset)
                        if pr.partition == part and pr.base_offset + len(pr.values) > start
                        for v in pr.values]
            plain = [v for v in views[part][0] if v.startswith(b"i-")]
            if plain != appended[:len(plain)]:
                raise Violation(f"{TOPIC}-{part} kept {plain}, not a prefix of {appended}")
    for t in j.txns:
        sent = {(p, v) for p, vs in t.values.items() for v in vs}
        seen = {(p, v) for p, v in sent if v in committed[p]}
        if durable and t.answered is not None and t.answered <= k:
            if t.commit and seen != sent:
                raise Violation(f"transaction {t.transactional_id} answered committed: "
                                f"{len(seen)}/{len(sent)} records visible")
        if not t.commit and seen:
            raise Violation(f"aborted transaction {t.transactional_id}: {sorted(seen)} visible")
        if durable and seen and seen != sent:
            raise Violation(f"transaction {t.transactional_id} not atomic: {len(seen)}/"
                            f"{len(sent)} records visible")
        if not durable:
            continue
        if t.offsets and t.answered is not None and t.answered <= k and t.commit:
            offsets = await _offsets(client, "g")
            for part, off in t.offsets.items():
                if offsets.get(part, -1) < off:
                    raise Violation(f"offsets of committed transaction {t.transactional_id}: "
                                    f"{offsets}")
    for part, most in j.log_start_max.items():
        start = b.partition(TOPIC, part).log_start_offset
        if start > most:
            raise Violation(f"{TOPIC}-{part} starts at {start} after recovery; retention never "
                            f"moved it past {most}")
    if durable:
        for group, part, off, at in j.group_commits:
            if at <= k:
                answered_offsets = await _offsets(client, group)
                if answered_offsets.get(part, -1) < off:
                    raise Violation(f"answered offset commit {group} {part}:{off} reads "
                                    f"{answered_offsets}")
    await _check_members(b, client, j, k, durable)
    if j.keyed:
        _check_keyed(b, j, k, durable)
    if j.acquired and durable:
        await _check_share(client, j, k)
    if durable:
        await _check_admin(b, client, j, k)
    # The producers act: the one whose transaction was under way commits it, answered success
    # only if every record of it is visible.
    for t in j.txns:
        if t.started > k or (t.answered is not None and t.answered <= k):
            continue
        r, _ = await client.request(ApiKey.END_TXN, 0, {
            "transactional_id": t.transactional_id, "producer_id": t.producer_id,
            "producer_epoch": t.epoch, "committed": t.commit})
        views2 = {p: set(_committed_view(b, p)[1]) for p in range(PARTITIONS)}
        sent = {(p, v) for p, vs in t.values.items() for v in vs}
        seen = {(p, v) for p, v in sent if v in views2[p]}
        if r.error_code == ErrorCode.NONE and t.commit and seen != sent:
            raise Violation(f"EndTxn(commit) of {t.transactional_id} answered NONE after "
                            f"recovery with {len(seen)}/{len(sent)} records visible")
        if r.error_code == ErrorCode.NONE and not t.commit and seen:
            raise Violation(f"EndTxn(abort) of {t.transactional_id}: records visible")
        break  # (one producer per id: its first unanswered transaction)
    for tid in j.ids:
        r, _ = await client.request(ApiKey.INIT_PRODUCER_ID, 0,
                                    {"transactional_id": tid, "transaction_timeout_ms": 60_000})
        if r.error_code != ErrorCode.NONE:
            raise Violation(f"InitProducerId({tid}) after recovery: {ErrorCode(r.error_code)!r}")
    return snapshot(b)


async def _check_members(b: Broker, client: Client, j: Journal, k: int, durable: bool) -> None:
    """KIP-848 groups replayed consistently: every member's epoch is at most the assignment
    epoch, which is at most the group epoch, no partition is owned by two members; with ``--flush always`` a member answered epoch E
    is there with an epoch at least E, and if exactly E its heartbeat at E is accepted."""
    groups = {g for g, _, _, _ in j.heartbeats}
    for group_id in sorted(groups):
        group = b.groups.consumer.groups.get(group_id)
        answered: dict[str, int] = {}
        for g, member, epoch, at in j.heartbeats:
            if g == group_id and at <= k:
                answered[member] = epoch
        if group is None:
            if durable and answered:
                raise Violation(f"consumer group {group_id} answered {answered}, missing")
            continue
        epochs = {m.member_id: m.member_epoch for m in group.members.values()}
        if not all(e <= group.assignment_epoch for e in epochs.values()) or \
                group.assignment_epoch > group.group_epoch:
            raise Violation(f"consumer group {group_id}: member epochs {epochs}, assignment "
                            f"epoch {group.assignment_epoch}, group epoch {group.group_epoch}")
        owners: dict[tuple[str, int], str] = {}
        for m in group.members.values():
            for topic, indexes in m.assigned.items():
                for index in indexes:
                    if (topic, index) in owners:
                        raise Violation(f"consumer group {group_id}: {topic}-{index} assigned "
                                        f"to {owners[(topic, index)]} and {m.member_id}")
                    owners[(topic, index)] = m.member_id
        if not durable:
            continue
        for member, epoch in answered.items():
            if epochs.get(member, -1) < epoch:
                raise Violation(f"consumer group {group_id}: member {member} answered epoch "
                                f"{epoch}, recovered {epochs.get(member)}")
            if epochs[member] == epoch:
                r, _ = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {
                    "group_id": group_id, "member_id": member, "member_epoch": epoch,
                    "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
                    "server_assignor": None, "topic_partitions": None})
                if r.error_code != ErrorCode.NONE:
                    raise Violation(f"consumer group {group_id}: member {member} at its "
                                    f"answered epoch {epoch}: {ErrorCode(r.error_code)!r}")


async def _check_share(client: Client, j: Journal, k: int) -> None:
    """The share group: a new member fetching everything gets no record whose ACCEPT was
    answered, and gets back every record acquired (answered) that no ACCEPT named."""
    w = Workload(client, Journal(), random.Random(0))
    await w.share_join("sg", "member-b")
    delivered: set[int] = set()
    epoch = 0
    while True:
        got = await w.share_fetch("sg", "member-b", epoch, [], 500)
        epoch += 1
        if not got:
            break
        for a, b in got:
            delivered.update(range(a, b + 1))
    accepted_answered = {o for a, b, at in j.accepted if at is not None and at <= k
                         for o in range(a, b + 1)}
    accepted_sent = {o for a, b, _ in j.accepted for o in range(a, b + 1)}
    again = sorted(delivered & accepted_answered)
    if again:
        raise Violation(f"share group: records {again} answered ACCEPTed, delivered again")
    acquired = {o for a, b, at in j.acquired if at <= k for o in range(a, b + 1)}
    lost = sorted(acquired - accepted_sent - delivered)
    if lost:
        raise Violation(f"share group: records {lost} acquired, never acknowledged, not "
                        f"delivered again (delivered {sorted(delivered)})")


def _check_keyed(b: Broker, j: Journal, k: int, durable: bool) -> None:
    """The compacted topic ``kv``: every value read was sent for its key, in the order sent;
    with ``--flush always`` each key's latest value is its last answered one or a later one
    sent (a key may be gone only if that is a tombstone)."""
    if "kv" not in b.logs.topics():
        return  # (its creation is checked with the other answered admin requests)
    p = b.partition("kv", 0)
    read: list[tuple[bytes, bytes | None]] = []
    offset = p.log_start_offset
    while offset < p.high_watermark:
        data = p.read(offset, 1 << 20, p.high_watermark)
        if not data:
            break
        for header, records in decode_batches_untrusted(bytes(data)):
            offset = header.last_offset + 1
            if header.is_control:
                continue
            read.extend((bytes(r.key or b""), None if r.value is None else bytes(r.value))
                        for r in records)
    sent: dict[bytes, list[tuple[bytes | None, int | None]]] = {}
    for key, value, at in j.keyed:
        sent.setdefault(key, []).append((value, at))
    last: dict[bytes, int] = {}
    for key, value in read:
        positions = [i for i, (v, _) in enumerate(sent.get(key, [])) if v == value]
        if not positions:
            raise Violation(f"kv: {key!r} reads {value!r}, never sent for it")
        later = [i for i in positions if i >= last.get(key, -1)]
        if not later:
            raise Violation(f"kv: {key!r} reads {value!r} after a later value")
        last[key] = later[0]  # (the earliest: a tombstone may have been sent more than once)
    if not durable:
        return
    for key, values in sent.items():
        answered = [i for i, (_, at) in enumerate(values) if at is not None and at <= k]
        if not answered:
            continue
        if key not in last:
            if any(v is None for v, _ in values[answered[-1]:]):
                continue  # deleted: the cleaner may have removed the tombstone too
            raise Violation(f"kv: {key!r} answered {values[answered[-1]][0]!r}, gone")
        if last[key] < answered[-1] and not (values[last[key]][0] is None and any(
                v is None for v, _ in values[answered[-1]:])):
            raise Violation(f"kv: {key!r} reads {values[last[key]][0]!r}, answered "
                            f"{values[answered[-1]][0]!r} later")


async def _check_admin(b: Broker, client: Client, j: Journal, k: int) -> None:
    """Answered topic creations and deletions, DeleteRecords, ACLs and SCRAM credentials."""
    topics = b.logs.topics()
    acls = scram = None
    for what, which, at in j.admin:
        if at > k:
            continue
        if what == "created" and which not in topics and \
                not any(w == "deleted" and n == which for w, n, _ in j.admin):
            raise Violation(f"topic {which} answered created, missing")
        if what == "deleted" and which in topics:
            raise Violation(f"topic {which} answered deleted, still there")
        if what == "log-start":
            part, offset = which
            if b.partition(TOPIC, part).log_start_offset < offset:
                raise Violation(f"DeleteRecords {part}:{offset} answered, log start "
                                f"{b.partition(TOPIC, part).log_start_offset}")
        if what == "acl":
            if acls is None:
                r, _ = await client.request(ApiKey.DESCRIBE_ACLS, 1, {
                    "resource_type_filter": 1, "resource_name_filter": None,
                    "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                    "operation": 1, "permission_type": 1})
                acls = {a.principal for res in r.resources for a in res.acls}
            if f"User:{which}" not in acls:
                raise Violation(f"ACL of {which} answered created, missing: {acls}")
        if what == "scram":
            if scram is None:
                r, _ = await client.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                                            {"users": None})
                scram = {x.user for x in r.results}
            if which not in scram:
                raise Violation(f"SCRAM credential of {which} answered, missing: {scram}")


async def _checked(b: Broker, rec: Recording, k: int) -> None:
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(b.flusher.run)
            found: Violation | None = None
            try:
                await _check(b, rec, k)
            except Violation as exc:
                found = exc
            nursery.cancel_scope.cancel()
    if found is not None:
        raise found


async def _offsets(client: Client, group: str) -> dict[int, int]:
    r, _ = await client.request(ApiKey.OFFSET_FETCH, 2, {
        "group_id": group, "topics": [{"name": TOPIC, "partition_indexes": list(range(PARTITIONS))}]})
    return {p.partition_index: p.committed_offset for t in r.topics for p in t.partitions}


def recover_and_check(rec: Recording, model: Model, k: int, choice: str, rng: random.Random,
                      scratch: Path, state: list[tuple[str, bytes | None]] | None = None
                      ) -> None:
    """Materialize the state (``state``: already drawn, ``Model.state``), recover it after a
    machine restart, check it, then crash the recovered broker (same boot) and recover again:
    nothing may change."""
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    data = scratch / "data"
    data.mkdir()
    write_state(data, model.state(choice, rng) if state is None else state)
    with boot_id(scratch, "boot-b"), no_real_syncs():
        b = build_broker(broker_config(data, rec.flush, **rec.extra),
                         clock=ManualClock(NOW + 1000))
        try:
            before = {p: b.partition(TOPIC, p).last_stable_offset
                      for p in range(PARTITIONS)} if TOPIC in b.logs.topics() else None
            if before is not None:
                trio.run(_checked, b, rec, k)
            first = snapshot(b)
        finally:
            crash(b)
        b = build_broker(broker_config(data, rec.flush, **rec.extra),
                         clock=ManualClock(NOW + 2000))
        try:
            second = snapshot(b)
        finally:
            crash(b)
    if first != second:
        diff = {key: (first.get(key), second.get(key)) for key in first.keys() | second.keys()
                if first.get(key) != second.get(key)}
        raise Violation(f"a second recovery changed the state: {diff}")


# Crash states are many small directories made and removed: in memory when the machine has a
# tmpfs for it (a temporary directory all the same), else in the default temporary directory.
_FAST_TMP = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None

CHOICES = ("all", "none", "mixed", "prefix", "torn")


def crash_points(rec: Recording, every: bool, samples: int, rng: random.Random,
                 wanted: set[int] | None = None) -> Iterator[tuple[int, Model]]:
    """(k, model after k operations), for every k (``every``), ``samples`` sampled ones or
    those ``wanted``, in order. The model is the same object, advanced: use it before the
    next."""
    n = len(rec.ops)
    if wanted is None:
        wanted = set(range(n + 1)) if every else set(rng.sample(range(n + 1),
                                                                min(samples, n + 1)))
    model = rec.initial_copy()
    for k in range(n + 1):
        if k in wanted:
            yield k, model
        if k < n:
            model.apply(rec.ops[k])


@dataclass
class Result:
    states: int = 0  # crash states drawn (each checked, or the same as one checked)
    checked: int = 0  # distinct ones recovered and checked
    violations: list[str] = field(default_factory=list)
    space: int = 0  # crash states the cut points may leave (``Model.outcomes``)
    drawn: list[tuple[int, str, int]] = field(default_factory=list)  # (sample) op, choice, seed


def answer_points(j: Journal) -> list[int]:
    """Every operation count a check compares the crash point with (answers, starts), sorted:
    two crash points with as many of them at or before them are checked alike."""
    points = [p.answered for p in j.produced]
    for t in j.txns:
        points.append(t.started)
        if t.answered is not None:
            points.append(t.answered)
    points += [at for _, _, _, at in j.group_commits]
    points += [at for _, _, at in j.admin]
    points += [at for _, _, _, at in j.heartbeats]
    points += [e[2] for e in j.keyed if e[2] is not None]
    points += [at for _, _, at in j.acquired]
    points += [e[2] for e in j.accepted if e[2] is not None]
    return sorted(points)


def explore(name: str, seed: int, every: bool = True, samples: int = 0,
            choices: tuple[str, ...] = CHOICES, flush: str = "always",
            skip_sync: int | None = None, stop_at_first: bool = False,
            only: set[int] | None = None) -> Result:
    """Record workload ``name`` and check crash states (see ``crash_points``); every
    violation is reported with the seed, the operation and the choice that reproduce it.
    A state drawn that is byte for byte one already checked, at a point with the same answers
    before it, is counted and not recovered again (its checks would be the same)."""
    rng = random.Random(seed)
    result = Result()
    with tempfile.TemporaryDirectory(prefix="crashsim-", dir=_FAST_TMP) as tmp:
        work = Path(tmp)
        rec = record(work / "rec", name, flush, seed, skip_sync)
        points = answer_points(rec.journal)
        seen: set[tuple[int, int]] = set()
        for k, model in crash_points(rec, every, samples, rng):
            if only is not None and k not in only:
                continue
            result.space += model.outcomes()
            for choice in choices:
                state_seed = rng.randrange(1 << 30)
                state = model.state(choice, random.Random(state_seed))
                key = (bisect.bisect_right(points, k), hash(tuple(state)))
                result.states += 1
                if key in seen:
                    continue
                seen.add(key)
                result.checked += 1
                try:
                    recover_and_check(rec, model, k, choice, random.Random(state_seed),
                                      work / "state", state)
                except Violation as exc:
                    result.violations.append(violation_line(name, seed, flush, k, len(rec.ops),
                                                            choice, state_seed, exc))
                    if stop_at_first:
                        return result
    return result


def sample(name: str, seed: int, seconds: float, flush: str = "always",
           max_states: int | None = None, batch: int = 2000) -> Result:
    """Record workload ``name`` once and check crash states drawn from all it may leave
    (``Result.space`` of them): a point uniformly, then one of ``CHOICES`` and the state's own
    seed; until ``seconds`` have passed (or ``max_states``). The draws depend on ``seed``
    only: a longer run checks the same states first, then more."""
    rng = random.Random(seed)
    result = Result()
    deadline = time.monotonic() + seconds
    with tempfile.TemporaryDirectory(prefix="crashsim-", dir=_FAST_TMP) as tmp:
        work = Path(tmp)
        rec = record(work / "rec", name, flush, seed)
        points = answer_points(rec.journal)
        n = len(rec.ops)
        result.space = sum(model.outcomes() for _, model in crash_points(
            rec, True, 0, rng))
        seen: set[tuple[int, int]] = set()
        while time.monotonic() < deadline and (max_states is None or
                                               result.states < max_states):
            draws = sorted((rng.randrange(n + 1), rng.choice(CHOICES), rng.randrange(1 << 30))
                           for _ in range(batch))
            at: dict[int, list[tuple[str, int]]] = {}
            for k, choice, state_seed in draws:
                at.setdefault(k, []).append((choice, state_seed))
            for k, model in crash_points(rec, False, 0, rng, set(at)):
                for choice, state_seed in at[k]:
                    if time.monotonic() >= deadline or (max_states is not None and
                                                        result.states >= max_states):
                        break
                    state = model.state(choice, random.Random(state_seed))
                    key = (bisect.bisect_right(points, k), hash(tuple(state)))
                    result.states += 1
                    result.drawn.append((k, choice, state_seed))
                    if key in seen:
                        continue
                    seen.add(key)
                    result.checked += 1
                    try:
                        recover_and_check(rec, model, k, choice, random.Random(state_seed),
                                          work / "state", state)
                    except Violation as exc:
                        result.violations.append(violation_line(name, seed, flush, k, n,
                                                                choice, state_seed, exc))
    return result


def violation_line(name: str, seed: int, flush: str, k: int, n: int, choice: str,
                   state_seed: int, exc: Exception) -> str:
    """A violation, with the one command that checks its state again (under the same
    ``PYTHONHASHSEED``: the order of some syncs follows the order of a set)."""
    again = (f"PYTHONHASHSEED={os.environ.get('PYTHONHASHSEED', '<unset: set it for the run>')} "
             f".venv/bin/python -c \"from tests.crashsim import harness; harness.reproduce("
             f"'{name}', {seed}, {k}, '{choice}', {state_seed}, '{flush}')\"")
    return (f"workload={name} seed={seed} flush={flush} op={k}/{n} choice={choice} "
            f"state_seed={state_seed}: {exc}\n  again: {again}")


def reproduce(name: str, seed: int, op: int, choice: str, state_seed: int,
              flush: str = "always") -> None:
    """Check the one crash state a violation line names (its workload, seed, op, choice and
    state_seed): raises the Violation again while the bug is there."""
    with tempfile.TemporaryDirectory(prefix="crashsim-", dir=_FAST_TMP) as tmp:
        work = Path(tmp)
        rec = record(work / "rec", name, flush, seed)
        for k, model in crash_points(rec, True, 0, random.Random(seed)):
            if k == op:
                recover_and_check(rec, model, k, choice, random.Random(state_seed),
                                  work / "state")
                return
    raise ValueError(f"workload {name} has no operation {op}")
