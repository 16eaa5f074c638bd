"""Request and response headers.

    Request header v1:  api_key INT16, api_version INT16, correlation_id INT32, client_id NULLABLE_STRING
    Request header v2:  v1 + TAGGED_FIELDS                      (flexible versions)
    Response header v0: correlation_id INT32
    Response header v1: v0 + TAGGED_FIELDS                      (flexible versions; never ApiVersions)

The version of the header follows from (api_key, api_version): see ``protocol.api_keys``.
"""

from __future__ import annotations

import io
import struct
from typing import NamedTuple

from protocol.api_keys import is_flexible, request_header_version, response_header_version
from protocol.errors import CorruptFrameError
from protocol.primitives import read_tagged_fields
from protocol.trusted import trusted

_FIXED = struct.Struct(">hhi")
_CORRELATION = struct.Struct(">i")
_I16 = struct.Struct(">h")
_FIXED_AND_LENGTH = struct.Struct(">hhih")  # the fixed fields, then client_id's length
_HEAD_V0 = struct.Struct(">ii")  # size prefix, correlation_id
_HEAD_V1 = struct.Struct(">iiB")  # size prefix, correlation_id, no tagged fields


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


_new_request_header = trusted(RequestHeader)


def parse_request_header_untrusted(frame) -> tuple[RequestHeader, int]:
    """Parse the header at the start of a request frame: ``(header, body_offset)``.

    Unknown api keys are returned as they are (the caller decides to close the connection).
    """
    try:
        api_key, api_version, correlation_id, n = _FIXED_AND_LENGTH.unpack_from(frame, 0)
    except struct.error:
        raise CorruptFrameError("request shorter than its header") from None
    # client_id is short and almost always present: parse it without a stream object.
    pos = _FIXED_AND_LENGTH.size
    if n >= 0:
        if pos + n > len(frame):
            raise CorruptFrameError(f"bad client_id length {n}")
        try:
            client_id: str | None = str(frame[pos : pos + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptFrameError("client_id is not UTF-8") from exc
        pos += n
    elif n == -1:
        client_id = None
    else:
        raise CorruptFrameError(f"bad client_id length {n}")
    if is_flexible(api_key, api_version):  # request header v2
        pos = _after_tagged_fields(frame, pos)
    return _new_request_header((api_key, api_version, correlation_id, client_id)), pos


def _after_tagged_fields(frame, pos: int) -> int:
    """The position after the tagged-field section at ``pos`` of a header."""
    if pos < len(frame) and frame[pos] == 0:  # none: the usual case, without copying the frame
        return pos + 1
    stream = io.BytesIO(frame)
    stream.seek(pos)
    read_tagged_fields(stream)
    return stream.tell()


def encode_request_header(header: RequestHeader) -> bytes:
    client_id = None if header.client_id is None else header.client_id.encode("utf-8")
    parts = [_FIXED.pack(header.api_key, header.api_version, header.correlation_id)]
    parts.append(b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id)) + client_id)
    if request_header_version(header.api_key, header.api_version) >= 2:
        parts.append(b"\x00")
    return b"".join(parts)


def encode_response_header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    head = _CORRELATION.pack(correlation_id)
    if response_header_version(api_key, api_version) >= 1:
        head += b"\x00"
    return head


def encode_response_head(api_key: int, api_version: int, correlation_id: int,
                         body_size: int) -> bytes:
    """The size prefix and the response header of a response whose body has ``body_size``
    bytes: what goes before the body on the wire (``encode_response_header`` with the frame's
    size in front, in one pack)."""
    if response_header_version(api_key, api_version):  # v1: an empty tagged-field section
        return _HEAD_V1.pack(body_size + 5, correlation_id, 0)
    return _HEAD_V0.pack(body_size + 4, correlation_id)


def parse_response_header_untrusted(frame, api_key: int, api_version: int) -> tuple[int, int]:
    """``(correlation_id, body_offset)`` of a response to (api_key, api_version)."""
    if len(frame) < 4:
        raise CorruptFrameError("response shorter than its header")
    (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
    pos = 4
    if response_header_version(api_key, api_version) >= 1:
        pos = _after_tagged_fields(frame, pos)
    return correlation_id, pos
