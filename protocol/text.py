"""Client text inside the broker's own text: error messages in answers and lines of the log.

A client chooses the names it sends (topics, groups, users, mechanisms) up to the largest string
its request can carry (32,767 bytes, more in compact strings). Echoed whole, such a name makes an
error message too long for the answer's string field (the answer cannot be encoded) or a log line
as long as the client likes. Every message that repeats client text passes it through ``clip``
(answers) or ``for_log`` (log lines): the text kept is bounded, the rest is counted.
"""

from __future__ import annotations

# Characters of client text one message keeps: a real topic name (at most 249), a user name, a
# mechanism name all fit; an error message with a few of them stays far below 32,767 bytes.
CLIP = 256


def clip(text: object, limit: int = CLIP) -> str:
    """``text`` (as str) cut to ``limit`` characters, with how much was left out."""
    s = text if isinstance(text, str) else str(text)
    if len(s) <= limit:
        return s
    return f"{s[:limit]}...({len(s) - limit} more characters)"


def for_log(text: object, limit: int = CLIP) -> str:
    """``text`` for a log line: clipped, quoted, every non-printable character escaped (a client
    cannot start a line of its own, move the cursor or colour the terminal)."""
    s = text if isinstance(text, str) else str(text)
    cut = len(s) - limit if len(s) > limit else 0
    quoted = repr(s[:limit] if cut else s)
    return f"{quoted}...({cut} more characters)" if cut else quoted


# The most bytes an error message may take in an answer: Kafka's strings (non-compact) have an
# int16 length. Kept well below it so that a message with a few clipped names always fits.
MAX_MESSAGE_BYTES = 4096


def clip_message(message: str | None) -> str | None:
    """An error message that fits any answer's string field (the safety net below ``clip``)."""
    if message is None or len(message) <= MAX_MESSAGE_BYTES // 4:
        return message
    data = message.encode("utf-8")
    if len(data) <= MAX_MESSAGE_BYTES:
        return message
    kept = data[: MAX_MESSAGE_BYTES - 64].decode("utf-8", "ignore")
    return f"{kept}...({len(data) - len(kept.encode())} more bytes)"
