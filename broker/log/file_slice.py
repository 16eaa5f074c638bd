"""Zero-copy Fetch: record bytes sent from the segment file with ``os.sendfile``.

A ``FileSlice`` stands for ``length`` bytes of a segment file at ``position``, in place of the
bytes themselves, inside a reply's chunk list (the Fetch codec only needs its ``len``). It holds
its own duplicate of the segment's descriptor, so the bytes stay readable however long the send
takes: retention deleting the segment, the cleaner replacing it or the partition being deleted
close the segment's descriptor and unlink its name, never the open file (the only truncation of
written data happens at start, in recovery). Only the plain socket of the server sends them
(``send_file_slices``); the handler makes them only on connections that said so
(``SENDFILE.set(True)``: plaintext sockets, not TLS), and only for ranges large enough to pay
for the descriptor and the extra system call.

Descriptors are bounded broker-wide (``MAX_PINNED``): past that, and for small ranges, the
handler reads the bytes as before (``os.pread``), so the answer is the same either way.
"""

from __future__ import annotations

import os
from contextvars import ContextVar

# Set True by the server in the task of a connection whose socket can take sendfile.
SENDFILE: ContextVar[bool] = ContextVar("minibroker_sendfile", default=False)

# Ranges below this are read and copied (one pread beats a dup, a sendfile and a close).
MIN_SLICE_BYTES = 16 * 1024
# Duplicated segment descriptors held at once by the slices of every connection (well inside
# the descriptors the server keeps free beside its connections, _RESERVED_FDS).
MAX_PINNED = 64


class FileSlice:
    """``length`` bytes of an open file at ``position``, sent with sendfile (see the module
    docstring). ``len()`` is ``length``; ``close()`` (or garbage collection) frees the
    descriptor."""

    __slots__ = ("fd", "length", "position")
    pinned = 0  # descriptors held by every open slice
    made = 0  # slices made since start (tests)

    def __init__(self, fd: int, position: int, length: int) -> None:
        self.fd = fd
        self.position = position
        self.length = length

    @classmethod
    def pin(cls, fd: int, position: int, length: int) -> FileSlice | None:
        """A slice over a duplicate of ``fd``; None when the budget or the system is out of
        descriptors (the caller reads the bytes instead)."""
        if cls.pinned >= MAX_PINNED:
            return None
        try:
            own = os.dup(fd)
        except OSError:
            return None
        cls.pinned += 1
        cls.made += 1
        return cls(own, position, length)

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The bytes themselves (for a path that cannot sendfile)."""
        data = os.pread(self.fd, self.length, self.position)
        if len(data) != self.length:
            raise OSError(f"short read of a fetched range: {len(data)} of {self.length} bytes")
        return data

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            FileSlice.pinned -= 1

    def __del__(self) -> None:
        self.close()


def read_range(fd: int, position: int, length: int) -> bytes | FileSlice:
    """The records of a Fetch answer: a ``FileSlice`` when the connection sends them with
    sendfile and the range is large enough, else the bytes (one pread)."""
    if length >= MIN_SLICE_BYTES and SENDFILE.get():
        pinned = FileSlice.pin(fd, position, length)
        if pinned is not None:
            return pinned
    data = os.pread(fd, length, position)
    if len(data) != length:
        raise OSError(f"short read at {position}: {len(data)} of {length} bytes")
    return data
