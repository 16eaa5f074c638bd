"""Configuration validation: each rule the seeds quote, defaults, and unknown keys."""

from __future__ import annotations

import pytest

from client.config import (
    INT32_MAX,
    MSG_ACKS,
    MSG_MAX_IN_FLIGHT,
    MSG_RETRIES,
    MSG_TRANSACTIONAL_ID,
    admin_config,
    consumer_config,
    parse_bootstrap_servers,
    producer_config,
)
from client.errors import ConfigError

BOOT = {"bootstrap.servers": "127.0.0.1:9092"}


def test_producer_defaults_are_those_idempotence_needs():
    cfg = producer_config(BOOT)
    assert cfg["enable.idempotence"] is True
    assert cfg["acks"] == -1
    assert cfg["retries"] == INT32_MAX
    assert cfg["max.in.flight.requests.per.connection"] == 5
    assert cfg["transactional.id"] is None
    assert cfg["bootstrap.servers"] == (("127.0.0.1", 9092),)


@pytest.mark.parametrize("acks", ["1", 1, "0", 0])
def test_explicit_idempotence_needs_acks_all(acks):
    with pytest.raises(ConfigError) as info:
        producer_config({**BOOT, "enable.idempotence": True, "acks": acks})
    assert str(info.value) == MSG_ACKS
    assert "Must set acks to all in order to use the idempotent producer" in MSG_ACKS


@pytest.mark.parametrize("acks", ["all", "-1", -1])
def test_acks_all_spellings(acks):
    assert producer_config({**BOOT, "enable.idempotence": "true", "acks": acks})["acks"] == -1


def test_explicit_idempotence_needs_nonzero_retries():
    with pytest.raises(
        ConfigError, match="^Must set retries to non-zero when using the idempotent producer.$"
    ):
        producer_config({**BOOT, "enable.idempotence": True, "retries": 0})
    assert MSG_RETRIES.startswith("Must set retries")


def test_explicit_idempotence_needs_at_most_five_in_flight():
    with pytest.raises(ConfigError) as info:
        producer_config(
            {**BOOT, "enable.idempotence": True, "max.in.flight.requests.per.connection": 6}
        )
    assert str(info.value) == MSG_MAX_IN_FLIGHT
    assert "at most 5" in MSG_MAX_IN_FLIGHT
    cfg = producer_config(
        {**BOOT, "enable.idempotence": True, "max.in.flight.requests.per.connection": 5}
    )
    assert cfg["max.in.flight.requests.per.connection"] == 5


def test_transactional_id_requires_idempotence():
    with pytest.raises(ConfigError) as info:
        producer_config({**BOOT, "transactional.id": "t1", "enable.idempotence": False})
    assert (
        str(info.value)
        == MSG_TRANSACTIONAL_ID
        == ("Cannot set a transactional.id without also enabling idempotence.")
    )


def test_transactional_id_implies_idempotence_and_its_rules():
    cfg = producer_config({**BOOT, "transactional.id": "t1"})
    assert cfg["enable.idempotence"] is True
    with pytest.raises(ConfigError, match="Must set acks to all"):
        producer_config({**BOOT, "transactional.id": "t1", "acks": 1})
    with pytest.raises(ConfigError, match="Must set retries"):
        producer_config({**BOOT, "transactional.id": "t1", "retries": "0"})


def test_unset_idempotence_is_turned_off_by_a_conflicting_setting():
    # Kafka 3.x: enable.idempotence left unset + acks=1 -> a plain producer, no error.
    assert producer_config({**BOOT, "acks": "1"})["enable.idempotence"] is False
    assert producer_config({**BOOT, "retries": 0})["enable.idempotence"] is False
    cfg = producer_config({**BOOT, "max.in.flight.requests.per.connection": 10})
    assert cfg["enable.idempotence"] is False


