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
    ("lamina.errors",),
    ("lamina.core",),
    ("lamina.meta", "lamina.io"),
    ("lamina.engines",),
    ("lamina.context",),
    ("lamina.write", "lamina.read", "lamina.changes"),
    ("lamina.maintenance",),
    (
        "lamina.table",
        "lamina.table_read",
        "lamina.table_definition",
        "lamina.table_write",
        "lamina.transaction",
        "lamina.push",
        "lamina.compaction",
        "lamina.compaction_scope",
        "lamina.compaction_span",
        "lamina.autocompaction",
        "lamina.upsert",
        "lamina.upsert_read",
        "lamina.upsert_tx",
        "lamina.evolve",
    ),
    ("lamina.catalog",),
    ("lamina.cli", "lamina.server", "lamina.rest", "lamina"),
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
            if node.module == "lamina":  # from lamina import x: x is a module or a name
                out += [(node.lineno, f"lamina.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, node.module))
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


def test_no_private_cross_module_calls() -> None:
    """``module._name`` / ``obj._name`` of another lamina module is not used."""
    offenders = []
    for path in MODULES:
        tree = ast.parse(path.read_text())
        imported_modules = {
            a.asname or a.name.rsplit(".", 1)[-1]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lamina")
            for a in node.names
        }
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
                and isinstance(node.value, ast.Name)
                and node.value.id in imported_modules
            ):
                offenders.append(
                    f"{_module_name(path)}:{node.lineno} uses {node.value.id}.{node.attr}"
                )
    assert not offenders, offenders


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
            if allowed is None or target in allowed:
                continue
            offenders.append(f"{me}:{line} imports {target}")
    assert not offenders, offenders
