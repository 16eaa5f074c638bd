"""An exclusive lock on the data dir for the broker's lifetime (Kafka's ``.lock`` in each log dir).

Two brokers on one data dir would both append and acknowledge, and each would overwrite the
other's data. The lock is ``flock`` on ``DATA_DIR/.lock``, which holds the holder's PID for the
message the second one prints; the kernel drops the lock when the process dies (kill -9 included),
so a stale file never blocks a restart. Within one process the lock is shared (reference counted):
tests simulate a crash by opening a second ``Broker`` on the dir of one never closed.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class DataDirLocked(Exception):
    """Another process holds the data dir."""


class _Held:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.users = 0


_held: dict[Path, _Held] = {}  # lock files this process holds


class DataDirLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._released = False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        held = _held[self.path]
        held.users -= 1
        if held.users == 0:
            del _held[self.path]
            os.close(held.fd)  # closing the descriptor drops the flock


def lock_data_dir(data_dir: Path) -> DataDirLock:
    """Take the lock or raise ``DataDirLocked`` naming the dir and the holder's PID."""
    path = (Path(data_dir) / LOCK_FILE).resolve()
    if path in _held:
        _held[path].users += 1
        return DataDirLock(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise DataDirLocked(
            f"data dir {Path(data_dir).resolve()} is in use by another broker (pid {holder})"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[path] = _Held(fd)
    _held[path].users = 1
    return DataDirLock(path)
