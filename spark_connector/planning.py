"""Pure planning: offset ranges, how they split into Spark tasks, micro-batch limits, offset JSON.

Everything here is deterministic in its arguments, which is what makes a replayed micro-batch read
exactly the records it read the first time: ``partitions(start, end)`` only calls
``split_ranges`` on the two offset dicts Spark stored in its checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]


class OffsetRange(NamedTuple):
    """Records ``[start, end)`` of one topic partition, read by one Spark task.

    ``from_beginning``: the range starts at a partition's first offset that the source did not
    know when it planned (a partition created after the query started): if the log starts later,
    that is not lost data.
    """

    topic: str
    partition: int
    start: int
    end: int
    from_beginning: bool = False

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)


def split_ranges(
    ranges: Iterable[OffsetRange], max_records: int, min_partitions: int | None = None
) -> list[OffsetRange]:
    """Split ranges longer than ``max_records`` into equal pieces, then, while there are fewer
    than ``min_partitions`` pieces, halve the largest (ties: the first in topic/partition order).
    Empty ranges are dropped. The result is sorted by (topic, partition, start)."""
    pieces: list[OffsetRange] = []
    for r in sorted(ranges):
        if r.size == 0:
            continue
        count = -(-r.size // max_records)
        pieces.extend(_cut(r, count))
    if min_partitions is not None:
        while len(pieces) < min_partitions:
            largest = max(pieces, key=lambda r: r.size, default=None)
            if largest is None or largest.size < 2:
                break
            index = pieces.index(largest)
            pieces[index : index + 1] = _cut(largest, 2)
    return sorted(pieces)


def _cut(r: OffsetRange, count: int) -> list[OffsetRange]:
    step, extra = divmod(r.size, count)
    out = []
    start = r.start
    for i in range(count):
        end = start + step + (1 if i < extra else 0)
        # Only the first piece can begin before the log start; the flag stays with it.
        out.append(OffsetRange(r.topic, r.partition, start, end, r.from_beginning and i == 0))
        start = end
    return out


def rate_limit(start: Mapping[TopicPartition, int], latest: Offsets, max_records: int) -> Offsets:
    """The end offsets of a micro-batch reading at most ``max_records`` records in total.

    Each partition gets a share proportional to its backlog (as Spark's Kafka source does),
    rounded down; what rounding leaves over goes to the partitions in order, so that the limit is
    used exactly and a non-empty backlog always makes progress."""
    backlog = {tp: max(latest[tp] - start.get(tp, 0), 0) for tp in latest}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(latest)
    shares = {tp: backlog[tp] * max_records // total for tp in sorted(backlog)}
    left = max_records - sum(shares.values())
    for tp in sorted(backlog):
        if left == 0:
            break
        if shares[tp] < backlog[tp]:
            shares[tp] += 1
            left -= 1
    return {tp: start.get(tp, 0) + shares[tp] for tp in latest}


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(topic, p): n}`` -> ``{"topic": {"p": n}}`` (Spark's Kafka offset JSON; sorted)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> Offsets:
    """The inverse of ``offsets_to_json``."""
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in data.items()
        for partition, offset in partitions.items()
    }


def offsets_behind_latest(source_progress: Mapping[str, object]) -> dict[str, float] | None:
    """Spark's Kafka source metrics ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest`` and
    ``avgOffsetsBehindLatest`` for one entry of ``query.lastProgress["sources"]``: per partition,
    the latest offset the source saw minus the end of the last micro-batch.

    PySpark's Python data sources cannot fill ``sources[i].metrics`` themselves (Spark's
    ``PythonMicroBatchStream`` does not implement ``ReportsSourceMetrics``, checked on 4.3.0), so
    the figures are computed here from the two offsets Spark does record: ``endOffset`` and the
    ``latestOffset`` this source reports. None when the progress has no latest offset yet."""
    import json

    def offsets(value: object) -> Offsets | None:
        if isinstance(value, str):
            value = json.loads(value)
        return offsets_from_json(value) if isinstance(value, Mapping) else None

    end = offsets(source_progress.get("endOffset"))
    latest = offsets(source_progress.get("latestOffset"))
    if end is None or latest is None or not latest:
        return None
    behind = [max(offset - end.get(tp, 0), 0) for tp, offset in latest.items()]
    return {
        "minOffsetsBehindLatest": float(min(behind)),
        "maxOffsetsBehindLatest": float(max(behind)),
        "avgOffsetsBehindLatest": sum(behind) / len(behind),
    }
