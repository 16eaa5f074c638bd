"""What every client command shares: connection options, client config, output, errors.

Options every command takes (Kafka's names, kcat's short forms):

- ``-b/--bootstrap-server HOST:PORT`` (env ``MINIBROKER_BOOTSTRAP_SERVER``, default localhost:9092);
- ``--command-config FILE``: a client properties file (Kafka's ``--command-config``; env
  ``MINIBROKER_COMMAND_CONFIG``);
- ``-X KEY=VALUE``: any other client setting, after the file (validated like the client's config).

Errors print one line (``Error: ...``) and exit with status 1; bad usage exits with 2.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import click

from client.admin import Admin
from client.config import ADMIN, OPTIONS
from client.errors import BrokerConnectionError, KafkaClientError, UnknownTopicOrPartitionError
from protocol.properties import parse_properties

DEFAULT_BOOTSTRAP = "localhost:9092"
CONTEXT = {"help_option_names": ["-h", "--help"]}


def client_options(fn: Callable) -> Callable:
    """Add ``-b``, ``--command-config`` and ``-X``; the command receives one ``conf`` dict."""

    @click.option("-X", "--config", "extra_config", multiple=True, metavar="KEY=VALUE",
                  help="Client setting (Kafka key), repeatable; wins over --command-config.")
    @click.option("--command-config", "command_config", default=None, metavar="FILE",
                  type=click.Path(dir_okay=False, path_type=Path),
                  envvar="MINIBROKER_COMMAND_CONFIG", show_envvar=True,
                  help="Client properties file (Kafka keys, Java properties syntax).")
    @click.option("-b", "--bootstrap-server", "bootstrap", default=None,
                  envvar="MINIBROKER_BOOTSTRAP_SERVER", show_envvar=True,
                  help="host:port of a broker (comma-separated list); wins over "
                       f"--command-config.  [default: {DEFAULT_BOOTSTRAP}]")
    @functools.wraps(fn)
    def wrapper(*args: Any, bootstrap: str | None, command_config: Path | None,
                extra_config: Sequence[str], **kwargs: Any) -> Any:
        return fn(*args, conf=client_config(bootstrap, command_config, extra_config), **kwargs)


    return wrapper


def client_config(bootstrap: str | None, command_config: Path | None,
                  extra: Iterable[str]) -> dict[str, Any]:
    """The file, then ``-b`` (or its environment variable), then ``-X``."""
    config: dict[str, Any] = {"bootstrap.servers": DEFAULT_BOOTSTRAP}
    if command_config is not None:
        try:
            text = command_config.read_text(encoding="utf-8")
        except OSError as exc:
            raise click.BadParameter(f"cannot read {command_config}: {exc.strerror}",
                                     param_hint="--command-config") from None
        try:
            config.update(parse_properties(text, str(command_config)))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--command-config") from None
    if bootstrap:
        config["bootstrap.servers"] = bootstrap
    for item in extra:
        key, value = key_value(item, "-X")
        config[key.strip()] = value
    return config


def for_admin(conf: dict[str, Any]) -> dict[str, Any]:
    """The settings of ``conf`` an admin client takes (a --command-config file is shared by the
    producer, the consumer and the admin client of a command, as in Kafka's tools)."""
    return {k: v for k, v in conf.items()
            if k not in OPTIONS or ADMIN in OPTIONS[k].roles}


def key_value(item: str, hint: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=hint)
    return key, value


def with_defaults(conf: dict[str, Any], **settings: Any) -> dict[str, Any]:
    """``conf`` plus ``settings`` (Kafka keys with ``_`` for ``.``) the user did not set."""
    merged = dict(conf)
    for name, value in settings.items():
        key = name.replace("_", ".")
        if value is not None and key not in merged:
            merged[key] = value
    return merged


def friendly_errors(fn: Callable) -> Callable:
    """Client errors become one readable line and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BrokerConnectionError as exc:
            raise click.ClickException(str(exc)) from None
        except KafkaClientError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
        except OSError as exc:
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            raise click.exceptions.Exit(130) from None  # Ctrl-C: no traceback

    return wrapper


def format_option(fn: Callable) -> Callable:
    return click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
                        show_default=True, help="Output as an aligned table or JSON.")(fn)


def echo_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Columns padded to their widest cell, as Kafka's tools print them."""
    cells = [list(headers), *[["-" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=None, ensure_ascii=False))


def existing_partitions(admin: Admin, topic: str, partitions: Sequence[int] = (),
                        wait: float | None = None) -> list[int]:
    """The partitions of ``topic`` (or those of ``partitions`` it has); fails fast when no broker
    answers, and when the topic does not exist after ``wait`` seconds (None: at once)."""
    deadline = time.monotonic() + (wait or 0)
    while True:
        try:
            (described,) = admin.describe_topics([topic])
            break
        except UnknownTopicOrPartitionError:
            if time.monotonic() >= deadline:
                raise click.ClickException(f"topic {topic!r} does not exist") from None
            time.sleep(min(0.5, max(deadline - time.monotonic(), 0.01)))
    known = [p.partition for p in described.partitions]
    for partition in partitions:
        if partition not in known:
            raise click.ClickException(
                f"topic {topic!r} has no partition {partition} (it has {len(known)})"
            )
    return list(partitions) or known


class Progress:
    """One line on stderr per ``interval`` seconds, for long operations."""

    def __init__(self, interval: float, render: Callable[[float], str],
                 enabled: bool | None = None) -> None:
        self.interval = interval
        self.render = render
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.started = self.last = time.monotonic()

    def tick(self) -> None:
        now = time.monotonic()
        if self.enabled and now - self.last >= self.interval:
            self.last = now
            click.echo(self.render(now - self.started), err=True)


def ms_to_iso(ms: int) -> str | None:
    if ms is None or ms < 0:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def parse_datetime(text: str) -> int:
    """``2024-05-01T12:00:00[.123][Z|+02:00]`` or epoch milliseconds -> epoch ms (UTC when no
    zone is given, as Kafka's ``--to-datetime`` takes local time; we avoid the ambiguity)."""
    import datetime as dt

    if text.lstrip("-").isdigit():
        return int(text)
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO-8601 date-time or epoch ms") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp() * 1000)
