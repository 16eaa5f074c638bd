"""OffsetForLeaderEpoch (KIP-320), answered for one broker as Kafka's would be.

A partition here has one leader epoch, 0, that started at the log start offset (Kafka's leader
epoch cache after ``Partition.makeLeader`` and ``truncateFromStart``). So, as Kafka's
``LeaderEpochFileCache.endOffsetFor`` answers: epoch 0 ends at the log end offset; an epoch above
0 is unknown (epoch -1, offset -1, no error), as is -1; an epoch below -1 ends where epoch 0
starts. A current leader epoch above 0 is UNKNOWN_LEADER_EPOCH (the client knows a newer
leader), below 0 but not -1 (none given) FENCED_LEADER_EPOCH. Authorization as
``KafkaApis.handleOffsetForLeaderEpochRequest``: CLUSTER_ACTION on the cluster answers every topic,
otherwise DESCRIBE per topic; the refused topics come last, TOPIC_AUTHORIZATION_FAILED."""

from __future__ import annotations

from broker.handlers.authz import allowed
from broker.handlers.context import Broker
from broker.handlers.marks import handles
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError

LEADER_EPOCH = 0  # the only leader epoch of a single broker's partitions
NO_EPOCH = -1


def _end_offset(broker: Broker, topic: str, part) -> dict:
    out = {"partition": part.partition, "error_code": ErrorCode.NONE, "leader_epoch": NO_EPOCH,
           "end_offset": -1}
    try:
        partition = broker.partition(topic, part.partition)
    except KafkaError as exc:
        out["error_code"] = exc.code
        return out
    current = part.current_leader_epoch
    if current != NO_EPOCH and current > LEADER_EPOCH:
        out["error_code"] = ErrorCode.UNKNOWN_LEADER_EPOCH
    elif current != NO_EPOCH and current < LEADER_EPOCH:
        out["error_code"] = ErrorCode.FENCED_LEADER_EPOCH
    elif part.leader_epoch == LEADER_EPOCH:
        out["leader_epoch"], out["end_offset"] = LEADER_EPOCH, partition.log_end_offset
    elif part.leader_epoch < NO_EPOCH:
        out["leader_epoch"], out["end_offset"] = part.leader_epoch, partition.log_start_offset
    return out


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH)
def offset_for_leader_epoch(broker: Broker, header, request) -> dict:
    every = allowed(broker, Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    answered, refused = [], []
    for topic in request.topics:
        if every or allowed(broker, Operation.DESCRIBE, ResourceType.TOPIC, topic.topic):
            answered.append({"topic": topic.topic, "partitions": [
                _end_offset(broker, topic.topic, part) for part in topic.partitions]})
        else:
            refused.append({"topic": topic.topic, "partitions": [
                {"partition": part.partition, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
                for part in topic.partitions]})
    return {"throttle_time_ms": 0, "topics": answered + refused}
