"""Security end to end (issue 14): TLS, mTLS and SASL (PLAIN, SCRAM-SHA-256/512) listeners, used by
confluent-kafka and kafka-python as referees, with certificates made at test time (trustme).

One broker serves the module: PLAINTEXT (the main listener, for setup), SASL_SSL, SSL with
required client certificates, and SASL_PLAINTEXT.
"""

from __future__ import annotations

import re
import socket
import struct
import subprocess
import time

import pytest
import trustme
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaError
from confluent_kafka import Producer as CKProducer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests import needs
from tests.broker_process import BrokerProcess

PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" '
        + " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items()) + ";")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost", common_name="minibroker")
    client = ca.issue_cert("client", common_name="alice", organization_name="Example",
                           organization_unit_name="eng")
    files = {
        "ca": ca.cert_pem, "server": server.private_key_and_cert_chain_pem,
        "client_key": client.private_key_pem, "client_cert": client.cert_chain_pems[0],
    }
    paths = {}
    for name, blob in files.items():
        paths[name] = d / f"{name}.pem"
        blob.write_to_path(str(paths[name]))
    return paths


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, pki):
    d = tmp_path_factory.mktemp("secure")
    proc = BrokerProcess.configured(d, "\n".join([
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0,"
        "SASL_PLAINTEXT://127.0.0.1:0",
        f"ssl.keystore.location={pki['server']}",
        f"ssl.truststore.location={pki['ca']}",
        "ssl.client.auth=requested",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
        "connection.failed.authentication.delay.ms=50",
        # The consumer groups here join at once instead of after Kafka's 3 s first-join wait.
        "group.initial.rebalance.delay.ms=0",
    ]) + "\n")
    proc.start()
    ports = {m.group(1): int(m.group(2)) for line in proc.output
             for m in [re.search(r"listener (\w+) \(\w+\) on [^:]+:(\d+)", line)] if m}
    proc.ports = ports
    proc.ca = pki["ca"]
    try:
        yield proc
    finally:
        proc.stop()


def sasl_conf(broker, pki, mechanism="PLAIN", user="alice", password="alice-secret",
              protocol="SASL_SSL") -> dict:
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.ports[protocol]}",
            "security.protocol": protocol, "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}
    if protocol.endswith("SSL"):
        conf["ssl.ca.location"] = str(pki["ca"])
    return conf


def produce_and_consume(conf: dict, topic: str, n: int = 5) -> list[bytes]:
    producer = CKProducer({**conf, "enable.idempotence": True})
    for i in range(n):
        producer.produce(topic, b"v%d" % i)
    assert producer.flush(20) == 0
    consumer = CKConsumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                           "enable.partition.eof": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    return got


def refused(conf: dict, topic: str) -> None:
    """A producer with these (wrong) credentials reports an authentication failure and delivers
    nothing: its record is still queued a second after the failure."""
    errors: list[KafkaError] = []
    producer = CKProducer({**conf, "error_cb": errors.append})
    producer.produce(topic, b"never")
    deadline = time.monotonic() + 15
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() < deadline, errors
        producer.poll(0.1)
    assert producer.flush(1) == 1


def test_confluent_kafka_over_sasl_ssl_plain(secure_broker, pki):
    assert produce_and_consume(sasl_conf(secure_broker, pki), "sasl-plain") == \
        [b"v%d" % i for i in range(5)]
    # A transaction: the committed one is read, the aborted one is not.
    producer = CKProducer({**sasl_conf(secure_broker, pki), "transactional.id": "ck-sasl"})
    producer.init_transactions(15)
    for value, commit in ((b"aborted", False), (b"committed", True)):
        producer.begin_transaction()
        producer.produce("sasl-txn", value)
        (producer.commit_transaction if commit else producer.abort_transaction)(15)
    consumer = CKConsumer({**sasl_conf(secure_broker, pki), "group.id": "g-sasl-txn",
                           "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe(["sasl-txn"])
    got, deadline = [], time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    consumer.close()
    assert got == [b"committed"]


def test_scram_credentials_made_with_the_admin_api_then_used(secure_broker, pki):
    admin = AdminClient(sasl_conf(secure_broker, pki, user="admin", password="admin-secret"))
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                     b"bob-secret"),
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                     b"bob-secret-512"),
    ])
    for f in futures.values():
        f.result(15)
    described = admin.describe_user_scram_credentials(["bob"])
    infos = described["bob"].result(15).scram_credential_infos
    assert sorted((i.mechanism, i.iterations) for i in infos) == [
        (ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)]
    for mechanism, password in (("SCRAM-SHA-256", "bob-secret"),
                                ("SCRAM-SHA-512", "bob-secret-512")):
        conf = sasl_conf(secure_broker, pki, mechanism, "bob", password)
        topic = f"scram-{mechanism[-3:]}"
        assert produce_and_consume(conf, topic, 3) == [b"v0", b"v1", b"v2"]
    # The wrong password for SCRAM fails authentication.
    refused(sasl_conf(secure_broker, pki, "SCRAM-SHA-256", "bob", "nope"), "scram-256")
    # Stored salted, never the password.
    data = (secure_broker.data_dir / "scram-credentials.json").read_text()
    assert "bob-secret" not in data and "stored_key" in data


