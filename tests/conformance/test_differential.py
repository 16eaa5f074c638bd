"""Differential conformance: the corpus (tests/conformance/corpus) replayed against Kafka 4.4 (one
node) and against minibroker by the same driver, answers compared field by field.

Every divergence must be listed in docs/conformance.md under "Kept" with its reason, and every
listed one must still occur, so that the list stays true. Fixed divergences are described there too.
"""

from __future__ import annotations

import re
import uuid

import pytest

from protocol.api_keys import ApiKey
from protocol.messages import encode_request
from tests.broker_process import BrokerProcess
from tests.conformance.driver import (
    Answer,
    Run,
    Symbols,
    compare,
    diff,
    listed_divergences,
    load_corpus,
    normalize,
)
from tests.kafka_ref.fixtures import SMALL_INTERNAL_TOPICS
from tests.kafka_ref.harness import REPO

REPORT = REPO / "docs" / "conformance.md"


def matches(listed: str, line: str) -> bool:
    """A listed divergence is the line itself, or, starting with ``*``, the end of lines, or,
    ending with ``*``, their start."""
    if listed.startswith("*"):
        return line.endswith(listed[1:])
    if listed.endswith("*"):
        return line.startswith(listed[:-1])
    return line == listed


# -- without Kafka: the corpus and the comparison --------------------------------------------------


def test_corpus_cases_encode():
    """Every request of every case names an API and version our codecs encode, and every
    reference names an earlier labelled step (checked with stand-in answers)."""
    for case in load_corpus():
        run = Run(0, case, "check")
        labels = {}
        for i, step in enumerate(case["steps"], 1):
            label = step.get("as", str(i))
            if "api" not in step or "body_hex" in step:
                continue
            run.saved.update(labels)
            body = run.resolve(step.get("body", {}))
            encode_request(ApiKey[step["api"]], step["v"], body)
            labels[label] = _stand_in(step)


def _stand_in(step):
    return {"producer_id": 1000, "producer_epoch": 0, "member_id": "m", "generation_id": 1,
            "leader": "m", "error_code": 0, "member_epoch": 1,
            "assignment": {"topic_partitions": [{"topic_id": uuid.UUID(int=1),
                                                 "partitions": [0]}]}}


def test_normalize_names_ids_by_appearance_and_keeps_relations():
    names = {"t": "t.case.run1"}
    k = Symbols(names)
    m = Symbols({"t": "t.case.run2"})
    a = Answer("1", "INIT_PRODUCER_ID", 4, {"producer_id": 5000, "producer_epoch": 0,
                                            "throttle_time_ms": 7})
    b = Answer("1", "INIT_PRODUCER_ID", 4, {"producer_id": 3, "producer_epoch": 0,
                                            "throttle_time_ms": 0})
    assert normalize(a, k) == normalize(b, m) == {"producer_id": "P0", "producer_epoch": 0}
    # a second, different producer id is P1 on one side, P0 again on the other: a divergence
    c = Answer("2", "INIT_PRODUCER_ID", 4, {"producer_id": 5001, "producer_epoch": 0})
    d = Answer("2", "INIT_PRODUCER_ID", 4, {"producer_id": 3, "producer_epoch": 0})
    assert list(diff(normalize(c, k), normalize(d, m))) == [("producer_id", "P1", "P0")]
    topic = Answer("3", "METADATA", 9, {"topics": [{"name": "t.case.run1", "error_code": 3}]})
    assert normalize(topic, k) == {"topics": [{"name": "{t}",
                                               "error_code": "UNKNOWN_TOPIC_OR_PARTITION(3)"}]}


def test_listed_divergence_matching():
    line = "case#2 LIST_OFFSETS v7 topics[0].partitions[0].leader_epoch: kafka=0 minibroker=-1"
    assert matches(line, line)
    assert matches("*.leader_epoch: kafka=0 minibroker=-1", line)
    assert not matches("*.leader_epoch: kafka=1 minibroker=-1", line)
    assert matches("case#2 LIST_OFFSETS v7 topics[0]*", line)
    assert not matches("case#3 LIST_OFFSETS v7 topics[0]*", line)


def test_report_lists_divergences_in_the_driver_format():
    kept = listed_divergences(REPORT)
    assert kept, "docs/conformance.md lists no kept divergence (or its '## Kept' heading moved)"
    shape = re.compile(r"^(\*.+|[a-z0-9-]+#[\w-]+ [A-Z_0-9]+ v-?\d+ .+)"
                       r"(: kafka=.+ minibroker=.+|\*)$")
    assert [k for k in kept if not shape.match(k)] == []


# -- against both brokers ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minibroker(tmp_path_factory):
    # The internal topics' partition counts of the kafka_one fixture, so that a group or a
    # transactional id lands on the same partition of __consumer_offsets on both.
    work = tmp_path_factory.mktemp("conformance")
    # group.initial.rebalance.delay.ms as KafkaCluster sets it.
    (work / "server.properties").write_text(
        "".join(f"{key}={value}\n" for key, value in SMALL_INTERNAL_TOPICS.items()
                if not key.startswith("share.")) + "group.initial.rebalance.delay.ms=0\n")
    with BrokerProcess(work / "data", "--config", str(work / "server.properties")) as proc:
        yield proc


@pytest.fixture(scope="module")
def divergences(kafka_one, minibroker):
    result = compare(kafka_one.nodes[0].port, minibroker.port, load_corpus(),
                     internal_partitions=SMALL_INTERNAL_TOPICS["offsets.topic.num.partitions"])
    return [line for lines in result.values() for line in lines]


@pytest.mark.xdist_group("kafka_ref")
def test_every_divergence_is_listed(divergences):
    kept = listed_divergences(REPORT)
    unlisted = [line for line in divergences if not any(matches(k, line) for k in kept)]
    assert unlisted == [], (
        "divergences from Kafka 4.4 not in docs/conformance.md (fix them, or list them under"
        " '## Kept' with the reason):\n" + "\n".join(unlisted))


@pytest.mark.xdist_group("kafka_ref")
def test_every_listed_divergence_still_occurs(divergences):
    stale = [k for k in sorted(listed_divergences(REPORT))
             if not any(matches(k, line) for line in divergences)]
    assert stale == [], ("listed in docs/conformance.md but no longer seen (remove them, or move"
                         " them to '## Fixed'):\n" + "\n".join(stale))
