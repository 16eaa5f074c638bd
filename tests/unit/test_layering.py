"""The import rules of docs/design.md section 2, checked on the source with ``ast``.

- protocol/ is pure: nothing of ours outside protocol, and never trio, socket, asyncio, time, os;
- broker/ and client/ may import protocol; client never imports broker; broker never imports
  client, except broker/cli.py, the composition root of the ``minibroker`` command;
- spark_connector imports client, never broker.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("protocol", "broker", "client", "spark_connector", "tests", "bench")

FORBIDDEN: dict[str, set[str]] = {
    "protocol": {"broker", "client", "spark_connector", "tests", "bench"}
    | {"trio", "socket", "asyncio", "time", "os"},
    "client": {"broker", "spark_connector", "tests", "bench"},
    "broker": {"client", "spark_connector", "tests", "bench"},
    "spark_connector": {"broker", "tests", "bench"},
}
# The one sanctioned exception: the CLI entry point adds the client tools to its command group.
ALLOWED: set[tuple[str, str]] = {("broker/cli.py", "client")}


def imported_modules(source: str, module: str) -> set[str]:
    """Absolute names of the modules ``source`` (the code of ``module``) imports.

    Covers ``import x``, ``from x import y`` (and ``from x import submodule``), relative imports,
    imports inside functions or ``if TYPE_CHECKING:`` blocks, and ``importlib.import_module`` /
    ``__import__`` calls with a constant name.
    """
    package = module.rsplit(".", 1)[0] if "." in module else module
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            arg = node.args[0]
            if name in ("import_module", "__import__") and isinstance(arg, ast.Constant):
                if isinstance(arg.value, str):
                    found.add(arg.value)
    return found


def violations(package: str, forbidden: set[str]) -> list[str]:
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        if rel.name == "__init__":
            module += ".__init__"  # so that relative imports resolve against the package itself
        for name in sorted(imported_modules(path.read_text(encoding="utf-8"), module)):
            top = name.split(".")[0]
            if top in forbidden and (str(path.relative_to(ROOT)), top) not in ALLOWED:
                out.append(f"{path.relative_to(ROOT)} imports {name}")
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_import_rules(package: str) -> None:
    assert (ROOT / package).is_dir()
    assert violations(package, FORBIDDEN[package]) == []


def test_protocol_has_modules_to_check() -> None:
    assert len(list((ROOT / "protocol").rglob("*.py"))) >= 10


# -- the scanner itself must catch what it is meant to catch ------------------------------------

SCANNER_CASES = [
    ("import trio", "protocol.x", {"trio"}),
    ("import os.path", "protocol.x", {"os.path"}),
    ("from time import monotonic", "protocol.x", {"time", "time.monotonic"}),
    ("from broker.log import partition", "protocol.x", {"broker.log", "broker.log.partition"}),
    ("def f():\n    import socket\n", "protocol.x", {"socket"}),
    (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import asyncio\n",
        "protocol.x",
        {"typing", "typing.TYPE_CHECKING", "asyncio"},
    ),
    (
        "from . import errors",
        "protocol.messages.fetch",
        {"protocol.messages", "protocol.messages.errors"},
    ),
    ("from .. import errors", "protocol.messages.fetch", {"protocol", "protocol.errors"}),
    (
        "from ..records import x",
        "protocol.messages.fetch",
        {"protocol.records", "protocol.records.x"},
    ),
    (
        "from .fetch import y",
        "protocol.messages.__init__",
        {"protocol.messages.fetch", "protocol.messages.fetch.y"},
    ),
    ("import importlib\nimportlib.import_module('trio')", "protocol.x", {"importlib", "trio"}),
    ("__import__('socket')", "protocol.x", {"socket"}),
]


@pytest.mark.parametrize(("source", "module", "expected"), SCANNER_CASES)
def test_scanner_finds_imports(source: str, module: str, expected: set[str]) -> None:
    assert imported_modules(source, module) == expected


def test_scanner_flags_a_forbidden_import(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "protocol"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ok.py").write_text("import struct\nfrom protocol import errors\n")
    (pkg / "bad.py").write_text("def later():\n    from broker.core import Broker\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert violations("protocol", FORBIDDEN["protocol"]) == [
        "protocol/bad.py imports broker.core",
        "protocol/bad.py imports broker.core.Broker",
    ]


# -- inside broker/: pure domain, services, and the composition root -----------------------------
#
# broker/ has three layers, and its folders show them. The domain (state tables, coordinators,
# offsets, the log, producer state, the internal topics' names and keys in log/topics.py) is
# synchronous and takes time as an argument: no trio, no sockets, no clock. The services
# (group/service.py, txn/manager.py, txn/markers.py, storage/) put the domain on trio and the disk;
# the transaction and group services never import each other. They return the reply types of
# broker/reply.py, which imports nothing of ours. The shell sits on top: network/ (server: the
# listeners and connections; dispatcher: a frame to a handler and back) and handlers/ (one module
# per API family, context.py: what a handler may touch, peer.py: what it may know of its
# connection); the composition root at the top of broker/ (app.py builds, wiring.py joins the two
# services, cli.py and logsetup.py are the command) above all. Nothing imports upwards, and there
# are no import cycles, not even under ``if TYPE_CHECKING:`` (the scanner sees those imports too),
# nor two folders that import each other.

ROOT_AND_SHELL = {
    "broker.app", "broker.wiring", "broker.cli", "broker.logsetup", "broker.handlers",
    "broker.network.server", "broker.network.dispatcher", "broker.network.limits",
    "broker.network.memory", "broker.network.sockets", "broker.metrics", "broker.metrics.http",
}
SERVICES = {"broker.storage", "broker.reply", "broker.clock", "broker.group.service",
            "broker.txn.manager", "broker.txn.recovery", "broker.txn.markers",
            "broker.storage.cleaner_service",
            "broker.share.service"}
# Pure: no I/O of any kind, no clock.
PURE_DOMAIN = {
    "broker.txn.state", "broker.txn.coordinator", "broker.group.state",
    "broker.group.coordinator", "broker.group.offsets", "broker.log.topics",
    "broker.share.partition_state", "broker.share.group", "broker.share.sessions",
}
# The storage domain: files, but no trio, no sockets, no clock.
STORAGE_DOMAIN = {"broker.log", "broker.log.producer_state", "broker.txn.txn_log",
                  "broker.txn.producer_ids"}
NO_TRIO_OR_NETWORK = {"trio", "socket", "asyncio", "selectors", "threading", "time"}
NO_IO = NO_TRIO_OR_NETWORK | {"os", "io", "pathlib", "shutil", "mmap", "tempfile", "json"}


# What may stand at the top of broker/ beside the subsystem packages: the composition root
# (app.py, wiring.py), the one clock it injects, the reply types every service and handler shares
# (reply.py, which imports nothing of ours), and the ``minibroker`` command (cli.py, logsetup.py).
# Everything else lives in the package of its subsystem.
TOP_LEVEL = {"app", "wiring", "clock", "reply", "cli", "logsetup"}

def broker_modules() -> dict[str, set[str]]:
    """``{module: modules it imports}`` for every module of broker/ (names as written)."""
    graph = {}
    for path in sorted((ROOT / "broker").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        is_init = rel.name == "__init__"
        module = ".".join(rel.parts[:-1] if is_init else rel.parts)
        source = path.read_text(encoding="utf-8")
        graph[module] = imported_modules(source, module + ".__init__" if is_init else module)
    return graph


def _in(module: str, group: set[str]) -> bool:
    return any(module == g or module.startswith(g + ".") for g in group)


def _internal_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Edges between broker modules only (``from broker.x import y`` counts as broker.x, or as
    broker.x.y when that is a module); a package's own __init__ is not an edge to its parent."""
    edges: dict[str, set[str]] = {}
    for module, imports in graph.items():
        targets = set()
        for name in imports:
            if name in graph and name != module and not module.startswith(name + "."):
                targets.add(name)
        edges[module] = targets
    return edges


