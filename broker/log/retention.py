"""A partition's retention: whole old segments deleted by time and size, DeleteRecords (the log
start offset moved, durably), and the cleaner's segments put in place. Part of ``Partition``
(``partition.py``), whose fields it changes."""

from __future__ import annotations

from bisect import bisect_right
from pathlib import Path

from broker.log.segment import CorruptLogError, Segment, atomic_write
from broker.log.topic_config import LogConfig
from broker.log.txn_index import TxnIndex
from protocol.errors import ErrorCode, KafkaError

# DeleteRecords' log start offset, when it lies inside the first segment (one decimal line).
LOG_START_CHECKPOINT = "log-start-offset.checkpoint"


class PartitionRetention:
    """The retention methods of ``Partition`` (the event loop calls them)."""

    topic: str
    index: int
    dir: Path
    segments: list[Segment]
    _bases: list[int]
    _unsynced: list[Segment]
    log_start_offset: int
    high_watermark: int
    cleaning: bool
    txn_index: TxnIndex

    @property
    def config(self) -> LogConfig:
        raise NotImplementedError  # Partition's

    @property
    def size_bytes(self) -> int:
        raise NotImplementedError  # Partition's

    def _roll(self) -> Segment:
        raise NotImplementedError  # Partition's

    def enforce_retention(self, now_ms: int) -> int:
        """Delete whole old segments by ``retention_ms`` (largest timestamp in the segment older
        than that) and ``retention_bytes`` (total size above it). Only data below the HW goes;
        the active segment is rolled first when it has expired itself. Returns segments deleted."""
        config = self.config
        deleted = 0
        if not config.delete or self.cleaning:
            # cleanup.policy=compact alone: segments go only through the cleaner; and never
            # under the cleaner's feet (it is rewriting the oldest segments).
            return 0
        if config.retention_ms >= 0:
            while True:
                seg = self.segments[0]
                if (
                    seg.size == 0
                    or seg.max_timestamp < 0  # no timestamps (NO_TIMESTAMP): never by time
                    or now_ms - seg.max_timestamp <= config.retention_ms
                    or seg.next_offset > self.high_watermark
                ):
                    break
                if len(self.segments) == 1:
                    self._roll()
                self._delete_oldest()
                deleted += 1
        if config.retention_bytes >= 0:
            total = self.size_bytes
            while len(self.segments) > 1:
                seg = self.segments[0]
                if total - seg.size < config.retention_bytes or seg.next_offset > self.high_watermark:
                    break
                total -= seg.size
                self._delete_oldest()
                deleted += 1
        if deleted:
            self.txn_index.drop_before(self.log_start_offset)
        return deleted

    def _delete_oldest(self) -> None:
        seg = self.segments.pop(0)
        self._bases.pop(0)
        if seg in self._unsynced:
            self._unsynced.remove(seg)
        seg.delete()
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: make ``offset`` the log start offset (-1: the high watermark), durably,
        and delete the segments wholly below it. Returns the new log start offset (the "low
        watermark"); an offset at or below the current start changes nothing. Raises
        OFFSET_OUT_OF_RANGE above the high watermark or below -1, KAFKA_STORAGE_ERROR if the
        checkpoint cannot be written."""
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"cannot delete records of {self.topic}-{self.index} up to {offset}: the high "
                f"watermark is {self.high_watermark}",
            )
        if offset <= self.log_start_offset:
            return self.log_start_offset
        try:
            atomic_write(self.dir / LOG_START_CHECKPOINT, f"{offset}\n".encode())
        except OSError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc
        self.log_start_offset = offset
        deleted = False
        # While the cleaner rewrites the oldest segments they stay; the next call (or the next
        # cleaning, which keeps nothing below the log start) frees them.
        while (not self.cleaning and len(self.segments) > 1
               and self.segments[1].base_offset <= offset):
            self._delete_oldest()
            deleted = True
        if deleted:
            self.txn_index.drop_before(self.segments[0].base_offset)
        return offset

    def replace_segments(self, old_bases: list[int], new: Segment) -> None:
        """Put the cleaned segment ``new`` in place of the segments at ``old_bases`` (consecutive,
        closed; their files were already replaced on disk by the cleaner). Event loop only."""
        i = bisect_right(self._bases, old_bases[0]) - 1
        old = self.segments[i : i + len(old_bases)]
        if [s.base_offset for s in old] != old_bases or new.base_offset != old_bases[0] or (
            new.next_offset != old[-1].next_offset
        ):
            raise CorruptLogError(f"{self.dir}: cleaned segment does not match {old_bases}")
        for seg in old:
            if seg in self._unsynced:
                self._unsynced.remove(seg)
            seg.close()
        self.segments[i : i + len(old_bases)] = [new]
        self._bases[i : i + len(old_bases)] = [new.base_offset]


def read_log_start_checkpoint(directory: Path) -> int:
    try:
        return int((directory / LOG_START_CHECKPOINT).read_text(encoding="ascii").strip())
    except (FileNotFoundError, ValueError, UnicodeDecodeError):
        return 0
