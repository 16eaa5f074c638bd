"""The README's examples run, so that they cannot rot: its server.properties example starts the
broker, and every line of its command-line tour exits 0 against that broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess

README = Path(__file__).resolve().parents[2] / "README.md"


def fenced_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


@pytest.mark.slow
def test_readme_properties_and_command_line_tour(tmp_path):
    properties = fenced_blocks("properties")[0]  # the second one is the Security section's
    config = tmp_path / "server.properties"
    config.write_text(properties)
    (tour,) = fenced_blocks("sh")
    commands = [line for line in tour.splitlines() if line.strip()]
    assert len(commands) >= 15

    # `minibroker` on PATH: this interpreter's broker.cli (the installed script does the same).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "minibroker"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m broker.cli "$@"\n')
    shim.chmod(0o755)

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
    finally:
        assert broker.stop() == 0
    formatted = next(out for cmd, out in outputs.items() if "%p/%o" in cmd)
    assert sorted(line.split()[1] for line in formatted.splitlines()) == \
        ["alice=10", "bob=250", "carol=99", "dave=120"]
    described = next(out for cmd, out in outputs.items() if cmd.endswith("groups describe billing"))
    assert "CURRENT-OFFSET" in described and "orders" in described


def test_readme_security_example_starts(tmp_path):
    """The Security section's server.properties, with certificates made here, loopback addresses
    and free ports: the broker starts with its four listeners and answers on the SASL one."""
    import trustme
    from confluent_kafka.admin import AdminClient

    (example,) = fenced_blocks("properties")[1:]
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "server.pem"))
    text = example.replace("/etc/minibroker", str(tmp_path)).replace("0.0.0.0", "127.0.0.1")
    text = re.sub(r"//(127\.0\.0\.1):909\d", r"//\1:0", text.split("advertised.listeners")[0]) + \
        "advertised.listeners" + text.split("advertised.listeners")[1]
    (tmp_path / "server.properties").write_text(text)
    broker = BrokerProcess(tmp_path / "data", "--config", str(tmp_path / "server.properties"))
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
