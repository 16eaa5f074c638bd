"""Client commands of the ``minibroker`` CLI (Kafka's bin/kafka-*.sh tools and kcat).

``COMMANDS`` is the one list of them: ``broker/cli.py`` adds it to its click group, and
``python -m client.cli`` runs the same commands without the broker. Each module defines its
commands and its own command group, and nothing else adds to another module's group. Shared
options, Kafka's option shapes and error handling: ``client/cli/common.py``.

    minibroker topics create events --partitions 6
    printf 'k1:hello\\nk2:world\\n' | minibroker produce events --key-separator :
    minibroker consume events --from-beginning --max-messages 2 --format json
"""

from __future__ import annotations

import click

from client.cli.cluster import broker_api_versions, features
from client.cli.common import CONTEXT, ToolRoot
from client.cli.configs import configs, delete_records, log_dirs
from client.cli.groups import groups
from client.cli.perf import perf
from client.cli.records import consume, produce
from client.cli.security import acls, users
from client.cli.share_groups import share_groups
from client.cli.topics import get_offsets, topics
from client.cli.transactions import transactions

COMMANDS: list[click.Command] = [
    topics, produce, consume, groups, share_groups, transactions, get_offsets, perf, configs, log_dirs,
    delete_records, acls, users, broker_api_versions, features,
]


@click.group(cls=ToolRoot, context_settings=CONTEXT)
def main() -> None:
    """Client tools (the same commands as ``minibroker``)."""


for _command in COMMANDS:
    main.add_command(_command)
