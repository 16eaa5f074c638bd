"""The import rules of DESIGN.md section 2, checked on the source with ``ast``.

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
