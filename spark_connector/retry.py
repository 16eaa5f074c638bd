"""Riding through broker restarts and short outages.

Spark's Kafka connector inherits this from Kafka's clients, whose calls wait for the cluster up to
``default.api.timeout.ms`` (60 s). Our client fails a call at once when no broker answers, so every
call the connector makes to the broker goes through :func:`call_with_retries`: errors the client
marks retriable (no broker reachable, a broken connection, a timeout, a coordinator moving) are
retried with a doubling backoff until ``timeout_s`` has passed; other errors are raised at once,
except that ``attempts`` extra tries (Spark's ``fetchOffset.numRetries``, with ``interval_s``
between them) may be granted to any client error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from client.errors import KafkaClientError

log = logging.getLogger("spark_connector.retry")

T = TypeVar("T")

# Kafka's default.api.timeout.ms: how long a client call may wait for the cluster.
DEFAULT_TIMEOUT_S = 60.0
FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0  # Kafka's reconnect.backoff.max.ms


def call_with_retries(
    fn: Callable[[], T],
    what: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    attempts: int = 0,
    interval_s: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``fn()``, retried as the module docstring says; the last error is raised unchanged."""
    deadline = clock() + timeout_s
    delay = FIRST_BACKOFF_S
    extra = attempts
    while True:
        try:
            return fn()
        except KafkaClientError as exc:
            if exc.retriable and clock() + delay <= deadline:
                log.info("%s failed (%s); retrying in %.1f s", what, exc, delay)
                sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
                continue
            if extra > 0:
                extra -= 1
                log.info("%s failed (%s); %d more attempt(s)", what, exc, extra + 1)
                sleep(interval_s)
                continue
            raise
