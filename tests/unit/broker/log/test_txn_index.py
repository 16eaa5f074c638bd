"""The partition side of transactions: open transactions and the LSO, markers, the aborted-
transaction index (lookups, durability, recovery of ``aborted.txnindex``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.log.manager import LogConfig, LogManager
from broker.log.partition import Partition
from broker.log.txn_index import ENTRY_SIZE, FILE_NAME, AbortedTxn, TxnIndex
from protocol.errors import ErrorCode, KafkaError
from protocol.records import decode_batches_untrusted, encode_batch

NOW = 1_700_000_000_000


class Producer:
    """Sequence bookkeeping for one producer id."""

    def __init__(self, producer_id: int, epoch: int = 0) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.seq = 0

    def batch(self, n: int = 1, transactional: bool = True) -> bytearray:
        data = encode_batch(
            [(None, b"p%d-%d" % (self.producer_id, self.seq + i), (), NOW) for i in range(n)],
            producer_id=self.producer_id, producer_epoch=self.epoch, base_sequence=self.seq,
            transactional=transactional,
        )
        self.seq += n
        return bytearray(data)


def plain(n: int = 1) -> bytearray:
    return bytearray(encode_batch([(None, b"plain", (), NOW)] * n))


def make(tmp_path: Path, **config) -> LogManager:
    mgr = LogManager(tmp_path / "data", LogConfig(**{"preallocate": False, **config}), NOW)
    if "t" not in mgr.topics():
        mgr.create_topic("t", 1, None, NOW)
    return mgr


def crash(mgr: LogManager) -> None:
    """kill -9: drop the descriptors, write nothing more (the page cache keeps what was written)."""
    for p in mgr.all_partitions():
        p.txn_index.close(sync=False)
        for seg in p.segments:
            seg.close()


def marker(p: Partition, producer: Producer, commit: bool) -> int:
    return p.append_marker(producer.producer_id, producer.epoch, commit, 0, NOW)


def batch_bases(data: bytes) -> list[int]:
    return [h.base_offset for h, _ in decode_batches_untrusted(data)]


@pytest.fixture
def part(tmp_path: Path) -> Partition:
    return make(tmp_path).partition("t", 0)


def test_lso_is_held_by_open_transactions_until_their_markers_are_durable(part: Partition) -> None:
    a, b = Producer(1), Producer(2)
    part.append_untrusted(plain(), NOW)  # 0
    part.flush()
    assert part.last_stable_offset == part.high_watermark == 1
    part.append_untrusted(a.batch(2), NOW)  # 1-2
    part.append_untrusted(b.batch(), NOW)  # 3
    assert part.last_stable_offset == 1  # HW is still 1 as well
    part.flush()
    assert (part.high_watermark, part.last_stable_offset) == (4, 1)
    assert part.producers.open_transactions() == {1: 1, 2: 3}

    assert marker(part, a, commit=True) == 4
    # The marker is not durable yet: the transaction still counts as undecided.
    assert part.last_stable_offset == 1
    part.flush()
    assert (part.high_watermark, part.last_stable_offset) == (5, 3)  # b still open
    assert part.aborted_transactions(0, 5) == []

    assert marker(part, b, commit=False) == 5
    part.flush()
    assert part.last_stable_offset == part.high_watermark == 6
    assert part.producers.open_transactions() == {}
    # Fetch read_committed: data below the LSO, the markers included, and the aborted list.
    data = part.read(0, 1 << 20, part.last_stable_offset)
    assert batch_bases(data) == [0, 1, 3, 4, 5]
    assert part.aborted_transactions(0, 6) == [(2, 3)]
    assert part.aborted_transactions(5, 6) == [(2, 3)]  # [3, 5] overlaps [5, 6)
    assert part.aborted_transactions(6, 6) == []


def test_read_committed_bound_stops_at_the_first_open_transaction(part: Partition) -> None:
    a = Producer(1)
    part.append_untrusted(plain(), NOW)
    part.append_untrusted(a.batch(), NOW)
    part.append_untrusted(plain(), NOW)  # after the open transaction: not yet visible
    part.flush()
    assert part.last_stable_offset == 1
    assert batch_bases(part.read(0, 1 << 20, part.last_stable_offset)) == [0]
    assert part.read(1, 1 << 20, part.last_stable_offset) == b""


def test_flush_never_moves_the_lso_with_the_marker(tmp_path: Path) -> None:
    p = make(tmp_path, flush="never").partition("t", 0)
    a = Producer(7)
    p.append_untrusted(a.batch(), NOW)
    assert p.last_stable_offset == 0
    marker(p, a, commit=False)
    assert p.last_stable_offset == p.high_watermark == 2
    assert p.aborted_transactions(0, 2) == [(7, 0)]


def test_collect_stops_at_an_entry_whose_lso_reaches_the_bound(part: Partition) -> None:
    a, b, c = Producer(1), Producer(2), Producer(3)
    part.append_untrusted(a.batch(), NOW)  # 0
    part.append_untrusted(c.batch(), NOW)  # 1: c stays open across the aborts of a and b
    marker(part, a, commit=False)  # 2, entry lso = 1 (c open)
    part.append_untrusted(b.batch(), NOW)  # 3
    marker(part, b, commit=False)  # 4, entry lso = 1
    marker(part, c, commit=False)  # 5, entry lso = 6
    part.flush()
    assert part.txn_index.entries == [
        AbortedTxn(1, 0, 2, 1), AbortedTxn(2, 3, 4, 1), AbortedTxn(3, 1, 5, 6),
    ]
    assert part.aborted_transactions(0, 6) == [(1, 0), (2, 3), (3, 1)]
    assert part.aborted_transactions(0, 1) == [(1, 0)]
    assert part.aborted_transactions(3, 4) == [(2, 3), (3, 1)]
    assert part.aborted_transactions(5, 6) == [(3, 1)]


def test_markers_with_an_older_epoch_are_refused_and_repeats_end_nothing(part: Partition) -> None:
    a = Producer(1, epoch=3)
    part.append_untrusted(a.batch(), NOW)
    with pytest.raises(KafkaError) as info:
        part.append_marker(1, 2, False, 0, NOW)
    assert info.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    marker(part, a, commit=False)
    marker(part, a, commit=False)  # e.g. rewritten by recovery: no second entry
    part.flush()
    assert len(part.txn_index) == 1 and part.last_stable_offset == part.high_watermark == 3
    # A marker with a newer epoch (a coordinator-fenced abort) is accepted and fences the epoch.
    part.append_marker(1, 4, False, 0, NOW)
    assert part.producers.get(1).producer_epoch == 4


@pytest.mark.parametrize("clean", [True, False])
def test_open_transactions_and_the_index_survive_a_restart(tmp_path: Path, clean: bool) -> None:
    mgr = make(tmp_path)
    p = mgr.partition("t", 0)
    a, b, c = Producer(1), Producer(2), Producer(3)
    p.append_untrusted(a.batch(), NOW)
    p.append_untrusted(b.batch(), NOW)
    marker(p, a, commit=False)
    p.append_untrusted(c.batch(), NOW)
    p.flush()
    before = (p.last_stable_offset, p.high_watermark, p.aborted_transactions(0, 10))
    assert before == (1, 4, [(1, 0)])
    if clean:
        mgr.close()
    else:
        crash(mgr)
    again = make(tmp_path).partition("t", 0)
    assert again.recovery.clean is clean
    assert (again.last_stable_offset, again.high_watermark,
            again.aborted_transactions(0, 10)) == before
    assert again.producers.open_transactions() == {2: 1, 3: 3}
    # The transactions go on after the restart.
    marker(again, b, commit=True)
    marker(again, c, commit=False)
    again.flush()
    assert again.last_stable_offset == again.high_watermark == 6
    assert again.aborted_transactions(0, 6) == [(1, 0), (3, 3)]


def test_recovery_drops_entries_whose_marker_was_lost(tmp_path: Path) -> None:
    mgr = make(tmp_path)
    p = mgr.partition("t", 0)
    a, b = Producer(1), Producer(2)
    p.append_untrusted(a.batch(), NOW)  # 0
    marker(p, a, commit=False)  # 1
    p.append_untrusted(b.batch(), NOW)  # 2
    p.flush()
    size = p.segments[-1].size
    marker(p, b, commit=False)  # 3: the entry reaches the file, the marker will be lost
    p.txn_index.sync()
    log_path = p.segments[-1].log_path
    crash(mgr)
    os.truncate(log_path, size)  # power loss took the marker's page

    again = make(tmp_path).partition("t", 0)
    assert again.log_end_offset == 3
    assert again.aborted_transactions(0, 3) == [(1, 0)]
    assert again.producers.open_transactions() == {2: 2}  # its abort must be written again
    assert again.last_stable_offset == 2
    assert (tmp_path / "data" / "t-0" / FILE_NAME).stat().st_size == ENTRY_SIZE  # rewritten


def test_a_torn_entry_is_ignored(tmp_path: Path) -> None:
    mgr = make(tmp_path)
    p = mgr.partition("t", 0)
    a = Producer(1)
    p.append_untrusted(a.batch(), NOW)
    marker(p, a, commit=False)
    p.flush()
    crash(mgr)
    path = tmp_path / "data" / "t-0" / FILE_NAME
    with open(path, "ab") as f:
        f.write(b"\x00" * 10)
    again = make(tmp_path).partition("t", 0)
    assert again.aborted_transactions(0, 2) == [(1, 0)]
    assert path.stat().st_size == ENTRY_SIZE


def test_index_entries_before_the_log_start_are_dropped(tmp_path: Path) -> None:
    index = TxnIndex(tmp_path, 0, 100)
    for i in range(5):
        index.append(AbortedTxn(i, 10 * i, 10 * i + 5, 10 * i + 6))
    index.sync()
    assert index.collect(0, 100) == [(i, 10 * i) for i in range(5)]
    index.drop_before(21)  # entries ending at 5 and 15 are gone
    assert index.collect(0, 100) == [(i, 10 * i) for i in range(2, 5)]
    index.close()
    # At load: before the log start and at or past the log end are both dropped.
    reloaded = TxnIndex(tmp_path, 21, 40)
    assert reloaded.entries == [AbortedTxn(2, 20, 25, 26), AbortedTxn(3, 30, 35, 36)]
    assert (tmp_path / FILE_NAME).stat().st_size == 2 * ENTRY_SIZE
    with pytest.raises(ValueError):
        reloaded.append(AbortedTxn(9, 30, 35, 36))  # not after the last entry
    reloaded.drop_before(1000)
    assert not (tmp_path / FILE_NAME).exists()


def test_retention_prunes_the_index(tmp_path: Path) -> None:
    mgr = make(tmp_path, segment_bytes=200, retention_bytes=0)
    p = mgr.partition("t", 0)
    a = Producer(1)
    for _ in range(6):
        p.append_untrusted(a.batch(), NOW)
        marker(p, a, commit=False)
    p.flush()
    assert len(p.txn_index) == 6
    p.enforce_retention(NOW)
    assert p.log_start_offset > 0
    assert all(e.last_offset >= p.log_start_offset for e in p.txn_index.entries)
    assert len(p.txn_index) < 6


@pytest.mark.parametrize("kept", ["no entry", "earlier entry only"])
def test_recovery_puts_back_the_entry_of_a_marker_that_outlived_it(tmp_path: Path,
                                                                    kept: str) -> None:
    """The ABORT marker is written to the log before its entry to ``aborted.txnindex``, and
    neither is synced until the round: a power cut that keeps the log's page and loses the
    index's (or a kill -9 between the two writes) left an aborted transaction that a
    read_committed Fetch served as committed (found by tests/crashsim). Recovery's scan puts
    the entry back."""
    mgr = make(tmp_path)
    p = mgr.partition("t", 0)
    a, b = Producer(1), Producer(2)
    p.append_untrusted(a.batch(2), NOW)  # 0-1
    marker(p, a, False)  # 2
    p.flush()
    p.append_untrusted(b.batch(), NOW)  # 3
    p.append_untrusted(a.batch(), NOW)  # 4
    marker(p, b, False)  # 5
    marker(p, a, True)  # 6
    crash(mgr)
    index = tmp_path / "data" / "t-0" / FILE_NAME
    if kept == "no entry":
        index.unlink()
    else:
        index.write_bytes(index.read_bytes()[:ENTRY_SIZE])
    again = make(tmp_path).partition("t", 0)
    assert again.txn_index.entries == [AbortedTxn(1, 0, 2, 3), AbortedTxn(2, 3, 5, 4)]
    assert again.aborted_transactions(0, again.log_end_offset) == [(1, 0), (2, 3)]
    assert again.txn_index.entries == TxnIndex(tmp_path / "data" / "t-0", 0, 7).entries
