"""Durable partition log: append/read, segments and index, recovery, retention, topics."""

from __future__ import annotations

import json
import os
import random
import struct
from pathlib import Path

import crc32c
import pytest

import broker.log.recovery as recovery
from broker.log.manager import (
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_FILE,
    TOPICS_FILE,
    LogConfig,
    LogManager,
)
from broker.log.partition import Partition
from broker.log.producer_state import snapshot_path
from protocol.errors import ErrorCode, KafkaError
from protocol.records import (
    Compression,
    build_batch,
    decode_batches_untrusted,
    encode_batch,
    encode_control_batch,
    parse_header_untrusted,
)

NOW = 1_700_000_000_000


def batch(n: int = 1, *, value_size: int = 20, ts: int = NOW, pid: int = -1, epoch: int = -1,
          seq: int = -1, tag: int = 0) -> bytearray:
    records = [
        (b"k%d" % tag, bytes([tag % 256]) * value_size + b"%d" % i, (), ts + i) for i in range(n)
    ]
    return bytearray(
        encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    )


def base_offsets(data: bytes) -> list[int]:
    return [h.base_offset for h, _ in decode_batches_untrusted(data)]


def records(data: bytes) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for _, recs in decode_batches_untrusted(data) for r in recs]


def read_all(p: Partition, max_bytes: int = 1 << 20) -> list[tuple[int, bytes | None]]:
    """Consume the partition from its start like a client: fetch, advance, repeat."""
    out: list[tuple[int, bytes | None]] = []
    offset = p.log_start_offset
    while offset < p.high_watermark:
        data = p.read(offset, max_bytes, p.high_watermark)
        assert data, f"empty read at {offset}"
        got = [r for r in records(data) if r[0] >= offset]
        out.extend(got)
        offset = got[-1][0] + 1
    return out


def crash(manager: LogManager) -> None:
    """Simulate kill -9: drop the descriptors, write nothing (the page cache keeps the data)."""
    for p in manager.all_partitions():
        for seg in p.segments:
            seg.close()


def make(tmp_path: Path, **config: object) -> LogManager:
    cfg = LogConfig(**{"preallocate": False, **config})  # type: ignore[arg-type]
    return LogManager(tmp_path / "data", cfg, NOW)


def reopen(tmp_path: Path, old: LogManager, clean: bool, **config: object) -> LogManager:
    if clean:
        old.close()
    else:
        crash(old)
    return make(tmp_path, **config)


@pytest.fixture
def mgr(tmp_path: Path) -> LogManager:
    m = make(tmp_path)
    m.create_topic("t", 1)
    return m


# -- append and read ------------------------------------------------------------------------


def test_append_assigns_offsets_and_patches_in_place(mgr: LogManager) -> None:
    p = mgr.partition("t", 0)
    b1, b2 = batch(3), batch(2, tag=1)
    r1 = p.append_untrusted(b1, NOW)
    r2 = p.append_untrusted(memoryview(b2), NOW)
    assert (r1.base_offset, r1.last_offset, r1.duplicate) == (0, 2, False)
    assert (r2.base_offset, r2.last_offset) == (3, 4)
    assert parse_header_untrusted(b2).base_offset == 3  # patched in the caller's buffer
    assert p.log_end_offset == 5
    assert p.flush() == 5
    data = p.read(0, 1 << 20, p.high_watermark)
    assert data == bytes(b1) + bytes(b2)  # stored exactly as received, offsets patched
    assert [o for o, _ in records(data)] == [0, 1, 2, 3, 4]


def test_multi_batch_append_is_one_write_with_contiguous_offsets(mgr: LogManager) -> None:
    p = mgr.partition("t", 0)
    buf = batch(2) + batch(3, tag=1) + batch(1, tag=2)
    r = p.append_untrusted(buf, NOW)
    assert (r.base_offset, r.last_offset) == (0, 5)
    p.flush()
    assert base_offsets(p.read(0, 1 << 20, 6)) == [0, 2, 5]


def test_high_watermark_moves_only_on_flush_when_durable(mgr: LogManager) -> None:
    p = mgr.partition("t", 0)
    assert not p.dirty
    p.append_untrusted(batch(), NOW)
    assert p.dirty and p.high_watermark == 0 and p.log_end_offset == 1
    assert p.read(0, 1 << 20, p.high_watermark) == b""
    assert p.flush() == 1
    assert not p.dirty and p.high_watermark == 1
    assert p.flush() == 1  # clean: a no-op


def test_flush_never_mode_high_watermark_follows_leo(tmp_path: Path) -> None:
    m = make(tmp_path, flush="never")
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    p.append_untrusted(batch(4), NOW)
    assert p.high_watermark == p.log_end_offset == 4


def test_read_at_least_one_batch_then_whole_batches_within_max_bytes(mgr: LogManager) -> None:
    p = mgr.partition("t", 0)
    sizes = []
    for i in range(5):
        b = batch(2, value_size=100, tag=i)
        sizes.append(len(b))
        p.append_untrusted(b, NOW)
    p.flush()
    assert base_offsets(p.read(0, 1, 10)) == [0]  # one whole batch even though it exceeds max
    assert base_offsets(p.read(0, 0, 10)) == [0]
    assert base_offsets(p.read(0, sizes[0] + sizes[1], 10)) == [0, 2]
    assert base_offsets(p.read(0, sizes[0] + sizes[1] - 1, 10)) == [0]
    assert base_offsets(p.read(3, 1, 10)) == [2]  # the batch holding offset 3
    assert base_offsets(p.read(4, 1 << 20, 10)) == [4, 6, 8]


def test_read_bounded_by_max_offset(mgr: LogManager) -> None:
    p = mgr.partition("t", 0)
    for i in range(4):
        p.append_untrusted(batch(2, tag=i), NOW)
    p.flush()
    assert base_offsets(p.read(0, 1 << 20, 4)) == [0, 2]
    assert base_offsets(p.read(0, 1 << 20, 5)) == [0, 2, 4]  # batch 4-5 starts below 5
    assert p.read(4, 1 << 20, 4) == b""
    assert p.read(8, 1 << 20, 8) == b""  # at the log end


