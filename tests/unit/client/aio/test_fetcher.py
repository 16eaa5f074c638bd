"""The consumer's fetcher against a scripted broker (no real broker): read_committed filtering of
aborted transactions, offsets left out by compaction, and records behind the last stable offset.
The consumer is assigned its partition (no group); time is trio's MockClock (autojump)."""

from __future__ import annotations

from typing import Any

from client.aio import AsyncConsumer
from protocol.api_keys import ApiKey
from protocol.records import encode_batch, encode_control_batch
from tests.unit.client.aio.scripted_broker import (
    Delay,
    Request,
    ScriptedBroker,
    with_last_offset_delta,
)

CONFIG: dict[str, Any] = {"bootstrap.servers": "broker0:9092", "fetch.max.wait.ms": 500}
TS = 1_700_000_000_000


def batch(base_offset: int, *values: bytes, producer_id: int = -1, transactional: bool = False
          ) -> bytes:
    return encode_batch(
        [(None, v, (), TS) for v in values],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        transactional=transactional,
    )


def marker(offset: int, producer_id: int, commit: bool) -> bytes:
    return encode_control_batch(producer_id=producer_id, producer_epoch=0, commit=commit,
                                coordinator_epoch=0, timestamp_ms=TS, base_offset=offset)


def fetch_answer(request: Request, records: bytes, *, high_watermark: int,
                 last_stable_offset: int, aborted: list[tuple[int, int]] | None = None
                 ) -> dict[str, Any]:
    (topic,) = request.body.topics
    (part,) = topic.partitions
    return {"responses": [{"topic": topic.topic, "partitions": [{
        "partition_index": part.partition, "error_code": 0,
        "high_watermark": high_watermark, "last_stable_offset": last_stable_offset,
        "log_start_offset": 0,
        "aborted_transactions": None if aborted is None else [
            {"producer_id": pid, "first_offset": first} for pid, first in aborted],
        "records": records,
    }]}]}


def fetch_offset(request: Request) -> int:
    return request.body.topics[0].partitions[0].fetch_offset


def consumer(broker: ScriptedBroker, clock: Any, **config: Any) -> AsyncConsumer:
    return AsyncConsumer({**CONFIG, **config}, clock=clock, open_stream=broker.open_stream)


async def poll_until(c: AsyncConsumer, count: int) -> list[Any]:
    records: list[Any] = []
    while len(records) < count:
        records.extend(await c.poll(1.0))
    return records


LOG_WITH_AN_ABORTED_TRANSACTION = (
    batch(0, b"aborted-1", b"aborted-2", producer_id=1, transactional=True)
    + batch(2, b"committed", producer_id=2, transactional=True)
    + marker(3, producer_id=1, commit=False)
    + marker(4, producer_id=2, commit=True)
    + batch(5, b"plain")
)


def serve_once(records: bytes, **answer: Any) -> Any:
    """Answer the first Fetch with ``records``; later ones wait fetch.max.wait.ms, empty."""

    def fetch(request: Request) -> Any:
        if fetch_offset(request) == 0:
            return fetch_answer(request, records, **answer)
        return Delay(0.5, fetch_answer(request, b"", **answer))

    return fetch


async def test_read_committed_drops_aborted_transactions_and_markers(broker, clock, autojump_clock):
    broker.topics["t"] = [0]
    broker.on(ApiKey.FETCH, serve_once(LOG_WITH_AN_ABORTED_TRANSACTION, high_watermark=6,
                                       last_stable_offset=6, aborted=[(1, 0)]))
    async with consumer(broker, clock) as c:
        c.assign([("t", 0)])
        c.seek(("t", 0), 0)
        records = await poll_until(c, 2)
        assert [(r.offset, r.value) for r in records] == [(2, b"committed"), (5, b"plain")]
        assert await c.position(("t", 0)) == 6
        assert await c.poll(1.0) == []
    assert broker.requests(ApiKey.FETCH)[0].body.isolation_level == 1
    assert fetch_offset(broker.requests(ApiKey.FETCH)[-1]) == 6  # past the markers


