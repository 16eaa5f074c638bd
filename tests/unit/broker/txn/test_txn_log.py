"""The transaction log (``__transaction_state``): record format, replay, and two-phase transitions
with a crash between prepare and complete."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.log.manager import LogConfig, LogManager
from broker.log.topics import TRANSACTION_STATE_TOPIC as TOPIC
from broker.log.topics import partition_for
from broker.txn import txn_log
from broker.txn.coordinator import TransactionCoordinator, TxnConfig, TxnTransition
from broker.txn.state import TxnState
from broker.txn.txn_log import (
    SEGMENT_BYTES,
    CorruptTxnLogError,
    TxnLog,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

NOW = 1_700_000_000_000
PARTITIONS = 5


def transition(state=TxnState.ONGOING, partitions=frozenset({("orders", 2), ("orders", 0)}),
               tid="tx-1") -> TxnTransition:
    return TxnTransition(tid, 4000, 3999, 7, 6, 60_000, state, frozenset(partitions), NOW, NOW + 5)


def test_golden_record() -> None:
    t = transition(partitions={("orders", 2), ("orders", 0), ("a", 1)})
    assert encode_key("tx-1") == b"\x00\x00\x00\x04tx-1"
    version_0 = (
        struct.pack(">hqqhhib", 0, 4000, 3999, 7, 6, 60_000, 1)
        + struct.pack(">i", 2)
        + b"\x00\x01a" + struct.pack(">ii", 1, 1)
        + b"\x00\x06orders" + struct.pack(">iii", 2, 0, 2)
        + struct.pack(">qq", NOW, NOW + 5)
    )
    # Version 1 appends next_producer_id and the transaction version.
    assert encode_value(t) == b"\x00\x01" + version_0[2:] + struct.pack(">qb", -1, 1)
    assert decode_value("tx-1", version_0) == t  # records written before version 1 still load
    tv2 = t._replace(next_producer_id=5000, txn_version=2)
    assert encode_value(tv2)[-9:] == struct.pack(">qb", 5000, 2)
    assert decode_value("tx-1", encode_value(tv2)) == tv2
    with pytest.raises(CorruptTxnLogError):
        decode_value("tx-1", encode_value(t)[:-9] + struct.pack(">qb", -1, 3))
    assert encode_value(transition(state=TxnState.DEAD)) is None  # a tombstone


def test_golden_record_version_2_with_end_offsets() -> None:
    """A PrepareCommit with end offsets is version 2: version 1's fields, then the tagged
    fields (uvarint count, tag, size), tag 0 the end offsets grouped by topic."""
    t = transition(state=TxnState.PREPARE_COMMIT, partitions={("orders", 2), ("a", 1)})._replace(
        end_offsets=((("a", 1), 7), (("orders", 2), 300)))
    end_offsets = (struct.pack(">i", 2) + b"\x00\x01a" + struct.pack(">iiq", 1, 1, 7)
                   + b"\x00\x06orders" + struct.pack(">iiq", 1, 2, 300))
    without = t._replace(end_offsets=())
    assert encode_value(without)[:2] == b"\x00\x01"  # no tagged field: version 1, as before
    assert encode_value(t) == (b"\x00\x02" + encode_value(without)[2:]
                               + bytes([1, 0, len(end_offsets)]) + end_offsets)
    assert decode_value("tx-1", encode_value(t)) == t
    # A tag this version does not know is skipped (a later version's field); tags ascending.
    unknown = b"\x00\x02" + encode_value(without)[2:] + bytes([2, 0, len(end_offsets)]) + \
        end_offsets + bytes([5, 3]) + b"xyz"
    assert decode_value("tx-1", unknown) == t
    only_unknown = b"\x00\x02" + encode_value(without)[2:] + bytes([1, 9, 1, 0])
    assert decode_value("tx-1", only_unknown) == without
    head = b"\x00\x02" + encode_value(without)[2:]
    for bad in (
        head,  # no tagged-field count
        head + bytes([1, 0, len(end_offsets) + 1]) + end_offsets,  # runs past the record
        head + bytes([1, 0, len(end_offsets) - 8]) + end_offsets[:-8],  # truncated field
        head + bytes([1, 0, 4 + len(end_offsets)]) + end_offsets + b"\x00" * 4,  # bytes after
        head + bytes([2, 0, 0, 0, 0]),  # tag 0 twice
        head + bytes([1, 0, 18]) + struct.pack(">i", 1) + b"\x00\x01a"
        + struct.pack(">iiq", 1, 1, -1),  # a negative end offset
    ):
        with pytest.raises(CorruptTxnLogError):
            decode_value("tx-1", bad)
    with pytest.raises(CorruptTxnLogError):
        decode_value("tx-1", b"\x00\x03" + encode_value(without)[2:])  # unknown version


def test_golden_record_of_one_partition() -> None:
    """One partition (a librdkafka transaction's usual shape) has its own short path in the
    encoder: the same layout, one topic with one partition, and one end offset."""
    t = transition(state=TxnState.PREPARE_COMMIT, partitions={("orders", 2)})._replace(
        end_offsets=((("orders", 2), 300),))
    end_offsets = struct.pack(">i", 1) + b"\x00\x06orders" + struct.pack(">iiq", 1, 2, 300)
    assert encode_value(t) == (
        struct.pack(">hqqhhib", 2, 4000, 3999, 7, 6, 60_000, int(TxnState.PREPARE_COMMIT))
        + struct.pack(">i", 1) + b"\x00\x06orders" + struct.pack(">ii", 1, 2)
        + struct.pack(">qq", NOW, NOW + 5) + struct.pack(">qb", -1, 1)
        + bytes([1, 0, len(end_offsets)]) + end_offsets)
    assert decode_value("tx-1", encode_value(t)) == t


_stored = st.sampled_from([s for s in TxnState
                           if s not in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE)])


@given(
    tid=st.text(min_size=1, max_size=20),
    state=_stored,
    partitions=st.frozensets(st.tuples(st.text(max_size=8), st.integers(0, (1 << 31) - 1)),
                             max_size=6),
    pid=st.integers(-1, (1 << 63) - 1),
    epoch=st.integers(-1, 32767),
    next_pid=st.integers(-1, (1 << 63) - 1),
    txn_version=st.sampled_from([1, 2]),
    end_offsets=st.dictionaries(st.tuples(st.text(max_size=8), st.integers(0, (1 << 31) - 1)),
                                st.integers(0, (1 << 63) - 1), max_size=6),
)
def test_round_trip(tid, state, partitions, pid, epoch, next_pid, txn_version,
                    end_offsets) -> None:
    t = TxnTransition(tid, pid, pid, epoch, -1, 1, state, partitions, -1, NOW, next_pid,
                      txn_version, tuple(sorted(end_offsets.items())))
    assert decode_key(encode_key(tid)) == tid
    assert decode_value(tid, encode_value(t)) == t


def test_a_large_partition_set_round_trips_and_is_not_cached() -> None:
    """The encoder caches small partition sets only (memory stays bounded whatever sets clients
    build): a transaction over 40 partitions of three topics encodes, decodes, and stays out of
    the cache."""
    many = frozenset((f"t{i % 3}", i) for i in range(40))
    cached = txn_log._encode_few_partitions.cache_info().currsize
    t = transition(partitions=many)
    assert decode_value("tx-1", encode_value(t)) == t
    assert txn_log._encode_few_partitions.cache_info().currsize == cached


@pytest.mark.parametrize("bad", [
    b"",
    b"\x00\x01" + b"\x00" * 60,  # unknown version
    struct.pack(">hqqhhib", 0, 1, 1, 0, 0, 1, 9) + b"\x00" * 20,  # unknown state
    struct.pack(">hqqhhib", 0, 1, 1, 0, 0, 1, 6) + b"\x00" * 20,  # Dead is never stored
    struct.pack(">hqqhhib", 0, 1, 1, 0, 0, 1, 1) + struct.pack(">i", 1),  # truncated
    struct.pack(">hqqhhib", 0, 1, 1, 0, 0, 1, 1) + struct.pack(">i", -1) + b"\x00" * 16,
])
def test_bad_values_raise_one_error(bad: bytes) -> None:
    with pytest.raises(CorruptTxnLogError):
        decode_value("tx", bad)
    with pytest.raises(CorruptTxnLogError):
        decode_key(b"\x00\x01\x00\x01x")


def make_logs(tmp_path: Path) -> LogManager:
    return LogManager(tmp_path / "data", LogConfig(preallocate=False), NOW)


def crash(logs: LogManager) -> None:
    """kill -9: nothing more is written (the page cache keeps what was)."""
    for p in logs.all_partitions():
        p.txn_index.close(sync=False)
        for seg in p.segments:
            seg.close()


def persist(log: TxnLog, c: TransactionCoordinator, t: TxnTransition) -> None:
    log.append(t, NOW).flush()
    c.complete(t)


def coordinator() -> TransactionCoordinator:
    ids = itertools.count(1000)
    return TransactionCoordinator(TxnConfig(), lambda: next(ids))


def replayed(logs: LogManager) -> TransactionCoordinator:
    c = coordinator()
    for tid, t in TxnLog(logs, PARTITIONS).replay():
        c.load(tid, t)
    return c


def test_topic_is_created_on_first_use_with_kafka_settings(tmp_path: Path) -> None:
    logs = make_logs(tmp_path)
    log = TxnLog(logs, PARTITIONS)
    assert list(log.replay()) == [] and TOPIC not in logs.topics()
    c = coordinator()
    persist(log, c, c.prepare_init_producer_id("tx-1", 60_000, None, NOW))
    assert logs.topics()[TOPIC] == PARTITIONS
    assert logs.topic_config(TOPIC).segment_bytes == SEGMENT_BYTES
    assert logs.topic_config(TOPIC).compact and not logs.topic_config(TOPIC).delete
    index = partition_for("tx-1", PARTITIONS)
    assert log.partition_of("tx-1") == index
    assert logs.partition(TOPIC, index).log_end_offset == 1
    # A later start keeps the topic's partition count even if the setting changed.
    assert TxnLog(logs, 50).num_partitions == PARTITIONS


def test_crash_between_prepare_and_complete(tmp_path: Path) -> None:
    logs = make_logs(tmp_path)
    log = TxnLog(logs, PARTITIONS)
    c = coordinator()
    persist(log, c, c.prepare_init_producer_id("tx-1", 60_000, None, NOW))
    persist(log, c, c.prepare_add_partitions("tx-1", 1000, 0, [("orders", 0)], NOW))
    # Prepare a commit, make it durable, and crash before completing it in memory.
    prepare = c.prepare_end_txn("tx-1", 1000, 0, True, NOW + 1)
    log.append(prepare, NOW + 1).flush()
    # A second id whose transition was prepared but never persisted.
    persist(log, c, c.prepare_init_producer_id("tx-2", 60_000, None, NOW))
    c.prepare_init_producer_id("tx-2", 60_000, None, NOW + 2)
    crash(logs)

    logs = make_logs(tmp_path)
    c = replayed(logs)
    md = c.get("tx-1")
    # The durable prepared state is back: the outcome is decided, the markers are to write.
    assert (md.state, md.partitions, md.producer_epoch) == \
        (TxnState.PREPARE_COMMIT, frozenset({("orders", 0)}), 0)
    assert c.unfinished() == ["tx-1"]
    # The unpersisted bump of tx-2 never happened.
    assert c.get("tx-2").producer_epoch == 0
    # Completion after the restart.
    log = TxnLog(logs, PARTITIONS)
    persist(log, c, c.prepare_complete("tx-1", NOW + 3))
    crash(logs)
    c = replayed(make_logs(tmp_path))
    md = c.get("tx-1")
    assert (md.state, md.partitions) == (TxnState.COMPLETE_COMMIT, frozenset())
    assert c.unfinished() == []


def test_tombstone_forgets_an_expired_id(tmp_path: Path) -> None:
    logs = make_logs(tmp_path)
    log = TxnLog(logs, PARTITIONS)
    c = coordinator()
    persist(log, c, c.prepare_init_producer_id("tx-1", 60_000, None, NOW))
    persist(log, c, c.prepare_init_producer_id("tx-3", 60_000, None, NOW))
    persist(log, c, c.prepare_dead("tx-1", NOW))
    logs.close()
    c = replayed(make_logs(tmp_path))
    assert c.get("tx-1") is None and c.get("tx-3") is not None


def test_compaction_keeps_the_latest_record_of_each_id_and_drops_expired_ones(
    tmp_path: Path,
) -> None:
    """The transaction log is compacted: history goes, and an expired id's tombstone goes too
    once delete.retention.ms passed after the cleaning that first saw it."""
    from broker.log.cleaner import INTERNAL_DELETE_RETENTION_MS, clean_now

    logs = make_logs(tmp_path)
    log = TxnLog(logs, 1, segment_bytes=1024)
    for i in range(60):  # many transitions of two ids: several closed segments
        for tid in ("keep", "expire"):
            log.append(transition(tid=tid)._replace(txn_last_update_ms=NOW + i), NOW).flush()
    log.append(transition(state=TxnState.DEAD, tid="expire"), NOW).flush()
    partition = logs.partition(TOPIC, 0)

    def roll(now_ms: int) -> None:  # only closed segments are cleaned: start a new one
        base = partition.segments[-1].base_offset
        while partition.segments[-1].base_offset == base:
            log.append(transition(tid="keep")._replace(txn_last_update_ms=now_ms), now_ms).flush()

    roll(NOW)
    before = partition.size_bytes
    clean_now(partition, NOW)
    records = list(TxnLog(logs, 1).replay())
    assert [tid for tid, _ in records].count("keep") <= 2  # the latest (+ the active segment's)
    assert ("expire", None) in records  # the tombstone stays for now
    assert partition.size_bytes < before / 4
    later = NOW + INTERNAL_DELETE_RETENTION_MS + 1
    roll(later)
    clean_now(partition, later)
    assert "expire" not in {tid for tid, _ in TxnLog(logs, 1).replay()}
    assert replayed(logs).get("keep") is not None


def _append_garbage(logs: LogManager, tid: str) -> int:
    """A CRC-valid record of ``tid`` whose value does not decode; returns its offset."""
    from protocol.records import encode_batch
    from tests.fuzz.poison import recrc

    partition = logs.partition(TOPIC, partition_for(tid, PARTITIONS))
    offset = partition.log_end_offset
    partition.append_control_batch(recrc(encode_batch([(encode_key(tid), b"\x00\x01bad", (), 0)])),
                                   NOW)
    partition.flush()
    return offset


def test_replay_skips_what_it_cannot_read_and_fences_an_id_whose_latest_record_it_lost(
        tmp_path: Path) -> None:
    logs = make_logs(tmp_path)
    log = TxnLog(logs, PARTITIONS)
    c = coordinator()
    persist(log, c, c.prepare_init_producer_id("lost", 60_000, None, NOW))
    persist(log, c, c.prepare_init_producer_id("ongoing", 60_000, None, NOW))
    persist(log, c, c.prepare_add_partitions("ongoing", 1001, 0, [("orders", 0)], NOW))
    persist(log, c, c.prepare_init_producer_id("later", 60_000, None, NOW))
    _append_garbage(logs, "lost")  # it may have bumped lost's epoch: unknown
    _append_garbage(logs, "ongoing")
    _append_garbage(logs, "later")
    persist(log, c, c.prepare_init_producer_id("later", 60_000, None, NOW + 1))  # read again
    # A marker that an older version let a client write into the log.
    logs.partition(TOPIC, partition_for("lost", PARTITIONS)).append_marker(99, 0, True, 0, NOW)
    crash(logs)

    c = replayed(make_logs(tmp_path))
    # lost: its last state read, with the epoch exhausted: the next InitProducerId moves to a
    # new producer id, so no producer can hold an epoch the skipped record handed out.
    assert c.get("lost").producer_epoch == 32766
    fresh = c.prepare_init_producer_id("lost", 60_000, None, NOW + 2)
    assert (fresh.producer_id, fresh.producer_epoch) != (1000, 1)
    assert fresh.producer_epoch == 0
    # ongoing: the open transaction read is kept (aborted on timeout as after any crash).
    md = c.get("ongoing")
    assert (md.state, md.producer_epoch) == (TxnState.ONGOING, 0)
    # later: a readable record after the skipped one wins.
    assert c.get("later").producer_epoch == 1
