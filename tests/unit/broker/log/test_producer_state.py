"""Idempotence rules of ProducerStateManager (docs/protocol.md 7.8), expiry and snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.producer_state import (
    BATCHES_TO_RETAIN,
    Duplicate,
    ProducerStateManager,
    list_snapshots,
    snapshot_path,
)
from protocol.errors import ErrorCode, KafkaError
from protocol.records import (
    INT32_MAX,
    BatchHeader,
    encode_batch,
    encode_control_batch,
    parse_header_untrusted,
)

NOW = 1_700_000_000_000
PID = 1000


def hdr(seq: int, n: int = 1, *, pid: int = PID, epoch: int = 0,
        transactional: bool = False) -> BatchHeader:
    b = encode_batch([(None, b"v", (), NOW)] * n, producer_id=pid, producer_epoch=epoch,
                     base_sequence=seq, transactional=transactional)
    return parse_header_untrusted(b)


def marker(epoch: int, *, pid: int = PID, commit: bool = True) -> BatchHeader:
    return parse_header_untrusted(encode_control_batch(
        producer_id=pid, producer_epoch=epoch, commit=commit, coordinator_epoch=0,
        timestamp_ms=NOW))


class Log:
    """A fake partition: offsets only, the way Partition drives the manager."""

    def __init__(self) -> None:
        self.state = ProducerStateManager()
        self.leo = 0

    def append(self, *headers: BatchHeader, now: int = NOW) -> int | Duplicate:
        dup = self.state.check_all(list(headers), now)
        if dup is not None:
            return dup
        first = self.leo
        for h in headers:
            self.state.update(h, self.leo, now)
            self.leo += h.last_offset_delta + 1
        return first


def code_of(fn: object) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        fn()  # type: ignore[operator]
    return e.value.code


def test_non_idempotent_batches_are_not_checked() -> None:
    log = Log()
    h = parse_header_untrusted(encode_batch([(None, b"v", (), NOW)]))
    assert log.append(h) == 0
    assert log.append(h) == 1  # the same batch again is simply appended
    assert len(log.state) == 0


def test_unknown_producer_must_start_at_sequence_zero() -> None:
    log = Log()
    assert code_of(lambda: log.append(hdr(5))) == ErrorCode.UNKNOWN_PRODUCER_ID
    assert log.leo == 0 and log.state.get(PID) is None
    assert log.append(hdr(0, 3)) == 0
    entry = log.state.get(PID)
    assert entry is not None and entry.producer_epoch == 0 and entry.last_seq == 2


def test_in_sequence_batches_are_accepted_and_gaps_rejected() -> None:
    log = Log()
    log.append(hdr(0, 2))
    assert log.append(hdr(2, 3)) == 2
    assert code_of(lambda: log.append(hdr(6))) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # An overlapping batch that matches no cached batch is out of order too.
    assert code_of(lambda: log.append(hdr(3))) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.append(hdr(5)) == 5


def test_duplicate_returns_the_original_offsets() -> None:
    log = Log()
    log.append(hdr(0, 2))
    log.append(hdr(2, 4))
    log.append(hdr(6, 1))
    leo = log.leo
    assert log.append(hdr(2, 4)) == Duplicate(2, 5)
    assert log.append(hdr(0, 2)) == Duplicate(0, 1)
    assert log.leo == leo
    entry = log.state.get(PID)
    assert entry is not None and entry.last_seq == 6  # unchanged by the duplicates


def test_only_the_last_five_batches_are_cached() -> None:
    assert BATCHES_TO_RETAIN == 5  # the rule (clients cap max.in.flight at 5 for it)
    log = Log()
    for seq in range(6):
        log.append(hdr(seq))
    # Batch 0 fell out of the cache: its retry is not recognised any more (Kafka answers 45).
    assert code_of(lambda: log.append(hdr(0))) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.append(hdr(1)) == Duplicate(1, 1)
    assert log.append(hdr(5)) == Duplicate(5, 5)
    entry = log.state.get(PID)
    assert entry is not None and len(entry.batches) == 5


def test_older_epoch_is_fenced() -> None:
    log = Log()
    log.append(hdr(0, epoch=3))
    assert code_of(lambda: log.append(hdr(1, epoch=2))) == ErrorCode.INVALID_PRODUCER_EPOCH
    # Even a retry of a batch it wrote earlier, once a newer epoch exists.
    log.append(hdr(0, epoch=4))
    assert code_of(lambda: log.append(hdr(0, epoch=3))) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_new_epoch_must_start_at_zero_and_resets_the_cache() -> None:
    log = Log()
    log.append(hdr(0, 3, epoch=0))
    assert code_of(lambda: log.append(hdr(3, epoch=1))) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.append(hdr(0, 2, epoch=1)) == 3  # seq 0 at epoch 1 is new data, not a duplicate
    entry = log.state.get(PID)
    assert entry is not None and entry.producer_epoch == 1
    assert [(b.first_seq, b.last_seq) for b in entry.batches] == [(0, 1)]
    assert log.append(hdr(2, epoch=1)) == 5


def test_sequence_wraps_at_int32_max() -> None:
    log = Log()
    state = log.state
    # Pretend the producer has sent INT32_MAX records already (update does not check).
    state.update(hdr(INT32_MAX - 1), 0, NOW)
    entry = state.get(PID)
    assert entry is not None and entry.last_seq == INT32_MAX - 1
    log.leo = 1
    assert log.append(hdr(INT32_MAX)) == 1  # the last non-negative sequence
    assert log.append(hdr(0, 3)) == 2  # wraps to 0
    assert code_of(lambda: log.append(hdr(4))) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert state.get(PID).last_seq == 2  # type: ignore[union-attr]
    # A batch whose sequences straddle the wrap: last_seq = base + delta - 2^31.
    log2 = Log()
    log2.state.update(hdr(INT32_MAX - 2), 0, NOW)
    straddle = hdr(INT32_MAX - 1, 3)
    assert straddle.last_sequence == 0
    assert log2.append(straddle) == 0
    assert log2.append(hdr(1)) == 3
    assert log2.append(hdr(INT32_MAX - 1, 3)) == Duplicate(0, 2)


def test_multi_batch_append_is_checked_cumulatively() -> None:
    log = Log()
    assert log.append(hdr(0, 2), hdr(2, 3)) == 0
    assert log.leo == 5
    # The second batch is checked against the state after the first: seq 5 then 7 is a gap.
    assert code_of(lambda: log.append(hdr(5), hdr(7))) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.leo == 5
    # Two batches with the same sequences in one request: the second is not "new".
    assert code_of(lambda: log.append(hdr(5), hdr(5))) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # All duplicates: one Duplicate spanning them.
    assert log.append(hdr(0, 2), hdr(2, 3)) == Duplicate(0, 4)
    # A duplicate followed by a new batch is a malformed request.
    assert code_of(lambda: log.append(hdr(2, 3), hdr(5))) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # Several producers in one append, each checked against its own state.
    assert log.append(hdr(5), hdr(0, pid=7), hdr(6), hdr(1, pid=7)) == 5
    assert log.state.get(7).last_seq == 1  # type: ignore[union-attr]
    assert log.state.get(PID).last_seq == 6  # type: ignore[union-attr]


def test_check_does_not_mutate() -> None:
    state = ProducerStateManager()
    assert state.check(hdr(0), NOW) is None
    assert state.check_all([hdr(0), hdr(1)], NOW) is None
    assert state.get(PID) is None


def test_transactions_track_their_first_offset() -> None:
    log = Log()
    log.append(hdr(0, 2, transactional=True))
    log.append(hdr(2, transactional=True))
    assert log.state.open_transactions() == {PID: 0}
    log.state.update(marker(0), log.leo, NOW)  # the marker itself leaves it to complete_txn
    log.leo += 1
    assert log.state.complete_txn(PID) == 0
    assert log.state.complete_txn(PID) is None
    assert log.state.open_transactions() == {}
    log.append(hdr(3, transactional=True))
    assert log.state.open_transactions() == {PID: 4}


def test_marker_with_newer_epoch_fences_and_empties_the_cache() -> None:
    log = Log()
    log.append(hdr(0, 2))
    log.state.update(marker(1, commit=False), log.leo, NOW)
    entry = log.state.get(PID)
    assert entry is not None and entry.producer_epoch == 1 and entry.batches == []
    assert code_of(lambda: log.append(hdr(2, epoch=0))) == ErrorCode.INVALID_PRODUCER_EPOCH
    # Same epoch as the marker but no batches cached: only sequence 0 is acceptable.
    assert code_of(lambda: log.append(hdr(1, epoch=1))) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.append(hdr(0, epoch=1)) == 2


def test_expiry_spares_open_transactions() -> None:
    log = Log()
    log.append(hdr(0, pid=1), now=NOW)
    log.append(hdr(0, pid=2, transactional=True), now=NOW)
    log.append(hdr(0, pid=3), now=NOW + 900)
    assert log.state.expire(NOW + 999, 1000) == 0
    assert log.state.expire(NOW + 1000, 1000) == 1
    assert log.state.get(1) is None
    assert log.state.get(2) is not None and log.state.get(3) is not None
    # An expired producer is unknown again: it must restart at sequence 0.
    assert code_of(lambda: log.append(hdr(1, pid=1))) == ErrorCode.UNKNOWN_PRODUCER_ID


def test_snapshot_round_trip(tmp_path: Path) -> None:
    log = Log()
    for seq in range(7):
        log.append(hdr(seq, epoch=2))
    log.append(hdr(0, 3, pid=5, epoch=0, transactional=True), now=NOW + 5)
    path = snapshot_path(tmp_path, log.leo)
    log.state.write_snapshot(path, log.leo)
    assert list_snapshots(tmp_path) == [log.leo]
    loaded = ProducerStateManager.read_snapshot(path)
    assert loaded is not None
    offset, state = loaded
    assert offset == log.leo
    assert state.to_json(offset) == log.state.to_json(offset)
    assert state.open_transactions() == {5: 7}
    assert state.get(5).last_timestamp == NOW + 5  # type: ignore[union-attr]
    # The restored state gives the same answers.
    assert state.check(hdr(6, epoch=2), NOW) == Duplicate(6, 6)
    assert state.check(hdr(7, epoch=2), NOW) is None
    with pytest.raises(KafkaError):
        state.check(hdr(9, epoch=2), NOW)


def test_snapshot_keeps_the_coordinator_epoch_and_reads_older_snapshots(tmp_path: Path) -> None:
    import json

    import crc32c

    state = ProducerStateManager()
    state.update(hdr(0), 0, NOW)
    state.get(PID).coordinator_epoch = 7  # type: ignore[union-attr]
    path = snapshot_path(tmp_path, 1)
    state.write_snapshot(path, 1)
    loaded = ProducerStateManager.read_snapshot(path)
    assert loaded is not None and loaded[1].get(PID).coordinator_epoch == 7  # type: ignore[union-attr]
    # A snapshot of the earlier five-element layout: coordinator epoch unknown (-1).
    doc = json.loads(state.to_json(1))
    doc["producers"] = [entry[:5] for entry in doc["producers"]]
    body = json.dumps(doc).encode()
    path.write_bytes(crc32c.crc32c(body).to_bytes(4, "big") + body)
    loaded = ProducerStateManager.read_snapshot(path)
    assert loaded is not None and loaded[1].get(PID).coordinator_epoch == -1  # type: ignore[union-attr]
    assert loaded[1].get(PID).batches == state.get(PID).batches  # type: ignore[union-attr]


def test_damaged_snapshot_is_ignored(tmp_path: Path) -> None:
    state = ProducerStateManager()
    state.update(hdr(0), 0, NOW)
    path = snapshot_path(tmp_path, 1)
    state.write_snapshot(path, 1)
    data = bytearray(path.read_bytes())
    data[-3] ^= 1
    path.write_bytes(bytes(data))
    assert ProducerStateManager.read_snapshot(path) is None
    path.write_bytes(b"\x00")
    assert ProducerStateManager.read_snapshot(path) is None
    assert ProducerStateManager.read_snapshot(tmp_path / "missing.snapshot") is None


def test_replay_rebuilds_the_same_state() -> None:
    log = Log()
    headers = [hdr(0, 2, transactional=True), hdr(2, transactional=True), marker(0),
               hdr(3, 2), hdr(0, pid=9, epoch=4)]
    replayed = ProducerStateManager()
    offset = 0
    for h in headers:
        log.state.update(h, offset, NOW)
        if h.is_control:
            log.state.complete_txn(h.producer_id)
        replayed.replay(h._replace(base_offset=offset), NOW)
        offset += h.last_offset_delta + 1
    assert replayed.to_json(offset) == log.state.to_json(offset)
    assert replayed.open_transactions() == {}
