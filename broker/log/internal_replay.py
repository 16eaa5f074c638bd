"""Reading an internal log (``__transaction_state``, ``__consumer_offsets``) back at start.

Rules (issue 28): a replay never gives up on a partition. Whatever it cannot read is skipped with
a log line naming the partition, the offset and the reason, and everything else is loaded, so the
coordinators serve every transactional id and group from the state that could be read, and no
repair is needed before transactions are served again.

- A batch whose CRC does not match is skipped. Log recovery normally never lets one through: after
  an unclean shutdown it verifies every CRC and truncates the log at the first bad batch (the torn
  tail of a crash, as Kafka's recovery does). A clean shutdown skips that scan, so a batch damaged
  while the broker was stopped reaches the replay: its records cannot be trusted, so none is
  applied, but its length (outside the CRC) still locates the next batch.
- A batch whose records do not decode (framing, compression) is skipped the same way.
- A batch header that does not parse, or a read that fails, leaves no way to find the next batch
  in that segment: the replay goes on at the next segment of the partition.
- What one record means (its key and value) is the caller's: ``SkipLog`` reports the record it
  skips, and the caller goes on with the next record.

Log lines are bounded: the first ``MAX_LINES`` skips of a partition get one line each, the rest
one summary line with their count.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Iterator

from broker.log.manager import LogManager
from broker.log.partition import Partition
from broker.log.topic_config import INTERNAL_FIXED_KEYS, internal_overrides_restored
from protocol.errors import CorruptFrameError, KafkaError
from protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    Record,
    batch_crc_ok,
    decode_records_untrusted,
    parse_header_untrusted,
)

MAX_LINES = 10
_READ_CHUNK = 4 << 20


class SkipLog:
    """What the replay of one partition skipped, logged as it happens (bounded)."""

    def __init__(self, logger: logging.Logger, partition: Partition) -> None:
        self._log = logger
        self.name = f"{partition.topic}-{partition.index}"
        self.skipped = 0

    def skip(self, offset: int, reason: str, what: str = "record") -> None:
        self.skipped += 1
        if self.skipped <= MAX_LINES:
            self._log.error("%s: at start, skipped the %s at offset %d: %s (the rest of the "
                            "partition is loaded)", self.name, what, offset, reason)

    def close(self) -> None:
        if self.skipped > MAX_LINES:
            self._log.error("%s: skipped %d more records or batches at start (%d in all)",
                            self.name, self.skipped - MAX_LINES, self.skipped)


def _next_segment(partition: Partition, offset: int) -> int | None:
    bases = [s.base_offset for s in partition.segments]
    i = bisect_right(bases, offset)
    return bases[i] if i < len(bases) else None


def read_batches(
    partition: Partition, end: int, skips: SkipLog
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Every batch of ``partition`` below offset ``end`` whose CRC and records are intact, with
    its records, in log order; the others are reported to ``skips`` and left out."""
    offset = partition.log_start_offset
    while offset < end:
        try:
            data = partition.read(offset, _READ_CHUNK, end)
        except KafkaError as exc:
            offset = _resume(partition, offset, end, skips, f"cannot be read: {exc}")
            continue
        if not data:
            return
        start = offset
        pos, n = 0, len(data)
        broken: str | None = None
        while n - pos >= HEADER_SIZE:
            try:
                header = parse_header_untrusted(data, pos)
            except CorruptFrameError as exc:
                broken = f"bad batch header: {exc}"
                break
            size = header.length + LOG_OVERHEAD
            if pos + size > n:
                if pos == 0:
                    broken = f"batch of {size} bytes runs past the data read ({n} bytes)"
                break  # the rest comes with the next read
            pos += size
            last = header.base_offset + header.last_offset_delta
            if last < offset:
                continue  # before the log start offset, in the first batch read
            if header.base_offset >= end:
                broken = f"batch claims offset {header.base_offset}, past the log end {end}"
                break
            offset = last + 1
            if not batch_crc_ok(data, pos - size, header):
                skips.skip(header.base_offset, "CRC mismatch", "batch")
                continue
            try:
                records = decode_records_untrusted(data, pos - size, header)
            except CorruptFrameError as exc:
                skips.skip(header.base_offset, f"records do not decode: {exc}", "batch")
                continue
            yield header, records
        if broken is not None or offset == start:
            offset = _resume(partition, offset, end, skips, broken or "no whole batch")


def _resume(partition: Partition, offset: int, end: int, skips: SkipLog, reason: str) -> int:
    """The offset to go on from after the segment holding ``offset`` became unreadable there:
    the next segment's base, or ``end`` when there is none."""
    following = _next_segment(partition, offset)
    resume = end if following is None or following >= end else following
    skips.skip(offset, f"{reason}; going on at offset {resume}", "rest of the segment from")
    return resume


def restore_fixed_config(logs: LogManager, topic: str, canonical: dict[str, str],
                         logger: logging.Logger) -> None:
    """Put back the keys of ``INTERNAL_FIXED_KEYS`` of internal ``topic`` as the broker creates
    them, if a version that let clients alter them left other values (a ``max.message.bytes`` or
    ``cleanup.policy=delete`` saved then would refuse or delete the broker's state forever)."""
    current = logs.topic_overrides(topic)
    restored = internal_overrides_restored(current, canonical)
    if restored is None:
        return
    changed = sorted(k for k in INTERNAL_FIXED_KEYS if current.get(k) != restored.get(k))
    try:
        logs.alter_topic_config(topic, restored, False)
    except KafkaError:  # the other overrides contradict the restored ones: the broker's alone
        restored = dict(canonical)
        changed = sorted(set(current) | set(restored))
        logs.alter_topic_config(topic, restored, False)
    logger.warning("%s: restored %s as the broker sets them (a client had changed them)", topic,
                   ", ".join(f"{k}={restored.get(k, '(default)')}" for k in changed))
