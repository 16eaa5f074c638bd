"""``broker-api-versions`` (kafka-broker-api-versions.sh) and ``features describe``
(kafka-features.sh describe): what each broker's ApiVersions answer says.

    minibroker broker-api-versions
    minibroker features describe
"""

from __future__ import annotations

import click

from client.admin import Admin
from client.cli.common import (
    CONTEXT,
    client_options,
    echo_json,
    for_admin,
    format_option,
    friendly_errors,
    tool,
)
from protocol.api_keys import ApiKey
from protocol.messages import SCHEMAS

# The newest version of each API this software has a codec for (Kafka's tool: its client's).
_LATEST: dict[int, int] = {}
for _key, _version in SCHEMAS:
    _LATEST[_key] = max(_version, _LATEST.get(_key, _version))


# The APIs a Kafka 4.4 broker serves that this one does not: kafka-broker-api-versions.sh lists
# each as UNSUPPORTED (its list is Kafka's client's, as it ran against minibroker).
KAFKA_BROKER_APIS = {
    23: "OffsetForLeaderEpoch", 34: "AlterReplicaLogDirs", 38: "CreateDelegationToken",
    39: "RenewDelegationToken", 40: "ExpireDelegationToken", 41: "DescribeDelegationToken",
    43: "ElectLeaders", 45: "AlterPartitionReassignments", 46: "ListPartitionReassignments",
    49: "AlterClientQuotas", 55: "DescribeQuorum", 57: "UpdateFeatures", 64: "UnregisterBroker",
    68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe", 71: "GetTelemetrySubscriptions",
    72: "PushTelemetry", 74: "ListConfigResources", 75: "DescribeTopicPartitions",
    76: "ShareGroupHeartbeat", 77: "ShareGroupDescribe", 78: "ShareFetch",
    79: "ShareAcknowledge", 80: "AddRaftVoter", 81: "RemoveRaftVoter",
    83: "InitializeShareGroupState", 84: "ReadShareGroupState", 85: "WriteShareGroupState",
    86: "DeleteShareGroupState", 87: "ReadShareGroupStateSummary",
    88: "StreamsGroupHeartbeat", 89: "StreamsGroupDescribe", 90: "DescribeShareGroupOffsets",
    91: "AlterShareGroupOffsets", 92: "DeleteShareGroupOffsets",
    93: "StreamsGroupTopologyDescriptionUpdate", 94: "UnregisterController",
}


def api_name(key: int) -> str:
    """Kafka's name of an API key (``ApiVersions``, ``InitProducerId``), UNKNOWN for others."""
    try:
        return "".join(part.capitalize() for part in ApiKey(key).name.split("_"))
    except ValueError:
        return KAFKA_BROKER_APIS.get(key, "UNKNOWN")


def version_text(key: int, low: int, high: int) -> str:
    """One API as kafka-broker-api-versions.sh prints it: ``Fetch(1): 4 to 17 [usable: 17]``."""
    span = str(low) if low == high else f"{low} to {high}"
    text = f"{api_name(key)}({key}): {span}"
    latest = _LATEST.get(key)
    if latest is None:
        return text
    if latest < low:
        return text + " [unusable: node too new]"
    return text + f" [usable: {min(latest, high)}]"


@click.command("broker-api-versions", context_settings=CONTEXT)
@format_option
@client_options
@friendly_errors
def broker_api_versions(fmt, conf) -> None:
    """Each broker's API versions (kafka-broker-api-versions.sh): the range it serves of each API
    and the newest this tool can use."""
    with Admin(for_admin(conf)) as admin:
        answers = admin.api_versions()
    if fmt == "json":
        echo_json([{"node": a["node_id"], "host": a["host"], "port": a["port"],
                    "apis": [{"key": k, "name": api_name(k), "min": lo, "max": hi}
                             for k, lo, hi in sorted(a["api_keys"])]} for a in answers])
        return
    for a in answers:
        texts = {k: version_text(k, lo, hi) for k, lo, hi in a["api_keys"]}
        for key, name in KAFKA_BROKER_APIS.items():
            texts.setdefault(key, f"{name}({key}): UNSUPPORTED")
        lines = ",\n\t".join(text for _, text in sorted(texts.items()))
        click.echo(f"{a['host']}:{a['port']} (id: {a['node_id']} rack: null isFenced: false) "
                   f"-> (\n\t{lines}\n)")


@click.group(context_settings=CONTEXT)
def features() -> None:
    """Feature levels (kafka-features.sh; one broker: describe only, the levels are set in
    server.properties, e.g. transaction.version)."""


@tool(features, "describe", formats=True)
@click.option("--node-id", type=int, default=None, help="Ask this broker (default: any).")
def features_describe(node_id, fmt, conf) -> None:
    """Each feature's supported range and finalized level (kafka-features.sh describe)."""
    with Admin(for_admin(conf)) as admin:
        answers = admin.api_versions()
    chosen = [a for a in answers if node_id is None or a["node_id"] == node_id]
    if not chosen:
        raise click.ClickException(f"no broker {node_id}")
    answer = chosen[0]
    finalized = {name: high for name, _, high in answer["finalized_features"]}
    epoch = answer["finalized_features_epoch"]
    rows = [(name, low, high, finalized.get(name, 0))
            for name, low, high in sorted(answer["supported_features"])]
    if fmt == "json":
        echo_json([{"feature": n, "supported_min": lo, "supported_max": hi, "finalized": f,
                    "epoch": epoch if epoch >= 0 else None} for n, lo, hi, f in rows])
        return
    for name, low, high, level in rows:
        click.echo(f"Feature: {name}\tSupportedMinVersion: {low}\tSupportedMaxVersion: {high}"
                   f"\tFinalizedVersionLevel: {level}\tEpoch: {epoch if epoch >= 0 else '-'}")
