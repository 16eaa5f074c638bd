"""``produce`` and ``consume``: kafka-console-producer/consumer and kcat -P/-C.

    printf 'k1:hello\\nk2:world\\n' | minibroker produce events --key-separator :
    minibroker consume events --from-beginning --max-messages 2 --format json
    minibroker consume events -p 0 -o -10 --format '%p/%o %k=%s\\n'   # last 10 of partition 0
    minibroker consume --topic events --from-beginning --property print.key=true

Kafka's console tools' options work too: ``--topic``, ``--property`` (the console producer's
``parse.key``/``key.separator``, the console consumer's ``print.key``, ``print.partition``, ...),
``--producer-property``/``--consumer-property`` and ``--producer.config``/``--consumer.config``.
"""

from __future__ import annotations

import base64
import json
import re
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import click

from client.admin import Admin
from client.cli.common import (
    CONTEXT,
    Progress,
    client_options,
    existing_partitions,
    for_admin,
    friendly_errors,
    key_value,
    name_argument,
    parse_datetime,
    with_defaults,
)
from client.config import consumer_config, producer_config
from client.consumer import Consumer
from client.errors import KafkaClientError, UnknownTopicOrPartitionError
from client.producer import Producer
from client.structs import ConfigResource, ConsumerRecord, TopicPartition

# -- produce --------------------------------------------------------------------------------------


PRODUCER_PROPERTIES = ("parse.key", "key.separator", "parse.headers", "headers.delimiter",
                       "headers.separator", "headers.key.separator", "null.marker", "ignore.error")
CONSUMER_PROPERTIES = ("print.key", "print.value", "print.partition", "print.offset",
                       "print.timestamp", "print.headers", "key.separator", "line.separator",
                       "headers.separator", "null.literal")


def console_properties(items: tuple[str, ...], known: tuple[str, ...]) -> dict[str, str]:
    """kafka-console-producer/consumer's ``--property k=v`` (the line reader's or formatter's
    settings; client settings are --producer-property/--consumer-property or -X)."""
    result = {}
    for item in items:
        key, value = key_value(item, "--property")
        key = key.strip()
        if key not in known:
            import difflib

            hint = difflib.get_close_matches(key, known, n=1)
            suffix = f" (did you mean {hint[0]!r}?)" if hint else f" (known: {', '.join(known)})"
            raise click.BadParameter(f"unknown property {key!r}{suffix}; client settings go in "
                                     "-X KEY=VALUE", param_hint="--property")
        result[key] = value
    return result


def _true(properties: dict[str, str], key: str, default: bool = False) -> bool:
    value = properties.get(key)
    return default if value is None else value.strip().lower() == "true"


class LineError(ValueError):
    """A line the reader cannot split (Kafka's message, with the line number)."""


Record = tuple[list[tuple[str, bytes | None]], str | None, str | None]


