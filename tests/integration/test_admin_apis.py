"""Kafka's admin APIs against the real broker process on loopback, from confluent-kafka's
AdminClient and kafka-python's KafkaAdminClient: topic configs stored durably and applied,
broker configs, CreatePartitions, DeleteRecords, consumer groups (list with states, delete),
DescribeCluster, DescribeLogDirs, DescribeProducers and hanging transactions."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)
from kafka import KafkaAdminClient

from tests.broker_process import BrokerProcess

BROKER_CONFIG = (
    "log.retention.check.interval.ms=200\n"
    "group.initial.rebalance.delay.ms=0\n"
    "group.min.session.timeout.ms=1000\n"
    "offsets.topic.num.partitions=3\n"
    "transaction.state.log.num.partitions=3\n"
    "log.cleaner.delete.retention.ms=3600000\n"
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("admin")
    with BrokerProcess.configured(tmp, BROKER_CONFIG) as proc:
        yield proc


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def new_topic(admin: AdminClient, partitions: int = 1, config: dict | None = None) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    futures[name].result(timeout=15)
    return name


def describe(admin: AdminClient, resource: ConfigResource) -> dict[str, ConfigEntry]:
    (future,) = admin.describe_configs([resource]).values()
    return future.result(timeout=15)


def produce(bootstrap: str, topic: str, values: list[bytes], ts: int | None = None) -> list:
    """Produce ``values`` one by one; their delivery errors (None: delivered)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    reports = []
    for value in values:
        producer.produce(topic, value=value, on_delivery=lambda err, msg: reports.append(err),
                         **({} if ts is None else {"timestamp": ts}))
    producer.flush(30)
    return reports


def earliest_latest(admin: AdminClient, topic: str, partition: int = 0) -> tuple[int, int]:
    tp = TopicPartition(topic, partition)
    early = admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(timeout=15).offset
    late = admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(timeout=15).offset
    return early, late


# -- configs ------------------------------------------------------------------------------


