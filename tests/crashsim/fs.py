"""A recording file layer and the crash states a POSIX file system may leave (tests only).

``Recorder(root)`` patches the ``os`` functions the broker's storage code calls (``open``,
``close``, ``write``, ``pwrite``, ``writev``, ``pwritev``, ``ftruncate``, ``posix_fallocate``,
``fsync``, ``fdatasync``, ``dup``, ``replace``, ``rename``, ``unlink``, ``remove``, ``mkdir``, ``rmdir``;
``pathlib`` and ``shutil.rmtree`` go through them) while it is active. Every call under ``root``
still happens on the real file system (the broker reads what it wrote) and is logged, in order,
as an ``Op`` naming a file by an inode number of the recorder's own (a name can be reused; a
file keeps its identity through renames). Nothing else in the broker writes files: its
persistent state goes through ``os`` descriptors (``tests/crashsim`` checks that no Python file
object is opened for writing under the root while recording).

``Model`` replays the log up to an operation and knows, for each file, what an fsync made
durable and the writes since; and, for each directory, which entries a directory fsync made
durable. ``Model.materialize(dest, choice)`` writes the state a power cut at that point may
leave, POSIX-strict: every fsynced byte is there; of a file's unsynced writes (and truncations),
all, none, a prefix of them, or a prefix and then a torn write (a 512-byte-aligned part of the
next one, the rest of it as it was before); an entry (a creation, a rename, an unlink) only if
its directory was fsynced after it (else the entry as the last directory fsync saw it).
"""

from __future__ import annotations

import contextlib
import os
import random
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SECTOR = 512

# Op kinds: ("create", ino, path), ("write", ino, offset, data), ("trunc", ino, size),
# ("sync", ino), ("rename", src, dst), ("unlink", path), ("mkdir", path), ("rmdir", path),
# ("dsync", dir path). Paths are relative to the root ("" is the root itself).
Op = tuple


@dataclass
class _Fd:
    path: str
    ino: int | None  # None: a directory
    append: bool


