"""Group commit (``broker/core.py``): an acks=all write that is small and alone is synced by its
own request; anything else joins the flusher's next round, where writes share fdatasyncs."""

from __future__ import annotations

from pathlib import Path

from broker.core import DataArrived, FlushScheduler, Storage
from broker.log.manager import LogManager
from broker.log.topic_config import LogConfig
from protocol.records import encode_batch

NOW = 1_700_000_000_000


class Seconds:
    """A monotonic clock that moves a millisecond per reading (an fsync takes one), and as far
    as the test moves it."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def storage(tmp_path: Path, seconds: Seconds) -> Storage:
    logs = LogManager(tmp_path / "data", LogConfig(), NOW)
    logs.create_topic("t", 3, None, NOW)
    arrived = DataArrived()
    return Storage(logs, FlushScheduler(arrived, seconds=seconds), arrived, durable=True)


def record(size: int = 100) -> bytearray:
    return bytearray(encode_batch([(None, b"x" * size, (), NOW)]))


async def test_a_lone_acks_all_write_is_synced_by_its_request(tmp_path: Path) -> None:
    seconds = Seconds()
    s = storage(tmp_path, seconds)
    p0, p1, p2 = (s.partition("t", i) for i in range(3))

    result, event = s.append_untrusted(p0, record(), NOW, waited_for=True)
    assert event is None and p0.high_watermark == p0.log_end_offset == 1  # durable already

    # Another write right after (within the window of a few fsync times): many producers, so
    # it joins the next round instead of blocking the loop for an fsync of its own.
    _, event = s.append_untrusted(p1, record(), NOW, waited_for=True)
    assert event is not None and p1.high_watermark == 0
    s.flush_now()
    assert event.is_set() and p1.high_watermark == 1

    seconds.now += 1.0  # quiet again
    _, event = s.append_untrusted(p2, record(), NOW)  # acks=1: nobody waits, the round syncs
    assert event is not None and p2.high_watermark == 0
    _, event = s.append_untrusted(p0, record(), NOW, waited_for=True)  # a round is pending
    assert event is not None and p0.high_watermark == 1
    s.flush_now()

    seconds.now += 1.0
    _, event = s.append_untrusted(p1, record(16 * 1024), NOW, waited_for=True)  # not small
    assert event is not None
    s.flush_now()
    _, event = s.append_untrusted(p2, record(), NOW, waited_for=True)  # alone again
    assert event is None and p2.high_watermark == p2.log_end_offset
    s.close()


async def test_inline_syncs_need_no_spare_descriptors(tmp_path: Path, monkeypatch) -> None:
    """Inline syncs (a lone write, ``flush_now``, ``Partition.flush``) fdatasync the files' own
    descriptors: out of descriptors (EMFILE), they still make writes durable. (A round in the
    worker thread duplicates them, as its files may be closed meanwhile.)"""
    seconds = Seconds()
    s = storage(tmp_path, seconds)
    p0, p1 = s.partition("t", 0), s.partition("t", 1)

    def no_descriptors(fd: int) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr("broker.log.partition.os.dup", no_descriptors)
    _, event = s.append_untrusted(p0, record(), NOW, waited_for=True)
    assert event is None and p0.high_watermark == 1
    p1.append_untrusted(record(), NOW)
    assert p1.flush() == 1
    s.append_untrusted(p0, record(), NOW)
    s.flush_now()
    assert p0.high_watermark == 2
