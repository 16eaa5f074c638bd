"""All partitions of a data directory: topics, their configuration, startup and clean shutdown.

Layout of ``data_dir``::

    topics.json              {"version": 1, "topics": {name: {"partitions": N,
                              "config": {kafka_key: value, ...}, "topic_id": "<uuid>"}}}: the
                             topics, their config overrides and topic ids (a random UUID per
                             created topic, as Kafka's; one is added to a topic that has none at
                             the first start that sees it); replaced atomically (temp, fsync,
                             rename, dir fsync)
    .clean_shutdown          written last by close(), naming the points file it closes (its CRC);
                             deleted (and the deletion fsync'd) once the next start has loaded
    recovery-point-offset-checkpoint
                             every partition's clean point in one file (``clean_points.py``:
                             where its log ends, its producer state, a small active index),
                             written by close() just before the marker and kept at start (Kafka's
                             file name), and once a start's recovery is complete
                             (``prepare_recovery_points``, in a worker thread once the broker
                             listens). After a crash a partition whose files still end where its
                             entry says (same active segment, same size, zeros after) is loaded
                             as after a clean shutdown; only the others are scanned, so an
                             unclean start costs what changed since the last clean shutdown or
                             completed recovery
    .boot_id                 the operating system's boot id of the last start that completed
                             its recovery (Linux ``/proc/sys/kernel/random/boot_id``): after an
                             unclean shutdown, the same id means only the process died (kill -9,
                             a crash) and the page cache kept every write; another id (or none)
                             means the machine restarted and writes not yet fsynced may be lost.
                             Recorded by ``record_boot`` on every start (clean or not), once
                             recovery is complete and durable: a first start after a power cut
                             that dies during recovery leaves the old id, so the next start
                             still knows the machine restarted
    <topic>-<partition>/     one directory per partition (partition.py)

Partitions are loaded, created and closed by a pool of threads (``file_pool.py``): their fsyncs
overlap (the journal commits them together), so shutdown and start with many partitions cost
about the changed partitions' syncs divided by the threads. With many changed partitions the
storage has them close without fsyncs and syncs the file system once (``close``), and so does an
unclean start for what its scans rewrote (``sync_policy``).

``topics.json`` is the commit point of topic creation and deletion: create_topic makes and fsyncs
the partition directories first and then adds the topic; delete_topic removes the topic first and
then the directories. A crash in between leaves directories no topic owns, removed at the next
start, so a topic is never half there. Overrides are stored as given and applied to the broker's
defaults at each start (a topic without an override follows the broker default, as in Kafka).
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from broker.log import clean_points
from broker.log.clean_points import CleanPoint, CleanState, PendingWrite
from broker.log.file_pool import (
    close_without_fsync,
    collector_paused,
    in_threads,
    sync_directory_files,
)
from broker.log.partition import Partition
from broker.log.pending import PendingPartitions, PendingTopic
from broker.log.recovery import RecoveryReport
from broker.log.segment import atomic_write, fsync_dir
from broker.log.topic_config import LogConfig, apply_overrides, normalize_overrides
from broker.log.topics import INTERNAL_TOPICS
from protocol.errors import ErrorCode, KafkaError
from protocol.text import clip

TOPICS_FILE = "topics.json"
CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
BOOT_ID_FILE = ".boot_id"
BOOT_ID_SOURCE = Path("/proc/sys/kernel/random/boot_id")
# A bound on one CreateTopics: each partition is a directory and a few open files.
MAX_PARTITIONS = 10_000
# Partitions of the whole broker (``max.partitions``), the internal topics not counted against it.
DEFAULT_MAX_PARTITIONS = 20_000
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_PARTITION_DIR = re.compile(r"(.+)-(\d+)")
# How a start or close syncs what many partitions wrote: given how many, the function that syncs
# the data dir's file system at once (False where it cannot), or None for a sync file by file
# (the storage's policy, ``broker/storage/store.py``).
SyncPolicy = Callable[[int], Callable[[Path], bool] | None]
_OUR_SUFFIXES = (
    ".log", ".index", ".snapshot", ".txnindex", ".tmp", ".checkpoint", ".cleaned", ".swap",
)


def _current_boot_id() -> str:
    """The operating system's boot id ("" if unknown)."""
    try:
        return BOOT_ID_SOURCE.read_text().strip()
    except OSError:
        return ""


