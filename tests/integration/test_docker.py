"""The Docker side of issue 39 (items 10 and 12): the container's health check against a real
broker (a frozen broker is unhealthy), and docker-compose.yml run for real when a Docker engine is
available: build, up, healthy, produce and consume from the host, a restart and a down/up keep the
data, down. Without an engine the compose test is skipped with the reason (under CI=true too: it
runs wherever the engine answers)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from client import Consumer, Producer
from client.structs import TopicPartition
from tests.broker_process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"


def healthcheck(port: int, timeout: float = 1.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HEALTHCHECK), str(port), str(timeout)],
                          capture_output=True, text=True, timeout=30)


def test_healthcheck_asks_kafka_and_a_frozen_broker_is_unhealthy(tmp_path):
    proc = BrokerProcess(tmp_path / "data", "--flush", "never")
    with proc:
        assert healthcheck(proc.port).returncode == 0
        assert proc.proc is not None
        pid = proc.proc.pid
        os.kill(pid, signal.SIGSTOP)  # the kernel still accepts its connections
        try:
            started = time.monotonic()
            frozen = healthcheck(proc.port, timeout=1.0)
            assert time.monotonic() - started < 10
        finally:
            os.kill(pid, signal.SIGCONT)
        assert frozen.returncode == 1
        assert frozen.stdout.startswith("unhealthy: no ApiVersions answer within 1 s"), frozen
        assert healthcheck(proc.port).returncode == 0
    stopped = healthcheck(proc.port)
    assert stopped.returncode == 1 and "cannot reach" in stopped.stdout


# -- docker-compose.yml, for real --------------------------------------------------------------


def engine_unavailable() -> str | None:
    """Why docker-compose.yml cannot run here, or None."""
    docker = shutil.which("docker")
    if docker is None:
        return "no docker command on PATH"
    info = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"],
                          capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        return ("the Docker engine does not answer: "
                + (info.stderr.strip().splitlines() or ["no reason given"])[-1])
    compose = subprocess.run([docker, "compose", "version"], capture_output=True, text=True,
                             timeout=60)
    if compose.returncode != 0:
        return "no Compose v2 plugin (docker compose)"
    major = int(info.stdout.strip().split(".")[0] or 0)
    if major < 25:
        return f"Docker Engine {info.stdout.strip()}: the compose file needs 25 or later"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_compose_file_for_real():
    reason = engine_unavailable()
    if reason is not None:
        pytest.skip(f"docker-compose.yml not run: {reason}")
    port = free_port()
    env = {**os.environ, "MINIBROKER_EXTERNAL_PORT": str(port),
           "MINIBROKER_EXTERNAL_HOST": "127.0.0.1", "MINIBROKER_METRICS_PORT": str(free_port())}
    project = f"minibroker-test-{uuid.uuid4().hex[:8]}"
    compose = ["docker", "compose", "-f", str(ROOT / "docker-compose.yml"), "-p", project]

    def run(*args: str, timeout: float = 900) -> str:
        done = subprocess.run([*compose, *args], capture_output=True, text=True, env=env,
                              timeout=timeout)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
        return done.stdout

    def healthy(timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            container = run("ps", "-q", "broker").strip()
            state = subprocess.run(["docker", "inspect", container], capture_output=True,
                                   text=True, timeout=60)
            health = json.loads(state.stdout or "[{}]")[0].get("State", {}).get("Health", {})
            if health.get("Status") == "healthy":
                return
            assert time.monotonic() < deadline, health
            time.sleep(0.5)

    bootstrap = f"127.0.0.1:{port}"

    def values() -> list[bytes]:
        config = {"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}
        with Consumer(config) as consumer:
            consumer.assign([TopicPartition("docker", 0)])
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < 3 and time.monotonic() < deadline:
                got += [r.value for r in consumer.poll(0.5)]
        return got

    try:
        run("build", "broker")
        run("up", "-d", "broker")
        healthy()
        with Producer({"bootstrap.servers": bootstrap}) as producer:
            for value in (b"a", b"b", b"c"):
                producer.send("docker", value, partition=0)
            producer.flush()
        assert values() == [b"a", b"b", b"c"]
        run("restart", "broker")
        healthy()
        assert values() == [b"a", b"b", b"c"]
        run("down")  # the named volume stays
        run("up", "-d", "broker")
        healthy()
        assert values() == [b"a", b"b", b"c"]
    finally:
        subprocess.run([*compose, "down", "-v", "--remove-orphans"], capture_output=True,
                       env=env, timeout=300)
