"""Trusted constructors: the one place where the request path builds NamedTuples its own way.

A NamedTuple's constructor (``cls(a, b, c)``) runs a generated Python function, a frame per
object; ``tuple.__new__(cls, values)`` builds the same tuple in C without it. On the request path
a few dozen of these are built per transaction (request headers, batch headers, the Produce
request's topics and partitions, a transaction's transitions, the producer state's batch
metadata, the records a consumer decodes), so the bypass was measured worth keeping (the history
is in bench/README.md, "Instruction counts and call traces"). It is also unchecked: a value too
few or too many shifts every later field without an error. So:

- ``trusted(cls)`` is the only way to build one: ``new_header = trusted(BatchHeader)`` at module
  level, then ``new_header((v1, v2, ...))`` with the values in ``cls._fields``' order;
- ``tests/unit/protocol/test_trusted.py`` reads every call of such a constructor in broker/,
  protocol/ and client/ and checks that it passes a tuple literal with exactly as many values as
  the class has fields (the few that pass a computed tuple are listed there with their own check),
  and that ``tuple.__new__`` appears nowhere else;
- use it only for values our own code produced; anything decoded from the wire goes through the
  codecs' checks first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")


def trusted(cls: type[T]) -> Callable[[Iterable[Any]], T]:
    """A constructor of the NamedTuple ``cls`` taking all its fields as one tuple, in order."""
    if not (issubclass(cls, tuple) and hasattr(cls, "_fields")):
        raise TypeError(f"trusted() builds NamedTuples, not {cls.__name__}")
    return partial(tuple.__new__, cls)
