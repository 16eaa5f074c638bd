"""Small JSON state files written atomically: a temporary file written whole (a short write is
continued), fsync, rename, fsync of the directory. A crash leaves the old or the new file, never
a torn one; a failed write or fsync (disk full, I/O error) raises and leaves the old file in
place and no temporary file behind. The stores change their memory only after ``save`` returned,
so that what the broker acts on is what a restart reads.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any


def load(path: Path, default: Any) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return default
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); restore it or remove it") from None


def save(path: Path, value: Any) -> None:
    """Replace ``path`` with ``value`` as JSON (mode 0600), durably; OSError if it could not."""
    data = json.dumps(value, indent=1, sort_keys=True).encode()
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    # Renamed: the new file is what a restart reads once the directory entry is durable. If
    # this fsync fails the caller is told (OSError) and keeps its memory; the file on disk may
    # then be the new one, which a retry of the same change rewrites.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
