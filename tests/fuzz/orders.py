"""The hostile-order fuzzer (issue 28): VALID requests in hostile orders against the real broker.

The byte-level fuzzer (``runner.py``) mutates frames; the bugs of issue 28 need frames that are
all valid, sent in an order no well-behaved client uses: AddPartitionsToTxn of the internal topics
then EndTxn, a config change of ``__consumer_offsets`` then OffsetCommit. This one draws, from a
seeded ``random.Random``, a sequence of requests over:

- the transaction APIs with producer ids and epochs that are current, stale (an earlier epoch),
  future (above the current one, up to the epoch limit), foreign (another transactional id's) or
  none (-1), transaction versions 1 and 2 (EndTxn v5, Produce v12), short transaction timeouts
  (the abort-on-timeout path runs during the run);
- produce (plain, idempotent, transactional), groups (join, sync, heartbeat, leave, offset commit
  and fetch, TxnOffsetCommit, deletes), WriteTxnMarkers, DeleteRecords, CreatePartitions,
  Create/DeleteTopics, AlterConfigs and IncrementalAlterConfigs of the keys that matter, each on
  ordinary and internal topic names;
- every other served API with its default (valid, empty) request at a random version;
- dropped connections: a request sent and the connection closed before the answer.

Invariants, checked after each run (``check_broker``): the broker still answers, its output has no
traceback, and after a clean restart and after a kill -9 restart every transaction-log partition
has a coordinator, every partition of every topic can be fetched, a new transactional producer
commits, a group commits and fetches its offsets, offsets committed before the run are still
there and a canary transaction committed before the run reads back exactly.

Each run is an anonymous client's on a default broker, or (``secured``) a SASL user's with every
right on ``Topic:*`` on a broker with an authorizer.
``python -m tests.fuzz.orders SECONDS [SEED ...] [--secured]`` runs it by hand; the suite runs a short one
(``tests/fuzz/test_orders.py``; longer with ``MINIBROKER_ORDERS_SECONDS`` and
``MINIBROKER_ORDERS_SEEDS``).
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from broker.log.topics import CONSUMER_OFFSETS_TOPIC as OFFSETS
from broker.log.topics import TRANSACTION_STATE_TOPIC as TXN_LOG
from broker.log.topics import partition_for
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.api_versions import ADVERTISED
from tests.broker_process import BrokerProcess
from tests.fuzz import maximal as maximal_frames
from tests.fuzz import ops
from tests.raw_client import RawConnection
from tests.secured import secured

TOPICS = {"t": 2, "u": 1}
CANARY_TOPIC = "canary"
CHECK_TOPIC = "invariants"  # the invariants' own topic: the run never touches it (nor the canary)
CANARY = [b"canary-1", b"canary-2", b"canary-3"]
KEPT_GROUP, KEPT_OFFSET = "kept-group", 42
IDS = ["a", "b", "c", "tv2"]
GROUPS = ["g1", "g2"]
MAX_EPOCH = 32767
# Requests built here; every other served API gets its default request.
_BUILT = {ApiKey.PRODUCE, ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN,
          ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT,
          ApiKey.WRITE_TXN_MARKERS, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH,
          ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.DELETE_RECORDS,
          ApiKey.CREATE_PARTITIONS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_TOPICS,
          ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP}
# The SASL exchange ends a connection that does not complete it (not a finding).
_DEFAULTS = sorted(k for k in ADVERTISED if k not in _BUILT
                   and k not in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE))
CONFIG_KEYS = {
    "max.message.bytes": ["0", "1", "100"], "cleanup.policy": ["delete", "compact"],
    "retention.ms": ["1", "-1"], "retention.bytes": ["1"], "segment.bytes": ["14", "1024"],
    "segment.ms": ["1"], "max.compaction.lag.ms": ["1"], "delete.retention.ms": ["0", "1000"],
    "min.cleanable.dirty.ratio": ["0"], "message.timestamp.type": ["LogAppendTime"],
}


@dataclass
class Report:
    seed: int
    requests: int = 0
    dropped: int = 0
    by_api: dict = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    maximal: int = 0  # requests with a maximal string (tests/fuzz/maximal.py)
    exits: int = 0  # the invariant: the broker process never exits


class _Fuzz:
    def __init__(self, proc: BrokerProcess, rng: random.Random, report: Report,
                 auth: dict) -> None:
        self.proc = proc
        self.auth = auth
        self.rng = rng
        self.report = report
        self.conn: RawConnection | None = None
        # transactional id (None: idempotent) -> every (pid, epoch) the broker answered, newest last
        self.pairs: dict[str | None, list[tuple[int, int]]] = {}
        self.sequences: dict[tuple[int, str, int], int] = {}
        self.members: dict[str, tuple[str, int]] = {}  # group -> (member id, generation)

    # -- choices ---------------------------------------------------------------------------

    def topic(self) -> str:
        return self.rng.choice([*TOPICS, *TOPICS, TXN_LOG, OFFSETS, "missing"])

    def partition(self) -> tuple[str, int]:
        topic = self.topic()
        return topic, self.rng.randrange(TOPICS.get(topic, 3))

    def pair(self, tid: str | None) -> tuple[int, int]:
        """A producer id and epoch: current, stale, future, foreign or none."""
        rng = self.rng
        mine = self.pairs.get(tid) or [(-1, -1)]
        kind = rng.choice(["current", "current", "current", "stale", "future", "foreign",
                           "none"])
        if kind == "current":
            return mine[-1]
        if kind == "stale":
            return rng.choice(mine)
        if kind == "future":
            pid, epoch = mine[-1]
            return pid, min(MAX_EPOCH, max(epoch, 0) + rng.choice([1, 2, 100, MAX_EPOCH]))
        if kind == "foreign":
            others = [p for t, ps in self.pairs.items() if t != tid for p in ps]
            return rng.choice(others) if others else (-1, -1)
        return -1, -1

    # -- the connection ----------------------------------------------------------------------

    def _conn(self) -> RawConnection:
        if self.conn is None:
            self.conn = ops.connect(self.proc.port, timeout=15, **self.auth)
        return self.conn

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    # -- one step ------------------------------------------------------------------------------

    def step(self) -> None:
        rng = self.rng
        action = rng.choice([
            self.init, self.init, self.add_partitions, self.add_partitions, self.produce,
            self.produce, self.produce, self.end_txn, self.end_txn, self.offsets_txn,
            self.markers, self.offset_commit, self.group, self.config, self.admin, self.other,
            self.other, self.dropped_request, self.maximal,
        ])
        try:
            action(self._conn())
        except Exception as exc:  # noqa: BLE001 - every failure of a valid request is a finding
            # A connection the broker closed or an answer that did not come: a finding unless
            # the broker is gone (the invariants report that).
            self.report.findings.append(f"{action.__name__}: {type(exc).__name__}: {exc}")
            self.drop()
        self.report.requests += 1
        self.report.by_api[action.__name__] = self.report.by_api.get(action.__name__, 0) + 1

    def init(self, conn: RawConnection) -> None:
        rng = self.rng
        tid = rng.choice([*IDS, None])
        version = 5 if tid == "tv2" else rng.choice([0, 3, 4])
        pid, epoch = self.pair(tid) if version >= 3 and rng.random() < 0.5 else (-1, -1)
        code, new_pid, new_epoch = ops.init_producer_id(
            conn, tid, rng.choice([300, 2000, 60_000]), pid, epoch, version)
        if code == ErrorCode.NONE:
            self.pairs.setdefault(tid, []).append((new_pid, new_epoch))

    def add_partitions(self, conn: RawConnection) -> None:
        tid = self.rng.choice(IDS)
        pid, epoch = self.pair(tid)
        parts = sorted({self.partition() for _ in range(self.rng.randint(1, 3))})
        ops.add_partitions(conn, tid, pid, epoch, parts, self.rng.choice([0, 3]))

    def produce(self, conn: RawConnection) -> None:
        rng = self.rng
        tid = rng.choice([*IDS, None, None])
        topic, index = self.partition()
        kind = rng.choice(["plain", "idempotent", "transactional"] if tid else
                          ["plain", "idempotent"])
        pid, epoch = self.pair(tid) if kind != "plain" else (-1, -1)
        key = (pid, topic, index)
        seq = -1
        if kind != "plain":
            seq = rng.choice([self.sequences.get(key, 0)] * 3 + [0, rng.randrange(1 << 20)])
        if kind != "plain" and pid < 0:
            pid, epoch, seq = rng.randrange(1 << 40), 0, 0  # an id the broker never gave
        values = [b"v%d" % rng.randrange(1000) for _ in range(rng.randint(1, 3))]
        version = 12 if tid == "tv2" and kind == "transactional" else rng.choice([3, 9])
        code = ops.produce(conn, topic, index,
                           ops.batch(values, pid, epoch, seq, kind == "transactional"),
                           tid if kind == "transactional" else None, version,
                           acks=rng.choice([-1, -1, 1]))
        if code == ErrorCode.NONE and seq >= 0:
            self.sequences[key] = seq + len(values)

    def end_txn(self, conn: RawConnection) -> None:
        tid = self.rng.choice(IDS)
        pid, epoch = self.pair(tid)
        version = 5 if tid == "tv2" else self.rng.choice([0, 3])
        code, new_pid, new_epoch = ops.end_txn(conn, tid, pid, epoch, self.rng.random() < 0.6,
                                               version)
        if code == ErrorCode.NONE and version >= 5:
            self.pairs.setdefault(tid, []).append((new_pid, new_epoch))

    def offsets_txn(self, conn: RawConnection) -> None:
        tid = self.rng.choice(IDS)
        pid, epoch = self.pair(tid)
        group = self.rng.choice(GROUPS)
        if self.rng.random() < 0.5:
            ops.add_offsets(conn, tid, pid, epoch, group)
        else:
            ops.txn_offset_commit(conn, tid, group, pid, epoch,
                                  {self.partition(): self.rng.randrange(100)},
                                  self.rng.choice([0, 3, 5]))

    def markers(self, conn: RawConnection) -> None:
        tid = self.rng.choice([*IDS, None])
        pid, epoch = self.pair(tid)
        ops.write_txn_markers(conn, pid, epoch, self.rng.random() < 0.5,
                              sorted({self.partition() for _ in range(2)}))

    def offset_commit(self, conn: RawConnection) -> None:
        group = self.rng.choice(GROUPS)
        if self.rng.random() < 0.6:
            ops.offset_commit(conn, group, {self.partition(): self.rng.randrange(100)})
        else:
            ops.offset_fetch(conn, group, [self.partition()])

    def group(self, conn: RawConnection) -> None:
        rng = self.rng
        group = rng.choice(GROUPS)
        member, generation = self.members.get(group, ("", -1))
        what = rng.choice(["join", "join", "sync", "heartbeat", "leave"])
        if what == "join":
            r = conn.request(ApiKey.JOIN_GROUP, 3, {
                "group_id": group, "session_timeout_ms": 6000, "rebalance_timeout_ms": 300,
                "member_id": member if rng.random() < 0.7 else "", "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}]})
            if r.error_code == ErrorCode.NONE:
                self.members[group] = (r.member_id, r.generation_id)
        elif what == "sync":
            conn.request(ApiKey.SYNC_GROUP, 1, {
                "group_id": group, "generation_id": generation, "member_id": member,
                "assignments": [{"member_id": member, "assignment": b""}] if member else []})
        elif what == "heartbeat":
            conn.request(ApiKey.HEARTBEAT, 1, {"group_id": group, "generation_id": generation,
                                               "member_id": member})
        else:
            conn.request(ApiKey.LEAVE_GROUP, 1, {"group_id": group, "member_id": member})
            self.members.pop(group, None)

    def config(self, conn: RawConnection) -> None:
        rng = self.rng
        topic = rng.choice([*TOPICS, TXN_LOG, OFFSETS])
        key = rng.choice(sorted(CONFIG_KEYS))
        if rng.random() < 0.7:
            op = rng.choice([0, 0, 1, 2])
            if op == 2 and key != "cleanup.policy":
                op = 0
            ops.alter_config(conn, topic, [(key, op, None if op == 1 else
                                            rng.choice(CONFIG_KEYS[key]))])
        else:
            ops.replace_config(conn, topic, {key: rng.choice(CONFIG_KEYS[key])})

    def admin(self, conn: RawConnection) -> None:
        rng = self.rng
        topic, index = self.partition()
        what = rng.choice(["delete_records", "create_partitions", "delete_topic", "create"])
        if what == "delete_records":
            ops.delete_records(conn, topic, index, rng.choice([-1, 0, 1, 5]))
        elif what == "create_partitions":
            ops.create_partitions(conn, topic, rng.choice([1, 3, 60]))
        elif what == "delete_topic" and rng.random() < 0.3:
            ops.delete_topic(conn, topic)
        else:
            ops.create_topic(conn, topic, TOPICS.get(topic, 3))

    def other(self, conn: RawConnection) -> None:
        api = self.rng.choice(_DEFAULTS)
        r = ADVERTISED[api]
        conn.request(api, self.rng.randint(r.min, r.max), {})

    def maximal(self, conn: RawConnection) -> None:
        """A request with a maximal string in one field (tests/fuzz/maximal.py), on a connection
        of its own: the broker answers it or closes that connection (not a finding), and
        never exits (the invariant the loop checks)."""
        frame = maximal_frames.one(self.rng)
        with ops.connect(self.proc.port, timeout=15, **self.auth) as own:
            own.send_raw(len(frame).to_bytes(4, "big") + frame)
            try:
                own.read_frame()
            except OSError:
                pass
        self.report.maximal += 1

    def dropped_request(self, conn: RawConnection) -> None:
        """A transaction request sent and the connection closed before its answer."""
        tid = self.rng.choice(IDS)
        pid, epoch = self.pair(tid)
        if self.rng.random() < 0.5:
            conn.send_request(ApiKey.END_TXN, 3, {"transactional_id": tid, "producer_id": pid,
                                                  "producer_epoch": epoch, "committed": True})
        else:
            conn.send_request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
                "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                "topics": [{"name": TXN_LOG, "partitions": [0, 1]}]})
        self.drop()
        self.report.dropped += 1


# -- the invariants ----------------------------------------------------------------------------


def _ids_per_partition(partitions: int) -> list[str]:
    """One transactional id for each transaction-log partition."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < partitions:
        found.setdefault(partition_for(f"probe-{i}", partitions), f"probe-{i}")
        i += 1
    return [found[p] for p in range(partitions)]


