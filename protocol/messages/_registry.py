"""The table of message schemas: (api_key, api_version) -> compiled request and response codecs.

Each module in this package declares its messages (``_declare.declare``), which calls ``register``
for every version at import; each codec is compiled once, on first use (compiling all ~500 at
import would cost every process start about a second). Decoded messages are construct ``Container``s
(attribute access, like a frozen record; they are never mutated by our code). To encode, pass a
dict or Container with every field.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from construct import Compiled, Construct, ConstructError, Container

from protocol.errors import CorruptFrameError


class Schema:
    """The request and response codecs (construct ``Compiled``) of one (api_key, version)."""

    __slots__ = ("api_key", "version", "_request", "_response")

    def __init__(self, api_key: int, version: int, request: Any, response: Any) -> None:
        self.api_key = api_key
        self.version = version
        self._request = request
        self._response = response

    @property
    def request(self) -> Any:
        if not isinstance(self._request, Compiled):
            self._request = _compile(self._request)
        return self._request

    @property
    def response(self) -> Any:
        if not isinstance(self._response, Compiled):
            self._response = _compile(self._response)
        return self._response


def _compile(con: Any) -> Any:
    """A construct, or a function returning one, compiled."""
    if not isinstance(con, Construct):
        con = con()
    return con.compile()


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


def register(api_key: int, version: int, request: Any, response: Any) -> Schema:
    """Register the codecs of (api_key, version): constructs, or functions returning them."""
    if (int(api_key), version) in SCHEMAS:
        raise ValueError(f"two schemas for api_key {api_key} version {version}")
    schema = Schema(int(api_key), version, request, response)
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
