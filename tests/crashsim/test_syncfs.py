"""A clean close made durable by one syncfs (issue 36): power cuts at every point of it.

The partitions' close files (indexes, producer-state snapshots, and with ``flush="never"`` the
data itself) are written without fsyncs; ``broker/storage/syncfs.py`` makes them durable
together before the recovery points and the clean-shutdown marker are written. The recorder
(``fs.py``) takes a syncfs for a sync of every file and directory under the root. Checked at
every crash point, for each choice of what the cut keeps: the directory loads; a partition
holds nothing but what was appended; and once the marker is there, it claims nothing that is
not: every partition loads on the clean path with every record.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path

import pytest

from broker.log import clean_points
from broker.log.manager import RECOVERY_POINT_FILE, LogConfig, LogManager
from broker.storage.syncfs import sync_file_system
from protocol.records import encode_batch
from tests.crashsim.fs import Model, Recorder, no_real_syncs

NOW = 1_700_000_000_000
PARTITIONS = 3


def _batch(i: int) -> bytearray:
    return bytearray(encode_batch([(b"k", b"v%d" % i, (), NOW)], producer_id=5 + i,
                                  producer_epoch=0, base_sequence=0))


def _config() -> LogConfig:
    return LogConfig(flush="never", preallocate=True)


def _record_close(data: Path) -> tuple[Recorder, Model, list[bytes]]:
    """A topic made and closed unrecorded; then, recorded: a clean start, one batch appended
    to every partition (never fsynced: ``flush="never"``), a clean close through syncfs."""
    logs = LogManager(data, _config(), NOW)
    logs.create_topic("t", PARTITIONS)
    logs.close()
    rec = Recorder(data)
    initial = rec.initial()
    with rec:
        logs = LogManager(data, _config(), NOW)
        appended = []
        for p in logs.all_partitions():
            p.append_untrusted(_batch(p.index), NOW)
            appended.append(p.read(0, 1 << 20, 1))
        logs.close(sync_file_system)
    return rec, initial, appended


def _violations(rec: Recorder, initial: Model, appended: list[bytes], work: Path) -> list[str]:
    found = []
    rng = random.Random(7)
    with no_real_syncs():  # scratch directories: only what the process sees matters
        for k in range(len(rec.ops) + 1):
            found.extend(_check_point(rec, initial, appended, work, k, rng))
    return found


def _check_point(rec: Recorder, initial: Model, appended: list[bytes], work: Path, k: int,
                 rng: random.Random) -> list[str]:
    """The states a power cut after ``k`` operations may leave, each loaded and checked."""
    found = []
    for choice in ("none", "mixed", "all"):
        model = copy.deepcopy(initial)
        for op in rec.ops[:k]:
            model.apply(op)
        dest = work / f"{k}-{choice}"
        dest.mkdir(parents=True)
        model.materialize(dest, choice, rng)
        # What the marker claims (the first close's, before the start removed it; then the
        # recorded close's): partition -> log end offset, in the points file it names.
        present, named = clean_points.read_marker(dest / ".clean_shutdown")
        stored = clean_points.read(dest / RECOVERY_POINT_FILE)
        claimed = ({int(name.rsplit("-", 1)[1]): point.state.log_end_offset
                    for name, point in stored[0].items()}
                   if present and stored is not None and named == stored[1] else {})
        logs = LogManager(dest, _config(), NOW)
        for p in logs.all_partitions():
            data = p.read(0, 1 << 20, p.log_end_offset) if p.log_end_offset else b""
            if p.log_end_offset not in (0, 1) or data not in (b"", appended[p.index]):
                found.append(f"op {k} {choice}: t-{p.index} holds {p!r}")
            elif claimed and (p.log_end_offset != claimed[p.index] or not p.recovery.clean):
                found.append(f"op {k} {choice}: the marker is there but t-{p.index} "
                             f"loaded clean={p.recovery.clean} with {p!r}")
        logs.close()
    return found


def test_a_clean_close_through_syncfs_survives_a_power_cut_anywhere(tmp_path: Path) -> None:
    rec, initial, appended = _record_close(tmp_path / "data")
    assert any(op[0] == "sync" for op in rec.ops)
    assert _violations(rec, initial, appended, tmp_path / "states") == []


def test_a_syncfs_that_syncs_nothing_is_caught(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # The negative control: a syncfs the recorder logs as nothing (as if it synced nothing):
    # the marker then claims data a power cut can lose.
    monkeypatch.setattr(Recorder, "_syncfs", lambda self, fd: None)
    rec, initial, appended = _record_close(tmp_path / "data")
    assert _violations(rec, initial, appended, tmp_path / "states")