@pytest.mark.parametrize(("layer", "forbidden"), [
    (PURE_DOMAIN, NO_IO),
    (STORAGE_DOMAIN, NO_TRIO_OR_NETWORK),
])
def test_domain_imports_no_io_and_nothing_above_it(layer: set[str], forbidden: set[str]) -> None:
    graph = broker_modules()
    assert any(_in(m, layer) for m in graph)
    bad = []
    for module, imports in graph.items():
        if not _in(module, layer):
            continue
        for name in sorted(imports):
            if name.split(".")[0] in forbidden or _in(name, ROOT_AND_SHELL | SERVICES):
                bad.append(f"{module} imports {name}")
    assert bad == []


def test_services_do_not_see_each_other_or_the_root() -> None:
    graph = broker_modules()
    bad = []
    for module, imports in graph.items():
        if not _in(module, SERVICES):
            continue
        for name in sorted(imports):
            crossing = (module.startswith("broker.group.") and name.startswith("broker.txn")) or (
                module.startswith("broker.txn.") and name.startswith("broker.group"))
            # No exception: the reply types a service returns live in broker/reply.py,
            # which is in SERVICES, not in ROOT_AND_SHELL.
            upward = _in(name, ROOT_AND_SHELL)
            if crossing or upward:
                bad.append(f"{module} imports {name}")
    assert bad == []


