"""The log cleaner on real partition directories (no broker): latest value per key, transactions,
tombstones, markers, producer state, crash points of the swap and restarts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from broker.log.cleaner import CRASH_POINTS, clean_now, read_checkpoint
from broker.log.partition import Partition
from broker.log.topic_config import LogConfig, apply_overrides
from protocol.errors import ErrorCode, KafkaError
from protocol.records import (
    ControlType,
    decode_batches_untrusted,
    encode_batch,
    parse_control_record,
)

NOW = 1_700_000_000_000
CONFIG = LogConfig(
    segment_bytes=600, flush="never", cleanup_policy=("compact",), delete_retention_ms=1000,
    min_cleanable_dirty_ratio=0.0,
)


def _open(path: Path, config: LogConfig = CONFIG, clean=None) -> Partition:
    return Partition("t", 0, path, config, NOW, clean)


def _produce(p: Partition, records, *, pid=-1, epoch=-1, seq=-1, txn=False, now=NOW):
    batch = encode_batch(
        [(k, v, (), now) for k, v in records],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn,
    )
    return p.append_untrusted(bytearray(batch), now)


def _read_all(p: Partition, read_committed: bool):
    """What a consumer sees: {key: value} in offset order (latest wins), plus the markers and
    the offsets of every record returned."""
    end = p.last_stable_offset if read_committed else p.high_watermark
    aborted = p.aborted_transactions(p.log_start_offset, end) if read_committed else []
    aborted_pids: dict[int, list[int]] = {}
    for pid, first in aborted:
        aborted_pids.setdefault(pid, []).append(first)
    active_aborted: set[int] = set()
    latest: dict[bytes, bytes | None] = {}
    markers = []
    offsets = []
    offset = p.log_start_offset
    while offset < end:
        data = p.read(offset, 1 << 20, end)
        if not data:
            break
        for header, records in decode_batches_untrusted(data):
            offset = header.last_offset + 1
            pid = header.producer_id
            for first in aborted_pids.get(pid, []):
                if first <= header.base_offset:
                    active_aborted.add(pid)
            if header.is_control:
                kind = parse_control_record(records[0])[0]
                markers.append((pid, kind, header.base_offset))
                active_aborted.discard(pid)
                aborted_pids[pid] = [f for f in aborted_pids.get(pid, []) if f > header.base_offset]
                continue
            if header.is_transactional and pid in active_aborted:
                continue
            for r in records:
                latest[r.key] = r.value
                offsets.append(r.offset)
    return latest, markers, offsets


def _roll(p: Partition, now=NOW) -> None:
    """Close the active segment by writing filler past segment.bytes (key 'filler')."""
    base = p.segments[-1].base_offset
    while p.segments[-1].base_offset == base:
        _produce(p, [(b"filler", b"x" * 100)], now=now)


def _history(p: Partition) -> None:
    """Committed, aborted and open transactions, tombstones, plain and idempotent writes."""
    _produce(p, [(b"a", b"a1"), (b"b", b"b1"), (b"c", b"c1")])
    # committed transaction of producer 10
    _produce(p, [(b"a", b"a2-committed"), (b"d", b"d1")], pid=10, epoch=0, seq=0, txn=True)
    p.append_marker(10, 0, True, 0, NOW)
    # aborted transaction of producer 11: must never be visible, even as "latest"
    _produce(p, [(b"b", b"b2-aborted"), (b"e", b"e-aborted")], pid=11, epoch=0, seq=0, txn=True)
    p.append_marker(11, 0, False, 0, NOW)
    _roll(p)
    _produce(p, [(b"c", None)])  # tombstone
    _produce(p, [(b"d", b"d2")], pid=12, epoch=0, seq=0)  # idempotent
    _produce(p, [(b"a", b"a3")])
    _roll(p)
    _produce(p, [(b"f", b"f1")])
    _roll(p)


def test_cleaning_keeps_latest_values_for_both_isolation_levels(tmp_path):
    p = _open(tmp_path / "t-0")
    _history(p)
    # An open transaction at the end: the LSO stops before it, nothing past it is cleaned.
    _produce(p, [(b"a", b"a4-open")], pid=13, epoch=0, seq=0, txn=True)
    _roll(p)
    before = {rc: _read_all(p, rc) for rc in (True, False)}
    size_before = p.size_bytes
    result = clean_now(p, NOW)
    assert result is not None and result.records_removed > 0
    assert p.size_bytes < size_before
    after = {rc: _read_all(p, rc) for rc in (True, False)}
    assert after[True][0] == before[True][0]
    # read_uncommitted saw the aborted values as latest before (as in Kafka); afterwards they are
    # gone from the log, and it sees the committed values plus the open transaction's record.
    assert before[False][0][b"b"] == b"b2-aborted"
    assert after[False][0] == {**before[True][0], b"a": b"a4-open"}
    committed = after[True][0]
    assert committed[b"a"] == b"a3" and committed[b"b"] == b"b1" and committed[b"d"] == b"d2"
    assert b"e" not in committed
    assert committed[b"c"] is None  # the tombstone is younger than delete.retention.ms
    # The aborted records are gone from the log itself, not only filtered.
    assert b"b2-aborted" not in _dump(p) and b"e-aborted" not in _dump(p)
    # The open transaction's record is untouched and read_uncommitted still sees it.
    assert after[False][0][b"a"] == b"a4-open"
    # Offsets of what remains only increase; the log start did not move.
    offsets = after[False][2]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert p.log_start_offset == 0


def _dump(p: Partition) -> bytes:
    return b"".join(s.log_path.read_bytes() for s in p.segments)


def test_tombstones_and_markers_go_after_delete_retention(tmp_path):
    p = _open(tmp_path / "t-0")
    _history(p)
    clean_now(p, NOW)
    first = _read_all(p, True)
    assert first[0][b"c"] is None
    assert any(kind is ControlType.ABORT for _, kind, _ in first[1])
    # delete.retention.ms (1 s) after the first cleaning, clean again.
    later = NOW + 10_000
    _produce(p, [(b"g", b"g1")], now=later)
    _roll(p, now=later)
    clean_now(p, later)
    # Producer 11's aborted batch is its last one: kept (empty) for its sequence numbers, and so
    # is its ABORT marker, as long as the partition knows the producer (Kafka does the same).
    assert any(kind is ControlType.ABORT for _, kind, _ in _read_all(p, True)[1])
    assert b"b2-aborted" not in _dump(p)
    p.expire_producers(later + 1, 1)
    _roll(p, now=later)
    clean_now(p, later)
    latest, markers, _ = _read_all(p, True)
    assert b"c" not in latest  # tombstone dropped
    assert latest[b"a"] == b"a3" and latest[b"b"] == b"b1" and latest[b"g"] == b"g1"
    # The ABORT marker went with its data; the aborted-transaction index forgot it.
    assert not any(kind is ControlType.ABORT for _, kind, _ in markers)
    assert p.aborted_transactions(0, p.log_end_offset) == []


def test_producer_state_survives_cleaning_and_restart(tmp_path):
    p = _open(tmp_path / "t-0")
    _history(p)
    clean_now(p, NOW)
    # A retry of producer 12's batch is still a duplicate, before and after a restart.
    retry = _produce(p, [(b"d", b"d2")], pid=12, epoch=0, seq=0)
    assert retry.duplicate
    p.close()
    p = _open(tmp_path / "t-0")
    assert _produce(p, [(b"d", b"d2")], pid=12, epoch=0, seq=0).duplicate
    assert _produce(p, [(b"d", b"d3")], pid=12, epoch=0, seq=1).duplicate is False
    # Without any snapshot (state rebuilt from the cleaned log) the sequence is still known.
    p.close()
    for snap in (tmp_path / "t-0").glob("*.snapshot"):
        snap.unlink()
    (tmp_path / "t-0" / "cleaner.checkpoint").unlink()
    p = _open(tmp_path / "t-0")
    with pytest.raises(KafkaError) as exc:
        _produce(p, [(b"d", b"d9")], pid=12, epoch=0, seq=5)
    assert exc.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.last_stable_offset == p.high_watermark  # no transaction left open by cleaning


def test_restart_after_cleaning_reads_the_same(tmp_path):
    p = _open(tmp_path / "t-0")
    _history(p)
    clean_now(p, NOW)
    expected = _read_all(p, True)
    leo = p.log_end_offset
    p.close()  # clean path
    p = _open(tmp_path / "t-0", clean=p.clean_point())
    assert p.recovery.clean and _read_all(p, True) == expected and p.log_end_offset == leo
    p.close()
    # crash path: every segment scanned (no snapshot), cleaned segments have gaps
    for snap in (tmp_path / "t-0").glob("*.snapshot"):
        snap.unlink()
    p = _open(tmp_path / "t-0")
    assert p.recovery.truncated_bytes == 0
    assert _read_all(p, True) == expected and p.log_end_offset == leo


def test_fetch_inside_a_gap_returns_the_next_batch(tmp_path):
    p = _open(tmp_path / "t-0")
    _history(p)
    clean_now(p, NOW)
    _, _, offsets = _read_all(p, False)
    gaps = [o for o in range(offsets[-1]) if o not in offsets]
    assert gaps
    for gap in gaps:
        data = p.read(gap, 1 << 20, p.high_watermark)
        header, _ = next(decode_batches_untrusted(data))
        assert header.last_offset >= gap
    with pytest.raises(KafkaError) as exc:
        p.read(p.log_end_offset + 1, 100, p.high_watermark)
    assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_keyless_records_refused_on_compacted_topics(tmp_path):
    p = _open(tmp_path / "t-0")
    with pytest.raises(KafkaError) as exc:
        _produce(p, [(b"k", b"v"), (None, b"v")])
    assert exc.value.code == ErrorCode.INVALID_RECORD
    assert p.log_end_offset == 0
    plain = _open(tmp_path / "u-0", LogConfig(flush="never"))
    assert _produce(plain, [(None, b"v")]).base_offset == 0


def test_max_compaction_lag_bounds_the_active_segment_age():
    cfg = apply_overrides(LogConfig(), {
        "cleanup.policy": "compact", "max.compaction.lag.ms": "99", "segment.ms": "1000",
    })
    assert cfg.roll_ms == 99
    assert apply_overrides(LogConfig(), {"max.compaction.lag.ms": "99"}).roll_ms == LogConfig().segment_ms


def test_nothing_at_or_past_the_lso_is_cleaned(tmp_path):
    p = _open(tmp_path / "t-0")
    _produce(p, [(b"a", b"open")], pid=20, epoch=0, seq=0, txn=True)
    _roll(p)
    _produce(p, [(b"a", b"later")])
    _roll(p)
    assert p.last_stable_offset == 0
    assert clean_now(p, NOW) is None
    p.append_marker(20, 0, False, 0, NOW)
    _roll(p)
    clean_now(p, NOW)
    latest, _, _ = _read_all(p, True)
    assert latest[b"a"] == b"later"


_CRASH_SCRIPT = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from tests.unit.broker.log.test_cleaner import _open, _history, NOW
    from broker.log.cleaner import clean_now
    point = sys.argv[2]
    def hook(at):
        if at == point:
            os._exit(137)
    p = _open(Path(sys.argv[1]))
    _history(p)
    p.flush()
    clean_now(p, NOW, crash_hook=hook)
    os._exit(0)
""")


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_at_each_step_of_cleaning_loses_nothing(tmp_path, point):
    """The process dies (os._exit, like kill -9: no close, no clean marker) at each step; the
    partition then loads and reads the same latest values as an uncleaned copy."""
    reference = _open(tmp_path / "ref-0")
    _history(reference)
    expected = _read_all(reference, True)[0]
    root = str(Path(__file__).resolve().parents[4])  # the repository root
    script = tmp_path / "crash.py"
    script.write_text(_CRASH_SCRIPT.format(root=root))
    directory = tmp_path / "t-0"
    rc = subprocess.run([sys.executable, str(script), str(directory), point], timeout=60).returncode
    assert rc == 137
    p = _open(directory)
    assert p.recovery.truncated_bytes == 0
    assert _read_all(p, True)[0] == expected
    assert not list(directory.glob("*.cleaned")) and not list(directory.glob("*.swap"))
    # And cleaning again from there works and still reads the same.
    clean_now(p, NOW)
    assert _read_all(p, True)[0] == expected
    p.close()
    p = _open(directory)
    assert _read_all(p, True)[0] == expected
    assert read_checkpoint(directory).first_dirty_offset > 0


def test_tombstone_kept_until_retention_after_its_first_cleaning(tmp_path):
    """The horizon runs from the first cleaning that saw the tombstone, not from the segment's
    age: rewriting its segment again and again does not extend it, nor does an old segment that
    was never cleaned lose it early."""
    p = _open(tmp_path / "t-0")
    _produce(p, [(b"x", b"1")])
    _produce(p, [(b"x", None)])
    _roll(p)
    clean_now(p, NOW + 100_000)  # first cleaning, long after the write: the tombstone stays
    assert b"x" in _read_all(p, True)[0]
    _roll(p)
    clean_now(p, NOW + 100_500)  # 0.5 s later: still within delete.retention.ms
    assert b"x" in _read_all(p, True)[0]
    _roll(p)
    clean_now(p, NOW + 101_500)
    assert b"x" not in _read_all(p, True)[0]
