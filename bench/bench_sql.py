"""SQL: ``cat.sql`` vs DuckDB reading the same Parquet files directly.

A 30-day table (3M rows, DAY segments, written by the lamina local writer). Two
queries, the same text on both sides:

* a group-by over the whole table;
* the same group-by over one day (a ``ts`` range in WHERE).

lamina: the full ``cat.sql`` cost (catalog snapshot, planning, time-bound pruning, view
creation, execution, Arrow result). Baseline: a fresh DuckDB connection with a view
``events`` over ``read_parquet([...every file of t.scan()...], hive_partitioning=false)``
and the same query. Warm page cache; interleaved repetitions; medians.

Also checks that the one-day query plans only that day's segments (``time_bound`` +
``plan_scan`` file count, and DuckDB's EXPLAIN ANALYZE "Total Files Read" over a view
registered with ``register_view``).
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import duckdb
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402
from bench_local_append import make_table  # noqa: E402

import lamina  # noqa: E402
from lamina.core.scan import plan_scan  # noqa: E402
from lamina.engines.duckdb import register_view, time_bound  # noqa: E402

QUERIES = {
    "group-by, whole table": (
        "SELECT name, count(*) AS n, sum(value) AS total, max(qty) AS top FROM events GROUP BY name"
    ),
    "group-by, one day": (
        "SELECT name, count(*) AS n, sum(value) AS total, max(qty) AS top "
        "FROM events WHERE ts >= TIMESTAMP '2024-01-15 00:00:00' "
        "AND ts < TIMESTAMP '2024-01-16 00:00:00' GROUP BY name"
    ),
}
ONE_DAY = "group-by, one day"


def duckdb_direct(files: list[str], query: str) -> pa.Table:
    """What a user without lamina runs: a fresh connection, a view over the files."""
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone='UTC'")
        listing = "[" + ", ".join(f"'{f}'" for f in files) + "]"
        con.execute(
            f"CREATE VIEW events AS SELECT * FROM read_parquet({listing}, hive_partitioning=false)"
        )
        rel = con.sql(query)
        fetch = getattr(rel, "to_arrow_table", None) or rel.arrow  # as lamina fetches
        out: pa.Table = fetch()
        return out
    finally:
        con.close()


def files_read(con: duckdb.DuckDBPyConnection, query: str) -> int:
    """Sum of DuckDB's "Total Files Read" over the scans of EXPLAIN ANALYZE."""
    text = "\n".join(str(r[1]) for r in con.execute(f"EXPLAIN ANALYZE {query}").fetchall())
    return sum(int(n) for n in re.findall(r"Total Files Read:\s*(\d+)", text))


def lamina_parts(cat: lamina.Catalog, query: str, reps: int) -> dict[str, float]:
    """Median seconds of the lamina-side steps of ``cat.sql`` (as run_sql does them)."""
    steps: dict[str, list[float]] = {
        "catalog (list, load, snapshot)": [],
        "time_bound": [],
        "plan_scan": [],
        "register_view": [],
    }
    for _ in range(reps):
        con = duckdb.connect()
        con.execute("SET TimeZone='UTC'")

        def catalog_part() -> Any:
            cat.list_tables()
            return cat.load_table("events")

        s, t = timed(catalog_part)
        s2, snap = timed(t.snapshot)
        steps["catalog (list, load, snapshot)"].append(s + s2)
        s, bound = timed(lambda c=con, tt=t: time_bound(c, query, "events", "ts", tt.schema))
        steps["time_bound"].append(s)
        s, plan = timed(lambda sn=snap, b=bound: plan_scan(sn, b))
        steps["plan_scan"].append(s)
        s, _ = timed(lambda c=con, p=plan: register_view(c, "events", p))
        steps["register_view"].append(s)
        con.close()
    return {k: median(v) for k, v in steps.items()}


def canonical(t: pa.Table) -> list[tuple[Any, ...]]:
    rows = t.sort_by("name").to_pylist()
    return [(r["name"], r["n"], round(r["total"], 6), r["top"]) for r in rows]


