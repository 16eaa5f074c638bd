"""Kafka framing: every message is ``INT32 size`` then ``size`` bytes.

``FrameDecoder`` is sans-I/O (h11 style): feed it bytes with ``receive_data`` (or receive straight
into ``get_buffer()`` and call ``advance``), then call ``next_frame`` until it returns ``NEED_DATA``.
The size is checked *before* any frame bytes are buffered, so a peer cannot make us allocate more
than ``max_frame_size``. Memory follows the bytes actually received, never what a size prefix
claims: the receive buffer starts small and grows while full receives keep coming (it shrinks back
once the connection goes quiet), and a large frame gets a buffer of its own that grows (doubling)
as its bytes arrive, so a 4-byte prefix announcing 100 MiB costs nothing until the bytes come.
That buffer is handed out without another copy; the broker patches offsets in it in place.
"""

from __future__ import annotations

import struct
from typing import Final

from protocol.errors import FrameTooLargeError


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
_SIZE = struct.Struct(">i")
_INITIAL_BUFFER = 8 * 1024  # what an idle connection holds
_MAX_BUFFER = 256 * 1024  # the receive buffer's size under load
# Frames at least this large get a buffer of their own (no copy out of the shared buffer).
_DEDICATED_FRAME_MIN = 64 * 1024


class FrameDecoder:
    """``preallocate``: give a large frame its whole buffer as soon as its size arrives (what
    Kafka's Java client does), instead of growing it as bytes arrive. For a client reading the
    answers of its broker, where growing costs copies and protects against little; a server
    reading untrusted peers keeps the default."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 preallocate: bool = False) -> None:
        self.max_frame_size = max_frame_size
        self._preallocate = preallocate
        self._buf = bytearray(_INITIAL_BUFFER)
        self._start = 0  # first unconsumed byte
        self._end = 0  # one past the last received byte
        self._frame: bytearray | None = None  # a large frame being filled in place (grows)
        self._frame_size = 0  # its final size
        self._frame_filled = 0
        self._last_receive = 0

    # -- input ---------------------------------------------------------------------------------

    def get_buffer(self) -> memoryview:
        """A writable view to receive the next bytes into; call ``advance(n)`` after.

        Release the view (``with`` or ``del``) before asking for the next one: the buffers may
        have to grow, which a live export forbids. Raises ``FrameTooLargeError`` when the
        buffer is full of a frame over the limit (only if ``next_frame`` was not called since).
        """
        buf, end = self._buf, self._end
        if self._frame is None and end != len(buf):  # the usual case
            if end:
                return memoryview(buf)[end:]
            # Empty (next_frame rewinds an emptied buffer to 0).
            if len(buf) > _INITIAL_BUFFER and self._last_receive < len(buf) // 4:
                # Quiet again: give the large receive buffer back.
                self._buf = buf = bytearray(_INITIAL_BUFFER)
                self._start = 0
            return memoryview(buf)
        if not self._filling_frame() and self._end == len(self._buf):
            # May move a partial large frame into a buffer of its own: check again below.
            self._compact()
        if self._filling_frame():
            frame = self._frame
            assert frame is not None
            if self._frame_filled == len(frame):
                # Grow with what actually arrived: double, never beyond the frame's size.
                frame.extend(bytes(min(self._frame_size, 2 * len(frame)) - len(frame)))
            return memoryview(frame)[self._frame_filled :]
        if (
            self._start == self._end
            and len(self._buf) > _INITIAL_BUFFER
            and self._last_receive < len(self._buf) // 4
        ):
            # Quiet again: give the large receive buffer back.
            self._buf = bytearray(_INITIAL_BUFFER)
            self._start = self._end = 0
        return memoryview(self._buf)[self._end :]

    def advance(self, n: int) -> None:
        self._last_receive = n
        if self._frame is not None and self._filling_frame():
            self._frame_filled += n
        else:
            self._end += n

    def receive_data(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            with self.get_buffer() as target:
                n = min(len(target), len(view))
                target[:n] = view[:n]
            self.advance(n)
            view = view[n:]

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        # A frame moved to its own buffer still counts its 4-byte size prefix.
        pending = 4 + self._frame_filled if self._frame is not None else 0
        return self._end - self._start + pending

    @property
    def capacity(self) -> int:
        """Bytes of buffer memory held (what the decoder costs)."""
        return len(self._buf) + (len(self._frame) if self._frame is not None else 0)

    @property
    def pending_frame_size(self) -> int:
        """Size of the frame whose prefix has arrived but not all its bytes; 0 if none."""
        if self._frame is not None:
            return self._frame_size if self._filling_frame() else 0
        available = self._end - self._start
        if available < 4:
            return 0
        (size,) = _SIZE.unpack_from(self._buf, self._start)
        return size if 0 < size and 4 + size > available else 0

    # -- output --------------------------------------------------------------------------------

    def next_frame(self) -> bytearray | _NeedData:
        """The next complete frame body (without its size prefix), or ``NEED_DATA``.

        Raises ``FrameTooLargeError`` (a ``CorruptFrameError``) for a negative size or one over
        ``max_frame_size``; the connection must then be closed.
        """
        if self._frame is not None:
            if self._filling_frame():
                return NEED_DATA
            frame, self._frame = self._frame, None
            return frame
        start, end = self._start, self._end
        if end - start < 4:
            return NEED_DATA
        size = _SIZE.unpack_from(self._buf, start)[0]
        if size < 0 or size > self.max_frame_size:
            raise FrameTooLargeError(f"frame size {size} outside [0, {self.max_frame_size}]")
        stop = start + 4 + size
        if stop <= end:
            frame = self._buf[start + 4 : stop]
            if stop == end:
                self._start = self._end = 0
            else:
                self._start = stop
            return frame
        if size >= _DEDICATED_FRAME_MIN or 4 + size > _MAX_BUFFER:
            self._start_dedicated_frame()
        return NEED_DATA

    # -- internals -----------------------------------------------------------------------------

    def _filling_frame(self) -> bool:
        return self._frame is not None and self._frame_filled < self._frame_size

    def _start_dedicated_frame(self) -> bool:
        """Move a partially received frame into a buffer of its own. False if not possible."""
        if self._frame is not None:  # the previous large frame has not been taken yet
            return False
        available = self._end - self._start
        if available < 4:
            return False
        (size,) = _SIZE.unpack_from(self._buf, self._start)
        if size < 0 or size > self.max_frame_size:
            raise FrameTooLargeError(f"frame size {size} outside [0, {self.max_frame_size}]")
        have = available - 4
        if have >= size:
            return False
        # Room for what arrived plus as much again (at least one receive buffer's worth).
        frame = bytearray(size if self._preallocate else min(size, max(2 * have, _MAX_BUFFER)))
        frame[:have] = self._buf[self._start + 4 : self._end]
        self._frame, self._frame_size, self._frame_filled = frame, size, have
        self._start = self._end = 0
        return True

    def _compact(self) -> None:
        if self._start:
            remaining = self._end - self._start
            self._buf[:remaining] = self._buf[self._start : self._end]
            self._start, self._end = 0, remaining
        if self._end == len(self._buf) and not self._start_dedicated_frame():
            if len(self._buf) < _MAX_BUFFER:
                self._buf.extend(bytes(len(self._buf)))  # busy: receive more per call
            else:
                # Full of complete frames nobody took yet, or of a small frame: make room.
                self._buf.extend(bytes(_MAX_BUFFER))


def encode_frame(body: bytes) -> bytes:
    return _SIZE.pack(len(body)) + body
