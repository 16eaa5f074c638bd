"""The transaction log: coordinator state in the internal topic ``__transaction_state``.

The topic has ``transaction.state.log.num.partitions`` partitions (ours defaults to 1, Kafka's to
50: see ``BrokerConfig``; fixed when the topic is created: an existing topic keeps its count); it is created on first use. A transactional id lives
in partition ``partition_for(transactional_id, N)`` (Java's ``String.hashCode``,
``broker/log/topics.py``), so all records of one id are in one partition, in order. As in Kafka the
topic is compacted (``cleanup.policy=compact``, ``broker/log/cleaner.py``): only the latest record
of each id stays, and the tombstone of an expired id goes after ``delete.retention.ms``, so the log
and the replay at start follow the live ids, not the history. Its segments are
``transaction.state.log.segment.bytes`` (ours defaults to 64 KiB, Kafka's to 100 MiB: the cleaner
never touches the active segment, so the segment size bounds what is left uncleaned).

Every transition is one RecordBatch v2 (magic 2, no compression, producerId -1, one record whose
timestamp is the transition time), appended with ``Partition.append_built_batch``. The caller
decides when it must be durable (``broker/txn/manager.py``: a Prepare record before its markers,
an add or Complete record with the next committed record of its partition). Record layout,
big-endian::

    key (version 0)
      key_version          int16    0
      transactional_id     string   int16 length + UTF-8
    value (version 2 when it has a tagged field, else version 1; version 0 ends after
    txn_last_update_ms); a null value is a tombstone: the id expired (state Dead)
      value_version        int16    1 or 2
      producer_id          int64
      last_producer_id     int64    the producer id before this transition (KIP-360 retries, and
                                    the one a transaction-version-2 EndTxn named)
      producer_epoch       int16
      last_producer_epoch  int16    -1, or the epoch before a client-requested bump (KIP-360, or
                                    the one a transaction-version-2 EndTxn named)
      txn_timeout_ms       int32
      state                int8     TxnState id: 0 Empty, 1 Ongoing, 2 PrepareCommit,
                                    3 PrepareAbort, 4 CompleteCommit, 5 CompleteAbort
                                    (6 Dead and 7 PrepareEpochFence are never stored)
      topic_count          int32    the partitions of the transaction, grouped by topic:
        topic              string
        partition_count    int32
        partition          int32    (partition_count times)
      txn_start_ms         int64    -1 when no transaction is open
      txn_last_update_ms   int64
      next_producer_id     int64    -1, or the id a version-2 Prepare that exhausted the epoch
                                    hands over to at Complete (KIP-890 part 2)
      txn_version          int8     1, or 2: the last EndTxn bumped the epoch (retries of it
                                    are recognised by last_producer_id/last_producer_epoch)
      tagged_fields        (version 2) uvarint count, then each field, tags ascending:
        tag                uvarint
        size               uvarint  bytes of the field (a reader skips a tag it does not know)
        field              size bytes
    tagged field 0, end_offsets (the Prepare record of a client's EndTxn: the log end offset of
    each data partition of the transaction when the record was appended, which a commit's
    group-commit round makes durable; recovery after a machine restart aborts the commit if a
    partition came back shorter, and writes no marker again where the producer's next
    transaction follows it):
      topic_count          int32
        topic              string
        partition_count    int32
          partition        int32
          end_offset       int64

As Kafka's TransactionLogValue since its version 1 (KIP-915), a field added later is a tagged
field with a default, so that a record keeps its version and older readers skip what they do not
know; a record with no tagged field is written as version 1, which the versions before this one
read too.

Replay at start reads every partition from its log start to its end and keeps the last record of
each id (a tombstone removes it). It never takes a partition offline (issue 28): a control batch (a
transaction marker, which an older version let a client write here), a batch whose CRC or records
do not check and a record whose key or value does not decode are skipped, each with one error line
naming the partition, the offset and why (``broker/log/internal_replay.py``), and every other
record is loaded. An id whose latest record was skipped keeps the last state that could be read; if that is a
finished transaction, its epoch is marked exhausted, so the next InitProducerId moves it to a new
producer id (the lost record may have handed out a higher epoch: reusing it would leave a live
producer unfenced; the old producer gets PRODUCER_FENCED). No repair is needed to serve again.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from functools import lru_cache

from broker.log.cleaner import internal_topic_config
from broker.log.internal_replay import SkipLog, read_batches, restore_fixed_config
from broker.log.manager import LogManager
from broker.log.partition import Partition
from broker.log.topics import TRANSACTION_STATE_TOPIC, partition_for
from broker.txn.metadata import EPOCH_EXHAUSTED, TxnTransition
from broker.txn.state import TxnState
from protocol.bounded import BoundedReader
from protocol.errors import KafkaError
from protocol.primitives import encode_uvarint
from protocol.records import NO_PRODUCER_EPOCH, build_record_batch

SEGMENT_BYTES = 64 * 1024  # transaction.state.log.segment.bytes (BrokerConfig has the default)


def topic_config(segment_bytes: int = SEGMENT_BYTES) -> dict[str, str]:
    return internal_topic_config(segment_bytes)


TOPIC_CONFIG = topic_config()
KEY_VERSION = 0
VALUE_VERSION = 2  # with tagged fields; 1 without them; 0 (no transaction-version-2 fields) read
_TAG_END_OFFSETS = 0

log = logging.getLogger("minibroker.txn")

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqqhhib")  # version .. state
_TIMES = struct.Struct(">qq")
_TV2 = struct.Struct(">qb")  # value version 1: next_producer_id, txn_version
_TIMES_TV2 = struct.Struct(">qqqb")  # _TIMES then _TV2, as encode_value writes them
_ONE = _I32.pack(1)
_END_OFFSET = struct.Struct(">iq")  # tagged field 0: partition, end offset
_ONE_END_OFFSETS_TAG = encode_uvarint(1) + encode_uvarint(_TAG_END_OFFSETS)  # count, tag
_STORED_STATES = frozenset(TxnState) - {TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE}


class CorruptTxnLogError(Exception):
    """A record of ``__transaction_state`` that cannot be decoded (``offset``: where, if known)."""

    def __init__(self, message: str, offset: int = -1) -> None:
        super().__init__(message)
        self.offset = offset


def _string(s: str) -> bytes:
    data = s.encode("utf-8")
    return _I16.pack(len(data)) + data


# The key of an id and the partitions of a transaction are the same bytes in each of its records
# (Ongoing and PrepareCommit share the frozenset, Complete has the empty one): encoded once, for
# the last few hundred ids and partition sets. Only small sets are cached: an entry holds its
# key, so what the caches hold stays small whatever ids and transactions clients send.
_CACHED = 256
_CACHED_PARTITIONS = 16


@lru_cache(maxsize=_CACHED)
def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def _encode_end_offsets(end_offsets: tuple[tuple[tuple[str, int], int], ...]) -> bytes:
    if len(end_offsets) == 1:  # the usual case, without the grouping
        ((topic, partition), offset), = end_offsets
        return b"".join((_ONE, _string(topic), _ONE, _END_OFFSET.pack(partition, offset)))
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in sorted(end_offsets):
        by_topic.setdefault(topic, []).append((partition, offset))
    parts = [_I32.pack(len(by_topic))]
    for topic, offsets in by_topic.items():
        parts.append(_string(topic))
        parts.append(_I32.pack(len(offsets)))
        parts.extend(_END_OFFSET.pack(partition, offset) for partition, offset in offsets)
    return b"".join(parts)


def _group_partitions(partitions: frozenset[tuple[str, int]]) -> bytes:
    if len(partitions) == 1:  # the usual case, without the grouping
        (topic, partition), = partitions
        return b"".join((_ONE, _string(topic), _ONE, _I32.pack(partition)))
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    parts = [_I32.pack(len(by_topic))]
    for topic, ids in by_topic.items():
        parts.append(_string(topic))
        parts.append(_I32.pack(len(ids)))
        parts.append(struct.pack(f">{len(ids)}i", *ids))
    return b"".join(parts)


_encode_few_partitions = lru_cache(maxsize=_CACHED)(_group_partitions)


def encode_value(t: TxnTransition) -> bytes | None:
    """The record value of a transition; None (a tombstone) for Dead. Version 2 only when a
    tagged field is present (a PrepareCommit's end offsets), else version 1."""
    # (one unpacking: a NamedTuple's field read by name is a descriptor call each)
    (_, producer_id, last_producer_id, producer_epoch, last_producer_epoch, txn_timeout_ms, state,
     partitions, txn_start_ms, txn_last_update_ms, next_producer_id, txn_version,
     end_offsets) = t
    if state is TxnState.DEAD:
        return None
    if state not in _STORED_STATES:
        raise ValueError(f"state {state.display_name} is never stored")
    parts = [
        _VALUE_HEAD.pack(VALUE_VERSION if end_offsets else 1, producer_id, last_producer_id,
                         producer_epoch, last_producer_epoch, txn_timeout_ms, state),
        # (only small sets are cached, see above)
        _encode_few_partitions(partitions) if len(partitions) <= _CACHED_PARTITIONS
        else _group_partitions(partitions),
        _TIMES_TV2.pack(txn_start_ms, txn_last_update_ms, next_producer_id, txn_version),
    ]
    if end_offsets:  # the tagged-field section: one field
        data = _encode_end_offsets(end_offsets)
        parts += (_ONE_END_OFFSETS_TAG, encode_uvarint(len(data)), data)
    return b"".join(parts)


def _reader(data: bytes) -> BoundedReader:
    return BoundedReader(data, "transaction log record", CorruptTxnLogError)


def _decode_end_offsets(data: bytes) -> tuple[tuple[tuple[str, int], int], ...]:
    r = _reader(data)
    (topics,) = r.unpack(_I32)
    if topics < 0:
        raise CorruptTxnLogError(f"bad end-offset topic count {topics}")
    out = []
    for _ in range(topics):
        topic = r.string()
        (count,) = r.unpack(_I32)
        if count < 0 or r.pos + _END_OFFSET.size * count > len(data):
            raise CorruptTxnLogError(f"bad end-offset partition count {count}")
        for _ in range(count):
            partition, offset = r.unpack(_END_OFFSET)
            if offset < 0:
                raise CorruptTxnLogError(f"bad end offset {offset}")
            out.append(((topic, partition), offset))
    if r.pos != len(data):
        raise CorruptTxnLogError(f"{len(data) - r.pos} bytes after the end offsets")
    return tuple(sorted(out))


def decode_key(key: bytes) -> str:
    r = _reader(key)
    (version,) = r.unpack(_I16)
    if version != KEY_VERSION:
        raise CorruptTxnLogError(f"unknown key version {version}")
    return r.string()


def decode_value(transactional_id: str, value: bytes) -> TxnTransition:
    r = _reader(value)
    version, pid, last_pid, epoch, last_epoch, timeout, state_id = r.unpack(_VALUE_HEAD)
    if version not in (0, 1, VALUE_VERSION):
        raise CorruptTxnLogError(f"unknown value version {version}")
    try:
        state = TxnState(state_id)
    except ValueError:
        raise CorruptTxnLogError(f"unknown state id {state_id}") from None
    if state not in _STORED_STATES:
        raise CorruptTxnLogError(f"state {state.display_name} is never stored")
    (topics,) = r.unpack(_I32)
    if topics < 0:
        raise CorruptTxnLogError(f"bad topic count {topics}")
    partitions: set[tuple[str, int]] = set()
    for _ in range(topics):
        topic = r.string()
        (count,) = r.unpack(_I32)
        if count < 0 or r.pos + 4 * count > len(value):
            raise CorruptTxnLogError(f"bad partition count {count}")
        partitions.update((topic, p) for p in r.unpack(struct.Struct(f">{count}i")))
    start, last_update = r.unpack(_TIMES)
    next_pid, txn_version = r.unpack(_TV2) if version >= 1 else (-1, 1)
    if txn_version not in (1, 2):
        raise CorruptTxnLogError(f"unknown transaction version {txn_version}")
    tagged = r.tagged_fields() if version >= 2 else {}
    end_offsets = _decode_end_offsets(tagged[_TAG_END_OFFSETS]) \
        if _TAG_END_OFFSETS in tagged else ()
    return TxnTransition(transactional_id, pid, last_pid, epoch, last_epoch, timeout, state,
                         frozenset(partitions), start, last_update, next_pid, txn_version,
                         end_offsets)


class TxnLog:
    """Appends transitions to, and replays, the partitions of ``__transaction_state``."""

    def __init__(self, logs: LogManager, num_partitions: int,
                 segment_bytes: int = SEGMENT_BYTES) -> None:
        self.logs = logs
        self.topic_config = topic_config(segment_bytes)
        existing = logs.partition_count(TRANSACTION_STATE_TOPIC)
        self.num_partitions = existing if existing is not None else num_partitions
        if existing is not None:
            restore_fixed_config(logs, TRANSACTION_STATE_TOPIC, self.topic_config, log)

    def partition_of(self, transactional_id: str) -> int:
        if self.num_partitions == 1:  # the default here: no hash per record
            return 0
        return partition_for(transactional_id, self.num_partitions)

    def _partition(self, index: int, now_ms: int) -> Partition:
        try:
            return self.logs.partition(TRANSACTION_STATE_TOPIC, index)
        except KafkaError:
            if self.logs.partition_count(TRANSACTION_STATE_TOPIC) is not None:
                raise
        self.logs.create_topic(TRANSACTION_STATE_TOPIC, self.num_partitions, self.topic_config,
                               now_ms)
        return self.logs.partition(TRANSACTION_STATE_TOPIC, index)

    def append(self, transition: TxnTransition, now_ms: int) -> Partition:
        """Write the transition (not yet durable); returns the partition to flush.
        Raises KafkaError (KAFKA_STORAGE_ERROR) if the write fails."""
        transactional_id = transition.transactional_id
        index = self.partition_of(transactional_id)
        try:
            partition = self.logs.partition(TRANSACTION_STATE_TOPIC, index)
        except KafkaError:  # the topic is created on first use
            partition = self._partition(index, now_ms)
        buf, header = build_record_batch(encode_key(transactional_id), encode_value(transition),
                                         now_ms)
        partition.append_built_batch(buf, header, now_ms)
        return partition

    def replay(self) -> Iterator[tuple[str, TxnTransition | None]]:
        """Every record of every partition in log order: ``(transactional_id, transition or
        None for a tombstone)``. What cannot be read is skipped (``broker/log/internal_replay.py``):
        a control batch (a transaction marker has no place here: an older version let a client
        put this topic in a transaction) and a record whose key or value does not decode, each
        with an error line naming the offset and why. The id of a skipped record keeps the
        last state that could be read (or is unknown if none could)."""
        if self.logs.partition_count(TRANSACTION_STATE_TOPIC) is None:
            return
        for index in range(self.num_partitions):
            partition = self.logs.partition(TRANSACTION_STATE_TOPIC, index)
            skips = SkipLog(log, partition)
            yield from self._replay_partition(partition, skips)
            skips.close()

    @staticmethod
    def _replay_partition(
        partition: Partition, skips: SkipLog
    ) -> Iterator[tuple[str, TxnTransition | None]]:
        # The last record read of each id, and the ids whose latest record could not be read.
        latest: dict[str, TxnTransition | None] = {}
        uncertain: set[str] = set()
        for header, records in read_batches(partition, partition.log_end_offset, skips):
            if header.is_control:
                skips.skip(header.base_offset, "a transaction marker (control batch) is not a "
                           "transaction-log record", "control batch")
                continue
            for record in records:
                tid = None
                try:
                    if record.key is None:
                        raise CorruptTxnLogError("record without a key")
                    tid = decode_key(record.key)
                    transition = None if record.value is None else decode_value(tid, record.value)
                except (CorruptTxnLogError, ValueError) as exc:
                    skips.skip(record.offset, str(exc) or type(exc).__name__)
                    if tid is not None:
                        uncertain.add(tid)
                    continue
                uncertain.discard(tid)
                latest[tid] = transition
                yield tid, transition
        for tid in sorted(uncertain):
            fenced = _fence_unknown_epoch(latest.get(tid))
            if fenced is not None:
                log.warning("%s-%d: the latest record of %r could not be read; its producer is "
                            "fenced and gets a new producer id at its next InitProducerId",
                            partition.topic, partition.index, tid)
                yield tid, fenced


def _fence_unknown_epoch(last: TxnTransition | None) -> TxnTransition | None:
    """``last`` (the last state read of an id whose later record was skipped) with its epoch
    marked exhausted, so that the next InitProducerId moves to a new producer id: the skipped
    record may have bumped the epoch, and reusing an epoch a live producer holds would leave it
    unfenced. Only for a finished transaction (Empty, CompleteCommit, CompleteAbort); an open or
    prepared one is completed or aborted from the state read, as after any crash (None)."""
    if last is None or last.state not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                          TxnState.COMPLETE_ABORT):
        return None
    return last._replace(producer_epoch=EPOCH_EXHAUSTED, last_producer_epoch=NO_PRODUCER_EPOCH)