class LineReader:
    """kafka-console-producer.sh's LineMessageReader: each line is
    ``[headers<headers.delimiter>][key<key.separator>]value``, headers being
    ``k<headers.key.separator>v`` pairs split at the ``headers.separator`` regular expression;
    a key, value or header value equal to ``null.marker`` is null. A missing separator is an
    error (``LineError``) unless ``ignore.error=true``, which takes the part as absent (a header
    without its separator: a null value). ``-K SEP`` (kcat's) parses the key leniently."""

    def __init__(self, properties: dict[str, str], key_separator: str | None) -> None:
        get = properties.get
        self.parse_key = _true(properties, "parse.key") or key_separator is not None
        self.key_separator = key_separator if key_separator is not None else get("key.separator",
                                                                                  "\t")
        self.parse_headers = _true(properties, "parse.headers")
        self.headers_delimiter = get("headers.delimiter", "\t")
        separator = get("headers.separator", ",")
        self.headers_key_separator = get("headers.key.separator", ":")
        self.ignore_error = _true(properties, "ignore.error") or key_separator is not None
        self.null_marker = get("null.marker")
        pairs = [("headers.delimiter", self.headers_delimiter, "headers.separator", separator),
                 ("headers.delimiter", self.headers_delimiter, "headers.key.separator",
                  self.headers_key_separator),
                 ("headers.separator", separator, "headers.key.separator",
                  self.headers_key_separator)]
        if self.null_marker is not None:
            pairs += [("null.marker", self.null_marker, name, value) for name, value in (
                ("key.separator", self.key_separator), ("headers.separator", separator),
                ("headers.delimiter", self.headers_delimiter),
                ("headers.key.separator", self.headers_key_separator))]
        for name, value, other, other_value in pairs:
            if value == other_value:
                raise click.BadParameter(f"{name} and {other} may not be equal",
                                         param_hint="--property")
        try:
            self.headers_separator = re.compile(separator)
        except re.error as exc:
            raise click.BadParameter(f"headers.separator {separator!r} is not a regular "
                                     f"expression: {exc}", param_hint="--property") from None
        self.line_number = 0

    def _part(self, enabled: bool, line: str, start: int, separator: str,
              what: str) -> str | None:
        if not enabled:
            return None
        index = line.find(separator, start)
        if index == -1:
            if self.ignore_error:
                return None
            raise LineError(f"No {what} found on line number {self.line_number}: '{line}'")
        return line[start:index]

    def _null(self, text: str | None) -> str | None:
        return None if text is None or text == self.null_marker else text

    def read(self, line: str) -> Record:
        """``line`` (without its end) -> (headers, key, value)."""
        self.line_number += 1
        headers = self._part(self.parse_headers, line, 0, self.headers_delimiter,
                             "headers delimiter")
        start = 0 if headers is None else len(headers) + len(self.headers_delimiter)
        key = self._part(self.parse_key, line, start, self.key_separator, "key separator")
        if key is not None:
            start += len(key) + len(self.key_separator)
        parsed: list[tuple[str, bytes | None]] = []
        if headers is not None and headers != self.null_marker:
            parsed = [self._header(pair) for pair in self._split(headers)]
        return parsed, self._null(key), self._null(line[start:])

    def _split(self, headers: str) -> list[str]:
        parts = self.headers_separator.split(headers)
        while parts and parts[-1] == "":  # as Java's String.split drops trailing empty parts
            parts.pop()
        return parts or [""]

    def _header(self, pair: str) -> tuple[str, bytes | None]:
        index = pair.find(self.headers_key_separator)
        if index == -1:
            if self.ignore_error:
                return pair, None
            raise LineError(f"No header key separator found in pair '{pair}' on line number "
                            f"{self.line_number}")
        key = pair[:index]
        if key == self.null_marker:
            raise LineError(f"Header keys should not be equal to the null marker "
                            f"'{self.null_marker}' as they can't be null")
        value = self._null(pair[index + len(self.headers_key_separator):])
        return key, None if value is None else value.encode()


@click.command(context_settings=CONTEXT)
@name_argument("topic", "--topic", metavar="TOPIC")
@click.option("-f", "--file", "source", type=click.File("r", encoding="utf-8"), default="-",
              help="Read lines from this file.  [default: stdin]")
@click.option("-K", "--key-separator", default=None,
              help="Split each line at the first SEP into key and value.")
@click.option("--transactional-id", default=None,
              help="Send all lines in one transaction with this id (aborted on Ctrl-C or error).")
@click.option("--acks", type=click.Choice(["all", "-1", "0", "1"]), default=None,
              help="Acknowledgements to wait for.  [default: all]")
@click.option("-p", "--partition", type=int, default=None, help="Send every record to this partition.")
@click.option("-H", "--header", "headers", multiple=True, metavar="KEY=VALUE",
              help="Header added to every record, repeatable.")
@click.option("--property", "--reader-property", "properties", multiple=True, metavar="KEY=VALUE",
              help="kafka-console-producer.sh's reader properties (also --reader-property): "
                   "parse.key, key.separator (TAB), parse.headers, headers.delimiter (TAB), "
                   "headers.separator (,), headers.key.separator (:), null.marker, "
                   "ignore.error.")