def _fetchable(conn: RawConnection, topic: str, partition: int) -> str | None:
    """None if the partition answers a ListOffsets and a Fetch from its log start; else why."""
    r = conn.request(ApiKey.LIST_OFFSETS, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -2}]}]})
    p = r.topics[0].partitions[0]
    if p.error_code:
        return f"ListOffsets {ErrorCode(p.error_code).name}"
    f = conn.request(ApiKey.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 16,
        "isolation_level": 1, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": partition, "fetch_offset": p.offset, "partition_max_bytes": 1 << 16}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    code = f.responses[0].partitions[0].error_code
    return f"Fetch {ErrorCode(code).name}" if code else None


def check_broker(proc: BrokerProcess, auth: dict, canary: list[bytes],
                 committed: dict[str, int], label: str, topic: str = "t") -> None:
    """The invariants after a (re)start; raises AssertionError naming the first broken one."""
    output = "".join(proc.output)
    assert "Traceback" not in output, f"{label}: a traceback in the broker's output:\n{output}"
    assert proc.proc is not None and proc.proc.poll() is None, f"{label}: the broker exited"
    with ops.connect(proc.port, **auth) as conn:
        for tid in _ids_per_partition(50):
            r = conn.request(ApiKey.FIND_COORDINATOR, 1, {"key": tid, "key_type": 1})
            assert r.error_code == ErrorCode.NONE, \
                f"{label}: no coordinator for {tid}: {ErrorCode(r.error_code).name}"
        meta = conn.request(ApiKey.METADATA, 9, {"topics": None})
        broken = []
        for t in meta.topics:
            for p in t.partitions:
                why = _fetchable(conn, t.name, p.partition_index)
                if why:
                    broken.append(f"{t.name}-{p.partition_index}: {why}")
        assert not broken, f"{label}: partitions not available: {broken}"
        ops.commit_transaction(conn, f"after-{time.monotonic_ns()}", topic, [b"after"])
        group = f"after-group-{time.monotonic_ns()}"
        assert ops.offset_commit(conn, group, {(topic, 0): 7}) == {(topic, 0): 0}, label
        assert ops.offset_fetch(conn, group, [(topic, 0)]) == {(topic, 0): (0, 7)}, label
        for g, offset in committed.items():
            assert ops.offset_fetch(conn, g, [(topic, 0)]) == {(topic, 0): (0, offset)}, \
                f"{label}: the offset of {g}"
        assert ops.read_committed(conn, CANARY_TOPIC) == canary, f"{label}: the canary"


# -- a run --------------------------------------------------------------------------------------


# ``secured``: the run is bob's, a SASL user with every right on Topic:*, Write on
# TransactionalId:*, Read on Group:* and ClusterAction, on a broker with an authorizer.
BOB = {"user": "bob", "password": "bob-secret"}


def _secure(props: list[str]) -> list[str]:
    return [*props, *secured("connection.failed.authentication.delay.ms=0")]


def run(work_dir: Path, seconds: float, seed: int, secured: bool = False) -> Report:
    """One seeded run: setup, ``seconds`` of hostile requests, then the invariants after a clean
    and a kill -9 restart. Raises AssertionError (with the seed) on a broken invariant."""
    report = Report(seed)
    rng = random.Random(seed)
    props = ["group.initial.rebalance.delay.ms=0",
             "transaction.abort.timed.out.transaction.cleanup.interval.ms=200"]
    name = f"{seed}-secured" if secured else str(seed)
    config = work_dir / f"orders-{name}.properties"
    config.write_text("\n".join(_secure(props) if secured else props) + "\n")
    proc = BrokerProcess(work_dir / f"data-{name}", "--config", str(config))
    proc.start()
    auth = BOB if secured else {}
    try:
        if secured:
            with ops.connect(proc.port, "admin", "admin-secret") as admin:
                for resource, resource_name, operation in (
                        ("topic", "*", "all"), ("transactional_id", "*", "write"),
                        ("group", "*", "read"), ("cluster", "kafka-cluster", "cluster_action")):
                    ops.allow(admin, "User:bob", resource, resource_name, operation)
        with ops.connect(proc.port, **auth) as conn:
            for topic, partitions in {**TOPICS, CANARY_TOPIC: 1, CHECK_TOPIC: 1}.items():
                assert ops.create_topic(conn, topic, partitions) == ErrorCode.NONE
            ops.commit_transaction(conn, "canary", CANARY_TOPIC, CANARY)
            assert ops.offset_commit(conn, KEPT_GROUP, {(CHECK_TOPIC, 0): KEPT_OFFSET}) == \
                {(CHECK_TOPIC, 0): 0}
        fuzz = _Fuzz(proc, rng, report, auth)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if proc.proc is None or proc.proc.poll() is not None:
                report.exits += 1
                report.findings.append("the broker exited during the run")
                break
            fuzz.step()
        fuzz.drop()
        committed = {KEPT_GROUP: KEPT_OFFSET}
        label = f"seed {name}"
        check_broker(proc, auth, CANARY, committed, f"{label}, after the run", CHECK_TOPIC)
        assert proc.stop() == 0, f"{label}: unclean exit:\n" + "".join(proc.output[-40:])
        proc.restart()
        check_broker(proc, auth, CANARY, committed, f"{label}, clean restart", CHECK_TOPIC)
        proc.kill9()
        proc.restart()
        check_broker(proc, auth, CANARY, committed, f"{label}, kill -9 restart", CHECK_TOPIC)
    finally:
        proc.stop()
    return report


if __name__ == "__main__":
    import tempfile

    args = [a for a in sys.argv[1:] if a != "--secured"]
    seconds = float(args[0]) if args else 30
    seeds = [int(s) for s in args[1:]] or [1]
    with tempfile.TemporaryDirectory() as tmp:
        for s in seeds:
            print(run(Path(tmp), seconds, s, secured="--secured" in sys.argv))
