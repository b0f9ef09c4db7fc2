"""Shared helpers for the lamina benchmarks: timing, figures, tables, JSON, CLI.

Every benchmark module has ``main(quick: bool = False) -> dict`` returning::

    {"name": ..., "params": {...}, "figures": [figure, ...], "details": {...}}

where a figure is ``{"metric", "value", "unit", "target", "ok", "note"}`` (see
:func:`figure`). Ratios are always lamina / baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
# Scratch space for the data the benchmarks write (fresh directories per repetition).
SCRATCH = os.environ.get("LAMINA_BENCH_TMP") or tempfile.gettempdir()


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Wall seconds of one call, and its result."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[str]:
    """A fresh empty directory, removed afterwards."""
    path = tempfile.mkdtemp(prefix=f"lamina-bench-{prefix}-", dir=SCRATCH)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def figure(
    metric: str,
    value: float | None,
    unit: str,
    target: str | None = None,
    note: str = "",
) -> dict[str, Any]:
    """One reported number; ``target`` like ``"<= 1.25"`` or ``">= 100"`` (None: info)."""
    return {
        "metric": metric,
        "value": value,
        "unit": unit,
        "target": target,
        "ok": check(value, target),
        "note": note,
    }


def check(value: float | None, target: str | None) -> bool | None:
    if target is None or value is None:
        return None
    op, _, bound = target.partition(" ")
    b = float(bound)
    return {"<=": value <= b, "<": value < b, ">=": value >= b, ">": value > b}[op]


def fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit in ("x", "ratio"):
        return f"{value:.3f}x"
    if unit == "s":
        return f"{value:.3f} s" if value >= 0.01 else f"{value * 1000:.2f} ms"
    if unit == "ms":
        return f"{value:.2f} ms"
    if abs(value) >= 1000:
        return f"{value:,.0f} {unit}"
    return f"{value:.2f} {unit}" if isinstance(value, float) else f"{value} {unit}"


def status(ok: bool | None) -> str:
    return {True: "PASS", False: "FAIL", None: "-"}[ok]


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A rich table when rich is installed, else aligned plain text."""
    try:
        from rich import box
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a lamina dependency
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
        print(f"\n{title}")
        print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
        print("  ".join("-" * w for w in widths))
        for r in rows:
            print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
        return
    table = Table(title=title, box=box.SIMPLE_HEAVY, title_justify="left")
    for c in columns:
        numeric = c in ("value", "target", "status")
        table.add_column(c, justify="right" if numeric else "left", overflow="fold")
    for r in rows:
        style = "red" if "FAIL" in r else None
        table.add_row(*r, style=style)
    Console(width=max(150, shutil.get_terminal_size((150, 20)).columns)).print(table)


def print_figures(title: str, figures: list[dict[str, Any]]) -> None:
    rows = [
        [
            f["metric"],
            fmt_value(f["value"], f["unit"]),
            f["target"] or "-",
            status(f["ok"]),
            f["note"],
        ]
        for f in figures
    ]
    print_table(title, ["metric", "value", "target", "status", "note"], rows)


def environment() -> dict[str, Any]:
    import duckdb
    import pyarrow

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "pyarrow": pyarrow.__version__,
        "duckdb": duckdb.__version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        # other work on this machine skews absolute numbers; ratios are same-run
        "loadavg_1m_5m_15m": list(os.getloadavg()),
    }


def result(
    name: str, params: dict[str, Any], figures: list[dict[str, Any]], details: dict[str, Any]
) -> dict[str, Any]:
    return {
        "name": name,
        "params": params,
        "figures": figures,
        "details": details,
        "env": environment(),
    }


def write_json(data: dict[str, Any], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


def cli(main: Callable[..., dict[str, Any]], name: str) -> None:
    """``python bench/bench_X.py [--quick] [--json PATH]``."""
    ap = argparse.ArgumentParser(description=(main.__doc__ or name).strip().splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--json", default=None, help="write results here (default: none)")
    args = ap.parse_args()
    out = main(quick=args.quick)
    out["quick"] = args.quick
    if args.json:
        write_json(out, args.json)
    sys.stdout.flush()
