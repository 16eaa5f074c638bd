"""StreamsGroupHeartbeat and StreamsGroupDescribe (KIP-1071) against Kafka 4.4's own bytes.

The golden bytes were written by Kafka 4.4.0's generated message classes (kafka-clients
``StreamsGroupHeartbeatRequestData`` & co., ``Message.write`` at each version) with every kind of
field set: nullable structs (topology, user endpoint), nullable arrays (tasks; a null warm-up
list), uint16 ports, int16 copartition indexes, v1's reordered and widened acceptable recovery
lag. Each is decoded by our codec and encoded back to the same bytes.
"""

import pytest

from protocol.api_keys import ApiKey
from protocol.messages import decode_request, decode_response, encode_request, encode_response

GOLDEN = {
    (ApiKey.STREAMS_GROUP_HEARTBEAT, 0, "request"): (
        "04617070036d310000000000000002000272000493e001000000010202300203696e0102146170702d73746f"
        "72652d6368616e67656c6f6700000000ffff020f636c65616e75702e706f6c69637908636f6d706163740000"
        "02086170702d72657002086170702d7265700000000300010100020200000102000000000002023003000000"
        "0100000002000100037031010268fde80002026b02760002023000000001000000000000006300000100"
    ),
    (ApiKey.STREAMS_GROUP_HEARTBEAT, 1, "request"): (
        "04617070036d310000000000000002000272000493e001000000010202300203696e0102146170702d73746f"
        "72652d6368616e67656c6f6700000000ffff020f636c65616e75702e706f6c69637908636f6d706163740000"
        "02086170702d72657002086170702d7265700000000300010100020200000102000000000002023003000000"
        "0100000002000100037031010268fde80002026b02760002023000000001000000000000006300000100"
    ),
    (ApiKey.STREAMS_GROUP_HEARTBEAT, 0, "response"): (
        "00000000000000036d310000000300001388000027100000ea600201086d697373696e670002023002000000"
        "00000101000000010000"
    ),
    (ApiKey.STREAMS_GROUP_HEARTBEAT, 1, "response"): (
        "00000000000000036d3100000003000013880000ea6000000000000027100201086d697373696e6700020230"
        "020000000000010100000000010000"
    ),
    (ApiKey.STREAMS_GROUP_DESCRIBE, 0, "request"): (
        "02046170700100"
    ),
    (ApiKey.STREAMS_GROUP_DESCRIBE, 1, "request"): (
        "0204617070010000"
    ),
    (ApiKey.STREAMS_GROUP_DESCRIBE, 1, "response"): (
        "00000000020000000461707007537461626c65000000040000000401000000000202300203696e0101010000"
        "02036d3100000004000002630b2f3132372e302e302e31000000000270ff0101010202300300000000000000"
        "010001010002023003000000000000000100010100000080000000ff0007737469636b790000"
    ),
    (ApiKey.STREAMS_GROUP_DESCRIBE, 0, "response"): (
        "00000000020000000461707007537461626c65000000040000000401000000000202300203696e0101010000"
        "02036d3100000004000002630b2f3132372e302e302e31000000000270ff0101010202300300000000000000"
        "0100010100020230030000000000000001000101000000800000000000"
    ),
}


@pytest.mark.parametrize("case", sorted(GOLDEN, key=str), ids=lambda c: f"{c[0].name}-v{c[1]}-{c[2]}")
def test_kafka_bytes_round_trip(case) -> None:
    key, version, direction = case
    data = bytes.fromhex(GOLDEN[case])
    if direction == "request":
        decoded = decode_request(key, version, data)
        assert encode_request(key, version, decoded) == data
    else:
        decoded = decode_response(key, version, data)
        assert encode_response(key, version, decoded) == data


def test_heartbeat_request_fields() -> None:
    request = decode_request(ApiKey.STREAMS_GROUP_HEARTBEAT, 1,
                             bytes.fromhex(GOLDEN[(ApiKey.STREAMS_GROUP_HEARTBEAT, 1, "request")]))
    assert request.topology.epoch == 1
    sub = request.topology.subtopologies[0]
    assert sub.state_changelog_topics[0].topic_configs[0].value == "compact"
    assert list(sub.copartition_groups[0].repartition_source_topics) == [0]
    assert request.user_endpoint.port == 65000
    assert request.warmup_tasks is None and list(request.active_tasks[0].partitions) == [1, 2]
    assert request.shutdown_application is True


def test_heartbeat_response_recovery_lag_by_version() -> None:
    v0 = decode_response(ApiKey.STREAMS_GROUP_HEARTBEAT, 0, bytes.fromhex(
        GOLDEN[(ApiKey.STREAMS_GROUP_HEARTBEAT, 0, "response")]))
    v1 = decode_response(ApiKey.STREAMS_GROUP_HEARTBEAT, 1, bytes.fromhex(
        GOLDEN[(ApiKey.STREAMS_GROUP_HEARTBEAT, 1, "response")]))
    assert v0.acceptable_recovery_lag_legacy == 10000 and v1.acceptable_recovery_lag == 10000
    assert v0.task_offset_interval_ms == v1.task_offset_interval_ms == 60000
