"""The documentation's examples run, so that they cannot rot: the server.properties example of
docs/operations.md starts the broker, every line of the README's command-line tour exits 0
against it, the README's confluent-kafka snippet and the librdkafka example run, the properties
of docs/security.md start a broker with its listeners and its mapping rule maps as it says, every relative link resolves, and the
protocol page's table of served versions is the broker's."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
OPERATIONS = ROOT / "docs" / "operations.md"
SECURITY = ROOT / "docs" / "security.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md",
        ROOT / "client" / "README.md", ROOT / "spark_connector" / "README.md"]


def fenced_blocks(language: str, path: Path = README) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def minibroker_on_path(tmp_path: Path) -> Path:
    """A `minibroker` for subprocesses: this interpreter's broker.cli (the installed script does
    the same)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "minibroker"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m broker.cli "$@"\n')
    shim.chmod(0o755)
    return bin_dir


@pytest.mark.slow
def test_readme_properties_and_command_line_tour(tmp_path):
    (properties,) = fenced_blocks("properties", OPERATIONS)
    config = tmp_path / "server.properties"
    config.write_text(properties)
    (tour,) = fenced_blocks("sh")
    commands = [line for line in tour.splitlines() if line.strip()]
    assert len(commands) >= 15
    bin_dir = minibroker_on_path(tmp_path)

    broker = BrokerProcess(tmp_path / "data", "--config", str(config))
    broker.start()
    try:
        assert "partitions recovered" in "".join(broker.output)
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               "MINIBROKER_BOOTSTRAP_SERVER": broker.bootstrap}
        outputs = {}
        for command in commands:
            result = subprocess.run(["bash", "-c", command], env=env, cwd=tmp_path,
                                    capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
            outputs[command] = result.stdout
        # The README's confluent-kafka snippet, against the same broker.
        (snippet,) = fenced_blocks("python")
        assert '"metadata.recovery.strategy": "none"' in snippet
        exec(compile(snippet.replace("localhost:9092", broker.bootstrap), "README", "exec"), {})
        everything = subprocess.run([str(bin_dir / "minibroker"), "consume", "orders",
                                     "--from-beginning", "--timeout", "1", "--print-key"],
                                    env=env, capture_output=True, text=True, timeout=60)
        assert "erin\t75" in everything.stdout.splitlines(), everything
    finally:
        assert broker.stop() == 0
    formatted = next(out for cmd, out in outputs.items() if "%p/%o" in cmd)
    assert sorted(line.split()[1] for line in formatted.splitlines()) == \
        ["alice=10", "bob=250", "carol=99", "dave=120"]
    described = next(out for cmd, out in outputs.items() if "groups describe" in cmd)
    assert "CURRENT-OFFSET" in described and "orders" in described


def test_security_page_example_starts(tmp_path):
    """docs/security.md's server.properties, with certificates made here, loopback addresses
    and free ports: the broker starts with its four listeners and answers on the SASL one."""
    import trustme
    from confluent_kafka.admin import AdminClient

    (example,) = fenced_blocks("properties", SECURITY)
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "server.pem"))
    text = example.replace("/etc/minibroker", str(tmp_path)).replace("0.0.0.0", "127.0.0.1")
    text = re.sub(r"//(127\.0\.0\.1):909\d", r"//\1:0", text.split("advertised.listeners")[0]) + \
        "advertised.listeners" + text.split("advertised.listeners")[1]
    broker = BrokerProcess.configured(tmp_path, text)
    broker.start()
    try:
        port = int(re.search(r"listener SASL_SSL \(SASL_SSL\) on 127\.0\.0\.1:(\d+)",
                             "".join(broker.output)).group(1))
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}",
                             "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                             "sasl.username": "admin", "sasl.password": "admin-secret",
                             "ssl.ca.location": str(tmp_path / "ca.pem")})
        assert admin.list_topics(timeout=15).brokers[0].host == "broker.example"
    finally:
        assert broker.stop() == 0


def test_security_page_mapping_rule_maps_as_it_says():
    """docs/security.md's ssl.principal.mapping.rules example makes the subject it shows the short
    name it shows; the README's Security paragraph points there."""
    from broker.config.principal_mapping import map_subject, parse_rules

    text = SECURITY.read_text(encoding="utf-8")
    rule, name = re.search(r"`ssl\.principal\.mapping\.rules`.*?\(`(.+?)` makes it `User:(\w+)`",
                           text, re.S).groups()
    subject = re.search(r"`User:(CN=[^`]+)`", text).group(1)
    assert map_subject(subject, parse_rules(rule)) == name == "alice"
    readme = README.read_text(encoding="utf-8")
    assert "](docs/security.md)" in readme.split("## Security", 1)[1]


