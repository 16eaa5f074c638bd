"""kafka-acls and SCRAM users (kafka-configs --entity-type users) against a secured minibroker and
a secured one-node Kafka side by side: SASL_PLAINTEXT, PLAIN for the super user, SCRAM-SHA-256 for
the user the tools create, the StandardAuthorizer's ACLs."""

from __future__ import annotations

import re

import pytest

from tests.broker_process import BrokerProcess
from tests.kafka_ref.harness import KafkaCluster
from tests.kafka_ref.test_tools import both
from tests.kafka_ref.tools import ACLS, CONFIGS, CONSOLE_PRODUCER, TOPICS, Tool

pytestmark = [pytest.mark.xdist_group("kafka_ref"), pytest.mark.slow]

PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required'
SCRAM = 'org.apache.kafka.common.security.scram.ScramLoginModule required'
SECURED = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config":
        f'{PLAIN} username="admin" password="admin-secret" user_admin="admin-secret";',
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
    "allow.everyone.if.no.acl.found": "false",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def secured(kafka_ref, tmp_path_factory):
    """(minibroker, Kafka), both secured the same way, and the clients' property files."""
    tmp = tmp_path_factory.mktemp("secured")
    config = tmp / "server.properties"
    config.write_text("listeners=SASL_PLAINTEXT://127.0.0.1:0\n"
                      "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT\n"
                      + "".join(f"{k}={v}\n" for k, v in SECURED.items()))
    ours = BrokerProcess(tmp / "minibroker", "--config", str(config)).start()
    # Kafka's brokers talk to their controller as ANONYMOUS on the PLAINTEXT controller listener
    theirs = KafkaCluster(tmp / "kafka", 1, listener="SASL_PLAINTEXT", config={
        **SECURED, "super.users": "User:admin;User:ANONYMOUS",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": f"{SCRAM};",
        "offsets.topic.num.partitions": 3, "transaction.state.log.num.partitions": 3})
    try:
        theirs.start()
        for name, login in (("admin", f'{PLAIN} username="admin" password="admin-secret";'),
                            ("alice", f'{SCRAM} username="alice" password="alice-secret";')):
            mechanism = "PLAIN" if name == "admin" else "SCRAM-SHA-256"
            (tmp / f"{name}.properties").write_text(
                f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n"
                f"sasl.jaas.config={login}\n")
        yield ours, theirs, tmp
    finally:
        theirs.stop()
        ours.stop()


def test_kafka_acls_and_scram_users(secured):
    ours, theirs, tmp = secured
    admin = ["--command-config", str(tmp / "admin.properties")]
    alice = ["--command-config", str(tmp / "alice.properties")]

    def scenario(b: str) -> list[Tool]:
        bs = ["--bootstrap-server", b]
        user = [*bs, *admin, "--entity-type", "users", "--entity-name", "alice"]
        acl = [*bs, *admin]
        return [
            Tool(CONFIGS, [*user, "--alter", "--add-config",
                           "SCRAM-SHA-256=[iterations=8192,password=alice-secret]"]),
            Tool(CONFIGS, [*user, "--describe"]),
            Tool(CONFIGS, [*bs, *admin, "--entity-type", "users", "--describe"]),
            Tool(TOPICS, [*bs, *admin, "--create", "--topic", "secure"]),
            Tool(TOPICS, [*bs, *admin, "--create", "--topic", "other"]),
            Tool(TOPICS, [*bs, *alice, "--list"]),  # no ACL yet: sees nothing
            # ACL listings come in no defined order (Kafka's are hash sets): compared as sets
            Tool(ACLS, [*acl, "--add", "--allow-principal", "User:alice", "--operation", "Write",
                        "--operation", "Describe", "--topic", "secure"], unordered=True),
            Tool(ACLS, [*acl, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                        "--group", "g-", "--resource-pattern-type", "prefixed"], unordered=True),
            Tool(ACLS, [*acl, "--add", "--deny-principal", "User:alice", "--deny-host", "10.0.0.1",
                        "--operation", "All", "--topic", "*"], unordered=True),
            Tool(ACLS, [*acl, "--list"], unordered=True),
            Tool(ACLS, [*acl, "--list", "--topic", "secure"], unordered=True),
            Tool(ACLS, [*acl, "--list", "--principal", "User:alice"], unordered=True),
            Tool(TOPICS, [*bs, *alice, "--list"]),  # now: the topic alice may describe
            Tool(CONSOLE_PRODUCER, [*bs, "--topic", "secure", "--command-config",
                                    str(tmp / "alice.properties")], stdin="allowed\n"),
            Tool(CONSOLE_PRODUCER, [*bs, "--topic", "other", "--command-config",
                                    str(tmp / "alice.properties"), "--command-property",
                                    "max.block.ms=5000"], stdin="refused\n"),
            Tool(ACLS, [*acl, "--remove", "--allow-principal", "User:alice", "--operation",
                        "Write", "--topic", "secure", "--force"], unordered=True),
            Tool(ACLS, [*acl, "--list", "--topic", "secure"], unordered=True),
            Tool(ACLS, [*bs, *alice, "--list"]),  # alice may not describe ACLs
            Tool(CONFIGS, [*user, "--alter", "--delete-config", "SCRAM-SHA-256"]),
            Tool(CONFIGS, [*user, "--describe"]),
        ]

    # Kafka's refusal message prints its internal request object; minibroker says who was refused
    # what ("User:alice from 127.0.0.1 is not allowed Describe on the cluster"): kept on purpose
    results, _ = both(ours, theirs, scenario, stderr=True, scrub=lambda text: re.sub(
        r"(ClusterAuthorizationException): .*", r"\1: <message>", text))
    assert "SCRAM-SHA-256=iterations=8192" in results[1].out, results[1]
    assert results[12].out.split() == ["secure"], results[12]
    assert results[13].code == 0, results[13]
    # results[14]: alice's records to "other" are refused; the producer logs it (through log4j,
    # outside what ToolBatch captures) and the tool exits 0, on both
