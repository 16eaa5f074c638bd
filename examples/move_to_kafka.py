"""Move topics and consumer groups' committed offsets from minibroker to a Kafka cluster, with our
client only (docs/moving-to-kafka.md, "Moving the data and the committed offsets").

    python examples/move_to_kafka.py --source 127.0.0.1:9092 \\
        --target kafka1:9092,kafka2:9092,kafka3:9092 [--topic T ...] [--group G ...] \\
        [--replication-factor 3]

Stop the producers and consumers first (a record produced during the move may be left behind; a
group with active members on the target is refused). For each topic (default: every topic but the
internal ones) it creates the topic on the target with the same partition count and the topic
configs set on the source, then copies each partition in order: key, value, headers, timestamp
(committed records only: aborted ones and control markers are not copied, so offsets change).
For each group (default: every group with committed offsets) it translates each committed offset
(the target offset of the first copied record at or after it) and commits it on the target, with
its metadata. The target topics must be empty. Prints one JSON line per topic and per group.
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
import time
from collections.abc import Sequence

from client import Admin, Consumer, NewTopic, OffsetAndMetadata, Producer, TopicPartition
from client.structs import ConfigResource

# Topic configs that follow the data; the rest (file and segment sizes, for example) are the
# target's business. Only those set on the source topic are copied.
COPIED_CONFIGS = ("cleanup.policy", "retention.ms", "retention.bytes", "max.message.bytes",
                  "message.timestamp.type", "min.compaction.lag.ms", "delete.retention.ms",
                  "compression.type")


def copy_topic(source: str, target: str, topic: str, replication_factor: int,
               client_config: dict[str, str]) -> dict[int, tuple[int, list[int]]]:
    """Create ``topic`` on the target and copy it; per partition ``(target start offset, the
    source offsets copied, in order)``."""
    with Admin({"bootstrap.servers": source, **client_config}) as admin:
        (description,) = admin.describe_topics([topic])
        resource = ConfigResource("topic", topic)
        configs = admin.describe_configs([resource])[resource]
    partitions = len(description.partitions)
    settings = {name: entry.value for name, entry in configs.items()
                if name in COPIED_CONFIGS and entry.source == "DYNAMIC_TOPIC_CONFIG"
                and entry.value is not None}
    with Admin({"bootstrap.servers": target, **client_config}) as admin:
        error = admin.create_topics([NewTopic(topic, partitions, replication_factor, settings)])[topic]
    if error is not None:
        raise SystemExit(f"creating {topic} on the target failed: {error}")
    moved: dict[int, tuple[int, list[int]]] = {}
    reader_config = {"bootstrap.servers": source, "isolation.level": "read_committed",
                     "enable.auto.commit": False, **client_config}
    writer_config = {"bootstrap.servers": target, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 5, **client_config}
    with Consumer(reader_config) as consumer, Producer(writer_config) as producer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        with Consumer({"bootstrap.servers": target, **client_config}) as probe:
            starts = probe.end_offsets(tps)
        if any(starts.values()):
            raise SystemExit(f"topic {topic} is not empty on the target: {starts}")
        ends = consumer.end_offsets(tps)  # the last stable offsets
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        copied: dict[int, list[int]] = {p: [] for p in range(partitions)}
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for r in consumer.poll(0.5):
                if r.offset >= ends[(r.topic, r.partition)]:
                    continue
                producer.send(topic, r.value, key=r.key, partition=r.partition,
                              headers=list(r.headers), timestamp=r.timestamp)
                copied[r.partition].append(r.offset)
        producer.flush()
    for p in range(partitions):
        moved[p] = (starts[TopicPartition(topic, p)], copied[p])
    return moved


def translate(committed: int, start: int, copied: list[int]) -> int:
    """The target offset of the first copied record at or after source offset ``committed``."""
    return start + bisect.bisect_left(copied, committed)


def move_group(source: str, target: str, group: str,
               moved: dict[str, dict[int, tuple[int, list[int]]]],
               client_config: dict[str, str]) -> dict[str, int]:
    with Admin({"bootstrap.servers": source, **client_config}) as admin:
        offsets = admin.list_group_offsets(group)
    translated: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, committed in offsets.items():
        if tp.topic not in moved or committed is None or committed.offset < 0:
            continue
        start, copied = moved[tp.topic][tp.partition]
        translated[tp] = OffsetAndMetadata(translate(committed.offset, start, copied),
                                           committed.metadata)
    if translated:
        with Consumer({"bootstrap.servers": target, "group.id": group, "enable.auto.commit": False,
                       **client_config}) as committer:
            committer.commit(translated)
    return {f"{tp.topic}:{tp.partition}": om.offset for tp, om in sorted(translated.items())}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="minibroker's bootstrap servers")
    parser.add_argument("--target", required=True, help="the Kafka cluster's bootstrap servers")
    parser.add_argument("--topic", action="append", default=[], help="repeatable (default: all)")
    parser.add_argument("--group", action="append", default=[], help="repeatable (default: all)")
    parser.add_argument("--replication-factor", type=int, default=-1,
                        help="of the new topics (default: the target's default.replication.factor)")
    parser.add_argument("-X", "--config", action="append", default=[], metavar="KEY=VALUE",
                        help="client setting for both sides (security, for example)")
    args = parser.parse_args(argv)
    client_config = dict(item.split("=", 1) for item in args.config)
    with Admin({"bootstrap.servers": args.source, **client_config}) as admin:
        topics = args.topic or [t for t in admin.list_topics() if not t.startswith("__")]
        groups = args.group or [g.group_id for g in admin.list_groups()]
    began = time.monotonic()
    moved = {}
    for topic in topics:
        moved[topic] = copy_topic(args.source, args.target, topic, args.replication_factor,
                                  client_config)
        count = sum(len(copied) for _, copied in moved[topic].values())
        print(json.dumps({"topic": topic, "partitions": len(moved[topic]), "records": count}))
    for group in groups:
        offsets = move_group(args.source, args.target, group, moved, client_config)
        print(json.dumps({"group": group, "committed": offsets}))
    print(f"moved {len(topics)} topic(s) and {len(groups)} group(s) in "
          f"{time.monotonic() - began:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
