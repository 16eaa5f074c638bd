"""``share-groups list|describe|reset-offsets|delete-offsets|delete``: kafka-share-groups.sh
(Kafka 4.4's ShareGroupCommand) with its option names and its text, over our admin client's
share-group calls (ShareGroupDescribe, Describe/Alter/DeleteShareGroupOffsets, ListGroups of type
``share``, DeleteGroups).

    minibroker share-groups --list --state
    minibroker share-groups --describe --group orders --members --verbose
    minibroker share-groups --reset-offsets --group orders --topic orders --to-earliest --execute

Where Kafka's tool exits 0 after printing a failure (delete, delete-offsets), this command prints
the same text and exits 1.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from client.admin import Admin
from client.cli.common import (
    CONTEXT,
    echo_json,
    echo_table,
    for_admin,
    name_argument,
    parse_datetime,
    tool,
)
from client.errors import BrokerResponseError, GroupIdNotFoundError
from client.structs import ShareGroupDescription, TopicPartition

STATES = ("Empty", "Stable", "Dead")  # a share group's states (Kafka's GroupState for SHARE)
INACTIVE = ("Empty", "Dead")


@click.group("share-groups", context_settings=CONTEXT)
def share_groups() -> None:
    """List, describe, reset and delete share groups (KIP-932) and their start offsets."""


def timeout_option(fn: Callable) -> Callable:
    """kafka-share-groups.sh --timeout: each admin call's time limit (request.timeout.ms)."""
    return click.option("--timeout", "timeout_ms", type=click.IntRange(min=1), default=None,
                        metavar="MS",
                        help="Time limit of each request in ms (request.timeout.ms; Kafka's "
                             "default 30000).")(fn)


def admin_for(conf: dict[str, Any], timeout_ms: int | None) -> Admin:
    settings = for_admin(conf)
    if timeout_ms is not None:
        settings["request.timeout.ms"] = timeout_ms
    return Admin(settings)


def _states(value: str) -> list[str]:
    """``--state Empty,Stable`` -> the states (Kafka's names, any case); "" -> every state."""
    wanted = [s.strip() for s in value.split(",") if s.strip()]
    by_lower = {s.lower(): s for s in STATES}
    unknown = [s for s in wanted if s.lower() not in by_lower]
    if unknown:
        raise click.ClickException(
            f"Invalid state list '{value}'. Valid states are: {', '.join(STATES)}")
    return [by_lower[s.lower()] for s in wanted]


@tool(share_groups, "list", formats=True)
@click.option("--state", "state", default=None, metavar="[STATE,...]",
              help="GROUP and STATE columns; with a value only groups in these states "
                   "(Empty, Stable, Dead; comma-separated).")
@timeout_option
def share_groups_list(state, timeout_ms, fmt, conf) -> None:
    """List share group ids; with --state, GROUP and STATE columns."""
    states = _states(state) if state else []
    with admin_for(conf, timeout_ms) as admin:
        listed = admin.list_groups(states=states, types=["share"])
    if fmt == "json":
        echo_json([{"group": g.group_id, "state": g.state} for g in listed])
    elif state is not None:
        echo_table(["GROUP", "STATE"], [(g.group_id, g.state or "Unknown") for g in listed])
    else:
        for g in listed:
            click.echo(g.group_id)


def _described(admin: Admin, group_ids: tuple[str, ...]) -> list[ShareGroupDescription]:
    """The groups, sorted by id (as Kafka's tool prints them); a group that is not a share group
    is an error."""
    found = admin.describe_share_groups(sorted(set(group_ids)))
    result = []
    for group_id, description in sorted(found.items()):
        if isinstance(description, BrokerResponseError):
            raise click.ClickException(
                f"share group {group_id!r}: {type(description).__name__}: {description}")
        result.append(description)
    return result


def _no_members_note(description: ShareGroupDescription) -> bool:
    """Kafka's lines for an empty or dead group (stderr / stdout); False for a dead one."""
    if description.state == "Dead":
        click.echo(f"\nError: Share group '{description.group_id}' does not exist.")
        return False
    if description.state == "Empty":
        click.echo(f"\nShare group '{description.group_id}' has no active members.", err=True)
    return True


def _assignment(description_partitions: tuple[TopicPartition, ...]) -> str:
    """``t1:0,1;t2:0`` (Kafka's ASSIGNMENT column)."""
    by_topic: dict[str, list[int]] = {}
    for tp in description_partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(sorted(f"{t}:{','.join(str(p) for p in sorted(ps))}"
                           for t, ps in by_topic.items()))


@tool(share_groups, "describe", formats=True)
@name_argument("group_ids", "--group", multiple=True, required=False, metavar="GROUP")
@click.option("--all-groups", is_flag=True, help="Every share group.")
@click.option("--offsets", is_flag=True,
              help="Start offset and lag per partition (the default view).")
