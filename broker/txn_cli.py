"""``minibroker transactions list|describe``: the coordinator's view, over the wire.

Talks to a running broker with ListTransactions (66) and DescribeTransactions (65), as Kafka's
``kafka-transactions.sh`` does, and prints one table row per transactional id: state, producer
id, epoch, partitions of the current transaction, its age (for a transaction in progress) and its
timeout. Errors print one line and exit with status 1. ``transactions`` is a click group that
``broker/cli.py`` adds to ``minibroker``.

    minibroker transactions list --state Ongoing
    minibroker transactions describe my-transactional-id
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import click

from broker.blocking_client import BlockingClient, RequestError
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, error_name

DEFAULT_BOOTSTRAP = "localhost:9092"
HEADERS = ("TRANSACTIONAL ID", "STATE", "PRODUCER ID", "EPOCH", "PARTITIONS", "AGE", "TIMEOUT")
IN_PROGRESS = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})


def _bootstrap_option(fn: Callable) -> Callable:
    return click.option(
        "--bootstrap-server",
        "bootstrap",
        default=DEFAULT_BOOTSTRAP,
        show_default=True,
        envvar="MINIBROKER_BOOTSTRAP_SERVER",
        help="host:port of the broker.",
    )(fn)


def format_duration(ms: int) -> str:
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _row(state, now_ms: int) -> list[str]:
    partitions = ",".join(
        f"{t.topic}-{p}" for t in sorted(state.topics, key=lambda t: t.topic)
        for p in sorted(t.partitions)
    )
    in_progress = state.transaction_state in IN_PROGRESS and state.transaction_start_time_ms >= 0
    return [
        state.transactional_id,
        state.transaction_state,
        str(state.producer_id),
        str(state.producer_epoch),
        partitions or "-",
        format_duration(max(now_ms - state.transaction_start_time_ms, 0)) if in_progress else "-",
        format_duration(state.transaction_timeout_ms),
    ]


def render_table(rows: Sequence[Sequence[str]]) -> str:
    cells = [list(HEADERS), *[list(r) for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADERS))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def _describe(client: BlockingClient, transactional_ids: list[str]) -> list:
    response = client.request(
        ApiKey.DESCRIBE_TRANSACTIONS, 0,
        {"transactional_ids": transactional_ids, "tagged_fields": {}},
    )
    return list(response.transaction_states)


@click.group("transactions")
def transactions() -> None:
    """Inspect transactions on a running broker."""


@transactions.command("list")
@_bootstrap_option
@click.option("--state", "states", multiple=True, metavar="STATE",
              help="Only these states (Empty, Ongoing, PrepareCommit, ...), repeatable.")
@click.option("--producer-id", "producer_ids", type=int, multiple=True,
              help="Only these producer ids, repeatable.")
def list_transactions(bootstrap: str, states: tuple[str, ...], producer_ids: tuple[int, ...]) -> None:
    """Every transactional id the coordinator knows, with its current transaction."""
    try:
        with BlockingClient(bootstrap) as client:
            response = client.request(ApiKey.LIST_TRANSACTIONS, 0, {
                "state_filters": list(states), "producer_id_filters": list(producer_ids),
                "tagged_fields": {},
            })
            if response.error_code != ErrorCode.NONE:
                raise click.ClickException(f"ListTransactions failed: {error_name(response.error_code)}")
            if response.unknown_state_filters:
                raise click.ClickException(
                    "unknown transaction state(s): " + ", ".join(response.unknown_state_filters)
                )
            ids = [t.transactional_id for t in response.transaction_states]
            described = _describe(client, ids) if ids else []
    except RequestError as exc:
        raise click.ClickException(str(exc)) from None
    now = time.time_ns() // 1_000_000
    rows = [_row(s, now) for s in described if s.error_code == ErrorCode.NONE]
    click.echo(render_table(rows))


@transactions.command("describe")
@_bootstrap_option
@click.argument("transactional_id")
def describe_transaction(bootstrap: str, transactional_id: str) -> None:
    """One transactional id: state, producer id, epoch, partitions, age, timeout."""
    try:
        with BlockingClient(bootstrap) as client:
            (state,) = _describe(client, [transactional_id])
    except RequestError as exc:
        raise click.ClickException(str(exc)) from None
    if state.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
        raise click.ClickException(f"transactional id {transactional_id!r} not found")
    if state.error_code != ErrorCode.NONE:
        raise click.ClickException(
            f"DescribeTransactions {transactional_id!r} failed: {error_name(state.error_code)}"
        )
    click.echo(render_table([_row(state, time.time_ns() // 1_000_000)]))
