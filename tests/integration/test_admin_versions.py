"""Every advertised version of the admin APIs, end to end: the request is encoded by kafka-python's
classes generated from Kafka's JSON schemas (an independent encoder), sent to the running broker,
and the answer decoded by the same classes."""

from __future__ import annotations

import warnings

import pytest

from broker.config import build_config
from protocol.api_keys import ApiKey
from protocol.headers import parse_response_header_untrusted
from protocol.messages.api_versions import ADVERTISED
from tests.raw_client import RawConnection

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol import admin as kp_admin
    from kafka.protocol import consumer as kp_consumer
    from kafka.protocol import metadata as kp_metadata
    from kafka.protocol import producer as kp_producer
    from kafka.protocol.api_message import ApiMessage


def _classes() -> dict[tuple[int, str], type]:
    found = {}
    for module in (kp_admin, kp_consumer, kp_metadata, kp_producer):
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage:
                found[(obj.API_KEY, obj.type)] = obj
    return found


CLASSES = _classes()
TOPIC = "versions"

# A valid request of each API (fields a version lacks are left out by the encoder).
REQUESTS = {
    ApiKey.DESCRIBE_CONFIGS: dict(resources=[
        dict(resource_type=2, resource_name=TOPIC, configuration_keys=None),
        dict(resource_type=4, resource_name="0", configuration_keys=["num.partitions"]),
    ], include_synonyms=True, include_documentation=True),
    ApiKey.ALTER_CONFIGS: dict(resources=[dict(
        resource_type=2, resource_name=TOPIC, configs=[dict(name="retention.ms", value="86400000")],
    )], validate_only=False),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: dict(resources=[dict(
        resource_type=2, resource_name=TOPIC,
        configs=[dict(name="segment.ms", config_operation=0, value="3600000")],
    )], validate_only=False),
    ApiKey.CREATE_PARTITIONS: dict(topics=[dict(name=TOPIC, count=1, assignments=None)],
                                   timeout_ms=5000, validate_only=True),
    ApiKey.DELETE_RECORDS: dict(topics=[dict(name=TOPIC, partitions=[
        dict(partition_index=0, offset=0)])], timeout_ms=5000),
    ApiKey.DELETE_GROUPS: dict(groups_names=["no-such-group"]),
    ApiKey.OFFSET_DELETE: dict(group_id="no-such-group", topics=[
        dict(name=TOPIC, partitions=[dict(partition_index=0)])]),
    ApiKey.DESCRIBE_CLUSTER: dict(include_cluster_authorized_operations=True, endpoint_type=1,
                                  include_fenced_brokers=False),
    ApiKey.DESCRIBE_LOG_DIRS: dict(topics=None),
    ApiKey.DESCRIBE_PRODUCERS: dict(topics=[dict(name=TOPIC, partition_indexes=[0])]),
    ApiKey.LIST_GROUPS: dict(states_filter=["Empty"], types_filter=[]),
    ApiKey.LIST_TRANSACTIONS: dict(state_filters=[], producer_id_filters=[], duration_filter=-1),
}
# The error each answer carries, found by ``path`` in the decoded response.
EXPECTED = {
    ApiKey.DESCRIBE_CONFIGS: lambda r: [x["error_code"] for x in r["results"]] == [0, 0]
    and any(c["name"] == "retention.ms" for c in r["results"][0]["configs"]),
    ApiKey.ALTER_CONFIGS: lambda r: [x["error_code"] for x in r["responses"]] == [0],
    ApiKey.INCREMENTAL_ALTER_CONFIGS: lambda r: [x["error_code"] for x in r["responses"]] == [0],
    ApiKey.CREATE_PARTITIONS: lambda r: [x["error_code"] for x in r["results"]] == [37],
    ApiKey.DELETE_RECORDS: lambda r: r["topics"][0]["partitions"][0]["error_code"] == 0,
    ApiKey.DELETE_GROUPS: lambda r: [x["error_code"] for x in r["results"]] == [69],
    ApiKey.OFFSET_DELETE: lambda r: r["error_code"] == 69,
    ApiKey.DESCRIBE_CLUSTER: lambda r: r["error_code"] == 0 and len(r["brokers"]) == 1,
    ApiKey.DESCRIBE_LOG_DIRS: lambda r: [x["error_code"] for x in r["results"]] == [0]
    and any(t["name"] == TOPIC for t in r["results"][0]["topics"]),
    ApiKey.DESCRIBE_PRODUCERS: lambda r: r["topics"][0]["partitions"][0]["error_code"] == 0,
    ApiKey.LIST_GROUPS: lambda r: r["error_code"] == 0,
    ApiKey.LIST_TRANSACTIONS: lambda r: r["error_code"] == 0,
}
CASES = [(key, v) for key in REQUESTS for v in range(ADVERTISED[key].min, ADVERTISED[key].max + 1)]


@pytest.fixture(scope="module")
def port(tmp_path_factory):
    import threading

    import trio

    from broker.app import serve

    config = build_config({}, port=0, data_dir=tmp_path_factory.mktemp("versions") / "data")
    ready: dict = {}
    stop = threading.Event()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            ready["port"] = await nursery.start(serve, config)
            ready["event"].set()
            while not stop.is_set():
                await trio.sleep(0.05)
            nursery.cancel_scope.cancel()

    ready["event"] = threading.Event()
    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    assert ready["event"].wait(30)
    with RawConnection(ready["port"]) as conn:
        response = conn.request(ApiKey.CREATE_TOPICS, 2, {
            "topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 5000, "validate_only": False})
        assert response.topics[0].error_code == 0
    yield ready["port"]
    stop.set()
    thread.join(30)


def test_every_admin_api_version_is_covered() -> None:
    assert {key for key, _ in CASES} == set(REQUESTS)
    for key in REQUESTS:
        assert (key, "request") in CLASSES and (key, "response") in CLASSES, key.name


@pytest.mark.parametrize(("api_key", "version"), CASES,
                         ids=[f"{ApiKey(k).name}-v{v}" for k, v in CASES])
def test_admin_api_version_round_trip(port, api_key, version) -> None:
    request_cls = CLASSES[(api_key, "request")]
    fields = {k: v for k, v in REQUESTS[api_key].items()}
    body = bytes(request_cls[version](**_objects(request_cls[version], fields)).encode())
    with RawConnection(port) as conn:
        correlation = conn.send_request(api_key, version, body)
        frame = conn.read_frame()
        assert frame is not None, "the broker closed the connection"
        got, offset = parse_response_header_untrusted(frame, api_key, version)
        assert got == correlation
    decoded = CLASSES[(api_key, "response")].decode(bytes(frame[offset:]), version=version)
    response = decoded.to_dict(json=False)
    assert EXPECTED[api_key](response), response


def _objects(cls, fields: dict) -> dict:
    """Nested struct arrays as instances of kafka-python's generated data classes."""
    out = {}
    for name, value in fields.items():
        field = cls.fields.get(name)
        if field is None:
            continue
        is_struct_array = field.is_struct_array
        if callable(is_struct_array):
            is_struct_array = is_struct_array()
        if is_struct_array and value is not None:
            data_class = field.data_class
            value = [data_class(**_objects(data_class, item)) for item in value]
        out[name] = value
    return out
