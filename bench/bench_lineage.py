"""Segment lineage: end_replace / revert_replace latency, and the cost of a REFRESH push.

(a) Latency of the lineage switches on a table of 10,000 live segments (HOUR chunks,
one segment each, built by one ``t.refresh`` on a consistent_push REFRESH table).
Each cycle opens ``start_replace(from=<all 10k live ids>, to=[])`` (not timed), then
times ``end_replace`` (COMPLETED: all 10k segments disappear from the snapshot) and
``revert_replace`` (the rollback: they all come back), then drops the reverted entry
with ``run_retention(lineage_only=True)`` (not timed) so every cycle starts from the
same state. p50 and p99 over the timed operations, on the embedded SQLite catalog and
on PostgreSQL (``postgresql://postgres@127.0.0.1:5432/test`` or
``$LAMINA_BENCH_POSTGRES_URL``, in a fresh schema dropped afterwards; skipped with the
reason when unreachable). Data-size independence: a second table in the same catalog
with the same segment count and 10x the rows per segment; the two tables' cycles are
interleaved, and the ratio of their p50s must stay ~1.

(b) Push cost: ``t.refresh(data)`` on a consistent_push REFRESH table (lineage entry,
hidden publish, completion in the same commit) vs ``t.append(data)`` on a plain table,
same data, fresh tables and directories every repetition, alternating order, medians.
Local: 1M rows over 30 days (Arrow), one uncounted warm-up of each. Spark: 2M rows over
10 days (``spark.range``, cached and counted first), one uncounted warm-up write (both
modes run the same Spark job; only the catalog steps differ).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402
from bench_catalog import postgres_schema  # noqa: E402
from bench_local_append import make_table  # noqa: E402
from bench_spark_append import DAYS as SPARK_DAYS  # noqa: E402
from bench_spark_append import make_df  # noqa: E402

import lamina  # noqa: E402

HOUR_US = 3_600_000_000
BUILD_START = "2020-01-01T00:00:00"


# -- (a) lineage switch latency ---------------------------------------------------------


def hourly_table(segments: int, rows_per_segment: int) -> pa.Table:
    """``rows_per_segment`` rows in each of ``segments`` consecutive hours."""
    base = np.datetime64(BUILD_START, "us").astype("int64")
    hours = np.repeat(np.arange(segments, dtype=np.int64) * HOUR_US, rows_per_segment)
    within = np.tile(np.arange(rows_per_segment, dtype=np.int64) * 1_000_000, segments)
    n = segments * rows_per_segment
    rng = np.random.default_rng(1)
    return pa.table(
        {
            "ts": pa.array(base + hours + within, pa.timestamp("us")),
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "value": pa.array(rng.random(n)),
            "qty": pa.array(rng.integers(0, 1000, n).astype(np.int32)),
        }
    )


def build_table(cat: Any, name: str, segments: int, rows_per_segment: int) -> tuple[Any, dict]:
    data = hourly_table(segments, rows_per_segment)
    t = cat.create_table(
        name,
        data.schema,
        time_column="ts",
        segment_granularity="HOUR",
        ingestion_type="REFRESH",
        consistent_push=True,
        properties={"target_rows_per_segment": rows_per_segment},
    )
    build_s, _ = timed(lambda: t.refresh(data))
    snap = t.snapshot()
    assert len(snap.segments) == segments, f"{name}: {len(snap.segments)} segments"
    info = {
        "segments": segments,
        "rows_per_segment": rows_per_segment,
        "rows": data.num_rows,
        "bytes": sum(s.size_bytes for s in snap.segments),
        "build_s": build_s,
    }
    return t, info


def cycle(cat: Any, t: Any, ids: list[str], verify: bool = False) -> dict[str, float]:
    """start (untimed) + end (timed) + revert (timed) + drop the reverted entry."""

    def state(entry: str) -> str:
        return next(e.state for e in t.lineage() if e.id == entry)

    start_s, entry = timed(lambda: t.start_replace(ids, []))
    end_s, _ = timed(lambda: t.end_replace(entry))
    if verify:
        assert state(entry) == "COMPLETED"
        assert t.scan().row_count == 0, "end_replace left segments visible"
    revert_s, _ = timed(lambda: t.revert_replace(entry))
    if verify:
        assert state(entry) == "REVERTED"
        assert len(t.snapshot().segments) == len(ids), "revert_replace lost segments"
    cat.run_retention(tables=[t.name], lineage_only=True)  # the reverted entry goes
    return {"start": start_s, "end": end_s, "revert": revert_s}


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def lineage_latency(
    url: str | None, root: str, segments: int, ops: int, rows: tuple[int, int]
) -> dict[str, Any]:
    """Both data sizes in one catalog, cycles interleaved; times in ms."""
    cat = lamina.connect(catalog=url, warehouse=os.path.join(root, "wh"))
    try:
        tables, info = {}, {}
        for r in rows:
            tables[r], info[r] = build_table(cat, f"lin_{r}", segments, r)
            print(
                f"    built {segments:,} segments x {r} rows ({info[r]['bytes'] / 1e6:.1f} MB) "
                f"in {info[r]['build_s']:.1f}s"
            )
        ids = {r: [s.id for s in tables[r].snapshot().segments] for r in rows}
        for r in rows:  # warm-up (connections, statement caches), checked, not counted
            for k in range(2):
                cycle(cat, tables[r], ids[r], verify=k == 0)
        times: dict[int, dict[str, list[float]]] = {
            r: {"start": [], "end": [], "revert": []} for r in rows
        }
        for i in range(ops):
            order = rows if i % 2 == 0 else rows[::-1]
            for r in order:
                for k, v in cycle(cat, tables[r], ids[r]).items():
                    times[r][k].append(v * 1000)
        assert len(tables[rows[0]].lineage()) == 1  # only the build's entry is left
        return {"times_ms": times, "tables": info}
    finally:
        cat.close()


# -- (b) push cost ------------------------------------------------------------------------


def push_local(data: pa.Table, root: str, mode: str) -> float:
    cat = lamina.connect(warehouse=os.path.join(root, "wh"))
    try:
        kw: dict[str, Any] = (
            {"ingestion_type": "REFRESH", "consistent_push": True} if mode == "refresh" else {}
        )
        t = cat.create_table("events", data.schema, "ts", "DAY", **kw)
        secs, _ = timed(lambda: t.refresh(data) if mode == "refresh" else t.append(data))
        assert t.scan().row_count == data.num_rows
        if mode == "refresh":
            assert [e.state for e in t.lineage()] == ["COMPLETED"]
        return secs
    finally:
        cat.close()


def push_spark(df: Any, root: str, mode: str, rows: int) -> float:
    cat = lamina.connect(warehouse=os.path.join(root, "wh"))
    try:
        kw: dict[str, Any] = (
            {"ingestion_type": "REFRESH", "consistent_push": True} if mode == "refresh" else {}
        )
        t = cat.create_table("events", df.schema, "ts", "DAY", **kw)
        secs, _ = timed(lambda: t.refresh(df) if mode == "refresh" else t.append(df))
        assert t.scan().row_count == rows
        if mode == "refresh":
            assert [e.state for e in t.lineage()] == ["COMPLETED"]
        return secs
    finally:
        cat.close()


def alternate(
    run: Any, reps: int, label: str, warm: tuple[str, ...] = ("refresh", "append")
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"refresh": [], "append": []}
    for mode in warm:  # warm-up, not counted
        with scratch_dir(f"lin-{label}-warm") as d:
            run(d, mode)
    for rep in range(reps):
        order = ["refresh", "append"] if rep % 2 == 0 else ["append", "refresh"]
        for mode in order:
            with scratch_dir(f"lin-{label}-{mode}") as d:
                times[mode].append(run(d, mode))
        print(
            f"  {label} rep {rep + 1}/{reps} ({' then '.join(order)}): "
            f"refresh {times['refresh'][-1]:.3f}s, append {times['append'][-1]:.3f}s"
        )
    return times


def main(quick: bool = False) -> dict[str, Any]:
    """Lineage: end/revert_replace latency at 10k segments; REFRESH push vs append cost."""
    segments = 2_000 if quick else 10_000
    ops = 50
    rows_small = 10
    rows = (rows_small, rows_small * 10)
    local_rows = 200_000 if quick else 1_000_000
    local_reps = 3 if quick else 9
    spark_rows = 400_000 if quick else 2_000_000
    spark_reps = 3 if quick else 5

    figures: list[dict[str, Any]] = []
    details: dict[str, Any] = {}

    # (a)
    backends: dict[str, Any] = {"SQLite": None}
    pg_url, pg_note, pg_drop = postgres_schema()
    if pg_url is None:
        print(f"  skipping PostgreSQL: {pg_note}")
    else:
        backends["PostgreSQL"] = pg_url
    try:
        for backend, url in backends.items():
            print(f"  {backend}: {ops} end/revert cycles per table ({pg_note if url else 'file'})")
            with scratch_dir("lin-latency") as d:
                secs, details[backend] = timed(
                    lambda url=url, d=d: lineage_latency(url, d, segments, ops, rows)
                )
            details[backend]["wall_s"] = secs
            print(f"    {backend} done in {secs:.0f}s")
    finally:
        if pg_drop is not None:
            pg_drop()
    for backend in ("SQLite", "PostgreSQL"):
        if backend not in details:
            figures.append(
                figure(f"{backend}: end/revert_replace", None, "ms", note="skipped: " + pg_note)
            )
            continue
        tm = details[backend]["times_ms"]
        for r in rows:
            size = f"{r} rows/segment"
            for op in ("end", "revert"):
                xs = tm[r][op]
                figures.append(
                    figure(
                        f"{backend} {op}_replace p50, {size}",
                        median(xs),
                        "ms",
                        "< 5",
                        note=f"{segments:,} segments, {len(xs)} ops",
                    )
                )
                figures.append(figure(f"{backend} {op}_replace p99, {size}", pct(xs, 99), "ms"))
        for op in ("end", "revert"):
            figures.append(
                figure(
                    f"{backend} {op}_replace p50 10x rows / 1x rows",
                    median(tm[rows[1]][op]) / median(tm[rows[0]][op]),
                    "x",
                    "<= 1.25",
                    note="same segment count; must not grow with data",
                )
            )
        figures.append(
            figure(
                f"{backend} start_replace p50 (untimed step)",
                median(tm[rows[0]]["start"]),
                "ms",
                note=f"from = all {segments:,} live ids",
            )
        )
        for k in ("p50", "p99"):
            for r in rows:
                details[backend].setdefault("summary_ms", {})[f"{r}_{k}"] = {
                    op: (median(tm[r][op]) if k == "p50" else pct(tm[r][op], 99))
                    for op in ("start", "end", "revert")
                }

    # (b) local
    data = make_table(local_rows)
    secs, local = timed(
        lambda: alternate(lambda d, mode: push_local(data, d, mode), local_reps, "local")
    )
    details["local_wall_s"] = secs
    med_local = {k: median(v) for k, v in local.items()}
    details["local_push_s"] = local
    figures += [
        figure(
            "local t.refresh (consistent push)",
            med_local["refresh"],
            "s",
            note=f"{local_rows:,} rows, 30 days",
        ),
        figure("local t.append (plain table)", med_local["append"], "s"),
        figure(
            "local refresh / append", med_local["refresh"] / med_local["append"], "x", "<= 1.10"
        ),
    ]

    # (b) Spark
    from lamina.engines.spark import get_spark

    t_spark = time.perf_counter()
    spark = get_spark(app_name="lamina-bench-lineage")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = make_df(spark, spark_rows)
        gen_s, count = timed(df.count)
        assert count == spark_rows
        print(f"  generated and cached {spark_rows:,} rows in {gen_s:.1f}s (not timed)")
        # one warm-up write: both modes run the same Spark job (only the catalog differs)
        sp = alternate(
            lambda d, mode: push_spark(df, d, mode, spark_rows), spark_reps, "spark", ("append",)
        )
        df.unpersist()
    finally:
        spark.stop()
    details["spark_wall_s"] = time.perf_counter() - t_spark
    med_spark = {k: median(v) for k, v in sp.items()}
    details["spark_push_s"] = sp
    figures += [
        figure(
            "Spark t.refresh(df) (consistent push)",
            med_spark["refresh"],
            "s",
            note=f"{spark_rows:,} rows, {SPARK_DAYS} days",
        ),
        figure("Spark t.append(df) (plain table)", med_spark["append"], "s"),
        figure(
            "Spark refresh / append", med_spark["refresh"] / med_spark["append"], "x", "<= 1.10"
        ),
    ]

    print_figures(
        f"Lineage: {segments:,}-segment switches ({ops} ops), push cost "
        f"(local median of {local_reps}, Spark median of {spark_reps})",
        figures,
    )
    return result(
        "lineage",
        {
            "segments": segments,
            "ops": ops,
            "rows_per_segment": list(rows),
            "local_rows": local_rows,
            "local_repetitions": local_reps,
            "spark_rows": spark_rows,
            "spark_repetitions": spark_reps,
            "postgres": pg_note,
        },
        figures,
        details,
    )


if __name__ == "__main__":
    cli(main, "lineage")