@client_options(role="producer")
@friendly_errors
def produce(topic, source: TextIO, key_separator, transactional_id, acks, partition, headers,
            properties, conf) -> None:
    """Send each line of input to TOPIC as one record."""
    reader = LineReader(console_properties(properties, PRODUCER_PROPERTIES), key_separator)
    record_headers = [(k, v.encode()) for k, v in (key_value(h, "--header") for h in headers)]
    settings: dict[str, Any] = {"transactional.id": transactional_id,
                                "client.id": "minibroker-console-producer"}
    if acks is not None:
        settings["acks"] = acks
        if acks in ("0", "1"):
            settings["enable.idempotence"] = False
    config = with_defaults(conf, **{k.replace(".", "_"): v for k, v in settings.items()})
    producer_config(config)  # a bad key or value: its own message, before connecting
    with Admin(for_admin(conf)) as admin:
        cluster = admin.describe_cluster()  # "no broker reachable" at once, not after max.block.ms
        _refuse_unknown_topic(admin, topic, cluster)
    count = 0
    errors: list[BaseException] = []
    progress = Progress(2.0, lambda s: f"... {count} record(s) sent in {s:.0f} s")

    def delivered(err: BaseException | None, _metadata: Any) -> None:
        if err is not None:
            errors.append(err)

    with Producer(config) as producer:
        if transactional_id:
            producer.init_transactions()
            producer.begin_transaction()
        try:
            for line in source:
                try:
                    parsed, key, value = reader.read(line.rstrip("\r\n"))
                except LineError as exc:
                    producer.flush()  # the lines before it are sent, as Kafka's tool does
                    raise click.ClickException(str(exc)) from None
                producer.send(topic, value, key=key, partition=partition,
                              headers=[*record_headers, *parsed] or None, on_delivery=delivered)
                count += 1
                progress.tick()
            if transactional_id:
                producer.commit_transaction()
            else:
                producer.flush()
        except BaseException:
            # Ctrl-C or an error: never leave the transaction open (it would hold back every
            # read_committed reader until transaction.timeout.ms).
            if transactional_id:
                try:
                    producer.abort_transaction()
                    click.echo(f"Aborted the transaction of {transactional_id}.", err=True)
                except Exception as exc:  # noqa: BLE001 - report, then re-raise the original
                    click.echo(f"could not abort the transaction: {exc}", err=True)
            raise
    if errors:
        raise click.ClickException(f"{len(errors)} of {count} records failed: {errors[0]}")
    click.echo(f"Produced {count} record(s) to {topic}.", err=True)


def _refuse_unknown_topic(admin: Admin, topic: str, cluster: dict[str, Any]) -> None:
    """A topic that does not exist, on a broker that will not create it, is an error at once
    (the producer would wait max.block.ms, 60 s, before "not present in metadata")."""
    try:
        admin.describe_topics([topic])
        return
    except UnknownTopicOrPartitionError:
        pass
    except KafkaClientError:
        return  # (not allowed to describe it, ...: the producer's own answer will say)
    try:
        resource = ConfigResource("broker", str(cluster["brokers"][0][0]))
        entry = admin.describe_configs([resource])[resource].get("auto.create.topics.enable")
    except (KafkaClientError, IndexError):
        return
    if entry is not None and (entry.value or "").lower() == "false":
        raise click.ClickException(
            f"Topic {topic} not present in metadata: it does not exist and the broker does not "
            f"create topics (auto.create.topics.enable=false); create it with `minibroker topics "
            f"create {topic}`"
        )


# -- consume --------------------------------------------------------------------------------------


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", errors="backslashreplace")


def _json_value(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def record_json(record: ConsumerRecord) -> str:
    return json.dumps(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp,
            "timestamp_type": "LogAppendTime" if record.timestamp_type else "CreateTime",
            "key": _json_value(record.key),
            "value": _json_value(record.value),
            "headers": [[k, _json_value(v)] for k, v in record.headers],
        },
        ensure_ascii=False,
    )


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "0": "\0"}
_TOKENS: dict[str, Callable[[ConsumerRecord], str]] = {
    "t": lambda r: r.topic,
    "p": lambda r: str(r.partition),
    "o": lambda r: str(r.offset),
    "k": lambda r: _text(r.key),
    "s": lambda r: _text(r.value),
    "K": lambda r: str(-1 if r.key is None else len(r.key)),
    "S": lambda r: str(-1 if r.value is None else len(r.value)),
    "T": lambda r: str(r.timestamp),
    "h": lambda r: ",".join(f"{k}={_text(v)}" for k, v in r.headers),
}