def test_describe_and_alter_topic_configs(broker, admin) -> None:
    topic = new_topic(admin, config={"retention.ms": "3600000"})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = describe(admin, resource)
    assert {"retention.ms", "cleanup.policy", "max.message.bytes", "segment.bytes",
            "message.timestamp.type", "min.cleanable.dirty.ratio"} <= set(entries)
    assert entries["retention.ms"].value == "3600000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].value == "delete"
    assert entries["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    # log.cleaner.delete.retention.ms is in server.properties: the broker's static value
    assert entries["delete.retention.ms"].value == "3600000"
    assert entries["delete.retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value

    change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("max.message.bytes", "5000", incremental_operation=AlterConfigOpType.SET),
    ])
    admin.incremental_alter_configs([change])[change].result(timeout=15)
    entries = describe(admin, resource)
    assert entries["cleanup.policy"].value == "delete,compact"
    assert entries["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["max.message.bytes"].value == "5000"

    # AlterConfigs (the legacy API) replaces every override
    legacy = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"segment.ms": "60000"})
    with pytest.warns(DeprecationWarning):  # confluent-kafka prefers the incremental API
        futures = admin.alter_configs([legacy])
    futures[legacy].result(timeout=15)
    entries = describe(admin, resource)
    assert entries["segment.ms"].value == "60000"
    assert entries["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["cleanup.policy"].value == "delete"

    bad = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "shred", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([bad])[bad].result(timeout=15)
    assert info.value.args[0].name() == "INVALID_CONFIG"
    missing = ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic")
    with pytest.raises(KafkaException) as info:
        describe(admin, missing)
    assert info.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"


def test_create_topics_validates_configs(broker, admin) -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    futures = admin.create_topics([NewTopic(name, 1, 1, config={"cleanup.policy": "shred"})])
    with pytest.raises(KafkaException) as info:
        futures[name].result(timeout=15)
    assert info.value.args[0].name() == "INVALID_CONFIG"
    assert name not in admin.list_topics(timeout=10).topics


def test_broker_configs_are_readable(broker, admin) -> None:
    entries = describe(admin, ConfigResource(ConfigResource.Type.BROKER, "0"))
    assert entries["log.retention.check.interval.ms"].value == "200"
    assert entries["log.retention.check.interval.ms"].source == (
        ConfigSource.STATIC_BROKER_CONFIG.value)
    assert entries["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value
    assert all(e.is_read_only for e in entries.values())


def test_configs_survive_a_kill9(tmp_path) -> None:
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        topic = new_topic(admin)
        change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([change])[change].result(timeout=15)
        proc.kill9()
        proc.start()
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        entries = describe(admin, ConfigResource(ConfigResource.Type.TOPIC, topic))
        assert entries["max.message.bytes"].value == "2000"
        assert produce(proc.bootstrap, topic, [b"x" * 3000])[0].name() == "MSG_SIZE_TOO_LARGE"
    finally:
        proc.stop()


def test_max_message_bytes_refuses_a_larger_batch(broker, admin) -> None:
    topic = new_topic(admin, config={"max.message.bytes": "1000"})
    errors = produce(broker.bootstrap, topic, [b"x" * 3000])
    assert errors[0] is not None and errors[0].name() == "MSG_SIZE_TOO_LARGE"
    assert produce(broker.bootstrap, topic, [b"small"]) == [None]
    change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "100000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([change])[change].result(timeout=15)
    assert produce(broker.bootstrap, topic, [b"x" * 3000]) == [None]


def test_retention_ms_deletes_old_data(broker, admin) -> None:
    topic = new_topic(admin)
    hour_ago = int(time.time() * 1000) - 3_600_000
    assert produce(broker.bootstrap, topic, [b"old"] * 5, ts=hour_ago) == [None] * 5
    assert earliest_latest(admin, topic) == (0, 5)
    change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([change])[change].result(timeout=15)
    deadline = time.monotonic() + 15
    while earliest_latest(admin, topic)[0] != 5:
        assert time.monotonic() < deadline, "retention did not delete the old segment"
        time.sleep(0.2)


def test_log_append_time(broker, admin) -> None:
    topic = new_topic(admin, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    assert produce(broker.bootstrap, topic, [b"v"], ts=1000) == [None]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        msg = None
        deadline = time.monotonic() + 15
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        assert msg is not None and msg.error() is None
        kind, ts = msg.timestamp()
        assert kind == 2  # TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= ts <= int(time.time() * 1000) + 1000
    finally:
        consumer.close()


# -- partitions and records ---------------------------------------------------------------


def test_create_partitions(broker, admin) -> None:
    topic = new_topic(admin, partitions=1)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=15)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3
    with pytest.raises(KafkaException) as info:
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=15)
    assert info.value.args[0].name() == "INVALID_PARTITIONS"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, value=b"p2", partition=2)
    assert producer.flush(15) == 0


def test_delete_records(broker, admin) -> None:
    topic = new_topic(admin)
    assert produce(broker.bootstrap, topic, [b"%d" % i for i in range(10)]) == [None] * 10
    tp = TopicPartition(topic, 0, 4)
    result = admin.delete_records([tp])[tp].result(timeout=15)
    assert result.low_watermark == 4
    assert earliest_latest(admin, topic) == (4, 10)
    too_far = TopicPartition(topic, 0, 11)
    with pytest.raises(KafkaException) as info:
        admin.delete_records([too_far])[too_far].result(timeout=15)
    assert info.value.args[0].name() == "OFFSET_OUT_OF_RANGE"


# -- groups and cluster -------------------------------------------------------------------


def test_list_and_delete_consumer_groups(broker, admin) -> None:
    topic = new_topic(admin)
    group = f"g-{topic}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 20
        while not consumer.assignment():
            assert time.monotonic() < deadline
            consumer.poll(0.2)
        stable = admin.list_consumer_groups(
            states={ConsumerGroupState.STABLE}).result(timeout=15)
        assert group in {g.group_id for g in stable.valid}
        empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(timeout=15)
        assert group not in {g.group_id for g in empty.valid}
        with pytest.raises(KafkaException) as info:
            admin.delete_consumer_groups([group])[group].result(timeout=15)
        assert info.value.args[0].name() == "NON_EMPTY_GROUP"
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(timeout=15)
    assert group in {g.group_id for g in empty.valid}
    admin.delete_consumer_groups([group])[group].result(timeout=15)
    listed = admin.list_consumer_groups().result(timeout=15)
    assert group not in {g.group_id for g in listed.valid}
    with pytest.raises(KafkaException) as info:
        admin.delete_consumer_groups([group])[group].result(timeout=15)
    assert info.value.args[0].name() == "GROUP_ID_NOT_FOUND"


