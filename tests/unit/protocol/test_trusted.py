"""Every trusted constructor call passes exactly the fields of its NamedTuple (protocol/trusted.py).

The scan reads broker/, protocol/ and client/: a module-level ``name = trusted(Cls)`` makes
``name`` a trusted constructor; each call of it must pass one tuple literal, no ``*starred``
part, with ``len(Cls._fields)`` values. A call that passes a computed tuple is listed in
``COMPUTED`` with the test that checks its length another way.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from protocol.trusted import trusted

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("broker", "protocol", "client")
# (file, constructor): calls whose tuple is computed, each checked by a test below.
COMPUTED = {("protocol/records.py", "_new_batch_header")}


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def trusted_calls() -> list[tuple[str, int, str, type, ast.Call]]:
    """(file, line, constructor name, class, call) for every call of a trusted constructor, in
    the module that makes it or in one that imports it by name."""
    trees = {path: ast.parse(path.read_text(encoding="utf-8"))
             for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}
    made: dict[str, dict[str, type]] = {}  # module -> constructor name -> class
    for path, tree in trees.items():
        names = {
            target.id
            for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == "trusted"
            for target in node.targets if isinstance(target, ast.Name)
        }
        if names:
            module = importlib.import_module(_module_name(path))
            made[_module_name(path)] = {name: getattr(module, name).args[0] for name in names}
    found = []
    for path, tree in trees.items():
        classes = dict(made.get(_module_name(path), {}))
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module in made:
                for alias in node.names:
                    if alias.name in made[node.module]:
                        classes[alias.asname or alias.name] = made[node.module][alias.name]
        if not classes:
            continue
        aliases = {  # ``new = _new_record`` inside a function
            target.id: node.value.id
            for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name) and node.value.id in classes
            for target in node.targets if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                name = aliases.get(node.func.id, node.func.id)
                if name in classes:
                    rel = path.relative_to(ROOT).as_posix()
                    found.append((rel, node.lineno, name, classes[name], node))
    return found


def problems(rel: str, line: int, name: str, cls: type, call: ast.Call) -> list[str]:
    args = call.args
    if len(args) != 1 or call.keywords or not isinstance(args[0], ast.Tuple) or any(
        isinstance(e, ast.Starred) for e in args[0].elts
    ):
        return [f"{rel}:{line} {name}: pass one tuple literal of {cls.__name__}'s fields"]
    if len(args[0].elts) != len(cls._fields):
        return [f"{rel}:{line} {name}: {len(args[0].elts)} values for "
                f"{len(cls._fields)} fields of {cls.__name__}"]
    return []


def test_every_trusted_call_passes_all_the_fields() -> None:
    calls = trusted_calls()
    assert len(calls) >= 10  # the scan sees the request path's constructors
    bad = [problem for rel, line, name, cls, call in calls if (rel, name) not in COMPUTED
           for problem in problems(rel, line, name, cls, call)]
    assert bad == []


@pytest.mark.parametrize("source", ["new((1, 2, 3))", "new((*old[:-1], 4))", "new(values)",
                                    "new((1, 2, 3, 4, 5))"])
def test_the_check_refuses_a_wrong_call(source: str) -> None:
    from protocol.headers import RequestHeader

    call = ast.parse(source).body[0].value  # type: ignore[attr-defined]
    assert problems("x.py", 1, "new", RequestHeader, call) != []
    assert problems("x.py", 1, "new", RequestHeader,
                    ast.parse("new((1, 2, 3, 4))").body[0].value) == []  # type: ignore[attr-defined]


def test_tuple_new_is_only_in_the_trusted_module() -> None:
    users = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "protocol" / "trusted.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Attribute) and node.attr == "__new__"
                        and getattr(node.value, "id", None) == "tuple"):
                    users.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert users == []


def test_the_batch_header_struct_has_the_header_fields() -> None:
    from protocol.records import _HEADER, BatchHeader

    assert len(_HEADER.unpack_from(bytes(_HEADER.size))) == len(BatchHeader._fields)


def test_trusted_builds_the_same_tuple_and_refuses_other_classes() -> None:
    from protocol.headers import RequestHeader

    built = trusted(RequestHeader)((18, 3, 7, "c"))
    assert built == RequestHeader(18, 3, 7, "c") and type(built) is RequestHeader
    with pytest.raises(TypeError):
        trusted(dict)  # type: ignore[arg-type]
