"""The client's one retry policy (client/retry.py): Kafka's ExponentialBackoff and the loop that
retries a call until its deadline. Time is trio's MockClock (autojump), so waits are exact."""

from __future__ import annotations

import pytest
import trio

from client.config import producer_config
from client.errors import (
    BrokerConnectionError,
    ConcurrentTransactionsError,
    InvalidTxnStateError,
    KafkaTimeoutError,
)
from client.retry import Backoff, retry


def test_waits_double_from_retry_backoff_ms_up_to_the_maximum() -> None:
    backoff = Backoff(100, 1000, rng=lambda: 0.5)  # 0.5: the middle of the jitter, factor 1.0
    assert [backoff.ms(n) for n in range(7)] == [100, 200, 400, 800, 1000, 1000, 1000]


def test_jitter_is_twenty_percent_either_way_and_never_passes_the_maximum() -> None:
    low = Backoff(100, 1000, rng=lambda: 0.0)
    high = Backoff(100, 1000, rng=lambda: 0.999999)
    assert [low.ms(n) for n in range(5)] == [80, 160, 320, 640, 800]
    assert [high.ms(n) for n in range(5)] == [119, 239, 479, 959, 1000]


def test_a_maximum_not_above_the_initial_wait_means_a_constant_wait_without_jitter() -> None:
    """Kafka's ExponentialBackoff: expMax 0 returns the initial interval (capped) as is."""
    assert [Backoff(100, 100, rng=lambda: 0.0).ms(n) for n in range(3)] == [100, 100, 100]
    assert [Backoff(500, 200, rng=lambda: 0.0).ms(n) for n in range(3)] == [200, 200, 200]
    assert Backoff(0, 0).ms(5) == 0


def test_the_settings_come_from_the_client_config() -> None:
    backoff = Backoff.from_config(
        producer_config({"bootstrap.servers": "127.0.0.1:9", "retry.backoff.ms": 50,
                         "retry.backoff.max.ms": 400})
    )
    assert (backoff.initial_ms, backoff.max_ms) == (50, 400)
    assert Backoff.from_config(producer_config({"bootstrap.servers": "h:1"})).max_ms == 1000


class Script:
    """A call that fails with the given errors, one per attempt, then returns "done"; it notes
    the (trio) time of each attempt."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.times: list[float] = []

    async def __call__(self) -> str:
        self.times.append(trio.current_time())
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def gaps(times: list[float]) -> list[int]:
    return [round((b - a) * 1000) for a, b in zip(times, times[1:], strict=False)]


async def test_retriable_errors_are_retried_after_the_growing_backoff(autojump_clock) -> None:
    call = Script(*(BrokerConnectionError("down") for _ in range(4)))
    seen = []
    result = await retry(call, backoff=Backoff(100, 1000, rng=lambda: 0.5), timeout=10,
                         what="Call", on_error=seen.append)
    assert result == "done"
    assert gaps(call.times) == [100, 200, 400, 800]
    assert len(seen) == 4


async def test_other_errors_are_raised_at_once(autojump_clock) -> None:
    call = Script(InvalidTxnStateError("no"))
    with pytest.raises(InvalidTxnStateError):
        await retry(call, backoff=Backoff(100, 1000), timeout=10, what="Call")
    assert len(call.times) == 1


async def test_the_deadline_comes_from_the_calls_timeout(autojump_clock) -> None:
    """No retry starts after the deadline: the last error is raised inside a timeout error."""
    call = Script(*(BrokerConnectionError(f"down {n}") for n in range(100)))
    start = trio.current_time()
    with pytest.raises(KafkaTimeoutError, match=r"Call did not succeed within 1.0 s: down 3") as info:
        await retry(call, backoff=Backoff(100, 1000, rng=lambda: 0.5), timeout=1.0, what="Call")
    assert isinstance(info.value.__cause__, BrokerConnectionError)
    assert gaps(call.times) == [100, 200, 400]  # the next wait (800 ms) would pass the deadline
    assert trio.current_time() - start == pytest.approx(0.7)


async def test_a_timeout_message_replaces_the_default(autojump_clock) -> None:
    call = Script(*(BrokerConnectionError("down") for _ in range(100)))
    with pytest.raises(KafkaTimeoutError, match="^Topic t not present"):
        await retry(call, backoff=Backoff(100, 1000), timeout=0.5, what="x",
                    timeout_message="Topic t not present in metadata after 500 ms.")


async def test_concurrent_transactions_is_retried_after_20_ms(autojump_clock) -> None:
    """Kafka's producer retries CONCURRENT_TRANSACTIONS (the previous EndTxn's markers are being
    written) after 20 ms, and that does not count as a backoff step."""
    call = Script(
        ConcurrentTransactionsError("busy"),
        ConcurrentTransactionsError("busy"),
        BrokerConnectionError("down"),
    )
    await retry(call, backoff=Backoff(100, 1000, rng=lambda: 0.5), timeout=10, what="EndTxn")
    assert gaps(call.times) == [20, 20, 100]
