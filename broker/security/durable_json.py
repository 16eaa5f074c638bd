"""Small JSON state files written atomically: a temporary file, fsync, rename, fsync of the
directory. A crash leaves the old or the new file, never a torn one."""

from __future__ import annotations

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
    tmp = path.with_name(path.name + ".tmp")
    data = json.dumps(value, indent=1, sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
