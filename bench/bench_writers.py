"""Many writers: 8 processes appending small batches (1,000 rows) to one table at once.

Each process appends 15 times (120 commits in all) to one DAY table — on the embedded
SQLite catalog, on PostgreSQL (a fresh schema, dropped afterwards; skipped with the
reason when unreachable), and with deltalake's ``write_deltalake(..., mode="append")``
the same way. Processes start together (a start file); the clock runs from the start
signal until the last one ends. Reports commits/s in total, failed writes, and checks
that every acknowledged append's rows are there.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, print_figures, result, scratch_dir  # noqa: E402
from bench_catalog import postgres_schema, small_table  # noqa: E402

WRITERS = 8
APPENDS = 15
ROWS = 1_000


def _writer(kind: str, target: str, catalog: str | None, go: str, out: str) -> None:
    """One process: wait for the start file, append APPENDS times, report."""
    data = small_table(ROWS)
    ok = failed = 0
    if kind == "lamina":
        import lamina

        cat = lamina.connect(catalog=catalog, warehouse=target)
        t = cat.load_table("events")
    while not os.path.exists(go):
        time.sleep(0.002)
    for _ in range(APPENDS):
        try:
            if kind == "lamina":
                t.append(data)
            else:
                from deltalake import write_deltalake

                write_deltalake(target, data, mode="append")
            ok += 1
        except Exception as exc:  # noqa: BLE001 - counted: that is the figure
            failed += 1
            print(f"{kind} write failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    Path(out).write_text(f"{ok} {failed} {time.time()}")


def run(kind: str, root: str, catalog: str | None = None) -> dict[str, Any]:
    """All writers of one kind; commits/s from the start signal to the last finish."""
    if kind == "lamina":
        import lamina

        target = os.path.join(root, "wh")
        with lamina.connect(catalog=catalog, warehouse=target) as cat:
            cat.create_table(
                "events", small_table(1).schema, time_column="ts", segment_granularity="DAY"
            )
    else:
        target = os.path.join(root, "delta")
    go = os.path.join(root, "go")
    ctx = mp.get_context("spawn")
    outs = [os.path.join(root, f"out{w}") for w in range(WRITERS)]
    procs = [
        ctx.Process(target=_writer, args=(kind, target, catalog, go, outs[w]))
        for w in range(WRITERS)
    ]
    for p in procs:
        p.start()
    time.sleep(3.0)  # imported and connected
    start = time.time()
    Path(go).touch()
    for p in procs:
        p.join(600)
    done = [Path(o).read_text().split() for o in outs if os.path.exists(o)]
    ok = sum(int(d[0]) for d in done)
    failed = sum(int(d[1]) for d in done) + (WRITERS - len(done)) * APPENDS
    secs = max(float(d[2]) for d in done) - start if done else float("nan")
    if kind == "lamina":
        import lamina

        with lamina.connect(catalog=catalog, warehouse=target) as cat:
            t = cat.load_table("events")
            rows = t.count()
            commits = sum(1 for c in t.history() if c.state == "COMPLETED")
    else:
        from deltalake import DeltaTable

        dt = DeltaTable(target)
        rows = dt.to_pyarrow_table(columns=["id"]).num_rows
        commits = dt.version() + 1
    assert rows == ok * ROWS, f"{kind}: {rows} rows for {ok} acknowledged appends"
    return {"ok": ok, "failed": failed, "seconds": secs, "rate": ok / secs, "commits": commits}


def main(quick: bool = False) -> dict[str, Any]:
    """8 concurrent appenders on SQLite, PostgreSQL and deltalake."""
    got: dict[str, dict[str, Any]] = {}
    pg_url, pg_note, pg_drop = postgres_schema()
    try:
        with scratch_dir("writers-sqlite") as d:
            got["sqlite"] = run("lamina", d)
        if pg_url is not None:
            with scratch_dir("writers-pg") as d:
                got["postgres"] = run("lamina", d, pg_url)
        else:
            print(f"  skipping PostgreSQL: {pg_note}")
        with scratch_dir("writers-delta") as d:
            got["deltalake"] = run("delta", d)
    finally:
        if pg_drop is not None:
            pg_drop()
    total = WRITERS * APPENDS
    figures = []
    for key, label, target in (
        ("sqlite", "lamina, SQLite", ">= 100"),
        ("postgres", "lamina, PostgreSQL", ">= 100"),
        ("deltalake", "deltalake", None),
    ):
        g = got.get(key)
        note = "skipped: " + pg_note if g is None else f"{g['failed']} of {total} writes failed"
        figures.append(
            figure(
                f"{label}: commits/s, {WRITERS} writers",
                g and g["rate"],
                "commits/s",
                target,
                note=note,
            )
        )
        if g is not None and key != "deltalake":
            figures.append(figure(f"{label}: failed writes", g["failed"], "writes", "<= 0"))
    print_figures(
        f"Many writers: {WRITERS} processes x {APPENDS} appends of {ROWS:,} rows", figures
    )
    return result(
        "writers",
        {"writers": WRITERS, "appends_each": APPENDS, "rows_per_append": ROWS},
        figures,
        got,
    )


if __name__ == "__main__":
    cli(main, "writers")
