"""ssl.principal.mapping.rules replacements as Kafka's SslPrincipalMapper reads them (issue 36,
item 3): a back reference the pattern does not have is literal text, Java's replacement syntax
(``\\x``, ``$n`` greedy while a group exists, ``${name}``), replaceAll over the subject; what
Java refuses is refused at start instead of failing every connection."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, build_config
from broker.config.principal_mapping import map_subject, parse_rules

SUBJECT = "CN=Alice,OU=Eng,O=Example"


@pytest.mark.parametrize("rules, expected", [
    # The finding: $2 with one group crashed the broker (IndexError) at the first mTLS client.
    (r"RULE:^CN=(.*?),.*$/$2/L,DEFAULT", "$2"),
    (r"RULE:^CN=(.*?),.*$/$1-$2/", "Alice-$2"),
    (r"RULE:^CN=(.*?),.*$/$12/", "Alice2"),  # $12 with one group: $1 then "2"
    (r"RULE:^CN=(.*?),.*$/$1@$3x$4/", "Alice@$3x$4"),
    (r"RULE:^CN=(.*?),.*$/$01/", "Alice"),  # Java reads digits while they name a group: $01 = $1
    (r"RULE:^CN=(.*?),.*$/a\$b$1/", "a$bAlice"),  # \$ is a literal $
    (r"RULE:^CN=(?P<n>.*?),.*$/${n}!/U", "ALICE!"),
    (r"RULE:.*/X/", "XX"),  # Java's replaceAll: .* matches the subject and the empty end
])
def test_kafka_replacements(rules, expected):
    assert map_subject(SUBJECT, parse_rules(rules)) == expected


@pytest.mark.parametrize("rules", [
    r"RULE:^CN=.*$/$1/",  # no group at all: Java's "No group 1" at every connection
    r"RULE:^CN=(.*)$/x$/",  # a $ naming nothing
    r"RULE:^CN=(.*)$/$x/",
    r"RULE:^CN=(.*)$/${zz}/",
])
def test_replacements_java_refuses_are_refused_at_start(rules):
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules"):
        build_config({"ssl.principal.mapping.rules": rules})
