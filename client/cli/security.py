"""``acls add|list|remove`` (kafka-acls.sh's option names) and ``users list|add|delete`` (SCRAM
credentials, what ``kafka-configs.sh --entity-type users`` does), through ``client.Admin``.

    minibroker acls add --allow-principal User:alice --operation Write --topic orders
    minibroker acls add --allow-principal User:alice --operation Read --group billing-
                        --resource-pattern-type prefixed
    minibroker acls list --principal User:alice
    minibroker acls remove --topic orders
    minibroker users add alice --mechanism SCRAM-SHA-512     (password prompted, or on stdin)
    minibroker users list
    minibroker users delete alice --mechanism SCRAM-SHA-512
"""

from __future__ import annotations

import sys

import click

from client.admin import Admin
from client.cli.common import (
    CONTEXT,
    client_options,
    echo_json,
    echo_table,
    for_admin,
    format_option,
    friendly_errors,
)
from client.structs import ACL_OPERATIONS, AclBinding, AclBindingFilter

CLUSTER = "kafka-cluster"
# Kafka's spellings (ClusterAction, IdempotentWrite, ...) and ours (cluster_action, ...).
_BY_SPELLING = {o.replace("_", ""): o for o in ACL_OPERATIONS}
OPERATION_HELP = "Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, " \
                 "AlterConfigs, IdempotentWrite or All"


def _operations(ctx, param, values):
    names = [values] if isinstance(values, str) else list(values)
    out = []
    for value in names:
        name = _BY_SPELLING.get(value.replace("_", "").replace("-", "").lower())
        if name is None:
            raise click.BadParameter(f"{value!r} is not an operation ({OPERATION_HELP})")
        out.append(name)
    return out if not isinstance(values, str) else out[0]


def _resources(topics, groups, transactional_ids, cluster) -> list[tuple[str, str]]:
    return ([("topic", t) for t in topics] + [("group", g) for g in groups]
            + [("transactional_id", t) for t in transactional_ids]
            + ([("cluster", CLUSTER)] if cluster else []))


def resource_options(fn):
    for option in reversed([
        click.option("--topic", "topics", multiple=True, help="A topic (repeatable; * = all)."),
        click.option("--group", "groups", multiple=True, help="A consumer group (repeatable)."),
        click.option("--transactional-id", "transactional_ids", multiple=True,
                     help="A transactional id (repeatable)."),
        click.option("--cluster", is_flag=True, help="The cluster resource."),
        click.option("--resource-pattern-type", "pattern",
                     type=click.Choice(["literal", "prefixed", "any", "match"],
                                       case_sensitive=False),
                     default=None, help="literal (default for add) or prefixed names; list and "
                                        "remove also take any and match."),
    ]):
        fn = option(fn)
    return fn


def _echo_kafka_acls(bindings: list[AclBinding]) -> None:
    """kafka-acls.sh --list's blocks: for each resource pattern, ``Current ACLs for resource
    `ResourcePattern(...)`: `` and one TAB-indented ``(principal=..., host=..., operation=...,
    permissionType=...)`` line per ACL, then a blank line."""
    by_resource: dict[tuple[str, str, str], list[AclBinding]] = {}
    for b in bindings:
        by_resource.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    for (kind, name, pattern), acls_of in by_resource.items():
        click.echo(f"Current ACLs for resource `ResourcePattern(resourceType={kind.upper()}, "
                   f"name={name}, patternType={pattern.upper()})`: ")
        click.echo("\n".join(f"\t(principal={b.principal}, host={b.host}, "
                             f"operation={b.operation.upper()}, "
                             f"permissionType={b.permission.upper()})" for b in acls_of))
        click.echo()


def _echo(bindings: list[AclBinding], fmt: str) -> None:
    if fmt == "json":
        echo_json([b._asdict() for b in bindings])
        return
    echo_table(["PRINCIPAL", "HOST", "OPERATION", "PERMISSION", "RESOURCE TYPE", "NAME",
                "PATTERN TYPE"],
               [(b.principal, b.host, b.operation.upper(), b.permission.upper(),
                 b.resource_type.upper(), b.name, b.pattern_type.upper()) for b in bindings])


@click.group("acls", context_settings=CONTEXT)
def acls() -> None:
    """Manage ACLs (the broker must run with authorizer.class.name set)."""


@acls.command("add")
@click.option("--allow-principal", "allow", multiple=True, metavar="User:NAME",
              help="Principal allowed (repeatable; User:* = everyone).")
@click.option("--deny-principal", "deny", multiple=True, metavar="User:NAME",
              help="Principal denied (repeatable); a deny wins over any allow.")
@click.option("--allow-host", "allow_hosts", multiple=True, default=["*"], show_default=True)
@click.option("--deny-host", "deny_hosts", multiple=True, default=["*"], show_default=True)
@click.option("--operation", "operations", multiple=True, required=True,
              callback=_operations, help=f"{OPERATION_HELP} (repeatable).")
