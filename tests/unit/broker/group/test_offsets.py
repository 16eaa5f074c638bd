"""Offset records, the committed-offset table (visibility by high watermark), pending
transactional offsets, and replay of ``__consumer_offsets`` batches."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.group.coordinator import GroupConfig, GroupCoordinator
from broker.group.offsets import (
    OffsetAndMetadata,
    OffsetStore,
    build_offset_batch,
    decode_offset_key_untrusted,
    decode_offset_value_untrusted,
    encode_offset_key,
    encode_offset_value,
)
from protocol.errors import CorruptFrameError
from protocol.records import (
    decode_batches_untrusted,
    encode_batch,
    encode_control_batch,
    patch_base_offset,
)

V = OffsetAndMetadata


# -- record codec --------------------------------------------------------------------------------


def test_key_golden_bytes() -> None:
    assert encode_offset_key("g", "tp", 3) == (
        b"\x00\x01"  # version 1
        b"\x00\x01g"  # group
        b"\x00\x02tp"  # topic
        b"\x00\x00\x00\x03"  # partition
    )


def test_value_golden_bytes() -> None:
    assert encode_offset_value(V(42, "m", 1700)) == (
        b"\x00\x00"  # version 0
        b"\x00\x00\x00\x00\x00\x00\x00\x2a"  # offset
        b"\x00\x01m"  # metadata
        b"\x00\x00\x00\x00\x00\x00\x06\xa4"  # commit timestamp
    )


@given(st.text(max_size=50), st.text(max_size=50), st.integers(0, 2**31 - 1),
       st.integers(-1, 2**63 - 1), st.text(max_size=100), st.integers(0, 2**62))
def test_codec_round_trip(group, topic, partition, offset, metadata, ts) -> None:
    assert decode_offset_key_untrusted(encode_offset_key(group, topic, partition)) == (
        group, topic, partition,
    )
    value = V(offset, metadata, ts)
    assert decode_offset_value_untrusted(encode_offset_value(value)) == value


def test_tombstone_and_other_record_kinds() -> None:
    assert decode_offset_value_untrusted(None) is None
    # version 2 is Kafka's group-metadata key: not an offset, skipped
    assert decode_offset_key_untrusted(b"\x00\x02\x00\x01g") is None
    # version 0 keys have the same layout
    assert decode_offset_key_untrusted(b"\x00\x00\x00\x01g\x00\x01t\x00\x00\x00\x01") == ("g", "t", 1)


@pytest.mark.parametrize(
    "key",
    [None, b"", b"\x00", b"\x00\x01\x00\x05ab", b"\x00\x01\x00\x01g\x00\x01t\x00", b"\x00\x01\xff\xffg",
     b"\x00\x01\x00\x02\xff\xfe\x00\x01t\x00\x00\x00\x00"],
)
def test_bad_keys(key) -> None:
    with pytest.raises(CorruptFrameError):
        decode_offset_key_untrusted(key)


@pytest.mark.parametrize(
    "value",
    [b"", b"\x00\x00\x00", b"\x00\x09" + bytes(20), b"\x00\x00" + bytes(8) + b"\x00\x05ab",
     encode_offset_value(V(1, "", 2))[:-1]],
)
def test_bad_values(value) -> None:
    with pytest.raises(CorruptFrameError):
        decode_offset_value_untrusted(value)


def test_batch_holds_one_record_per_partition_in_order() -> None:
    batch = build_offset_batch("g", [("t", 0, V(5, "", 9)), ("t", 1, V(7, "x", 9))], 9)
    ((header, records),) = list(decode_batches_untrusted(bytes(batch)))
    assert header.producer_id == -1 and not header.is_transactional
    assert [decode_offset_key_untrusted(r.key) for r in records] == [("g", "t", 0), ("g", "t", 1)]
    assert [decode_offset_value_untrusted(r.value) for r in records] == [V(5, "", 9), V(7, "x", 9)]
    txn = build_offset_batch("g", [("t", 0, V(5, "", 9))], 9, producer_id=7, producer_epoch=2,
                             base_sequence=4, transactional=True)
    ((header, _),) = list(decode_batches_untrusted(bytes(txn)))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 4)
    assert header.is_transactional and not header.is_control


# -- the committed table -------------------------------------------------------------------------

TP = ("orders", 0)


def test_a_commit_is_visible_once_its_record_is_below_the_high_watermark() -> None:
    s = OffsetStore()
    s.put("g", TP, 5, V(100, "", 1))
    assert s.get("g", TP, 5) is None
    assert s.committed("g", 5) == {}
    assert s.get("g", TP, 6) == V(100, "", 1)
    assert s.committed("g", 6) == {TP: V(100, "", 1)}


def test_a_newer_commit_not_yet_durable_leaves_the_older_one_visible() -> None:
    s = OffsetStore()
    s.put("g", TP, 5, V(100, "", 1))
    s.put("g", TP, 9, V(200, "", 2))
    assert s.get("g", TP, 6) == V(100, "", 1)
    assert s.get("g", TP, 10) == V(200, "", 2)
    assert s.get("g", TP, 10) == V(200, "", 2)  # pruning kept the visible one


def test_history_stays_short_when_nobody_reads() -> None:
    s = OffsetStore()
    for i in range(1000):
        # each commit is written at log offset i while everything before it is durable
        s.put("g", TP, i, V(i, "", 0), high_watermark=i)
    assert len(s._committed["g"][TP]) == 2  # the newest durable value and the unflushed one
    assert s.get("g", TP, 999) == V(998, "", 0)
    assert s.get("g", TP, 1000) == V(999, "", 0)


def test_tombstone_deletes_and_forgets_the_group() -> None:
    s = OffsetStore()
    s.put("g", TP, 1, V(100, "", 1))
    s.put("g", TP, 2, None)
    assert s.get("g", TP, 2) == V(100, "", 1)
    assert s.has_group("g")
    assert s.get("g", TP, 3) is None
    assert not s.has_group("g") and s.group_ids() == set()


def test_groups_are_separate() -> None:
    s = OffsetStore()
    s.put("a", TP, 0, V(1, "", 0))
    s.put("b", TP, 1, V(2, "", 0))
    s.put("a", ("other", 3), 2, V(3, "", 0))
    assert s.committed("a", 10) == {TP: V(1, "", 0), ("other", 3): V(3, "", 0)}
    assert s.committed("b", 10) == {TP: V(2, "", 0)}
    assert s.group_ids() == {"a", "b"}


# -- pending transactional offsets ---------------------------------------------------------------


def test_pending_offsets_are_invisible_until_commit() -> None:
    s = OffsetStore()
    s.put("g", TP, 0, V(10, "", 0))
    s.add_pending(7, 1000, "g", TP, 1, V(20, "", 0))
    assert s.get("g", TP, 100) == V(10, "", 0)
    assert s.pending("g") == {1000: {TP: V(20, "", 0)}}
    assert s.complete_txn(7, 1000, commit=True) == ["g"]
    assert s.get("g", TP, 100) == V(20, "", 0)
    assert s.pending("g") == {}


def test_aborted_pending_offsets_vanish() -> None:
    s = OffsetStore()
    s.put("g", TP, 0, V(10, "", 0))
    s.add_pending(7, 1000, "g", TP, 1, V(20, "", 0))
    s.add_pending(7, 1000, "g", ("orders", 1), 2, V(5, "", 0))
    assert s.complete_txn(7, 1000, commit=False) == ["g"]
    assert s.committed("g", 100) == {TP: V(10, "", 0)}
    assert s.pending("g") == {}


def test_a_group_with_only_pending_offsets_exists() -> None:
    s = OffsetStore()
    s.add_pending(7, 1000, "g", TP, 1, V(20, "", 0))
    assert s.has_group("g") and s.group_ids() == {"g"}
    s.complete_txn(7, 1000, commit=False)
    assert not s.has_group("g")


def test_marker_only_affects_its_producer_and_partition() -> None:
    s = OffsetStore()
    s.add_pending(7, 1000, "g", TP, 1, V(20, "", 0))
    s.add_pending(7, 2000, "g", ("orders", 1), 2, V(30, "", 0))
    s.add_pending(8, 1000, "h", TP, 0, V(40, "", 0))
    assert s.complete_txn(7, 3000, commit=True) == []
    s.complete_txn(7, 1000, commit=True)
    assert s.committed("g", 100) == {TP: V(20, "", 0)}
    assert s.pending("g") == {2000: {("orders", 1): V(30, "", 0)}}
    assert s.pending("h") == {1000: {TP: V(40, "", 0)}}
    assert s.pending_producers(7) == [2000]


def test_later_writes_in_one_transaction_win() -> None:
    s = OffsetStore()
    s.add_pending(7, 1000, "g", TP, 1, V(20, "", 0))
    s.add_pending(7, 1000, "g", TP, 2, V(25, "", 0))
    s.complete_txn(7, 1000, commit=True)
    assert s.get("g", TP, 100) == V(25, "", 0)


def test_materialised_txn_offset_does_not_override_a_later_plain_commit() -> None:
    # Kafka orders by position in the log: a plain commit appended after the transactional
    # record wins even though the transaction commits later.
    s = OffsetStore()
    s.add_pending(7, 1000, "g", TP, 5, V(50, "", 0))
    s.put("g", TP, 10, V(100, "", 0))
    assert s.get("g", TP, 11) == V(100, "", 0)
    s.complete_txn(7, 1000, commit=True)
    assert s.get("g", TP, 12) == V(100, "", 0)


def test_coordinator_on_txn_marker() -> None:
    c = GroupCoordinator(GroupConfig())
    c.offsets.add_pending(3, 1000, "g", TP, 0, V(20, "", 0))
    c.on_txn_marker(3, 1000, commit=True)
    assert c.offsets.get("g", TP, 1) == V(20, "", 0)
    assert "g" in c.groups  # the group now exists (Empty, offsets only)
    c.on_txn_marker(3, 1000, commit=True)  # a repeated marker is harmless
    assert c.offsets.get("g", TP, 1) == V(20, "", 0)


# -- replay --------------------------------------------------------------------------------------


class Log:
    """An in-memory offsets partition: batches get consecutive offsets as a real log would."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.next_offset = 0

    def append(self, batch: bytes) -> int:
        buf = bytearray(batch)
        base = self.next_offset
        patch_base_offset(buf, 0, base)
        (last_delta,) = struct.unpack_from(">i", buf, 23)
        self.next_offset += last_delta + 1
        self.data += buf
        return base

    def replay_into(self, store: OffsetStore, partition: int) -> None:
        for header, records in decode_batches_untrusted(bytes(self.data)):
            store.replay_batch(partition, header, records)


