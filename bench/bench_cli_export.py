"""Command line: ``lamina query ... --output FILE`` writing a 3,000,000-row result
(a UTC timestamp, a string, an int64 and a float64 per row) as CSV, JSON lines and
Parquet: the export itself (the query's stream written, in this process: what
``--output`` runs after start-up) and whole ``lamina`` processes, next to the
reference measured in the same run: ``pyarrow.csv.write_csv`` of the same result
already in memory (as it is, and with naive timestamps, which Arrow formats twenty
times faster). The target: the export within 2x of the naive reference. The old path
(``--format jsonl`` to stdout, rows through Python) is measured on a tenth of the rows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, print_figures, result, scratch_dir  # noqa: E402

LAMINA = [sys.executable, "-m", "lamina.cli"]


def make_table(wh: str, rows: int) -> None:
    import numpy as np
    import pyarrow as pa

    import lamina

    rng = np.random.default_rng(7)
    start = np.datetime64("2024-01-01T00:00:00", "us")
    ts = start + rng.integers(0, 30 * 86400 * 10**6, rows).astype("timedelta64[us]")
    data = pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "user": pa.array([f"u{i % 1000}" for i in range(rows)]),
            "k": pa.array(np.arange(rows)),
            "amount": pa.array(rng.random(rows)),
        }
    )
    with lamina.connect(warehouse=wh) as cat:
        cat.create_table("events", data.schema, "ts", "DAY").append(data)


def reference(wh: str, path: str) -> tuple[float, float]:
    """pyarrow.csv.write_csv of the query's result, already in memory: as it is, and
    with its timestamps naive (Arrow formats zoned ones one zone lookup per value)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    import lamina

    with lamina.connect(warehouse=wh) as cat:
        table = cat.sql("SELECT * FROM events")
    t0 = time.perf_counter()
    pacsv.write_csv(table, path)
    zoned = time.perf_counter() - t0
    naive = table.set_column(0, "ts", table.column("ts").cast(pa.timestamp("us")))
    t0 = time.perf_counter()
    pacsv.write_csv(naive, path)
    return zoned, time.perf_counter() - t0


def exports(wh: str, root: str) -> dict[str, float]:
    """Seconds of the export itself per format: the query's result streamed to a file
    by the code ``--output`` runs, in this process."""
    import functools

    import lamina
    from lamina.cli.output import QueryFormat, write_result

    out = {}
    with lamina.connect(warehouse=wh) as cat:
        engine = cat.sql_engine()
        for fmt in (QueryFormat.csv, QueryFormat.jsonl, QueryFormat.parquet):
            write = functools.partial(
                write_result, fmt=fmt, path=os.path.join(root, f"in.{fmt.value}"), limit=0
            )
            t0 = time.perf_counter()
            engine.run("SELECT * FROM events", write)
            out[fmt.value] = time.perf_counter() - t0
    return out


def wall(cmd: list[str], env: dict[str, str], stdout: Any = subprocess.DEVNULL) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=stdout, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t0


def main(quick: bool = False) -> dict[str, Any]:
    """lamina query --output (CSV, JSON lines, Parquet) against pyarrow.csv."""
    rows = 300_000 if quick else 3_000_000
    with scratch_dir("cli-export") as root:
        wh = os.path.join(root, "wh")
        make_table(wh, rows)
        env = {**os.environ, "LAMINA_WAREHOUSE": wh}
        sql = "SELECT * FROM events"
        zoned, naive = reference(wh, os.path.join(root, "ref.csv"))
        seconds = {"pyarrow.csv": zoned, "pyarrow.csv naive": naive}
        inside = exports(wh, root)
        for fmt in ("csv", "jsonl", "parquet"):
            out = os.path.join(root, f"out.{fmt}")
            seconds[fmt] = wall([*LAMINA, "query", sql, "--output", out], env)
        with open(os.path.join(root, "stdout.jsonl"), "w") as f:
            tenth = f"{sql} LIMIT {rows // 10}"
            seconds["stdout jsonl (a tenth)"] = wall(
                [*LAMINA, "query", tenth, "-f", "jsonl"], env, f
            )
    ref = seconds["pyarrow.csv naive"]
    figures = [
        figure(
            f"pyarrow.csv.write_csv, {rows:,} rows in memory",
            seconds["pyarrow.csv"],
            "s",
            note="the result's UTC timestamps as they are",
        ),
        figure("  the same, timestamps naive", ref, "s", note="reference: Arrow's fast formatting"),
        figure("export to CSV", inside["csv"], "s", note="the query streamed to the file"),
        figure("  CSV / reference", inside["csv"] / ref, "x", "<= 2"),
        figure("export to JSON lines", inside["jsonl"], "s"),
        figure("  JSON lines / reference", inside["jsonl"] / ref, "x", "<= 2"),
        figure("export to Parquet", inside["parquet"], "s"),
        figure("lamina query --output out.csv", seconds["csv"], "s", note="whole process"),
        figure("lamina query --output out.jsonl", seconds["jsonl"], "s", note="whole process"),
        figure("lamina query --output out.parquet", seconds["parquet"], "s", note="whole process"),
        figure(
            f"lamina query -f jsonl > file, {rows // 10:,} rows",
            seconds["stdout jsonl (a tenth)"],
            "s",
            note="rows through Python (the path without --output)",
        ),
    ]
    print_figures(f"CLI export of {rows:,} rows", figures)
    details = {"seconds": seconds, "export_seconds": inside}
    return result("cli_export", {"rows": rows}, figures, details)


if __name__ == "__main__":
    cli(main, "cli_export")