def test_non_idempotent_producer_may_use_any_acks():
    cfg = producer_config({**BOOT, "enable.idempotence": False, "acks": 0, "retries": 0})
    assert (cfg["acks"], cfg["retries"], cfg["enable.idempotence"]) == (0, 0, False)


def test_unknown_key_gets_a_did_you_mean_hint():
    with pytest.raises(ConfigError) as info:
        producer_config({**BOOT, "lingr.ms": 5})
    assert "'lingr.ms'" in str(info.value)
    assert "did you mean 'linger.ms'?" in str(info.value)
    with pytest.raises(ConfigError, match="did you mean 'enable.idempotence'"):
        producer_config({**BOOT, "enable.idempotency": True})


def test_unknown_key_without_a_close_match():
    with pytest.raises(ConfigError) as info:
        producer_config({**BOOT, "zzz": 1})
    assert "did you mean" not in str(info.value)


def test_key_of_another_role_is_named():
    with pytest.raises(ConfigError, match="'group.id' is a consumer setting, not a producer"):
        producer_config({**BOOT, "group.id": "g"})
    with pytest.raises(ConfigError, match="'acks' is a producer setting, not a consumer"):
        consumer_config({**BOOT, "acks": "all"})


def test_bad_values_name_the_key():
    with pytest.raises(ConfigError, match="Invalid value 'x' for configuration linger.ms"):
        producer_config({**BOOT, "linger.ms": "x"})
    with pytest.raises(
        ConfigError, match="Invalid value 'maybe' for configuration enable.idempotence"
    ):
        producer_config({**BOOT, "enable.idempotence": "maybe"})
    with pytest.raises(ConfigError, match="isolation.level"):
        consumer_config({**BOOT, "isolation.level": "serializable"})
    with pytest.raises(ConfigError, match="compression.type"):
        producer_config({**BOOT, "compression.type": "brotli"})


def test_bootstrap_servers_required_and_parsed():
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        producer_config({})
    assert parse_bootstrap_servers("a:1, b:2") == (("a", 1), ("b", 2))
    assert parse_bootstrap_servers(["a:1"]) == (("a", 1),)
    with pytest.raises(ValueError):
        parse_bootstrap_servers("nohost")
    with pytest.raises(ValueError):
        parse_bootstrap_servers("h:99999")


def test_delivery_timeout_covers_linger_and_request_timeout():
    with pytest.raises(ConfigError, match="delivery.timeout.ms"):
        producer_config({**BOOT, "delivery.timeout.ms": 1000, "request.timeout.ms": 1000})


def test_consumer_defaults_read_committed():
    cfg = consumer_config({**BOOT, "group.id": "g"})
    assert cfg["isolation.level"] == "read_committed"
    assert cfg["enable.auto.commit"] is True
    assert cfg["auto.offset.reset"] == "latest"


def test_consumer_without_group_cannot_auto_commit():
    assert consumer_config(BOOT)["enable.auto.commit"] is False
    with pytest.raises(ConfigError, match="enable.auto.commit cannot be set to true"):
        consumer_config({**BOOT, "enable.auto.commit": True})


def test_consumer_heartbeat_below_session_timeout():
    with pytest.raises(ConfigError, match="heartbeat.interval.ms"):
        consumer_config({**BOOT, "session.timeout.ms": 3000, "heartbeat.interval.ms": 3000})


def test_admin_accepts_common_keys_only():
    assert admin_config({**BOOT, "client.id": "x"})["client.id"] == "x"
    with pytest.raises(ConfigError, match="producer setting"):
        admin_config({**BOOT, "linger.ms": 1})


def test_config_is_read_only_mapping():
    cfg = producer_config(BOOT)
    assert "linger.ms" in cfg
    assert cfg.explicit == frozenset({"bootstrap.servers"})
    with pytest.raises(TypeError):
        cfg["linger.ms"] = 3  # type: ignore[index]


