"""A Java client's properties file works with --command-config (issue 27 item 5): JAAS lines of
PLAIN and SCRAM, PEM trust and key stores; what cannot be honoured is named as a Java key. The
broker's ssl.principal.mapping.rules (item 6) turns a certificate's subject into a short
principal, and a plaintext client at a TLS listener is told about security.protocol (item 10)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trustme
from click.testing import CliRunner

from broker.cli import main as minibroker
from client import Admin
from client.errors import BrokerConnectionError
from tests.broker_process import BrokerProcess

PLAIN_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              'username="admin" password="admin-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", common_name="minibroker")
    client = ca.issue_cert("client", common_name="alice", organization_unit_name="eng",
                           organization_name="Example")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    server.private_key_and_cert_chain_pem.write_to_path(str(d / "server.pem"))
    # A Java PEM keystore file: the private key and the certificate chain in one file.
    client.private_key_and_cert_chain_pem.write_to_path(str(d / "client.pem"))
    return d


@pytest.fixture(scope="module")
def broker(tmp_path_factory, pki):
    d = tmp_path_factory.mktemp("java-props")
    proc = BrokerProcess.configured(d, "\n".join([
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
        f"ssl.keystore.location={pki / 'server.pem'}",
        f"ssl.truststore.location={pki / 'ca.pem'}",
        "ssl.client.auth=requested",
        r"ssl.principal.mapping.rules=RULE:^CN=(.*?),.*$/$1/,DEFAULT",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN_JAAS}",
        "authorizer.class.name=StandardAuthorizer",
        "super.users=User:admin;User:alice",
        "allow.everyone.if.no.acl.found=false",
    ]) + "\n").start()
    proc.ports = {m.group(1): int(m.group(2)) for line in proc.output
                  for m in [re.search(r"listener (\w+) \(\w+\) on [^:]+:(\d+)", line)] if m}
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def cli(broker, protocol: str, *args: str, input: str | None = None):
    port = broker.port if protocol == "PLAINTEXT" else broker.ports[protocol]
    return CliRunner().invoke(minibroker, [*args, "-b", f"127.0.0.1:{port}"], input=input)


def properties(path, *lines: str):
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_plain_jaas_and_pem_truststore(broker, pki, tmp_path):
    config = properties(
        tmp_path / "admin.properties",
        "security.protocol=SASL_SSL", "sasl.mechanism=PLAIN",
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\",
        '    username="admin" password="admin-secret";',
        "ssl.truststore.type=PEM", f"ssl.truststore.location={pki / 'ca.pem'}",
        "ssl.endpoint.identification.algorithm=https",
    )
    result = cli(broker, "SASL_SSL", "topics", "create", "java-plain", "--command-config", config)
    assert result.exit_code == 0, result.output
    wrong = properties(tmp_path / "wrong.properties",
                       *Path(config).read_text().replace("admin-secret", "nope").splitlines())
    result = cli(broker, "SASL_SSL", "topics", "list", "--command-config", wrong)
    assert result.exit_code == 1 and "SaslAuthenticationFailed" in result.output, result.output


def test_scram_jaas(broker, pki, tmp_path):
    admin_conf = {"bootstrap.servers": f"127.0.0.1:{broker.ports['SASL_SSL']}",
                  "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                  "sasl.username": "admin", "sasl.password": "admin-secret",
                  "ssl.ca.location": str(pki / "ca.pem")}
    with Admin(admin_conf) as admin:
        admin.alter_user_scram_credentials([("bob", "SCRAM-SHA-512", "bob-secret", 8192)])
    config = properties(
        tmp_path / "bob.properties",
        "security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512",
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="bob" password="bob-secret";',
        "ssl.truststore.type=PEM", f"ssl.truststore.location={pki / 'ca.pem'}",
    )
    result = cli(broker, "SASL_SSL", "topics", "list", "--command-config", config)
    assert result.exit_code == 0, result.output  # authenticated (bob may see no topic)


def test_pem_keystore_and_principal_mapping(broker, pki, tmp_path):
    """mTLS with a Java PEM keystore (key and chain in one file): the subject
    CN=alice,OU=eng,O=Example becomes User:alice by the broker's mapping rule, a super user."""
    config = properties(
        tmp_path / "mtls.properties",
        "security.protocol=SSL",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={pki / 'client.pem'}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={pki / 'ca.pem'}",
    )
    result = cli(broker, "SSL", "topics", "create", "mapped", "--command-config", config)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("line, needle", [
    ("ssl.truststore.type=JKS", "ssl.truststore.type=JKS (a Java client setting) is not supported"),
    ("ssl.keystore.type=PKCS12", "ssl.keystore.type=... (a Java client setting)"),
    ("sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required;",
     "sasl.jaas.config=Krb5LoginModule (a Java client setting)"),
])
def test_what_cannot_be_honoured_is_named_as_a_java_key(broker, tmp_path, line, needle):
    config = properties(tmp_path / "client.properties", line)
    result = cli(broker, "PLAINTEXT", "topics", "list", "--command-config", config)
    assert result.exit_code == 1, result.output
    assert needle in result.output and "librdkafka" not in result.output, result.output


def test_plaintext_client_at_a_tls_listener_is_told_about_security_protocol(broker):
    result = cli(broker, "SASL_SSL", "topics", "list")
    assert result.exit_code == 1, result.output
    assert "security.protocol" in result.output, result.output
    # The broker's log says it too, for clients that say only "closed by the broker".
    broker.wait_for_output("its security.protocol must be SASL_SSL", timeout=5)


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
def test_python_client_at_a_tls_listener_is_told_about_security_protocol(broker, listener):
    """The Python client's own error, as the CLI's (one function gives it): a plaintext client
    whose connection a TLS listener closes before any answer."""
    config = {"bootstrap.servers": f"127.0.0.1:{broker.ports[listener]}",
              "request.timeout.ms": 5000}
    with Admin(config) as admin, pytest.raises(BrokerConnectionError) as caught:
        admin.list_topics()
    assert "closed by the broker (security.protocol is PLAINTEXT: if this is an SSL or SASL_SSL " \
        "listener, set security.protocol=SSL or SASL_SSL)" in str(caught.value)
