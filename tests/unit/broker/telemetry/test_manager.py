"""Client telemetry's rules (broker/telemetry/manager.py), driven with ``now_ms``: instance ids,
subscriptions, push timing and errors, bounded instances, and what /metrics then holds."""

from __future__ import annotations

import gzip
import itertools
import uuid

import pytest

from broker.config.client_metrics_configs import validate
from broker.telemetry.export import TelemetryExport, prometheus_name
from broker.telemetry.manager import TelemetryManager, evaluate, subscription_id
from protocol.errors import ErrorCode
from tests.unit.broker.telemetry.otlp_encode import gauge, metrics_data, number_point, sum_metric

JAVA = {"client_id": "producer-1", "client_software_name": "apache-kafka-java",
        "client_software_version": "4.4.0", "client_source_address": "127.0.0.1",
        "client_source_port": "50000"}
PUSH = metrics_data(gauge("org.apache.kafka.producer.record.queue.time.avg", number_point(2.0)),
                    sum_metric("org.apache.kafka.producer.bytes.total", number_point(10)))
T0 = 1_000_000
ZERO = uuid.UUID(int=0)


class World:
    def __init__(self, subs: dict[str, dict[str, str]] | None = None, max_bytes: int = 4096,
                 max_instances: int = 100, export: TelemetryExport | None = None) -> None:
        self.subs = {name: validate(name, configs) for name, configs in (subs or {}).items()}
        ids = (uuid.UUID(int=n) for n in itertools.count(1000))
        self.manager = TelemetryManager(lambda: self.subs, export or TelemetryExport(), max_bytes,
                                        new_uuid=lambda: next(ids), max_instances=max_instances)

    def set(self, name: str, configs: dict[str, str]) -> None:
        self.subs[name] = validate(name, configs)
        self.manager.subscriptions_changed()

    def get(self, now: int, instance: uuid.UUID = ZERO, client=JAVA):
        return self.manager.get_subscriptions(instance, client, now)

    def push(self, now: int, answer, data: bytes = PUSH, terminating: bool = False,
             compression: int = 0, subscription: int | None = None, client=JAVA) -> int:
        sid = answer.subscription_id if subscription is None else subscription
        return self.manager.push(answer.client_instance_id, sid, terminating, compression, data,
                                 client, now)


EVERY = {"all": {"metrics": "*", "interval.ms": "1000"}}


def test_zero_id_gets_a_new_instance_id_and_the_subscription() -> None:
    world = World(EVERY)
    answer = world.get(T0)
    assert answer.error_code == ErrorCode.NONE
    assert answer.client_instance_id == uuid.UUID(int=1000)
    assert answer.requested_metrics == ("*",)
    assert answer.push_interval_ms == 1000
    assert answer.telemetry_max_bytes == 4096
    assert 1 in answer.accepted_compression_types  # gzip is always there
    assert answer.subscription_id == subscription_id(("*",), 1000, answer.client_instance_id)


def test_a_given_id_is_kept() -> None:
    mine = uuid.UUID(int=77)
    assert World(EVERY).get(T0, mine).client_instance_id == mine


def test_matching_unions_prefixes_and_takes_the_lowest_interval() -> None:
    subs = {
        "java": validate("java", {"metrics": "org.apache.kafka.producer.", "interval.ms": "5000",
                                  "match": "client_software_name=apache-kafka-java"}),
        "producer1": validate("producer1", {"metrics": "org.apache.kafka.consumer.",
                                            "interval.ms": "2000",
                                            "match": "client_id=producer-.*,client_source_port=5.*"}),
        "python": validate("python", {"metrics": "*", "interval.ms": "100",
                                      "match": "client_software_name=confluent-kafka-python"}),
    }
    assert evaluate(subs, JAVA) == (("org.apache.kafka.consumer.", "org.apache.kafka.producer."),
                                    2000)
    # the regex must match the whole value; an unknown attribute never matches
    assert evaluate(subs, {**JAVA, "client_id": "xproducer-1"}) == (
        ("org.apache.kafka.producer.",), 5000)
    assert evaluate(subs, {**JAVA, "client_source_port": None}) == (
        ("org.apache.kafka.producer.",), 5000)
    assert evaluate({}, JAVA) == ((), 300_000)


def test_get_within_the_interval_is_throttled() -> None:
    world = World(EVERY)
    answer = world.get(T0)
    again = world.get(T0 + 999, answer.client_instance_id)
    assert again.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert world.get(T0 + 1000, answer.client_instance_id).error_code == ErrorCode.NONE


