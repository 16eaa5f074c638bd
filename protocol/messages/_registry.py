"""The table of message schemas: (api_key, api_version) -> compiled request and response codecs.

Each module in this package declares its messages (``_declare.declare``), which calls ``register``
for every version at import; each codec is compiled once, on first use (compiling all ~500 at
import would cost every process start about a second). Decoded messages are construct ``Container``s
(attribute access, like a frozen record; they are never mutated by our code). To encode, pass a
dict or Container with every field.

The APIs of the broker's request path also have codecs generated from the same declarations
(``register_fast``, by ``_codegen``), which ``decode_request`` and ``encode_response`` use instead
for every caller; so do ``encode_response_parts`` and ``decode_response`` for the responses that
carry records (Fetch). The declared codec stays the specification (``decode_request_declared``,
``encode_response_declared``, ``decode_response_declared``), and tests hold the two to the same
values and bytes.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from typing import Any

from construct import Compiled, Construct, ConstructError, Container

from protocol.errors import CorruptFrameError

FastDecoder = Callable[[Any, int, int], Container]
FastEncoder = Callable[[Any, int], "bytes | None"]
PartsEncoder = Callable[[Any, int], list]


class Schema:
    """The request and response codecs (construct ``Compiled``) of one (api_key, version)."""

    __slots__ = ("api_key", "version", "_request", "_response", "fast_request", "fast_response",
                 "fast_response_parts", "fast_response_decoder")

    def __init__(self, api_key: int, version: int, request: Any, response: Any) -> None:
        self.api_key = api_key
        self.version = version
        self._request = request
        self._response = response
        # Generated codecs (``register_fast``): ``fast_request(frame, offset, version)`` decodes
        # an untrusted request as the declared codec does; ``fast_response(obj, version)`` encodes
        # a response to the same bytes, or returns None to leave it to the declared codec.
        self.fast_request: FastDecoder | None = None
        self.fast_response: FastEncoder | None = None
        # For responses carrying records: ``fast_response_parts(obj, version)`` encodes to the
        # same bytes as chunks, each records value a chunk as it is; ``fast_response_decoder``
        # decodes an untrusted response as the declared codec does, records as views.
        self.fast_response_parts: PartsEncoder | None = None
        self.fast_response_decoder: FastDecoder | None = None

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


def register_fast(
    api_key: int, version: int, *, decode_request: FastDecoder | None = None,
    encode_response: FastEncoder | None = None, encode_response_parts: PartsEncoder | None = None,
    decode_response: FastDecoder | None = None,
) -> None:
    """Give the registered (api_key, version) generated codecs, used by ``decode_request`` /
    ``encode_response`` / ``encode_response_parts`` / ``decode_response`` in place of the
    declared codec.

    A decoder must accept exactly what the declared codec accepts (for requests, the
    array-element budget below included), return an equal value and raise only
    ``CorruptFrameError``; an encoder must return the declared codec's bytes (or None: the
    declared codec encodes that value), the parts encoder as chunks whose join they are."""
    schema = _schema(int(api_key), version)
    if decode_request is not None:
        schema.fast_request = decode_request
    if encode_response is not None:
        schema.fast_response = encode_response
    if encode_response_parts is not None:
        schema.fast_response_parts = encode_response_parts
    if decode_response is not None:
        schema.fast_response_decoder = decode_response


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
    schema = SCHEMAS.get((api_key, version)) or _schema(api_key, version)
    if schema.fast_request is not None:
        return schema.fast_request(data, offset, version)
    return _parse_untrusted(schema.request, data, offset, budgeted=True)


def decode_request_declared(api_key: int, version: int, data, offset: int = 0) -> Container:
    """``decode_request`` with the declared codec, whether or not a generated one exists."""
    return _parse_untrusted(_schema(api_key, version).request, data, offset, budgeted=True)


def decode_response(api_key: int, version: int, data, offset: int = 0) -> Container:
    """Decode a response body (bytes after the header). Raises only CorruptFrameError on bad bytes.
    A records field (Fetch) is a ``memoryview`` into ``data``, not a copy."""
    schema = _schema(api_key, version)
    if schema.fast_response_decoder is not None:
        return schema.fast_response_decoder(data, offset, version)
    return _parse_untrusted(schema.response, data, offset)


def decode_response_declared(api_key: int, version: int, data, offset: int = 0) -> Container:
    """``decode_response`` with the declared codec, whether or not a generated one exists."""
    return _parse_untrusted(_schema(api_key, version).response, data, offset)


def encode_request(api_key: int, version: int, obj: Any) -> bytes:
    return _schema(api_key, version).request.build(obj)


def encode_response(api_key: int, version: int, obj: Any) -> bytes:
    schema = SCHEMAS.get((api_key, version)) or _schema(api_key, version)
    if schema.fast_response is not None:
        try:
            data = schema.fast_response(obj, version)
        except Exception:  # an invalid value: the declared codec raises what it always raised
            data = None
        if data is not None:
            return data
    return schema.response.build(obj)


def encode_response_parts(api_key: int, version: int, obj: Any) -> list:
    """``encode_response`` as chunks for one gather-write (``b"".join`` of them is the body):
    each non-empty records value (Fetch) is one chunk, as it is, never read: bytes, a
    memoryview, or a sized object the writer sends by other means (a FileSlice, with
    sendfile)."""
    schema = SCHEMAS.get((api_key, version)) or _schema(api_key, version)
    if schema.fast_response_parts is not None:
        try:
            return schema.fast_response_parts(obj, version)
        except Exception:  # an invalid value: the declared codec raises what it raises
            pass
    return [encode_response(api_key, version, obj)]


def encode_response_declared(api_key: int, version: int, obj: Any) -> bytes:
    """``encode_response`` with the declared codec, whether or not a generated one exists."""
    return _schema(api_key, version).response.build(obj)