def test_librdkafka_example_copies_exactly_once(tmp_path):
    """examples/confluent_kafka_transactions.py: every record of the source lands in the sink
    once, read_committed, and its settings carry metadata.recovery.strategy=none."""
    from client import Admin, Consumer, Producer

    path = ROOT / "examples" / "confluent_kafka_transactions.py"
    spec = importlib.util.spec_from_file_location("confluent_kafka_transactions", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.producer_settings("x", "y")["metadata.recovery.strategy"] == "none"

    broker = BrokerProcess(tmp_path / "data", "--flush", "never")
    broker.start()
    try:
        conf = {"bootstrap.servers": broker.bootstrap}
        with Admin(conf) as admin:
            admin.create_topic("in", 2)
            admin.create_topic("out", 2)
        with Producer(conf) as producer:
            for i in range(300):
                producer.send("in", f"order-{i}".encode(), key=str(i % 7).encode())
        copied = example.run(broker.bootstrap, "in", "out", "copier", idle_seconds=3)
        assert copied == 300
        with Consumer({**conf, "isolation.level": "read_committed"}) as consumer:
            tps = consumer.partitions_for("out")
            consumer.assign(tps)
            consumer.seek_to_beginning(tps)
            values = []
            while len(values) < 300:
                batch = consumer.poll(2.0)
                assert batch, f"only {len(values)} records in the sink"
                values += [r.value for r in batch]
        assert sorted(values) == sorted(f"order-{i} checked".encode() for i in range(300))
    finally:
        assert broker.stop() == 0


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    """Every relative link of the documentation names a file of the repository (and no document
    points outside it, as the old ../shared ones did)."""
    for link in _links(path):
        if re.match(r"[a-z]+:", link) or link.startswith("#"):
            continue
        target = (path.parent / link.split("#")[0]).resolve()
        assert target.is_relative_to(ROOT), f"{path.name}: {link} leaves the repository"
        assert target.exists(), f"{path.name}: {link} does not exist"


def test_no_reference_to_documents_outside_the_repository():
    packages = ("protocol", "broker", "client", "spark_connector", "pyspark_minibroker", "tests",
                "bench", "examples", "docs")
    paths = [*ROOT.glob("*.md"), *(p for d in packages for p in (ROOT / d).rglob("*")
                                   if p.suffix in (".py", ".md") and "node_modules" not in p.parts)]
    assert len(paths) > 100
    for path in paths:
        if path == Path(__file__):
            continue
        assert "../shared" not in path.read_text(encoding="utf-8", errors="replace"), path


def test_protocol_page_lists_the_served_versions():
    from protocol.api_keys import ApiKey
    from protocol.messages.api_versions import SERVED

    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    rows = re.findall(r"\| ([A-Za-z/, ]+) \| (\d+(?:-\d+)?) \|", text)
    documented = {}
    for names, versions in rows:
        low, _, high = versions.partition("-")
        for name in names.split(", "):
            documented[name.strip()] = (int(low), int(high or low))

    def camel(key: ApiKey) -> str:
        return "".join(part.capitalize() for part in key.name.split("_"))

    served = {camel(k): (s.versions.min, s.versions.max) for k, s in SERVED.items()}
    expanded = {}
    for name, versions in documented.items():
        if name == "Describe/AlterUserScramCredentials":
            expanded["DescribeUserScramCredentials"] = expanded["AlterUserScramCredentials"] = versions
        else:
            expanded[name] = versions
    assert expanded == served


def test_cli_page_java_properties_example_is_read_as_documented():
    """docs/cli.md's client.properties example: the JAAS line gives the user and password, the
    PEM truststore the CA file (tests/integration/test_java_client_properties.py uses such files
    against a SASL_SSL broker)."""
    from client.config import admin_config
    from protocol.properties import parse_properties

    (example,) = fenced_blocks("properties", ROOT / "docs" / "cli.md")
    conf = admin_config({"bootstrap.servers": "127.0.0.1:9094", **parse_properties(example)})
    assert (conf["sasl.username"], conf["sasl.password"]) == ("bob", "bob-secret")
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["ssl.ca.location"] == "/etc/kafka/ca.pem"
