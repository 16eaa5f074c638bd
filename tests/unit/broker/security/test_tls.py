"""The principal of a client certificate: Kafka's default, ``User:`` + the RFC 2253 subject."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, SecurityConfig
from broker.security.tls import certificate_principal, server_context


def test_subject_in_rfc_2253_order_with_escapes():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Example, Inc."),),
                        (("organizationalUnitName", "eng"),), (("commonName", "alice"),))}
    assert certificate_principal(cert) == "User:CN=alice,OU=eng,O=Example\\, Inc.,C=US"
    assert certificate_principal(None) is None
    assert certificate_principal({}) is None


def test_unusable_tls_settings_are_one_line_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="ssl.keystore.location is not set"):
        server_context(SecurityConfig())
    (tmp_path / "bad.pem").write_text("not a key")
    with pytest.raises(ConfigError, match="cannot load a key and certificate"):
        server_context(SecurityConfig(ssl_keystore_location=tmp_path / "bad.pem"))
