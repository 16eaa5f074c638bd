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
    (properties,) = fenced_blocks("properties")
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
