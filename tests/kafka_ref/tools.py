"""Kafka's command-line tools, several to a JVM (``ToolBatch.java``), and the normalization that
lets their output against minibroker be compared with their output against the reference Kafka."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass

from tests.kafka_ref.harness import java_command

TOPICS = "org.apache.kafka.tools.TopicCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
TXNS = "org.apache.kafka.tools.TransactionsCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
ACLS = "org.apache.kafka.tools.AclCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"


@dataclass
class Tool:
    main: str
    args: list[str]
    stdin: str | None = None
    unordered: bool = False  # compare the output's lines as a set (a listing in no defined order)


@dataclass
class Result:
    code: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"exit {self.code}\n--- stdout:\n{self.out}--- stderr:\n{self.err[-3000:]}"


def run_batch(tools: list[Tool], timeout: float = 300.0) -> list[Result]:
    """Run ``tools`` in order in one JVM; one Result each."""
    payload = json.dumps([{"main": t.main, "args": t.args, **({"stdin": t.stdin} if t.stdin else {})}
                          for t in tools])
    done = subprocess.run(java_command("ToolBatch"), input=payload, capture_output=True, text=True,
                          timeout=timeout)
    results = [Result(**json.loads(line)) for line in done.stdout.splitlines() if line.startswith("{")]
    if len(results) != len(tools):
        raise AssertionError(f"ToolBatch gave {len(results)} results for {len(tools)} tools "
                             f"(exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return results


# What differs between any two clusters, or two runs, and is not the tool's behavior.
_NORMALIZE = [
    (re.compile(r"TopicId: \S+"), "TopicId: <id>"),
    (re.compile(r"\bconsumer-[\w.-]+-\d+-[0-9a-f-]{36}\b"), "<consumer-id>"),
    (re.compile(r"\bconsole-consumer-\d+\b"), "console-consumer-<n>"),
    # a Java stack trace's frames (the tool prints them; they depend on how the JVM ran it)
    (re.compile(r"^\s*(at [\w$.<>/]+\(.*\)|\.\.\. \d+ more)\s*$", re.M), ""),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"/127\.0\.0\.1"), "/<host>"),
    (re.compile(r"\b\d{13}\b"), "<ms>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?"), "<datetime>"),
]


def normalize(text: str, extra: dict[str, str] | None = None) -> str:
    """Ids, hosts, ports and times replaced by placeholders; columns' padding collapsed."""
    for old, new in (extra or {}).items():
        text = text.replace(old, new)
    for pattern, replacement in _NORMALIZE:
        text = pattern.sub(replacement, text)
    lines = [re.sub(r"[ \t]+", " ", line).strip() for line in text.splitlines()]
    return "\n".join(line for line in lines if line)
