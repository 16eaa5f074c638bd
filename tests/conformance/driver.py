"""The differential driver: replay the corpus's request sequences against two brokers at the wire
level and compare their answers field by field.

A case is data (``tests/conformance/corpus/*.corpus``, Python literals read with
``ast.literal_eval``; see ``corpus/README.md`` for the grammar). The driver sends each step's
request at the exact version named, with the project's own codecs (``protocol.messages``), so both
brokers see the same bytes up to the names made unique per run and the producer ids each broker
handed out. Each answer is normalized (:func:`normalize`): what legitimately differs between two
brokers (node ids, hosts, ports, cluster ids, throttle times, free-text error messages, the values
of producer ids and member ids, which become "P0", "M1", ... by order of appearance, so that "the
same id as before" still compares) is replaced, everything else (error codes, offsets, high
watermarks, last stable offsets, aborted-transaction lists, epochs, fetched batches) is kept.
:func:`diff` lists the differences as one line each: ``case#step path: kafka=X minibroker=Y``.
"""

from __future__ import annotations

import ast
import itertools
import re
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.api_keys import ApiKey
from protocol.errors import CorruptFrameError, ErrorCode
from protocol.headers import parse_response_header_untrusted
from protocol.messages import decode_response
from protocol.records import (
    Compression,
    decode_batches_untrusted,
    encode_batch,
    parse_control_record,
)
from tests.raw_client import RawConnection

CORPUS = Path(__file__).resolve().parent / "corpus"

# Errors a client retries (the coordinator is loading, the leader moved, the last transaction's
# markers are still being written). A step retries on them unless it says ``"retry": []``.
RETRIABLE = frozenset({
    ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS,
})
RETRY_FOR = 30.0  # seconds a step retries before its last answer stands
BASE_TS = 1_700_000_000_000  # the records' timestamps: BASE_TS + 1000 * (sequence of the record)

# Fields that legitimately differ between two brokers, dropped from every answer.
DROPPED = frozenset({
    "throttle_time_ms", "error_message", "cluster_id", "host", "port", "rack",
    "batch_index_error_message", "tagged_fields", "node_endpoints", "brokers",
    "supported_features", "finalized_features", "finalized_features_epoch", "zk_migration_ready",
})
NODE_ID_FIELDS = frozenset({
    "node_id", "leader_id", "controller_id", "replica_nodes", "isr_nodes", "offline_replicas",
    "eligible_leader_replicas", "last_known_elr", "coordinator_id", "broker_id",
})
PRODUCER_ID_FIELDS = frozenset({"producer_id", "pid"})
MEMBER_ID_FIELDS = frozenset({"member_id", "leader"})
# Times read from the broker's clock (not from the records): "T" when set.
WALL_CLOCK_FIELDS = frozenset({"transaction_start_time_ms", "last_timestamp"})
# Lists of partition numbers whose order means nothing.
INT_SETS = frozenset({"partitions", "partition_indexes"})
# Lists whose order carries no meaning: sorted by the first of these keys their items have.
SORT_KEYS = ("name", "topic", "partition_index", "index", "partition", "group_id",
             "transactional_id", "member_id", "producer_id", "resource_name", "api_key")


class CorpusError(Exception):
    """A case that cannot be run as written (a bad reference, an unknown API)."""


# -- the corpus ---------------------------------------------------------------------------------


def load_corpus(directory: Path = CORPUS) -> list[dict[str, Any]]:
    """Every case of every ``*.corpus`` file, in file then list order; names must be unique."""
    cases: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.corpus")):
        try:
            items = ast.literal_eval(path.read_text())
        except (SyntaxError, ValueError) as exc:
            raise CorpusError(f"{path.name}: not a Python literal: {exc}") from exc
        for case in items:
            case = dict(case, file=path.name)
            if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", case.get("name", "")):
                raise CorpusError(f"{path.name}: bad case name {case.get('name')!r}")
            cases.append(case)
    names = [c["name"] for c in cases]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise CorpusError(f"case names used twice: {sorted(dupes)}")
    return cases


def count_requests(case: dict[str, Any]) -> int:
    return sum(1 for step in case["steps"] if "api" in step)


# -- running a case -----------------------------------------------------------------------------