def marker(pid: int, commit: bool, epoch: int = 0) -> bytes:
    return encode_control_batch(producer_id=pid, producer_epoch=epoch, commit=commit,
                                coordinator_epoch=0, timestamp_ms=1)


def txn_batch(group, offsets, pid, epoch=0, seq=0) -> bytes:
    return bytes(build_offset_batch(group, offsets, 1, producer_id=pid, producer_epoch=epoch,
                                    base_sequence=seq, transactional=True))


def test_replay_rebuilds_commits_and_resolves_transactions() -> None:
    log = Log()
    log.append(build_offset_batch("g", [("t", 0, V(5, "a", 1)), ("t", 1, V(6, "", 1))], 1))
    log.append(build_offset_batch("g", [("t", 0, V(9, "b", 2))], 2))
    log.append(txn_batch("g", [("t", 1, V(60, "", 3))], pid=1000))
    log.append(txn_batch("g", [("t", 2, V(70, "", 3))], pid=2000))
    log.append(marker(1000, commit=True))
    log.append(marker(2000, commit=False))
    log.append(txn_batch("h", [("t", 0, V(80, "", 4))], pid=3000))  # no marker yet
    log.append(build_offset_batch("g", [("t", 3, V(1, "", 1))], 1))
    log.append(encode_batch([(encode_offset_key("g", "t", 3), None, (), 1)]))  # tombstone
    # a record of another kind (e.g. Kafka group metadata) is skipped
    log.append(encode_batch([(b"\x00\x02\x00\x01g", b"whatever", (), 1)]))

    store = OffsetStore()
    log.replay_into(store, 4)
    end = log.next_offset
    assert store.committed("g", end) == {
        ("t", 0): V(9, "b", 2),
        ("t", 1): V(60, "", 3),
    }
    assert store.committed("h", end) == {}
    assert store.pending("h") == {3000: {("t", 0): V(80, "", 4)}}
    assert store.pending_producers(4) == [3000]
    # The transaction coordinator finishes it after the restart:
    store.complete_txn(4, 3000, commit=True)
    assert store.committed("h", end) == {("t", 0): V(80, "", 4)}


def test_replay_of_an_aborted_transaction_after_a_restart() -> None:
    log = Log()
    log.append(build_offset_batch("g", [("t", 0, V(5, "", 1))], 1))
    log.append(txn_batch("g", [("t", 0, V(50, "", 1))], pid=1000))
    store = OffsetStore()
    log.replay_into(store, 0)
    assert store.get("g", ("t", 0), log.next_offset) == V(5, "", 1)
    log.append(marker(1000, commit=False))
    again = OffsetStore()
    log.replay_into(again, 0)
    assert again.pending("g") == {}
    assert again.get("g", ("t", 0), log.next_offset) == V(5, "", 1)


def test_replay_rejects_undecodable_records() -> None:
    store = OffsetStore()
    batch = encode_batch([(encode_offset_key("g", "t", 0), b"\x00\x00\x01", (), 1)])
    ((header, records),) = list(decode_batches_untrusted(batch))
    with pytest.raises(CorruptFrameError):
        store.replay_batch(0, header, records)
    assert store.group_ids() == set()
