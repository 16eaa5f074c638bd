"""Durable state files (issue 28 item 7): a short write is continued, a failed write or fsync
never replaces the good file, and the stores change their memory only after the file is saved.
The failures are injected into the ``os`` the writing module sees (ENOSPC on write, EIO on
fsync), on the ACL, SCRAM and topic-config files and the cluster id."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from broker.log import segment
from broker.log.manager import LogConfig, LogManager
from broker.security import durable_json
from broker.security.acl import (
    AclBinding,
    AclFilter,
    AclStore,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from broker.security.scram import ScramStore, derive
from broker.storage import store as core
from protocol.errors import ErrorCode, KafkaError


class FailingOs:
    """The real ``os`` but for the calls given (a module's ``os`` is replaced by this)."""

    def __init__(self, **overrides) -> None:
        self._overrides = overrides

    def __getattr__(self, name: str):
        return self._overrides.get(name) or getattr(os, name)


def enospc_after(n: int):
    """Writes that take ``n`` bytes in all (a short write), then find the disk full."""
    left = [n]

    def write(fd: int, data) -> int:
        if left[0]:
            taken = os.write(fd, bytes(data[:left[0]]))
            left[0] -= taken
            return taken
        raise OSError(errno.ENOSPC, "No space left on device")
    return write


def eio(fd: int) -> None:
    raise OSError(errno.EIO, "Input/output error")


def one_byte_at_a_time(fd: int, data) -> int:
    return os.write(fd, bytes(data[:1]))


def test_short_writes_are_continued(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "state.json"
    monkeypatch.setattr(segment, "os", FailingOs(write=one_byte_at_a_time))
    durable_json.save(path, {"k": "v" * 100})
    assert durable_json.load(path, None) == {"k": "v" * 100}


@pytest.mark.parametrize("failure", [
    {"write": enospc_after(0)}, {"write": enospc_after(7)}, {"fsync": eio}])
def test_a_failed_write_or_fsync_keeps_the_good_file(tmp_path: Path, monkeypatch,
                                                      failure) -> None:
    path = tmp_path / "state.json"
    durable_json.save(path, {"good": True})
    good = path.read_bytes()
    monkeypatch.setattr(segment, "os", FailingOs(**failure))
    with pytest.raises(OSError):
        durable_json.save(path, {"good": False, "padding": "x" * 1000})
    assert path.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # no temporary left


def binding(name: str) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice", "*",
                      Operation.READ, Permission.ALLOW)


def test_acls_change_in_memory_only_once_saved(tmp_path: Path, monkeypatch) -> None:
    store = AclStore(tmp_path / "acls.json")
    store.add([binding("a")])
    on_disk = store.path.read_bytes()
    everything = AclFilter(ResourceType.ANY, None, PatternType.ANY, None, None, Operation.ANY,
                           Permission.ANY)
    for failure in ({"write": enospc_after(3)}, {"fsync": eio}):
        monkeypatch.setattr(segment, "os", FailingOs(**failure))
        with pytest.raises(OSError):
            store.add([binding("b")])
        with pytest.raises(OSError):
            store.remove([everything])
        assert store.bindings == [binding("a")]
        assert store.path.read_bytes() == on_disk
        assert AclStore(store.path).bindings == [binding("a")]
    monkeypatch.setattr(segment, "os", os)
    store.add([binding("b")])
    assert AclStore(store.path).bindings == [binding("a"), binding("b")]


def test_scram_credentials_change_in_memory_only_once_saved(tmp_path: Path,
                                                            monkeypatch) -> None:
    store = ScramStore(tmp_path / "scram-credentials.json")
    old = derive("SCRAM-SHA-256", b"k" * 32, b"salt", 4096)
    new = derive("SCRAM-SHA-256", b"n" * 32, b"salt2", 4096)
    store.apply([("alice", "SCRAM-SHA-256", old)], [])
    on_disk = store.path.read_bytes()
    for failure in ({"write": enospc_after(5)}, {"fsync": eio}):
        monkeypatch.setattr(segment, "os", FailingOs(**failure))
        with pytest.raises(OSError):
            store.apply([("alice", "SCRAM-SHA-256", new), ("bob", "SCRAM-SHA-256", new)], [])
        with pytest.raises(OSError):
            store.apply([], [("alice", "SCRAM-SHA-256")])
        assert store.get("alice", "SCRAM-SHA-256") == old
        assert store.get("bob", "SCRAM-SHA-256") is None
        assert store.path.read_bytes() == on_disk


def test_topic_configs_change_only_once_saved(tmp_path: Path, monkeypatch) -> None:
    logs = LogManager(tmp_path / "data", LogConfig(preallocate=False), 0)
    try:
        logs.create_topic("t", 1, {"retention.ms": "1000"}, 0)
        topics_file = tmp_path / "data" / "topics.json"
        on_disk = topics_file.read_bytes()
        for failure in ({"write": enospc_after(10)}, {"fsync": eio}):
            monkeypatch.setattr(segment, "os", FailingOs(**failure))
            with pytest.raises(KafkaError) as info:
                logs.alter_topic_config("t", {"retention.ms": "2000"})
            assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
            with pytest.raises(KafkaError):
                logs.delete_topic("t")
            assert logs.topic_overrides("t") == {"retention.ms": "1000"}
            assert logs.topic_config("t").retention_ms == 1000
            assert topics_file.read_bytes() == on_disk
        monkeypatch.setattr(segment, "os", os)
    finally:
        logs.close()


def test_the_cluster_id_is_written_durably_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(segment, "os", FailingOs(fsync=eio))
    with pytest.raises(OSError):
        core.load_cluster_id(tmp_path)
    assert not (tmp_path / "meta.properties").exists()  # no id that was never made durable
    monkeypatch.setattr(segment, "os", os)
    first = core.load_cluster_id(tmp_path)
    assert core.load_cluster_id(tmp_path) == first
