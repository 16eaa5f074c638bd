"""The clean points of every partition in one file (issue 36): the format, and what a start does
with a torn, stale or missing points file and with the format earlier versions wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import broker.log.recovery as recovery
from broker.log import clean_points
from broker.log.clean_points import INLINE_INDEX_ENTRIES, CleanPoint, CleanState
from broker.log.manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE, LogConfig, LogManager
from broker.log.producer_state import ProducerStateManager, snapshot_path
from protocol.records import encode_batch

NOW = 1_700_000_000_000
PARTITIONS = 6


def batch(tag: int, pid: int = 7, seq: int = 0) -> bytearray:
    return bytearray(encode_batch([(b"k", b"v%d" % tag, (), NOW)], producer_id=pid,
                                  producer_epoch=0, base_sequence=seq))


def make(data: Path) -> LogManager:
    return LogManager(data, LogConfig(preallocate=True, flush="always"), NOW)


def crash(logs: LogManager) -> None:
    for p in logs.all_partitions():
        p.txn_index.close(sync=False)
        for seg in p.segments:
            seg.close()


@pytest.fixture
def closed(tmp_path: Path) -> Path:
    """A data dir closed cleanly: one idempotent batch in every partition."""
    data = tmp_path / "data"
    logs = make(data)
    logs.create_topic("t", PARTITIONS)
    for p in logs.all_partitions():
        p.append_untrusted(batch(p.index), NOW)
        p.flush()
    logs.close()
    return data


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The partition directories whose segments are CRC-scanned from here on."""
    scanned: list[str] = []
    original = recovery.scan_segment

    def counting(segment, *args, **kwargs):  # type: ignore[no-untyped-def]
        scanned.append(segment.directory.name)
        return original(segment, *args, **kwargs)

    monkeypatch.setattr(recovery, "scan_segment", counting)
    return scanned


def check_partitions(logs: LogManager, leo: int = 1) -> None:
    """Every partition holds its batch(es) and its producer's sequence (a retry is a
    duplicate)."""
    for p in logs.all_partitions():
        assert p.log_end_offset == leo
        assert p.append_untrusted(batch(p.index, seq=leo - 1), NOW).duplicate


def test_round_trip() -> None:
    points = {
        "t-0": CleanPoint(CleanState(5, 0, 300), 2, [[7, 0, NOW, None, [[0, 4, 0, 4]], -1]],
                          [0, 0, NOW, 3, 120, NOW]),
        "t-1": CleanPoint(CleanState(9000, 8000, 40000), 0, [], None),
    }
    data = clean_points.encode(points)
    decoded = clean_points.decode(data)
    assert decoded is not None and decoded[0] == points


def test_a_torn_or_corrupt_points_file_is_refused() -> None:
    data = clean_points.encode({"t-0": CleanPoint(CleanState(1, 0, 70), 0, [], [0, 0, NOW])})
    for cut in range(len(data)):
        assert clean_points.decode(data[:cut]) is None, cut
    for pos in range(len(data)):
        flipped = bytearray(data)
        flipped[pos] ^= 0x40
        assert clean_points.decode(bytes(flipped)) is None, pos


