"""The client's one retry policy: exponential backoff with jitter, and the loop that applies it.

Kafka's semantics (``org.apache.kafka.common.utils.ExponentialBackoff``, KIP-580): the n-th retry
(n from 0) waits ``retry.backoff.ms * 2**n``, capped at ``retry.backoff.max.ms``, times a random
factor in [0.8, 1.2) (20% jitter, so that clients that failed together do not retry together),
and never more than the cap. With ``retry.backoff.max.ms`` <= ``retry.backoff.ms`` every wait is
``retry.backoff.max.ms`` exactly (Kafka: no exponent and no jitter then).

``retry`` runs a call until it returns, retrying only retriable ``KafkaClientError``\\ s, until the
call's own deadline (its ``timeout``): a retry that would start after the deadline is not made and
the last error is raised inside a ``KafkaTimeoutError``. CONCURRENT_TRANSACTIONS (the previous
EndTxn's markers are still being written) is retried after 20 ms, as Kafka's producer does
(``TransactionManager``'s ADD_PARTITIONS_RETRY_BACKOFF_MS), not after the backoff.

Loops with no deadline of their own (the sender's batches, the fetch manager, joining a group)
take their waits from the same ``Backoff``, counting their consecutive failures.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from client.config import ClientConfig
from client.errors import ConcurrentTransactionsError, KafkaClientError, KafkaTimeoutError

log = logging.getLogger("client.retry")

T = TypeVar("T")

MULTIPLIER = 2
JITTER = 0.2
CONCURRENT_TRANSACTIONS_BACKOFF = 0.02  # seconds


class Backoff:
    """``retry.backoff.ms`` / ``retry.backoff.max.ms`` (see the module docstring). ``rng`` is the
    source of jitter, a function returning a float in [0, 1) (tests pass their own)."""

    __slots__ = ("initial_ms", "max_ms", "_exp_max", "_random")

    def __init__(
        self, initial_ms: int, max_ms: int, *, rng: Callable[[], float] = random.random
    ) -> None:
        self.initial_ms = min(initial_ms, max_ms)
        self.max_ms = max_ms
        self._exp_max = (
            math.log(max_ms / max(initial_ms, 1)) / math.log(MULTIPLIER)
            if max_ms > initial_ms
            else 0.0
        )
        self._random = rng

    @classmethod
    def from_config(cls, config: ClientConfig) -> Backoff:
        return cls(config["retry.backoff.ms"], config["retry.backoff.max.ms"])

    def ms(self, attempts: int) -> int:
        """The wait before retry number ``attempts`` (0: the first retry), in milliseconds."""
        if self._exp_max == 0:
            return self.initial_ms
        term = self.initial_ms * MULTIPLIER ** min(attempts, self._exp_max)
        factor = 1 - JITTER + 2 * JITTER * self._random()
        return min(int(factor * term), self.max_ms)

    def seconds(self, attempts: int) -> float:
        return self.ms(attempts) / 1000

    def __repr__(self) -> str:
        return f"Backoff({self.initial_ms} ms .. {self.max_ms} ms)"


async def retry(
    attempt: Callable[[], Awaitable[T]],
    *,
    backoff: Backoff,
    timeout: float,
    what: str,
    on_error: Callable[[KafkaClientError], None] | None = None,
    timeout_message: str | None = None,
) -> T:
    """``await attempt()`` until it returns; retriable errors are retried after the backoff
    until ``timeout`` seconds have passed, anything else is raised at once.

    ``on_error(exc)`` sees each retriable error before the wait (forget a coordinator, ask for
    metadata). When the deadline comes, ``KafkaTimeoutError(timeout_message or "<what> did not
    succeed within <timeout> s: <last error>")`` is raised from the last error."""
    deadline = trio.current_time() + timeout
    attempts = 0
    while True:
        try:
            return await attempt()
        except KafkaClientError as exc:
            if not exc.retriable:
                raise
            if on_error is not None:
                on_error(exc)
            if isinstance(exc, ConcurrentTransactionsError):
                delay = CONCURRENT_TRANSACTIONS_BACKOFF
            else:
                delay = backoff.seconds(attempts)
                attempts += 1
            if trio.current_time() + delay > deadline:
                raise KafkaTimeoutError(
                    timeout_message or f"{what} did not succeed within {timeout:.1f} s: {exc}"
                ) from exc
            log.debug("%s: %s; retrying in %.0f ms", what, exc, delay * 1000)
            await trio.sleep(delay)
