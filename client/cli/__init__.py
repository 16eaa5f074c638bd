"""Client commands of the ``minibroker`` CLI (Kafka's bin/kafka-*.sh tools and kcat).

``COMMANDS`` is what ``broker/cli.py`` adds to its click group; ``python -m client.cli`` runs the
same commands without the broker. Shared options and error handling: ``client/cli/common.py``.

    minibroker topics create events --partitions 6
    printf 'k1:hello\\nk2:world\\n' | minibroker produce events --key-separator :
    minibroker consume events --from-beginning --max-messages 2 --format json
"""

from __future__ import annotations

import click

from client.cli.admin_tools import configs  # also adds groups delete, transactions ...
from client.cli.common import CONTEXT
from client.cli.groups import groups
from client.cli.perf import perf
from client.cli.records import consume, produce
from client.cli.security import acls, users
from client.cli.topics import get_offsets, topics
from client.cli.transactions import transactions

COMMANDS: list[click.Command] = [
    topics, produce, consume, groups, transactions, get_offsets, perf, configs, acls, users
]


@click.group(context_settings=CONTEXT)
def main() -> None:
    """Client tools (the same commands as ``minibroker``)."""


for _command in COMMANDS:
    main.add_command(_command)
