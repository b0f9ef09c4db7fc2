"""The package's layers: each module imports only from its own layer or lower ones.

Every import counts — top-level, inside functions, and under TYPE_CHECKING — so a
knowledge cycle (a lower layer naming a higher one) fails here as well.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "lamina"

#: Lowest first. A module belongs to the first layer whose prefix matches its name.
LAYERS: list[tuple[str, ...]] = [
    ("lamina.errors", "lamina.failpoints"),
    ("lamina.core",),
    ("lamina.meta", "lamina.io"),
    ("lamina.engines",),
    ("lamina.context",),
    ("lamina.write", "lamina.read", "lamina.changes"),
    ("lamina.maintenance",),
    ("lamina.operations",),
    ("lamina.table",),
    ("lamina.catalog",),
    ("lamina.cli", "lamina.rest", "lamina.datasource", "lamina"),
]

#: What the pure layer may import from outside lamina (besides the standard library).
CORE_THIRD_PARTY = {"pyarrow", "sortedcontainers", "numpy"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(module: str) -> int:
    for i, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{module} is in no layer; add it to LAYERS")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in the file, wherever it stands."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # from lamina.x import y: y is a module (lamina.x.y) or a name of lamina.x
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


MODULES = sorted(SRC.rglob("*.py"))


def test_every_module_is_found() -> None:
    names = {_module_name(p) for p in MODULES}
    assert {"lamina.core.model", "lamina.meta.publish", "lamina.table"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_no_upward_imports(path: Path) -> None:
    me = _module_name(path)
    mine = _layer(me)
    upward = []
    for line, target in _imports(path):
        if not target.startswith("lamina"):
            continue
        known = target
        while known not in {_module_name(p) for p in MODULES} and "." in known:
            known = known.rsplit(".", 1)[0]  # from lamina.x import name
        if _layer(known) > mine:
            upward.append(f"line {line}: {target} (layer {_layer(known)} > {mine})")
    assert not upward, f"{me} imports upward: {upward}"


@pytest.mark.parametrize(
    "path", [p for p in MODULES if _module_name(p).startswith("lamina.core")], ids=str
)
def test_core_is_pure(path: Path) -> None:
    """No SQL, files, engines or processes in the pure layer."""
    stdlib = set(sys.stdlib_module_names)
    banned_stdlib = {"os", "socket", "subprocess", "sqlite3", "threading", "shutil", "pathlib"}
    bad = []
    for line, target in _imports(path):
        top = target.split(".")[0]
        if top in ("lamina", "__future__"):
            continue
        if top in stdlib and top not in banned_stdlib:
            continue
        if top in CORE_THIRD_PARTY and target not in ("pyarrow.parquet", "pyarrow.dataset"):
            continue
        bad.append(f"line {line}: {target}")
    assert not bad, f"{_module_name(path)} is in the pure layer but imports {bad}"


def _defined(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, assigned or annotated
    names and attributes (``self._x = ...``, ``_x: int`` in a class), parameters."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.alias):
            out.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(node.value)  # __slots__ = ("_schema", ...)
    return {n for n in out if n.startswith("_") and not n.startswith("__")}


def test_no_private_cross_module_calls() -> None:
    """No ``obj._name`` or ``module._name`` whose ``_name`` is defined only in another
    lamina module (a private name is private to the module that defines it), and no
    ``from lamina... import _name``."""
    trees = {path: ast.parse(path.read_text()) for path in MODULES}
    defined = {path: _defined(tree) for path, tree in trees.items()}
    anywhere = set().union(*defined.values())
    offenders = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("lamina")
                and any(a.name.startswith("_") for a in node.names)
            ):
                offenders.append(f"{_module_name(path)}:{node.lineno} imports a private name")
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.attr in anywhere  # defined in lamina (not pyarrow's, Python's)
                and node.attr not in defined[path]
            ):
                offenders.append(f"{_module_name(path)}:{node.lineno} uses .{node.attr}")
    assert not offenders, offenders


def _edges(path: Path, names: set[str]) -> set[str]:
    """The lamina modules ``path`` imports, wherever the import stands (``from
    lamina.x import y``: ``lamina.x.y`` when that is a module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names else node.module
                for a in node.names
            ]
        else:
            continue
        for t in targets:
            while t not in names and "." in t:
                t = t.rsplit(".", 1)[0]
            if t in names and t != "lamina":
                out.add(t)
    return out


def test_no_import_cycles_up_to_the_table_facade() -> None:
    """Among the modules of ``table/``, ``operations/`` and every layer below them, no
    import cycle, type-only and function-local imports included."""
    top = _layer("lamina.table")
    paths = {_module_name(p): p for p in MODULES if _layer(_module_name(p)) <= top}
    graph = {m: _edges(p, set(paths)) - {m} for m, p in paths.items()}
    cycles = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(" -> ".join([*path[path.index(n) :], n]))
            elif n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles


def test_function_local_imports_say_why() -> None:
    """An import inside a function is for a heavy or optional library (or a module
    that loads one): its line, or the line before, has a comment saying which."""
    bare = []
    for path in MODULES:
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    around = lines[node.lineno - 2 : node.end_lineno]
                    if not any("#" in line for line in around):
                        bare.append(f"{_module_name(path)}:{node.lineno}")
    assert not bare, f"{len(bare)} function-local imports without a reason: {bare}"


#: The catalog modules that may import lamina.io, and what from it (None: anything).
META_IO: dict[str, tuple[str, ...] | None] = {
    "lamina.meta.keyindex": None,  # reads data files, reads and writes index snapshots
    "lamina.meta.publish": ("lamina.io.warehouse",),  # the Warehouse it hands on
}


def test_only_the_key_index_imports_io_from_meta() -> None:
    """In ``lamina.meta``, only the key index package reaches the warehouse's files
    (``lamina.io``); ``lamina.meta.publish`` names the Warehouse it passes to it."""
    offenders = []
    for path in MODULES:
        me = _module_name(path)
        if not (me == "lamina.meta" or me.startswith("lamina.meta.")):
            continue
        owner = next((m for m in META_IO if me == m or me.startswith(m + ".")), None)
        allowed = META_IO[owner] if owner is not None else ()
        for line, target in _imports(path):
            if target != "lamina.io" and not target.startswith("lamina.io."):
                continue
            if allowed is None or any(target == a or target.startswith(a + ".") for a in allowed):
                continue
            offenders.append(f"{me}:{line} imports {target}")
    assert not offenders, offenders
