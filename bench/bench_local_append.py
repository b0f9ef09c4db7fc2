"""Local append: lamina ``t.append(table)`` vs pyarrow.parquet and deltalake writes.

1M rows, 5 columns (ts timestamp[us] in random order over 30 days, int64, float64,
string, int32). lamina appends into a DAY table on the embedded SQLite catalog (sort by
time, cut into 30 day segments, write them, commit). Baselines write the same Arrow
table: ``pyarrow.parquet.write_table`` (one file) and ``deltalake.write_deltalake(...,
mode="append")``. Fresh directories every repetition; the three writers run in a
rotating order; medians of the repetitions.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402

import lamina  # noqa: E402
from lamina.io.writer import split_by_chunk  # noqa: E402

DAY_US = 86_400_000_000
START = "2024-01-01T00:00:00"


def make_table(rows: int, days: int = 30, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    base = np.datetime64(START, "us").astype("int64")
    ts = base + rng.integers(0, days * DAY_US, rows)
    vocab = pa.array([f"user_{i:05d}" for i in range(10_000)])
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us")),
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "value": pa.array(rng.random(rows)),
            "name": vocab.take(pa.array(rng.integers(0, len(vocab), rows))),
            "qty": pa.array(rng.integers(0, 1000, rows).astype(np.int32)),
        }
    )


def run_lamina(table: pa.Table, root: str) -> float:
    cat = lamina.connect(warehouse=os.path.join(root, "wh"))
    try:
        t = cat.create_table("events", table.schema, time_column="ts", segment_granularity="DAY")
        secs, commit = timed(lambda: t.append(table))
        assert t.scan().row_count == table.num_rows, "lamina lost rows"
        assert len(commit.added) >= 1
        return secs
    finally:
        cat.close()


def run_parquet(table: pa.Table, root: str) -> float:
    path = os.path.join(root, "data.parquet")
    secs, _ = timed(lambda: pq.write_table(table, path))
    return secs


def run_delta(table: pa.Table, root: str) -> float:
    from deltalake import write_deltalake

    path = os.path.join(root, "delta")
    secs, _ = timed(lambda: write_deltalake(path, table, mode="append"))
    return secs


QUERY = "SELECT name, count(*) AS n, sum(value) AS s FROM {t} GROUP BY name"


def read_back(table: pa.Table, reps: int) -> dict[str, float]:
    """The same group-by over what each writer wrote (medians, interleaved, seconds):
    lamina's ``cat.sql`` and DuckDB over lamina's files (its 30 DAY segments); DuckDB
    over the Delta table's files and over pyarrow's file (one file each)."""
    import duckdb
    from deltalake import DeltaTable

    with scratch_dir("append-read") as d:
        run_lamina(table, d)
        run_parquet(table, d)
        run_delta(table, d)
        cat = lamina.connect(warehouse=os.path.join(d, "wh"))
        con = duckdb.connect()
        files = {
            "lamina files": [seg.location for seg in cat.load_table("events").segments()],
            "deltalake": DeltaTable(os.path.join(d, "delta")).file_uris(),
            "parquet": [os.path.join(d, "data.parquet")],
        }

        def duck(paths: list[str]) -> Any:
            listed = ", ".join(f"'{p}'" for p in paths)
            return con.sql(QUERY.format(t=f"read_parquet([{listed}])")).to_arrow_table()

        runs: dict[str, Any] = {
            "lamina": lambda: cat.sql(QUERY.format(t="events")),
            **{n: (lambda ps=ps: duck(ps)) for n, ps in files.items()},
        }
        for fn in runs.values():  # warm-up; the same answer everywhere
            assert fn().num_rows == 10_000
        times: dict[str, list[float]] = {n: [] for n in runs}
        names = list(runs)
        for rep in range(4 * reps):
            for n in names[rep % len(names) :] + names[: rep % len(names)]:
                times[n].append(timed(runs[n])[0])
        cat.close()
    return {n: median(v) for n, v in times.items()}


def main(quick: bool = False) -> dict[str, Any]:
    """Local append: lamina vs pyarrow.parquet.write_table vs deltalake."""
    import deltalake

    rows = 200_000 if quick else 1_000_000
    reps = 3 if quick else 5
    table = make_table(rows)
    runners = {"lamina": run_lamina, "parquet": run_parquet, "deltalake": run_delta}
    names = list(runners)
    times: dict[str, list[float]] = {n: [] for n in names}
    # warm-up (imports, allocator, page cache), not counted
    for n in names:
        with scratch_dir(f"append-warm-{n}") as d:
            runners[n](table, d)
    for rep in range(reps):
        order = names[rep % 3 :] + names[: rep % 3]
        for n in order:
            with scratch_dir(f"append-{n}") as d:
                times[n].append(runners[n](table, d))
        print(f"  rep {rep + 1}/{reps}: " + ", ".join(f"{n} {times[n][-1]:.3f}s" for n in names))
    split_s = median(
        [
            timed(lambda: split_by_chunk(table, "ts", lamina.Granularity.DAY, 1_000_000))[0]
            for _ in range(reps)
        ]
    )
    med = {n: median(v) for n, v in times.items()}
    read = read_back(table, reps)
    figures = [
        figure("lamina append (SQLite catalog)", med["lamina"], "s", note=f"{rows:,} rows"),
        figure("pyarrow.parquet.write_table", med["parquet"], "s"),
        figure("deltalake write_deltalake append", med["deltalake"], "s"),
        figure("lamina / pyarrow.parquet", med["lamina"] / med["parquet"], "x", "<= 1.25"),
        figure("lamina / deltalake", med["lamina"] / med["deltalake"], "x", "<= 1.0"),
        figure(
            "lamina split_by_chunk (sort + cut) alone",
            split_s,
            "s",
            note="part of the lamina time",
        ),
        figure("lamina throughput", rows / med["lamina"], "rows/s"),
        figure(
            "group-by read back: lamina cat.sql",
            read["lamina"],
            "s",
            note="GROUP BY name (10,000 names) over what each writer wrote",
        ),
        figure("  DuckDB over lamina's files (30 segments)", read["lamina files"], "s"),
        figure("  DuckDB over the Delta table's files", read["deltalake"], "s"),
        figure("  DuckDB over pyarrow's file", read["parquet"], "s"),
        figure("  lamina / DuckDB over Delta's files", read["lamina"] / read["deltalake"], "x"),
    ]
    print_figures(f"Local append: {rows:,} rows, median of {reps}", figures)
    return result(
        "local_append",
        {"rows": rows, "repetitions": reps, "days": 30, "deltalake": deltalake.__version__},
        figures,
        {"seconds": times, "median_s": med, "read_back_s": read},
    )


if __name__ == "__main__":
    cli(main, "local_append")
