"""The ``minibroker`` command line."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import click
import trio

from broker import logsetup
from broker.config import BrokerConfig, ConfigError, build_config, read_properties
from broker.network.limits import ConnectionLimits
from broker.security.tls import listener_context
from client.cli.common import ToolRoot  # the one import of client/ besides the tools below

LOG_LEVELS = ["debug", "info", "warning", "error"]
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
log = logging.getLogger("minibroker")


@click.group(cls=ToolRoot, context_settings=CONTEXT)
@click.version_option(package_name="minibroker")
def main() -> None:
    """minibroker: a Kafka-compatible broker with idempotence and transactions.

    `minibroker serve` runs the broker; the other commands are client tools for a running one
    (like Kafka's bin/kafka-*.sh and kcat). Every command has -h. Shell completion:
    eval "$(_MINIBROKER_COMPLETE=bash_source minibroker)" (zsh_source, fish_source likewise).
    """


@main.command(context_settings=CONTEXT)
@click.argument("config_path", required=False, metavar="[server.properties]",
                type=click.Path(path_type=Path))
@click.option("--host", default=None, envvar="MINIBROKER_HOST", show_envvar=True,
              help="Address to listen on (0.0.0.0: every interface).  [default: 127.0.0.1]")
@click.option("--port", type=click.IntRange(0, 65535), default=None, envvar="MINIBROKER_PORT",
              show_envvar=True, help="TCP port (0 = any free port).  [default: 9092]")
@click.option("--data-dir", type=click.Path(path_type=Path), default=None,
              envvar="MINIBROKER_DATA_DIR", show_envvar=True,
              help="Where the log lives.  [default: ./data]")
@click.option("--advertised-host", default=None, envvar="MINIBROKER_ADVERTISED_HOST",
              show_envvar=True,
              help="Host name clients are told to connect to.  [default: --host, or this "
                   "machine's host name when --host is 0.0.0.0]")
@click.option("--advertised-port", type=click.IntRange(1, 65535), default=None,
              help="Port clients are told to connect to.  [default: --port]")
@click.option("--config", "config_file", type=click.Path(path_type=Path), default=None,
              envvar="MINIBROKER_CONFIG", show_envvar=True,
              help="A Kafka server.properties file (Kafka keys; flags override it); also "
                   "positional, as kafka-server-start.sh takes it.")
@click.option("--override", "overrides", multiple=True, metavar="KEY=VALUE",
              help="A property over the file's (kafka-server-start.sh's --override), "
                   "repeatable.")
@click.option("--flush", type=click.Choice(["always", "never"]), default=None,
              help="always: acks=all waits for fsync; never: page cache only.  [default: always]")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              envvar="MINIBROKER_METRICS_PORT", show_envvar=True,
              help="Serve Prometheus metrics on http://HOST:PORT/metrics (key metrics.port).")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), default="info",
              envvar="MINIBROKER_LOG_LEVEL", show_envvar=True, show_default=True)
@click.option("--log-format", type=click.Choice(logsetup.FORMATS), default="text",
              envvar="MINIBROKER_LOG_FORMAT", show_envvar=True, show_default=True,
              help="One line per event, as text or JSON.")
@click.option("--log-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              envvar="MINIBROKER_LOG_FILE", show_envvar=True,
              help="Also append every log line to this file (reopened when logrotate moves it).")
def serve(config_path, host, port, data_dir, advertised_host, advertised_port, config_file,
          overrides, flush, metrics_port, log_level, log_format, log_file) -> None:
    """Run the broker until SIGINT or SIGTERM (`minibroker serve config/server.properties`
    starts it as kafka-server-start.sh does; a KRaft file's controller keys are ignored with one
    warning line)."""
    if config_path is not None and config_file is not None and config_path != config_file:
        raise click.UsageError("give the config file once: positionally or with --config")
    config_file = config_file or config_path
    try:
        logsetup.configure(log_level, log_format, log_file=log_file)
    except OSError as exc:
        click.echo(f"minibroker: error: cannot open log file {log_file}: {exc.strerror}", err=True)
        sys.exit(2)
    try:
        properties = read_properties(config_file) if config_file else {}
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--override {item!r} is not KEY=VALUE")
            properties[key.strip()] = value
        config = build_config(
            properties,
            host=host,
            port=port,
            data_dir=data_dir,
            advertised_host=advertised_host,
            advertised_port=advertised_port,
            flush=flush,
            metrics_port=metrics_port,
        )
        if config.host in WILDCARD_HOSTS and config.advertised_host is None:
            # 127.0.0.1 would send every remote client to itself; Kafka advertises the host name.
            config = dataclasses.replace(config, advertised_host=socket.gethostname())
        _check_data_dir(config.data_dir)
        listener_context(config)  # the TLS key and certificates load, before anything starts
        ConnectionLimits.of(config)  # and the connection limits are valid (names resolve)
    except ConfigError as exc:
        click.echo(f"minibroker: error: {exc}", err=True)  # one line, no usage text
        sys.exit(2)
    run_broker(config)


def run_broker(config: BrokerConfig, crash_hook: Callable[[str], None] | None = None) -> None:
    """Serve ``config`` until SIGINT/SIGTERM, logging listeners, data dir and recovery first.

    ``crash_hook``: tests only (``tests/crash_broker.py``); the command passes none.
    """
    def listening(broker, port: int) -> None:
        recovered = broker.logs.recovered
        truncated = sum(r.truncated_bytes for r in recovered)
        unclean = sum(not r.clean for r in recovered)
        log.info(
            "data dir %s (%d topics, %d partitions recovered%s); flush=%s",
            config.data_dir.resolve(), len(broker.logs.topics()), len(recovered),
            f", {unclean} after an unclean shutdown, {truncated} bytes truncated" if unclean else "",
            config.log.flush,
        )
        adv_host, adv_port = broker.config.advertised
        log.info("listening on %s:%d (advertised %s:%d)", config.host, port, adv_host, adv_port)

    from broker.storage.lock import DataDirLocked

    try:
        trio.run(partial(run_until_signal, config, listening, crash_hook=crash_hook))
    except (DataDirLocked, OSError, BaseExceptionGroup) as exc:
        locked = _first(exc, DataDirLocked)
        if locked is not None:
            click.echo(f"minibroker: error: {locked}", err=True)
            sys.exit(2)
        error = _first(exc, OSError)
        if error is None:
            raise
        log.error("%s (%s:%s)", getattr(error, "strerror", None) or error, config.host, config.port)
        sys.exit(1)


@main.command("repair-log")
@click.option("--data-dir", type=click.Path(path_type=Path, exists=True, file_okay=False), required=True)
@click.option("--topic", required=True, help="e.g. __transaction_state")
@click.option("--partition", type=click.IntRange(0), required=True)
@click.option("--offset", type=click.IntRange(0), required=True, help="The first offset to remove.")
def repair_log(data_dir: Path, topic: str, partition: int, offset: int) -> None:
    """Offline repair: truncate one partition's log before OFFSET (the broker must be stopped).

    Everything from the batch holding OFFSET on is removed from the partition. Not needed to
    serve again: the broker skips a record of an internal log it cannot read (the log line names
    the partition and offset) and loads the rest.
    """
    from broker.log.manager import CLEAN_SHUTDOWN_FILE
    from broker.log.recovery import truncate_before
    from broker.storage.lock import DataDirLocked, lock_data_dir

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


async def run_until_signal(
    config: BrokerConfig, on_listening=None, *, crash_hook: Callable[[str], None] | None = None
) -> None:
    """Serve until SIGINT or SIGTERM, then shut down cleanly (flush, snapshots, clean marker).

    The signals are taken before the broker is built: a SIGTERM during a long recovery (what
    ``docker stop`` sends) ends the broker cleanly as soon as recovery is done, instead of
    killing it half-way. ``on_listening(broker, port)`` runs once the listeners are bound.
    """
    from broker.app import serve  # imports trio handlers; keep --help fast

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(serve, config, crash_hook=crash_hook,
                                       on_listening=on_listening, settle_collector=True))
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


def _first(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first ``kind`` inside what trio raised (a group from the serving nursery), if any."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first(inner, kind)
            if found is not None:
                return found
    return None


def _check_data_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise ConfigError(f"data dir {path} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"data dir {path}: {exc.strerror}") from None
    if not path.is_dir():
        raise ConfigError(f"data dir {path} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"data dir {path} is not writable")


def _add_tool_commands() -> None:
    """The client tools (topics, produce, consume, groups, transactions, ...), all on client/.

    This module is the composition root of the ``minibroker`` command, so it is the one place in
    broker/ that may import the client package (tests/unit/test_layering.py allows exactly this).
    """
    from client.cli import COMMANDS

    for command in COMMANDS:
        main.add_command(command)


_add_tool_commands()

if __name__ == "__main__":
    main()
