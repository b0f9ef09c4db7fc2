"""TPC-H: the 22 queries through ``cat.sql`` vs DuckDB reading the same Parquet files.

Data: ``tpchgen-cli parquet`` at SF0.1 and SF1 (its string columns are Arrow string
views; lamina stores them as large strings). Every TPC-H table is a lamina table
loaded with one ``t.append``: ``lineitem`` by ``l_shipdate`` and ``orders`` by
``o_orderdate`` in YEAR segments, the other six without a time column (one ALL
chunk). Queries: ``bench/tpch_queries/qNN.sql``, written from the TPC-H
specification with its validation parameters (Q11's fraction is 0.0001 / SF; Q15's
view is a WITH clause).

lamina: the full ``cat.sql`` cost (catalog version check, planning or cache hit,
time-bound pruning, views, execution, Arrow result), warm. Baseline (like with
like): ONE long-lived DuckDB connection with a view per table over
``read_parquet([...the files of t.scan()...], hive_partitioning=false)``, created
once. Every answer is checked equal on both sides first (rows in order; doubles to
9 significant digits), then each query runs in interleaved repetitions; a side's
total is the sum of its 22 medians, of wall time (the targets) and of process CPU time
(every thread's: steadier when other work shares the machine). ``--quick``: SF0.1
only, fewer repetitions.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402
from bench_sql_joins import duckdb_connection, fetch  # noqa: E402

import lamina  # noqa: E402

QUERY_DIR = Path(__file__).resolve().parent / "tpch_queries"
TABLES = ["region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem"]
TIME_COLUMNS = {"lineitem": "l_shipdate", "orders": "o_orderdate"}
GRANULARITY = "YEAR"
TARGETS = {0.1: "<= 1.10", 1.0: "<= 1.05"}


def queries(sf: float) -> dict[str, str]:
    """The 22 query texts by name (``q01`` ..), Q11's fraction scaled to ``sf``."""
    out = {}
    for n in range(1, 23):
        text = (QUERY_DIR / f"q{n:02d}.sql").read_text()
        out[f"q{n:02d}"] = text.replace("{fraction}", repr(0.0001 / sf))
    return out


def tpchgen() -> str:
    """The ``tpchgen-cli`` executable: beside this Python's, else on PATH."""
    here = Path(sys.executable).with_name("tpchgen-cli")
    found = str(here) if here.exists() else shutil.which("tpchgen-cli")
    if found is None:
        raise SystemExit("tpchgen-cli is not installed: pip install tpchgen-cli (dev extra)")
    return found


def generate(sf: float, out: str) -> dict[str, pa.Table]:
    """TPC-H tables at scale factor ``sf`` as tpchgen-cli writes them (string views)."""
    subprocess.run(
        [tpchgen(), "parquet", "-s", str(sf), "-o", out, "-n", "2", "-q"],
        check=True,
    )
    return {name: pq.read_table(os.path.join(out, f"{name}.parquet")) for name in TABLES}


def load(cat: lamina.Catalog, data: dict[str, pa.Table]) -> dict[str, list[str]]:
    """Each table into ``cat`` with one ``t.append``; its visible files by name."""
    files: dict[str, list[str]] = {}
    for name, table in data.items():
        column = TIME_COLUMNS.get(name)
        granularity = GRANULARITY if column else None
        t = cat.create_table(
            name, table.schema, time_column=column, segment_granularity=granularity
        )
        t.append(table)
        plan = t.scan()
        assert not plan.partial_files and not plan.deletes, name
        assert plan.row_count == table.num_rows, name
        files[name] = list(plan.whole_files)
    return files


def _value(x: Any) -> Any:
    """A result value compared across sides: doubles to 9 significant digits (parallel
    sums may differ in their last bits), decimals and dates exactly."""
    if isinstance(x, float):
        return float(f"{x:.9g}") if math.isfinite(x) else x
    if isinstance(x, decimal.Decimal | dt.date | int | str) or x is None:
        return x
    return repr(x)


def canonical(t: pa.Table) -> tuple[list[str], list[str], list[tuple[Any, ...]]]:
    """Column names, types and rows (in order) of an answer."""
    rows = [tuple(_value(x) for x in r.values()) for r in t.to_pylist()]
    return t.column_names, [str(f.type) for f in t.schema], rows


def check_answers(
    sides: dict[str, Callable[[str], pa.Table]], texts: dict[str, str]
) -> dict[str, int]:
    """Run every query on both sides (a warm-up) and check the answers are equal;
    the answers' row counts by query."""
    counts = {}
    for name, text in texts.items():
        got = {side: canonical(fn(text)) for side, fn in sides.items()}
        lam, raw = got["lamina"], got["duckdb"]
        if lam != raw:
            same_rows = sorted(map(repr, lam[2])) == sorted(map(repr, raw[2]))
            raise AssertionError(
                f"{name}: lamina and DuckDB answer differently "
                f"(columns {lam[0]} / {raw[0]}, types {lam[1]} / {raw[1]}, "
                f"{len(lam[2])} / {len(raw[2])} rows, same rows in another order: {same_rows})"
            )
        assert lam[2], f"{name}: no rows (parameters do not match the data?)"
        counts[name] = len(lam[2])
    return counts