@dataclass
class Answer:
    """One step's outcome: the decoded response (None for no response), or what happened instead."""

    label: str
    api: str
    version: int
    body: Any = None
    event: str | None = None  # "closed" (the broker closed the connection), "no response"


@dataclass
class Run:
    """One case against one broker: its connections, the names made unique, what was saved."""

    port: int
    case: dict[str, Any]
    run_id: str
    conns: dict[str, RawConnection] = field(default_factory=dict)
    pending: dict[str, tuple[str, int, int, int, str]] = field(default_factory=dict)
    saved: dict[str, Any] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    answers: list[Answer] = field(default_factory=list)

    # -- names and references --------------------------------------------------------------------
    def name(self, symbol: str) -> str:
        if symbol not in self.names:
            self.names[symbol] = f"{symbol}.{self.case['name']}.{self.run_id}"
        return self.names[symbol]

    def resolve(self, value: Any) -> Any:
        """The request value with ``{name}`` made unique, ``$label.path[+-n]`` read from an earlier
        answer, and ``{"batch": {...}}`` encoded."""
        if isinstance(value, dict):
            if set(value) == {"batch"}:
                return self.batch(value["batch"])
            if set(value) == {"repeat"}:
                text, times = value["repeat"]
                return text * times
            return {k: self.resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if isinstance(value, str):
            if value.startswith("$"):
                return self.reference(value[1:])
            return re.sub(r"\{([A-Za-z][\w-]*)\}", lambda m: self.name(m.group(1)), value)
        return value

    def reference(self, ref: str) -> Any:
        match = re.fullmatch(r"([\w-]+)((?:\.[\w]+|\[\d+\])*)([+-]\d+)?", ref)
        if match is None:
            raise CorpusError(f"bad reference ${ref}")
        label, path, delta = match.groups()
        if label not in self.saved:
            raise CorpusError(f"${ref}: no earlier answer labelled {label!r}")
        value = self.saved[label]
        for part in re.findall(r"\.(\w+)|\[(\d+)\]", path):
            value = value[part[0]] if part[0] else value[int(part[1])]
        if delta:
            value = value + int(delta)
        return value

    def batch(self, spec: dict[str, Any]) -> bytes:
        spec = self.resolve(spec)
        seq = spec.get("seq", -1)
        n = spec.get("n", 1)
        first = max(seq, 0) + spec.get("value_from", 0)
        size = spec.get("size")
        records = []
        for i in range(n):
            value = b"x" * size if size is not None else f"v{first + i}".encode()
            key = spec.get("key")
            records.append((key.encode() if key is not None else None, value, (),
                            spec.get("ts", BASE_TS + 1000 * (first + i))))
        data = encode_batch(records, producer_id=spec.get("pid", -1),
                            producer_epoch=spec.get("epoch", -1), base_sequence=seq,
                            transactional=spec.get("txn", False),
                            compression=Compression[spec.get("compression", "none").upper()])
        if spec.get("bad_crc"):
            data = data[:17] + bytes([data[17] ^ 0xFF]) + data[18:]  # a byte of the CRC
        if "magic" in spec:
            data = data[:16] + bytes([spec["magic"]]) + data[17:]
        return data

    # -- connections -----------------------------------------------------------------------------
    def conn(self, name: str) -> RawConnection:
        if name not in self.conns:
            self.conns[name] = RawConnection(self.port, timeout=30.0)
        return self.conns[name]

    def drop(self, name: str) -> None:
        conn = self.conns.pop(name, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for name in list(self.conns):
            self.drop(name)

    # -- one request -----------------------------------------------------------------------------
    def send(self, step: dict[str, Any], label: str) -> tuple[str, int, int, int, str]:
        api = ApiKey[step["api"]] if isinstance(step["api"], str) else int(step["api"])
        version = int(step["v"])
        body = (bytes.fromhex(step["body_hex"]) if "body_hex" in step
                else self.resolve(step.get("body", {})))
        conn_name = step.get("conn", "main")
        conn = self.conn(conn_name)
        try:
            corr = conn.send_request(api, version, body, client_id=step.get("client_id", "diff"))
        except OSError:
            self.drop(conn_name)
            raise
        return (label, int(api), version, corr, conn_name)

    def receive(self, sent: tuple[str, int, int, int, str], step: dict[str, Any]) -> Answer:
        label, api, version, corr, conn_name = sent
        known = api in ApiKey.__members__.values()
        name = ApiKey(api).name if known else f"API_{api}"
        if api == ApiKey.PRODUCE and step.get("body", {}).get("acks") == 0:
            return Answer(label, name, version, event="no response")
        conn = self.conns.get(conn_name)
        frame = None
        if conn is not None:
            try:
                frame = conn.read_frame()
            except OSError:  # a timeout too
                frame = None
        if frame is None:
            self.drop(conn_name)
            return Answer(label, name, version, event="closed")
        if not known:
            return Answer(label, name, version, event="an answer to an unknown API")
        got, offset = parse_response_header_untrusted(frame, api, version)
        if got != corr:
            raise AssertionError(f"{label}: correlation id {got}, expected {corr}")
        try:
            body = decode_response(api, step.get("decode_v", version), frame, offset)
        except (CorruptFrameError, KeyError, ValueError) as exc:
            return Answer(label, name, version, event=f"undecodable answer: {exc}")
        return Answer(label, name, version, body=plain(body))

    def request(self, step: dict[str, Any], label: str) -> Answer:
        # A Produce is not retried (a partial success would append twice) unless a step asks.
        default = frozenset() if step["api"] == "PRODUCE" else RETRIABLE
        retry_on = default if "retry" not in step else {ErrorCode[e] for e in step["retry"]}
        until = step.get("until", {})
        deadline = time.monotonic() + RETRY_FOR
        while True:
            answer = self.receive(self.send(step, label), step)
            if answer.body is None or time.monotonic() > deadline:
                return answer
            if not (error_codes(answer.body) & retry_on) and all(
                    _at(canonical(answer.body, Symbols(self.names)), path) == value
                    for path, value in until.items()):
                return answer
            time.sleep(0.05)

    # -- the steps -------------------------------------------------------------------------------
    def run(self) -> list[Answer]:
        try:
            for topic, spec in self.case.get("topics", {}).items():
                if isinstance(spec, int):
                    spec = {"partitions": spec}
                self.create_topic(topic, spec["partitions"], spec.get("configs", {}))
            for i, step in enumerate(self.case["steps"], 1):
                label = step.get("as", str(i))
                try:
                    self.step(step, label)
                except (ValueError, KeyError, IndexError, TypeError) as exc:
                    # An answer the next step cannot use (a field missing, an id of -1): the case
                    # stops here, and the other broker's run shows where they parted.
                    self.answers.append(Answer(label, str(step.get("api", "-")), step.get("v", -1),
                                               event=f"case stopped: {type(exc).__name__}: {exc}"))
                    break
        finally:
            self.close()
        return self.answers

    def step(self, step: dict[str, Any], label: str) -> None:
        if "sleep" in step:
            time.sleep(step["sleep"])
        elif "wait_txn" in step:
            self.wait_txn(self.resolve(step["wait_txn"]))
        elif "await" in step:
            sent, original = self.pending.pop(step["await"])
            self.record(self.receive(sent, original), original)
        elif "close" in step:
            self.drop(step["close"])
        elif "api" in step:
            if step.get("async"):
                self.pending[label] = (self.send(step, label), step)
            else:
                self.record(self.request(step, label), step)
        else:
            raise CorpusError(f"{self.case['name']}#{label}: unknown step {step}")

    def record(self, answer: Answer, step: dict[str, Any]) -> None:
        if answer.body is not None:
            self.saved[answer.label] = answer.body
        if step.get("compare", True):
            self.answers.append(answer)

    def create_topic(self, symbol: str, partitions: int, configs: dict[str, str]) -> None:
        """Create a topic (not compared) and wait until each partition's leader serves it."""
        name = self.name(symbol)
        created = self.request({"api": "CREATE_TOPICS", "v": 5, "body": {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
            "timeout_ms": 30_000, "validate_only": False}}, "setup")
        if error_codes(created.body) != {0}:
            raise CorpusError(f"creating topic {symbol} failed: {created.body}")
        deadline = time.monotonic() + RETRY_FOR
        while time.monotonic() < deadline:
            meta = self.request({"api": "METADATA", "v": 9, "body": {
                "topics": [{"name": name}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}}, "setup").body
            parts = meta["topics"][0]["partitions"]
            if (meta["topics"][0]["error_code"] == 0 and len(parts) == partitions
                    and all(p["error_code"] == 0 and p["leader_id"] >= 0 for p in parts)):
                # Kafka's metadata may name a leader before its replica manager leads: ListOffsets
                # answers NOT_LEADER_OR_FOLLOWER until then.
                listed = self.request({"api": "LIST_OFFSETS", "v": 7, "retry": [], "body": {
                    "replica_id": -1, "isolation_level": 0, "topics": [{"name": name, "partitions": [
                        {"partition_index": i, "timestamp": -1} for i in range(partitions)]}]}},
                    "setup").body
                if error_codes(listed) == {0}:
                    return
            time.sleep(0.05)
        raise AssertionError(f"topic {name} has no leader after {RETRY_FOR} s")

    def wait_txn(self, transactional_id: str) -> None:
        """Until the transaction is no longer preparing (its markers are written)."""
        deadline = time.monotonic() + RETRY_FOR
        while time.monotonic() < deadline:
            body = self.request({"api": "DESCRIBE_TRANSACTIONS", "v": 0,
                                 "body": {"transactional_ids": [transactional_id]}}, "wait").body
            state = body["transaction_states"][0]["transaction_state"]
            if not state.startswith("Prepare"):
                return
            time.sleep(0.05)
        raise AssertionError(f"transaction {transactional_id} still preparing after {RETRY_FOR} s")


def canonical(value: Any, symbols: Symbols) -> Any:
    """A decoded answer with its lists in the order of :func:`normalize` (by name or index), its
    values as they are: where an ``until`` path points."""
    if isinstance(value, dict):
        return {k: canonical(v, symbols) for k, v in value.items()}
    if isinstance(value, list):
        items = [canonical(v, symbols) for v in value]
        if items and all(isinstance(i, dict) for i in items):
            for sort_key in SORT_KEYS:
                if all(sort_key in i for i in items):
                    items.sort(key=lambda i: repr(symbols.text(i[sort_key])
                                                  if isinstance(i[sort_key], str) else i[sort_key]))
                    break
        return items
    return value


def _at(body: Any, path: str) -> Any:
    """The value at ``a.b[0].c`` in a decoded answer (None if there is none)."""
    value = body
    for name, index in re.findall(r"\.?(\w+)|\[(\d+)\]", path):
        try:
            value = value[name] if name else value[int(index)]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def error_codes(body: Any) -> set[int]:
    """Every error code anywhere in a decoded answer."""
    found: set[int] = set()
    if isinstance(body, dict):
        for key, value in body.items():
            if key == "error_code" and isinstance(value, int):
                found.add(value)
            else:
                found |= error_codes(value)
    elif isinstance(body, list):
        for item in body:
            found |= error_codes(item)
    return found


def plain(value: Any) -> Any:
    """A decoded answer as plain dicts, lists, ints and strings; ``records`` as bytes."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def run_case(port: int, case: dict[str, Any], run_id: str) -> tuple[list[Answer], dict[str, str]]:
    """The answers of one case against the broker on ``port``, and the unique names it used."""
    run = Run(port, case, run_id)
    return run.run(), run.names


# -- normalizing and comparing ------------------------------------------------------------------


class Symbols:
    """Values that differ between brokers by nature, named by order of first appearance."""

    def __init__(self, names: dict[str, str]) -> None:
        # longest first: a name may contain another ("g.case.run" in "missing.case.run")
        self.reverse = {actual: "{" + symbol + "}" for symbol, actual in
                        sorted(names.items(), key=lambda item: -len(item[1]))}
        self.tables: dict[str, dict[Any, str]] = {"P": {}, "M": {}}

    def of(self, kind: str, value: Any) -> str:
        table = self.tables[kind]
        if value not in table:
            table[value] = f"{kind}{len(table)}"
        return table[value]

    def text(self, value: str) -> str:
        for actual, symbol in self.reverse.items():
            value = value.replace(actual, symbol)
        return value


def normalize(answer: Answer, symbols: Symbols) -> Any:
    if answer.body is None:
        return f"<{answer.event}>"
    return _norm(answer.body, symbols, "")


def _norm(value: Any, symbols: Symbols, key: str) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in DROPPED:
                continue
            out[k] = _norm(v, symbols, k)
        return out
    if isinstance(value, list):
        items = [_norm(v, symbols, key) for v in value]
        if key in INT_SETS and all(isinstance(i, int) for i in items):
            return sorted(items)
        if items and all(isinstance(i, dict) for i in items):
            for sort_key in SORT_KEYS:
                if all(sort_key in i for i in items):
                    items.sort(key=lambda i: repr(i[sort_key]))
                    break
        return items
    if key == "records" and isinstance(value, bytes):
        return _batches(value, symbols)
    if key.endswith("error_code") and isinstance(value, int):
        try:
            return f"{ErrorCode(value).name}({value})"
        except ValueError:
            return value
    if key in NODE_ID_FIELDS and isinstance(value, int):
        return "B" if value >= 0 else value
    if key in PRODUCER_ID_FIELDS and isinstance(value, int):
        # 0 is no broker's producer id here (compare() takes it first): a field's default
        return symbols.of("P", value) if value > 0 else value
    if key in MEMBER_ID_FIELDS and isinstance(value, str) and value:
        return symbols.of("M", value)
    if key == "topic_id":
        return "UUID" if value != uuid.UUID(int=0) and value not in (b"\0" * 16,) else "0"
    if key in WALL_CLOCK_FIELDS and isinstance(value, int):
        return "T" if value > 0 else value
    if key == "session_id" and isinstance(value, int):
        return "S" if value != 0 else 0  # a fetch session's id is random
    if isinstance(value, str):
        return symbols.text(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


def _batches(records: bytes, symbols: Symbols) -> list[dict[str, Any]]:
    """A fetched records blob as what a consumer sees of it, batch by batch."""
    out = []
    for header, recs in decode_batches_untrusted(records):
        batch: dict[str, Any] = {
            "base_offset": header.base_offset,
            "last_offset": header.last_offset,
            "producer_id": symbols.of("P", header.producer_id) if header.producer_id >= 0 else -1,
            "producer_epoch": header.producer_epoch,
            "base_sequence": header.base_sequence,
            "transactional": header.is_transactional,
        }
        if header.is_control:
            control, _coordinator_epoch = parse_control_record(recs[0])
            batch["control"] = control.name
        else:
            batch["records"] = [
                [r.offset, r.timestamp, r.key.decode() if r.key is not None else None,
                 r.value.decode(errors="replace") if r.value is not None else None]
                for r in recs]
        out.append(batch)
    return out


def diff(a: Any, b: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """Each place where two normalized answers differ: (path, a's value, b's value)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{k}" if path else k
            if k not in a:
                yield sub, "<absent>", b[k]
            elif k not in b:
                yield sub, a[k], "<absent>"
            else:
                yield from diff(a[k], b[k], sub)
    elif (path.endswith(".records") and isinstance(a, list) and isinstance(b, list) and a and b
          and (a[:len(b)] == b or b[:len(a)] == a)):
        # A fetch may answer any non-empty prefix of what it could (Kafka reads one segment at
        # most and may stop before a transaction marker): the shorter answer is not a divergence.
        return
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from diff(x, y, f"{path}[{i}]")
    elif a != b:
        yield path or ".", a, b


def covers(pattern: str, path: str) -> bool:
    """Whether an ``ignore`` pattern (``topics[*].configs``: ``[*]`` any index) covers a path:
    the path itself or anything under it."""
    regex = re.escape(pattern).replace(r"\[\*\]", r"\[\d+\]")
    return re.fullmatch(regex + r"(?:[.\[].*)?", path) is not None


def divergences(case: dict[str, Any], kafka: tuple[list[Answer], dict[str, str]],
                minibroker: tuple[list[Answer], dict[str, str]]) -> list[str]:
    """One line per difference between the two runs of ``case``."""
    k_answers, k_symbols = kafka[0], Symbols(kafka[1])
    m_answers, m_symbols = minibroker[0], Symbols(minibroker[1])
    lines = []
    ignored = {step.get("as", str(i)): step.get("ignore", [])
               for i, step in enumerate(case["steps"], 1)}
    for k, m in itertools.zip_longest(k_answers, m_answers):
        if k is None or m is None:
            lines.append(f"{case['name']}#{(k or m).label}: answered by one broker only")
            continue
        for path, x, y in diff(normalize(k, k_symbols), normalize(m, m_symbols)):
            if any(covers(pattern, path) for pattern in ignored.get(k.label, [])):
                continue
            lines.append(f"{case['name']}#{k.label} {k.api} v{k.version} {path}: "
                         f"kafka={x!r} minibroker={y!r}")
    return lines


def java_hash(text: str) -> int:
    """Java's String.hashCode, which places a group or transactional id on a partition of
    ``__consumer_offsets`` or ``__transaction_state`` (abs(hash) % partitions)."""
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h


def warm_up(port: int, internal_partitions: int, run_id: str) -> None:
    """Before any case: load every partition's group and transaction coordinator (a new Kafka
    creates its internal topics on the first request that needs them, and answers
    NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS meanwhile; minibroker creates them with the
    first record it writes there), and take producer id 0, which both brokers hand out first when
    new: in a case a producer id 0 is then a field's default."""
    keys: dict[int, str] = {}
    n = 0
    while len(keys) < internal_partitions:
        key = f"warm-up.{run_id}.{n}"
        keys.setdefault((java_hash(key) & 0x7FFFFFFF) % internal_partitions, key)
        n += 1
    run = Run(port, {"name": "warm-up", "steps": []}, run_id)
    try:
        deadline = time.monotonic() + 120.0
        run.create_topic("w", 1, {})
        steps = [{"api": "INIT_PRODUCER_ID", "v": 4, "body": {
            "transactional_id": None, "transaction_timeout_ms": 60000}}]
        for key in keys.values():
            steps += [
                {"api": "FIND_COORDINATOR", "v": 4, "body": {"key_type": 0, "coordinator_keys": [key]}},
                {"api": "OFFSET_FETCH", "v": 8, "body": {"groups": [{"group_id": key, "topics": None}],
                                                         "require_stable": False}},
                {"api": "FIND_COORDINATOR", "v": 4, "body": {"key_type": 1, "coordinator_keys": [key]}},
                {"api": "INIT_PRODUCER_ID", "v": 4, "body": {"transactional_id": key,
                                                             "transaction_timeout_ms": 60000}},
                # minibroker creates __consumer_offsets with the first offset it stores (Kafka
                # with the first FindCoordinator): after this, both describe it
                {"api": "OFFSET_COMMIT", "v": 8, "body": {
                    "group_id": key, "generation_id": -1, "member_id": "", "topics": [
                        {"name": run.name("w"), "partitions": [
                            {"partition_index": 0, "committed_offset": 0,
                             "committed_metadata": ""}]}]}},
            ]
        for step in steps:
            while True:
                answer = run.request(step, "warm-up")
                if error_codes(answer.body) == {0}:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"broker on port {port} not ready: {answer.body}")
                time.sleep(0.2)
    finally:
        run.close()


def compare(kafka_port: int, minibroker_port: int, cases: list[dict[str, Any]],
            run_id: str | None = None, workers: int = 4, internal_partitions: int = 3,
            progress: Callable[[str], None] | None = None) -> dict[str, list[str]]:
    """Run every case against both brokers (cases side by side, each case on both brokers at once)
    and return each case's divergences (an empty list when the answers agree)."""
    run_id = run_id or uuid.uuid4().hex[:8]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda port: warm_up(port, internal_partitions, run_id),
                      (kafka_port, minibroker_port)))

    def one(case: dict[str, Any]) -> tuple[str, list[str]]:
        with ThreadPoolExecutor(2) as pool:
            k = pool.submit(run_case, kafka_port, case, run_id)
            m = pool.submit(run_case, minibroker_port, case, run_id)
            result = divergences(case, k.result(), m.result())
        if progress is not None:
            progress(f"{case['name']}: {len(result)} divergences")
        return case["name"], result

    with ThreadPoolExecutor(workers) as pool:
        return dict(pool.map(one, cases))


# -- the report ---------------------------------------------------------------------------------

KEPT_LINE = re.compile(r"^- `(?P<key>[^`]+)`")


def listed_divergences(report: Path) -> set[str]:
    """The divergences the report keeps on purpose: each a line ``- `<divergence line>` ...``
    under the heading "## Kept"."""
    kept: set[str] = set()
    in_kept = False
    for line in report.read_text().splitlines():
        if line.startswith("## "):
            in_kept = line.startswith("## Kept")
            continue
        match = KEPT_LINE.match(line)
        if in_kept and match:
            kept.add(match.group("key"))
    return kept