def compile_format(fmt: str) -> Callable[[ConsumerRecord], str]:
    """kcat's ``-f``: %t topic, %p partition, %o offset, %k key, %s value, %K/%S key/value size
    (-1: null), %T timestamp, %h headers (k=v,...), %% a percent sign; \\n \\t \\r \\\\ escapes.
    No newline is added (kcat does not either)."""
    parts: list[Callable[[ConsumerRecord], str] | str] = []
    i = 0
    while i < len(fmt):
        c = fmt[i]
        nxt = fmt[i + 1 : i + 2]
        if c == "%" and nxt == "%":
            parts.append("%")
        elif c == "%":
            if nxt not in _TOKENS:
                raise click.BadParameter(f"unknown format token %{nxt} in {fmt!r}",
                                         param_hint="--format")
            parts.append(_TOKENS[nxt])
        elif c == "\\" and nxt in _ESCAPES:
            parts.append(_ESCAPES[nxt])
        else:
            parts.append(c)
            i += 1
            continue
        i += 2

    def render(record: ConsumerRecord) -> str:
        return "".join(p if isinstance(p, str) else p(record) for p in parts)

    return render


def make_formatter(fmt: str, print_key: bool) -> Callable[[ConsumerRecord], str]:
    if fmt == "json":
        return lambda r: record_json(r) + "\n"
    if fmt == "text":
        if print_key:
            return lambda r: f"{_text(r.key)}\t{_text(r.value)}\n"
        return lambda r: _text(r.value) + "\n"
    return compile_format(fmt)


def console_formatter(properties: dict[str, str],
                      print_key: bool) -> Callable[[ConsumerRecord], str]:
    """kafka-console-consumer.sh's DefaultMessageFormatter: the fields chosen with print.*,
    separated by key.separator (TAB), each line ended by line.separator (newline)."""
    separator = properties.get("key.separator", "\t")
    end = properties.get("line.separator", "\n")
    null = properties.get("null.literal", "null")

    def text(data: bytes | None) -> str:
        return null if data is None else _text(data)

    fields: list[Callable[[ConsumerRecord], str]] = []
    if _true(properties, "print.timestamp"):
        fields.append(lambda r: ("LogAppendTime:" if r.timestamp_type else "CreateTime:")
                      + str(r.timestamp))
    if _true(properties, "print.partition"):
        fields.append(lambda r: f"Partition:{r.partition}")
    if _true(properties, "print.offset"):
        fields.append(lambda r: f"Offset:{r.offset}")
    if _true(properties, "print.headers"):
        fields.append(lambda r: ",".join(f"{k}:{text(v)}" for k, v in r.headers) or "NO_HEADERS")
    if _true(properties, "print.key") or print_key:
        fields.append(lambda r: text(r.key))
    if _true(properties, "print.value", default=True):
        fields.append(lambda r: text(r.value))
    return lambda r: separator.join(f(r) for f in fields) + end


class OffsetSpec:
    """Where to start: kcat's ``-o`` (beginning, end, stored, N, -N from the end, @time)."""

    def __init__(self, text: str) -> None:
        self.text = text
        lowered = text.lower()
        self.kind: str
        self.value = 0
        if lowered in ("beginning", "earliest", "end", "latest", "stored"):
            self.kind = {"earliest": "beginning", "latest": "end"}.get(lowered, lowered)
        elif lowered.startswith(("@", "s@")):
            self.kind, self.value = "time", parse_datetime(text.split("@", 1)[1])
        else:
            try:
                self.value = int(text)
            except ValueError:
                raise click.BadParameter(
                    f"{text!r}: use beginning, end, stored, N, -N or @TIME", param_hint="--offset"
                ) from None
            self.kind = "relative" if self.value < 0 else "absolute"