def test_describe_cluster(broker, admin) -> None:
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=15)
    assert cluster.cluster_id
    assert cluster.controller.id == 0
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, "127.0.0.1", broker.port)]
    # (librdkafka builds this from Metadata; kafka-python's test below uses DescribeCluster.)


# -- kafka-python's admin client ------------------------------------------------------------


def test_kafka_python_admin(broker, admin) -> None:
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    topic = new_topic(admin, config={"cleanup.policy": "compact"})
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    producer = None
    try:
        configs = client.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)],
                                          config_filter="all")["topic"][topic]
        assert configs["cleanup.policy"]["value"] == "compact"
        assert configs["retention.ms"]["value"] == "604800000"

        cluster = client.describe_cluster()  # DescribeCluster v2
        assert [(b["broker_id"], b["port"]) for b in cluster["brokers"]] == [(0, broker.port)]
        assert cluster["controller_id"] == 0 and cluster["cluster_id"]
        assert cluster["authorized_operations"]  # no authorizer: every cluster operation

        # an open transaction: DescribeProducers shows where it started, ListTransactions finds
        # it by state and by age (v1 duration filter)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic,
                             "metadata.recovery.strategy": "none"})
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.produce(topic, key=b"k", value=b"v")
        assert producer.flush(15) == 0
        tp = KpTopicPartition(topic, 0)
        (state,) = client.describe_producers([tp])[tp].active_producers
        assert state.current_transaction_start_offset == 0
        assert state.last_sequence == 0 and state.producer_epoch >= 0
        time.sleep(0.3)
        listings = [t for ts in client.list_transactions(state_filters=["Ongoing"]).values()
                    for t in ts]
        assert topic in {t.transactional_id for t in listings}
        old = [t for ts in client.list_transactions(duration_filter_ms=200).values() for t in ts]
        assert topic in {t.transactional_id for t in old}
        young = [t for ts in client.list_transactions(duration_filter_ms=600_000).values()
                 for t in ts]
        assert topic not in {t.transactional_id for t in young}
        assert topic not in {h["transactional_id"] for h in client.find_hanging_transactions()}
        producer.abort_transaction(15)
        (state,) = client.describe_producers([tp])[tp].active_producers
        assert state.current_transaction_start_offset == -1
        assert state.coordinator_epoch == 0  # the ABORT marker's

        (answer,) = client.describe_log_dirs({topic: [0]})
        (log_dir,) = answer["log_dirs"]
        assert log_dir["log_dir"].endswith("data") and log_dir["error_code"] == 0
        (described,) = log_dir["topics"]
        assert described["name"] == topic
        assert described["partitions"][0]["partition_size"] > 0  # the data and the marker

        group = f"g-{topic}"
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        consumer.close()
        # OffsetDelete: the group has no members, so the offset may go
        errors = client.delete_group_offsets(group, [tp])
        assert {t: e.__name__ for t, e in errors.items()} == {tp: "NoError"}
        assert client.list_group_offsets(group) == {group: {}}
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        consumer.close()
        assert group in {g["group_id"] for g in client.list_groups(states_filter=["Empty"])}
        assert group not in {g["group_id"] for g in client.list_groups(states_filter=["Stable"])}
        assert client.delete_groups([group]) == {group: "OK"}
        assert client.delete_groups([group]) == {group: "GroupIdNotFoundError"}
        assert group not in {g["group_id"] for g in client.list_groups()}
    finally:
        client.close()


# -- our client's Admin ----------------------------------------------------------------------


