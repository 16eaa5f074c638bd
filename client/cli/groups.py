"""``groups list|describe|reset-offsets|delete`` (kafka-consumer-groups.sh, with its option names:
``--group``, ``--all-groups``, ``--state``, ``--members``)."""

from __future__ import annotations

import click

from client.admin import Admin
from client.cli.common import (
    CONTEXT,
    echo_deleted,
    echo_json,
    echo_table,
    for_admin,
    name_argument,
    parse_datetime,
    tool,
    with_defaults,
)
from client.consumer import Consumer
from client.structs import GroupDescription, TopicPartition

INACTIVE = ("Empty", "Dead")


@click.group(context_settings=CONTEXT)
def groups() -> None:
    """List, describe, reset and delete consumer groups."""


@tool(groups, "list", formats=True)
@click.option("--state", "states", multiple=True, metavar="STATE",
              help="Only groups in this state (Stable, Empty, ...), repeatable or "
                   "comma-separated.")
def groups_list(states, fmt, conf) -> None:
    """List group ids; with --state (a value or none, as kafka-consumer-groups.sh --list
    --state), GROUP and STATE columns."""
    wanted = [s.strip() for item in states for s in item.split(",") if s.strip()]
    with Admin(for_admin(conf)) as admin:
        listed = admin.list_groups(states=wanted)
        described = {g.group_id: g for g in admin.describe_groups([g.group_id for g in listed])}
    rows = [(g.group_id, described[g.group_id].state if g.group_id in described else None,
             g.protocol_type) for g in listed]
    if fmt == "json":
        echo_json([{"group": g, "state": s, "protocol_type": t} for g, s, t in rows])
    elif states:
        echo_table(["GROUP", "STATE"], [(g, state) for g, state, _ in rows])
    else:
        for group_id, _, _ in rows:
            click.echo(group_id)


def group_partitions(admin: Admin, description: GroupDescription,
                     committed: dict[TopicPartition, object]) -> list[dict]:
    """One row per partition of every topic the group has a commit in or is assigned: current
    (committed) offset, log-end offset, lag and the member that owns it."""
    owner = {tp: m for m in description.members for tp in m.assignment}
    topics = sorted({tp.topic for tp in committed} | {tp.topic for tp in owner})
    tps: list[TopicPartition] = []
    existing: dict = {}
    if topics:
        existing = {t.name: t for t in admin.describe_topics(None) if t.name in topics}
        for topic in topics:
            if topic in existing:
                tps += [TopicPartition(topic, p.partition) for p in existing[topic].partitions]
            else:  # deleted since the commit: show what the group knows
                tps += sorted(tp for tp in {*committed, *owner} if tp.topic == topic)
    known = [tp for tp in tps if tp.topic in existing]
    high = admin.list_offsets({tp: -1 for tp in known}, read_committed=False) if known else {}
    stable = admin.list_offsets({tp: -1 for tp in known}, read_committed=True) if known else {}
    rows = []
    for tp in sorted(set(tps)):
        offset = committed.get(tp)
        current = offset.offset if offset is not None else None  # type: ignore[attr-defined]
        log_end = high.get(tp, (None,))[0]
        lso = stable.get(tp, (None,))[0]
        member = owner.get(tp)
        rows.append({
            "group": description.group_id,
            "topic": tp.topic,
            "partition": tp.partition,
            "current_offset": current,
            "log_end_offset": log_end,
            "last_stable_offset": lso,
            # Lag: what a read_committed consumer of the group still has to read.
            "lag": max(lso - current, 0) if current is not None and lso is not None else None,
            "consumer_id": member.member_id if member else None,
            "host": member.client_host if member else None,
            "client_id": member.client_id if member else None,
        })
    return rows


@tool(groups, "describe", formats=True)
@name_argument("group_ids", "-g", "--group", multiple=True, required=False, metavar="GROUP")
@click.option("--all-groups", is_flag=True, help="Every group.")
@click.option("--members", is_flag=True, help="One row per member instead of per partition.")
@click.option("--verbose", is_flag=True,
              help="With --members: each member's assignment too (an ASSIGNMENT column).")
@click.option("--state", "show_state", is_flag=True,
              help="One row per group: coordinator, assignment strategy, state, members.")