def main(quick: bool = False) -> dict[str, Any]:
    """SQL: cat.sql vs DuckDB over the same files (whole table and one-day filter)."""
    rows = 300_000 if quick else 3_000_000
    reps = 5 if quick else 9
    with scratch_dir("sql") as root:
        cat = lamina.connect(warehouse=os.path.join(root, "wh"))
        data = make_table(rows, days=30, seed=1)
        t = cat.create_table("events", data.schema, time_column="ts", segment_granularity="DAY")
        write_s, _ = timed(lambda: t.append(data))
        plan = t.scan()
        files = plan.whole_files
        print(f"  wrote {rows:,} rows in {len(plan.tasks)} segments ({write_s:.2f}s)")
        assert len(files) == len(plan.tasks) == 30

        # pruning check for the one-day query
        q = QUERIES[ONE_DAY]
        con = duckdb.connect()
        con.execute("SET TimeZone='UTC'")
        bound = time_bound(con, q, "events", "ts", t.schema)
        day_plan = plan_scan(t.snapshot(), bound)
        register_view(con, "events", day_plan)
        lamina_files_read = files_read(con, q)
        con.close()
        con = duckdb.connect()
        listing = "[" + ", ".join(f"'{f}'" for f in files) + "]"
        con.execute(
            f"CREATE VIEW events AS SELECT * FROM read_parquet({listing}, hive_partitioning=false)"
        )
        direct_files_read = files_read(con, q)
        con.close()
        print(
            f"  one-day query: bound {bound}, {len(day_plan.tasks)} segment(s) planned, "
            f"DuckDB read {lamina_files_read} file(s) via lamina view, "
            f"{direct_files_read} via read_parquet of all files"
        )

        times: dict[str, dict[str, list[float]]] = {}
        for label, query in QUERIES.items():
            a, b = cat.sql(query), duckdb_direct(files, query)  # warm-up + same answer
            assert canonical(a) == canonical(b), f"{label}: lamina and DuckDB disagree"
            tl, td = [], []
            for rep in range(reps):
                first, second = (tl, td) if rep % 2 == 0 else (td, tl)
                for sink in (first, second):
                    if sink is tl:
                        tl.append(timed(lambda q=query: cat.sql(q))[0])
                    else:
                        td.append(timed(lambda q=query: duckdb_direct(files, q))[0])
            times[label] = {"lamina": tl, "duckdb": td}
            print(
                f"  {label}: lamina {median(tl) * 1000:.1f} ms, duckdb {median(td) * 1000:.1f} ms"
            )
        parts = lamina_parts(cat, QUERIES[ONE_DAY], reps)
        cat.close()

    figures = []
    for label, tt in times.items():
        ml, md = median(tt["lamina"]), median(tt["duckdb"])
        figures += [
            figure(f"{label}: cat.sql", ml, "s"),
            figure(f"{label}: duckdb read_parquet", md, "s"),
            figure(f"{label}: lamina / duckdb", ml / md, "x", "<= 1.10"),
        ]
    figures += [
        figure(
            "one-day query: segments planned",
            len(day_plan.tasks),
            "files",
            "<= 1",
            note=f"of {len(files)} (1 per day); time_bound + plan_scan",
        ),
        figure(
            "one-day query: DuckDB Total Files Read (lamina view)",
            lamina_files_read,
            "files",
            "<= 1",
            note=f"direct read_parquet of all files: {direct_files_read}",
        ),
    ]
    figures += [
        figure(f"  cat.sql step: {k}", v, "s", note="one-day query; part of cat.sql")
        for k, v in parts.items()
    ]
    print_figures(f"SQL: {rows:,} rows, 30 DAY segments, median of {reps}", figures)
    return result(
        "sql",
        {"rows": rows, "segments": len(files), "repetitions": reps, "queries": QUERIES},
        figures,
        {
            "seconds": times,
            "one_day_bound": str(bound),
            "one_day_planned_files": len(day_plan.tasks),
            "one_day_files_read_lamina_view": lamina_files_read,
            "one_day_files_read_direct": direct_files_read,
            "write_s": write_s,
            "cat_sql_steps_s": parts,
        },
    )


if __name__ == "__main__":
    cli(main, "sql")
