"""What every client command shares: connection options, client config, output, errors.

Options every command takes (Kafka's names, kcat's short forms):

- ``-b/--bootstrap-server HOST:PORT`` (env ``MINIBROKER_BOOTSTRAP_SERVER``, default localhost:9092);
- ``--command-config FILE``: a client properties file (Kafka's ``--command-config``; env
  ``MINIBROKER_COMMAND_CONFIG``);
- ``-X KEY=VALUE`` (Kafka's ``--command-property``): any other client setting, after the file
  (validated like the client's config).

Errors print one line (``Error: ...``) and exit with status 1; bad usage exits with 2.

Kafka's shapes are accepted where ours differ (``ToolRoot``): ``topics --create --topic T`` is
``topics create T``, an id may be given positionally or with the Kafka tool's option
(``name_argument``), an unknown option gets a did-you-mean naming the command that has it, and
Kafka's space-separated ``--producer-props a=1 b=2`` works.
"""

from __future__ import annotations

import difflib
import functools
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from client.admin import Admin
from client.config import ADMIN, OPTIONS
from client.errors import BrokerConnectionError, KafkaClientError, UnknownTopicOrPartitionError
from protocol.properties import parse_properties

DEFAULT_BOOTSTRAP = "localhost:9092"
CONTEXT = {"help_option_names": ["-h", "--help"]}


def client_options(fn: Callable | None = None, *, role: str | None = None) -> Callable:
    """Add ``-b``, ``--command-config`` and ``-X``; the command receives one ``conf`` dict.

    ``role`` ("producer" or "consumer") adds the console tools' names of the same options:
    ``--producer-property`` / ``--producer.config`` (or the consumer's)."""
    if fn is None:
        return functools.partial(client_options, role=role)
    property_names = ["-X", "--command-property"]
    file_names = ["--command-config"]
    if role is not None:
        property_names.append(f"--{role}-property")
        file_names.append(f"--{role}.config")

    @click.option(*property_names, "extra_config", multiple=True, metavar="KEY=VALUE",
                  help="Client setting (Kafka key), repeatable; wins over --command-config.")
    @click.option(*file_names, "command_config", default=None, metavar="FILE",
                  type=click.Path(dir_okay=False, path_type=Path),
                  envvar="MINIBROKER_COMMAND_CONFIG", show_envvar=True,
                  help="Client properties file (a Java client's: Kafka keys, JAAS lines, PEM "
                       "stores).")
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
        except BrokerConnectionError as exc:  # (a plaintext client at a TLS listener is told)
            raise click.ClickException(str(exc)) from None
        except BrokenPipeError:
            stdout_closed()
        except KafkaClientError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
        except OSError as exc:
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            raise click.exceptions.Exit(130) from None  # Ctrl-C: no traceback

    return wrapper


