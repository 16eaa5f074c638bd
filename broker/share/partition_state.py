"""The state of one share partition (one group's view of one topic partition): a pure state
machine, time passed in.

Theory of operation (Kafka's SharePartition, KIP-932):
- The share-partition start offset (SPSO) is the first offset not yet finished: every record below
  it is Acknowledged or Archived. ``end`` is one past the last offset ever acquired; records at
  ``end`` and later have never been delivered (implicitly Available).
- The records of ``[start, end)`` are covered, contiguously and in order, by *runs*: ranges of
  offsets sharing a state, a delivery count and (when Acquired) a member and a lock deadline. A run
  is as large as the batch it was acquired with, split only where acknowledgements differ, and
  merged again with equal neighbours, so memory goes with the number of distinct ranges, not
  records (a million records acquired in batches of 500 are 2,000 runs).
- States and the events that move them (``TRANSITIONS``; ``transition`` raises
  ``IllegalTransition`` for anything else):
      Available  --acquire-->   Acquired      (delivery count + 1, lock until now + lock_ms)
      Acquired   --accept-->    Acknowledged
      Acquired   --release-->   Available     (Archived once the delivery count reached the limit)
      Acquired   --expire-->    Available     (the lock ran out; same limit)
      Acquired   --reject-->    Archived
      Acquired   --gap-->       Archived      (an offset with no record: compaction, a marker)
      Acquired   --renew-->     Acquired      (the lock starts again)
      Available  --archive-->   Archived      (aborted transactions, markers, a moved SPSO)
  Acknowledged and Archived are final.
- After every change the SPSO moves past the finished prefix and those runs are dropped.
- New records are acquired only while the in-flight window ``end - start`` is below
  ``max_in_flight`` (``group.share.partition.max.record.locks``); redeliveries always may.
- What survives a restart (``snapshot`` / ``restore``): the SPSO and every run, Acquired ones
  written as Available with their delivery count (their locks die with the broker), as Kafka's
  share coordinator persists them.
"""

from __future__ import annotations

import enum
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from protocol.errors import ErrorCode


