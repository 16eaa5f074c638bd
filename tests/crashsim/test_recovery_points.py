"""Recovery points written once a recovery is complete (issue 36): power cuts at every point.

After a crash with no clean close before it, every partition is scanned (what the scans rewrote
synced file by file or by one syncfs); the start then gives each the clean point a clean close
would (``LogManager.prepare_recovery_points``: the producer state and a small index inline) and
replaces the points file. Checked at every crash point of that, for each choice of what the cut
keeps: the directory loads with every record and each producer's sequence; once the points file
is there it claims nothing that is not: every partition loads without a scan.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from pathlib import Path

import pytest

import broker.log.recovery as recovery
from broker.app import build_broker
from broker.clock import ManualClock
from broker.log import clean_points
from broker.log.manager import RECOVERY_POINT_FILE, LogConfig, LogManager
from broker.storage.syncfs import sync_file_system
from protocol.records import encode_batch
from tests.crashsim.fs import Model, Recorder, no_real_syncs
from tests.crashsim.harness import broker_config, crash

NOW = 1_700_000_000_000
PARTITIONS = 3


def _batch(i: int) -> bytearray:
    return bytearray(encode_batch([(b"k", b"v%d" % i, (), NOW)], producer_id=5 + i,
                                  producer_epoch=0, base_sequence=0))


def _config() -> LogConfig:
    return LogConfig(flush="always", preallocate=True)


def _crash(logs: LogManager) -> None:
    for p in logs.all_partitions():
        p.txn_index.close(sync=False)
        for seg in p.segments:
            seg.close()


def _record(data: Path, sync: Callable[[Path], bool] | None
            ) -> tuple[Recorder, Model, list[bytes]]:
    """Unrecorded: a topic made, a batch appended to every partition and synced, a kill -9
    (no clean close ever). Recorded: the unclean start (every partition scanned) and its
    recovery points."""
    logs = LogManager(data, _config(), NOW)
    logs.create_topic("t", PARTITIONS)
    appended = []
    for p in logs.all_partitions():
        p.append_untrusted(_batch(p.index), NOW)
        p.flush()
        appended.append(p.read(0, 1 << 20, 1))
    _crash(logs)
    assert not (data / RECOVERY_POINT_FILE).exists()
    rec = Recorder(data)
    initial = rec.initial()
    with rec:
        logs = LogManager(data, _config(), NOW, sync_policy=lambda n: sync)
        assert not any(r.clean for r in logs.recovered)
        points = logs.prepare_recovery_points()
        assert points is not None
        points.write()
        assert points.commit()
        _crash(logs)
    return rec, initial, appended


def _violations(rec: Recorder, initial: Model, appended: list[bytes], work: Path) -> list[str]:
    found = []
    rng = random.Random(11)
    with no_real_syncs():
        for k in range(len(rec.ops) + 1):
            for choice in ("none", "mixed", "all"):
                model = copy.deepcopy(initial)
                for op in rec.ops[:k]:
                    model.apply(op)
                dest = work / f"{k}-{choice}"
                dest.mkdir(parents=True)
                model.materialize(dest, choice, rng)
                stored = clean_points.read(dest / RECOVERY_POINT_FILE)
                claimed = ({int(name.rsplit("-", 1)[1]): point.state.log_end_offset
                            for name, point in stored[0].items()} if stored else {})
                logs = LogManager(dest, _config(), NOW)
                for p in logs.all_partitions():
                    where = f"op {k} {choice}: t-{p.index}"
                    if p.log_end_offset != 1 or p.read(0, 1 << 20, 1) != appended[p.index]:
                        found.append(f"{where} holds {p!r}")
                    elif not p.append_untrusted(_batch(p.index), NOW).duplicate:
                        found.append(f"{where} lost its producer's sequence")
                    elif claimed and (claimed.get(p.index) != 1 or not p.recovery.clean):
                        found.append(f"{where}: the recovery points are there but it loaded "
                                     f"clean={p.recovery.clean}, claimed {claimed}")
                _crash(logs)
    return found


@pytest.mark.parametrize("one_sync", [True, False])
def test_recovery_points_after_a_recovery_survive_a_power_cut_anywhere(
        tmp_path: Path, one_sync: bool) -> None:
    rec, initial, appended = _record(tmp_path / "data", sync_file_system if one_sync else None)
    assert any(op[0] == "sync" for op in rec.ops)
    assert _violations(rec, initial, appended, tmp_path / "states") == []


def test_a_second_unclean_start_with_nothing_changed_scans_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the composition root: kill -9 with no clean close ever, an unclean start (every
    partition scanned), kill -9 again with nothing written: the third start scans nothing (it
    scanned every partition again before recovery points were written after a recovery)."""
    data = tmp_path / "data"
    b = build_broker(broker_config(data), clock=ManualClock(NOW))
    b.logs.create_topic("t", 20)
    for p in [b.logs.partition("t", i) for i in range(20)]:
        p.append_untrusted(_batch(p.index), NOW)
        p.flush()
    crash(b)
    scanned: list[str] = []
    original = recovery.scan_segment

    def counting(segment, *args, **kwargs):
        scanned.append(segment.directory.name)
        return original(segment, *args, **kwargs)

    monkeypatch.setattr(recovery, "scan_segment", counting)
    b = build_broker(broker_config(data), clock=ManualClock(NOW))
    assert len([n for n in scanned if n.startswith("t-")]) == 20
    points = b.storage.prepare_recovery_points()  # (what ``serve`` runs once it listens)
    assert points is not None
    points.write()
    assert points.commit()
    crash(b)
    scanned.clear()
    b = build_broker(broker_config(data), clock=ManualClock(NOW))
    try:
        assert b.logs.unclean_start
        assert scanned == []
        assert all(r.clean for r in b.logs.recovered)
        for i in range(20):
            p = b.logs.partition("t", i)
            assert p.log_end_offset == 1
            assert p.append_untrusted(_batch(i), NOW).duplicate
    finally:
        b.storage.close()
