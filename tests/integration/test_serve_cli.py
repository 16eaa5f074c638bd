"""`minibroker serve`: readable startup, and one-line errors (no traceback) for bad options."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.broker_process import BrokerProcess

SERVE = [sys.executable, "-c", "from broker.cli import main; main()", "serve"]


def run_serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SERVE, *args], capture_output=True, text=True, timeout=30)


def assert_one_line_error(result: subprocess.CompletedProcess, needle: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert needle in result.stderr, result.stderr


def test_unknown_config_key_names_it(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("num.partitons=3\n")
    result = run_serve("--config", str(config), "--data-dir", str(tmp_path / "d"))
    assert_one_line_error(result, "unknown config key 'num.partitons' (did you mean 'num.partitions'?)")


def test_bad_config_value(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("num.partitions=zero\n")
    result = run_serve("--config", str(config), "--data-dir", str(tmp_path / "d"))
    assert_one_line_error(result, "invalid value for num.partitions")


@pytest.mark.parametrize("lines, needle", [
    (["listeners=SSL://127.0.0.1:0"], "ssl.keystore.location is not set"),
    (["listeners=SASL_SSL://127.0.0.1:0", "ssl.keystore.location={tmp}/missing.pem"],
     "cannot load a key and certificate"),
    (["listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=GSSAPI"],
     "sasl.enabled.mechanisms: GSSAPI"),
])
def test_unusable_security_settings_are_one_line(tmp_path, lines, needle):
    config = tmp_path / "server.properties"
    config.write_text("\n".join(lines).format(tmp=tmp_path) + "\n")
    result = run_serve("--config", str(config), "--data-dir", str(tmp_path / "d"))
    assert_one_line_error(result, needle)
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_config_file(tmp_path):
    result = run_serve("--config", str(tmp_path / "nope.properties"))
    assert_one_line_error(result, "cannot read config file")


def test_data_dir_is_a_file(tmp_path):
    afile = tmp_path / "file"
    afile.write_text("x")
    result = run_serve("--data-dir", str(afile), "--port", "0")
    assert_one_line_error(result, "data dir")


def test_bad_port_option():
    result = run_serve("--port", "99999")
    assert_one_line_error(result, "--port")


def test_port_in_use(tmp_path):
    with BrokerProcess(tmp_path / "a") as first:
        result = run_serve("--port", str(first.port), "--data-dir", str(tmp_path / "b"))
    assert_one_line_error(result, "Address already in use")


@pytest.mark.parametrize("flush", ["always", "never"])
def test_startup_output_and_clean_restart(tmp_path, flush):
    broker = BrokerProcess(tmp_path / "d", "--flush", flush)
    broker.start()
    assert broker.stop() == 0
    broker.start()
    broker.stop()
    text = "".join(broker.output)
    assert "listening on 127.0.0.1:" in text
    assert f"flush={flush}" in text
    assert "data dir" in text and "after an unclean shutdown" not in text


def test_unclean_shutdown_is_reported(tmp_path):
    broker = BrokerProcess(tmp_path / "d")
    broker.start()
    from protocol.api_keys import ApiKey
    from tests.raw_client import RawConnection

    with RawConnection(broker.port) as conn:
        meta = conn.request(
            ApiKey.METADATA, 4, {"topics": [{"name": "auto"}], "allow_auto_topic_creation": True}
        )
        assert meta.topics[0].error_code == 0
    broker.kill9()
    broker.start()
    broker.stop()
    assert "after an unclean shutdown" in "".join(broker.output)


def test_data_dir_that_is_a_file_is_one_clear_line(tmp_path):
    afile = tmp_path / "passwd"
    afile.write_text("root:x:0:0\n")
    result = run_serve("--data-dir", str(afile), "--port", "0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"minibroker: error: data dir {afile} exists and is not a directory"
    ]


def test_kafka_server_properties_with_listeners(tmp_path):
    from tests.unit.protocol.test_properties import KAFKA_KRAFT

    config = tmp_path / "server.properties"
    text = KAFKA_KRAFT.replace("PLAINTEXT://:9092", "PLAINTEXT://127.0.0.1:0")
    config.write_text(text.replace("log.dirs=/var/lib/kafka", f"log.dirs={tmp_path / 'kd'}"))
    broker = BrokerProcess(tmp_path / "d", "--config", str(config))
    broker.start()
    try:
        output = "".join(broker.output)
        # (listener.security.protocol.map is read, not ignored; the CONTROLLER listener is)
        assert "ignored 13 Kafka config key(s)" in output
        assert "(advertised localhost:9092)" in output  # advertised.listeners
    finally:
        assert broker.stop() == 0


def test_json_log_format_is_one_object_per_line(tmp_path):
    import json

    broker = BrokerProcess(tmp_path / "d", "--log-format", "json")
    broker.start()
    assert broker.stop() == 0
    events = [json.loads(line) for line in broker.output]
    assert {"ts", "level", "logger", "msg"} <= set(events[0])
    messages = [e["msg"] for e in events]
    assert any(m.startswith("listening on 127.0.0.1:") for m in messages)
    assert any(m.startswith("data dir ") and "partitions recovered" in m for m in messages)


def test_log_file_gets_every_line_and_survives_rotation(tmp_path):
    """--log-file: the same lines as stderr, appended; after logrotate moves the file away the
    broker writes a new one (WatchedFileHandler) instead of the moved one."""
    log_file = tmp_path / "server.log"
    log_file.write_text("an older line\n")
    broker = BrokerProcess(tmp_path / "d", "--log-file", str(log_file))
    broker.start()
    try:
        deadline = time.monotonic() + 10
        while "listening on" not in log_file.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        lines = log_file.read_text().splitlines()
        assert lines[0] == "an older line"
        assert any(" INFO minibroker: listening on 127.0.0.1:" in line for line in lines)
        log_file.rename(tmp_path / "server.log.1")
    finally:
        assert broker.stop() == 0
    assert log_file.read_text().strip(), "nothing written to a new file after the rotation"
    assert "an older line" not in log_file.read_text()


def test_unwritable_log_file_is_one_line(tmp_path):
    result = run_serve("--log-file", str(tmp_path / "missing-dir" / "server.log"),
                       "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2
    assert_one_line_error(result, "cannot open log file")


def test_wildcard_host_advertises_the_host_name(tmp_path):
    import socket

    broker = BrokerProcess(tmp_path / "d", "--host", "0.0.0.0")
    # BrokerProcess passes --host 127.0.0.1 first; the later --host wins.
    broker.start()
    try:
        assert f"(advertised {socket.gethostname()}:" in "".join(broker.output)
    finally:
        broker.stop()


def test_a_second_listener_advertises_its_own_address(tmp_path):
    import re

    from protocol.api_keys import ApiKey
    from tests.raw_client import RawConnection

    config = tmp_path / "server.properties"
    config.write_text(
        "listeners=INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0\n"
        "advertised.listeners=EXTERNAL://outside.example:19092\n"
        "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT\n"
    )
    broker = BrokerProcess(tmp_path / "d", "--config", str(config))
    broker.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = re.search(r"listener EXTERNAL \(PLAINTEXT\) on 127\.0\.0\.1:(\d+)", "".join(broker.output))
            if found:
                break
            time.sleep(0.05)
        assert found, broker.output
        body = {"topics": [], "allow_auto_topic_creation": False}
        with RawConnection(int(found.group(1))) as conn:
            (external,) = conn.request(ApiKey.METADATA, 4, body).brokers
        with RawConnection(broker.port) as conn:
            (internal,) = conn.request(ApiKey.METADATA, 4, body).brokers
        assert (external.host, external.port) == ("outside.example", 19092)
        assert (internal.host, internal.port) == ("127.0.0.1", broker.port)
    finally:
        assert broker.stop() == 0
