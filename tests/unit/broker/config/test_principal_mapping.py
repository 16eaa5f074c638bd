"""ssl.principal.mapping.rules: Kafka's RULE syntax and DEFAULT, as SslPrincipalMapper applies
them (issue 27 item 6)."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, build_config
from broker.config.principal_mapping import NoMatchingRule, map_subject, parse_rules
from broker.security.tls import certificate_principal

SUBJECT = "CN=Alice,OU=Eng,O=Example"


@pytest.mark.parametrize("rules, expected", [
    ("DEFAULT", SUBJECT),
    (r"RULE:^CN=(.*?),.*$/$1/,DEFAULT", "Alice"),
    (r"RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT", "alice@eng"),
    (r"RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U", "ALICE@ENG"),
    # The first rule that matches the whole subject decides; a partial match is no match.
    (r"RULE:^CN=Bob,.*$/bob/, RULE:^CN=(\w+)/$1/, RULE:^.*O=(.*)$/org-$1/", "org-Example"),
    (r"RULE:^CN=(.*?)\/x,.*$/$1/,DEFAULT", SUBJECT),  # an escaped slash in the pattern
])
def test_rules(rules, expected):
    assert map_subject(SUBJECT, parse_rules(rules)) == expected


def test_no_matching_rule_refuses_the_connection():
    with pytest.raises(NoMatchingRule):
        map_subject(SUBJECT, parse_rules(r"RULE:^CN=Bob,.*$/bob/"))
    assert issubclass(NoMatchingRule, ConnectionError)  # the server closes that connection


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*$/$1/", "RULE:abc", "SOMETHING", ""])
def test_bad_rules_are_a_config_error_naming_the_key(rules):
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules"):
        build_config({"ssl.principal.mapping.rules": rules})


def test_certificate_principal_applies_the_rules():
    cert = {"subject": ((("organizationName", "Example"),), (("organizationalUnitName", "Eng"),),
                        (("commonName", "Alice"),))}
    assert certificate_principal(cert) == f"User:{SUBJECT}"
    rules = build_config({"ssl.principal.mapping.rules":
                          r"RULE:^CN=(.*?),.*$/$1/L,DEFAULT"}).security.ssl_principal_mapping_rules
    assert certificate_principal(cert, rules) == "User:alice"