def clocked(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall seconds and process CPU seconds (every thread's) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def run_scale(sf: float, reps: int) -> dict[str, Any]:
    """Generate, load, check and time the 22 queries at scale factor ``sf``."""
    with scratch_dir(f"tpch-sf{sf}") as root:
        gen_s, data = timed(lambda: generate(sf, os.path.join(root, "gen")))
        rows = {name: t.num_rows for name, t in data.items()}
        cat = lamina.connect(warehouse=os.path.join(root, "wh"))
        load_s, files = timed(lambda: load(cat, data))
        data.clear()  # the Arrow tables: lamina holds the rows now
        print(
            f"  SF{sf}: generated in {gen_s:.1f}s, loaded {sum(rows.values()):,} rows in "
            f"{load_s:.1f}s ({sum(len(f) for f in files.values())} files)"
        )
        con = duckdb_connection(files)
        texts = queries(sf)
        sides: dict[str, Callable[[str], pa.Table]] = {
            "lamina": cat.sql,
            "duckdb": lambda q: fetch(con.sql(q)),
        }
        counts = check_answers(sides, texts)
        print(f"  SF{sf}: all {len(texts)} answers equal")
        times: dict[str, dict[str, list[float]]] = {q: {s: [] for s in sides} for q in texts}
        cpu: dict[str, dict[str, list[float]]] = {q: {s: [] for s in sides} for q in texts}
        for rep in range(reps):
            for name, text in texts.items():
                order = ("lamina", "duckdb") if rep % 2 == 0 else ("duckdb", "lamina")
                for side in order:
                    fn = sides[side]
                    wall, used = clocked(lambda: fn(text))  # noqa: B023 - run now
                    times[name][side].append(wall)
                    cpu[name][side].append(used)
        con.close()
        cat.close()
    med = {q: {s: median(v) for s, v in tt.items()} for q, tt in times.items()}
    cpu_med = {q: {s: median(v) for s, v in tt.items()} for q, tt in cpu.items()}
    for q, m in med.items():
        print(
            f"  SF{sf} {q}: lamina {m['lamina'] * 1000:.1f} ms, duckdb {m['duckdb'] * 1000:.1f} ms"
            f" ({m['lamina'] / m['duckdb']:.2f}x)"
        )
    return {
        "sf": sf,
        "rows": rows,
        "files": {n: len(f) for n, f in files.items()},
        "generate_s": gen_s,
        "load_s": load_s,
        "answer_rows": counts,
        "seconds": times,
        "medians": med,
        "cpu_seconds": cpu,
        "cpu_medians": cpu_med,
    }


def scale_figures(run: dict[str, Any]) -> list[dict[str, Any]]:
    sf, med = run["sf"], run["medians"]
    lam = sum(m["lamina"] for m in med.values())
    raw = sum(m["duckdb"] for m in med.values())
    cpu_lam = sum(m["lamina"] for m in run["cpu_medians"].values())
    cpu_raw = sum(m["duckdb"] for m in run["cpu_medians"].values())
    worst = max(med, key=lambda q: med[q]["lamina"] / med[q]["duckdb"])
    over = {q: (m["lamina"] - m["duckdb"]) * 1000 for q, m in med.items()}
    top = sorted(over, key=over.__getitem__, reverse=True)[:3]
    return [
        figure(f"SF{sf}, 22 queries: cat.sql", lam, "s", note="sum of per-query medians"),
        figure(f"SF{sf}, 22 queries: duckdb (long-lived connection)", raw, "s"),
        figure(
            f"SF{sf}, 22 queries: lamina / duckdb",
            lam / raw,
            "x",
            TARGETS.get(sf),
            note="all 22 answers equal",
        ),
        figure(
            f"SF{sf}, 22 queries: lamina / duckdb, CPU time",
            cpu_lam / cpu_raw,
            "x",
            note=f"process CPU of every thread: {cpu_lam:.3f} s / {cpu_raw:.3f} s "
            "(steadier than wall time when other work shares the machine)",
        ),
        figure(
            f"SF{sf}: worst query ratio",
            med[worst]["lamina"] / med[worst]["duckdb"],
            "x",
            note=worst,
        ),
        figure(
            f"SF{sf}: lamina - duckdb per query, median",
            median(list(over.values())),
            "ms",
            note="most: " + ", ".join(f"{q} {over[q]:.1f} ms" for q in top),
        ),
    ]


def main(quick: bool = False) -> dict[str, Any]:
    """TPC-H: the 22 queries, cat.sql vs DuckDB over the same files, SF0.1 and SF1."""
    scales = [(0.1, 5)] if quick else [(0.1, 11), (1.0, 5)]
    runs = [run_scale(sf, reps) for sf, reps in scales]
    figures = [f for run in runs for f in scale_figures(run)]
    print_figures("TPC-H: 22 queries, medians", figures)
    return result(
        "tpch",
        {
            "scale_factors": [sf for sf, _ in scales],
            "repetitions": {str(sf): reps for sf, reps in scales},
            "granularity": GRANULARITY,
            "time_columns": TIME_COLUMNS,
        },
        figures,
        {f"sf{run['sf']}": run for run in runs},
    )


if __name__ == "__main__":
    cli(main, "tpch")