def test_push_timing() -> None:
    world = World(EVERY)
    answer = world.get(T0)
    assert world.push(T0 + 10, answer) == ErrorCode.NONE  # right after a Get (client jitter)
    assert world.push(T0 + 500, answer) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert world.push(T0 + 1010, answer) == ErrorCode.NONE
    assert world.push(T0 + 1020, answer, terminating=True) == ErrorCode.NONE  # never throttled
    assert world.push(T0 + 5000, answer) == ErrorCode.INVALID_REQUEST  # after terminating


def test_push_errors_in_kafkas_order() -> None:
    world = World(EVERY, max_bytes=200)
    answer = world.get(T0)
    assert world.push(T0 + 1, answer, subscription=answer.subscription_id + 1) == \
        ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    # the client must re-fetch at once after UNKNOWN_SUBSCRIPTION_ID: not throttled (but, as
    # Kafka's, the Get does not count as one: the next push waits for the interval)
    answer = world.get(T0 + 2, answer.client_instance_id)
    assert answer.error_code == ErrorCode.NONE
    assert world.push(T0 + 3, answer) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert world.push(T0 + 1001, answer, compression=9) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert world.get(T0 + 1002, answer.client_instance_id).error_code == ErrorCode.NONE
    assert world.push(T0 + 2001, answer, data=b"x" * 201) == ErrorCode.TELEMETRY_TOO_LARGE
    assert world.get(T0 + 3001, answer.client_instance_id).error_code == ErrorCode.NONE
    assert world.push(T0 + 3002, answer, data=b"\x0b garbage") == ErrorCode.INVALID_RECORD
    assert world.get(T0 + 4002, answer.client_instance_id).error_code == ErrorCode.NONE
    bomb = gzip.compress(b"\x00" * 100_000)  # fits in 200 bytes, expands far beyond
    assert len(bomb) <= 200
    assert world.push(T0 + 4003, answer, data=bomb, compression=1) == \
        ErrorCode.TELEMETRY_TOO_LARGE
    assert world.get(T0 + 5003, answer.client_instance_id).error_code == ErrorCode.NONE
    assert world.push(T0 + 5004, answer, data=gzip.compress(PUSH), compression=1) == \
        ErrorCode.NONE


def test_reserved_instance_ids_are_invalid() -> None:
    world = World(EVERY)
    for reserved in (0, 1):
        assert world.manager.push(uuid.UUID(int=reserved), 0, False, 0, PUSH, JAVA, T0) == \
            ErrorCode.INVALID_REQUEST


def test_a_changed_subscription_is_given_at_once() -> None:
    world = World(EVERY)
    answer = world.get(T0)
    world.set("all", {"metrics": "org.apache.kafka.producer.", "interval.ms": "60000"})
    new = world.get(T0 + 1, answer.client_instance_id)  # not throttled: re-evaluated
    assert new.error_code == ErrorCode.NONE
    assert new.requested_metrics == ("org.apache.kafka.producer.",)
    assert new.push_interval_ms == 60000
    assert new.subscription_id != answer.subscription_id
    assert world.push(T0 + 2, answer) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    assert world.push(T0 + 3, new) == ErrorCode.THROTTLING_QUOTA_EXCEEDED  # Kafka's too
    assert world.push(T0 + 2 + 60_000, new) == ErrorCode.NONE


def test_pushed_metrics_are_exported_with_prometheus_names() -> None:
    world = World(EVERY)
    answer = world.get(T0)
    assert world.push(T0 + 1, answer) == ErrorCode.NONE
    families = {name: (kind, samples) for name, kind, samples in world.manager.export.families()}
    own = {"client_instance_id": str(answer.client_instance_id), "client_id": "producer-1"}
    assert families == {
        "org_apache_kafka_producer_bytes_total": ("counter", [(own, 10.0)]),
        "org_apache_kafka_producer_record_queue_time_avg": ("gauge", [(own, 2.0)]),
    }
    assert prometheus_name("9lives.x-y") == "_9lives_x_y"


def test_delta_sums_accumulate_and_gauges_are_replaced() -> None:
    world = World(EVERY)
    answer = world.get(T0)
    delta = metrics_data(sum_metric("c.total", number_point(3), delta=True),
                         gauge("g", number_point(1.0)))
    assert world.push(T0 + 1, answer, data=delta) == ErrorCode.NONE
    assert world.push(T0 + 1001, answer, data=delta) == ErrorCode.NONE
    values = {name: samples[0][1] for name, _, samples in world.manager.export.families()}
    assert values == {"c_total": 6.0, "g": 1.0}