@click.option("--members", is_flag=True, help="One row per member, with its assignment.")
@click.option("--state", "show_state", is_flag=True,
              help="One row per group: coordinator, state, members.")
@click.option("--verbose", is_flag=True,
              help="Also the leader epoch (offsets), member epoch (--members), group and "
                   "assignment epochs (--state).")
@timeout_option
def share_groups_describe(group_ids, all_groups, offsets, members, show_state, verbose,
                          timeout_ms, fmt, conf) -> None:
    """Per partition the group's start offset and lag (the default), or its members (--members),
    or its state (--state). A group that is not a share group is an error (exit 1)."""
    if not group_ids and not all_groups:
        raise click.UsageError("give GROUP (or --group GROUP, repeatable) or --all-groups")
    if offsets + members + show_state > 1:
        raise click.UsageError("give at most one of --offsets, --members, --state")
    with admin_for(conf, timeout_ms) as admin:
        if all_groups:
            group_ids = (*group_ids, *(g.group_id for g in admin.list_groups(types=["share"])))
        described = _described(admin, group_ids)
        if show_state:
            _echo_states(admin, described, verbose, fmt)
        elif members:
            _echo_members(described, verbose, fmt)
        else:
            _echo_offsets(admin, described, verbose, fmt)


def _echo_offsets(admin: Admin, described: list[ShareGroupDescription], verbose: bool,
                  fmt: str) -> None:
    result = []
    for d in described:
        known = admin.list_share_group_offsets(d.group_id)
        result.append((d.group_id, [
            (tp.topic, tp.partition,
             None if o is None or o.leader_epoch < 0 else o.leader_epoch,
             None if o is None else o.start_offset,
             None if o is None or o.lag < 0 else o.lag)
            for tp, o in sorted(known.items())]))
    if fmt == "json":
        echo_json([{"group": g, "partitions": [
            {"topic": t, "partition": p, "leader_epoch": e, "start_offset": s, "lag": lag}
            for t, p, e, s, lag in rows]} for g, rows in result])
        return
    for group_id, rows in result:
        click.echo()
        if not rows:
            click.echo(f"Share group '{group_id}' has no offset information.")
            continue
        if verbose:
            echo_table(["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"],
                       [(group_id, *row) for row in rows])
        else:
            echo_table(["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"],
                       [(group_id, t, p, s, lag) for t, p, _, s, lag in rows])


def _echo_states(admin: Admin, described: list[ShareGroupDescription], verbose: bool,
                 fmt: str) -> None:
    brokers = admin.describe_cluster()["brokers"]
    coordinator = "-"
    if brokers:  # the one broker coordinates every group
        node_id, host, port = brokers[0]
        coordinator = f"{host}:{port}  ({node_id})"
    if fmt == "json":
        echo_json([{"group": d.group_id, "coordinator": coordinator, "state": d.state,
                    "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch,
                    "members": len(d.members)} for d in described])
        return
    for d in described:
        _no_members_note(d)
        click.echo()
        if verbose:
            echo_table(["GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH",
                        "#MEMBERS"],
                       [(d.group_id, coordinator, d.state, d.group_epoch, d.assignment_epoch,
                         len(d.members))])
        else:
            echo_table(["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"],
                       [(d.group_id, coordinator, d.state, len(d.members))])


def _echo_members(described: list[ShareGroupDescription], verbose: bool, fmt: str) -> None:
    if fmt == "json":
        echo_json([{"group": d.group_id, "state": d.state, "members": [
            {"consumer_id": m.member_id, "host": m.client_host, "client_id": m.client_id,
             "member_epoch": m.member_epoch,
             "assignment": [[tp.topic, tp.partition] for tp in m.assignment]}
            for m in sorted(d.members)]} for d in described])
        return
    for d in described:
        if not _no_members_note(d) or not d.members:
            continue
        click.echo()
        headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        echo_table(
            headers + (["MEMBER-EPOCH"] if verbose else []) + ["ASSIGNMENT"],
            [(d.group_id, m.member_id, m.client_host, m.client_id, len(m.assignment),
              *([m.member_epoch] if verbose else []), _assignment(m.assignment))
             for m in sorted(d.members)],
        )


def _parse_topics(items: tuple[str, ...]) -> dict[str, list[int]]:
    """``T`` or ``T:0,1`` (Kafka's --topic syntax) -> {topic: partitions ([] = all)}."""
    wanted: dict[str, list[int]] = {}
    for item in items:
        topic, _, parts = item.partition(":")
        try:
            wanted.setdefault(topic, []).extend(int(p) for p in parts.split(",") if p)
        except ValueError:
            raise click.BadParameter(
                f"{item!r} is not TOPIC or TOPIC:P,P", param_hint="--topic") from None
    return wanted