class RecordState(enum.IntEnum):
    """Kafka's delivery states (the values of the share coordinator's records)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(enum.IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class Event(enum.Enum):
    ACQUIRE = "acquire"
    ACCEPT = "accept"
    RELEASE = "release"
    EXPIRE = "expire"
    REJECT = "reject"
    GAP = "gap"
    RENEW = "renew"
    ARCHIVE = "archive"


A, Q, K, X = (RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED,
              RecordState.ARCHIVED)
# (state, event) -> the state after it. Release and expire go to Available, or to Archived once
# the delivery count reached the limit (``_settle``).
TRANSITIONS: dict[tuple[RecordState, Event], RecordState] = {
    (A, Event.ACQUIRE): Q,
    (Q, Event.ACCEPT): K,
    (Q, Event.RELEASE): A,
    (Q, Event.EXPIRE): A,
    (Q, Event.REJECT): X,
    (Q, Event.GAP): X,
    (Q, Event.RENEW): Q,
    (A, Event.ARCHIVE): X,
}
_ACK_EVENTS = {AckType.GAP: Event.GAP, AckType.ACCEPT: Event.ACCEPT,
               AckType.RELEASE: Event.RELEASE, AckType.REJECT: Event.REJECT,
               AckType.RENEW: Event.RENEW}
_FINISHED = (K, X)
NO_DEADLINE = 1 << 62


class IllegalTransition(Exception):
    def __init__(self, state: RecordState, event: Event) -> None:
        super().__init__(f"{event.value} is not allowed from {state.name}")
        self.state = state
        self.event = event


def transition(state: RecordState, event: Event) -> RecordState:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(state, event) from None


class Run:
    """Offsets ``first..last`` (inclusive) in one state."""

    __slots__ = ("first", "last", "state", "count", "member", "deadline")

    def __init__(self, first: int, last: int, state: RecordState, count: int,
                 member: str | None = None, deadline: int = NO_DEADLINE) -> None:
        self.first = first
        self.last = last
        self.state = state
        self.count = count
        self.member = member
        self.deadline = deadline

    def same(self, other: Run) -> bool:
        return (self.state == other.state and self.count == other.count
                and self.member == other.member and self.deadline == other.deadline)

    def copy(self, first: int, last: int) -> Run:
        return Run(first, last, self.state, self.count, self.member, self.deadline)

    def __repr__(self) -> str:
        return (f"Run({self.first}-{self.last} {self.state.name} n={self.count}"
                f"{' ' + self.member if self.member else ''})")


class Acquired(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_count: int


class LogBatch(NamedTuple):
    """A batch the log returned, as acquisition sees it: deliverable or not (a control batch, a
    batch of an aborted transaction under read_committed)."""

    first: int
    last: int
    deliverable: bool


class StateBatch(NamedTuple):
    """One persisted range (Kafka's ``StateBatch``)."""

    first_offset: int
    last_offset: int
    state: int
    delivery_count: int


def _by_first(run: Run) -> int:
    return run.first


class SharePartitionState:
    def __init__(self, start: int, *, delivery_limit: int, lock_ms: int,
                 max_in_flight: int) -> None:
        self.start = start
        self.end = start
        self.runs: list[Run] = []
        self.delivery_limit = delivery_limit
        self.lock_ms = lock_ms
        self.max_in_flight = max_in_flight
        self._next_deadline = NO_DEADLINE
        self._available = 0  # records in Available runs: no scan for redeliveries without any
        # Counters for metrics and tests.
        self.redelivered = 0
        self.archived_by_limit = 0
        self.archived = 0  # delivered records archived: rejected or at the delivery limit

    # -- reading ----------------------------------------------------------------------------

    def in_flight(self) -> int:
        return self.end - self.start

    def acquired_count(self) -> int:
        return sum(r.last - r.first + 1 for r in self.runs if r.state == Q)

    def unfinished_count(self) -> int:
        """Records in flight and not finished: Available (to be redelivered) or Acquired."""
        return self._available + self.acquired_count()

    def next_fetch_offset(self) -> int | None:
        """Where the next acquisition reads: the first Available offset, else ``end`` while the
        in-flight window has room, else None (nothing can be acquired now)."""
        if self._available:
            for run in self.runs:
                if run.state == A:
                    return run.first
        if self.end - self.start < self.max_in_flight:
            return self.end
        return None

    def state_of(self, offset: int) -> RecordState:
        if offset < self.start:
            return K
        if offset >= self.end:
            return A
        return self.runs[self._index(offset)].state

    # -- acquisition ------------------------------------------------------------------------

    def acquire(self, member: str, batches: Sequence[LogBatch], max_records: int,
                now_ms: int) -> list[Acquired]:
        """Acquire for ``member`` the Available records of ``batches`` (what the log returned
        from ``next_fetch_offset``, in order): first those already in flight, then new ones from
        ``end`` while the in-flight window allows, whole batches, until ``max_records`` (which a
        batch may overshoot, as Kafka's batch-aligned acquisition does)."""
        self.expire(now_ms)
        if not batches:
            return []
        deadline = now_ms + self.lock_ms
        got: list[Acquired] = []
        taken = 0
        top = batches[-1].last
        # Redeliveries: Available runs inside the window that the read covered.
        i = 0 if self._available else len(self.runs)
        while i < len(self.runs) and taken < max_records:
            run = self.runs[i]
            if run.first > top:
                break
            if run.state == A:
                last = min(run.last, top, run.first + (max_records - taken) - 1)
                if last < run.last:
                    self._split(i, last + 1)
                run = self.runs[i]
                run.state = transition(run.state, Event.ACQUIRE)
                self._available -= run.last - run.first + 1
                run.count += 1
                run.member = member
                run.deadline = deadline
                self.redelivered += run.last - run.first + 1
                got.append(Acquired(run.first, run.last, run.count))
                taken += run.last - run.first + 1
            i += 1
        # New records from ``end`` on.
        for batch in batches:
            if taken >= max_records or self.end - self.start >= self.max_in_flight:
                break
            if batch.last < self.end:
                continue
            first = max(batch.first, self.end)
            if first > self.end:  # offsets with no batch (compacted away): nothing to deliver
                self._append(Run(self.end, first - 1, X, 0))
            if batch.deliverable:
                self._append(Run(first, batch.last, Q, 1, member, deadline))
                got.append(Acquired(first, batch.last, 1))
                taken += batch.last - first + 1
            else:
                self._append(Run(first, batch.last, X, 0))
            self.end = batch.last + 1
        if got:
            self._next_deadline = min(self._next_deadline, deadline)
        self._advance()
        return _coalesce(got)

    def _append(self, run: Run) -> None:
        if self.runs and self.runs[-1].same(run) and self.runs[-1].last + 1 == run.first:
            self.runs[-1].last = run.last
        else:
            self.runs.append(run)

    # -- acknowledgement --------------------------------------------------------------------

    def acknowledge(self, member: str, first: int, last: int, types: Sequence[int],
                    now_ms: int) -> ErrorCode:
        """Apply one acknowledgement batch of ``member``: ``types`` has one type for the whole
        range or one per offset. Every offset must be Acquired by ``member`` (else
        INVALID_RECORD_STATE, nothing applied); a type out of range is INVALID_REQUEST."""
        self.expire(now_ms)
        if first > last or first < 0 or (len(types) != 1 and len(types) != last - first + 1):
            return ErrorCode.INVALID_REQUEST
        try:
            kinds = [AckType(t) for t in types]
        except ValueError:
            return ErrorCode.INVALID_REQUEST
        if first < self.start or last >= self.end:
            return ErrorCode.INVALID_RECORD_STATE
        i = self._index(first)
        while i < len(self.runs) and self.runs[i].first <= last:
            run = self.runs[i]
            if run.state != Q or run.member != member:
                return ErrorCode.INVALID_RECORD_STATE
            i += 1
        if len(kinds) == 1:
            self._apply(first, last, kinds[0], now_ms)
        else:
            self._apply_each(first, last, kinds, now_ms)
        self._advance()
        return ErrorCode.NONE

    def _apply_each(self, first: int, last: int, kinds: Sequence[AckType], now_ms: int) -> None:
        """One type per offset: the covered runs are rebuilt in one pass, a run per stretch of
        equal types within each (not one split of the run list per offset)."""
        i = self._isolate(first, last)
        j = i
        while j < len(self.runs) and self.runs[j].first <= last:
            j += 1
        rebuilt: list[Run] = []
        for run in self.runs[i:j]:
            lo = run.first
            while lo <= run.last:
                kind = kinds[lo - first]
                hi = lo
                while hi < run.last and kinds[hi + 1 - first] == kind:
                    hi += 1
                part = run.copy(lo, hi)
                if kind == AckType.RENEW:
                    part.deadline = now_ms + self.lock_ms
                    self._next_deadline = min(self._next_deadline, part.deadline)
                else:
                    self._settle(part, transition(part.state, _ACK_EVENTS[kind]))
                if rebuilt and rebuilt[-1].same(part):
                    rebuilt[-1].last = hi
                else:
                    rebuilt.append(part)
                lo = hi + 1
        self.runs[i:j] = rebuilt
        self._merge_around(first, last)

    def _apply(self, first: int, last: int, kind: AckType, now_ms: int) -> None:
        event = _ACK_EVENTS[kind]
        i = self._isolate(first, last)
        while i < len(self.runs) and self.runs[i].first <= last:
            run = self.runs[i]
            if event is Event.RENEW:
                run.deadline = now_ms + self.lock_ms
                self._next_deadline = min(self._next_deadline, run.deadline)
            else:
                self._settle(run, transition(run.state, event))
            i += 1
        self._merge_around(first, last)

    def _settle(self, run: Run, state: RecordState) -> None:
        if state == A and run.count >= self.delivery_limit:
            state = X
            self.archived_by_limit += run.last - run.first + 1
        if state == A:
            self._available += run.last - run.first + 1
        elif state == X:
            self.archived += run.last - run.first + 1
        run.state = state
        run.member = None
        run.deadline = NO_DEADLINE

    # -- time and members -------------------------------------------------------------------

    def next_deadline(self) -> int:
        return self._next_deadline

    def expire(self, now_ms: int) -> bool:
        """Release the records whose acquisition lock ran out; True if any did."""
        if now_ms < self._next_deadline:
            return False
        changed = False
        nxt = NO_DEADLINE
        for run in self.runs:
            if run.state == Q:
                if run.deadline <= now_ms:
                    self._settle(run, transition(run.state, Event.EXPIRE))
                    changed = True
                else:
                    nxt = min(nxt, run.deadline)
        self._next_deadline = nxt
        if changed:
            self._merge_all()
            self._advance()
        return changed

    def release_member(self, member: str) -> bool:
        """Release every record ``member`` holds (its share session closed, it left the group);
        True if any."""
        changed = False
        for run in self.runs:
            if run.state == Q and run.member == member:
                self._settle(run, transition(run.state, Event.RELEASE))
                changed = True
        if changed:
            self._merge_all()
            self._advance()
        return changed

    def reset_start(self, offset: int) -> None:
        """Move the SPSO to ``offset`` (AlterShareGroupOffsets, the log start passing it): every
        run is forgotten; what lies above the new start is delivered anew."""
        self.start = self.end = offset
        self.runs = []
        self._next_deadline = NO_DEADLINE
        self._available = 0

    # -- persistence ------------------------------------------------------------------------

    def snapshot(self) -> list[StateBatch]:
        return [StateBatch(r.first, r.last, int(A if r.state == Q else r.state), r.count)
                for r in self.runs]

    def restore(self, start: int, batches: Iterable[StateBatch]) -> None:
        self.reset_start(start)
        for b in sorted(batches):
            if b.last_offset < self.end or b.first_offset > b.last_offset:
                continue
            first = max(b.first_offset, self.end)
            if first > self.end:
                self.runs.append(Run(self.end, first - 1, X, 0))
            try:
                state = RecordState(b.state)
            except ValueError:
                state = A
            if state == Q:
                state = A
            if state == A:
                self._available += b.last_offset - first + 1
            self._append(Run(first, b.last_offset, state, max(0, b.delivery_count)))
            self.end = b.last_offset + 1
        self._advance()

    # -- runs ------------------------------------------------------------------------------

    def _index(self, offset: int) -> int:
        """Index of the run holding ``offset`` (which must be in ``[start, end)``)."""
        return bisect_right(self.runs, offset, key=_by_first) - 1

    def _split(self, i: int, at: int) -> None:
        """Split run ``i`` so that a run starts at ``at`` (inside it)."""
        run = self.runs[i]
        self.runs.insert(i + 1, run.copy(at, run.last))
        run.last = at - 1

    def _isolate(self, first: int, last: int) -> int:
        """Split so that runs start at ``first`` and at ``last + 1``; the index of the first."""
        i = self._index(first)
        if self.runs[i].first < first:
            self._split(i, first)
            i += 1
        j = self._index(last)
        if self.runs[j].last > last:
            self._split(j, last + 1)
        return i

    def _merge_around(self, first: int, last: int) -> None:
        lo = max(0, self._index(first) - 1)
        hi = min(len(self.runs) - 1, self._index(last) + 1)
        self._merge_range(lo, hi)

    def _merge_all(self) -> None:
        self._merge_range(0, len(self.runs) - 1)

    def _merge_range(self, lo: int, hi: int) -> None:
        runs = self.runs
        i = lo
        while i < hi and i + 1 < len(runs):
            if runs[i].same(runs[i + 1]):
                runs[i].last = runs[i + 1].last
                del runs[i + 1]
                hi -= 1
            else:
                i += 1

    def _advance(self) -> None:
        runs = self.runs
        n = 0
        while n < len(runs) and runs[n].state in _FINISHED:
            n += 1
        if n:
            self.start = runs[n - 1].last + 1
            del runs[:n]
        if not runs:
            self.start = self.end


def _coalesce(got: list[Acquired]) -> list[Acquired]:
    out: list[Acquired] = []
    for a in got:
        if out and out[-1].last_offset + 1 == a.first_offset and \
                out[-1].delivery_count == a.delivery_count:
            out[-1] = Acquired(out[-1].first_offset, a.last_offset, a.delivery_count)
        else:
            out.append(a)
    return out
