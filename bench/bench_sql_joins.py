"""SQL joins: ``cat.sql`` over 8 small tables vs DuckDB reading the same files.

Eight tables ``t1`` .. ``t8`` (a few hundred rows each, DAY segments over a few days,
written by the lamina local writer), joined on a key column; the same query text on
both sides. lamina: the full ``cat.sql`` cost (catalog version check, planning or
cache hit, time-bound pruning, views, execution, Arrow result), warm (after a first
call). Baseline: ONE long-lived DuckDB connection with a view per table over
``read_parquet([...the files of t.scan()...], hive_partitioning=false)``, created
once. Also a trivial one-table query (``SELECT count(*) FROM t1``): the fixed cost of
a query. Interleaved repetitions; medians.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402

import lamina  # noqa: E402

TABLES = 8
DAYS = 4
START = np.datetime64("2024-01-01T00:00:00", "us").astype("int64")
DAY_US = 86_400_000_000
JOIN = "8-table join"
TRIVIAL = "trivial: count(*) FROM t1"


def join_query(n: int) -> str:
    """All ``n`` tables joined on ``k``, aggregated."""
    joins = " ".join(f"JOIN t{i} ON t{i}.k = t1.k" for i in range(2, n + 1))
    sums = ", ".join(f"sum(t{i}.v) AS s{i}" for i in range(1, n + 1))
    return f"SELECT count(*) AS n, {sums} FROM t1 {joins}"


QUERIES = {JOIN: join_query(TABLES), TRIVIAL: "SELECT count(*) AS n FROM t1"}


def small_table(rows: int, seed: int) -> pa.Table:
    """``rows`` rows over DAYS days: a time, a key (unique), a value."""
    rng = np.random.default_rng(seed)
    ts = START + rng.integers(0, DAYS * DAY_US, rows)
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us")),
            "k": pa.array(rng.permutation(rows).astype(np.int64)),
            "v": pa.array(rng.random(rows)),
        }
    )


def fetch(rel: Any) -> pa.Table:
    """Arrow table of a relation, as lamina fetches it."""
    get = getattr(rel, "to_arrow_table", None) or rel.arrow
    out: pa.Table = get()
    return out


def duckdb_connection(files: dict[str, list[str]]) -> duckdb.DuckDBPyConnection:
    """A DuckDB user's long-lived connection: a view per table over its files."""
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    for name, paths in files.items():
        listing = "[" + ", ".join(f"'{p}'" for p in paths) + "]"
        con.execute(
            f"CREATE VIEW {name} AS SELECT * FROM read_parquet({listing}, hive_partitioning=false)"
        )
    return con


def canonical(t: pa.Table) -> list[tuple[Any, ...]]:
    return [
        tuple(round(x, 6) if isinstance(x, float) else x for x in r.values()) for r in t.to_pylist()
    ]


def main(quick: bool = False) -> dict[str, Any]:
    """SQL joins: an 8-table join and a trivial query, cat.sql vs DuckDB."""
    rows = 300
    reps = 15 if quick else 31
    with scratch_dir("sql-joins") as root:
        cat = lamina.connect(warehouse=os.path.join(root, "wh"))
        files: dict[str, list[str]] = {}
        for i in range(1, TABLES + 1):
            data = small_table(rows, seed=i)
            t = cat.create_table(f"t{i}", data.schema, time_column="ts", segment_granularity="DAY")
            t.append(data)
            plan = t.scan()
            files[f"t{i}"] = list(plan.whole_files)
        segments = sum(len(f) for f in files.values())
        print(f"  {TABLES} tables of {rows} rows, {segments} segments")
        con = duckdb_connection(files)
        sides: dict[str, Callable[[str], pa.Table]] = {
            "lamina": cat.sql,
            "duckdb": lambda q: fetch(con.sql(q)),
        }
        times: dict[str, dict[str, list[float]]] = {}
        for label, query in QUERIES.items():
            answers = {side: canonical(fn(query)) for side, fn in sides.items()}  # warm-up
            assert answers["lamina"] == answers["duckdb"], label
            times[label] = {side: [] for side in sides}
            for rep in range(reps):
                for side in ("lamina", "duckdb") if rep % 2 == 0 else ("duckdb", "lamina"):
                    fn, q = sides[side], query
                    times[label][side].append(timed(lambda: fn(q))[0])  # noqa: B023 - run now
            ms = {side: median(v) * 1000 for side, v in times[label].items()}
            print(f"  {label}: lamina {ms['lamina']:.2f} ms, duckdb {ms['duckdb']:.2f} ms")
        con.close()
        cat.close()

    jl, jd = (median(times[JOIN][s]) for s in ("lamina", "duckdb"))
    tl, td = (median(times[TRIVIAL][s]) for s in ("lamina", "duckdb"))
    figures = [
        figure(f"{JOIN}: cat.sql", jl, "s"),
        figure(f"{JOIN}: duckdb (long-lived connection)", jd, "s"),
        figure(f"{JOIN}: lamina / duckdb", jl / jd, "x", "<= 1.10"),
        figure(
            f"{JOIN}: lamina - duckdb per table",
            (jl - jd) * 1000 / TABLES,
            "ms",
            note="fixed cost per referenced table",
        ),
        figure(f"{TRIVIAL}: cat.sql", tl, "s"),
        figure(f"{TRIVIAL}: duckdb (long-lived connection)", td, "s"),
        figure(f"{TRIVIAL}: lamina - duckdb", (tl - td) * 1000, "ms", note="fixed cost per query"),
    ]
    print_figures(f"SQL joins: {TABLES} tables x {rows} rows, DAY segments, medians", figures)
    return result(
        "sql_joins",
        {"tables": TABLES, "rows": rows, "days": DAYS, "repetitions": reps, "queries": QUERIES},
        figures,
        {"seconds": times, "segments": segments},
    )


if __name__ == "__main__":
    cli(main, "sql_joins")
