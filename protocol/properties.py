"""Java ``.properties`` text (Kafka's server.properties and client config files), parsed as
``java.util.Properties.load`` reads it. Pure: text in, dict out."""

from __future__ import annotations

import re


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Parse the text of a Java ``.properties`` file, as ``java.util.Properties.load`` does.

    Lines whose first non-blank character is ``#`` or ``!`` are comments (there are no inline
    comments: ``a=1 # x`` sets ``a`` to ``1 # x``). The key ends at the first unescaped ``=``,
    ``:`` or blank; blanks and one ``=`` or ``:`` after it are skipped. A line ending in an odd
    number of backslashes continues on the next line (whose leading blanks are dropped). Escapes:
    ``\\t \\n \\r \\f \\uXXXX``, and a backslash before any other character stands for that character.
    """
    props: dict[str, str] = {}
    # Java ends lines at \n, \r and \r\n only (str.splitlines also splits at \x1c-\x1e, \x85,
    # \u2028 and \u2029: a value holding one became two keys).
    lines = _LINE_END.split(text)
    number = 0
    while number < len(lines):
        start = number + 1
        line = lines[number].lstrip(" \t\f")
        number += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if number < len(lines):
                line += lines[number].lstrip(" \t\f")
                number += 1
            else:
                break
        key, value = _split_key_value(line)
        try:
            props[_unescape(key)] = _unescape(value)
        except ValueError as exc:
            raise ValueError(f"{source}:{start}: {exc}") from None
    return props


_LINE_END = re.compile(r"\r\n|\r|\n")


def _continues(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line) and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return line[:i], rest


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1 : i + 2]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"malformed \\uXXXX escape {text[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)
