"""Java properties syntax (protocol/properties.py) and Kafka's server.properties keys
(broker/config/__init__.py)."""

from __future__ import annotations

import logging

import pytest

from broker.config import ConfigError, Listener, build_config
from protocol.properties import parse_properties


def test_separators_comments_and_no_inline_comments():
    text = (
        "# comment\n"
        "   ! another comment\n"
        "\n"
        "a=1\n"
        "b : 2\n"
        "c 3\n"
        "d=1 # not a comment in Java properties\n"
        "e==x\n"
        "f\n"
    )
    assert parse_properties(text) == {
        "a": "1", "b": "2", "c": "3", "d": "1 # not a comment in Java properties", "e": "=x",
        "f": "",
    }


def test_continuation_lines_and_escapes():
    text = (
        "listeners=PLAINTEXT://a:1,\\\n"
        "          INTERNAL://b:2\n"
        "path=C:\\\\data\\tx\n"
        "key\\ with\\ spaces\\:x = v\n"
        "unicode=\\u00e9t\\u00E9\n"
        "even=ends in a backslash\\\\\n"
        "next=line\n"
    )
    assert parse_properties(text) == {
        "listeners": "PLAINTEXT://a:1,INTERNAL://b:2",
        "path": "C:\\data\tx",
        "key with spaces:x": "v",
        "unicode": "été",
        "even": "ends in a backslash\\",
        "next": "line",
    }


def test_bad_unicode_escape_names_the_line():
    with pytest.raises(ValueError, match="file:2: malformed"):
        parse_properties("a=1\nb=\\u12\n", "file")


KAFKA_KRAFT = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/var/lib/kafka
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def test_a_real_kafka_server_properties_is_accepted(caplog):
    with caplog.at_level(logging.WARNING, logger="minibroker.config"):
        config = build_config(parse_properties(KAFKA_KRAFT))
    assert (config.host, config.port) == ("0.0.0.0", 9092)
    assert config.advertised == ("localhost", 9092)
    assert config.extra_listeners == ()  # the controller listener is not ours to serve
    assert config.node_id == 1 and str(config.data_dir) == "/var/lib/kafka"
    assert config.log.retention_ms == 168 * 3600 * 1000
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "zookeeper" not in warning and "process.roles" in warning and "num.io.threads" in warning


def test_two_listeners_internal_and_external():
    config = build_config({
        "listeners": "INTERNAL://0.0.0.0:29092,EXTERNAL://0.0.0.0:9092",
        "advertised.listeners": "INTERNAL://broker:29092,EXTERNAL://localhost:9092",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
    })
    assert (config.host, config.port, config.advertised) == ("0.0.0.0", 29092, ("broker", 29092))
    assert config.security_protocol == "PLAINTEXT"
    assert config.extra_listeners == (
        Listener("EXTERNAL", "0.0.0.0", 9092, "localhost", 9092, "SASL_SSL"),
    )


@pytest.mark.parametrize("props, message", [
    ({"listeners": "localhost:9092"}, "is not NAME://host:port"),
    ({"listeners": "INTERNAL://:9092"}, "INTERNAL has no security protocol"),
    ({"listeners": "A://:9092", "listener.security.protocol.map": "A:TLS"}, "is not NAME:PROTOCOL"),
    ({"ssl.keystore.type": "JKS"}, "only PEM files"),
    ({"ssl.client.auth": "maybe"}, "expected none, requested or required"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms: GSSAPI"),
    ({"listener.name.sasl_ssl.plain.sasl.jaas.config":
      "org.apache.kafka.common.security.plain.PlainLoginModule required;"}, "lets nobody in"),
    ({"advertised.listeners": "OTHER://x:1"}, "OTHER is not in listeners"),
    ({"log.retention.hours": "a week"}, "invalid value for log.retention.hours"),
])
def test_bad_listener_and_retention_values(props, message):
    with pytest.raises(ConfigError, match=message):
        build_config(props)


def test_retention_ms_wins_over_hours():
    config = build_config({"log.retention.hours": "1", "log.retention.ms": "5000"})
    assert config.log.retention_ms == 5000
    config = build_config({"log.retention.hours": "1", "log.retention.minutes": "2"})
    assert config.log.retention_ms == 120_000
