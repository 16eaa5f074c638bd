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
from dataclasses import dataclass, field

from protocol.text import clip

# One rule and the separator after it (Kafka's RULE_PARSER, with / and \ escapable in both parts).
_RULE = re.compile(
    r"\s*(?:(?P<default>DEFAULT)"
    r"|RULE:(?P<pattern>(?:\\.|[^\\/])*)/(?P<replacement>(?:\\.|[^\\/])*)/(?P<case>[LU]?))"
    r"\s*(?:,|$)"
)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ConnectionError):
    """No rule of ssl.principal.mapping.rules applies to a certificate's subject: the connection
    is refused (closed, with one log line), as Kafka refuses it."""


def _literal_back_references(replacement: str, groups: int) -> str:
    """Kafka's treatment of a back reference the pattern does not have: ``$N`` with N above the
    group count is cut digit by digit from the right while it is 10 or more (``$12`` with one
    group is ``$1`` then ``2``); if it is still above the count, its ``$`` is escaped, so the
    text stays literal (``$2`` with one group is the two characters ``$2``). With no group at
    all nothing is escaped (Java's replacement then has no group to refer to: see ``_parts``).
    One difference: Kafka inserts its escapes at the positions of the original text, so a
    second such reference in one replacement gets its backslash one character early and the
    rule fails every connection it matches; here each one is literal."""
    if groups == 0:
        return replacement

    def escape(match: re.Match[str]) -> str:
        digits = match.group(1)
        index = int(digits)
        while index > groups and index >= 10:
            index //= 10
        literal = not digits.startswith("0") and index > groups
        return "\\" + match.group(0) if literal else match.group(0)

    return _BACK_REFERENCE.sub(escape, replacement)


def _parts(replacement: str, pattern: re.Pattern[str]) -> tuple[str | int, ...]:
    """A replacement read as Java's ``Matcher`` reads one: ``\\x`` is the character x, ``$n``
    the group n (as many digits as name a group), ``${name}`` a named group; literal text as
    str, groups as int. ValueError for what Java refuses (Kafka would fail every connection the
    rule matches; refused at start here)."""
    parts: list[str | int] = []
    text: list[str] = []
    i, n, groups = 0, len(replacement), pattern.groups
    while i < n:
        c = replacement[i]
        if c == "\\":
            if i + 1 == n:
                raise ValueError(f"replacement {replacement!r}: a \\ at the end escapes nothing")
            text.append(replacement[i + 1])
            i += 2
            continue
        if c != "$":
            text.append(c)
            i += 1
            continue
        i += 1
        if i == n:
            raise ValueError(f"replacement {replacement!r}: a $ at the end names no group")
        if replacement[i] == "{":
            close = replacement.find("}", i)
            name = replacement[i + 1:close] if close > 0 else ""
            if not name or name not in pattern.groupindex:
                raise ValueError(f"replacement {replacement!r}: no group named {name!r}")
            number = pattern.groupindex[name]
            i = close + 1
        else:
            if not replacement[i].isdigit() or not replacement[i].isascii():
                raise ValueError(f"replacement {replacement!r}: $ must be followed by a group "
                                 "number or {name} (\\$ for a literal $)")
            number = int(replacement[i])
            i += 1
            while i < n and replacement[i].isascii() and replacement[i].isdigit():
                longer = number * 10 + int(replacement[i])
                if longer > groups:
                    break
                number = longer
                i += 1
            if number > groups:
                raise ValueError(f"replacement {replacement!r}: the pattern has no group "
                                 f"{number}")
        if text:
            parts.append("".join(text))
            text = []
        parts.append(number)
    if text:
        parts.append("".join(text))
    return tuple(parts)


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "", "L" or "U"
    parts: tuple[str | int, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.pattern is not None:
            escaped = _literal_back_references(self.replacement, self.pattern.groups)
            object.__setattr__(self, "parts", _parts(escaped, self.pattern))

    def apply(self, subject: str) -> str | None:
        """Kafka's SslPrincipalMapper rule: when the pattern matches the whole subject, the
        subject with every match of the pattern replaced (Java's replaceAll: ``.*`` matches
        twice, the text and the empty end), lower- or upper-cased."""
        if self.pattern is None:
            return subject
        if self.pattern.fullmatch(subject) is None:
            return None
        parts = self.parts

        def expand(match: re.Match[str]) -> str:
            return "".join(p if isinstance(p, str) else (match.group(p) or "") for p in parts)

        name = self.pattern.sub(expand, subject)
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
            replacement = match.group("replacement").replace("\\/", "/")
            try:
                rules.append(Rule(compiled, replacement, match.group("case")))
            except ValueError as exc:
                raise ValueError(f"bad rule {clip(match.group(0).strip())!r}: {exc}") from None
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
    raise NoMatchingRule(f"no rule of ssl.principal.mapping.rules applies to {clip(subject)!r}")
