"""Producer ids are unique across restarts, clean or not."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.txn.producer_ids import ProducerIdManager


def test_ids_are_sequential_within_a_run(tmp_path: Path) -> None:
    m = ProducerIdManager(tmp_path / "pids", block_size=10)
    assert [m.next_id() for _ in range(25)] == list(range(25))


def test_block_is_on_disk_before_an_id_is_handed_out(tmp_path: Path) -> None:
    path = tmp_path / "pids"
    m = ProducerIdManager(path, block_size=100)
    assert not path.exists()  # nothing reserved until an id is needed
    pid = m.next_id()
    reserved_end = int(path.read_text().split()[-1])
    assert pid < reserved_end == 100


def test_ids_are_never_reused_after_a_crash(tmp_path: Path) -> None:
    """Each "run" abandons its manager mid-block, as kill -9 would."""
    path = tmp_path / "pids"
    seen: set[int] = set()
    for run, count in enumerate([3, 0, 10, 1, 7]):
        m = ProducerIdManager(path, block_size=4)
        ids = [m.next_id() for _ in range(count)]
        assert not seen & set(ids), f"run {run} reused an id"
        seen.update(ids)
    assert len(seen) == 21
    # The block size may change between runs without reuse either.
    m = ProducerIdManager(path, block_size=1)
    assert m.next_id() > max(seen)


def test_damaged_file_stops_the_broker(tmp_path: Path) -> None:
    path = tmp_path / "pids"
    path.write_text("garbage")
    with pytest.raises(ValueError):
        ProducerIdManager(path)
    path.write_text("")
    with pytest.raises(ValueError):
        ProducerIdManager(path)


def test_block_size_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        ProducerIdManager(tmp_path / "pids", block_size=0)
