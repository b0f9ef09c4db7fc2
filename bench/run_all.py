"""Run every lamina benchmark, print a summary of every figure against its target.

    .venv/bin/python bench/run_all.py            # full sizes (~20 min on 2 cores)
    .venv/bin/python bench/run_all.py --quick    # small sizes, a smoke run (~6 min)
    .venv/bin/python bench/run_all.py --only sql,catalog

Each benchmark runs in its own subprocess (a clean heap for memory figures, one JVM
for Spark) and writes ``bench/results/<name>.json`` (``bench/results/quick/`` with
``--quick``); the summary goes to ``summary.json`` beside them. Exit status: 1 when a
benchmark crashed, or with ``--strict`` when a figure missed its target; else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    BENCH_DIR,
    RESULTS_DIR,
    environment,
    figure,
    fmt_value,
    print_table,
    status,
    write_json,
)

# name -> script; every script but timeline takes [--quick] --json PATH
BENCHMARKS = {
    "local_append": "bench_local_append.py",
    "spark_append": "bench_spark_append.py",
    "spark_source": "bench_spark_source.py",
    "sql": "bench_sql.py",
    "sql_joins": "bench_sql_joins.py",
    "tpch": "bench_tpch.py",
    "catalog": "bench_catalog.py",
    "writers": "bench_writers.py",
    "locks": "bench_locks.py",
    "planning": "bench_planning.py",
    "timeline": "bench_timeline.py",
    "lineage": "bench_lineage.py",
    "readers": "bench_readers.py",
    "cli": "bench_cli.py",
    "cli_export": "bench_cli_export.py",
    "compaction": "bench_compaction.py",
    "keyindex": "bench_keyindex.py",
    "upsert": "bench_upsert.py",
    "upsert_spark": "bench_upsert_spark.py",
    "dv_sql": "bench_dv_sql.py",
    "upsert_modes": "bench_upsert_modes.py",
    "upsert_soak": "bench_upsert_soak.py",
    "schema": "bench_schema.py",
    "rowlevel": "bench_rowlevel.py",
    "console": "bench_console.py",
}


def command(name: str, out: Path, quick: bool) -> list[str]:
    script = str(BENCH_DIR / BENCHMARKS[name])
    if name == "timeline":  # owned separately: --segments N --out PATH
        return [sys.executable, script, "--out", str(out)] + (
            ["--segments", "100000"] if quick else []
        )
    return [sys.executable, script, "--json", str(out)] + (["--quick"] if quick else [])


def timeline_figures(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Figures out of bench_timeline.py's own JSON layout."""
    segs = r.get("params", {}).get("segments")
    b, inc = r.get("build", {}), r.get("incremental_add", {})
    lk, op = r.get("lookup_day", {}), r.get("single_ops", {})
    ov, mem = r.get("overshadowed", {}), r.get("memory", {})
    mc = r.get("minor_compaction", {})
    inc_note = "" if inc.get("complete", True) else f"first {inc.get('segments', 0):,} only"
    return [
        figure("Timeline.build", b.get("seconds"), "s", note=f"{segs:,} segments" if segs else ""),
        figure("incremental add", inc.get("us_per_segment"), "µs/segment", note=inc_note),
        figure("lookup 1 day, median", lk.get("median_us"), "µs", "< 1000"),
        figure("lookup 1 day, p99", lk.get("p99_us"), "µs", "< 1000"),
        figure("add higher-version hour", op.get("add_higher_version_hour_us"), "µs"),
        figure("remove it (falls back)", op.get("remove_higher_version_hour_us"), "µs"),
        figure("minor compaction, group shows", mc.get("add_completing_segment_us"), "µs"),
        figure("minor compaction, falls back", mc.get("remove_one_falls_back_us"), "µs"),
        figure("overshadowed(), 1% hidden", ov.get("one_percent_hidden_seconds"), "s"),
        figure("build peak (tracemalloc)", mem.get("tracemalloc_peak_mib"), "MB"),
    ]


def run_one(name: str, out: Path, quick: bool) -> dict[str, Any]:
    print(f"\n=== {name} ({BENCHMARKS[name]}) ===", flush=True)
    if out.exists():
        out.unlink()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(command(name, out, quick), env=env, cwd=BENCH_DIR.parent)
    wall = time.perf_counter() - t0
    data: dict[str, Any] = {}
    if out.exists():
        data = json.loads(out.read_text())
    if not data:
        return {"name": name, "error": f"exit code {proc.returncode}, no results", "wall_s": wall}
    if name == "timeline":
        data = {"name": "timeline", "figures": timeline_figures(data), "details": data}
    data["wall_s"] = wall
    if proc.returncode != 0:
        data["exit_code"] = proc.returncode
    return data


def main() -> int:
    ap = argparse.ArgumentParser(description="Run all lamina benchmarks.")
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    ap.add_argument("--only", default="", help=f"comma list of: {', '.join(BENCHMARKS)}")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        ap.error(f"unknown benchmark(s) {unknown}; pick from {list(BENCHMARKS)}")
    out_dir = RESULTS_DIR / "quick" if args.quick else RESULTS_DIR
    t0 = time.perf_counter()
    results = {n: run_one(n, out_dir / f"{n}.json", args.quick) for n in names}
    total = time.perf_counter() - t0

    rows, crashed, missed = [], [], []
    for n, r in results.items():
        if "error" in r:
            crashed.append(n)
            rows.append([n, "CRASHED", r["error"], "-", "FAIL", ""])
            continue
        for i, f in enumerate(r["figures"]):
            if f["ok"] is False:
                missed.append(f"{n}: {f['metric']}")
            rows.append(
                [
                    n if i == 0 else "",
                    f["metric"],
                    fmt_value(f["value"], f["unit"]),
                    f["target"] or "-",
                    status(f["ok"]),
                    f["note"],
                ]
            )
        exit_note = f", exit {r['exit_code']}" if "exit_code" in r else ""
        rows.append(
            [
                "",
                f"(benchmark wall time{exit_note})",
                fmt_value(r["wall_s"], "s"),
                "-",
                "-",
                "",
            ]
        )
    mode = "quick" if args.quick else "full"
    print_table(
        f"lamina benchmarks ({mode}), {total / 60:.1f} min total",
        ["benchmark", "metric", "value", "target", "status", "note"],
        rows,
    )
    write_json(
        {
            "mode": mode,
            "total_s": total,
            "env": environment(),
            "crashed": crashed,
            "missed_targets": missed,
            "results": {
                n: {k: r.get(k) for k in ("figures", "wall_s", "error", "exit_code") if k in r}
                for n, r in results.items()
            },
        },
        out_dir / "summary.json",
    )
    print(f"results in {out_dir}/ ; targets missed: {len(missed)}, crashed: {len(crashed)}")
    return 1 if crashed or (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