def test_instances_are_bounded_and_expire_with_their_series() -> None:
    world = World(EVERY, max_instances=3)
    answers = [world.get(T0 + i) for i in range(3)]
    for i, answer in enumerate(answers):
        assert world.push(T0 + 10 + i, answer) == ErrorCode.NONE
    assert world.manager.export.series_count == 6
    world.get(T0 + 20)  # a fourth instance: the least recently seen goes
    assert answers[0].client_instance_id not in world.manager.instances
    assert len(world.manager.instances) == 3
    assert world.manager.export.series_count == 6  # (its series stay until they expire)
    world.get(T0 + 20 + 60_001)  # max(60 s, 3 intervals) later the silent ones expire
    assert len(world.manager.instances) == 1
    assert world.manager.export.series_count == 0


def test_a_closed_connection_forgets_the_instance_not_its_metrics() -> None:
    world = World(EVERY)
    answer = world.get(T0)
    assert world.push(T0 + 1, answer) == ErrorCode.NONE
    world.manager.connection_closed(answer.client_instance_id)
    assert answer.client_instance_id not in world.manager.instances
    assert world.manager.export.series_count == 2
    # it comes back on a new connection: evaluated afresh, so not throttled
    again = world.get(T0 + 2, answer.client_instance_id,
                      client={**JAVA, "client_source_port": "50001"})
    assert again.error_code == ErrorCode.NONE
    assert world.manager.instances[answer.client_instance_id].attributes[
        "client_source_port"] == "50001"


def test_export_series_and_clients_are_capped() -> None:
    export = TelemetryExport(max_series=3, max_clients=2)
    world = World(EVERY, export=export)
    answers = [world.get(T0 + i) for i in range(3)]
    world.push(T0 + 10, answers[0])
    world.push(T0 + 11, answers[1])  # 2 + 2 > 3: the oldest client's series go
    assert export.series_count == 2
    assert {s[0]["client_instance_id"] for _, _, samples in export.families() for s in samples} \
        == {str(answers[1].client_instance_id)}
    many = metrics_data(gauge("g", *(number_point(float(i), {"i": i}) for i in range(10))))
    world.push(T0 + 12, answers[2], data=many)  # one client alone is cut at the cap
    assert export.series_count == 3


def test_export_bytes_are_capped_and_client_attributes_clipped() -> None:
    export = TelemetryExport(max_bytes=2000)
    world = World(EVERY, export=export, max_bytes=100_000)
    answer = world.get(T0, client={**JAVA, "client_id": "c" * 100_000})
    wide = metrics_data(gauge("g", *(number_point(float(i), {"k": "v" * 200, "i": i})
                                     for i in range(50))))
    assert world.push(T0 + 1, answer, data=wide, client=JAVA) == ErrorCode.NONE
    assert 0 < export.bytes_count <= 2000
    assert 0 < export.series_count < 50
    (client_id,) = {s[0]["client_id"] for _, _, samples in export.families() for s in samples}
    assert client_id == "c" * 256
    world.manager.push(answer.client_instance_id, 0, True, 0, b"", JAVA, T0 + 2)
    world.get(T0 + 2 + 60_001)  # a new instance; the old one expired with its bytes
    assert export.bytes_count == 0


@pytest.mark.parametrize("configs, code", [
    ({"metrics": "*", "interval.ms": "99"}, ErrorCode.INVALID_REQUEST),
    ({"interval.ms": "3600001"}, ErrorCode.INVALID_REQUEST),
    ({"interval.ms": "soon"}, ErrorCode.INVALID_CONFIG),
    ({"colour": "blue"}, ErrorCode.INVALID_REQUEST),
    ({"match": "client_id"}, ErrorCode.INVALID_CONFIG),
    ({"match": "client_colour=x"}, ErrorCode.INVALID_CONFIG),
    ({"match": "client_id=("}, ErrorCode.INVALID_CONFIG),
])
def test_bad_subscriptions_are_refused_with_kafkas_errors(configs, code) -> None:
    from protocol.errors import KafkaError
    with pytest.raises(KafkaError) as caught:
        validate("s", configs)
    assert caught.value.code == code
