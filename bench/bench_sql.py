"""SQL: ``cat.sql`` vs DuckDB reading the same Parquet files directly.

A 30-day table (1M rows, DAY segments, written by the lamina local writer). Queries,
the same text on both sides:

* a group-by over the whole table (``name``: 10,000 keys);
* a group-by over 1,000 keys (``key``, a string column added to the table), issue
  33's case;
* the same group-by over one day (a ``ts`` range in WHERE);
* a tiny query (``SELECT * FROM events LIMIT 1``): the fixed overhead per query;
* a point filter (one ``ts`` value), informational.

lamina: the full ``cat.sql`` cost (catalog read, planning or cache check, time-bound
pruning, views, execution, Arrow result). Baseline (like with like): what a DuckDB user
serving queries runs — ONE long-lived connection with a view ``events`` over
``read_parquet([...every file of t.scan()...], hive_partitioning=false)``, the query
run on it. A fresh connection per query (the old baseline) is reported too, for
reference. Warm page cache; interleaved repetitions; medians.

Threads: 4 threads issue small queries together (LIMIT 1 and the point filter,
alternating) through ``cat.sql``, and through the long-lived DuckDB connection (one
cursor per thread, the way DuckDB is used from threads); queries per second.

Also checks that the one-day query plans only that day's segments (``time_bound`` +
``plan_scan`` file count, and DuckDB's EXPLAIN ANALYZE "Total Files Read" over a view
registered with ``register_view``).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402
from bench_local_append import make_table  # noqa: E402

import lamina  # noqa: E402
from lamina.core.scan import plan_scan  # noqa: E402
from lamina.engines.duckdb_views import register_view  # noqa: E402
from lamina.engines.sql_bounds import time_bound  # noqa: E402

AGG = "SELECT name, count(*) AS n, sum(value) AS total, max(qty) AS top FROM events"
WHOLE = "group-by, whole table"
KEYS = "group-by, 1,000 keys"
ONE_DAY = "group-by, one day"
TINY = "tiny: LIMIT 1"
POINT = "tiny: point filter"
QUERIES = {
    WHOLE: f"{AGG} GROUP BY name",
    KEYS: (
        "SELECT key, count(*) AS n, sum(value) AS total, max(qty) AS top FROM events GROUP BY key"
    ),
    ONE_DAY: (
        f"{AGG} WHERE ts >= TIMESTAMP '2024-01-15 00:00:00' "
        "AND ts < TIMESTAMP '2024-01-16 00:00:00' GROUP BY name"
    ),
    TINY: "SELECT * FROM events LIMIT 1",
    POINT: "SELECT * FROM events WHERE ts = TIMESTAMP '2024-01-15 12:00:00'",
}
THREADS = 4


def fetch(rel: Any) -> pa.Table:
    """Arrow table of a relation, as lamina fetches it."""
    get = getattr(rel, "to_arrow_table", None) or rel.arrow
    out: pa.Table = get()
    return out


def view_ddl(files: list[str]) -> str:
    listing = "[" + ", ".join(f"'{f}'" for f in files) + "]"
    return f"CREATE VIEW events AS SELECT * FROM read_parquet({listing}, hive_partitioning=false)"


def duckdb_connection(files: list[str]) -> duckdb.DuckDBPyConnection:
    """A DuckDB user's long-lived connection: a view over the files."""
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    con.execute(view_ddl(files))
    return con


def duckdb_fresh(files: list[str], query: str) -> pa.Table:
    """A fresh connection per query (the old baseline)."""
    con = duckdb_connection(files)
    try:
        return fetch(con.sql(query))
    finally:
        con.close()


def files_read(con: duckdb.DuckDBPyConnection, query: str) -> int:
    """Sum of DuckDB's "Total Files Read" over the scans of EXPLAIN ANALYZE."""
    text = "\n".join(str(r[1]) for r in con.execute(f"EXPLAIN ANALYZE {query}").fetchall())
    return sum(int(n) for n in re.findall(r"Total Files Read:\s*(\d+)", text))


def with_keys(data: pa.Table, keys: int = 1_000, seed: int = 2) -> pa.Table:
    """``data`` with a string column ``key`` of ``keys`` distinct values."""
    rng = np.random.default_rng(seed)
    vocab = pa.array([f"key_{i:04d}" for i in range(keys)])
    return data.append_column("key", vocab.take(pa.array(rng.integers(0, keys, len(data)))))


def canonical(t: pa.Table) -> list[tuple[Any, ...]]:
    if "n" not in t.column_names:
        return sorted(tuple(r.values()) for r in t.to_pylist())
    group = t.column_names[0]
    rows = t.sort_by(group).to_pylist()
    return [(r[group], r["n"], round(r["total"], 6), r["top"]) for r in rows]


