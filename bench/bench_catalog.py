"""Catalog commit rate: many small sequential appends.

200 appends of 10 rows each into one DAY table: commits/s on the embedded SQLite
catalog and on PostgreSQL (``postgresql://postgres@127.0.0.1:5432/test``, or
``$LAMINA_BENCH_POSTGRES_URL``, isolated in a fresh schema that is dropped afterwards;
skipped with the reason when unreachable), and deltalake's 200 appends of the same
data for comparison. Each lamina append is a full write that records its commit as
REQUESTED, then INFLIGHT, then COMPLETED: begin, write one Parquet file, publish.
Fresh table and directories per repetition; medians.
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402

import lamina  # noqa: E402

PG_URL = os.environ.get("LAMINA_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def small_table(rows: int = 10) -> pa.Table:
    base = np.datetime64("2024-01-01T00:00:00", "us").astype("int64")
    return pa.table(
        {
            "ts": pa.array(base + np.arange(rows, dtype=np.int64) * 1_000_000, pa.timestamp("us")),
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "value": pa.array(np.linspace(0.0, 1.0, rows)),
            "name": pa.array([f"user_{i}" for i in range(rows)]),
            "qty": pa.array(np.arange(rows, dtype=np.int32)),
        }
    )


def lamina_appends(catalog: str | None, root: str, data: pa.Table, n: int, name: str) -> float:
    cat = lamina.connect(catalog=catalog, warehouse=os.path.join(root, "wh"))
    try:
        t = cat.create_table(name, data.schema, time_column="ts", segment_granularity="DAY")

        def loop() -> None:
            for _ in range(n):
                t.append(data)

        secs, _ = timed(loop)
        assert t.scan().row_count == n * data.num_rows
        assert len(t.history()) == n
        return secs
    finally:
        cat.close()


def delta_appends(root: str, data: pa.Table, n: int) -> float:
    from deltalake import DeltaTable, write_deltalake

    path = os.path.join(root, "delta")

    def loop() -> None:
        for _ in range(n):
            write_deltalake(path, data, mode="append")

    secs, _ = timed(loop)
    assert DeltaTable(path).version() == n - 1
    return secs


def postgres_schema() -> tuple[str | None, str, Any]:
    """(catalog URL in a fresh schema or None, reason, cleanup)."""
    from sqlalchemy import create_engine, text

    driver_url = PG_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        admin = create_engine(driver_url, connect_args={"connect_timeout": 3})
        schema = f"lamina_bench_{uuid.uuid4().hex[:10]}"
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
    except Exception as exc:  # noqa: BLE001 - any failure means "skip"
        return None, f"PostgreSQL at {PG_URL} unreachable: {str(exc).splitlines()[0]}", None

    def drop() -> None:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()

    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}options=-csearch_path%3D{schema}", f"schema {schema}", drop


def main(quick: bool = False) -> dict[str, Any]:
    """Catalog: commits/s of 200 sequential 10-row appends (SQLite, PostgreSQL, deltalake)."""
    n = 30 if quick else 200
    reps = 1 if quick else 3
    data = small_table()
    pg_url, pg_note, pg_drop = postgres_schema()
    if pg_url is None:
        print(f"  skipping PostgreSQL: {pg_note}")
    times: dict[str, list[float]] = {"sqlite": [], "postgres": [], "deltalake": []}
    try:
        for rep in range(reps):
            with scratch_dir("cat-sqlite") as d:
                times["sqlite"].append(lamina_appends(None, d, data, n, "events"))
            if pg_url is not None:
                with scratch_dir("cat-pg") as d:
                    times["postgres"].append(lamina_appends(pg_url, d, data, n, f"events_{rep}"))
            with scratch_dir("cat-delta") as d:
                times["deltalake"].append(delta_appends(d, data, n))
            print(
                f"  rep {rep + 1}/{reps}: "
                + ", ".join(f"{k} {n / v[-1]:.1f}/s" for k, v in times.items() if v)
            )
    finally:
        if pg_drop is not None:
            pg_drop()
    rate = {k: n / median(v) for k, v in times.items() if v}
    figures = [
        figure("lamina commits/s, SQLite (embedded)", rate["sqlite"], "commits/s", ">= 150"),
        figure(
            "lamina commits/s, PostgreSQL",
            rate.get("postgres"),
            "commits/s",
            ">= 120",
            note="" if pg_url else "skipped: " + pg_note,
        ),
        figure("deltalake commits/s", rate["deltalake"], "commits/s", note="same run"),
        figure("SQLite / deltalake (rate)", rate["sqlite"] / rate["deltalake"], "x"),
    ]
    if "postgres" in rate:
        figures.append(
            figure("PostgreSQL / deltalake (rate)", rate["postgres"] / rate["deltalake"], "x")
        )
    print_figures(f"Catalog: {n} sequential {data.num_rows}-row appends, median of {reps}", figures)
    return result(
        "catalog",
        {
            "appends": n,
            "rows_per_append": data.num_rows,
            "repetitions": reps,
            "postgres": pg_note if pg_url is None else PG_URL,
        },
        figures,
        {"seconds": times, "commits_per_s": rate},
    )


if __name__ == "__main__":
    cli(main, "catalog")