class Recorder:
    """Log every file operation under ``root`` (see the module docstring). A context manager;
    ``skip_sync`` (the negative control) makes the n-th file fdatasync/fsync of a descriptor
    under the root return without syncing or being logged, as a broker that forgot it would."""

    def __init__(self, root: Path) -> None:
        self.root = os.path.realpath(root)
        self.ops: list[Op] = []
        self._fds: dict[int, _Fd] = {}
        self._names: dict[str, int] = {}  # file path -> ino
        self._dirs: set[str] = set()
        self._next_ino = 0
        self._lock = threading.RLock()
        self._saved: dict[str, Any] = {}
        self.skip_sync: int | None = None  # negative control: skip the sync with this number
        self._syncs = 0
        self.skipped: list[Op] = []
        # Whether a sync is also done for real (it is only logged otherwise: the directory is
        # thrown away, and the model, not the disk, says what a power cut keeps).
        self.real_sync = False
        self._scan()

    # -- the initial state: all durable ----------------------------------------------------

    def _scan(self) -> None:
        self._dirs.add("")
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            rel = "" if rel == "." else rel
            for d in dirnames:
                self._dirs.add(os.path.join(rel, d))
            for f in filenames:
                self._names[os.path.join(rel, f)] = self._new_ino()

    def initial(self) -> Model:
        """The model of the state when recording began (every byte durable)."""
        model = Model()
        for d in sorted(self._dirs):
            if d:
                model.entries[d] = None
                model.durable[d] = None
        for path, ino in self._names.items():
            with open(os.path.join(self.root, path), "rb") as f:
                data = f.read()
            model.files[ino] = _File(bytearray(data), bytearray(data))
            model.entries[path] = ino
            model.durable[path] = ino
        return model

    def _new_ino(self) -> int:
        self._next_ino += 1
        return self._next_ino

    # -- path handling -----------------------------------------------------------------------

    def _rel(self, path: Any, dir_fd: int | None = None) -> str | None:
        if isinstance(path, int):
            return None
        p = os.fsdecode(os.fspath(path))
        if dir_fd is not None and not os.path.isabs(p):
            base = self._fds.get(dir_fd)
            if base is None:
                return None
            p = os.path.join(self.root, base.path, p)
        p = os.path.abspath(p)
        if p == self.root:
            return ""
        if not p.startswith(self.root + os.sep):
            return None
        return p[len(self.root) + 1:]

    # -- the patched functions ---------------------------------------------------------------

    def __enter__(self) -> Recorder:
        for name in ("open", "close", "dup", "write", "pwrite", "writev", "pwritev", "ftruncate",
                     "posix_fallocate", "fsync", "fdatasync", "replace", "rename", "unlink",
                     "remove", "mkdir", "rmdir", "truncate"):
            self._saved[name] = getattr(os, name)
            setattr(os, name, getattr(self, "_" + name))
        import broker.storage.syncfs as syncfs_module  # the storage's syncfs(2)
        self._saved["syncfs"] = syncfs_module.syncfs
        syncfs_module.syncfs = self._syncfs
        return self

    def __exit__(self, *exc: object) -> None:
        import broker.storage.syncfs as syncfs_module
        syncfs_module.syncfs = self._saved.pop("syncfs")
        for name, fn in self._saved.items():
            setattr(os, name, fn)
        self._saved.clear()

    def _syncfs(self, fd: int) -> None:
        """syncfs(2) on a descriptor under the root: every file and directory under it durable
        (logged as a sync of each file, then of each directory; not counted for skip_sync)."""
        with self._lock:
            if fd not in self._fds:
                return self._saved["syncfs"](fd)
            if self.real_sync:
                self._saved["syncfs"](fd)
            self.ops.extend(("sync", ino) for ino in sorted(set(self._names.values())))
            self.ops.extend(("dsync", d) for d in sorted(self._dirs))
            return None

    def _open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        with self._lock:
            rel = self._rel(path, dir_fd)
            real = self._saved["open"]
            if rel is None:
                return real(path, flags, mode, dir_fd=dir_fd)
            existed_file = rel in self._names
            fd = real(path, flags, mode, dir_fd=dir_fd)
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                self._fds[fd] = _Fd(rel, None, False)
                return fd
            if not existed_file:
                ino = self._names[rel] = self._new_ino()
                self.ops.append(("create", ino, rel))
            ino = self._names[rel]
            if flags & os.O_TRUNC and existed_file:
                self.ops.append(("trunc", ino, 0))
            self._fds[fd] = _Fd(rel, ino, bool(flags & os.O_APPEND))
            return fd

    def _dup(self, fd: int) -> int:
        with self._lock:
            new = self._saved["dup"](fd)
            info = self._fds.get(fd)
            if info is not None:
                self._fds[new] = info
            return new

    def _close(self, fd: int) -> None:
        with self._lock:
            self._fds.pop(fd, None)
        self._saved["close"](fd)

    def _write_at(self, fd: int, data: Any, offset: int | None, fn: Any, *args: Any) -> int:
        with self._lock:
            info = self._fds.get(fd)
            if info is None or info.ino is None:
                return fn(*args)
            if offset is None:
                offset = (os.fstat(fd).st_size if info.append
                          else os.lseek(fd, 0, os.SEEK_CUR))
            n = fn(*args)
            if n:
                self.ops.append(("write", info.ino, offset, bytes(data)[:n]))
            return n

    def _write(self, fd: int, data: Any) -> int:
        return self._write_at(fd, data, None, self._saved["write"], fd, data)

    def _pwrite(self, fd: int, data: Any, offset: int) -> int:
        return self._write_at(fd, data, offset, self._saved["pwrite"], fd, data, offset)

    def _writev(self, fd: int, buffers: Any) -> int:
        buffers = list(buffers)
        return self._write_at(fd, b"".join(map(bytes, buffers)), None, self._saved["writev"], fd,
                              buffers)

    def _pwritev(self, fd: int, buffers: Any, offset: int, *flags: int) -> int:
        buffers = list(buffers)
        return self._write_at(fd, b"".join(map(bytes, buffers)), offset, self._saved["pwritev"],
                              fd, buffers, offset, *flags)

    def _ftruncate(self, fd: int, size: int) -> None:
        with self._lock:
            self._saved["ftruncate"](fd, size)
            info = self._fds.get(fd)
            if info is not None and info.ino is not None:
                self.ops.append(("trunc", info.ino, size))

    def _truncate(self, path: Any, size: int) -> None:
        if isinstance(path, int):
            return self._ftruncate(path, size)
        with self._lock:
            self._saved["truncate"](path, size)
            rel = self._rel(path)
            if rel is not None and rel in self._names:
                self.ops.append(("trunc", self._names[rel], size))

    def _posix_fallocate(self, fd: int, offset: int, length: int) -> None:
        with self._lock:
            before = os.fstat(fd).st_size
            self._saved["posix_fallocate"](fd, offset, length)
            info = self._fds.get(fd)
            if info is not None and info.ino is not None and offset + length > before:
                self.ops.append(("trunc", info.ino, offset + length))

    def _sync(self, fd: int, fn: Any) -> None:
        with self._lock:
            info = self._fds.get(fd)
            if info is None:
                return fn(fd)
            op: Op = ("dsync", info.path) if info.ino is None else ("sync", info.ino)
            if info.ino is not None:
                self._syncs += 1
                if self.skip_sync == self._syncs:
                    self.skipped.append(op)
                    return None
            if self.real_sync:
                fn(fd)
            self.ops.append(op)
            return None

    def _fsync(self, fd: int) -> None:
        return self._sync(fd, self._saved["fsync"])

    def _fdatasync(self, fd: int) -> None:
        return self._sync(fd, self._saved["fdatasync"])

    def _rename_op(self, fn: Any, src: Any, dst: Any, **kw: Any) -> None:
        with self._lock:
            a, b = self._rel(src, kw.get("src_dir_fd")), self._rel(dst, kw.get("dst_dir_fd"))
            fn(src, dst, **kw)
            if a is None or b is None:
                return
            if a in self._names:
                self._names[b] = self._names.pop(a)
            else:  # a directory: everything below it moves
                for old in [p for p in self._names if p.startswith(a + os.sep)]:
                    self._names[b + old[len(a):]] = self._names.pop(old)
                for old in [d for d in self._dirs if d == a or d.startswith(a + os.sep)]:
                    self._dirs.discard(old)
                    self._dirs.add(b + old[len(a):])
            self.ops.append(("rename", a, b))

    def _replace(self, src: Any, dst: Any, **kw: Any) -> None:
        self._rename_op(self._saved["replace"], src, dst, **kw)

    def _rename(self, src: Any, dst: Any, **kw: Any) -> None:
        self._rename_op(self._saved["rename"], src, dst, **kw)

    def _unlink(self, path: Any, *, dir_fd: int | None = None) -> None:
        with self._lock:
            rel = self._rel(path, dir_fd)
            self._saved["unlink"](path, dir_fd=dir_fd)
            if rel is not None:
                self._names.pop(rel, None)
                self.ops.append(("unlink", rel))

    _remove = _unlink

    def _mkdir(self, path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        with self._lock:
            rel = self._rel(path, dir_fd)
            self._saved["mkdir"](path, mode, dir_fd=dir_fd)
            if rel is not None:
                self._dirs.add(rel)
                self.ops.append(("mkdir", rel))

    def _rmdir(self, path: Any, *, dir_fd: int | None = None) -> None:
        with self._lock:
            rel = self._rel(path, dir_fd)
            self._saved["rmdir"](path, dir_fd=dir_fd)
            if rel is not None:
                self._dirs.discard(rel)
                self.ops.append(("rmdir", rel))


@dataclass
class _File:
    durable: bytearray
    current: bytearray
    pending: list[Op] = field(default_factory=list)  # writes/truncations since the last sync


def _apply(content: bytearray, op: Op) -> None:
    if op[0] == "write":
        _, _, offset, data = op
        if len(content) < offset:
            content.extend(bytes(offset - len(content)))
        content[offset:offset + len(data)] = data
    else:  # trunc
        size = op[2]
        if size < len(content):
            del content[size:]
        else:
            content.extend(bytes(size - len(content)))


def write(dest: Path, state: list[tuple[str, bytes | None]]) -> None:
    """Write a ``Model.state`` under ``dest`` (an empty directory)."""
    dest = Path(dest)
    for path, data in state:
        if data is None:
            (dest / path).mkdir()
        else:
            (dest / path).write_bytes(data)


@contextlib.contextmanager
def no_real_syncs() -> Iterator[None]:
    """fsync and fdatasync do nothing (a scratch directory: what is durable does not matter,
    only what the process sees)."""
    saved = os.fsync, os.fdatasync
    os.fsync = os.fdatasync = _nothing  # type: ignore[assignment]
    try:
        yield
    finally:
        os.fsync, os.fdatasync = saved


def _nothing(fd: int) -> None:
    pass


class Model:
    """The file system as the log says at some point (see the module docstring). ``entries``:
    path -> ino (None: a directory) as the process sees it; ``durable``: as a power cut would
    keep them (what the last fsync of each directory saw)."""

    def __init__(self) -> None:
        self.files: dict[int, _File] = {}
        self.entries: dict[str, int | None] = {}
        self.durable: dict[str, int | None] = {}

    def apply(self, op: Op) -> None:
        kind = op[0]
        if kind == "create":
            _, ino, path = op
            self.files[ino] = _File(bytearray(), bytearray())
            self.entries[path] = ino
        elif kind in ("write", "trunc"):
            f = self.files[op[1]]
            _apply(f.current, op)
            f.pending.append(op)
        elif kind == "sync":
            f = self.files[op[1]]
            f.durable = bytearray(f.current)
            f.pending.clear()
        elif kind == "rename":
            _, a, b = op
            moved = {p: v for p, v in self.entries.items() if p == a or p.startswith(a + os.sep)}
            for p in moved:
                del self.entries[p]
            for p, v in moved.items():
                self.entries[b + p[len(a):]] = v
        elif kind in ("unlink", "rmdir"):
            self.entries.pop(op[1], None)
        elif kind == "mkdir":
            self.entries[op[1]] = None
        elif kind == "dsync":
            d = op[1]
            for p in [p for p in self.durable if os.path.dirname(p) == d]:
                del self.durable[p]
            for p, v in self.entries.items():
                if os.path.dirname(p) == d:
                    self.durable[p] = v

    def unsynced(self) -> int:
        """How many files have writes no fsync covered."""
        return sum(1 for f in self.files.values() if f.pending)

    def materialize(self, dest: Path, choice: str, rng: random.Random) -> None:
        """Write the state a power cut now may leave under ``dest`` (an empty directory).
        ``choice``: "all" (every unsynced write kept, every entry as the process sees it but
        still POSIX: a directory entry only if durable), "none", "prefix" or "torn" (each file
        its own random prefix; "torn" also tears the next write), "mixed" (each file one of the
        four, at random)."""
        write(dest, self.state(choice, rng))

    def state(self, choice: str, rng: random.Random) -> list[tuple[str, bytes | None]]:
        """What ``materialize`` writes, in memory: ``(path, content; None: a directory)``,
        parents first (the same draws from ``rng``)."""
        out: list[tuple[str, bytes | None]] = []
        kept_dirs = {""}
        for path in sorted(self.durable, key=lambda p: p.count(os.sep)):
            if os.path.dirname(path) not in kept_dirs:
                continue  # its directory's own entry was not durable
            ino = self.durable[path]
            if ino is None:
                out.append((path, None))
                kept_dirs.add(path)
                continue
            out.append((path, bytes(self._content(self.files[ino], choice, rng))))
        return out

    def outcomes(self) -> int:
        """How many crash states a cut here may leave (``materialize``'s choices): the product
        over the files with unsynced writes of the number of their prefixes, a torn write
        adding one state per sector boundary inside it."""
        n = 1
        for f in self.files.values():
            if f.pending:
                states = len(f.pending) + 1
                for op in f.pending:
                    if op[0] == "write":
                        _, _, offset, data = op
                        start = offset - offset % SECTOR
                        states += max(0, (offset + len(data) - start - 1) // SECTOR)
                n *= states
        return n

    @staticmethod
    def _content(f: _File, choice: str, rng: random.Random) -> bytearray:
        if not f.pending or choice == "none":
            return bytearray(f.durable)
        if choice == "all":
            return bytearray(f.current)
        if choice == "mixed":
            choice = rng.choice(("all", "none", "prefix", "torn"))
            return Model._content(f, choice, rng)
        content = bytearray(f.durable)
        n = rng.randrange(len(f.pending) + 1)
        for op in f.pending[:n]:
            _apply(content, op)
        if choice == "torn" and n < len(f.pending) and f.pending[n][0] == "write":
            _, _, offset, data = f.pending[n]
            # The first sectors of the write reached the disk, the rest did not.
            start_sector = offset - offset % SECTOR
            sectors = (offset + len(data) - start_sector + SECTOR - 1) // SECTOR
            keep_to = start_sector + rng.randrange(sectors + 1) * SECTOR
            part = data[:max(0, keep_to - offset)]
            if part:
                _apply(content, ("write", 0, offset, part))
        return content
