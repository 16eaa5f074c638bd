"""A ``sasl.jaas.config`` value read as Kafka's JaasConfig reads it. Pure: text in, entries out.

Kafka tokenizes the value with ``java.io.StreamTokenizer`` (its syntax reset to what follows)
and reads
``LoginModule flag key=value ... ;``, repeated:

- words: runs of printable characters but ``; = / " '`` (blanks and control characters
  separate tokens; ``/`` starts a comment, as ``//`` and ``/* */`` do);
- quoted values: ``"..."`` or ``'...'``, ended by the same quote or the end of the line, with
  Java's escapes (``\\n \\t \\r \\b \\f \\a \\v``, octal ``\\ddd``, and ``\\x`` for any other x:
  ``\\\\`` is one backslash, ``\\"`` a quote);
- the flag is REQUIRED, REQUISITE, SUFFICIENT or OPTIONAL in any case;
- every entry ends with ``;``; Kafka's sasl.jaas.config holds exactly one.

Error messages name keys and modules, never a value (values are passwords).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FLAGS = ("REQUIRED", "REQUISITE", "SUFFICIENT", "OPTIONAL")


class JaasError(ValueError):
    """The value cannot be read; the message never holds a value of the config."""


@dataclass(frozen=True)
class LoginEntry:
    module: str
    flag: str  # upper case
    options: dict[str, str]


# Token kinds: ("word", text), ("quoted", text), ("char", c), ("eof", None)
_Token = tuple[str, str | None]

_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_ORDINARY = frozenset(";=")


def _is_word(c: str) -> bool:
    """Kafka's syntax: every character from 33 to 128 but ; = / and the quotes, 160-255, and
    (StreamTokenizer's rule) every character above 255."""
    o = ord(c)
    return (32 < o <= 128 and c not in ";=/\"'") or 160 <= o


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c <= " ":
            i += 1
            continue
        if c == "/":
            if text.startswith("/*", i):
                end = text.find("*/", i + 2)
                i = n if end < 0 else end + 2
                continue
            # "//" and a lone "/" (the comment character) both end the line
            while i < n and text[i] not in "\r\n":
                i += 1
            continue
        if _is_word(c):
            start = i
            while i < n and _is_word(text[i]):
                i += 1
            out.append(("word", text[start:i]))
            continue
        if c in "\"'":
            i, value = _quoted(text, i + 1, c)
            out.append(("quoted", value))
            continue
        out.append(("char", c))
        i += 1
    out.append(("eof", None))
    return out


def _quoted(text: str, i: int, quote: str) -> tuple[int, str]:
    """StreamTokenizer's quoted string from ``i`` (after the quote): ``(next index, value)``."""
    value: list[str] = []
    n = len(text)
    while i < n and text[i] != quote and text[i] not in "\r\n":
        c = text[i]
        i += 1
        if c == "\\" and i < n:
            c = text[i]
            i += 1
            if "0" <= c <= "7":
                digits = c
                limit = 3 if c <= "3" else 2
                while len(digits) < limit and i < n and "0" <= text[i] <= "7":
                    digits += text[i]
                    i += 1
                c = chr(int(digits, 8))
            else:
                c = _ESCAPES.get(c, c)
        value.append(c)
    if i < n and text[i] == quote:
        i += 1
    return i, "".join(value)


# Option names an error may show (another "key" may be a piece of a badly quoted password).
_KNOWN_KEYS = frozenset({"username", "password", "serviceName", "tokenauth", "unsecuredLoginStringClaim_sub"})


_CLASS_NAME = re.compile(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+")


def shown_module(module: str) -> str:
    """What an error may show of a login module: the class's own name when it is a qualified
    Java class name, else nothing of it (a misplaced password would be the first token)."""
    return module.rsplit(".", 1)[-1] if _CLASS_NAME.fullmatch(module) else "the login module"


def parse_jaas(text: str) -> list[LoginEntry]:
    """Every ``module flag options;`` entry of ``text``; JaasError as Kafka refuses it."""
    tokens = _tokens(text)
    entries: list[LoginEntry] = []
    position = 0

    def take() -> _Token:
        nonlocal position
        token = tokens[position]
        if token[0] != "eof":
            position += 1
        return token

    while tokens[position][0] != "eof":
        kind, module = take()
        if kind != "word" or module is None:
            raise JaasError("expected a login module name at the start of an entry")
        name = shown_module(module)
        kind, flag = take()
        if kind != "word" or flag is None:
            raise JaasError(f"login module control flag not specified for {name}")
        if flag.upper() not in FLAGS:
            raise JaasError(f"invalid login module control flag for {name} (one of "
                            "required, requisite, sufficient, optional, in any case)")
        options: dict[str, str] = {}
        while True:
            kind, key = take()
            if kind == "char" and key == ";":
                break
            if kind == "eof":
                raise JaasError(f"the entry of {name} does not end with ';'")
            if kind not in ("word", "quoted") or key is None:
                raise JaasError(f"expected key=value in the options of {name}")
            equals, value_token = take(), take()
            if equals != ("char", "=") or value_token[0] not in ("word", "quoted"):
                named = repr(key) if key in _KNOWN_KEYS else "an option"
                raise JaasError(f"value not specified for {named} in the options of "
                                f"{name} (quote values holding ; = / or blanks)")
            options[key] = value_token[1] or ""
        entries.append(LoginEntry(module, flag.upper(), options))
    return entries


def parse_one(text: str) -> LoginEntry:
    """The one entry of a ``sasl.jaas.config`` value (Kafka refuses none, or more than one)."""
    entries = parse_jaas(text)
    if len(entries) != 1:
        raise JaasError(f"sasl.jaas.config holds {len(entries)} login modules, it must hold 1")
    return entries[0]
