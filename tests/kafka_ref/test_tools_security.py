"""kafka-acls and SCRAM users (kafka-configs --entity-type users) against a secured minibroker and
a secured one-node Kafka side by side: SASL_PLAINTEXT, PLAIN for the super user, SCRAM-SHA-256 for
the user the tools create, the StandardAuthorizer's ACLs."""

from __future__ import annotations

import re
import time

import pytest

from tests.broker_process import BrokerProcess
from tests.kafka_ref.harness import KafkaCluster
from tests.kafka_ref.test_tools import both
from tests.kafka_ref.tools import ACLS, CONFIGS, CONSOLE_PRODUCER, TOPICS, Tool, run_batch

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


def settled(ours, theirs, admin: list[str]) -> None:
    """Until Kafka lists the same ACLs as minibroker: Kafka's brokers apply an ACL change when
    they replay the controller's record, a moment after CreateAcls / DeleteAcls answered (under
    load, after the next --list); minibroker applies it before answering."""
    deadline = time.monotonic() + 30
    while True:
        mine, ref = (run_batch([Tool(ACLS, ["--bootstrap-server", b.bootstrap, *admin, "--list"])])[0]
                     for b in (ours, theirs))
        if sorted(mine.out.splitlines()) == sorted(ref.out.splitlines()):
            return
        assert time.monotonic() < deadline, f"Kafka's ACLs:\n{ref.out}\nminibroker's:\n{mine.out}"
        time.sleep(0.5)


def test_kafka_acls_and_scram_users(secured):
    ours, theirs, tmp = secured
    admin = ["--command-config", str(tmp / "admin.properties")]
    alice = ["--command-config", str(tmp / "alice.properties")]
    user_of = ["--entity-type", "users", "--entity-name", "alice"]
    # Kafka's refusal message prints its internal request object; minibroker says who was refused
    # what ("User:alice from 127.0.0.1 is not allowed Describe on the cluster"): kept on purpose
    def scrub(text: str) -> str:
        return re.sub(r"(ClusterAuthorizationException): .*", r"\1: <message>", text)

    def users_and_grants(b: str) -> list[Tool]:
        bs = ["--bootstrap-server", b]
        acl = [*bs, *admin]
        return [
            Tool(CONFIGS, [*bs, *admin, *user_of, "--alter", "--add-config",
                           "SCRAM-SHA-256=[iterations=8192,password=alice-secret]"]),
            Tool(CONFIGS, [*bs, *admin, *user_of, "--describe"]),
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
        ]

    def listings(b: str) -> list[Tool]:
        bs = ["--bootstrap-server", b]
        acl = [*bs, *admin]
        return [
            Tool(ACLS, [*acl, "--list"], unordered=True),
            Tool(ACLS, [*acl, "--list", "--topic", "secure"], unordered=True),
            Tool(ACLS, [*acl, "--list", "--principal", "User:alice"], unordered=True),
            Tool(TOPICS, [*bs, *alice, "--list"]),  # now: the topic alice may describe
            Tool(CONSOLE_PRODUCER, [*bs, "--topic", "secure", "--command-config",
                                    str(tmp / "alice.properties")], stdin="allowed\n"),
            # refused (Write on "other"): the producer logs it through log4j, outside what
            # ToolBatch captures, and exits 0, on both
            Tool(CONSOLE_PRODUCER, [*bs, "--topic", "other", "--command-config",
                                    str(tmp / "alice.properties"), "--command-property",
                                    "max.block.ms=5000"], stdin="refused\n"),
            Tool(ACLS, [*acl, "--remove", "--allow-principal", "User:alice", "--operation",
                        "Write", "--topic", "secure", "--force"], unordered=True),
        ]

    def after_removal(b: str) -> list[Tool]:
        bs = ["--bootstrap-server", b]
        return [
            Tool(ACLS, [*bs, *admin, "--list", "--topic", "secure"], unordered=True),
            Tool(ACLS, [*bs, *alice, "--list"]),  # alice may not describe ACLs
            Tool(CONFIGS, [*bs, *admin, *user_of, "--alter", "--delete-config", "SCRAM-SHA-256"]),
            Tool(CONFIGS, [*bs, *admin, *user_of, "--describe"]),
        ]

    first, _ = both(ours, theirs, users_and_grants, stderr=True, scrub=scrub)
    assert "SCRAM-SHA-256=iterations=8192" in first[1].out, first[1]
    settled(ours, theirs, admin)
    second, _ = both(ours, theirs, listings, stderr=True, scrub=scrub)
    assert second[3].out.split() == ["secure"], second[3]
    assert second[4].code == 0, second[4]
    settled(ours, theirs, admin)
    both(ours, theirs, after_removal, stderr=True, scrub=scrub)
