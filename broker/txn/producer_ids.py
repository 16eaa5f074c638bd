"""Producer ids that are never handed out twice, even across kill -9 (Kafka's ProducerIdManager,
with a local file instead of ZooKeeper's ``/latest_producer_id_block``).

Ids are reserved in blocks: before the first id of a block is returned, the block's end is written
to ``path`` and fsync'd (atomically: temp file, fsync, rename, directory fsync). After a restart,
however abrupt, allocation resumes at the recorded end, so the unused rest of the last block is
skipped, never reused. One fsync per ``block_size`` ids.

File format: one line of ASCII, ``minibroker-producer-ids v1 <next_unreserved_id>``.
"""

from __future__ import annotations

from pathlib import Path

from broker.log.segment import atomic_write

_MAGIC = "minibroker-producer-ids v1"
# Producer ids are int64 on the wire; stay well clear of the top.
_MAX_ID = (1 << 63) - 1


class ProducerIdManager:
    def __init__(self, path: Path, block_size: int = 1000) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, not {block_size}")
        self.path = Path(path)
        self.block_size = block_size
        self._next = self._read_reserved_end()
        self._block_end = self._next  # nothing reserved by this process yet

    def _read_reserved_end(self) -> int:
        try:
            text = self.path.read_text(encoding="ascii")
        except FileNotFoundError:
            return 0
        parts = text.split()
        # A damaged file must stop the broker: starting again from 0 would reuse ids.
        if len(parts) != 3 or " ".join(parts[:2]) != _MAGIC or not parts[2].isdigit():
            raise ValueError(f"{self.path}: not a producer id block file")
        return int(parts[2])

    def next_id(self) -> int:
        """A producer id never returned before by any run on this file."""
        if self._next >= self._block_end:
            end = self._next + self.block_size
            if end > _MAX_ID:
                raise OverflowError("producer ids exhausted")
            atomic_write(self.path, f"{_MAGIC} {end}\n".encode("ascii"))
            self._block_end = end
        pid = self._next
        self._next += 1
        return pid