def _start_positions(admin: Admin, consumer: Consumer, tps: list[TopicPartition],
                     spec: OffsetSpec, read_committed: bool) -> None:
    if spec.kind == "beginning":
        consumer.seek_to_beginning(tps)
    elif spec.kind == "end":
        consumer.seek_to_end(tps)
    elif spec.kind == "absolute":
        for tp in tps:
            consumer.seek(tp, spec.value)
    elif spec.kind == "relative":
        ends = admin.list_offsets({tp: -1 for tp in tps}, read_committed)
        starts = admin.list_offsets({tp: -2 for tp in tps}, read_committed)
        for tp in tps:
            consumer.seek(tp, max(ends[tp][0] + spec.value, starts[tp][0]))
    elif spec.kind == "time":
        found = admin.list_offsets({tp: spec.value for tp in tps}, read_committed)
        ends = admin.list_offsets({tp: -1 for tp in tps}, read_committed)
        for tp in tps:
            offset = found[tp][0]
            consumer.seek(tp, offset if offset >= 0 else ends[tp][0])
        if all(found[tp][0] < 0 for tp in tps):
            click.echo(f"No record at or after {spec.text.split('@', 1)[1]} in "
                       f"{tps[0].topic}: waiting at the end for new ones.", err=True)


@click.command(context_settings=CONTEXT)
@name_argument("topic", "--topic", metavar="TOPIC")
@click.option("--from-beginning", is_flag=True,
              help="Start at the earliest offset (when the group has none committed).")
@click.option("-g", "--group", default=None,
              help="Consume as a member of this group; commits every assigned position.")
@click.option("-p", "--partition", "partitions", type=int, multiple=True,
              help="Only this partition, repeatable (not with --group).")
@click.option("-o", "--offset", "offset", default=None, metavar="SPEC",
              help="Start at beginning, end, stored, N, -N (N before the end) or @TIME "
                   "(epoch ms or ISO-8601).")
@click.option("--isolation-level", type=click.Choice(["read_committed", "read_uncommitted"]),
              default="read_committed", show_default=True)
@click.option("-n", "--max-messages", type=click.IntRange(min=1), default=None,
              help="Exit after this many records.")
@click.option("--format", "fmt", default="text", show_default=True, metavar="text|json|FMT",
              help="text (the value), json (one object per line), or a kcat format string "
                   "such as '%t/%p@%o %k=%s\\n'.")
@click.option("--print-key", is_flag=True, help="text format: print key<TAB>value.")
@click.option("--timeout", "idle_timeout", type=click.FloatRange(min=0), default=None,
              help="Exit after this many seconds without a record (counted from the group's "
                   "assignment with --group).")
@click.option("--timeout-ms", "idle_timeout_ms", type=click.IntRange(min=0), default=None,
              help="The same in milliseconds (kafka-console-consumer's name).")
@click.option("--formatter", default=None, metavar="CLASS",
              help="kafka-console-consumer.sh's: its DefaultMessageFormatter only (the one "
                   "this command implements).")
@click.option("--formatter-config", type=click.File("r", encoding="utf-8"), default=None,
              metavar="FILE", help="A properties file of formatter properties (as --property).")
@click.option("--property", "--formatter-property", "properties", multiple=True,
              metavar="KEY=VALUE",
              help="kafka-console-consumer.sh's formatter properties: print.key, "
                   "print.partition, print.offset, print.timestamp, print.headers, "
                   "print.value (true/false), key.separator, line.separator, null.literal.")