def test_our_admin(broker, admin) -> None:
    from client import Admin, AlterConfigOp, ConfigResource
    from client import Consumer as OurConsumer
    from client import Producer as OurProducer
    from client.errors import GroupIdNotFoundError, InvalidConfigError, NonEmptyGroupError

    topic = new_topic(admin, config={"retention.ms": "3600000"})
    resource = ConfigResource("topic", topic)
    with Admin({"bootstrap.servers": broker.bootstrap}) as ours:
        entries = ours.describe_configs([resource], include_synonyms=True)[resource]
        assert entries["retention.ms"].value == "3600000"
        assert entries["retention.ms"].source == "DYNAMIC_TOPIC_CONFIG"
        # as Kafka: no DEFAULT_CONFIG synonym, log.retention.ms has no default of its own
        assert [s.source for s in entries["retention.ms"].synonyms] == ["DYNAMIC_TOPIC_CONFIG"]
        assert [s.source for s in entries["cleanup.policy"].synonyms] == ["DEFAULT_CONFIG"]
        assert entries["cleanup.policy"].is_default
        result = ours.incremental_alter_configs({resource: [
            AlterConfigOp("retention.ms", "delete"),
            AlterConfigOp("cleanup.policy", "append", "compact"),
        ]})
        assert result == {resource: None}
        entries = ours.describe_configs([resource])[resource]
        assert entries["retention.ms"].is_default
        assert entries["cleanup.policy"].value == "delete,compact"
        (error,) = ours.incremental_alter_configs(
            {resource: [AlterConfigOp("segment.bytes", "set", "1")]}).values()
        assert isinstance(error, InvalidConfigError)
        assert ours.alter_configs({resource: {"segment.ms": "60000"}}) == {resource: None}
        assert ours.describe_configs([resource])[resource]["cleanup.policy"].value == "delete"
        brokers = ours.describe_configs([ConfigResource("broker", "0")])
        assert brokers[ConfigResource("broker", "0")]["log.retention.check.interval.ms"].value == (
            "200")

        assert ours.create_partitions({topic: 2}) == {topic: None}
        assert ours.describe_topics([topic])[0].partitions[1].partition == 1
        with OurProducer({"bootstrap.servers": broker.bootstrap}) as producer:
            for i in range(6):
                producer.send(topic, value=b"%d" % i, partition=0)
            producer.flush()
        assert ours.delete_records({(topic, 0): 4}) == {(topic, 0): 4}
        assert ours.delete_records({(topic, 0): -1}) == {(topic, 0): 6}
        (dirs,) = ours.describe_log_dirs({topic: [0, 1]}).values()
        assert dirs[0].partitions[(topic, 0)] > 0 and (topic, 1) in dirs[0].partitions
        (states,) = ours.describe_producers([(topic, 0)]).values()
        assert len(states) == 1 and states[0].last_sequence == 5  # idempotent by default
        assert states[0].current_txn_start_offset == -1
        assert ours.find_hanging_transactions([topic]) == []

        group = f"g-{topic}"
        consumer = OurConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        while not consumer.assignment():
            assert time.monotonic() < deadline
            consumer.poll(0.2)
        try:
            assert group in {g.group_id for g in ours.list_groups(states=["Stable"])}
            listed = {g.group_id: g for g in ours.list_groups()}
            assert (listed[group].state, listed[group].type) == ("Stable", "classic")
            assert isinstance(ours.delete_groups([group])[group], NonEmptyGroupError)
            consumer.commit({(topic, 0): 3, (topic, 1): 0})
        finally:
            consumer.close()
        assert group in {g.group_id for g in ours.list_groups(states=["empty"])}
        assert ours.delete_group_offsets(group, [(topic, 0)]) == {(topic, 0): None}
        assert set(ours.list_group_offsets(group)) == {(topic, 1)}
        assert ours.delete_groups([group]) == {group: None}
        assert isinstance(ours.delete_groups([group])[group], GroupIdNotFoundError)
        cluster = ours.describe_cluster()
        assert cluster["brokers"] == [(0, "127.0.0.1", broker.port)]
        assert ours.list_transactions(states=["Ongoing"], duration_ms=0) == []


def test_our_admin_leaves_out_an_old_transaction_its_coordinator_runs(broker, admin) -> None:
    """An open transaction older than the limit is not hanging while its coordinator runs it
    (Ongoing, same producer, that partition): as kafka-transactions.sh find-hanging decides; the
    coordinator aborts it at its timeout. ListTransactions still lists it by duration."""
    from client import Admin

    topic = new_topic(admin)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic,
                         "metadata.recovery.strategy": "none"})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, value=b"open")
    assert producer.flush(15) == 0
    try:
        with Admin({"bootstrap.servers": broker.bootstrap}) as ours:
            assert ours.find_hanging_transactions([topic]) == []  # young and ongoing
            time.sleep(0.1)
            (state,) = ours.describe_producers([(topic, 0)])[(topic, 0)]
            assert state.current_txn_start_offset == 0  # open there, older than 50 ms
            assert ours.find_hanging_transactions([topic], max_transaction_timeout_ms=50) == []
            (listing,) = ours.list_transactions(states=["Ongoing"], duration_ms=50)
            assert listing.transactional_id == topic
    finally:
        producer.abort_transaction(15)