def validate_topic_name(name: str) -> None:
    """Kafka's rules: 1..249 of ``[a-zA-Z0-9._-]``, not ``.`` or ``..`` (Kafka's messages, as
    its tools print them)."""
    if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        if not isinstance(name, str) or name == "":
            message = "Topic name is illegal, it can't be empty"
        elif name in (".", ".."):
            message = "Topic name cannot be \".\" or \"..\""
        elif len(name) > 249:
            message = f"Topic name is illegal, it can't be longer than 249 characters, topic name: {clip(name)}"
        else:
            message = (f"Topic name is invalid: '{clip(name)}' contains one or more characters other "
                       "than ASCII alphanumerics, '.', '_' and '-'")
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, message)


def _partition_dir_name(topic: str, index: int) -> str:
    return f"{topic}-{index}"


class LogManager:
    """Owns every partition under ``data_dir``."""

    def __init__(self, data_dir: Path, default_config: LogConfig, now_ms: int,
                 max_partitions: int = DEFAULT_MAX_PARTITIONS,
                 sync_policy: SyncPolicy | None = None) -> None:
        """Load (recovering after a crash) every partition. Creates ``data_dir`` itself but not
        its parent. ``self.recovered`` lists what each partition load found. ``max_partitions``:
        the most partitions clients may make the broker hold (``max.partitions``).
        ``sync_policy``: how what the scans rewrote is made durable (default: file by file)."""
        self.data_dir = Path(data_dir)
        self.default_config = default_config
        self.max_partitions = max_partitions
        # Topics being created off the event loop (``prepare_topic``): name -> partitions.
        self._pending: dict[str, int] = {}
        self.data_dir.mkdir(exist_ok=True)
        self._topics: dict[str, dict] = self._read_topics()
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._names_by_id: dict[uuid.UUID, str] = {}
        self._load_topic_ids()
        self._configs: dict[str, LogConfig] = {}
        self._partitions: dict[str, list[Partition]] = {}
        self.recovered: list[RecoveryReport] = []
        self._closed = False
        self._on_roll: Callable[[Partition], None] | None = None

        # Topics deleted so far: a points file prepared before a deletion is not put in place.
        self._deletions = 0
        # The last shutdown was not clean (or this dir is new): recovery checks every CRC.
        present, named = clean_points.read_marker(self.data_dir / CLEAN_SHUTDOWN_FILE)
        self.unclean_start = not present
        # ... and the machine restarted since (or that cannot be told): writes answered before
        # their fsync (transactional batches) may be lost, so the transaction coordinator aborts
        # every ongoing transaction. After a kill -9 the page cache kept them: nothing to abort.
        self._boot_id: str | None = None
        self.unsynced_writes_lost = not self._same_boot() and self.unclean_start
        # The points file: after a clean shutdown, the one the marker names (a format-1 marker
        # holds its points itself); else recovery points, each checked against its partition.
        with collector_paused():
            stored = clean_points.read(self.data_dir / RECOVERY_POINT_FILE)
        clean, crc = stored if stored is not None else ({}, None)
        clean_shutdown = False
        if isinstance(named, dict):
            clean, clean_shutdown = named, True
        elif named is not None and crc is not None and named == crc:
            clean_shutdown = True
        # What the points file holds (format 2): ``prepare_recovery_points`` rewrites it only
        # if that changes.
        self._points_on_disk: dict[str, CleanState] | None = (
            None if crc is None else {name: point.state for name, point in clean.items()})
        todo: list[tuple[str, int, LogConfig]] = []
        for name, meta in self._topics.items():
            config = apply_overrides(default_config, meta.get("config"))
            self._configs[name] = config
            todo.extend((name, i, config) for i in range(meta["partitions"]))

        def load(item: tuple[str, int, LogConfig]) -> Partition:
            name, i, config = item
            dir_name = _partition_dir_name(name, i)
            return Partition(name, i, self.data_dir / dir_name, config, now_ms,
                             clean.get(dir_name), clean_shutdown, sync=False)

        with collector_paused():
            loaded = in_threads(load, todo)
        for p in loaded:
            self._partitions.setdefault(p.topic, []).append(p)
            self.recovered.append(p.recovery)
        self._sync_scanned([p for p in loaded if not p.recovery.clean], sync_policy)
        for name in self._topics:
            self._partitions.setdefault(name, [])
        self._remove_orphans()
        # From here on a crash must be detected: the marker goes before anything is written.
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        if marker.exists():
            marker.unlink()
        fsync_dir(self.data_dir)

    def _sync_scanned(self, scanned: list[Partition], sync_policy: SyncPolicy | None) -> None:
        """Make what the scans rewrote durable (loaded with ``sync=False``), before anything is
        served or written: many partitions with one sync of the file system, else (or where
        that is refused) every file of their directories."""
        if not scanned:
            return
        sync = sync_policy(len(scanned)) if sync_policy is not None else None
        if sync is None or not sync(self.data_dir):
            in_threads(sync_directory_files, [p.dir for p in scanned])

    # -- persistence of the topic list -------------------------------------------------------

    def _read_topics(self) -> dict[str, dict]:
        path = self.data_dir / TOPICS_FILE
        try:
            doc = json.loads(path.read_bytes())
        except FileNotFoundError:
            # A fresh directory. Partition directories without topics.json mean something
            # removed it: refuse rather than delete them as orphans.
            if any(self._looks_like_partition(p) for p in self.data_dir.iterdir()):
                raise RuntimeError(
                    f"{path} is missing but {self.data_dir} holds partition directories"
                ) from None
            self._write_topics({})
            return {}
        if not isinstance(doc, dict) or doc.get("version") != 1:
            raise RuntimeError(f"{path}: unknown format")
        return dict(doc["topics"])

    def _load_topic_ids(self) -> None:
        """Topic ids from topics.json; a topic without one (written before ids) gets one now."""
        missing = False
        for name, meta in self._topics.items():
            try:
                topic_id = uuid.UUID(meta["topic_id"])
            except (KeyError, TypeError, ValueError):
                topic_id = uuid.uuid4()
                self._topics[name] = {**meta, "topic_id": str(topic_id)}
                missing = True
            self._topic_ids[name] = topic_id
            self._names_by_id[topic_id] = name
        if missing:
            self._write_topics(self._topics)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """The topic's id (Kafka's topic UUID); None if there is no such topic."""
        return self._topic_ids.get(topic)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id; None if there is none."""
        return self._names_by_id.get(topic_id)

    def _write_topics(self, topics: dict[str, dict]) -> None:
        body = json.dumps({"version": 1, "topics": topics}, indent=1, sort_keys=True).encode()
        atomic_write(self.data_dir / TOPICS_FILE, body)

    def _same_boot(self) -> bool:
        """Whether the operating system has not restarted since the last start that completed
        its recovery on this data dir. False when either id is unknown. Writes nothing
        (``record_boot`` does, once recovery is done)."""
        self._boot_id = _current_boot_id()
        path = self.data_dir / BOOT_ID_FILE
        try:
            previous = path.read_text().strip()
        except (OSError, UnicodeDecodeError):
            previous = ""
        return bool(self._boot_id) and self._boot_id == previous

    def record_boot(self) -> None:
        """Record the operating system's boot id in ``.boot_id`` (atomically, durable): called
        by the composition root on every start once recovery is complete and durable (the
        transaction coordinator's aborts and fences committed). Before that, a start that dies
        (a SIGTERM, an exception, the OOM killer) must leave the old id: the next start then
        still treats unsynced writes as lost. After a clean start too: a clean stop, a reboot,
        a clean start and then a kill -9 is not a machine restart."""
        current = self._boot_id if self._boot_id is not None else _current_boot_id()
        if not current:
            return
        path = self.data_dir / BOOT_ID_FILE
        try:
            if path.read_text().strip() == current:
                return
        except (OSError, UnicodeDecodeError):
            pass
        atomic_write(path, current.encode())

    @staticmethod
    def _looks_like_partition(path: Path) -> bool:
        if not path.is_dir() or not _PARTITION_DIR.fullmatch(path.name):
            return False
        return all(child.name.endswith(_OUR_SUFFIXES) for child in path.iterdir())

    def _remove_orphans(self) -> None:
        """Partition directories no topic owns: an interrupted create or delete."""
        owned = {
            _partition_dir_name(name, i)
            for name, meta in self._topics.items()
            for i in range(meta["partitions"])
        }
        removed = False
        for path in self.data_dir.iterdir():
            if path.name not in owned and self._looks_like_partition(path):
                shutil.rmtree(path, ignore_errors=True)
                removed = True
        for path in self.data_dir.glob("*.tmp"):
            path.unlink(missing_ok=True)
        if removed:
            fsync_dir(self.data_dir)

    # -- topics ------------------------------------------------------------------------------

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count (a new dict: for listings, not per-request lookups)."""
        return {name: len(parts) for name, parts in self._partitions.items()}

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic``; None if there is no such topic."""
        parts = self._partitions.get(topic)
        return None if parts is None else len(parts)

    def topic_config(self, topic: str) -> LogConfig:
        try:
            return self._configs[topic]
        except KeyError:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic!r}") from None

    def validate_topic(
        self, name: str, num_partitions: int, overrides: dict[str, str] | None = None
    ) -> dict[str, str]:
        """What ``create_topic`` checks, without creating anything (CreateTopics with
        validate_only): the normalized overrides, or the KafkaError it would raise."""
        validate_topic_name(name)
        if name in self._topics or name in self._pending:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if not isinstance(num_partitions, int) or not 1 <= num_partitions <= MAX_PARTITIONS:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"number of partitions must be 1..{MAX_PARTITIONS}, not {num_partitions}",
            )
        if name not in INTERNAL_TOPICS:
            self._check_total(num_partitions)
        stored = normalize_overrides(overrides)
        apply_overrides(self.default_config, stored)  # the combined checks (INVALID_CONFIG)
        return stored

    def _check_total(self, more: int) -> None:
        """POLICY_VIOLATION if ``more`` partitions would take the broker past ``max_partitions``
        (the internal topics' partitions not counted: the broker makes them itself)."""
        held = sum(len(parts) for name, parts in self._partitions.items()
                   if name not in INTERNAL_TOPICS) + sum(self._pending.values())
        if held + more > self.max_partitions:
            raise KafkaError(
                ErrorCode.POLICY_VIOLATION,
                f"{more} more partition(s) would exceed max.partitions={self.max_partitions} "
                f"(the broker holds {held}).",
            )

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        overrides: dict[str, str] | None = None,
        now_ms: int = 0,
    ) -> None:
        """Create a topic durably, here and now (``prepare_topic`` for the same off the event
        loop). Raises KafkaError TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION,
        INVALID_PARTITIONS, INVALID_CONFIG, POLICY_VIOLATION or KAFKA_STORAGE_ERROR."""
        pending = self.prepare_topic(name, num_partitions, overrides, now_ms)
        try:
            pending.build()
        finally:
            self.finish_topic(pending)

    def prepare_topic(
        self, name: str, num_partitions: int, overrides: dict[str, str] | None, now_ms: int,
    ) -> PendingTopic:
        """Validate a topic creation and reserve its name (event loop). Then
        ``PendingTopic.build()`` (any thread: the files and their fsyncs) and, always, back on
        the event loop, ``finish_topic`` (the commit, or the clean-up if the build failed or did
        not run). Raises what ``create_topic`` raises but KAFKA_STORAGE_ERROR."""
        stored = self.validate_topic(name, num_partitions, overrides)
        config = apply_overrides(self.default_config, stored)
        self._pending[name] = num_partitions
        return PendingTopic(self._build_partitions, name, num_partitions, stored, config, now_ms)

    def finish_topic(self, pending: PendingTopic) -> None:
        """Commit a built topic (``topics.json``, then in memory) or remove what a failed or
        abandoned build left. Raises KAFKA_STORAGE_ERROR for a failed build or commit."""
        self._pending.pop(pending.name, None)
        parts, error = pending.parts, pending.error
        if error is None and len(parts) == pending.num_partitions:
            topics = dict(self._topics)
            topic_id = uuid.uuid4()
            topics[pending.name] = {"partitions": pending.num_partitions,
                                    "config": pending.overrides, "topic_id": str(topic_id)}
            try:
                self._write_topics(topics)  # the commit point
            except OSError as exc:
                error = exc
            else:
                self._topics = topics
                self._configs[pending.name] = pending.config
                self._partitions[pending.name] = parts
                self._topic_ids[pending.name] = topic_id
                self._names_by_id[topic_id] = pending.name
                return
        for p in parts:
            p.delete()
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                         f"{pending.name}: {error or 'creation interrupted'}")

    def _build_partitions(self, topic: str, indexes: range, config: LogConfig,
                          now_ms: int, out: list[Partition]) -> None:
        """Create the directories of new partitions of ``topic`` and make them durable, their
        fsyncs in parallel; appends each to ``out`` as soon as it exists (so that a failure
        leaves there what to delete). Any thread; raises OSError."""
        for i in indexes:
            directory = self.data_dir / _partition_dir_name(topic, i)
            if directory.exists():
                # Left by an interrupted create/delete of a topic of that name: not ours.
                shutil.rmtree(directory)
            p = Partition(topic, i, directory, config, now_ms)
            p.on_roll = self._on_roll
            out.append(p)
        in_threads(Partition.flush, out)  # each new directory's entries
        fsync_dir(self.data_dir)

    def topic_overrides(self, topic: str) -> dict[str, str]:
        """The topic's config overrides as stored (Kafka key -> string value)."""
        try:
            return dict(self._topics[topic].get("config") or {})
        except KeyError:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic!r}") from None

    def alter_topic_config(
        self, topic: str, overrides: dict[str, str], validate_only: bool = False
    ) -> LogConfig:
        """Replace the topic's overrides durably and apply them to its partitions at once.

        Returns the new config. Raises UNKNOWN_TOPIC_OR_PARTITION or INVALID_CONFIG; with
        ``validate_only`` nothing changes."""
        self.topic_overrides(topic)  # raises for an unknown topic
        stored = normalize_overrides(overrides)
        config = apply_overrides(self.default_config, stored)
        if validate_only:
            return config
        topics = dict(self._topics)
        topics[topic] = {**topics[topic], "config": stored}
        try:
            self._write_topics(topics)  # the commit point
        except OSError as exc:  # disk full, I/O error: nothing changed, an answer
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}: {exc}") from exc
        self._topics = topics
        self._configs[topic] = config
        for p in self._partitions[topic]:
            p.config = config
        return config

    def create_partitions(
        self, topic: str, count: int, now_ms: int, validate_only: bool = False
    ) -> None:
        """Grow ``topic`` to ``count`` partitions durably (CreatePartitions), here and now
        (``prepare_partitions`` for the same off the event loop).

        Raises UNKNOWN_TOPIC_OR_PARTITION, or INVALID_PARTITIONS when ``count`` is not above the
        current count (Kafka never shrinks a topic) or above the limit."""
        pending = self.prepare_partitions(topic, count, now_ms, validate_only)
        if pending is None:
            return
        try:
            pending.build()
        finally:
            self.finish_partitions(pending)

    def prepare_partitions(
        self, topic: str, count: int, now_ms: int, validate_only: bool = False
    ) -> PendingPartitions | None:
        """Validate a CreatePartitions of ``topic`` and reserve it (event loop): None with
        ``validate_only``. Then ``PendingPartitions.build()`` (any thread: the files and their
        fsyncs) and, always, on the event loop, ``finish_partitions``. Raises what
        ``create_partitions`` raises, and INVALID_PARTITIONS while the topic is already growing
        or being created."""
        current = len(self._partitions.get(topic, ()))
        if topic not in self._topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic!r}")
        if topic in self._pending:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic {topic} is already getting new partitions.")
        if count == current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic already has {current} partition(s).")
        if count < current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {topic} currently has {current} partition(s); {count} would not be an "
                "increase.",
            )
        if count > MAX_PARTITIONS:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS, f"number of partitions must be at most {MAX_PARTITIONS}"
            )
        if topic not in INTERNAL_TOPICS:
            self._check_total(count - current)
        if validate_only:
            return None
        self._pending[topic] = count - current
        return PendingPartitions(self._build_partitions, topic, range(current, count), self._configs[topic], now_ms)

    def finish_partitions(self, pending: PendingPartitions) -> None:
        """Commit built partitions (``topics.json``, then in memory) or remove what a failed or
        abandoned build left, or what a topic deleted meanwhile would not own. Raises
        KAFKA_STORAGE_ERROR for a failed build or commit, UNKNOWN_TOPIC_OR_PARTITION if the
        topic was deleted meanwhile."""
        self._pending.pop(pending.topic, None)
        topic, parts, error = pending.topic, pending.parts, pending.error
        if topic not in self._topics or len(self._partitions[topic]) != pending.indexes.start:
            for p in parts:
                p.delete()
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"topic {topic!r} was deleted meanwhile")
        if error is None and len(parts) == len(pending.indexes):
            topics = dict(self._topics)
            topics[topic] = {**topics[topic], "partitions": pending.indexes.stop}
            try:
                self._write_topics(topics)  # the commit point
            except OSError as exc:
                error = exc
            else:
                for p in parts:
                    p.config = self._configs[topic]  # (an AlterConfigs meanwhile)
                self._topics = topics
                self._partitions[topic] = self._partitions[topic] + parts
                return
        for p in parts:
            p.delete()
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}: {error or 'creation interrupted'}")

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its files. UNKNOWN_TOPIC_OR_PARTITION if there is none."""
        if name not in self._topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        topics = dict(self._topics)
        del topics[name]
        try:
            self._write_topics(topics)  # the commit point
        except OSError as exc:  # disk full, I/O error: nothing changed, an answer
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{name}: {exc}") from exc
        self._topics = topics
        del self._configs[name]
        old_id = self._topic_ids.pop(name, None)
        if old_id is not None:
            self._names_by_id.pop(old_id, None)
        self._deletions += 1  # (a points file being written meanwhile is not put in place)
        for p in self._partitions.pop(name):
            p.delete()
        fsync_dir(self.data_dir)
        self._forget_recovery_points(name)

    def _forget_recovery_points(self, topic: str) -> None:
        """Drop a deleted topic's entries from the points file, so that a topic created later
        under the same name can never be matched against them."""
        path = self.data_dir / RECOVERY_POINT_FILE
        stored = clean_points.read(path)
        if stored is None:
            return
        points, crc = stored
        prefix = topic + "-"
        kept = {k: v for k, v in points.items()
                if not (k.startswith(prefix) and k[len(prefix):].isdigit())}
        if len(kept) == len(points):
            return
        try:
            if crc is None:
                raise OSError("format 1")  # (not rewritten: removed)
            clean_points.write(path, kept)
        except OSError:
            # Not written: remove the file instead (the next crash scans everything).
            path.unlink(missing_ok=True)
            kept = {}
        self._points_on_disk = {k: v.state for k, v in kept.items()}

    # -- partitions --------------------------------------------------------------------------

    def set_on_roll(self, callback: Callable[[Partition], None] | None) -> None:
        """Call ``callback(partition)`` after every segment roll, of every partition (the
        storage: what a roll leaves to sync goes into a flush round)."""
        self._on_roll = callback
        for p in self.all_partitions():
            p.on_roll = callback

    def partition(self, topic: str, index: int) -> Partition:
        parts = self._partitions.get(topic)
        if parts is None or not 0 <= index < len(parts):
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic partition {topic}-{index}"
            )
        return parts[index]

    def all_partitions(self) -> Iterable[Partition]:
        for parts in self._partitions.values():
            yield from parts

    def enforce_retention(self, now_ms: int) -> int:
        """Apply every topic's retention; returns the number of segments deleted."""
        return sum(p.enforce_retention(now_ms) for p in list(self.all_partitions()))

    def expire_producers(self, now_ms: int, expiration_ms: int) -> None:
        for p in self.all_partitions():
            p.expire_producers(now_ms, expiration_ms)

    def prepare_recovery_points(self) -> PendingWrite | None:
        """Once a start's recovery is complete and the broker serves (event loop): give every
        partition that has no clean point on disk (scanned, created, or written by the recovery
        of transactions) the one a clean close would, and return the points file to write
        (``PendingWrite``: ``write`` in a worker thread, ``commit`` back on the event loop); None
        if nothing changed. The next unclean start then scans only what changed since this
        one, not again everything the last clean close did not cover.

        Each entry claims only what is durable: a partition with unsynced writes is left out
        (scanned after a crash); the others' data is synced already (by the scans, by the
        settled recovery), and an active index too long to go inline is written here and
        synced by ``write`` before the file replaces the old one (atomically). A crash before
        that leaves the old file, whose entries no longer match a rewritten partition."""
        if self._closed:
            return None
        partitions = list(self.all_partitions())
        indexes: list[Path] = []
        for p in partitions:
            if p.changed and p.size_bytes and not p.dirty and not p.txn_index.unsynced:
                p.save_clean_point(fsync=False)  # (syncs nothing: nothing is dirty)
                if p.clean_point_indexed:
                    indexes.append(p.segments[-1].index_path)
        with collector_paused():
            points = {_partition_dir_name(p.topic, p.index): p.clean_point()
                      for p in partitions if p.checkpoint is not None and not p.changed}
        if not indexes and {k: v.state for k, v in points.items()} == (self._points_on_disk
                                                                         or {}):
            return None  # (also a fresh data dir: nothing to claim)
        deletions = self._deletions

        def committed(points: dict[str, CleanPoint]) -> None:
            self._points_on_disk = {k: v.state for k, v in points.items()}

        return PendingWrite(self.data_dir / RECOVERY_POINT_FILE, points, indexes,
                            lambda: not self._closed and self._deletions == deletions,
                            committed)

    def _save(self, changed: list[Partition], with_fsync: Callable[[Partition], object],
              without_fsync: Callable[[Partition], bool],
              sync_file_system: Callable[[Path], bool] | None) -> None:
        """Write the clean points of ``changed`` in the thread pool, each file fsynced, or
        (``sync_file_system``) none but the file system at once, if they wrote anything at all
        (``close``; with ``flush="always"`` the data is usually durable already)."""
        if not changed:
            return
        if sync_file_system is None:
            in_threads(with_fsync, changed)
        else:
            wrote = [p for p, w in zip(changed, in_threads(without_fsync, changed), strict=True)
                     if w]
            if wrote and not sync_file_system(self.data_dir):
                in_threads(sync_directory_files, [p.dir for p in wrote])

    def close(self, sync_file_system: Callable[[Path], bool] | None = None) -> None:
        """Flush and close every partition, then write the points file (every partition's
        clean point) and the clean-shutdown marker naming it, so that the next start skips the
        scan. Partitions unchanged since their clean point only close their files; the others
        are closed by the thread pool, their fsyncs overlapping.

        ``sync_file_system(data_dir)`` (the storage's: one ``syncfs(2)``): the partitions then
        write their close files without fsyncs of their own and this makes them durable
        together, before the points and the marker; it returns False where it cannot (no
        syncfs), and every file the partitions hold is then fsynced one by one. A power cut
        before the marker is durable is an unclean start: the points file is only trusted
        through the marker, or entry by entry as recovery points (an index that comes back torn
        or empty is rejected by its loader, and the partition scanned)."""
        if self._closed:
            return
        partitions = list(self.all_partitions())
        changed = [p for p in partitions if p.changed]
        self._save(changed, Partition.close, close_without_fsync, sync_file_system)
        points: dict[str, CleanPoint] = {}
        with collector_paused():
            for p in partitions:
                p.close()  # (the unchanged ones)
                points[_partition_dir_name(p.topic, p.index)] = p.clean_point()
            crc = clean_points.write(self.data_dir / RECOVERY_POINT_FILE, points,
                                     sync_dir=False)  # (the marker's directory fsync)
        atomic_write(self.data_dir / CLEAN_SHUTDOWN_FILE, clean_points.marker_bytes(crc))
        self._closed = True
