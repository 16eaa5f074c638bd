"""A partition's read path (Fetch, ListOffsets by time): whole batches located in a segment
file, read or handed to the sender as a file range (``file_slice.py``). Part of ``Partition``
(``partition.py``), whose fields it reads."""

from __future__ import annotations

import os
from bisect import bisect_right
from pathlib import Path

from broker.log.segment import CorruptLogError, Segment
from protocol.errors import ErrorCode, KafkaError


class PartitionReads:
    """The read methods of ``Partition`` (the event loop calls them)."""

    dir: Path
    segments: list[Segment]
    _bases: list[int]
    log_start_offset: int
    log_end_offset: int

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int) -> bytes:
        """Whole batches from the one holding ``fetch_offset``, only those with base offset below
        ``max_offset`` (HW or LSO), at least one, then as many as fit in ``max_bytes``; never
        crosses a segment boundary. ``b""`` if none. Raises OFFSET_OUT_OF_RANGE outside
        ``[log_start_offset, log_end_offset]``."""
        found = self.locate(fetch_offset, max_bytes, max_offset)
        if found is None:
            return b""
        fd, position, length = found
        data = os.pread(fd, length, position)
        if len(data) != length:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"{self.dir}: short read at {position} of offset {fetch_offset}")
        return data

    def locate(self, fetch_offset: int, max_bytes: int,
               max_offset: int) -> tuple[int, int, int] | None:
        """What ``read`` would return, as ``(segment fd, position, length)`` in its segment
        file (None: nothing), for a reader that sends the bytes from the file (Fetch with
        sendfile). The descriptor is the segment's own: valid until the next checkpoint (the
        caller duplicates it to keep it). Raises as ``read``."""
        if fetch_offset < self.log_start_offset or fetch_offset > self.log_end_offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {fetch_offset} outside [{self.log_start_offset}, {self.log_end_offset}]",
            )
        if fetch_offset >= max_offset or fetch_offset >= self.log_end_offset:
            return None
        seg = self.segments[bisect_right(self._bases, fetch_offset) - 1]
        try:
            start, end = seg.locate(fetch_offset, max_bytes, max_offset)
        except CorruptLogError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc
        return (seg.fd, start, end - start) if end > start else None

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by time: ``(timestamp, offset)`` of the first record from the log start
        offset on whose timestamp is >= ``timestamp``; None if none. The offset may lie above the
        high watermark: the caller bounds it if it must."""
        for seg in self.segments:
            try:
                found = seg.find_timestamp(timestamp, self.log_start_offset)
            except CorruptLogError as exc:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc
            if found is not None:
                return found
        return None
