"""Many partitions (issue 36 items 8-9): disk use follows data; shutdown and start cost what
changed since the last clean point; the partition caps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import broker.log.recovery as recovery
from broker.log import clean_points
from broker.log.manager import RECOVERY_POINT_FILE, LogConfig, LogManager
from broker.log.partition import Partition
from protocol.errors import ErrorCode, KafkaError
from protocol.records import encode_batch

NOW = 1_700_000_000_000


def batch(tag: int = 0, pid: int = -1, seq: int = -1) -> bytearray:
    return bytearray(encode_batch([(b"k", b"v%d" % tag, (), NOW)], producer_id=pid,
                                  producer_epoch=0 if pid >= 0 else -1, base_sequence=seq))


def make(tmp_path: Path, **kwargs: object) -> LogManager:
    config = LogConfig(**{k: v for k, v in kwargs.items() if k != "max_partitions"})  # type: ignore[arg-type]
    if "max_partitions" in kwargs:
        return LogManager(tmp_path / "data", config, NOW,
                          max_partitions=kwargs["max_partitions"])  # type: ignore[arg-type]
    return LogManager(tmp_path / "data", config, NOW)


def crash(manager: LogManager) -> None:
    """kill -9: drop the descriptors, write nothing (the page cache keeps the data)."""
    for p in manager.all_partitions():
        p.txn_index.close(sync=False)
        for seg in p.segments:
            seg.close()


def du(directory: Path) -> int:
    """Bytes allocated to a directory and its files, as du counts them."""
    return directory.stat().st_blocks * 512 + sum(
        f.stat().st_blocks * 512 for f in directory.iterdir())


def test_one_small_batch_costs_kilobytes_not_a_megabyte(tmp_path: Path) -> None:
    # Durable and preallocating (the defaults): 300 partitions with one tiny batch each.
    logs = make(tmp_path, preallocate=True, flush="always")
    logs.create_topic("t", 300)
    for p in logs.all_partitions():
        p.append_untrusted(batch(p.index), NOW)
        p.flush()
    sizes = [du(p.dir) for p in logs.all_partitions()]
    assert max(sizes) <= 64 * 1024, max(sizes)  # was 1 MiB of zeros each
    # A busy partition still gets room ahead of its small writes, growing with its use.
    busy = logs.partition("t", 0)
    allocated = []
    for i in range(3000):
        busy.append_untrusted(batch(i), NOW)
        allocated.append(busy.segments[-1].allocated)
    steps = sorted(set(allocated))
    assert len(steps) >= 4 and all(b > a for a, b in zip(steps, steps[1:], strict=False))
    assert steps[-1] - steps[-2] <= 4 << 20
    logs.close()
    assert du(busy.dir) < 4 * busy.segments[-1].size + 64 * 1024  # trimmed at close


def test_close_writes_only_partitions_that_changed(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    logs = make(tmp_path)
    logs.create_topic("t", 20)
    for p in logs.all_partitions():
        p.append_untrusted(batch(p.index, pid=7, seq=0), NOW)
    logs.close()
    logs = make(tmp_path)
    assert all(r.clean for r in logs.recovered)
    logs.partition("t", 3).append_untrusted(batch(1, pid=7, seq=1), NOW)
    written: list[Path] = []
    original = Partition.save_clean_point

    def counting(self: Partition, fsync: bool = True) -> None:
        if self.changed:
            written.append(self.dir)
        original(self, fsync)

    monkeypatch.setattr(Partition, "save_clean_point", counting)
    # No file of its own for the changed partition: its producer state and small index go into
    # the one points file.
    files = {p.dir: sorted(os.listdir(p.dir)) for p in logs.all_partitions()}
    synced: list[int] = []
    real_fdatasync = os.fdatasync

    def counting_fdatasync(fd: int) -> None:
        synced.append(fd)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", counting_fdatasync)
    logs.close()
    assert written == [logs.partition("t", 3).dir]
    assert len(synced) <= 1  # the changed partition's segment
    assert {p.dir: sorted(os.listdir(p.dir)) for p in logs.all_partitions()} == files
    monkeypatch.undo()
    again = make(tmp_path)
    assert all(r.clean for r in again.recovered)
    assert again.partition("t", 3).log_end_offset == 2
    # Idempotence state of the changed partition survived (in the points file).
    assert again.partition("t", 3).append_untrusted(batch(1, pid=7, seq=1), NOW).duplicate


def test_unclean_start_scans_only_what_changed(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    logs = make(tmp_path)
    logs.create_topic("t", 30)
    for p in logs.all_partitions():
        p.append_untrusted(batch(p.index), NOW)
    logs.close()
    logs = make(tmp_path)
    for i in (4, 17):
        logs.partition("t", i).append_untrusted(batch(i), NOW)
        logs.partition("t", i).flush()
    crash(logs)
    scanned: list[Path] = []
    original = recovery.scan_segment

    def counting(segment, *args, **kwargs):  # type: ignore[no-untyped-def]
        scanned.append(segment.directory)
        return original(segment, *args, **kwargs)

    monkeypatch.setattr(recovery, "scan_segment", counting)
    after = make(tmp_path)
    assert sorted(p.name for p in scanned) == ["t-17", "t-4"]
    assert sum(not r.clean for r in after.recovered) == 2
    for p in after.all_partitions():
        assert p.log_end_offset == (2 if p.index in (4, 17) else 1)
    # A deleted topic's recovery points go with it: a new topic of that name is never
    # matched against them.
    after.delete_topic("t")
    stored = clean_points.read(tmp_path / "data" / RECOVERY_POINT_FILE)
    assert stored is not None and not stored[0]


def test_recovery_point_claims_only_a_clean_close(tmp_path: Path) -> None:
    """Loading writes no recovery points (a clean close or ``write_recovery_points`` once a
    start's recovery is complete does): a crash before the first leaves every partition to the
    scan."""
    logs = make(tmp_path)
    logs.create_topic("t", 3)
    for p in logs.all_partitions():
        p.append_untrusted(batch(), NOW)
        p.flush()
    crash(logs)
    assert not (tmp_path / "data" / RECOVERY_POINT_FILE).exists()
    after = make(tmp_path)
    assert not any(r.clean for r in after.recovered)
    assert [p.log_end_offset for p in after.all_partitions()] == [1, 1, 1]


def test_max_partitions(tmp_path: Path) -> None:
    logs = make(tmp_path, max_partitions=10)
    logs.create_topic("a", 6)
    with pytest.raises(KafkaError) as refused:
        logs.create_topic("b", 5)
    assert refused.value.code == ErrorCode.POLICY_VIOLATION
    assert "max.partitions=10" in refused.value.message
    with pytest.raises(KafkaError) as refused:
        logs.create_partitions("a", 11, NOW)
    assert refused.value.code == ErrorCode.POLICY_VIOLATION
    logs.create_partitions("a", 10, NOW)
    # A creation under way counts, and its name is taken until it is finished.
    logs.delete_topic("a")
    pending = logs.prepare_topic("c", 7, None, NOW)
    with pytest.raises(KafkaError) as refused:
        logs.create_topic("d", 4)
    assert refused.value.code == ErrorCode.POLICY_VIOLATION
    with pytest.raises(KafkaError) as refused:
        logs.create_topic("c", 1)
    assert refused.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    pending.build()
    logs.finish_topic(pending)
    assert logs.partition_count("c") == 7
    # The broker's own topics are not counted against it.
    logs.create_topic("__consumer_offsets", 50)


def test_abandoned_creation_leaves_nothing(tmp_path: Path) -> None:
    logs = make(tmp_path)
    pending = logs.prepare_topic("t", 5, None, NOW)
    with pytest.raises(KafkaError) as failed:
        logs.finish_topic(pending)  # never built (a cancelled request)
    assert failed.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    pending = logs.prepare_topic("t", 5, None, NOW)
    pending.build()
    pending.error = OSError(28, "No space left on device")  # as a failed fsync leaves it
    with pytest.raises(KafkaError):
        logs.finish_topic(pending)
    assert not any((tmp_path / "data").glob("t-*"))
    logs.create_topic("t", 5)
    assert logs.partition_count("t") == 5


def test_appends_into_the_kept_tail_are_found_after_a_crash(tmp_path: Path) -> None:
    # A clean close keeps the active segment's preallocated zeros (no truncation); appends after
    # the next start fill them without changing the file's length, so after a crash the
    # recovery points must not be trusted for a partition whose tail is no longer zeros.
    logs = make(tmp_path, preallocate=True, flush="always")
    logs.create_topic("t", 3)
    for p in logs.all_partitions():
        p.append_untrusted(batch(p.index, pid=7, seq=0), NOW)
        p.flush()
    sizes = [p.segments[-1].allocated for p in logs.all_partitions()]
    logs.close()
    logs = make(tmp_path, preallocate=True, flush="always")
    assert all(r.clean for r in logs.recovered)
    assert [p.segments[-1].allocated for p in logs.all_partitions()] == sizes
    changed = logs.partition("t", 1)
    changed.append_untrusted(batch(1, pid=7, seq=1), NOW)
    changed.flush()
    assert changed.segments[-1].allocated == sizes[1]  # written into the tail
    crash(logs)
    again = make(tmp_path, preallocate=True, flush="always")
    assert [r.clean for r in again.recovered] == [True, False, True]
    assert [p.log_end_offset for p in again.all_partitions()] == [1, 2, 1]
    assert again.partition("t", 1).append_untrusted(batch(1, pid=7, seq=1), NOW).duplicate


@pytest.mark.parametrize("syncfs_works", [True, False])
def test_close_with_one_file_system_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         syncfs_works: bool) -> None:
    # The storage's syncfs path: the partitions' close files without fsyncs of their own, then
    # one sync of the file system; where that is refused, every file is fsynced instead.
    from broker.storage import syncfs

    logs = make(tmp_path, preallocate=True, flush="never")
    logs.create_topic("t", 4)
    for p in logs.all_partitions():
        p.append_untrusted(batch(p.index, pid=7, seq=0), NOW)
    synced: list[int] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    def counting_fdatasync(fd: int) -> None:
        synced.append(fd)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    monkeypatch.setattr(os, "fdatasync", counting_fdatasync)
    calls: list[int] = []

    def fake_syncfs(fd: int) -> None:
        calls.append(fd)
        if not syncfs_works:
            raise OSError(38, "no syncfs (ENOSYS)")

    monkeypatch.setattr(syncfs, "syncfs", fake_syncfs)
    logs.close(syncfs.sync_file_system)
    assert len(calls) == 1
    partition_files = sum(len(os.listdir(p.dir)) + 1 for p in logs.all_partitions())
    if syncfs_works:
        # Only the points file and the marker, and their directory once.
        assert len(synced) == 3, len(synced)
    else:
        assert len(synced) >= partition_files + 3
    monkeypatch.undo()
    again = make(tmp_path, preallocate=True, flush="never")
    assert all(r.clean for r in again.recovered)
    assert [p.log_end_offset for p in again.all_partitions()] == [1, 1, 1, 1]
