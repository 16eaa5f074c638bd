"""The ``minibroker`` command line."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import click
import trio

from broker.config import BrokerConfig, ConfigError, build_config, read_properties

LOG_LEVELS = ["debug", "info", "warning", "error"]


@click.group()
@click.version_option(package_name="minibroker")
def main() -> None:
    """minibroker: a Kafka-compatible broker with idempotence and transactions."""


@main.command()
@click.option("--host", default=None, help="Address to listen on.  [default: 127.0.0.1]")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="TCP port (0 = any free port).  [default: 9092]")
@click.option("--data-dir", type=click.Path(path_type=Path), default=None, help="Where the log lives.  [default: ./data]")
@click.option("--advertised-host", default=None, help="Host name clients are told to connect to.")
@click.option("--advertised-port", type=click.IntRange(1, 65535), default=None, help="Port clients are told to connect to.")
@click.option("--config", "config_file", type=click.Path(path_type=Path), default=None, help="A server.properties-style file (Kafka keys).")
@click.option("--flush", type=click.Choice(["always", "never"]), default=None, help="always: acks=all waits for fsync; never: page cache only.  [default: always]")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), default="info", show_default=True)
def serve(host, port, data_dir, advertised_host, advertised_port, config_file, flush, log_level) -> None:
    """Run the broker until SIGINT or SIGTERM."""
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        properties = read_properties(config_file) if config_file else {}
        config = build_config(
            properties,
            host=host,
            port=port,
            data_dir=data_dir,
            advertised_host=advertised_host,
            advertised_port=advertised_port,
            flush=flush,
        )
        _check_data_dir(config.data_dir)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    run_broker(config)


def run_broker(config: BrokerConfig, crash_hook: Callable[[str], None] | None = None) -> None:
    """Serve ``config`` until SIGINT/SIGTERM, with the start-up lines ``serve`` prints.

    ``crash_hook``: tests only (``tests/crash_broker.py``); the command passes none.
    """
    from broker.server import run_until_signal  # imports trio handlers; keep --help fast

    def listening(broker, port: int) -> None:
        recovered = broker.logs.recovered
        truncated = sum(r.truncated_bytes for r in recovered)
        unclean = sum(not r.clean for r in recovered)
        click.echo(
            f"minibroker: data dir {config.data_dir.resolve()} "
            f"({len(broker.logs.topics())} topics, {len(recovered)} partitions recovered"
            f"{f', {unclean} after an unclean shutdown, {truncated} bytes truncated' if unclean else ''}); "
            f"flush={config.log.flush}",
            err=True,
        )
        adv_host, adv_port = broker.config.advertised
        click.echo(
            f"minibroker: listening on {config.host}:{port} (advertised {adv_host}:{adv_port})",
            err=True,
        )

    from broker.data_dir_lock import DataDirLocked

    try:
        trio.run(partial(run_until_signal, config, listening, crash_hook=crash_hook))
    except DataDirLocked as exc:
        click.echo(f"minibroker: error: {exc}", err=True)
        sys.exit(2)
    except (OSError, BaseExceptionGroup) as exc:
        error = _first_os_error(exc)
        if error is None:
            raise
        click.echo(f"minibroker: error: {error.strerror or error} ({config.host}:{config.port})", err=True)
        sys.exit(1)


@main.command("repair-log")
@click.option("--data-dir", type=click.Path(path_type=Path, exists=True, file_okay=False), required=True)
@click.option("--topic", required=True, help="e.g. __transaction_state")
@click.option("--partition", type=click.IntRange(0), required=True)
@click.option("--offset", type=click.IntRange(0), required=True, help="The first offset to remove.")
def repair_log(data_dir: Path, topic: str, partition: int, offset: int) -> None:
    """Offline repair: truncate one partition's log before OFFSET (the broker must be stopped).

    For a record the broker reported as undecodable at start (the log line names the partition
    and offset). Everything from that batch on is removed from the partition.
    """
    from broker.data_dir_lock import DataDirLocked, lock_data_dir
    from broker.log.manager import CLEAN_SHUTDOWN_FILE
    from broker.log.recovery import truncate_before

    directory = data_dir / f"{topic}-{partition}"
    if not directory.is_dir():
        raise click.UsageError(f"no partition directory {directory}")
    try:
        lock = lock_data_dir(data_dir)
    except DataDirLocked as exc:
        click.echo(f"minibroker: {exc}", err=True)
        sys.exit(2)
    try:
        # The next start must rescan (rebuild indexes and producer state).
        (data_dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
        end = truncate_before(directory, offset)
    finally:
        lock.release()
    click.echo(f"minibroker: {topic}-{partition} now ends at offset {end}")


def _first_os_error(exc: BaseException) -> OSError | None:
    """The OSError (bind failure, unusable disk) inside what trio raised, if any."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_os_error(inner)
            if found is not None:
                return found
    return None


def _check_data_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"data dir {path}: {exc.strerror}") from None
    if not path.is_dir():
        raise ConfigError(f"data dir {path} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"data dir {path} is not writable")


def _add_tool_commands() -> None:
    """The client tools (topics, produce, consume, groups) and the transactions admin commands.

    This module is the composition root of the ``minibroker`` command, so it is the one place in
    broker/ that may import the client package (tests/unit/test_layering.py allows exactly this).
    """
    from broker.txn_cli import transactions
    from client.cli import COMMANDS

    for command in COMMANDS:
        main.add_command(command)
    main.add_command(transactions)


_add_tool_commands()

if __name__ == "__main__":
    main()