def qps(run: Callable[[int, int], object], per_thread: int) -> float:
    """Queries per second of THREADS threads each calling ``run(thread, i)``."""
    start = threading.Barrier(THREADS + 1)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        start.wait()
        try:
            for i in range(per_thread):
                run(k, i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for th in threads:
        th.start()
    start.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    secs = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return THREADS * per_thread / secs


def main(quick: bool = False) -> dict[str, Any]:
    """SQL: cat.sql vs DuckDB over the same files (whole table, one day, tiny, threads)."""
    rows = 200_000 if quick else 1_000_000
    reps = 7 if quick else 15
    tiny_reps = 50 if quick else 200
    per_thread = 25 if quick else 100
    qps_rounds = 3 if quick else 5
    with scratch_dir("sql") as root:
        cat = lamina.connect(warehouse=os.path.join(root, "wh"))
        data = with_keys(make_table(rows, days=30, seed=1))
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
        con = duckdb_connection(files)
        direct_files_read = files_read(con, q)
        print(
            f"  one-day query: bound {bound}, {len(day_plan.tasks)} segment(s) planned, "
            f"DuckDB read {lamina_files_read} file(s) via lamina view, "
            f"{direct_files_read} via read_parquet of all files"
        )

        sides: dict[str, Callable[[str], pa.Table]] = {
            "lamina": cat.sql,
            "duckdb": lambda q, c=con: fetch(c.sql(q)),  # type: ignore[misc]
            "duckdb_fresh": lambda q: duckdb_fresh(files, q),
        }
        times: dict[str, dict[str, list[float]]] = {}
        for label, query in QUERIES.items():
            answers = {side: canonical(fn(query)) for side, fn in sides.items()}  # warm-up
            assert answers["lamina"] == answers["duckdb"] == answers["duckdb_fresh"], label
            n = tiny_reps if label in (TINY, POINT) else reps
            times[label] = {side: [] for side in sides}
            # lamina and duckdb alternate; the fresh connection (reference only) runs
            # after, as tearing a database down slows whichever query comes next
            for rep in range(n):
                for side in ("lamina", "duckdb") if rep % 2 == 0 else ("duckdb", "lamina"):
                    ask = sides[side]
                    times[label][side].append(timed(lambda: ask(query))[0])  # noqa: B023 - run now
            for _ in range(reps):
                secs = timed(lambda: duckdb_fresh(files, query))[0]  # noqa: B023 - run now
                times[label]["duckdb_fresh"].append(secs)
            ms = {side: median(v) * 1000 for side, v in times[label].items()}
            print(
                f"  {label}: lamina {ms['lamina']:.2f} ms, duckdb {ms['duckdb']:.2f} ms "
                f"(fresh connection {ms['duckdb_fresh']:.2f} ms)"
            )

        # threads: small queries from 4 threads at once
        small = [QUERIES[TINY], QUERIES[POINT]]
        cursors = [con.cursor() for _ in range(THREADS)]

        def lamina_small(k: int, i: int) -> object:
            return cat.sql(small[i % 2])

        def duckdb_small(k: int, i: int) -> object:
            return fetch(cursors[k].sql(small[i % 2]))

        rates: dict[str, list[float]] = {"lamina": [], "duckdb": []}
        for rnd in range(qps_rounds):
            for side in ("lamina", "duckdb") if rnd % 2 == 0 else ("duckdb", "lamina"):
                fn = lamina_small if side == "lamina" else duckdb_small
                rates[side].append(qps(fn, per_thread))
        for c in cursors:
            c.close()
        con.close()
        print(
            f"  {THREADS} threads, small queries: lamina {median(rates['lamina']):.0f} q/s, "
            f"duckdb {median(rates['duckdb']):.0f} q/s"
        )
        cat.close()

    figures = []
    for label, tt in times.items():
        ml, md, mf = (median(tt[s]) for s in ("lamina", "duckdb", "duckdb_fresh"))
        fresh = f"duckdb, fresh connection per query: {mf * 1000:.2f} ms"
        figures += [
            figure(f"{label}: cat.sql", ml, "s"),
            figure(f"{label}: duckdb (long-lived connection)", md, "s", note=fresh),
        ]
        if label in (WHOLE, KEYS, ONE_DAY):
            figures.append(figure(f"{label}: lamina / duckdb", ml / md, "x", "<= 1.10"))
        elif label == TINY:
            figures.append(
                figure(
                    f"{label}: lamina - duckdb", (ml - md) * 1000, "ms", "<= 2", "fixed overhead"
                )
            )
        else:
            figures.append(figure(f"{label}: lamina - duckdb", (ml - md) * 1000, "ms"))
    figures += [
        figure(
            f"{THREADS} threads, small queries: cat.sql",
            median(rates["lamina"]),
            "q/s",
            note="LIMIT 1 and point filter, alternating",
        ),
        figure(
            f"{THREADS} threads, small queries: duckdb",
            median(rates["duckdb"]),
            "q/s",
            note="one cursor per thread on the long-lived connection",
        ),
        figure(
            f"{THREADS} threads: lamina / duckdb q/s",
            median(rates["lamina"]) / median(rates["duckdb"]),
            "x",
        ),
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
    print_figures(f"SQL: {rows:,} rows, 30 DAY segments, medians", figures)
    return result(
        "sql",
        {
            "rows": rows,
            "segments": len(files),
            "repetitions": reps,
            "tiny_repetitions": tiny_reps,
            "threads": THREADS,
            "queries_per_thread": per_thread,
            "qps_rounds": qps_rounds,
            "queries": QUERIES,
        },
        figures,
        {
            "seconds": times,
            "qps": rates,
            "one_day_bound": str(bound),
            "one_day_planned_files": len(day_plan.tasks),
            "one_day_files_read_lamina_view": lamina_files_read,
            "one_day_files_read_direct": direct_files_read,
            "write_s": write_s,
        },
    )


if __name__ == "__main__":
    cli(main, "sql")