def test_wrong_plain_password_is_refused_then_closed(secure_broker, pki):
    refused(sasl_conf(secure_broker, pki, password="wrong"), "sasl-plain")
    secure_broker.wait_for_output("Authentication failed: invalid credentials for user 'alice'")
    assert not any("wrong" in line for line in secure_broker.output)  # no secret is logged


def test_large_frames_before_authentication_are_refused(secure_broker):
    with socket.create_connection(("127.0.0.1", secure_broker.ports["SASL_PLAINTEXT"])) as s:
        s.sendall(struct.pack(">i", 10 * 1024 * 1024) + b"\0" * 1024)  # announces 10 MiB
        s.settimeout(10)
        assert s.recv(100) == b""  # closed at once, nothing buffered
    secure_broker.wait_for_output("outside [0, 524288]")  # logged by the broker as it closes


def test_requests_before_authentication_close_the_connection(secure_broker):
    with socket.create_connection(("127.0.0.1", secure_broker.ports["SASL_PLAINTEXT"])) as s:
        # Metadata v0 with no SaslHandshake first.
        body = struct.pack(">hhih", 3, 0, 1, 4) + b"test" + struct.pack(">i", 0)
        s.sendall(struct.pack(">i", len(body)) + body)
        s.settimeout(10)
        assert s.recv(100) == b""  # closed without an answer


def test_each_listener_speaks_its_own_protocol(secure_broker):
    text = "".join(secure_broker.output)
    for name in ("SASL_SSL", "SSL", "SASL_PLAINTEXT"):
        assert f"listener {name} ({name}) on 127.0.0.1:" in text
    # The PLAINTEXT listener beside them: no TLS, no SASL.
    assert produce_and_consume({"bootstrap.servers": secure_broker.bootstrap}, "plain", 2) == \
        [b"v0", b"v1"]
    # Metadata answers with the address of the listener the request came on.
    for protocol in ("SASL_SSL", "SASL_PLAINTEXT"):
        conf = sasl_conf(secure_broker, {"ca": secure_broker.ca}, protocol=protocol)
        brokers = AdminClient(conf).list_topics(timeout=15).brokers
        assert [b.port for b in brokers.values()] == [secure_broker.ports[protocol]]


def test_mtls_and_kafka_python_over_sasl_ssl(secure_broker, pki):
    conf = {"bootstrap.servers": f"127.0.0.1:{secure_broker.ports['SSL']}",
            "security.protocol": "SSL", "ssl.ca.location": str(pki["ca"]),
            "ssl.certificate.location": str(pki["client_cert"]),
            "ssl.key.location": str(pki["client_key"])}
    assert produce_and_consume(conf, "mtls", 2) == [b"v0", b"v1"]
    from kafka import KafkaConsumer, KafkaProducer

    kp_conf = dict(bootstrap_servers=f"127.0.0.1:{secure_broker.ports['SASL_SSL']}",
                   security_protocol="SASL_SSL", sasl_mechanism="PLAIN",
                   sasl_plain_username="alice", sasl_plain_password="alice-secret",
                   ssl_cafile=str(pki["ca"]))
    producer = KafkaProducer(**kp_conf)
    producer.send("kp-sasl", b"from-kafka-python").get(timeout=20)
    producer.close()
    consumer = KafkaConsumer("kp-sasl", auto_offset_reset="earliest",
                             consumer_timeout_ms=10_000, **kp_conf)
    # The first record (StopIteration if none came in 10 s); iterating to the end would wait the
    # 10 s out after it.
    assert next(consumer).value == b"from-kafka-python"
    consumer.close()
    # SCRAM-SHA-512 and a consumer group.
    ck_admin = AdminClient(sasl_conf(secure_broker, pki, user="admin", password="admin-secret"))
    ck_admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "kp", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"kp-secret")]
    )["kp"].result(15)
    scram = {**kp_conf, "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "kp",
             "sasl_plain_password": "kp-secret"}
    producer = KafkaProducer(**scram)
    producer.send("kp-scram", b"scram-512").get(timeout=20)
    producer.close()
    consumer = KafkaConsumer("kp-scram", group_id="kp-group", auto_offset_reset="earliest",
                             consumer_timeout_ms=10_000, **scram)
    assert next(consumer).value == b"scram-512"
    consumer.commit()
    consumer.close()


