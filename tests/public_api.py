"""The public surface of lamina as plain data: what ``tests/test_public_api.py`` compares
against the snapshot ``tests/data/public_api.json`` taken before a refactoring.

Run ``python -m tests.public_api`` to rewrite the snapshot (only when the public API is
meant to change)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).parent / "data" / "public_api.json"

#: classes users get from lamina (``t.transaction()``, ``t.push()``) and never
#: construct: their constructors are not part of the API
MADE_BY_LAMINA = {"Transaction", "ConsistentPush"}


def _members(cls: type, constructor: bool = True) -> dict[str, str]:
    """Each public attribute of a class: its signature, or what kind of thing it is;
    ``constructor``: ``__init__`` too (not for objects only lamina makes)."""
    import enum

    out: dict[str, str] = {}
    if issubclass(cls, enum.Enum):
        out["members"] = ", ".join(f"{m.name}={m.value!r}" for m in cls)  # type: ignore[var-annotated]
    for name in sorted(dir(cls)):
        if name.startswith("_") and name not in ("__enter__", "__exit__", "__init__"):
            continue
        if name == "__init__" and not constructor:
            continue
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or not owner.__module__.startswith("lamina"):
            continue  # inherited from the standard library (str, Enum, tuple)
        value = inspect.getattr_static(cls, name)
        if isinstance(value, property):
            out[name] = "property"
        elif isinstance(value, (staticmethod, classmethod)):
            out[name] = f"{type(value).__name__}{inspect.signature(value.__func__)}"
        elif callable(value):
            try:
                out[name] = f"def{inspect.signature(value)}"
            except (TypeError, ValueError):
                out[name] = "callable"
        else:
            out[name] = f"attribute: {type(value).__name__}"
    return out


def _cli(command: Any, prefix: str = "lamina") -> dict[str, Any]:

    out: dict[str, Any] = {}
    params = []
    for p in command.params:
        params.append(
            {
                "name": p.name,
                "opts": sorted([*p.opts, *getattr(p, "secondary_opts", [])]),
                "kind": type(p).__name__,
                "type": str(getattr(p, "type", "")),
                "required": p.required,
                "multiple": getattr(p, "multiple", False),
                "default": "callable" if callable(p.default) else repr(p.default),
            }
        )
    out[prefix] = params
    if isinstance(getattr(command, "commands", None), dict):
        for name in sorted(command.commands):
            out.update(_cli(command.commands[name], f"{prefix} {name}"))
    return out


def surface() -> dict[str, Any]:
    """Everything public: names, classes' members and signatures, errors, CLI, REST."""
    import typer

    import lamina
    from lamina import errors
    from lamina.cli import app

    cat = lamina.Catalog
    table = lamina.Table
    tx = inspect.signature(table.transaction).return_annotation
    classes: dict[str, Any] = {"Catalog": cat, "Table": table}
    for name in ("Commit", "CommitState", "Granularity", "Interval", "Segment"):
        classes[name] = getattr(lamina, name)
    import importlib

    for label, ann in (("Transaction", tx), ("ConsistentPush", "ConsistentPush")):
        # Returned objects: found by their class name among the table's methods' modules.
        for mod in _table_modules():
            obj = getattr(importlib.import_module(mod), str(ann).split(".")[-1], None)
            if isinstance(obj, type):
                classes[label] = obj
                break
    error_names = sorted(n for n in dir(errors) if _is_error(getattr(errors, n)))
    rest = _rest_spec()
    return {
        "__all__": sorted(lamina.__all__),
        "connect": f"def{inspect.signature(lamina.connect)}",
        "classes": {k: _members(v, k not in MADE_BY_LAMINA) for k, v in sorted(classes.items())},
        "errors": {
            n: [b.__name__ for b in getattr(errors, n).__mro__[1:] if b is not object]
            for n in error_names
        },
        "cli": _cli(typer.main.get_command(app)),
        "rest": rest,
    }


def _table_modules() -> list[str]:
    """Where Transaction and ConsistentPush may live (before and after a move)."""
    return [
        "lamina.operations.transaction",
        "lamina.operations.push",
        "lamina.operations.transaction",
        "lamina.operations.push",
    ]


def _is_error(value: Any) -> bool:
    from lamina.errors import LaminaError

    return isinstance(value, type) and issubclass(value, LaminaError)


def _rest_spec() -> dict[str, Any]:
    import tempfile

    import lamina

    try:
        from lamina.rest import create_app
    except ImportError:  # before the REST trio became a package
        from lamina.rest import create_app  # type: ignore[no-redef]
    with tempfile.TemporaryDirectory() as tmp:
        cat = lamina.connect(warehouse=tmp)
        try:
            spec: dict[str, Any] = create_app(cat).openapi()
        finally:
            cat.close()
    return spec


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(surface(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")