def test_offset_out_of_range(mgr: LogManager) -> None:
    p = mgr.partition("t", 0)
    p.append_untrusted(batch(2), NOW)
    p.flush()
    assert p.read(2, 100, 2) == b""  # == LEO is fine
    with pytest.raises(KafkaError) as e:
        p.read(3, 100, 2)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(KafkaError) as e:
        p.read(-1, 100, 2)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_round_trip_across_segment_rolls(tmp_path: Path) -> None:
    m = make(tmp_path, segment_bytes=2000, index_interval_bytes=300)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    expected = []
    for i in range(60):
        n = 1 + i % 4
        b = batch(n, value_size=30 + (i * 7) % 90, tag=i)
        expected += records(bytes(b))  # offsets relative to 0 here; fixed below
        p.append_untrusted(b, NOW)
    p.flush()
    assert len(p.segments) > 5
    assert all(s.size <= 2000 for s in p.segments)
    got = read_all(p)
    assert [v for _, v in got] == [v for _, v in expected]
    assert [o for o, _ in got] == list(range(p.log_end_offset))
    # Small reads, one batch at a time, also find every batch.
    assert [o for o, _ in read_all(p, max_bytes=1)] == list(range(p.log_end_offset))


def test_reads_match_a_brute_force_model(tmp_path: Path) -> None:
    """Every (fetch_offset, max_bytes, max_offset) against a list of all batches."""
    rng = random.Random(7)
    m = make(tmp_path, segment_bytes=6000, index_interval_bytes=500)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    model = []  # (base, last, bytes)
    for i in range(120):
        b = batch(rng.randint(1, 5), value_size=rng.randint(1, 300), tag=i)
        r = p.append_untrusted(b, NOW)
        model.append((r.base_offset, r.last_offset, bytes(b)))
    p.flush()
    seg_bases = [s.base_offset for s in p.segments]

    def expect(fetch: int, max_bytes: int, max_offset: int) -> bytes:
        i = next(k for k, (b, last, _) in enumerate(model) if b <= fetch <= last)
        seg_end = min([s for s in seg_bases if s > model[i][0]], default=1 << 62)
        if model[i][0] >= max_offset or fetch >= max_offset:
            return b""
        out = model[i][2]
        for b, _, data in model[i + 1 :]:
            if b >= max_offset or b >= seg_end or len(out) + len(data) > max_bytes:
                break
            out += data
        return out

    for _ in range(600):
        fetch = rng.randrange(p.log_end_offset)
        max_bytes = rng.choice([0, 1, 100, 1000, 3000, 10000])
        max_offset = rng.randint(fetch, p.log_end_offset)
        assert p.read(fetch, max_bytes, max_offset) == expect(fetch, max_bytes, max_offset)


