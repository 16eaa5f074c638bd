"""The fast path has one home: codecs are generated from the declarations
(``protocol/messages/_codegen.py``) and registered with them, handlers reach them only through
``decode_request`` / ``encode_response`` / ``encode_response_parts``, and the cost idioms of the
request path (comments that justify a loop, a partial or an unpacking by its microseconds) live
there and nowhere else (bench/README.md: a micro-optimization is worth its idiom only with a gain
measured over the wire)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HOME = {"protocol/messages/_codegen.py", "protocol/trusted.py"}

COST_IDIOMS = re.compile(
    r"no comprehension|rather than comprehensions|not a closure|no closures|variables cells"
    r"|descriptor call|a call each|a frame each|a frame per|no generator per", re.IGNORECASE)
CODEC_CALLS = re.compile(r"struct\.Struct\(|unpack_from\(|tuple\.__new__")


def _sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_cost_comment_outside_the_home() -> None:
    found = [f"{_rel(p)}:{n}: {line.strip()}"
             for p in _sources("broker", "protocol") if _rel(p) not in HOME
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if "#" in line and COST_IDIOMS.search(line.split("#", 1)[1])
             or COST_IDIOMS.search(line) and line.strip().startswith(("(", '"""'))]
    assert found == []


def test_no_hand_written_codec_in_the_declarations() -> None:
    found = []
    for path in _sources("protocol/messages"):
        rel = _rel(path)
        if rel in HOME or rel.endswith(("_declare.py", "_registry.py")):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.col_offset == 0:
                text = ast.get_source_segment(path.read_text(), node) or ""
                if CODEC_CALLS.search(text):
                    found.append(f"{rel}: {node.name}")
    assert found == []


def test_handlers_call_only_the_registered_codecs() -> None:
    allowed_modules = {"protocol.messages", "protocol.messages.api_versions"}
    found = []
    for path in _sources("broker/handlers"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "protocol.messages"):
                names = {a.name for a in node.names}
                if node.module not in allowed_modules:
                    found.append(f"{_rel(path)}: from {node.module} import {sorted(names)}")
    assert found == []


def test_every_fast_codec_is_generated() -> None:
    # no module of protocol/messages registers a codec of its own: only the generator does
    found = [f"{_rel(p)}:{n}" for p in _sources("protocol", "broker", "client")
             if _rel(p) not in {"protocol/messages/_codegen.py", "protocol/messages/_registry.py"}
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"register_fast\(|\.fast_(request|response)\w* = ", line)]
    assert found == []
