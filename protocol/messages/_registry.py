"""The table of message schemas: (api_key, api_version) -> compiled request and response Structs.

Each module in this package declares its Structs with construct and calls ``register`` once at
import; the Structs are compiled there, once. Decoded messages are construct ``Container``s
(attribute access, like a frozen record; they are never mutated by our code). To encode, pass a
dict or Container with every field.
"""

from __future__ import annotations

import io
import struct
from typing import Any, NamedTuple

from construct import Construct, ConstructError, Container

from protocol.errors import CorruptFrameError


class Schema(NamedTuple):
    api_key: int
    version: int
    request: Any  # construct Compiled
    response: Any


SCHEMAS: dict[tuple[int, int], Schema] = {}

_DECODE_ERRORS = (
    ConstructError,
    struct.error,
    UnicodeDecodeError,
    ValueError,
    OverflowError,
    IndexError,
    KeyError,
    TypeError,
)


def register(api_key: int, version: int, request: Construct, response: Construct) -> Schema:
    schema = Schema(int(api_key), version, request.compile(), response.compile())
    SCHEMAS[(int(api_key), version)] = schema
    return schema


# The most array elements one request may hold, all arrays together: decoding costs a few
# microseconds per element, so this bounds the work (and memory) one request can cause (a
# Metadata request naming 2 million topics fits in 4 MB). Kafka clients stay far below it.
MAX_REQUEST_ARRAY_ELEMENTS = 50_000


class _BudgetedStream(io.BytesIO):
    """A stream that ``read_any_array_count`` charges for every array element it announces."""

    elements_left = MAX_REQUEST_ARRAY_ELEMENTS


def _parse_untrusted(compiled: Any, data, offset: int, budgeted: bool = False) -> Container:
    stream = _BudgetedStream(data) if budgeted else io.BytesIO(data)
    stream.seek(offset)
    try:
        return compiled.parse_stream(stream)
    except CorruptFrameError:
        raise
    except _DECODE_ERRORS as exc:
        raise CorruptFrameError(f"undecodable message: {exc}") from exc


def _schema(api_key: int, version: int) -> Schema:
    try:
        return SCHEMAS[(api_key, version)]
    except KeyError:
        raise LookupError(f"no schema for api_key {api_key} version {version}") from None


def decode_request(api_key: int, version: int, data, offset: int = 0) -> Container:
    """Decode a request body (bytes after the header). Raises only CorruptFrameError on bad bytes,
    also for more than ``MAX_REQUEST_ARRAY_ELEMENTS`` array elements in all."""
    return _parse_untrusted(_schema(api_key, version).request, data, offset, budgeted=True)


def decode_response(api_key: int, version: int, data, offset: int = 0) -> Container:
    """Decode a response body (bytes after the header). Raises only CorruptFrameError on bad bytes."""
    return _parse_untrusted(_schema(api_key, version).response, data, offset)


def encode_request(api_key: int, version: int, obj: Any) -> bytes:
    return _schema(api_key, version).request.build(obj)


def encode_response(api_key: int, version: int, obj: Any) -> bytes:
    return _schema(api_key, version).response.build(obj)