def test_librdkafka_names_of_the_same_settings_are_accepted():
    cfg = producer_config(
        {
            "metadata.broker.list": "127.0.0.1:9092",
            "queue.buffering.max.ms": 7,
            "message.timeout.ms": 60_000,
            "compression.codec": "gzip",
            "request.required.acks": "all",
        }
    )
    assert cfg["bootstrap.servers"] == (("127.0.0.1", 9092),)
    assert cfg["linger.ms"] == 7 and cfg["delivery.timeout.ms"] == 60_000
    assert cfg["compression.type"] == "gzip" and cfg["acks"] == -1
    consumer = consumer_config({**BOOT, "fetch.wait.max.ms": 100, "auto.offset.reset": "smallest"})
    assert consumer["fetch.max.wait.ms"] == 100 and consumer["auto.offset.reset"] == "earliest"
    assert (
        consumer_config({**BOOT, "auto.offset.reset": "largest"})["auto.offset.reset"] == "latest"
    )


def test_librdkafka_settings_without_an_equal_are_refused_naming_one():
    with pytest.raises(ConfigError, match=r"queue.buffering.max.kbytes.*buffer.memory"):
        producer_config({**BOOT, "queue.buffering.max.kbytes": 1024})
    with pytest.raises(ConfigError, match=r"batch.num.messages.*batch.size"):
        producer_config({**BOOT, "batch.num.messages": 100})
    with pytest.raises(ConfigError, match=r"enable.partition.eof.*end_offsets"):
        consumer_config({**BOOT, "enable.partition.eof": True})
    with pytest.raises(ConfigError, match="same setting"):
        producer_config({**BOOT, "linger.ms": 1, "queue.buffering.max.ms": 2})


def test_serializers_are_callables():
    cfg = producer_config({**BOOT, "value.serializer": str.encode})
    assert cfg["value.serializer"] is str.encode and cfg["key.serializer"] is None
    with pytest.raises(ConfigError, match="value.serializer.*callable"):
        producer_config({**BOOT, "value.serializer": "json"})


# -- a Java client's properties (issue 27 item 5) ---------------------------------------------------


def test_java_jaas_lines_give_the_user_and_password():
    from client.config import admin_config

    scram = admin_config({
        "bootstrap.servers": "h:1", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                            'username="bob" password="bob-secret";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
        "ssl.keystore.type": "pem", "ssl.keystore.location": "/client.pem",
        "ssl.keystore.password": "k", "ssl.truststore.password": "ignored",
    })
    assert (scram["sasl.username"], scram["sasl.password"]) == ("bob", "bob-secret")
    assert scram["ssl.ca.location"] == "/ca.pem"
    assert scram["ssl.certificate.location"] == "/client.pem"
    assert scram["ssl.key.password"] == "k"
    plain = admin_config({
        "bootstrap.servers": "h:1",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required\n"
                            '  username=alice password="quote\\"d";',
    })
    assert (plain["sasl.username"], plain["sasl.password"]) == ("alice", 'quote"d')


@pytest.mark.parametrize("conf, needle", [
    ({"ssl.truststore.type": "JKS"}, "ssl.truststore.type=JKS (a Java client setting)"),
    ({"ssl.keystore.type": "PKCS12"}, "ssl.keystore.type=... (a Java client setting)"),
    ({"sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                          "required;"}, "sasl.jaas.config=OAuthBearerLoginModule (a Java client"),
    ({"sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                          'username="a";'}, "needs username"),
    ({"ssl.keystore.key": "-----BEGIN PRIVATE KEY-----"}, "ssl.keystore.key=... (a Java"),
    ({"sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                          'username="a" password="b";', "sasl.username": "c"}, "disagree"),
])
def test_what_a_java_file_asks_and_cannot_be_honoured_is_named(conf, needle):
    from client.config import admin_config

    with pytest.raises(ConfigError) as raised:
        admin_config({"bootstrap.servers": "h:1", **conf})
    assert needle in str(raised.value)
    assert "librdkafka" not in str(raised.value) and "BEGIN" not in str(raised.value)
