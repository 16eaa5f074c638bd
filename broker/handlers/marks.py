"""How a function says which requests it handles: ``@handles(api_key, version...)``.

Marking registers nothing: the composition root builds the dispatcher's table from the handler
modules it lists (``broker.network.dispatcher.handler_table``), which reads the marks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protocol.api_keys import ApiKey
from protocol.messages.api_versions import SERVED

Handler = Callable[..., Any]
MARK = "__handles__"  # the attribute holding a handler's [(api_key, version, raw)]


def handles(api_key: ApiKey, *versions: int, raw: bool = False) -> Callable[[Handler], Handler]:
    """Mark ``fn`` as the handler of ``api_key`` at ``versions`` (``handler_table`` collects it);
    no versions: every version the served table (``protocol.messages.api_versions``) lists."""
    if not versions:
        served = SERVED[api_key].versions
        versions = tuple(range(served.min, served.max + 1))

    def mark(fn: Handler) -> Handler:
        marks = getattr(fn, MARK, [])
        marks.extend((int(api_key), version, raw) for version in versions)
        setattr(fn, MARK, marks)
        return fn

    return mark
