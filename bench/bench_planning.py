"""Scan planning over a table with 1,000,000 segments: time and peak memory.

The catalog rows are made directly: a HOUR table created through lamina, then 1M rows
bulk-inserted into ``lamina_segments`` (100k hourly chunks x 10 partitions, in batches
of 50k, in one transaction) with one COMPLETED commit in ``lamina_commits`` and
``lamina_tables.last_seq`` set to its seq. The files do not exist: planning never
opens them.

A first whole-table plan (in its own process, timed) finds no segment manifest,
reads every row and writes one, as the first reader of a grown table does. Then
1,000 more segments are published (100 new chunks, seq 2), so the measured plans
read the manifest plus the catalog rows changed since — a table's steady state.

Planning (``t.scan()`` = catalog delta + manifest + columnar visibility) is measured
in a fresh subprocess, so the ``ru_maxrss`` high-water mark starts from a clean
baseline: wall time (median of the runs), maxrss delta, and the tracemalloc peak of a
separate traced run, plus a breakdown of the steps.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from typing import Any

import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402

import lamina  # noqa: E402

HOUR_US = 3_600_000_000
START_US = 1_420_070_400_000_000  # 2015-01-01T00:00:00Z
BATCH = 50_000
TABLE = "big"


def populate(cat: lamina.Catalog, chunks: int, parts: int, seq: int = 1, first: int = 0) -> int:
    """Insert ``chunks * parts`` live segments (chunks ``first``...) and one completed
    commit at ``seq``; returns rows."""
    from sqlalchemy import insert, update

    from lamina.core.segment import Segment
    from lamina.meta.db import run
    from lamina.meta.schema import commits, segments, tables
    from lamina.meta.tables import get_table, now_us
    from lamina.meta.writers import owner_token

    rec = get_table(cat.context.db, TABLE)
    tag = uuid.uuid4().hex[:8]

    def rows(commit_id: int) -> Any:
        batch: list[dict[str, Any]] = []
        for c in range(first, first + chunks):
            start = START_US + c * HOUR_US
            end = start + HOUR_US
            iv = lamina.Interval.of(start, end)
            for p in range(parts):
                batch.append(
                    {
                        "table_id": rec.id,
                        "segment_id": Segment(TABLE, iv, 1, p, 0).id,
                        "start_us": start,
                        "end_us": end,
                        "version": 1,
                        "partition_id": p,
                        "num_core_partitions": 0,
                        "location": (
                            f"{TABLE}/data/c{commit_id:010d}/__lamina_chunk={start}/"
                            f"part-{p:05d}-{tag}.parquet"
                        ),
                        "row_count": 1000,
                        "size_bytes": 40_000,
                        "min_time": start + p,
                        "max_time": end - 1 - p,
                        "commit_id": commit_id,
                        "added_seq": seq,
                    }
                )
                if len(batch) == BATCH:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def txn(conn: Any) -> int:
        now = now_us()
        commit_id = int(
            conn.execute(
                insert(commits).values(
                    table_id=rec.id,
                    action="APPEND",
                    state="COMPLETED",
                    seq=seq,
                    started_at=now,
                    completed_at=now,
                    heartbeat_at=now,
                    owner=owner_token(),
                    files_cleaned=0,
                    metadata="{}",
                )
            ).inserted_primary_key[0]
        )
        total = 0
        for batch in rows(commit_id):
            conn.execute(insert(segments), batch)
            total += len(batch)
        conn.execute(
            update(tables)
            .where(tables.c.id == rec.id)
            .values(last_seq=seq, next_version=2, max_span_us=HOUR_US)  # as a publish would
        )
        return total

    return run(cat.engine, txn, write=True)


def _status_mb(key: str) -> float:
    """A ``/proc/self/status`` memory line (VmRSS, VmHWM) in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise KeyError(key)