@resource_options
@format_option
@client_options
@friendly_errors
def add(allow, deny, allow_hosts, deny_hosts, operations, topics, groups, transactional_ids,
        cluster, pattern, fmt, conf) -> None:
    """Add ACLs: every principal x host x operation x resource given."""
    resources = _resources(topics, groups, transactional_ids, cluster)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not allow and not deny:
        raise click.UsageError("give --allow-principal or --deny-principal")
    pattern = (pattern or "literal").lower()
    if pattern not in ("literal", "prefixed"):
        raise click.UsageError("add takes --resource-pattern-type literal or prefixed")
    bindings = [
        AclBinding(rtype, name, principal, op, permission, pattern, host)
        for permission, principals, hosts in (("allow", allow, allow_hosts),
                                              ("deny", deny, deny_hosts))
        for principal in principals for host in hosts
        for op in operations for rtype, name in resources
    ]
    with Admin(for_admin(conf)) as admin:
        admin.create_acls(bindings)
    click.echo(f"Added {len(bindings)} ACL(s).", err=True)
    _echo(bindings, fmt)


def _filters(principal, topics, groups, transactional_ids, cluster, pattern) -> list:
    resources = _resources(topics, groups, transactional_ids, cluster)
    pattern = (pattern or ("literal" if resources else "any")).lower()
    if not resources:
        return [AclBindingFilter(principal=principal, pattern_type=pattern)]
    return [AclBindingFilter(rtype, name, principal, pattern_type=pattern)
            for rtype, name in resources]


@acls.command("list")
@click.option("--principal", default=None, help="Only this principal's ACLs.")
@resource_options
@format_option
@client_options
@friendly_errors
def list_acls(principal, topics, groups, transactional_ids, cluster, pattern, fmt, conf) -> None:
    """List ACLs (all, or those of the given resources; --resource-pattern-type match: every ACL
    that applies to the named resource)."""
    found: list[AclBinding] = []
    with Admin(for_admin(conf)) as admin:
        for f in _filters(principal, topics, groups, transactional_ids, cluster, pattern):
            found.extend(b for b in admin.describe_acls(f) if b not in found)
    if fmt == "text":
        _echo_kafka_acls(found)
        return
    _echo(found, fmt)


@acls.command("remove")
@click.option("--principal", default=None, help="Only this principal's ACLs.")
@click.option("--operation", default="any", callback=_operations,
              help=f"Only this operation ({OPERATION_HELP}).")
@resource_options
@format_option
@client_options
@friendly_errors
def remove(principal, operation, topics, groups, transactional_ids, cluster, pattern, fmt,
           conf) -> None:
    """Remove the ACLs of the given resources (and principal, operation)."""
    if not (topics or groups or transactional_ids or cluster or principal):
        raise click.UsageError("name what to remove: a resource (--topic, ...) or --principal")
    filters = [f._replace(operation=operation)
               for f in _filters(principal, topics, groups, transactional_ids, cluster, pattern)]
    with Admin(for_admin(conf)) as admin:
        removed = admin.delete_acls(filters)
    click.echo(f"Removed {len(removed)} ACL(s).", err=True)
    _echo(removed, fmt)


# -- SCRAM users -----------------------------------------------------------------------------------

MECHANISMS = click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512"], case_sensitive=False)


@click.group("users", context_settings=CONTEXT)
def users() -> None:
    """Manage SCRAM users (credentials are salted and hashed before they leave this process)."""


@users.command("list")
@format_option
@client_options
@friendly_errors
def list_users(fmt, conf) -> None:
    """Every SCRAM user with its mechanisms and iterations (never a key or a password)."""
    with Admin(for_admin(conf)) as admin:
        described = admin.describe_user_scram_credentials()
    if fmt == "json":
        echo_json(described)
        return
    echo_table(["USER", "MECHANISM", "ITERATIONS"],
               [(u, m, i) for u, mechs in sorted(described.items())
                for m, i in sorted(mechs.items())])


@users.command("add")
@click.argument("user")
@click.option("--mechanism", type=MECHANISMS, default="SCRAM-SHA-512", show_default=True)
@click.option("--iterations", type=click.IntRange(4096, 16384), default=8192, show_default=True)
@click.option("--password", help="Default: prompted for twice on a terminal, else the first "
                                    "line of stdin.")
@client_options
@friendly_errors
def add_user(user, mechanism, iterations, password, conf) -> None:
    """Create or replace USER's credential for a mechanism."""
    if password is None:
        password = _password()
    with Admin(for_admin(conf)) as admin:
        admin.alter_user_scram_credentials([(user, mechanism.upper(), password, iterations)])
    click.echo(f"Set the {mechanism.upper()} credential of {user}.", err=True)


def _password() -> str:
    """Typed twice on a terminal (hidden); piped: one line of stdin (``echo pw | minibroker
    users add alice``), without its line end."""
    if _stdin_is_a_terminal():
        return click.prompt("Password", hide_input=True, confirmation_prompt=True)
    line = sys.stdin.readline()
    password = line[:-1] if line.endswith("\n") else line
    password = password[:-1] if password.endswith("\r") else password
    if not password:
        raise click.UsageError("no password: stdin is empty (pipe one line, or use a terminal)")
    return password


def _stdin_is_a_terminal() -> bool:
    return sys.stdin.isatty()


@users.command("delete")
@click.argument("user")
@click.option("--mechanism", type=MECHANISMS, multiple=True, help="Default: both.")
@client_options
@friendly_errors
def delete_user(user, mechanism, conf) -> None:
    """Remove USER's credentials (of the given mechanisms)."""
    with Admin(for_admin(conf)) as admin:
        if mechanism:
            mechanisms = [m.upper() for m in mechanism]
        else:
            mechanisms = list(admin.describe_user_scram_credentials([user])[user])
        admin.alter_user_scram_credentials(deletions=[(user, m) for m in mechanisms])
    click.echo(f"Deleted the {', '.join(mechanisms)} credential(s) of {user}.", err=True)
