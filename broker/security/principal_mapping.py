"""``ssl.principal.mapping.rules``: Kafka's SslPrincipalMapper, from a certificate's subject to the
user name of an mTLS principal.

Rules (Kafka's syntax, tried in order; the first that applies decides):

- ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last slash (lower- or
  upper-case the result): applies when ``pattern`` (a regular expression) matches the whole
  subject (RFC 2253 form, ``CN=alice,OU=eng,O=Example``); the name is then ``replacement`` with
  ``$1``, ``$2``... replaced by the pattern's groups.
- ``DEFAULT``: the subject as it is.

``RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT`` makes ``CN=Alice,OU=Eng,O=Example`` the principal
``User:alice@eng``. A subject no rule applies to is refused (Kafka: NoMatchingRule), so the TLS
connection is closed. The default, ``DEFAULT``, keeps the whole subject.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# One rule and the separator after it (Kafka's RULE_PARSER, with / and \ escapable in both parts).
_RULE = re.compile(
    r"\s*(?:(?P<default>DEFAULT)"
    r"|RULE:(?P<pattern>(?:\\.|[^\\/])*)/(?P<replacement>(?:\\.|[^\\/])*)/(?P<case>[LU]?))"
    r"\s*(?:,|$)"
)
_GROUP = re.compile(r"\$(\d+)")


class NoMatchingRule(ConnectionError):
    """No rule of ssl.principal.mapping.rules applies to a certificate's subject: the connection
    is refused (closed, with one log line), as Kafka refuses it."""


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "", "L" or "U"

    def apply(self, subject: str) -> str | None:
        if self.pattern is None:
            return subject
        match = self.pattern.fullmatch(subject)
        if match is None:
            return None
        name = _GROUP.sub(lambda g: match.group(int(g.group(1))) or "", self.replacement)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


def parse_rules(text: str) -> tuple[Rule, ...]:
    """``RULE:.../.../[LU],DEFAULT`` -> rules; ValueError naming what cannot be read."""
    rules: list[Rule] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _RULE.match(text, position)
        if match is None or match.end() == position:
            raise ValueError(f"cannot read a rule at {text[position:position + 40]!r} "
                             "(expected RULE:pattern/replacement/[LU] or DEFAULT)")
        if match.group("default"):
            rules.append(Rule(None))
        else:
            pattern = match.group("pattern").replace("\\/", "/")
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"bad pattern {pattern!r}: {exc}") from None
            rules.append(Rule(compiled, match.group("replacement").replace("\\/", "/"),
                              match.group("case")))
        position = match.end()
    if not rules:
        raise ValueError("no rule (DEFAULT keeps the whole subject)")
    return tuple(rules)


DEFAULT_RULES: tuple[Rule, ...] = (Rule(None),)


def map_subject(subject: str, rules: tuple[Rule, ...] = DEFAULT_RULES) -> str:
    """The user name ``rules`` make of ``subject``; NoMatchingRule if none applies."""
    for rule in rules:
        name = rule.apply(subject)
        if name is not None:
            return name
    raise NoMatchingRule(f"no rule of ssl.principal.mapping.rules applies to {subject!r}")
