"""docs/configuration.md is generated from the broker's config tables and must match them; every
key the broker reads is documented there."""

from __future__ import annotations

from broker import config as broker_config
from broker.config.reference import TARGET, main, render_reference
from broker.config.security import SECURITY_KEYS
from broker.log.topic_config import TOPIC_CONFIGS


def test_generated_reference_is_up_to_date():
    assert TARGET.read_text(encoding="utf-8") == render_reference(), (
        "docs/configuration.md differs from broker/config/__init__.py: run python -m broker.config.reference"
    )
    assert main(["--check"]) == 0


def test_every_key_the_broker_reads_is_in_the_reference():
    text = render_reference()
    keys = [*broker_config._PROPERTIES, *broker_config.OTHER_KEYS, *TOPIC_CONFIGS,
            *broker_config.IGNORED_KAFKA_KEYS]
    for key in keys:
        assert f"`{key}`" in text, key
    # The security keys the parser accepts are all described (OTHER_KEYS is hand-written).
    documented = set(broker_config.OTHER_KEYS)
    assert SECURITY_KEYS <= documented, \
        SECURITY_KEYS - documented
    for prop in broker_config._PROPERTIES.values():
        assert prop.doc.endswith("."), prop


def test_every_documented_key_is_accepted_by_the_parser():
    """The reference names no key that build_config would refuse as unknown."""
    for key in [*broker_config._PROPERTIES, *broker_config.OTHER_KEYS]:
        if key.startswith("[") or key in ("listeners", "advertised.listeners"):
            continue
        assert (key in broker_config._PROPERTIES or broker_config.is_security_key(key)
                or key in broker_config._COARSE_UNITS
                or key == "listener.security.protocol.map"), key


def test_drift_is_detected(tmp_path, monkeypatch):
    import broker.config.reference as reference

    stale = tmp_path / "configuration.md"
    stale.write_text(render_reference().replace("`num.partitions` | `1`", "`num.partitions` | `3`"))
    monkeypatch.setattr(reference, "TARGET", stale)
    assert main(["--check"]) == 1
