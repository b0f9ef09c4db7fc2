"""Task locks: acquire + release, uncontended, on SQLite and PostgreSQL.

One transaction after another takes a REPLACE lock on a day of a table and aborts
(releasing it): the time of ``t.transaction(lock=...)`` opening (commit opened, lock
requested and granted, base moved) plus the abort, against the same transaction
without a lock — so the lock's own cost is the difference. p50 and p99 of 200.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir  # noqa: E402
from bench_catalog import postgres_schema, small_table  # noqa: E402

import lamina  # noqa: E402

N = 200


def p99(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(len(xs) * 0.99) - 1)]


def measure(catalog: str | None, root: str, n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"locked": [], "plain": []}
    with lamina.connect(catalog=catalog, warehouse=os.path.join(root, "wh")) as cat:
        t = cat.create_table("l", small_table(1).schema, time_column="ts")
        for i in range(n):
            for kind in ("locked", "plain") if i % 2 else ("plain", "locked"):
                kw: dict[str, Any] = {}
                if kind == "locked":
                    kw = {"lock": "REPLACE", "interval": ("2024-01-01", "2024-01-02")}
                t0 = time.perf_counter()
                tx = t.transaction(**kw)
                _ = tx.base_seq  # opens the commit (and takes the lock)
                tx.abort()
                out[kind].append(time.perf_counter() - t0)
    return out


def main(quick: bool = False) -> dict[str, Any]:
    """Lock acquire + release latency, uncontended, both catalogs."""
    n = 30 if quick else N
    got: dict[str, dict[str, list[float]]] = {}
    pg_url, pg_note, pg_drop = postgres_schema()
    try:
        with scratch_dir("locks-sqlite") as d:
            got["SQLite"] = measure(None, d, n)
        if pg_url is not None:
            with scratch_dir("locks-pg") as d:
                got["PostgreSQL"] = measure(pg_url, d, n)
    finally:
        if pg_drop is not None:
            pg_drop()
    figures = []
    for name, m in got.items():
        extra = [a - b for a, b in zip(m["locked"], m["plain"], strict=True)]
        figures += [
            figure(f"{name}: open + abort with a lock, p50", median(m["locked"]) * 1e3, "ms"),
            figure(f"{name}: open + abort with a lock, p99", p99(m["locked"]) * 1e3, "ms"),
            figure(f"{name}: the same without a lock, p50", median(m["plain"]) * 1e3, "ms"),
            figure(f"{name}: lock acquire + release, p50", median(extra) * 1e3, "ms"),
            figure(f"{name}: lock acquire + release, p99", p99(extra) * 1e3, "ms"),
        ]
    if pg_url is None:
        figures.append(figure("PostgreSQL", None, "ms", note="skipped: " + pg_note))
    print_figures(f"Task locks, uncontended: {n} transactions each way", figures)
    return result("locks", {"transactions": n}, figures, got)


if __name__ == "__main__":
    cli(main, "locks")