def test_a_clean_start_reads_one_file(closed: Path, scans: list[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[Path] = []
    original = ProducerStateManager.read_snapshot.__func__  # type: ignore[attr-defined]

    def counting(cls, path: Path):  # type: ignore[no-untyped-def]
        read.append(path)
        return original(cls, path)

    monkeypatch.setattr(ProducerStateManager, "read_snapshot", classmethod(counting))
    # Nothing per partition but its data: no snapshot, no index file.
    assert not list(closed.glob("t-*/*.snapshot")) and not list(closed.glob("t-*/*.index"))
    logs = make(closed)
    assert scans == [] and read == []
    assert all(r.clean for r in logs.recovered)
    check_partitions(logs)


def test_a_torn_points_file_with_the_marker_scans_everything(closed: Path,
                                                             scans: list[str]) -> None:
    path = closed / RECOVERY_POINT_FILE
    path.write_bytes(path.read_bytes()[:-5])
    logs = make(closed)
    assert sorted(scans) == [f"t-{i}" for i in range(PARTITIONS)]
    assert not logs.unclean_start  # (the marker: the close completed, nothing unsynced lost)
    check_partitions(logs)


def test_a_missing_points_file_scans_everything(closed: Path, scans: list[str]) -> None:
    (closed / RECOVERY_POINT_FILE).unlink()
    logs = make(closed)
    assert sorted(scans) == [f"t-{i}" for i in range(PARTITIONS)]
    check_partitions(logs)


def test_a_stale_points_file_counts_only_as_recovery_points(closed: Path,
                                                            scans: list[str]) -> None:
    """The marker names another points file: the entries are then checked as after a crash,
    partition by partition; one whose files moved on since is scanned."""
    stale = (closed / RECOVERY_POINT_FILE).read_bytes()
    logs = make(closed)
    changed = logs.partition("t", 2)
    changed.append_untrusted(batch(2, seq=1), NOW)
    changed.flush()
    logs.close()
    (closed / RECOVERY_POINT_FILE).write_bytes(stale)  # the marker names the new one
    logs = make(closed)
    assert scans == ["t-2"]
    assert [p.log_end_offset for p in logs.all_partitions()] == [1, 1, 2, 1, 1, 1]
    assert logs.partition("t", 2).append_untrusted(batch(2, seq=1), NOW).duplicate


def test_points_are_not_trusted_as_a_clean_shutdown_after_a_crash(closed: Path,
                                                                  scans: list[str]) -> None:
    """After an unclean stop the points count as recovery points: a partition appended to
    since (into its preallocated tail: same file length) is scanned, not loaded as they say."""
    logs = make(closed)
    p = logs.partition("t", 4)
    allocated = p.segments[-1].allocated
    p.append_untrusted(batch(4, seq=1), NOW)
    p.flush()
    assert p.segments[-1].allocated == allocated
    crash(logs)
    logs = make(closed)
    assert logs.unclean_start and scans == ["t-4"]
    assert [p.log_end_offset for p in logs.all_partitions()] == [1, 1, 1, 1, 2, 1]


def test_the_format_earlier_versions_wrote_starts_clean(closed: Path, scans: list[str]) -> None:
    """A data dir closed by an earlier version: the marker and the checkpoint hold (log end,
    active base, active size) per partition, the producer state is a snapshot at the log end and
    the active index its file. It loads clean, and the next close writes the new format."""
    logs = make(closed)
    states = {}
    for p in logs.all_partitions():
        p.producers.write_snapshot(snapshot_path(p.dir, p.log_end_offset), p.log_end_offset)
        p.segments[-1].save_index(fsync=True)
        s = p.clean_state
        states[f"t-{p.index}"] = [s.log_end_offset, s.active_base_offset, s.active_size]
    logs.close()
    old = json.dumps({"version": 1, "partitions": states}).encode()
    (closed / RECOVERY_POINT_FILE).write_bytes(old)
    (closed / CLEAN_SHUTDOWN_FILE).write_bytes(old)
    logs = make(closed)
    assert scans == [] and all(r.clean for r in logs.recovered) and not logs.unclean_start
    check_partitions(logs)
    logs.close()
    stored = clean_points.read(closed / RECOVERY_POINT_FILE)
    assert stored is not None and stored[1] is not None  # format 2 now
    # ... and after a crash the format-1 checkpoint alone still serves as recovery points.
    (closed / RECOVERY_POINT_FILE).write_bytes(old)
    (closed / CLEAN_SHUTDOWN_FILE).unlink()
    logs = make(closed)
    assert scans == [] and logs.unclean_start
    check_partitions(logs)


def test_a_long_active_index_stays_in_its_file(tmp_path: Path, scans: list[str]) -> None:
    data = tmp_path / "data"
    logs = LogManager(data, LogConfig(index_interval_bytes=1), NOW)
    logs.create_topic("t", 1)
    p = logs.partition("t", 0)
    for seq in range(INLINE_INDEX_ENTRIES + 3):
        p.append_untrusted(batch(seq, seq=seq), NOW)
    logs.close()
    stored = clean_points.read(data / RECOVERY_POINT_FILE)
    assert stored is not None and stored[0]["t-0"].index is None
    assert (p.dir / "00000000000000000000.index").stat().st_size == 24 * (INLINE_INDEX_ENTRIES + 3)
    logs = LogManager(data, LogConfig(index_interval_bytes=1), NOW)
    assert scans == [] and logs.partition("t", 0).log_end_offset == INLINE_INDEX_ENTRIES + 3


def test_recovery_points_of_a_start_leave_out_a_topic_deleted_meanwhile(
        tmp_path: Path, scans: list[str]) -> None:
    data = tmp_path / "data"
    logs = make(data)
    logs.create_topic("t", 3)
    logs.create_topic("u", 2)
    for p in logs.all_partitions():
        p.append_untrusted(batch(p.index), NOW)
        p.flush()
    crash(logs)  # no clean point anywhere: every partition is scanned
    logs = make(data)
    points = logs.prepare_recovery_points()
    assert points is not None
    points.write()  # (a worker thread's part)
    assert points.commit()
    stored = clean_points.read(data / RECOVERY_POINT_FILE)
    assert stored is not None and sorted(stored[0]) == ["t-0", "t-1", "t-2", "u-0", "u-1"]
    p = logs.partition("u", 0)
    p.append_untrusted(batch(0, seq=1), NOW)
    p.flush()
    points = logs.prepare_recovery_points()
    assert points is not None
    points.write()
    logs.delete_topic("t")  # while the file is being written: not put in place
    assert not points.commit()
    stored = clean_points.read(data / RECOVERY_POINT_FILE)
    assert stored is not None and sorted(stored[0]) == ["u-0", "u-1"]
    crash(logs)
    scans.clear()
    logs = make(data)
    assert scans == ["u-0"]  # (its entry is the old one: it moved on since)