def _read_plan(path: Path) -> dict[TopicPartition, int]:
    """--from-file: Kafka's CSV (``topic,partition,offset``, or ``group,topic,partition,offset``
    as kafka-consumer-groups.sh --export writes it)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}",
                                 param_hint="--from-file") from None
    plan = {}
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row:
            continue
        try:
            topic, partition, offset = row[-3], int(row[-2]), int(row[-1])
            if len(row) not in (3, 4) or not topic:
                raise ValueError
        except (ValueError, IndexError):
            raise click.BadParameter(f"line {number} is not TOPIC,PARTITION,OFFSET",
                                     param_hint="--from-file") from None
        plan[TopicPartition(topic, partition)] = offset
    return plan


@tool(share_groups, "reset-offsets", formats=True)
@name_argument("group_id", "--group", metavar="GROUP")
@click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,P]",
              help="Topic (optionally some partitions), repeatable.")
@click.option("--all-topics", is_flag=True, help="Every topic the group has a start offset in.")
@click.option("--to-earliest", "to", flag_value="earliest", help="The log start offset.")
@click.option("--to-latest", "to", flag_value="latest", help="The log end offset.")
@click.option("--to-current", "to", flag_value="current",
              help="The group's current start offset (the log end where it has none).")
@click.option("--to-offset", type=int, default=None, help="This offset (clamped to the log).")
@click.option("--to-datetime", default=None, metavar="TIME",
              help="First offset at or after TIME (ISO-8601, UTC if no zone; or epoch ms).")
@click.option("--from-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="CSV", help="The offsets of a CSV file (topic,partition,offset).")
@click.option("--dry-run", is_flag=True, help="Only show the new offsets.")
@click.option("--execute", is_flag=True, help="Set the new offsets.")
@click.option("--export", is_flag=True, help="Print the plan as CSV (topic,partition,offset).")
@timeout_option
def share_groups_reset_offsets(group_id, topics, all_topics, to, to_offset, to_datetime,
                               from_file, dry_run, execute, export, timeout_ms, fmt,
                               conf) -> None:
    """Reset GROUP's start offsets (the group must have no active member). As Kafka's tool,
    one of --dry-run and --execute is required."""
    if dry_run == execute:
        raise click.UsageError("give one of --dry-run and --execute")
    chosen = [name for name, given in (("--to-earliest", to == "earliest"),
                                       ("--to-latest", to == "latest"),
                                       ("--to-current", to == "current"),
                                       ("--to-offset", to_offset is not None),
                                       ("--to-datetime", to_datetime is not None),
                                       ("--from-file", from_file is not None)) if given]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-current, "
                               "--to-offset, --to-datetime, --from-file")
    if from_file is None and bool(topics) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    with admin_for(conf, timeout_ms) as admin:
        described = admin.describe_share_groups([group_id])[group_id]
        if isinstance(described, GroupIdNotFoundError):
            pass  # no such group yet: its offsets can be set (as Kafka's tool does)
        elif isinstance(described, BrokerResponseError):
            raise click.ClickException(
                f"share group {group_id!r}: {type(described).__name__}: {described}")
        elif described.state not in INACTIVE:
            raise click.ClickException(f"Share group '{group_id}' is not empty.")
        plan = _read_plan(from_file) if from_file is not None else None
        if plan is not None:
            tps = sorted(plan)
        elif all_topics:
            tps = sorted(admin.list_share_group_offsets(group_id))
        else:
            wanted = _parse_topics(topics)
            existing = {t.name: t for t in admin.describe_topics(None) if t.name in wanted}
            missing = [t for t in wanted if t not in existing]
            if missing:
                raise click.ClickException(f"topic {missing[0]!r} does not exist")
            tps = sorted(TopicPartition(topic, p) for topic, parts in wanted.items()
                         for p in (parts or [p.partition for p in existing[topic].partitions]))
        new = _targets(admin, group_id, tps, to, to_offset, to_datetime, plan)
        if execute and new:
            failed = {tp: e for tp, e in admin.alter_share_group_offsets(
                group_id, {(tp.topic, tp.partition): o for tp, o in new.items()}).items() if e}
            if failed:
                tp, error = min(failed.items())
                raise click.ClickException(
                    f"cannot reset {tp.topic}-{tp.partition}: {type(error).__name__}: {error}")
    rows = [(group_id, tp.topic, tp.partition, offset) for tp, offset in sorted(new.items())]
    if export:
        click.echo("".join(f"{t},{p},{o}\n" for _, t, p, o in rows))
    elif fmt == "json":
        echo_json([{"group": g, "topic": t, "partition": p, "new_offset": o}
                   for g, t, p, o in rows])
    elif rows:
        click.echo()
        echo_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows)


def _targets(admin: Admin, group_id: str, tps: list[TopicPartition], to: str | None,
             to_offset: int | None, to_datetime: str | None,
             plan: dict[TopicPartition, int] | None) -> dict[TopicPartition, int]:
    """The new start offset of each of ``tps``, kept within the log (as Kafka's tool)."""
    if not tps:
        return {}
    earliest = admin.list_offsets({tp: -2 for tp in tps}, read_committed=False)
    latest = admin.list_offsets({tp: -1 for tp in tps}, read_committed=False)
    at_time: dict = {}
    if to_datetime is not None:
        at_time = admin.list_offsets({tp: parse_datetime(to_datetime) for tp in tps},
                                     read_committed=False)
    current: dict = {}
    if to == "current":
        current = admin.list_share_group_offsets(group_id)
    new = {}
    for tp in tps:
        low, high = earliest[tp][0], latest[tp][0]
        if to == "earliest":
            target = low
        elif to == "latest":
            target = high
        elif to == "current":
            known = current.get(tp)
            target = known.start_offset if known is not None else high
        elif to_offset is not None:
            target = to_offset
        elif to_datetime is not None:
            target = at_time[tp][0] if at_time[tp][0] >= 0 else high
        else:
            assert plan is not None
            target = plan[tp]
        new[tp] = min(max(target, low), high)
    return new


@tool(share_groups, "delete-offsets")
@name_argument("group_id", "--group", metavar="GROUP")
@click.option("--topic", "topics", multiple=True, metavar="TOPIC",
              help="A topic whose share state is deleted, repeatable.")
@timeout_option
def share_groups_delete_offsets(group_id, topics, timeout_ms, conf) -> None:
    """Delete GROUP's start offsets (its share state) of whole topics (the group must have no
    active member). Kafka's TOPIC/STATUS table; exit 1 if any topic failed."""
    if not topics:
        raise click.UsageError("give --topic (repeatable)")
    wanted = sorted(set(topics))
    with admin_for(conf, timeout_ms) as admin:
        top, per_topic = admin.delete_share_group_offsets(group_id, wanted)
    if top is not None and top.wire_code not in _TOPIC_LEVEL:
        click.echo(f"\nError: {top.message}")
    status = {t: per_topic.get(t, top) for t in wanted}
    click.echo()
    echo_table(["TOPIC", "STATUS"],
               [(t, "Successful" if e is None else f"Error: {e.message}")
                for t, e in status.items()])
    if top is not None or any(status.values()):
        raise click.exceptions.Exit(1)


# (Kafka's tool reports these in the topic rows only)
_TOPIC_LEVEL = frozenset({3, 29})  # UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED


_JAVA_ERRORS = "org.apache.kafka.common.errors."


@tool(share_groups, "delete")
@name_argument("group_ids", "--group", multiple=True, required=False, metavar="GROUP")
@click.option("--all-groups", is_flag=True, help="Every share group (those with members fail).")
@timeout_option
def share_groups_delete(group_ids, all_groups, timeout_ms, conf) -> None:
    """Delete share groups and their share state (they must have no active member)."""
    if bool(group_ids) == all_groups:
        raise click.UsageError("give GROUP (or --group GROUP, repeatable) or --all-groups")
    failed: dict[str, str] = {}
    with admin_for(conf, timeout_ms) as admin:
        listed = {g.group_id: g for g in admin.list_groups(types=["share"])}
        wanted = list(dict.fromkeys(listed if all_groups else group_ids))
        for group_id in wanted:  # Kafka's tool checks these before it asks
            listing = listed.get(group_id)
            # (the reasons as Kafka's tool prints them, its exceptions' names included)
            if listing is None:
                failed[group_id] = (f"{_JAVA_ERRORS}GroupIdNotFoundException: Group '{group_id}' "
                                    "is not a share group.")
            elif listing.state == "Dead":
                failed[group_id] = (f"java.lang.IllegalStateException: Share group '{group_id}' "
                                    "group state is DEAD.")
            elif listing.state and listing.state != "Empty":
                failed[group_id] = (f"{_JAVA_ERRORS}GroupNotEmptyException: Share group "
                                    f"'{group_id}' is not EMPTY.")
        asked = [g for g in wanted if g not in failed]
        results = admin.delete_groups(asked) if asked else {}
    for group_id, error in results.items():
        if error is not None:
            failed[group_id] = f"{type(error).__name__}: {error}"
    deleted = ", ".join(f"'{g}'" for g in asked if g not in failed)
    if not failed:
        click.echo(f"Deletion of requested share groups ({deleted}) was successful.")
        return
    click.echo("\nError: Deletion of some share groups failed:")
    for group_id in wanted:
        if group_id in failed:
            click.echo(f"* Group '{group_id}' could not be deleted due to: {failed[group_id]}")
    if deleted:
        click.echo(f"\nThese share groups were deleted successfully: {deleted}")
    raise click.exceptions.Exit(1)
