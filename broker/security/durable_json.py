"""Small JSON state files written atomically: a temporary file written whole (a short write is
continued), fsync, rename, fsync of the directory. A crash leaves the old or the new file, never
a torn one; a failed write or fsync (disk full, I/O error) raises and leaves the old file in
place and no temporary file behind. The stores change their memory only after ``save`` returned,
so that what the broker acts on is what a restart reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from broker.log.segment import atomic_write


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
    """Replace ``path`` with ``value`` as JSON (mode 0600), durably; OSError if it could not
    (the good file stays; see ``atomic_write``)."""
    atomic_write(path, json.dumps(value, indent=1, sort_keys=True).encode(), mode=0o600)
