"""Consumer pieces without I/O: read_committed filtering, the consumer protocol, the assignors."""

from __future__ import annotations

import pytest

from client.fetch_decoder import decode_fetched
from client.group_protocol import (
    decode_assignment_untrusted,
    decode_subscription_untrusted,
    encode_assignment,
    encode_subscription,
    range_assign,
    roundrobin_assign,
)
from client.structs import TopicPartition
from protocol.errors import CorruptFrameError
from protocol.records import encode_batch, encode_control_batch, patch_base_offset

T = "t"


class Log:
    """Builds a partition's bytes batch by batch, assigning offsets as a broker would."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.next_offset = 0

    def data(self, values, pid=-1, transactional=False, seq=-1):
        records = [(None, v, (), 1000 + i) for i, v in enumerate(values)]
        batch = bytearray(
            encode_batch(
                records,
                producer_id=pid,
                producer_epoch=0 if pid >= 0 else -1,
                base_sequence=seq,
                transactional=transactional,
            )
        )
        return self._add(batch, len(values))

    def marker(self, pid, commit):
        batch = bytearray(
            encode_control_batch(
                producer_id=pid,
                producer_epoch=0,
                commit=commit,
                coordinator_epoch=0,
                timestamp_ms=5,
            )
        )
        return self._add(batch, 1)

    def _add(self, batch: bytearray, count: int) -> int:
        first = self.next_offset
        patch_base_offset(batch, 0, first)
        self.chunks.append(bytes(batch))
        self.next_offset += count
        return first

    def bytes(self) -> bytes:
        return b"".join(self.chunks)


def values(records):
    return [r.value for r in records]


def test_plain_batches_and_next_offset():
    log = Log()
    log.data([b"a", b"b"])
    log.data([b"c"])
    records, next_offset = decode_fetched(log.bytes(), T, 0, 0, None, read_committed=True)
    assert values(records) == [b"a", b"b", b"c"]
    assert [r.offset for r in records] == [0, 1, 2]
    assert (records[0].topic, records[0].partition, records[0].timestamp) == (T, 0, 1000)
    assert next_offset == 3


def test_records_before_fetch_offset_are_skipped():
    log = Log()
    log.data([b"a", b"b", b"c"])
    records, next_offset = decode_fetched(log.bytes(), T, 0, 2, None, read_committed=False)
    assert values(records) == [b"c"] and next_offset == 3


def test_committed_transaction_visible_markers_hidden():
    log = Log()
    log.data([b"x1", b"x2"], pid=5, transactional=True, seq=0)
    log.marker(5, commit=True)
    records, next_offset = decode_fetched(log.bytes(), T, 0, 0, [], read_committed=True)
    assert values(records) == [b"x1", b"x2"]
    assert next_offset == 3  # past the marker


def test_aborted_transaction_dropped_under_read_committed_only():
    log = Log()
    first = log.data([b"bad1"], pid=5, transactional=True, seq=0)
    log.data([b"plain"])
    log.data([b"bad2"], pid=5, transactional=True, seq=1)
    log.marker(5, commit=False)
    log.data([b"good"], pid=5, transactional=True, seq=2)  # a new transaction of the same producer
    log.marker(5, commit=True)
    aborted = [(5, first)]
    records, next_offset = decode_fetched(log.bytes(), T, 0, 0, aborted, read_committed=True)
    assert values(records) == [b"plain", b"good"]
    assert next_offset == log.next_offset
    records, _ = decode_fetched(log.bytes(), T, 0, 0, None, read_committed=False)
    assert values(records) == [b"bad1", b"plain", b"bad2", b"good"]


def test_interleaved_producers_only_the_aborted_one_is_dropped():
    log = Log()
    a_first = log.data([b"a1"], pid=1, transactional=True, seq=0)
    log.data([b"b1"], pid=2, transactional=True, seq=0)
    log.data([b"a2"], pid=1, transactional=True, seq=1)
    log.marker(2, commit=True)
    log.marker(1, commit=False)
    records, _ = decode_fetched(log.bytes(), T, 0, 0, [(1, a_first)], read_committed=True)
    assert values(records) == [b"b1"]


def test_aborted_entry_only_applies_from_its_first_offset():
    log = Log()
    log.data([b"early"], pid=1, transactional=True, seq=0)
    log.marker(1, commit=True)
    late = log.data([b"late"], pid=1, transactional=True, seq=1)
    log.marker(1, commit=False)
    records, _ = decode_fetched(log.bytes(), T, 0, 0, [(1, late)], read_committed=True)
    assert values(records) == [b"early"]


def test_only_markers_still_advance_the_offset():
    log = Log()
    first = log.data([b"x"], pid=3, transactional=True, seq=0)
    log.marker(3, commit=False)
    records, next_offset = decode_fetched(log.bytes(), T, 0, 0, [(3, first)], read_committed=True)
    assert records == [] and next_offset == 2


def test_empty_and_partial_data():
    assert decode_fetched(b"", T, 0, 7, None, True) == ([], 7)
    log = Log()
    log.data([b"a"])
    log.data([b"b"])
    data = log.bytes()
    records, next_offset = decode_fetched(data[:-5], T, 0, 0, None, True)  # cut last batch
    assert values(records) == [b"a"] and next_offset == 1


def test_corrupt_batch_raises_corrupt_frame():
    log = Log()
    log.data([b"abc"])
    data = bytearray(log.bytes())
    data[-1] ^= 0xFF
    with pytest.raises(CorruptFrameError):
        decode_fetched(bytes(data), T, 0, 0, None, True)


def test_subscription_and_assignment_round_trip():
    assert decode_subscription_untrusted(encode_subscription(["b", "a"])) == ["a", "b"]
    tps = [TopicPartition("a", 1), TopicPartition("a", 0), TopicPartition("b", 2)]
    assert decode_assignment_untrusted(encode_assignment(tps)) == sorted(tps)
    assert decode_assignment_untrusted(b"") == []


@pytest.mark.parametrize("cut", [1, 3, 7, 9])
def test_truncated_consumer_protocol_data(cut):
    data = encode_assignment([TopicPartition("topic", 0)])
    with pytest.raises(CorruptFrameError):
        decode_assignment_untrusted(data[:cut])
    with pytest.raises(CorruptFrameError):
        decode_subscription_untrusted(encode_subscription(["topic"])[:cut])


def test_forged_counts_are_refused():
    forged = b"\x00\x00\x7f\xff\xff\xff"
    with pytest.raises(CorruptFrameError):
        decode_subscription_untrusted(forged)
    with pytest.raises(CorruptFrameError):
        decode_assignment_untrusted(forged)


def test_range_assignor_six_partitions_three_members():
    members = {"m-b": ["t"], "m-a": ["t"], "m-c": ["t"]}
    result = range_assign(members, {"t": 6})
    assert result == {
        "m-a": [TopicPartition("t", 0), TopicPartition("t", 1)],
        "m-b": [TopicPartition("t", 2), TopicPartition("t", 3)],
        "m-c": [TopicPartition("t", 4), TopicPartition("t", 5)],
    }


def test_range_assignor_uneven_and_per_topic():
    members = {"a": ["t", "u"], "b": ["t"]}
    result = range_assign(members, {"t": 5, "u": 2})
    assert result["a"] == [TopicPartition("t", p) for p in (0, 1, 2)] + [
        TopicPartition("u", 0),
        TopicPartition("u", 1),
    ]
    assert result["b"] == [TopicPartition("t", 3), TopicPartition("t", 4)]


def test_range_assignor_more_members_than_partitions():
    result = range_assign({"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 2})
    assert result == {"a": [TopicPartition("t", 0)], "b": [TopicPartition("t", 1)], "c": []}


def test_roundrobin_assignor():
    result = roundrobin_assign({"a": ["t"], "b": ["t"]}, {"t": 5})
    assert [tp.partition for tp in result["a"]] == [0, 2, 4]
    assert [tp.partition for tp in result["b"]] == [1, 3]


def test_every_partition_assigned_exactly_once():
    members = {f"m{i}": ["t", "u"] for i in range(4)}
    counts = {"t": 7, "u": 3}
    for assign in (range_assign, roundrobin_assign):
        result = assign(members, counts)
        flat = [tp for tps in result.values() for tp in tps]
        assert sorted(flat) == sorted(
            TopicPartition(t, p) for t, n in counts.items() for p in range(n)
        )


def test_next_fetch_offset_from_headers_matches_decoding():
    from client.fetch_decoder import next_fetch_offset

    log = Log()
    first = log.data([b"a", b"b"], pid=4, transactional=True, seq=0)
    log.marker(4, commit=False)
    log.data([b"c"])
    data = log.bytes()
    _, decoded_next = decode_fetched(data, T, 0, 0, [(4, first)], read_committed=True)
    assert next_fetch_offset(data, 0) == decoded_next == 4
    assert next_fetch_offset(data[:-3], 0) == 3  # a cut last batch is not counted
    assert next_fetch_offset(b"", 9) == 9
    assert next_fetch_offset(b"\x00" * 70, 5) == 5  # garbage: stop, decode_fetched reports it
