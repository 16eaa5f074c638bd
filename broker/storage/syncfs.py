"""``syncfs(2)``: many files made durable by one call, for a clean close with many partitions.

A clean close writes a few small files per changed partition (an index, a producer-state
snapshot); fsyncing each cost about four journal commits per partition, 40,000 at 10,000
partitions (issue 36). The log writes them without fsync (``LogManager.close``) and this makes
them durable together: one ``syncfs`` on the data dir's file system, before the recovery points
and the clean-shutdown marker are written (and fsynced) as before.

``syncfs`` writes back every dirty page of the file system, other programs' too: cheap on a
file system of the broker's own, and never worse than the journal commits it replaces when many
partitions changed; with a few, per-file fsyncs cost less (``Storage.close`` decides).

Linux only (glibc and musl export it); elsewhere, or where it is refused (a seccomp filter:
ENOSYS, EPERM), ``sync_file_system`` says False and the caller fsyncs file by file. Before
Linux 5.8 ``syncfs`` did not report writeback errors.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("minibroker")

# Errors that mean "no syncfs here", not "the disk failed".
_UNSUPPORTED = frozenset({errno.ENOSYS, errno.EPERM, errno.EOPNOTSUPP, errno.EINVAL})


def _load_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYSCALL = _load_syncfs()


def syncfs(fd: int) -> None:
    """``syncfs(fd)``: every file of the file system holding ``fd`` durable (data, metadata,
    directory entries). Raises OSError (ENOSYS where there is no such call). The crash-point
    simulator replaces this function (``tests/crashsim/fs.py``)."""
    if _SYSCALL is None:
        raise OSError(errno.ENOSYS, "syncfs is not available here")
    if _SYSCALL(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def sync_file_system(directory: Path) -> bool:
    """Make every file under ``directory`` durable with one ``syncfs``. False where that is not
    possible (not Linux, refused): the caller then fsyncs each file. Raises OSError for an I/O
    error (EIO, ENOSPC): nothing may then be taken as durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        syncfs(fd)
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
        log.info("syncfs unavailable (%s): syncing file by file", exc)
        return False
    finally:
        os.close(fd)
    return True