async def test_read_uncommitted_returns_every_data_record(broker, clock, autojump_clock):
    broker.topics["t"] = [0]
    broker.on(ApiKey.FETCH, serve_once(LOG_WITH_AN_ABORTED_TRANSACTION, high_watermark=6,
                                       last_stable_offset=6))
    async with consumer(broker, clock, **{"isolation.level": "read_uncommitted"}) as c:
        c.assign([("t", 0)])
        c.seek(("t", 0), 0)
        records = await poll_until(c, 4)
        assert [r.offset for r in records] == [0, 1, 2, 5]
    assert broker.requests(ApiKey.FETCH)[0].body.isolation_level == 0


async def test_offsets_removed_by_compaction_are_skipped(broker, clock, autojump_clock):
    """A compacted log has gaps: a batch whose last records were removed keeps its last offset
    delta (offsets 2-3 here), whole batches are gone (4-6). The consumer returns what is there
    and fetches on from after each batch's last offset, never from a removed one."""
    broker.topics["t"] = [0]
    first = with_last_offset_delta(batch(0, b"k0", b"k1"), 3)

    def fetch(request: Request) -> Any:
        offset = fetch_offset(request)
        if offset == 0:
            return fetch_answer(request, first, high_watermark=9, last_stable_offset=9)
        if offset == 4:
            return fetch_answer(request, batch(7, b"k7") + batch(8, b"k8"), high_watermark=9,
                                last_stable_offset=9)
        return Delay(0.5, fetch_answer(request, b"", high_watermark=9, last_stable_offset=9))

    broker.on(ApiKey.FETCH, fetch)
    async with consumer(broker, clock) as c:
        c.assign([("t", 0)])
        c.seek(("t", 0), 0)
        records = await poll_until(c, 4)
        assert [(r.offset, r.value) for r in records] == [
            (0, b"k0"), (1, b"k1"), (7, b"k7"), (8, b"k8")]
        assert await c.position(("t", 0)) == 9
        assert await c.poll(1.0) == []
    assert [fetch_offset(r) for r in broker.requests(ApiKey.FETCH)][:3] == [0, 4, 9]


async def test_records_past_the_last_stable_offset_wait_for_their_commit(
    broker, clock, autojump_clock
):
    """An open transaction holds the last stable offset at 2 (high watermark 5): read_committed
    reads up to it, reports it as the partition's end, and gets the transaction's records only
    once it commits - then past its COMMIT marker."""
    broker.topics["t"] = [0]
    committed = {"now": False}

    def fetch(request: Request) -> Any:
        offset = fetch_offset(request)
        if offset == 0:
            return fetch_answer(request, batch(0, b"a", b"b"), high_watermark=5,
                                last_stable_offset=2)
        if offset == 2 and committed["now"]:
            records = batch(2, b"t1", b"t2", producer_id=9, transactional=True) + marker(
                4, producer_id=9, commit=True)
            return fetch_answer(request, records, high_watermark=5, last_stable_offset=5)
        hw, lso = (5, 5) if committed["now"] else (5, 2)
        return Delay(0.5, fetch_answer(request, b"", high_watermark=hw, last_stable_offset=lso))

    broker.on(ApiKey.FETCH, fetch)
    async with consumer(broker, clock) as c:
        c.assign([("t", 0)])
        c.seek(("t", 0), 0)
        assert [r.offset for r in await poll_until(c, 2)] == [0, 1]
        assert c.highwater(("t", 0)) == 2  # read_committed: the LSO
        assert await c.poll(2.0) == []  # nothing past the LSO
        assert await c.position(("t", 0)) == 2
        committed["now"] = True
        records = await poll_until(c, 2)
        assert [(r.offset, r.value) for r in records] == [(2, b"t1"), (3, b"t2")]
        assert await c.position(("t", 0)) == 5
        assert c.highwater(("t", 0)) == 5