@client_options(role="consumer")
@friendly_errors
def consume(topic, from_beginning, group, partitions, offset, isolation_level, max_messages,
            fmt, print_key, idle_timeout, idle_timeout_ms, formatter, formatter_config,
            properties, conf) -> None:
    """Print records of TOPIC, one per line.

    Without --group it reads every partition (or those of --partition) from --offset (default:
    end, or beginning with --from-beginning). With --group it joins the group and after each
    batch commits the position of every assigned partition.
    """
    if idle_timeout is None and idle_timeout_ms is not None:
        idle_timeout = idle_timeout_ms / 1000
    if formatter is not None and formatter.rsplit(".", 1)[-1] != "DefaultMessageFormatter":
        raise click.BadParameter(f"{formatter}: only Kafka's DefaultMessageFormatter is "
                                 "implemented here (--property print.* chooses its fields)",
                                 param_hint="--formatter")
    if formatter_config is not None:
        from protocol.properties import parse_properties

        try:
            from_file = parse_properties(formatter_config.read(), formatter_config.name)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--formatter-config") from None
        properties = (*(f"{k}={v}" for k, v in from_file.items()), *properties)
    formatter = make_formatter(fmt, print_key)
    shown = console_properties(properties, CONSUMER_PROPERTIES)
    if shown:
        if fmt != "text":
            raise click.UsageError("--property print.* goes with the text format")
        formatter = console_formatter(shown, print_key)
    spec = OffsetSpec(offset) if offset else OffsetSpec("beginning" if from_beginning else "end")
    if group and (partitions or spec.kind not in ("beginning", "end", "stored")):
        raise click.UsageError("with --group, use --from-beginning or --offset beginning|end; "
                               "--partition and other offsets need no group")
    if not group and spec.kind == "stored":
        raise click.UsageError("--offset stored needs --group")
    read_committed = isolation_level == "read_committed"
    settings = {
        "group.id": group,
        "isolation.level": isolation_level,
        "auto.offset.reset": "earliest" if spec.kind == "beginning" else "latest",
        "client.id": "minibroker-console-consumer",
        # Commit what was printed, after printing it.
        "enable.auto.commit": False if group else None,
    }
    config = with_defaults(conf, **{k.replace(".", "_"): v for k, v in settings.items()})
    consumer_config(config)  # a bad key or value: its own message, before connecting
    printed = 0
    out = sys.stdout
    assigned_at: list[float] = []
    with Admin(for_admin(conf)) as admin, Consumer(config) as consumer:
        numbers = existing_partitions(admin, topic, partitions, wait=idle_timeout)
        if group:
            consumer.subscribe([topic], on_assign=lambda tps: assigned_at.append(time.monotonic()))
        else:
            tps = [TopicPartition(topic, p) for p in numbers]
            consumer.assign(tps)
            _start_positions(admin, consumer, tps, spec, read_committed)
            assigned_at.append(time.monotonic())
        last_record = time.monotonic()
        try:
            while max_messages is None or printed < max_messages:
                records = consumer.poll(0.5)
                now = time.monotonic()
                if not records:
                    if idle_timeout is not None and _idle(now, last_record, assigned_at,
                                                          idle_timeout):
                        break
                    continue
                last_record = now
                shown = records if max_messages is None else records[: max_messages - printed]
                for record in shown:
                    out.write(formatter(record))
                out.flush()
                printed += len(shown)
                if group:
                    consumer.commit(_positions_after(consumer, shown, records[len(shown):]))
        except KeyboardInterrupt:
            pass
    if printed and max_messages is None:
        click.echo(f"Processed {printed} record(s).", err=True)


def _idle(now: float, last_record: float, assigned_at: list[float], timeout: float) -> bool:
    """The idle clock starts at the (first) assignment: a group's join may take seconds
    (group.initial.rebalance.delay.ms) and must not use up the timeout."""
    if not assigned_at:
        return now - last_record >= timeout + 60  # never assigned: give up eventually
    return now - max(last_record, assigned_at[0]) >= timeout


def _positions_after(consumer: Consumer, shown: list[ConsumerRecord],
                     dropped: list[ConsumerRecord]) -> dict[TopicPartition, int]:
    """What to commit: every assigned partition's position (Kafka's console consumer commits
    them all, so partitions without records get an offset too), but never past a record that
    was fetched and not printed (--max-messages cut the batch)."""
    offsets = {tp: consumer.position(tp) for tp in consumer.assignment()}
    for record in shown:
        tp = TopicPartition(record.topic, record.partition)
        offsets[tp] = max(offsets.get(tp, 0), record.offset + 1)
    for record in dropped:
        tp = TopicPartition(record.topic, record.partition)
        offsets[tp] = min(offsets.get(tp, record.offset), record.offset)
    return offsets