def groups_describe(group_ids, all_groups, members, verbose, show_state, fmt, conf) -> None:
    """Per partition: committed offset, log-end offset, lag, owning member, host and client id.

    LOG-END-OFFSET is the high watermark; LAG is counted to the last stable offset (what a
    read_committed consumer can reach). An unknown group is an error (exit 1).
    """
    if bool(group_ids) == all_groups:
        raise click.UsageError("give GROUP (or --group GROUP, repeatable) or --all-groups")
    result = []
    with Admin(for_admin(conf)) as admin:
        if all_groups:
            group_ids = tuple(g.group_id for g in admin.list_groups())
        if show_state:
            _echo_states(admin, admin.describe_groups(group_ids), fmt)
            return
        for description in admin.describe_groups(group_ids):
            committed = admin.list_group_offsets(description.group_id)
            if description.state == "Dead" and not committed:
                raise click.ClickException(
                    f"consumer group {description.group_id!r} does not exist"
                )
            result.append((description, group_partitions(admin, description, committed)))
    if fmt == "json":
        echo_json([
            {
                "group": d.group_id, "state": d.state, "protocol_type": d.protocol_type,
                "protocol": d.protocol,
                "members": [{"consumer_id": m.member_id, "client_id": m.client_id,
                             "host": m.client_host,
                             "assignment": [[tp.topic, tp.partition] for tp in m.assignment]}
                            for m in d.members],
                "partitions": rows,
            }
            for d, rows in result
        ])
        return
    for description, rows in result:
        # kafka-consumer-groups.sh's stdout: a blank line and the table; the group's summary
        # goes to stderr (Kafka's says there "has no active members" when it has none).
        click.echo(f"Consumer group '{description.group_id}': state {description.state}, "
                   f"{len(description.members)} member(s), protocol "
                   f"{description.protocol_type or '-'}/{description.protocol or '-'}", err=True)
        click.echo()
        if members:
            headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
            echo_table(
                headers + (["ASSIGNMENT"] if verbose else []),
                [(description.group_id, m.member_id, m.client_host or None,
                  m.client_id or None, len(m.assignment),
                  *([",".join(f"{tp.topic}-{tp.partition}" for tp in m.assignment) or None]
                    if verbose else []))
                 for m in description.members],
            )
            continue
        echo_table(
            ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
             "CONSUMER-ID", "HOST", "CLIENT-ID"],
            [(r["group"], r["topic"], r["partition"], r["current_offset"], r["log_end_offset"],
              r["lag"], r["consumer_id"], r["host"] or None, r["client_id"] or None)
             for r in rows],
        )


def _echo_states(admin: Admin, described: list[GroupDescription], fmt: str) -> None:
    """kafka-consumer-groups.sh --describe --state: one row per group."""
    brokers = admin.describe_cluster()["brokers"]
    coordinator = None
    if brokers:  # the one broker coordinates every group
        node_id, host, port = brokers[0]
        coordinator = f"{host}:{port} ({node_id})"
    for d in described:
        if d.state == "Dead":
            raise click.ClickException(f"consumer group {d.group_id!r} does not exist")
    rows = [(d.group_id, coordinator, d.protocol or None, d.state, len(d.members))
            for d in described]
    if fmt == "json":
        echo_json([{"group": g, "coordinator": c, "assignment_strategy": a, "state": s,
                    "members": n} for g, c, a, s, n in rows])
        return
    echo_table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"], rows)


def _parse_topics(items: tuple[str, ...]) -> dict[str, list[int]]:
    """``T`` or ``T:0,1`` (Kafka's --topic syntax) -> {topic: partitions ([] = all)}."""
    wanted: dict[str, list[int]] = {}
    for item in items:
        topic, _, parts = item.partition(":")
        try:
            wanted.setdefault(topic, []).extend(int(p) for p in parts.split(",") if p)
        except ValueError:
            raise click.BadParameter(
                f"{item!r} is not TOPIC or TOPIC:P,P", param_hint="--topic"
            ) from None
    return wanted


@tool(groups, "reset-offsets", formats=True)
@name_argument("group_id", "-g", "--group", metavar="GROUP")
@click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,P]",
              help="Topic (optionally some partitions), repeatable.")