# -- one durability path ------------------------------------------------------------------------
#
# Only broker/storage decides when a partition is fsynced while the broker serves (STYLE.md 14):
# nothing else calls a partition's flush or the flusher's syncs. The log itself (broker/log)
# fsyncs its own files when it rolls, recovers or cleans them, and small state files are written
# atomically (temp, fsync, rename) where they live.
SYNC_CALLS = {"flush", "flush_now", "begin_flush", "complete_flush", "fsync", "fdatasync",
              "sync_alone", "mark_dirty"}
MAY_SYNC = {"broker.storage", "broker.log", "broker.log.producer_state", "broker.txn.producer_ids",
            "broker.security.durable_json"}


def sync_calls(source: str) -> set[str]:
    """Names of the calls in ``source`` that fsync (``x.flush()``, ``os.fdatasync(fd)``...)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in SYNC_CALLS:
                found.add(name)
    return found


def test_only_storage_fsyncs() -> None:
    bad = []
    for path in sorted((ROOT / "broker").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        if _in(module, MAY_SYNC):
            continue
        for name in sorted(sync_calls(path.read_text(encoding="utf-8"))):
            bad.append(f"{module} calls {name}")
    assert bad == []


def test_the_sync_scanner_sees_flushes() -> None:
    source = "import os\ndef f(p, fd):\n    p.flush()\n    os.fdatasync(fd)\n    print(p)\n"
    assert sync_calls(source) == {"flush", "fdatasync"}


def test_services_return_no_shell_types() -> None:
    """The reply types sit below the dispatcher: no service imports it."""
    graph = broker_modules()
    assert sorted(m for m, imports in graph.items() if _in(m, SERVICES)
                  and any(_in(n, {"broker.network.dispatcher"}) for n in imports)) == []


# What a request or response looks like on the wire is the handlers' business: the services and
# the domain take plain values (ids, codes, tuples, dataclasses) and return them; the handlers
# decode the request into them and build the response dict from what they get back.
WIRE_MESSAGES = {"protocol.messages", "protocol.api_keys"}


def test_services_and_domain_know_no_protocol_messages() -> None:
    graph = broker_modules()
    below_the_shell = SERVICES | PURE_DOMAIN | STORAGE_DOMAIN
    checked = [m for m in graph if _in(m, below_the_shell)]
    assert "broker.group.service" in checked and "broker.txn.manager" in checked
    bad = [f"{m} imports {n}" for m in checked for n in sorted(graph[m]) if _in(n, WIRE_MESSAGES)]
    assert bad == []


def test_handlers_go_through_the_transaction_service() -> None:
    """Handlers call the transaction service, never past it into its pure coordinator, its log
    or its marker writer (``broker.transactions.coordinator...``)."""
    bad = []
    for path in sorted((ROOT / "broker" / "handlers").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr in ("coordinator", "log", "markers")
                    and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "transactions"):
                bad.append(f"{path.name}:{node.lineno} transactions.{node.attr}")
            if (isinstance(node, ast.Attribute) and node.attr in ("coordinator", "log", "markers")
                    and isinstance(node.value, ast.Name) and node.value.id == "transactions"):
                bad.append(f"{path.name}:{node.lineno} transactions.{node.attr}")
    assert bad == []


def test_only_the_command_imports_the_composition_root() -> None:
    """The root builds, wires and starts the broker (``broker.app.serve``); only the command
    (``broker/cli.py``) stands above it. The server serves a broker it is given."""
    graph = broker_modules()
    importers = sorted(m for m, imports in graph.items()
                       if any(_in(n, {"broker.app"}) for n in imports))
    assert importers == ["broker.cli"]


def test_the_top_of_broker_holds_only_the_composition_root() -> None:
    loose = sorted(p.stem for p in (ROOT / "broker").glob("*.py") if p.stem != "__init__")
    assert sorted(TOP_LEVEL) == loose, "a module of a subsystem goes in that subsystem's package"


def test_the_network_package_is_the_shell() -> None:
    graph = broker_modules()
    network = sorted(m for m in graph if m.startswith("broker.network."))
    assert "broker.network.server" in network
    assert [m for m in network if not _in(m, ROOT_AND_SHELL)] == []
    assert [n for n in graph["broker.reply"] if n.startswith("broker")] == []


def folder(module: str) -> str:
    """The folder a module of broker/ is in (``broker.txn.manager`` -> ``broker.txn``); a module
    at the top of broker/ is a folder of its own."""
    parts = module.split(".")
    return ".".join(parts[:2])


def two_way_folders(edges: dict[str, set[str]]) -> list[str]:
    """Pairs of folders that import each other, each with one import of either way."""
    between: dict[tuple[str, str], str] = {}
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            a, b = folder(module), folder(target)
            if a != b:
                between.setdefault((a, b), f"{module} -> {target}")
    return sorted(f"{between[(a, b)]} / {between[(b, a)]}"
                  for (a, b) in between if a < b and (b, a) in between)


def test_no_two_folders_import_each_other() -> None:
    assert two_way_folders(_internal_edges(broker_modules())) == []


def test_the_folder_check_sees_a_two_way_import() -> None:
    edges = {"broker.a.x": {"broker.b.y"}, "broker.b.y": set(), "broker.b.z": {"broker.a.w"},
             "broker.a.w": set()}
    assert two_way_folders(edges) == ["broker.a.x -> broker.b.y / broker.b.z -> broker.a.w"]


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as a path that starts and ends at the same module, or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_broker_has_no_import_cycles() -> None:
    assert find_cycle(_internal_edges(broker_modules())) is None


def test_cycle_finder_sees_a_type_checking_cycle() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from broker.a import A\n"
    graph = {"broker.a": {"broker.b"}, "broker.b": imported_modules(source, "broker.b")}
    assert find_cycle(_internal_edges(graph)) == ["broker.a", "broker.b", "broker.a"]


# -- tests mirror the package layout ------------------------------------------------------------

# Checks about the whole repository rather than one module live at the top of tests/unit/.
CROSS_CUTTING_TESTS = {"test_layering.py", "test_compose.py", "test_fresh_machine.py"}


def test_unit_tests_mirror_the_packages() -> None:
    """The test of ``broker/txn/coordinator.py`` is ``tests/unit/broker/txn/test_coordinator.py``:
    every directory under tests/unit/ is a package of the project, and only the cross-cutting
    checks sit at the top."""
    unit = ROOT / "tests" / "unit"
    top = sorted(p.name for p in unit.glob("test_*.py") if p.name not in CROSS_CUTTING_TESTS)
    assert top == [], (f"move {top} under tests/unit/<package>/ beside the module they test "
                       "(git mv tests/unit/test_x.py tests/unit/broker/.../test_x.py)")
    for directory in sorted(d for d in unit.rglob("*") if d.is_dir() and d.name != "__pycache__"):
        package = ROOT / directory.relative_to(unit)
        assert (package / "__init__.py").is_file(), f"{directory} mirrors no package"
        assert (directory / "__init__.py").is_file(), f"{directory} needs an __init__.py"


# -- inside client/: one clock -------------------------------------------------------------------
#
# Every reading of time in the client goes through the injected ``client.clock.Clock`` (durations
# waited for on the loop are trio's): no module of the client's engine or facades imports ``time``.
# (client/cli/ is the command line's, which times what it prints.)


def test_the_client_reads_time_only_through_its_clock() -> None:
    readers = []
    for path in sorted((ROOT / "client").rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[1] == "cli" or rel.as_posix() == "client/clock.py":
            continue
        module = ".".join(rel.with_suffix("").parts)
        if {"time", "datetime"} & {n.split(".")[0] for n in imported_modules(path.read_text(), module)}:
            readers.append(rel.as_posix())
    assert readers == []


def test_no_broker_module_over_700_lines() -> None:
    """Issue 41's bound: a module of ``broker/`` over 700 lines is doing two jobs; split it by
    what it does (the record-batch codec, the one exception, lives in ``protocol/``)."""
    over = {}
    for path in sorted((ROOT / "broker").rglob("*.py")):
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > 700:
            over[str(path.relative_to(ROOT))] = lines
    assert over == {}
