"""A Node.js client (kafkajs 2.2.4) against the broker: an idempotent producer, an exactly-once
copier (transactional producer + consumer group reading read_committed + sendOffsets), an
aborted transaction, and a read_committed reader of the output; and kafkajs's admin client
walking the calls Node admin tools and web consoles make (cluster, topics, partitions, configs,
group offsets, record deletion, group deletion).

kafkajs picks InitProducerId v1 when the broker advertises v0-3 or more: the broker used to
advertise that range but serve only v0 and v3, so every idempotent or transactional kafkajs
producer failed at start. The Node project is ``tests/node`` (package-lock.json pins kafkajs);
it is installed with ``npm ci`` into a temporary directory at test time. Without node or npm the
tests that run them skip (fail under CI; `make test` installs them: tests/system_programs.sh).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from protocol.api_keys import ApiKey
from protocol.messages.api_versions import ADVERTISED
from tests import needs

NODE_PROJECT = Path(__file__).resolve().parent.parent / "node"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def node_project(tmp_path_factory) -> Path:
    """tests/node installed with ``npm ci`` (the lockfile's versions) in a temporary copy."""
    needs.program("node", "nodejs")
    npm = needs.program("npm", "npm")
    work = tmp_path_factory.mktemp("node")
    for name in ("package.json", "package-lock.json", "kafkajs_eos.js", "kafkajs_admin.js"):
        shutil.copy(NODE_PROJECT / name, work / name)
    env = dict(os.environ, npm_config_cache=str(work / ".npm-cache"), npm_config_update_notifier="false")
    result = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=work, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, f"npm ci failed:\n{result.stdout}\n{result.stderr}"
    return work


def test_kafkajs_uses_init_producer_id_v1_which_is_served():
    # the version kafkajs 2.2.4 sends: the highest of its 0-1 within the broker's range
    assert ADVERTISED[ApiKey.INIT_PRODUCER_ID].min <= 1 <= ADVERTISED[ApiKey.INIT_PRODUCER_ID].max


def _run_node(node_project: Path, script: str, port: int, suffix: str) -> dict:
    """Run one of tests/node's scripts against the broker; its last JSON line."""
    result = subprocess.run(
        [needs.program("node", "nodejs"), script, f"127.0.0.1:{port}", suffix],
        cwd=node_project, capture_output=True, text=True, timeout=180,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result from kafkajs:\n{result.stdout}\n{result.stderr}"
    outcome = json.loads(lines[-1])
    assert "error" not in outcome, outcome.get("error")
    assert result.returncode == 0
    return outcome


def test_kafkajs_admin_walk(node_project, broker_proc):
    outcome = _run_node(node_project, "kafkajs_admin.js", broker_proc.port, "adm")
    assert outcome["cluster"] == {"brokers": [0], "controller": 0}
    assert outcome["created"] is True
    assert outcome["partitions"] == [0, 1, 2]  # CreatePartitions 2 -> 3
    assert outcome["listed"] is True
    # AlterConfigs replaced the topic's set; DescribeConfigs reports values and defaults
    assert outcome["topicConfigs"]["cleanup.policy"] == {
        "value": "compact", "isDefault": False, "readOnly": False}
    assert outcome["topicConfigs"]["retention.ms"]["value"] == "7200000"
    assert outcome["topicConfigs"]["segment.bytes"]["isDefault"] is True
    assert outcome["brokerConfigCount"] > 10
    # the compacted topic is applied: a keyless record is refused as Kafka refuses it
    assert outcome["keylessOnCompacted"] == "INVALID_RECORD"
    assert outcome["groupOffsets"] == [[0, "6"], [1, "-1"], [2, "-1"]]
    assert outcome["groups"] == ["js-admin-group-adm"]
    assert outcome["groupState"] == "Empty"
    # DeleteRecords moved partition 0's log start offset to 4
    assert outcome["topicOffsets"] == [[0, "4", "10"], [1, "0", "0"], [2, "0", "0"]]
    assert outcome["groupsAfterDelete"] == 0
    assert outcome["listedAfterDelete"] is False


def test_kafkajs_exactly_once_copy(node_project, broker_proc):
    outcome = _run_node(node_project, "kafkajs_eos.js", broker_proc.port, "eos")
    count = 20
    assert outcome["copied"] >= count
    # every input record was consumed and committed in the transactions
    assert outcome["committed"] == count
    # read_committed: each committed record once (a redelivered batch may repeat what an
    # aborted retry wrote, never the explicitly aborted records)
    assert sorted(set(outcome["output"])) == sorted(f"v{i}" for i in range(count))
    assert not any(v.startswith("aborted") for v in outcome["output"])
    assert len(outcome["output"]) == count