def _reset_peak() -> bool:
    """Reset the peak-RSS mark (VmHWM) to the current RSS (Linux >= 4.0).

    Needed because ``ru_maxrss`` survives fork + exec: a child starts with its
    parent's high-water mark.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def breakdown(cat: lamina.Catalog) -> tuple[int, float, float, float]:
    """Segments, and seconds of catalog delta / manifest read / columnar plan."""
    from lamina.core.columnar import plan_columns, without
    from lamina.io.manifest import read_manifest
    from lamina.meta.deltas import SnapshotDelta, snapshot_or_delta
    from lamina.read import COLUMNAR_AT

    ctx = cat.context
    snap_s, got = timed(lambda: snapshot_or_delta(ctx.db, TABLE, None, None, COLUMNAR_AT))
    assert isinstance(got, SnapshotDelta) and got.manifest is not None, "no manifest used"
    manifest = got.manifest
    read_s, base = timed(lambda: read_manifest(ctx.warehouse, manifest))
    segs = pa.concat_tables([without(base, got.removed), got.added])
    plan_s, _ = timed(
        lambda: plan_columns(got.table, got.seq, got.commit_id, segs, None, ctx.db.root)
    )
    return segs.num_rows, snap_s, read_s, plan_s


def warm_up(cat: lamina.Catalog) -> None:
    """One-time costs before the baseline: imports (pyarrow imports pandas on its
    first conversion), compute kernels, the Parquet reader."""
    import pandas  # noqa: F401

    from lamina.core.columnar import plan_columns, segment_table
    from lamina.io.manifest import read_manifest
    from lamina.meta.deltas import SnapshotDelta, snapshot_or_delta
    from lamina.read import COLUMNAR_AT

    one = segment_table(
        {
            "start_us": [0],
            "end_us": [1],
            "version": [1],
            "partition_id": [0],
            "num_core_partitions": [0],
            "location": ["d/f.parquet"],
        }
    )
    got = snapshot_or_delta(cat.context.db, TABLE, None, None, COLUMNAR_AT)
    assert isinstance(got, SnapshotDelta) and got.manifest is not None
    first = lamina.Interval.of(START_US, START_US + HOUR_US)
    read_manifest(cat.context.warehouse, got.manifest, first)
    assert len(plan_columns(got.table, 0, None, one, None, "").tasks) == 1


def held_bytes(plan: Any) -> int:
    """Bytes a columnar plan keeps alive: the Arrow buffers of the snapshot's segment
    table (each counted once: chunks share a dictionary) and its task arrays."""

    def buffers(arr: pa.Array) -> list[pa.Buffer]:
        out = [b for b in arr.buffers() if b is not None]
        return out + buffers(arr.dictionary) if pa.types.is_dictionary(arr.type) else out

    c = plan.columns
    unique = {b.address: b.size for col in c.segs.columns for ch in col.chunks for b in buffers(ch)}
    arrays = c.rows.nbytes + c.span_start.nbytes + c.span_end.nbytes + c.whole.nbytes
    return int(sum(unique.values()) + arrays)


def measure(warehouse: str, runs: int) -> dict[str, Any]:
    """Run in a fresh process: plan the scan, report time and memory."""
    import tracemalloc

    cat = lamina.connect(warehouse=warehouse)
    t = cat.load_table(TABLE)
    warm_up(cat)
    gc.collect()
    reset = _reset_peak()
    base_rss, base_hwm = _status_mb("VmRSS"), _status_mb("VmHWM")
    base_maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    secs, plan = timed(t.scan)  # first run: the peak
    peak_hwm = _status_mb("VmHWM")
    peak_maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tasks, segs_rows, held = len(plan), plan.row_count, held_bytes(plan)
    del plan
    gc.collect()
    scan_s = [secs]
    for _ in range(runs - 1):
        s, plan = timed(t.scan)
        scan_s.append(s)
        del plan
        gc.collect()
    # breakdown of one run
    n_segments, snap_s, build_s, lookup_s = breakdown(cat)
    gc.collect()
    hour = lamina.Interval.of(START_US + 5000 * HOUR_US, START_US + 5001 * HOUR_US)
    hour_s, hplan = timed(lambda: t.scan(interval=hour))
    hour_tasks = len(hplan)
    del hplan
    day = lamina.Interval.of(START_US + 5000 * HOUR_US, START_US + 5024 * HOUR_US)
    day_runs = [timed(lambda: t.scan(interval=day)) for _ in range(5)]
    day_s, day_tasks = median([r[0] for r in day_runs]), len(day_runs[0][1])
    gc.collect()
    tracemalloc.start()
    traced_s, plan = timed(t.scan)
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del plan
    cat.close()
    return {
        "segments": n_segments,
        "tasks": tasks,
        "held_bytes": held,
        "planned_rows": segs_rows,
        "scan_s": scan_s,
        "snapshot_s": snap_s,
        "timeline_build_s": build_s,
        "lookup_s": lookup_s,
        "one_hour_scan_s": hour_s,
        "one_hour_tasks": hour_tasks,
        "one_day_scan_s": day_s,
        "one_day_tasks": day_tasks,
        "peak_reset": reset,
        "baseline_rss_mb": base_rss,
        "baseline_hwm_mb": base_hwm,
        "peak_hwm_mb": peak_hwm,
        "peak_rss_delta_mb": peak_hwm - base_rss,
        "baseline_maxrss_mb": base_maxrss,
        "peak_maxrss_mb": peak_maxrss,
        "maxrss_delta_mb": peak_maxrss - base_maxrss,
        "tracemalloc_peak_mb": traced_peak / 2**20,
        "traced_scan_s": traced_s,
    }


def main(quick: bool = False) -> dict[str, Any]:
    """Planning: t.scan() time and peak memory over 1,000,000 segments."""
    chunks = 10_000 if quick else 100_000
    parts = 10
    runs = 3
    with scratch_dir("planning") as root:
        wh = os.path.join(root, "wh")
        cat = lamina.connect(warehouse=wh)
        schema = pa.schema([("ts", pa.timestamp("us")), ("v", pa.int64())])
        cat.create_table(TABLE, schema, time_column="ts", segment_granularity="HOUR")
        insert_s, inserted = timed(lambda: populate(cat, chunks - 100, parts))
        cat.close()
        db_mb = os.path.getsize(os.path.join(wh, "lamina.db")) / 2**20
        print(f"  inserted {inserted:,} segment rows in {insert_s:.1f}s (catalog {db_mb:.0f} MB)")
        first = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--first", wh],
            check=True,
            capture_output=True,
            text=True,
        )
        first_s = float(first.stdout.strip().splitlines()[-1])
        cat = lamina.connect(warehouse=wh)
        inserted += populate(cat, 100, parts, seq=2, first=chunks - 100)
        cat.close()
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--measure", wh, "--runs", str(runs)],
            check=True,
            capture_output=True,
            text=True,
        )
        m = json.loads(proc.stdout.strip().splitlines()[-1])
        m["subprocess_s"] = time.perf_counter() - t0
    assert m["segments"] == inserted == m["tasks"], m
    assert m["one_hour_tasks"] == parts and m["one_day_tasks"] == 24 * parts, m
    figures = [
        figure(
            "t.scan() wall time", median(m["scan_s"]), "s", "< 1", note=f"{inserted:,} segments"
        ),
        figure("  catalog delta (1,000 new segments)", m["snapshot_s"], "s"),
        figure("  manifest read", m["timeline_build_s"], "s"),
        figure("  columnar visibility + plan", m["lookup_s"], "s"),
        figure(
            "first plan (no manifest yet: reads every row, writes one)",
            first_s,
            "s",
            note="once per table, then after every 10,000 changed rows",
        ),
        figure(
            "peak RSS delta (VmHWM)",
            m["peak_rss_delta_mb"],
            "MB",
            note=f"peak {m['peak_hwm_mb']:.0f} MB, RSS before {m['baseline_rss_mb']:.0f} MB",
        ),
        figure("tracemalloc peak", m["tracemalloc_peak_mb"], "MB"),
        figure(
            "t.scan(one hour) wall time",
            m["one_hour_scan_s"],
            "s",
            note=f"{m['one_hour_tasks']} segments planned",
        ),
        figure("t.scan(one day) wall time", m["one_day_scan_s"], "s", "< 0.02", note="median of 5"),
        figure(
            "bytes per segment held by the plan",
            m["held_bytes"] / inserted,
            "B",
            "< 150",
            note="Arrow segment table + task arrays",
        ),
        figure(
            "bytes per segment (peak RSS delta)", m["peak_rss_delta_mb"] * 2**20 / inserted, "B"
        ),
        figure(
            "bytes per segment (tracemalloc peak)", m["tracemalloc_peak_mb"] * 2**20 / inserted, "B"
        ),
    ]
    print_figures(f"Planning: {chunks:,} hourly chunks x {parts} partitions", figures)
    return result(
        "planning",
        {"chunks": chunks, "partitions": parts, "segments": inserted, "runs": runs},
        figures,
        {**m, "insert_s": insert_s, "catalog_db_mb": db_mb, "first_plan_s": first_s},
    )


if __name__ == "__main__":
    if "--first" in sys.argv:
        cat = lamina.connect(warehouse=sys.argv[sys.argv.index("--first") + 1])
        secs, _ = timed(cat.load_table(TABLE).scan)
        cat.close()
        print(secs)
    elif "--measure" in sys.argv:
        wh = sys.argv[sys.argv.index("--measure") + 1]
        runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 3
        print(json.dumps(measure(wh, runs)))
    else:
        cli(main, "planning")