def ours(broker, pki, protocol: str, **extra) -> dict:
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.ports[protocol]}",
            "security.protocol": protocol, "ssl.ca.location": str(pki["ca"]), **extra}
    return conf


def test_our_client_over_sasl_ssl_scram_with_a_transaction(secure_broker, pki):
    from client import Admin, Consumer, Producer

    admin_conf = ours(secure_broker, pki, "SASL_SSL", **{
        "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"})
    with Admin(admin_conf) as admin:
        admin.create_topic("ours-scram", 2)
    # A SCRAM user made with confluent-kafka's admin client, used by ours.
    ck_admin = AdminClient(sasl_conf(secure_broker, pki, user="admin", password="admin-secret"))
    ck_admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"carol-secret")]
    )["carol"].result(15)
    conf = ours(secure_broker, pki, "SASL_SSL", **{
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol",
        "sasl.password": "carol-secret"})
    with Producer({**conf, "transactional.id": "ours-tx"}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(4):
            producer.send("ours-scram", b"c%d" % i, partition=i % 2)
        producer.commit_transaction()
    with Consumer({**conf, "group.id": "ours-g", "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe(["ours-scram"])
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            got.extend(r.value for r in consumer.poll(0.5))
        consumer.commit()
    assert sorted(got) == [b"c0", b"c1", b"c2", b"c3"]
    # A wrong password: a clear, non-retriable error naming the user, without the password.
    from client.errors import SaslAuthenticationFailedError

    with pytest.raises(SaslAuthenticationFailedError) as info:
        with Admin({**conf, "sasl.password": "not-carols"}) as admin:
            admin.list_topics()
    assert "carol" in str(info.value) and "not-carols" not in str(info.value)


def test_our_client_over_mtls_and_the_cli_with_security_settings(secure_broker, pki, tmp_path):
    from client import Admin

    conf = ours(secure_broker, pki, "SSL", **{
        "ssl.certificate.location": str(pki["client_cert"]),
        "ssl.key.location": str(pki["client_key"])})
    with Admin(conf) as admin:
        admin.create_topic("ours-mtls", 1)
        assert "ours-mtls" in admin.list_topics()
    # The CLI takes the same settings from a client properties file (Kafka's --command-config).
    from tests.integration.test_cli import run

    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=alice\n"
                     f"sasl.password=alice-secret\nssl.ca.location={pki['ca']}\n")
    b = ["--bootstrap-server", f"127.0.0.1:{secure_broker.ports['SASL_SSL']}"]
    result = run("topics", "list", "--command-config", str(props), *b)
    assert result.returncode == 0 and "ours-mtls" in result.stdout.split(), result.stderr
    bad = run("topics", "list", "--command-config", str(props), "-X", "sasl.password=nope", *b)
    assert bad.returncode == 1 and "Authentication failed" in bad.stderr
    assert "nope" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    # Without the CA the broker's certificate is not trusted.
    untrusted = run("topics", "list", "-X", "security.protocol=SSL", *b[:1],
                    f"127.0.0.1:{secure_broker.ports['SSL']}", timeout=60)
    assert untrusted.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr


def test_kcat_over_sasl_ssl_scram_and_mtls(secure_broker, pki):
    kcat = needs.program("kcat", "kcat")
    ck_admin = AdminClient(sasl_conf(secure_broker, pki, user="admin", password="admin-secret"))
    ck_admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "kcat", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"kcat-secret")]
    )["kcat"].result(15)
    sasl = ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-256",
            "-X", "sasl.username=kcat", "-X", "sasl.password=kcat-secret",
            "-X", f"ssl.ca.location={pki['ca']}",
            "-b", f"127.0.0.1:{secure_broker.ports['SASL_SSL']}"]
    subprocess.run([kcat, *sasl, "-P", "-t", "kcat-sasl", "-p", "0"], input=b"one\ntwo\n",
                   check=True, timeout=60)
    out = subprocess.run([kcat, *sasl, "-C", "-t", "kcat-sasl", "-o", "beginning", "-e",
                          "-X", "isolation.level=read_committed"],
                         capture_output=True, check=True, timeout=60).stdout
    assert out == b"one\ntwo\n"
    mtls = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki['ca']}",
            "-X", f"ssl.certificate.location={pki['client_cert']}",
            "-X", f"ssl.key.location={pki['client_key']}",
            "-b", f"127.0.0.1:{secure_broker.ports['SSL']}"]
    listing = subprocess.run([kcat, *mtls, "-L", "-t", "kcat-sasl"], capture_output=True,
                             check=True, timeout=60).stdout.decode()
    assert f"127.0.0.1:{secure_broker.ports['SSL']}" in listing and "kcat-sasl" in listing
