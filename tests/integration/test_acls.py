"""Authorization end to end (issue 14): the seeds' rules for transactional and idempotent writes
and Kafka's per-API checks, with confluent-kafka (and kafka-python) as the refereeing clients
over SASL_PLAINTEXT with PLAIN users. ``admin`` is a super user; ACLs are made with
confluent-kafka's AdminClient (CreateAcls) and survive a restart.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka import Producer as CKProducer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.broker_process import BrokerProcess
from tests.raw_client import RawConnection
from tests.secured import USERS, sasl_plain, secured

ANY, LITERAL, PREFIXED = ("*", ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    d = tmp_path_factory.mktemp("acls")
    proc = BrokerProcess.configured(d, "\n".join(secured(
        "connection.failed.authentication.delay.ms=0",
        "group.initial.rebalance.delay.ms=0")) + "\n")
    proc.start()
    try:
        admin = AdminClient(conf(proc, "admin"))
        for f in admin.create_topics([NewTopic(t, 1) for t in (
                "orders", "secret", "pub-open", "pub-locked")]).values():
            f.result(15)
        allow(admin, ResourceType.TOPIC, "orders", "alice", AclOperation.WRITE)
        allow(admin, ResourceType.TOPIC, "orders", "alice", AclOperation.READ)
        allow(admin, ResourceType.TRANSACTIONAL_ID, "tx-alice", "alice", AclOperation.WRITE,
              PREFIXED)
        allow(admin, ResourceType.GROUP, "g-alice", "alice", AclOperation.READ)
        allow(admin, ResourceType.TOPIC, "pub-", "alice", AclOperation.ALL, PREFIXED)
        deny(admin, ResourceType.TOPIC, "pub-locked", "alice", AclOperation.WRITE)
        allow(admin, ResourceType.TOPIC, "orders", "mallory", AclOperation.DESCRIBE)
        yield proc
    finally:
        proc.stop()


def conf(proc, user: str, **extra) -> dict:
    return {"bootstrap.servers": proc.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user],
            **extra}


def _create(admin, binding) -> None:
    for f in admin.create_acls([binding]).values():
        f.result(15)


def allow(admin, rtype, name, user, op, pattern=LITERAL) -> None:
    _create(admin, AclBinding(rtype, name, pattern, f"User:{user}", ANY, op,
                              AclPermissionType.ALLOW))


def deny(admin, rtype, name, user, op, pattern=LITERAL) -> None:
    _create(admin, AclBinding(rtype, name, pattern, f"User:{user}", ANY, op,
                              AclPermissionType.DENY))


def read_all(proc, topic: str) -> list[bytes]:
    consumer = CKConsumer(conf(proc, "admin", **{"group.id": f"reader-{topic}-{time.time()}",
                                                 "isolation.level": "read_uncommitted",
                                                 "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, deadline = [], time.monotonic() + 3
    while time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m.value())
    consumer.close()
    return got


def test_transactional_id_write_is_required_and_fatal(broker):
    # The seeds' first rule: Write on the TransactionalId, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    producer = CKProducer(conf(broker, "alice", **{"transactional.id": "someone-elses"}))
    with pytest.raises(KafkaException) as info:
        producer.init_transactions(15)
    error = info.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert error.fatal()


def test_idempotent_producer_needs_idempotent_write_or_a_writable_topic(broker):
    # The seeds' second rule (Kafka 3 also accepts Write on any topic): mallory has neither
    # (only Describe on the topic, so that the client gets as far as InitProducerId).
    producer = CKProducer(conf(broker, "mallory", **{"enable.idempotence": True}))
    producer.produce("orders", b"forged")
    with pytest.raises(KafkaException) as info:  # flush raises the fatal error
        producer.flush(5)
    error = info.value.args[0]
    assert error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED and error.fatal()
    # alice may write a topic, so her idempotent producer works.
    ok = CKProducer(conf(broker, "alice", **{"enable.idempotence": True}))
    ok.produce("orders", b"idempotent")
    assert ok.flush(15) == 0
    assert b"forged" not in read_all(broker, "orders")


def test_topic_write_is_required_nothing_is_written(broker):
    delivered = []
    producer = CKProducer(conf(broker, "alice", **{"message.send.max.retries": 0}))
    producer.produce("secret", b"nope", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(15)
    assert [e.code() for e in delivered] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert read_all(broker, "secret") == []


def test_transactional_produce_to_an_unauthorized_topic_is_abortable(broker):
    producer = CKProducer(conf(broker, "alice", **{"transactional.id": "tx-alice-1"}))
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce("orders", b"in-txn")
    producer.produce("secret", b"refused")
    with pytest.raises(KafkaException) as info:
        producer.commit_transaction(15)
    error = info.value.args[0]
    assert error.txn_requires_abort() and not error.fatal()
    producer.abort_transaction(15)
    # The same producer goes on.
    producer.begin_transaction()
    producer.produce("orders", b"committed")
    producer.commit_transaction(15)
    assert read_all(broker, "secret") == []
    assert b"committed" in read_all(broker, "orders")


def test_offsets_in_a_transaction_need_read_on_the_group(broker):
    producer = CKProducer(conf(broker, "alice", **{"transactional.id": "tx-alice-2"}))
    producer.init_transactions(15)
    consumer = CKConsumer(conf(broker, "alice", **{"group.id": "g-alice"}))
    for group, allowed in (("g-alice", True), ("g-other", False)):
        producer.begin_transaction()
        producer.produce("orders", b"with-offsets")
        metadata = CKConsumer(conf(broker, "alice", **{"group.id": group})).consumer_group_metadata()
        try:
            producer.send_offsets_to_transaction([TopicPartition("orders", 0, 1)], metadata, 15)
        except KafkaException as exc:
            assert not allowed
            assert exc.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
            producer.abort_transaction(15)
            continue
        assert allowed
        producer.commit_transaction(15)
    consumer.close()


def test_deny_wins_over_a_prefixed_allow(broker):
    delivered = []
    producer = CKProducer(conf(broker, "alice", **{"message.send.max.retries": 0}))
    for topic in ("pub-open", "pub-locked"):
        producer.produce(topic, b"x", on_delivery=lambda err, msg: delivered.append(
            (msg.topic(), err and err.code())))
    producer.flush(15)
    assert sorted(delivered) == [("pub-locked", KafkaError.TOPIC_AUTHORIZATION_FAILED),
                                 ("pub-open", None)]


def test_metadata_write_txn_markers_and_bare_tokens(broker):
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    with RawConnection(port) as conn:
        sasl_plain(conn, "mallory")
        everything = conn.request(ApiKey.METADATA, 9, {"topics": None})
        assert [t.name for t in everything.topics] == ["orders"]  # what mallory may describe
        named = conn.request(ApiKey.METADATA, 9, {"topics": [{"name": "secret"},
                                                             {"name": "no-such-topic"}]})
        # Authorization before existence: neither answer tells whether the topic exists.
        assert [t.error_code for t in named.topics] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 2
        markers = conn.request(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
            "producer_id": 0, "producer_epoch": 0, "transaction_result": False,
            "topics": [{"name": "orders", "partition_indexes": [0]}], "coordinator_epoch": 0}]})
        assert markers.markers[0].topics[0].partitions[0].error_code == \
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        described = conn.request(ApiKey.DESCRIBE_ACLS, 3, {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
        assert described.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    with RawConnection(port) as conn:  # SaslHandshake v0: the tokens are bare frames
        assert conn.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
        conn.send_raw(len(b"\0alice\0alice-secret").to_bytes(4, "big") + b"\0alice\0alice-secret")
        assert conn.read_frame() == b""
        listed = conn.request(ApiKey.METADATA, 9, {"topics": None})
        assert sorted(t.name for t in listed.topics) == ["orders", "pub-locked", "pub-open"]


def test_acls_are_listed_deleted_and_durable(broker):
    admin = AdminClient(conf(broker, "admin"))
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    listed = admin.describe_acls(everything).result(15)
    assert len(listed) == 7
    broker.stop()
    broker.restart()
    admin = AdminClient(conf(broker, "admin"))
    assert len(admin.describe_acls(everything).result(15)) == 7
    locked = AclBindingFilter(ResourceType.TOPIC, "pub-locked", ResourcePatternType.LITERAL,
                              None, None, AclOperation.ANY, AclPermissionType.DENY)
    (deleted,) = [f.result(15) for f in admin.delete_acls([locked]).values()]
    assert [(b.name, b.permission_type) for b in deleted] == [
        ("pub-locked", AclPermissionType.DENY)]
    producer = CKProducer(conf(broker, "alice", **{"message.send.max.retries": 0}))
    producer.produce("pub-locked", b"now allowed")
    assert producer.flush(15) == 0
    producer.produce("secret", b"refused")
    producer.flush(15)
    # (Metadata asks Describe first: alice may not even know whether "secret" exists)
    broker.wait_for_output("refused: User:alice from 127.0.0.1 may not DESCRIBE TOPIC 'secret'")


def test_kafka_python_gets_its_authorization_exceptions(broker):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="alice",
                             sasl_plain_password=USERS["alice"], max_block_ms=5000)
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send("secret", b"nope").get(timeout=15)
    producer.close()


def test_cli_acls_and_users(broker, tmp_path):
    import json

    from tests.integration.test_cli import run

    admin_props = tmp_path / "admin.properties"
    admin_props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                           "sasl.username=admin\nsasl.password=admin-secret\n")
    b = ["--bootstrap-server", broker.bootstrap, "--command-config", str(admin_props)]
    # A SCRAM user made with the CLI (password piped on stdin: one line, as the README says).
    made = run("users", "add", "dave", "--mechanism", "SCRAM-SHA-256", *b, input="dave-secret\n")
    assert made.returncode == 0, made.stderr
    assert "Aborted" not in made.stderr and "Set the SCRAM-SHA-256 credential" in made.stderr
    assert "dave-secret" not in made.stdout + made.stderr
    assert json.loads(run("users", "list", "--format", "json", *b).stdout)["dave"] == {
        "SCRAM-SHA-256": 8192}
    added = run("acls", "add", "--allow-principal", "User:dave", "--operation", "Write",
                "--operation", "Describe", "--topic", "orders", "--format", "json", *b)
    assert added.returncode == 0, added.stderr
    assert len(json.loads(added.stdout)) == 2
    listed = json.loads(run("acls", "list", "--principal", "User:dave", "--format", "json",
                            *b).stdout)
    assert sorted(a["operation"] for a in listed) == ["describe", "write"]
    dave = {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "dave",
            "sasl.password": "dave-secret"}
    producer = CKProducer(dave)
    producer.produce("orders", b"from-dave")
    assert producer.flush(15) == 0
    removed = run("acls", "remove", "--topic", "orders", "--principal", "User:dave", *b)
    assert removed.returncode == 0 and "Removed 2 ACL(s)." in removed.stderr
    delivered = []
    producer = CKProducer({**dave, "message.send.max.retries": 0})
    producer.produce("orders", b"refused", on_delivery=lambda e, m: delivered.append(e.code()))
    producer.flush(15)
    assert delivered == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert run("users", "delete", "dave", *b).returncode == 0
    assert "dave" not in json.loads(run("users", "list", "--format", "json", *b).stdout)
    # Not a super user: a one-line refusal naming the principal.
    refused = run("acls", "add", "--allow-principal", "User:alice", "--operation", "All",
                  "--cluster", "--bootstrap-server", broker.bootstrap,
                  "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.username=alice",
                  "-X", "sasl.password=alice-secret")
    assert refused.returncode == 1
    assert "User:alice from 127.0.0.1 is not allowed Alter on the cluster" in refused.stderr