def stdout_closed() -> None:
    """The reader of stdout went away (``minibroker topics list | head -1``): exit quietly, as a
    tool killed by SIGPIPE does (status 141), with stdout pointed at /dev/null so that the
    interpreter's last flush does not complain either."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # (no real stdout: nothing to silence)
        pass
    raise click.exceptions.Exit(141)


def format_option(fn: Callable) -> Callable:
    return click.option("--format", "fmt", type=click.Choice(["text", "table", "json"]),
                        default="text", show_default=True,
                        help="text: the Kafka tool's output (where the command stands for one); "
                             "table: our aligned table, where it differs; json.")(fn)


def echo_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Columns padded to their widest cell, as Kafka's tools print them."""
    cells = [list(headers), *[["-" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def echo_deleted(names: Iterable[str], results: Mapping[str, BaseException | None],
                 deleted: str, cannot: str) -> None:
    """Kafka's tools' line for each of ``names`` deleted (``deleted`` formatted with the name),
    then the first failure as the command's error (``cannot``: its start; exit status 1)."""
    failed = {name: error for name, error in results.items() if error is not None}
    for name in names:
        if name not in failed:
            click.echo(deleted.format(name))
    if failed:
        name, error = next(iter(failed.items()))
        raise click.ClickException(f"{cannot.format(name)}: {type(error).__name__}: {error}")


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


# -- Kafka's shapes ---------------------------------------------------------------------------------


def tool(group: click.Group, name: str, *, formats: bool = False,
         role: str | None = None) -> Callable[[Callable], click.Command]:
    """A client tool ``group name``: connection options, one-line errors (and ``--format``)."""

    def decorate(fn: Callable) -> click.Command:
        fn = client_options(friendly_errors(fn), role=role)
        if formats:
            fn = format_option(fn)
        command = group.command(name, context_settings=CONTEXT)(fn)
        # The command's own options first in --help, the shared ones after.
        shared = {"extra_config", "command_config", "bootstrap", "fmt"}
        command.params = ([p for p in command.params if p.name not in shared]
                          + [p for p in command.params if p.name in shared])
        return command

    return decorate


def name_argument(dest: str, *option_names: str, multiple: bool = False, required: bool = True,
                  metavar: str = "NAME", help: str = "") -> Callable[[Callable], Callable]:
    """An id given positionally (ours, kcat's) or with the Kafka tool's option (``--group G``,
    ``--topic T``, ``--transactional-id ID``); the command receives it as ``dest`` (a tuple when
    ``multiple``)."""
    flag = option_names[-1]

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = [*kwargs.pop(dest + "_arg"), *kwargs.pop(dest + "_opt")]
            if required and not values:
                raise click.UsageError(f"missing {metavar}: give it as an argument or with {flag}")
            if multiple:
                kwargs[dest] = tuple(values)
            elif len(values) > 1:
                raise click.UsageError(f"one {metavar} only (as an argument or with {flag})")
            else:
                kwargs[dest] = values[0] if values else None
            return fn(*args, **kwargs)

        wrapper = click.option(*option_names, dest + "_opt", multiple=True, metavar=metavar,
                               help=help or f"The same as the {metavar} argument (Kafka's "
                                            f"form).")(wrapper)
        return click.argument(dest + "_arg", nargs=-1, metavar=f"[{metavar}]"
                              + ("..." if multiple else ""))(wrapper)

    return decorate


# kafka-*.sh action flags -> our subcommand, per command group (`topics --create` = `topics
# create`). kafka-transactions.sh already uses subcommands.
ACTIONS: dict[str, dict[str, str]] = {
    "topics": {"--create": "create", "--list": "list", "--describe": "describe",
               "--delete": "delete", "--alter": "alter"},
    "groups": {"--list": "list", "--describe": "describe", "--delete": "delete",
               "--reset-offsets": "reset-offsets"},
    "share-groups": {"--list": "list", "--describe": "describe", "--delete": "delete",
                     "--reset-offsets": "reset-offsets", "--delete-offsets": "delete-offsets"},
    "configs": {"--describe": "describe", "--alter": "alter"},
    "acls": {"--add": "add", "--list": "list", "--remove": "remove"},
    "log-dirs": {"--describe": None},  # kafka-log-dirs.sh --describe: the command itself
}
# Options of Kafka's tools that take several space-separated values (nargs +).
VARIADIC = frozenset({"--producer-props"})
# Options whose value Kafka's tool lets out (`groups --list --state`): given "" when it is.
OPTIONAL_VALUE = {("groups", "list"): frozenset({"--state"}),
                  ("share-groups", "list"): frozenset({"--state"})}

# Kafka 4.4's options (the tools' --help) that this command line refuses, with the reason printed
# in place of "No such option": per command (its group for the tools with actions). The others
# are accepted (tests/integration/test_cli_kafka_options.py walks Kafka's lists).
_ONE_NODE = "one broker here: there is no other node, replica or controller to name"
_PRODUCER_SETTING = ("a producer setting of Kafka's older console producer: give it as "
                     "--producer-property KEY=VALUE (or -X)")
_CONSUMER_SETTING = "a consumer setting: give it as --consumer-property KEY=VALUE (or -X)"
_NO_QUOTAS = "this broker has no client quotas or dynamic user/client/IP configs"
_CONTROLLER = "there is no controller quorum: use --bootstrap-server"
REFUSED: dict[str, dict[str, str]] = {
    "topics": {
        "--replica-assignment": _ONE_NODE + " (every replica is node 0)",
        "--topic-id": "this broker has no topic ids (Metadata answers the zero id): use --topic",
        "--delete-config": "not with --bootstrap-server in kafka-topics.sh either: use "
                           "`configs alter --topic T --delete-config K`",
    },
    "produce": {
        "--batch-size": _PRODUCER_SETTING + " (batch.size)",
        "--compression-codec": _PRODUCER_SETTING + " (compression.type)",
        "--max-block-ms": _PRODUCER_SETTING + " (max.block.ms)",
        "--max-memory-bytes": _PRODUCER_SETTING + " (buffer.memory)",
        "--max-partition-memory-bytes": _PRODUCER_SETTING + " (batch.size)",
        "--message-send-max-retries": _PRODUCER_SETTING + " (retries)",
        "--metadata-expiry-ms": _PRODUCER_SETTING + " (metadata.max.age.ms)",
        "--request-required-acks": "use --acks (or --producer-property acks=...)",
        "--request-timeout-ms": _PRODUCER_SETTING + " (request.timeout.ms)",
        "--retry-backoff-ms": _PRODUCER_SETTING + " (retry.backoff.ms)",
        "--socket-buffer-size": _PRODUCER_SETTING + " (send.buffer.bytes)",
        "--sync": "every send is acknowledged before the command ends; for one at a time use "
                  "--producer-property linger.ms=0",
        "--timeout": _PRODUCER_SETTING + " (linger.ms)",
        "--line-reader": "only Kafka's LineMessageReader is implemented (its properties: "
                         "--property)",
        "--reader-config": "give the reader's properties with --property KEY=VALUE",
    },
    "consume": {
        "--enable-systest-events": "Kafka's system-test output is not implemented",
        "--include": "one topic per command here (--topic); a pattern subscription is not "
                     "implemented",
        "--key-deserializer": "keys are printed as UTF-8 text (--format json: base64 for "
                              "other bytes)",
        "--value-deserializer": "values are printed as UTF-8 text (--format json: base64 for "
                                "other bytes)",
        "--skip-message-on-error": "printing a record cannot fail here (no deserializer)",
    },
    "groups": {
        "--by-duration": "use --to-datetime (a time) or --shift-by (a count)",
        "--delete-offsets": "not implemented: `groups delete` removes the whole group",
        "--export": "the plan is printed; --format json gives it as JSON",
        "--from-file": "not implemented: give --to-offset per --topic T:P",
        "--offsets": "the offsets view is the default of describe (without --members/--state)",
        "--timeout": "not needed: each request has the client's own timeout (-X "
                     "request.timeout.ms=...)",
        "--to-current": "not implemented: a reset to the committed offset changes nothing",
        "--type": "only classic consumer groups exist here",
        "--validate-regex": "regular-expression subscriptions are not implemented",
    },
    "configs": {
        "--add-config-file": "give the configs with --add-config k=v,k=v",
        "--bootstrap-controller": _CONTROLLER,
        "--broker-defaults": "this broker keeps no dynamic broker defaults (--entity-default "
                             "shows the empty list)",
        "--broker-logger": "log levels are set at start (--log-level)",
        "--client": _NO_QUOTAS, "--client-defaults": _NO_QUOTAS, "--ip": _NO_QUOTAS,
        "--ip-defaults": _NO_QUOTAS, "--user": _NO_QUOTAS + " (SCRAM users: `minibroker users`)",
        "--user-defaults": _NO_QUOTAS,
        "--client-metrics": "client metrics subscriptions (KIP-714) are not implemented",
        "--group": "group configs (KIP-848's) are not implemented",
    },
    "acls": {
        "--bootstrap-controller": _CONTROLLER,
        "--consumer": "not implemented: add the Read ACLs on the topic and the group",
        "--producer": "not implemented: add the Write (and Describe) ACLs on the topic",
        "--idempotent": "not implemented: add the Write ACL on the topic",
        "--delegation-token": "delegation tokens are not implemented",
        "--user-principal": "delegation tokens are not implemented",
        "--force": "nothing is asked: removing ACLs needs no confirmation here",
    },
    "perf produce": {
        "--key-distribution": "records are sent without keys",
        "--record-key-range": "records are sent without keys",
        "--payload-delimiter": "use --record-size (random payloads)",
        "--payload-file": "use --record-size (random payloads)",
        "--payload-monotonic": "use --record-size (random payloads)",
        "--print-metrics": "the client's metrics are not printed",
        "--random-seed": "use --record-size (random payloads)",
        "--warmup-records": "not implemented: every record counts",
        "--transaction-duration-ms": "not implemented: one transaction for the run "
                                     "(--transactional-id)",
    },
    "perf consume": {
        "--print-metrics": "the client's metrics are not printed",
        "--date-format": "the summary prints Kafka's default date format",
        "--fetch-size": _CONSUMER_SETTING + " (fetch.max.bytes)",
        "--socket-buffer-size": _CONSUMER_SETTING + " (receive.buffer.bytes)",
        "--from-latest": "the run reads from the beginning",
        "--group": "the run reads without a group",
        "--hide-header": "the header is always printed",
        "--include": "one topic per run (--topic)",
        "--num-records": "use --messages",
        "--show-detailed-stats": "use --reporting-interval",
    },
    "features": {
        "--bootstrap-controller": _CONTROLLER,
    },
    "transactions": {},
    "share-groups": {},
}
# Kafka's subcommands that are refused, with the reason.
REFUSED_COMMANDS: dict[str, dict[str, str]] = {
    "transactions": {
        "forceTerminateTransaction": "use `transactions abort --transactional-id ID`",
    },
    "features": {
        "upgrade": "a feature's level is set in server.properties (transaction.version)",
        "downgrade": "a feature's level is set in server.properties (transaction.version)",
        "disable": "a feature's level is set in server.properties (transaction.version)",
        "version-mapping": "this broker has no metadata.version (no KRaft)",
        "feature-dependencies": "this broker has one feature, transaction.version",
    },
}


# Kafka's tools with subcommands take the connection options before the subcommand
# (`kafka-transactions.sh --bootstrap-server B list`); ours take them after it.
SUBCOMMAND_TOOLS = frozenset({"transactions", "features"})
_CONNECTION = frozenset({"-b", "--bootstrap-server", "--command-config", "-X",
                         "--command-property"})


def _connection_after_subcommand(args: list[str], first: int) -> list[str]:
    """``transactions --bootstrap-server B list ...`` -> ``transactions list --bootstrap-server
    B ...``: the connection options between the tool and its subcommand moved after it."""
    moved: list[str] = []
    i = first + 1
    while i < len(args) and args[i].startswith("-"):
        name = args[i].split("=", 1)[0]
        if name not in _CONNECTION:
            return args  # (another option first, --help say: left to the parser)
        if "=" in args[i] or i + 1 == len(args):
            moved.append(args[i])
            i += 1
        else:
            moved += args[i:i + 2]
            i += 2
    if not moved or i == len(args):
        return args
    return [*args[:first + 1], args[i], *moved, *args[i + 1:]]


def kafka_shapes(args: list[str], groups: Iterable[str]) -> list[str]:
    """``args`` with Kafka's action flags turned into our subcommands and variadic options
    repeated: ``topics --bootstrap-server b --create --topic t`` -> ``topics create
    --bootstrap-server b --topic t``; ``--producer-props a=1 b=2`` -> ``--producer-props a=1
    --producer-props b=2``."""
    args = list(args)
    if args and args[0] in groups and "--version" in args[1:]:
        return ["--version"]  # kafka-topics.sh --version: the version of the whole tool
    first = next((i for i, token in enumerate(args) if not token.startswith("-")), None)
    if first is not None and args[first] in SUBCOMMAND_TOOLS and args[first] in groups:
        args = _connection_after_subcommand(args, first)
    for i, token in enumerate(args[first:first + 1] if first is not None else [], start=first or 0):
        if token in ACTIONS and token in groups:
            rest = args[i + 1:]
            actions = ACTIONS[token]
            found = [a for a in rest if a in actions]
            if len(found) == 1 and (not rest or rest[0] not in actions.values()):
                rest.remove(found[0])
                sub = actions[found[0]]
                args = [*args[:i + 1], *([sub] if sub else []), *rest]
            break
    if first is not None and first + 1 < len(args):
        optional = OPTIONAL_VALUE.get((args[first], args[first + 1]), frozenset())
        for j in range(len(args) - 1, first + 1, -1):
            if args[j] in optional and (j + 1 == len(args) or args[j + 1].startswith("-")):
                args.insert(j + 1, "")
    out: list[str] = []
    current: str | None = None  # the variadic option whose values are being read
    for token in args:
        if token in VARIADIC:
            current = token
        elif current is not None and "=" in token and not token.startswith("-"):
            if out[-1] != current:
                out.append(current)  # a further value: repeat the option
        else:
            current = None
        out.append(token)
    return out


def _option_names(command: click.Command) -> list[str]:
    return [name for p in command.params if isinstance(p, click.Option)
            for name in (*p.opts, *p.secondary_opts)]


def _commands(group: click.Group, prefix: str = "") -> Iterable[tuple[str, click.Command]]:
    for name, command in sorted(group.commands.items()):
        path = f"{prefix}{name}"
        yield path, command
        if isinstance(command, click.Group):
            yield from _commands(command, path + " ")


def option_hint(root: click.Group, command: click.Command | None, option: str) -> str:
    """A did-you-mean for an unknown ``option``: a close option of the same command, else the
    commands that have it."""
    own = _option_names(command) if command is not None else []
    close = difflib.get_close_matches(option, own, n=2, cutoff=0.6)
    if close:
        return f"did you mean {' or '.join(close)}?"
    having = [path for path, cmd in _commands(root) if option in _option_names(cmd)]
    if having:
        return f"{option} is an option of: {', '.join(having[:4])}"
    close = sorted({m for _, cmd in _commands(root)
                    for m in difflib.get_close_matches(option, _option_names(cmd), n=1)})
    if close:
        return f"did you mean {' or '.join(close[:2])}?"
    return ""


class ToolRoot(click.Group):
    """The root of the command line: Kafka's shapes (``kafka_shapes``) and did-you-mean for
    unknown options in every subcommand."""

    def main(self, args: Sequence[str] | None = None, *pargs: Any, **kwargs: Any) -> Any:
        if args is None:
            args = sys.argv[1:]
        return super().main(kafka_shapes(list(args), self.commands), *pargs, **kwargs)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        name = args[0] if args else None
        if name in REFUSED_COMMANDS and len(args) > 1:
            reason = REFUSED_COMMANDS[name].get(args[1])
            if reason is not None:
                raise click.UsageError(f"{name} {args[1]}: {reason}", ctx)
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.NoSuchOption as exc:
            refused = _refusal(exc)
            if refused is not None:
                exc.message, exc.possibilities = refused, None
                raise
            if not exc.possibilities:
                command = exc.ctx.command if exc.ctx is not None else None
                hint = option_hint(self, command, exc.option_name)
                if hint:
                    exc.message = f"No such option: {exc.option_name} ({hint})"
            raise


def refusal(path: Sequence[str], option: str) -> str | None:
    """Why Kafka's ``option`` is refused by the command at ``path`` (``["perf", "consume"]``):
    REFUSED's entry for the path or its group, or None."""
    for end in range(len(path), 0, -1):
        reason = REFUSED.get(" ".join(path[:end]), {}).get(option)
        if reason is not None:
            return reason
    return None


def _refusal(exc: click.NoSuchOption) -> str | None:
    """The message for a refused Kafka option, for the command it was given to."""
    path = []
    ctx = exc.ctx
    while ctx is not None and ctx.parent is not None:
        path.insert(0, ctx.info_name or "")
        ctx = ctx.parent
    reason = refusal(path, exc.option_name)
    if reason is None:
        return None
    return f"{exc.option_name} (Kafka's) is not supported: {reason}"