@click.option("--all-topics", is_flag=True, help="Every topic the group has committed offsets in.")
@click.option("--to-earliest", "to", flag_value="earliest")
@click.option("--to-latest", "to", flag_value="latest")
@click.option("--to-offset", type=int, default=None, help="This offset (clamped to the log).")
@click.option("--to-datetime", default=None, metavar="TIME",
              help="First offset at or after TIME (ISO-8601, UTC if no zone; or epoch ms).")
@click.option("--shift-by", type=int, default=None, help="Move the committed offset by N.")
@click.option("--execute/--dry-run", "execute", default=False,
              help="Commit the new offsets, or only show them (the default).")
def groups_reset_offsets(group_id, topics, all_topics, to, to_offset, to_datetime, shift_by,
                         execute, fmt, conf) -> None:
    """Reset GROUP's committed offsets (the group must have no active member)."""
    chosen = [name for name, given in (("--to-earliest", to == "earliest"),
                                       ("--to-latest", to == "latest"),
                                       ("--to-offset", to_offset is not None),
                                       ("--to-datetime", to_datetime is not None),
                                       ("--shift-by", shift_by is not None)) if given]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, "
                               "--to-datetime, --shift-by")
    if bool(topics) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    with Admin(for_admin(conf)) as admin:
        (description,) = admin.describe_groups([group_id])
        if description.state not in INACTIVE:
            raise click.ClickException(
                f"offsets can only be reset while group {group_id!r} is inactive; its state is "
                f"{description.state} with {len(description.members)} member(s)"
            )
        committed = admin.list_group_offsets(group_id)
        if all_topics:
            tps = sorted(committed)
        else:
            tps = []
            described = {t.name: t for t in admin.describe_topics(list(_parse_topics(topics)))}
            for topic, parts in _parse_topics(topics).items():
                tps += [TopicPartition(topic, p) for p in
                        (parts or [p.partition for p in described[topic].partitions])]
        if not tps:
            raise click.ClickException(f"group {group_id!r} has no offsets to reset")
        earliest = admin.list_offsets({tp: -2 for tp in tps}, read_committed=False)
        latest = admin.list_offsets({tp: -1 for tp in tps}, read_committed=False)
        at_time = {}
        if to_datetime is not None:
            at_time = admin.list_offsets({tp: parse_datetime(to_datetime) for tp in tps},
                                         read_committed=False)
        new = {}
        for tp in tps:
            low, high = earliest[tp][0], latest[tp][0]
            current = committed[tp].offset if tp in committed else None
            if to == "earliest":
                target = low
            elif to == "latest":
                target = high
            elif to_offset is not None:
                target = to_offset
            elif to_datetime is not None:
                target = at_time[tp][0] if at_time[tp][0] >= 0 else high
            else:
                target = (current if current is not None else low) + shift_by
            new[tp] = min(max(target, low), high)
    if execute:
        group_conf = with_defaults(conf, group_id=group_id, enable_auto_commit=False,
                                   client_id="minibroker-reset-offsets")
        with Consumer(group_conf) as consumer:
            consumer.commit(new)
    rows = [(group_id, tp.topic, tp.partition, offset) for tp, offset in sorted(new.items())]
    if fmt == "json":
        echo_json([{"group": g, "topic": t, "partition": p, "new_offset": o}
                   for g, t, p, o in rows])
    else:
        echo_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows)
        if not execute:
            click.echo("(dry run: nothing committed; add --execute to commit)", err=True)


@tool(groups, "delete")
@name_argument("group_ids", "-g", "--group", multiple=True, required=False, metavar="GROUP")
@click.option("--all-groups", is_flag=True, help="Every group without members.")
def groups_delete(group_ids, all_groups, conf) -> None:
    """Delete groups and their committed offsets (they must have no active member)."""
    if bool(group_ids) == all_groups:
        raise click.UsageError("give GROUP (or --group GROUP, repeatable) or --all-groups")
    with Admin(for_admin(conf)) as admin:
        if all_groups:
            group_ids = tuple(g.group_id for g in admin.list_groups(states=list(INACTIVE)))
        results = admin.delete_groups(group_ids)
    echo_deleted(group_ids, results, "Deleted consumer group '{}'.", "cannot delete group {!r}")