def test_offset_for_timestamp(tmp_path: Path) -> None:
    m = make(tmp_path, segment_bytes=1500, index_interval_bytes=200)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    stamps = [100, 200, 150, 300, 300, 500, 400, 800, 900, 1000] * 3
    stamps = [s + 1000 * (i // 10) for i, s in enumerate(stamps)]
    for i, ts in enumerate(stamps):
        p.append_untrusted(batch(1, value_size=100, ts=ts, tag=i), NOW)
    assert len(p.segments) > 2
    for target in range(0, 3200, 50):
        want = next(((ts, i) for i, ts in enumerate(stamps) if ts >= target), None)
        assert p.offset_for_timestamp(target) == want, target


def test_offset_for_timestamp_finds_the_record_inside_a_batch(tmp_path: Path) -> None:
    """Kafka's ListOffsets by time answers the first *record* at or after the time, not the start
    of its batch (Spark's startingTimestamp depends on it), compressed batches included."""
    m = make(tmp_path)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    stamps = [[100, 300, 200, 400], [500, 450, 700], [800, 900]]
    codecs = [Compression.NONE, Compression.GZIP, Compression.NONE]
    for group, codec in zip(stamps, codecs, strict=True):
        p.append_untrusted(bytearray(encode_batch([(None, b"v", (), ts) for ts in group], compression=codec)), NOW)
    flat = [ts for group in stamps for ts in group]
    for target in range(0, 1000, 25):
        want = next(((ts, i) for i, ts in enumerate(flat) if ts >= target), None)
        assert p.offset_for_timestamp(target) == want, target


def test_offset_for_timestamp_skips_deleted_records(tmp_path: Path) -> None:
    """After DeleteRecords, ListOffsets by time answers the first record from the log start on
    (Kafka's LogSegment.findOffsetByTimestamp from the log start offset), even inside a batch
    the log start cuts."""
    m = make(tmp_path)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    stamps = [[100, 200, 300], [400, 500]]
    for group in stamps:
        p.append_untrusted(bytearray(encode_batch([(None, b"v", (), ts) for ts in group])), NOW)
    p.flush()
    p.delete_records(1)
    assert p.offset_for_timestamp(0) == (200, 1)
    assert p.offset_for_timestamp(250) == (300, 2)
    p.delete_records(4)
    assert p.offset_for_timestamp(0) == (500, 4)
    assert p.offset_for_timestamp(600) is None


# -- bad input ------------------------------------------------------------------------------


def _assert_rejected(p: Partition, buf: bytearray | bytes, code: ErrorCode) -> None:
    leo, size = p.log_end_offset, p.segments[-1].size
    with pytest.raises(KafkaError) as e:
        p.append_untrusted(bytearray(buf), NOW)
    assert e.value.code == code
    assert (p.log_end_offset, p.segments[-1].size) == (leo, size)


def test_bad_batches_are_rejected_and_nothing_is_written(mgr: LogManager) -> None:
    p = mgr.partition("t", 0)
    p.append_untrusted(batch(), NOW)
    good = batch(2, value_size=50)

    flipped = bytearray(good)
    flipped[-5] ^= 0x01
    _assert_rejected(p, flipped, ErrorCode.CORRUPT_MESSAGE)

    for magic, code in ((1, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT),
                        (0, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT),
                        (7, ErrorCode.CORRUPT_MESSAGE)):
        wrong = bytearray(good)
        wrong[16] = magic
        _assert_rejected(p, wrong, code)

    _assert_rejected(p, good[:-1], ErrorCode.CORRUPT_MESSAGE)  # truncated
    _assert_rejected(p, good[:30], ErrorCode.CORRUPT_MESSAGE)  # not even a header
    _assert_rejected(p, good + b"\x00" * 10, ErrorCode.CORRUPT_MESSAGE)  # trailing junk
    _assert_rejected(p, b"", ErrorCode.CORRUPT_MESSAGE)
    # Seeded: a random magic byte of 0 or 1 would get another (right) answer.
    _assert_rejected(p, random.Random(7).randbytes(200), ErrorCode.CORRUPT_MESSAGE)
    control = encode_control_batch(producer_id=1, producer_epoch=0, commit=True,
                                   coordinator_epoch=0, timestamp_ms=NOW)
    _assert_rejected(p, control, ErrorCode.INVALID_RECORD)
    # recordsCount that disagrees with lastOffsetDelta (CRC made valid again).
    miscounted = bytearray(good)
    struct.pack_into(">i", miscounted, 57, 5)
    struct.pack_into(">I", miscounted, 17, crc32c.crc32c(bytes(miscounted[21:])))
    _assert_rejected(p, miscounted, ErrorCode.INVALID_RECORD)
    # All or nothing: a good batch followed by a corrupt one writes neither.
    _assert_rejected(p, batch() + flipped, ErrorCode.CORRUPT_MESSAGE)
    assert p.log_end_offset == 1


def test_batch_over_max_message_bytes(tmp_path: Path) -> None:
    m = make(tmp_path)
    m.create_topic("small", 1, {"max.message.bytes": "500"})
    p = m.partition("small", 0)
    p.append_untrusted(batch(1, value_size=300), NOW)
    _assert_rejected(p, batch(1, value_size=600), ErrorCode.MESSAGE_TOO_LARGE)


def test_append_control_batch(mgr: LogManager) -> None:
    p = mgr.partition("t", 0)
    p.append_untrusted(batch(2, pid=5, epoch=0, seq=0), NOW)
    marker = encode_control_batch(producer_id=5, producer_epoch=1, commit=False,
                                  coordinator_epoch=3, timestamp_ms=NOW)
    assert p.append_control_batch(marker, NOW) == 2
    assert p.log_end_offset == 3
    entry = p.producers.get(5)
    assert entry is not None and entry.producer_epoch == 1 and entry.batches == []
    p.flush()
    headers = [h for h, _ in decode_batches_untrusted(p.read(0, 1 << 20, 3))]
    assert headers[-1].is_control and headers[-1].base_offset == 2


def test_append_built_batch_writes_the_bytes_append_control_batch_writes(mgr: LogManager) -> None:
    records = [(b"key", b"value", (), NOW)]
    mgr.create_topic("u", 1)
    p = mgr.partition("t", 0)
    q = mgr.partition("u", 0)
    for _ in range(2):
        assert p.append_control_batch(encode_batch(records), NOW) == \
            q.append_built_batch(*build_batch(records), NOW)
    p.flush()
    q.flush()
    assert p.read(0, 1 << 20, 2) == q.read(0, 1 << 20, 2)
    assert base_offsets(q.read(0, 1 << 20, 2)) == [0, 1]


def _segment_state(p: Partition) -> tuple:
    seg = p.segments[-1]
    return (bytes(p.read(0, 1 << 20, p.log_end_offset)), list(seg.index.offsets),
            list(seg.index.positions), list(seg.index.max_timestamps), seg.max_timestamp,
            seg.size, seg.next_offset, p.log_end_offset)


def test_one_batch_appends_write_what_a_multi_batch_append_writes(tmp_path: Path) -> None:
    """``append_built_batch`` (one batch: every built batch, most Produce requests) against ``_write``
    (several): the same bytes, index entries, timestamps and producer state."""
    m = make(tmp_path, index_interval_bytes=100)
    m.create_topic("one", 1)
    m.create_topic("many", 1)
    one, many = m.partition("one", 0), m.partition("many", 0)
    batches = [batch(1 + i % 3, value_size=40 + 30 * i, ts=NOW + 7 * i - (i % 2) * 20, pid=5,
                     epoch=0, seq=sum(1 + j % 3 for j in range(i)), tag=i) for i in range(8)]
    built = [build_batch([(b"k", b"v" * 50 * i, (), NOW + i)]) for i in range(1, 5)]
    for b in batches:
        one.append_untrusted(bytearray(b), NOW)
    for buf, header in built:  # the built-batch path too
        one.append_built_batch(bytearray(buf), header, NOW)
    many.append_untrusted(bytearray(b"".join([*batches, *(buf for buf, _ in built)])), NOW)
    assert _segment_state(one) == _segment_state(many)
    assert one.producers.get(5).batches == many.producers.get(5).batches  # type: ignore[union-attr]


@pytest.mark.parametrize("path", ["untrusted", "built", "several"])
def test_a_failed_write_appends_nothing(mgr: LogManager, monkeypatch: pytest.MonkeyPatch,
                                        path: str) -> None:
    p = mgr.partition("t", 0)
    p.append_untrusted(batch(), NOW)
    before = _segment_state(p)
    real_pwrite = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, pos: real_pwrite(fd, data[:10], pos))
    with pytest.raises(KafkaError) as err:
        if path == "untrusted":
            p.append_untrusted(batch(2, tag=1), NOW)
        elif path == "built":
            p.append_built_batch(*build_batch([(b"k", b"v", (), NOW)]), NOW)
        else:
            p.append_untrusted(batch(2, tag=1) + batch(1, tag=2), NOW)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    monkeypatch.undo()
    assert p.segments[-1].size == before[5] and p.log_end_offset == before[7]
    p.append_untrusted(batch(1, tag=3), NOW)  # the torn bytes are overwritten
    assert records(p.read(0, 1 << 20, p.log_end_offset)) == [(0, b"\x00" * 20 + b"0"),
                                                              (1, b"\x03" * 20 + b"0")]


# -- idempotence through the partition ------------------------------------------------------


def test_duplicate_returns_original_offsets_and_appends_nothing(mgr: LogManager) -> None:
    p = mgr.partition("t", 0)
    p.append_untrusted(batch(3, pid=9, epoch=0, seq=0), NOW)
    first = batch(2, pid=9, epoch=0, seq=3)
    retry = bytearray(first)
    r = p.append_untrusted(first, NOW)
    p.append_untrusted(batch(1, pid=9, epoch=0, seq=5), NOW)
    size, leo = p.segments[-1].size, p.log_end_offset
    d = p.append_untrusted(retry, NOW)
    assert d.duplicate and (d.base_offset, d.last_offset) == (r.base_offset, r.last_offset) == (3, 4)
    assert (p.segments[-1].size, p.log_end_offset) == (size, leo)


def test_idempotence_errors_write_nothing(mgr: LogManager) -> None:
    p = mgr.partition("t", 0)
    p.append_untrusted(batch(1, pid=9, epoch=2, seq=0), NOW)
    _assert_rejected(p, batch(1, pid=9, epoch=2, seq=2), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    _assert_rejected(p, batch(1, pid=9, epoch=1, seq=1), ErrorCode.INVALID_PRODUCER_EPOCH)
    _assert_rejected(p, batch(1, pid=9, epoch=3, seq=1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    _assert_rejected(p, batch(1, pid=10, epoch=0, seq=4), ErrorCode.UNKNOWN_PRODUCER_ID)
    # Cumulative check inside one request: seq 1 then seq 3 is a gap.
    _assert_rejected(p, batch(1, pid=9, epoch=2, seq=1) + batch(1, pid=9, epoch=2, seq=3),
                     ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    r = p.append_untrusted(batch(1, pid=9, epoch=2, seq=1) + batch(2, pid=9, epoch=2, seq=2), NOW)
    assert (r.base_offset, r.last_offset) == (1, 3)
    entry = p.producers.get(9)
    assert entry is not None and entry.last_seq == 3


# -- recovery -------------------------------------------------------------------------------


def _fill(p: Partition, n: int, pid: int = 42, start_seq: int = 0) -> list[bytes]:
    out = []
    for i in range(n):
        b = batch(2, value_size=60, pid=pid, epoch=0, seq=start_seq + 2 * i, tag=i)
        p.append_untrusted(b, NOW)
        out.append(bytes(b))
    p.flush()
    return out


def _active_log(p: Partition) -> Path:
    return p.segments[-1].log_path


def test_recovery_truncates_a_torn_tail(tmp_path: Path, mgr: LogManager) -> None:
    p = mgr.partition("t", 0)
    written = _fill(p, 10)
    path = _active_log(p)
    os.truncate(path, path.stat().st_size - 30)  # the last batch is cut in the middle
    m2 = reopen(tmp_path, mgr, clean=False)
    (rep,) = m2.recovered
    assert not rep.clean
    assert rep.truncated_bytes == len(written[-1]) - 30
    assert rep.log_end_offset == 18
    p2 = m2.partition("t", 0)
    assert p2.high_watermark == p2.log_end_offset == 18
    assert path.stat().st_size == sum(map(len, written[:-1]))
    assert p2.read(0, 1 << 20, 18) == b"".join(written[:-1])
    # The producer state was rebuilt: the lost batch (seq 18-19) is the next one expected.
    r = p2.append_untrusted(batch(2, pid=42, epoch=0, seq=18), NOW)
    assert (r.base_offset, r.duplicate) == (18, False)
    d = p2.append_untrusted(bytearray(written[-2]), NOW)
    assert d.duplicate and d.base_offset == 16


def test_recovery_truncates_from_a_flipped_byte(tmp_path: Path, mgr: LogManager) -> None:
    p = mgr.partition("t", 0)
    written = _fill(p, 10)
    path = _active_log(p)
    pos = sum(map(len, written[:6])) + 70  # inside batch 6 (offsets 12-13), under the CRC
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ 0x40]))
    m2 = reopen(tmp_path, mgr, clean=False)
    (rep,) = m2.recovered
    assert rep.log_end_offset == 12
    # Counted up to the last non-zero byte: trailing zeros look like preallocation.
    assert rep.truncated_bytes == len(b"".join(written[6:]).rstrip(b"\0"))
    p2 = m2.partition("t", 0)
    assert p2.read(0, 1 << 20, 12) == b"".join(written[:6])
    assert p2.append_untrusted(batch(1), NOW).base_offset == 12


def test_recovery_with_preallocated_zeros(tmp_path: Path) -> None:
    m = make(tmp_path, preallocate=True)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    written = _fill(p, 5)
    path = _active_log(p)
    data_size = sum(map(len, written))
    assert path.stat().st_size > data_size  # preallocated past the data
    m2 = reopen(tmp_path, m, clean=False, preallocate=True)
    (rep,) = m2.recovered
    assert not rep.clean and rep.truncated_bytes == 0 and rep.log_end_offset == 10
    # The zeros stay as preallocated room (truncating cost a journal operation per partition).
    p2 = m2.partition("t", 0)
    assert p2.segments[-1].size == data_size
    assert p2.segments[-1].allocated == path.stat().st_size > data_size
    assert p2.read(0, 1 << 20, 10) == b"".join(written)
    assert p2.append_untrusted(batch(1), NOW).base_offset == 10
    # A torn batch followed by zeros: only the torn bytes count.
    p2.flush()
    path2 = _active_log(p2)
    end = p2.segments[-1].size
    with open(path2, "r+b") as f:
        f.seek(end)
        f.write(bytes(batch(3))[:50])
    m3 = reopen(tmp_path, m2, clean=False, preallocate=True)
    assert m3.recovered[0].truncated_bytes == 50
    assert m3.partition("t", 0).log_end_offset == 11


def test_clean_close_skips_the_scan(tmp_path: Path, mgr: LogManager,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    p = mgr.partition("t", 0)
    written = _fill(p, 8)
    mgr.close()
    marker = tmp_path / "data" / CLEAN_SHUTDOWN_FILE
    assert marker.exists()

    def no_scan(*args: object, **kwargs: object) -> None:
        raise AssertionError("scanned on a clean start")

    monkeypatch.setattr(recovery, "scan_segment", no_scan)
    m2 = make(tmp_path)
    assert not marker.exists()  # a crash from now on is detected
    (rep,) = m2.recovered
    assert rep.clean and rep.log_end_offset == 16 and rep.truncated_bytes == 0
    p2 = m2.partition("t", 0)
    assert p2.read(0, 1 << 20, 16) == b"".join(written)
    assert p2.producers.get(42) is not None and p2.producers.get(42).last_seq == 15  # type: ignore[union-attr]
    monkeypatch.undo()
    # A crash with nothing appended since: the recovery point still matches, no scan.
    m3 = reopen(tmp_path, m2, clean=False)
    assert m3.recovered[0].clean and m3.recovered[0].log_end_offset == 16
    # Appended since the clean point, then a crash: that partition is scanned.
    m3.partition("t", 0).append_untrusted(batch(1), NOW)
    m4 = reopen(tmp_path, m3, clean=False)
    assert not m4.recovered[0].clean and m4.recovered[0].log_end_offset == 17


def test_only_small_writes_are_preallocated(tmp_path: Path) -> None:
    m = make(tmp_path, preallocate=True)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    large = batch(700, value_size=100)  # about 90 KB: written as it is, nothing zero-filled
    assert len(large) >= 64 * 1024
    p.append_untrusted(large, NOW)
    path = _active_log(p)
    assert path.stat().st_size == len(large)
    small = batch(2)
    p.append_untrusted(small, NOW)  # a small write gets zeroed room ahead of it
    assert path.stat().st_size > len(large) + len(small)
    p.flush()
    assert p.read(0, 1 << 20, 702) == bytes(large) + bytes(small)


def test_clean_close_keeps_preallocation(tmp_path: Path) -> None:
    # The clean point records the data's size; the zeros after it stay as room for appends
    # (truncating them cost a journal operation per partition at every clean close).
    m = make(tmp_path, preallocate=True)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    written = _fill(p, 3)
    path = _active_log(p)
    allocated = path.stat().st_size
    assert allocated > sum(map(len, written))
    m2 = reopen(tmp_path, m, clean=True, preallocate=True)
    assert path.stat().st_size == allocated
    assert m2.recovered[0].clean
    p2 = m2.partition("t", 0)
    assert p2.append_untrusted(batch(), NOW).base_offset == 6
    p2.flush()
    data = b"".join(written)
    assert p2.read(0, 1 << 20, 7)[: len(data)] == data


def test_clean_marker_that_does_not_match_falls_back_to_recovery(tmp_path: Path,
                                                                 mgr: LogManager) -> None:
    p = mgr.partition("t", 0)
    written = _fill(p, 4)
    path = _active_log(p)
    mgr.close()
    with open(path, "ab") as f:
        f.write(b"garbage after a clean close")
    m2 = make(tmp_path)
    (rep,) = m2.recovered
    assert not rep.clean and rep.truncated_bytes == len(b"garbage after a clean close")
    assert m2.partition("t", 0).read(0, 1 << 20, 8) == b"".join(written)


def test_producer_state_survives_restart_across_rolls(tmp_path: Path) -> None:
    m = make(tmp_path, segment_bytes=1000)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    written = _fill(p, 20)
    assert len(p.segments) > 3
    snapshots = sorted(x.name for x in p.dir.glob("*.snapshot"))
    assert 1 <= len(snapshots) <= 2
    for clean in (False, True, False):
        m = reopen(tmp_path, m, clean=clean, segment_bytes=1000)
        p = m.partition("t", 0)
        assert p.log_end_offset == 40
        d = p.append_untrusted(bytearray(written[-1]), NOW)
        assert d.duplicate and d.base_offset == 38
    assert p.append_untrusted(batch(1, pid=42, epoch=0, seq=40), NOW).base_offset == 40


def test_snapshot_beyond_the_recovered_log_is_discarded(tmp_path: Path) -> None:
    m = make(tmp_path, segment_bytes=1200)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    written = _fill(p, 12)
    active_base = p.segments[-1].base_offset
    assert active_base > 0
    path = _active_log(p)
    # A snapshot at the LEO, as a clean close of earlier versions left (now the producer state
    # goes into the points file), beside the ones of the last rolls.
    p.producers.write_snapshot(snapshot_path(p.dir, p.log_end_offset), p.log_end_offset)
    m.close()
    (tmp_path / "data" / CLEAN_SHUTDOWN_FILE).unlink()
    # (and no recovery point: damage below one is not looked for, as in Kafka)
    (tmp_path / "data" / RECOVERY_POINT_FILE).unlink()
    # Corrupt the first batch of the active segment: the log ends at active_base, before the
    # newest snapshot (at 24).
    with open(path, "r+b") as f:
        f.seek(65)
        f.write(b"\xff\xff")
    m2 = make(tmp_path, segment_bytes=1200)
    p2 = m2.partition("t", 0)
    assert p2.log_end_offset == active_base
    snapshots = sorted(int(x.stem) for x in p2.dir.glob("*.snapshot"))
    assert snapshots[-1] == active_base and len(snapshots) <= 2, snapshots
    entry = p2.producers.get(42)
    assert entry is not None and entry.last_seq == active_base - 1
    k = active_base // 2 - 1
    d = p2.append_untrusted(bytearray(written[k]), NOW)
    assert d.duplicate and d.base_offset == active_base - 2


def test_bad_index_of_an_old_segment_is_rebuilt(tmp_path: Path) -> None:
    m = make(tmp_path, segment_bytes=1000, index_interval_bytes=100)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    written = _fill(p, 15)
    old = p.segments[0]
    m2_dir = p.dir
    crash(m)
    old.index_path.write_bytes(b"\x00" * 48)  # two zero entries: not a valid index
    m2 = make(tmp_path, segment_bytes=1000, index_interval_bytes=100)
    p2 = m2.partition("t", 0)
    assert p2.log_end_offset == 30
    assert b"".join(p2.read(o, 1, 30) for o in range(0, 30, 2)) == b"".join(written)
    assert (m2_dir / old.index_path.name).stat().st_size > 48


def test_partial_index_file_after_crash_is_ignored(tmp_path: Path, mgr: LogManager) -> None:
    """The active segment's index is saved at close only; a stale one must not be trusted."""
    p = mgr.partition("t", 0)
    _fill(p, 3)
    m2 = reopen(tmp_path, mgr, clean=True)
    p2 = m2.partition("t", 0)
    written = _fill(p2, 50, start_seq=6)
    m3 = reopen(tmp_path, m2, clean=False)
    p3 = m3.partition("t", 0)
    assert p3.log_end_offset == 106
    assert p3.read(6, 1 << 20, 106) == b"".join(written)
    assert [o for o, _ in read_all(p3, max_bytes=1)] == list(range(106))


# -- rolls and retention --------------------------------------------------------------------


def test_roll_by_time(tmp_path: Path) -> None:
    m = make(tmp_path, segment_ms=1000)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    p.append_untrusted(batch(), NOW)
    p.append_untrusted(batch(), NOW + 999)
    assert len(p.segments) == 1
    p.append_untrusted(batch(), NOW + 1000)
    assert [s.base_offset for s in p.segments] == [0, 2]
    assert p.dirty
    p.flush()
    assert not p.dirty


def test_retention_by_size(tmp_path: Path) -> None:
    m = make(tmp_path, segment_bytes=1000)
    m.create_topic("t", 1, {"retention.bytes": "2500"})
    p = m.partition("t", 0)
    written = _fill(p, 30)
    n_before = len(p.segments)
    deleted = m.enforce_retention(NOW)
    assert deleted > 0 and len(p.segments) == n_before - deleted
    assert p.size_bytes - p.segments[0].size < 2500 <= p.size_bytes
    start = p.log_start_offset
    assert start == p.segments[0].base_offset > 0
    assert not (p.dir / f"{0:020d}.log").exists()
    with pytest.raises(KafkaError) as e:
        p.read(start - 1, 100, p.high_watermark)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert p.read(start, 1 << 20, 60) == b"".join(written[start // 2 :])[: p.segments[0].size]
    assert m.enforce_retention(NOW) == 0
    # The log start offset survives a restart (it is the first segment's base).
    m2 = reopen(tmp_path, m, clean=False, segment_bytes=1000)
    assert m2.partition("t", 0).log_start_offset == start


def test_retention_by_time_rolls_an_expired_active_segment(tmp_path: Path) -> None:
    m = make(tmp_path, segment_bytes=1000)
    m.create_topic("t", 1, {"retention.ms": "60000"})
    p = m.partition("t", 0)
    _fill(p, 12)  # record timestamps around NOW
    assert m.enforce_retention(NOW + 60_000) == 0  # not older than retention yet
    n_segments = len(p.segments)
    assert n_segments > 1
    # Every segment goes, the active one after a roll to an empty one.
    assert m.enforce_retention(NOW + 120_000) == n_segments
    assert p.log_start_offset == p.log_end_offset == 24
    assert [s.base_offset for s in p.segments] == [24]
    assert p.read(24, 100, 24) == b""
    assert p.append_untrusted(batch(), NOW + 120_000).base_offset == 24


def test_retention_keeps_data_above_the_high_watermark(tmp_path: Path) -> None:
    m = make(tmp_path, segment_bytes=1000)
    m.create_topic("t", 1, {"retention.ms": "0"})
    p = m.partition("t", 0)
    for i in range(12):
        p.append_untrusted(batch(2, value_size=60, tag=i), NOW)
    assert p.high_watermark == 0
    assert m.enforce_retention(NOW + 10) == 0
    p.flush()
    assert m.enforce_retention(NOW + 10) > 0


# -- topics ---------------------------------------------------------------------------------


def test_topics_persist_across_reopen_with_overrides(tmp_path: Path) -> None:
    m = make(tmp_path)
    m.create_topic("a.b_c-d", 3, {"segment.bytes": "4096", "retention.ms": "-1"})
    m.create_topic("__internal", 1)
    assert m.topics() == {"a.b_c-d": 3, "__internal": 1}
    m.partition("a.b_c-d", 2).append_untrusted(batch(), NOW)
    m2 = reopen(tmp_path, m, clean=False)
    assert m2.topics() == {"a.b_c-d": 3, "__internal": 1}
    cfg = m2.topic_config("a.b_c-d")
    assert (cfg.segment_bytes, cfg.retention_ms) == (4096, -1)
    assert m2.topic_config("__internal") == m2.default_config
    assert m2.partition("a.b_c-d", 2).log_end_offset == 1
    assert len(m2.recovered) == 4


def test_delete_topic_removes_files_and_name_can_be_reused(tmp_path: Path) -> None:
    m = make(tmp_path)
    m.create_topic("t", 2)
    m.partition("t", 1).append_untrusted(batch(), NOW)
    m.delete_topic("t")
    assert m.topics() == {}
    assert not (tmp_path / "data" / "t-0").exists() and not (tmp_path / "data" / "t-1").exists()
    with pytest.raises(KafkaError) as e:
        m.delete_topic("t")
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(KafkaError) as e:
        m.partition("t", 0)
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    m.create_topic("t", 1)
    assert m.partition("t", 0).log_end_offset == 0
    m2 = reopen(tmp_path, m, clean=True)
    assert m2.topics() == {"t": 1}


@pytest.mark.parametrize(
    ("name", "partitions", "overrides", "code"),
    [
        ("", 1, None, ErrorCode.INVALID_TOPIC_EXCEPTION),
        (".", 1, None, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("..", 1, None, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("a/b", 1, None, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("x" * 250, 1, None, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("sp ace", 1, None, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("ok", 0, None, ErrorCode.INVALID_PARTITIONS),
        ("ok", -3, None, ErrorCode.INVALID_PARTITIONS),
        ("ok", 1, {"cleanup.policy.bogus": "x"}, ErrorCode.INVALID_CONFIG),
        ("ok", 1, {"segment.bytes": "big"}, ErrorCode.INVALID_CONFIG),
        ("ok", 1, {"segment.bytes": "10"}, ErrorCode.INVALID_CONFIG),
        ("ok", 1, {"retention.ms": "-2"}, ErrorCode.INVALID_CONFIG),
        ("ok", 1, {"max.message.bytes": "99999999999"}, ErrorCode.INVALID_CONFIG),
    ],
)
def test_create_topic_errors(tmp_path: Path, name: str, partitions: int,
                             overrides: dict[str, str] | None, code: ErrorCode) -> None:
    m = make(tmp_path)
    with pytest.raises(KafkaError) as e:
        m.create_topic(name, partitions, overrides)
    assert e.value.code == code
    assert m.topics() == {}
    # (no .boot_id: the composition root records it once recovery is done, LogManager.record_boot)
    assert sorted(x.name for x in (tmp_path / "data").iterdir()) == [TOPICS_FILE]


def test_create_existing_topic(mgr: LogManager) -> None:
    with pytest.raises(KafkaError) as e:
        mgr.create_topic("t", 4)
    assert e.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert mgr.topics() == {"t": 1}


def test_orphan_partition_directories_are_removed_at_start(tmp_path: Path) -> None:
    m = make(tmp_path)
    m.create_topic("keep", 1)
    m.close()
    # A create that crashed before topics.json was written.
    orphan = tmp_path / "data" / "half-0"
    orphan.mkdir()
    (orphan / f"{0:020d}.log").write_bytes(b"")
    other = tmp_path / "data" / "not-a-partition"
    other.mkdir()
    m2 = make(tmp_path)
    assert not orphan.exists() and other.exists()
    assert m2.topics() == {"keep": 1}
    assert json.loads((tmp_path / "data" / TOPICS_FILE).read_text())["topics"].keys() == {"keep"}


def test_missing_topics_file_with_partitions_refuses_to_start(tmp_path: Path) -> None:
    m = make(tmp_path)
    m.create_topic("t", 1)
    m.close()
    (tmp_path / "data" / TOPICS_FILE).unlink()
    with pytest.raises(RuntimeError):
        make(tmp_path)


def test_data_dir_parent_must_exist(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        LogManager(tmp_path / "missing" / "data", LogConfig(), NOW)


def test_expire_producers(mgr: LogManager) -> None:
    p = mgr.partition("t", 0)
    p.append_untrusted(batch(pid=1, epoch=0, seq=0), NOW)
    p.append_untrusted(batch(pid=2, epoch=0, seq=0), NOW + 500)
    mgr.expire_producers(NOW + 1000, 1000)
    assert p.producers.get(1) is None and p.producers.get(2) is not None


def test_flush_never_mode_rolls_close_and_recover(tmp_path: Path) -> None:
    m = make(tmp_path, flush="never", segment_bytes=900)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    written = []
    for i in range(15):
        b = batch(2, value_size=60, pid=3, epoch=0, seq=2 * i, tag=i)
        p.append_untrusted(b, NOW)
        written.append(bytes(b))
    assert len(p.segments) > 2 and p.dirty
    assert p.flush() == 30 and not p.dirty  # syncs the rolled segments too
    for clean in (True, False):
        if not clean:  # (no recovery point either: the scan is what this checks)
            (tmp_path / "data" / RECOVERY_POINT_FILE).unlink()
        m = reopen(tmp_path, m, clean=clean, flush="never", segment_bytes=900)
        assert m.recovered[0].clean is clean
        p = m.partition("t", 0)
        assert p.read(0, 1 << 20, 30) + b"".join(
            p.read(s.base_offset, 1 << 20, 30) for s in p.segments[1:]
        ) == b"".join(written)
        assert p.append_untrusted(bytearray(written[-1]), NOW).duplicate


def test_log_config_validation() -> None:
    with pytest.raises(ValueError):
        LogConfig(flush="sometimes")
    with pytest.raises(ValueError):
        LogConfig(segment_bytes=0)


def test_partition_count_of_one_topic(mgr: LogManager) -> None:
    mgr.create_topic("three", 3)
    assert mgr.partition_count("three") == 3
    assert mgr.partition_count("t") == 1
    assert mgr.partition_count("missing") is None


# -- segment rolls leave their fsyncs to the next flush -------------------------------------


def _count_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def counted(fd: int, real=real, name=name) -> None:
            calls.append(name)
            real(fd)

        monkeypatch.setattr(os, name, counted)
    return calls


@pytest.mark.parametrize("flush", ["always", "never"])
def test_a_roll_does_no_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              flush: str) -> None:
    """A roll runs on the event loop, inside an append: it writes the rolled segment's index and
    takes the producer-state snapshot in memory, and leaves every fsync to the next flush."""
    m = make(tmp_path, segment_bytes=1000, flush=flush)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    _fill(p, 2)
    syncs = _count_syncs(monkeypatch)
    for i in range(2, 14):
        p.append_untrusted(batch(2, value_size=60, pid=42, epoch=0, seq=2 * i, tag=i), NOW)
    assert len(p.segments) >= 3 and syncs == []
    assert p.roll_if_idle(NOW + 10**9) and syncs == []
    # Nothing of the rolls is durable yet: no snapshot at their offsets.
    assert list(p.dir.glob("*.snapshot")) == []
    m.close()


def test_the_high_watermark_waits_for_the_round_that_syncs_a_rolled_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flush="always": after a roll the high watermark stays below the rolled segment's data
    until a flush ticket synced it, its index, the snapshot at the roll offset and the new
    directory entry; a ticket that fails leaves all of that for the next one."""
    m = make(tmp_path, segment_bytes=1000)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    written = _fill(p, 2)  # offsets 0-3, synced
    assert p.high_watermark == 4
    for i in range(2, 8):
        b = batch(2, value_size=60, pid=42, epoch=0, seq=2 * i, tag=i)
        p.append_untrusted(b, NOW)
        written.append(bytes(b))
    roll = p.segments[-1].base_offset
    assert roll > 0 and p.high_watermark == 4 and p.needs_directory_sync
    rolled = [s for s in p.segments if s.base_offset < roll]
    ticket = p.begin_flush()
    assert ticket is not None and ticket.directory == p.dir
    assert [s.base_offset for s in ticket.rolled] == [s.base_offset for s in rolled
                                                     if s.next_offset > 4]
    assert [o for o, _ in ticket.snapshots] == [roll]
    assert not (p.dir / f"{roll:020d}.snapshot").exists()
    assert p.high_watermark == 4  # appends go on while the ticket syncs in a worker thread

    def eio(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fdatasync", eio)
        ticket.sync()
    assert not p.complete_flush(ticket)
    assert p.high_watermark == 4 and p.needs_directory_sync and p.dirty
    assert not (p.dir / f"{roll:020d}.snapshot").exists()
    assert p.flush() == p.log_end_offset == 16  # the next flush takes everything again
    assert (p.dir / f"{roll:020d}.snapshot").exists() and not p.needs_directory_sync
    assert all(s.index_path.stat().st_size > 0 for s in rolled)
    assert read_all(p) == [r for b in written for r in records(b)]
    m.close()


def test_flush_never_rounds_take_only_what_rolls_left(tmp_path: Path) -> None:
    """flush="never": a round (``begin_flush()``) syncs what a roll left, as Kafka flushes a
    rolled segment in the background, not the active segment's writes; ``flush()`` takes all."""
    m = make(tmp_path, flush="never", segment_bytes=1000)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    seq = 0

    def append() -> None:
        nonlocal seq
        p.append_untrusted(batch(2, value_size=60, pid=42, epoch=0, seq=seq, tag=seq), NOW)
        seq += 2

    append()
    assert p.begin_flush() is None and p.dirty  # only the active segment is unsynced
    while len(p.segments) == 1:
        append()
    append()
    roll = p.segments[-1].base_offset
    assert p.high_watermark == p.log_end_offset == seq > roll
    ticket = p.begin_flush()
    assert ticket is not None and not ticket.active and len(ticket.rolled) == 1
    assert [o for o, _ in ticket.snapshots] == [roll]
    ticket.sync()
    assert p.complete_flush(ticket) and p.dirty and not p.needs_directory_sync
    assert (p.dir / f"{roll:020d}.snapshot").exists()
    assert p.begin_flush() is None
    assert p.flush() == seq and not p.dirty
    m.close()


def _valid_snapshot_bytes(p: Partition, offset: int) -> bytes:
    return p.producers.snapshot_bytes(offset)


@pytest.mark.parametrize("damage", ["zero-length", "torn"])
@pytest.mark.parametrize("snapshot", ["damaged", "in place"])
def test_power_cut_between_a_roll_and_its_round(tmp_path: Path, damage: str,
                                                snapshot: str) -> None:
    """A power cut after a roll, before the round that syncs what it left: the rolled segment's
    index and the snapshot at the roll offset may come back empty or torn (the data survived:
    the kernel wrote it back). Recovery ignores such a snapshot (deleted) and replays from the
    previous one, and rebuilds such an index by a scan, also when a snapshot after it is in
    place (which the round's order rules out: it renames a snapshot only after the index is
    synced) and the segment would be opened from its index: the reads and the producer state
    are whole."""
    m = make(tmp_path, segment_bytes=1000, index_interval_bytes=100)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    written = _fill(p, 10)  # rolls, all synced: snapshots in place
    before = sorted(int(x.stem) for x in p.dir.glob("*.snapshot"))
    assert before
    for i in range(10, 16):
        b = batch(2, value_size=60, pid=42, epoch=0, seq=2 * i, tag=i)
        p.append_untrusted(b, NOW)
        written.append(bytes(b))
    roll = p.segments[-1].base_offset
    assert roll > before[-1]
    rolled = p.segments[-2]
    full_snapshot = _valid_snapshot_bytes(p, roll)  # what the round would have written
    index_bytes = rolled.index_path.read_bytes()
    assert len(index_bytes) >= 48
    d = p.dir
    crash(m)  # the round never ran
    snap = d / f"{roll:020d}.snapshot"
    if damage == "zero-length":
        rolled.index_path.write_bytes(b"")
        snap.write_bytes(b"")
    else:
        rolled.index_path.write_bytes(index_bytes[: len(index_bytes) - 30])  # a partial entry
        snap.write_bytes(full_snapshot[: len(full_snapshot) // 2])
    if snapshot == "in place":
        snap.write_bytes(full_snapshot)
    m2 = make(tmp_path, segment_bytes=1000, index_interval_bytes=100)
    p2 = m2.partition("t", 0)
    assert p2.log_end_offset == p2.high_watermark == 32
    assert read_all(p2) == [r for b in written for r in records(b)]
    assert [o for o, _ in read_all(p2, max_bytes=1)] == list(range(32))
    entry = p2.producers.get(42)
    assert entry is not None and entry.last_seq == 31
    d2 = p2.append_untrusted(bytearray(written[-1]), NOW)
    assert d2.duplicate and d2.base_offset == 30
    assert p2.append_untrusted(batch(1, pid=42, epoch=0, seq=32), NOW).base_offset == 32
    assert snap.exists() == (snapshot == "in place")
    assert rolled.index_path.stat().st_size == len(index_bytes)  # rebuilt
    m2.close()


def test_power_cut_that_lost_a_rolled_segments_tail(tmp_path: Path) -> None:
    """The same cut, but the rolled segment's unsynced tail is lost too (and its index kept
    entries beyond it): recovery replays from the last snapshot in place, which lies before the
    rolled segment, truncates there and the producer state matches the shorter log."""
    m = make(tmp_path, segment_bytes=1000, index_interval_bytes=100)
    m.create_topic("t", 1)
    p = m.partition("t", 0)
    written = _fill(p, 10)
    synced = p.log_end_offset
    for i in range(10, 16):
        b = batch(2, value_size=60, pid=42, epoch=0, seq=2 * i, tag=i)
        p.append_untrusted(b, NOW)
    rolled = p.segments[-2]
    assert rolled.base_offset < synced < rolled.next_offset
    cut = rolled.size - 40
    d = p.dir
    crash(m)
    os.truncate(rolled.log_path, cut)  # the last batch of the rolled segment torn
    m2 = make(tmp_path, segment_bytes=1000, index_interval_bytes=100)
    p2 = m2.partition("t", 0)
    (rep,) = m2.recovered
    assert rep.truncated_bytes > 0
    end = p2.log_end_offset
    assert synced <= end < rolled.next_offset and p2.segments[-1].base_offset == rolled.base_offset
    assert read_all(p2)[:synced] == [r for b in written for r in records(b)]
    assert [o for o, _ in read_all(p2)] == list(range(end))
    entry = p2.producers.get(42)
    assert entry is not None and entry.last_seq == end - 1
    assert sorted(int(x.stem) for x in d.glob("*.snapshot"))[-1] <= end
    assert p2.append_untrusted(batch(1, pid=42, epoch=0, seq=end), NOW).base_offset == end
    m2.close()
