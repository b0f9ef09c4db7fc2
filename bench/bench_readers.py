"""Concurrent readers during REFRESH pushes: does any read ever see a mix of two pushes?

A consistent_push REFRESH table (DAY chunks over 10 days, ~20 segment files per push)
on the embedded SQLite catalog. Push ``i`` writes ``N_i`` rows (distinct per push),
every one with ``v == i``: a consistent read has ``min(v) == max(v) == i`` and
``count == N_i``; anything else is a mixed read. After a seed push, 3 reader processes
(multiprocessing, spawn) read continuously, alternating
``cat.sql("select count(*), min(v), max(v) from snap")`` (DuckDB) and
``t.to_arrow(columns=["v"])`` (pyarrow), while the parent makes 20 more pushes
(``t.refresh``), each followed by ``cat.run_retention()``.

Phase "retention 0s" (``replaced_segments_retention = 0s``) deletes the replaced push's
files right after every push, so a read that planned the old snapshot can find a file
gone: that read fails (counted as an error, by kind) — it must never return a mix.
Phase "retention 24h" (the default) is the control: retention deletes nothing, so the
only files that go are the pushes' own cleanup (``start_replace`` drops the snapshot
before the previous one, Pinot's proactive cleanup) — a read slower than two pushes
can still lose a file there.
Readers record reads done, mixed reads and errors; the figures are their totals.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import re
import sys
import time
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402

import lamina  # noqa: E402

READERS = 3
DAYS = 10
DAY_US = 86_400_000_000
START = "2024-05-01T00:00:00"
QUERY = "select count(*) as n, min(v) as lo, max(v) as hi from snap"


def push_sizes(pushes: int, base: int) -> list[int]:
    """Rows of push 0 (the seed) .. push ``pushes``: distinct, so a count identifies a push."""
    return [base + 1_009 * i for i in range(pushes + 1)]


def push_data(i: int, rows: int) -> pa.Table:
    rng = np.random.default_rng(i)
    base = np.datetime64(START, "us").astype("int64")
    return pa.table(
        {
            "ts": pa.array(base + rng.integers(0, DAYS * DAY_US, rows), pa.timestamp("us")),
            "v": pa.array(np.full(rows, i, dtype=np.int64)),
            "x": pa.array(rng.random(rows)),
        }
    )


def error_kind(mode: str, exc: BaseException) -> str:
    """An error's class and first line with numbers, ids and paths blurred (to count kinds)."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    text = re.sub(r"(/[^\s'\"),]+)+", "<path>", text)
    text = re.sub(r"\b[0-9a-f]{16,}\b", "<id>", text)
    text = re.sub(r"\d+", "N", text)
    return f"{mode}: {type(exc).__name__}: {text[:160]}"


def reader(idx: int, warehouse: str, sizes: list[int], ready: Any, stop: Any, out: Any) -> None:
    """Read until told to stop; report (reads, mixed, errors, kinds, versions seen)."""
    import pyarrow.compute as pc

    cat = lamina.connect(warehouse=warehouse)
    t = cat.load_table("snap")
    stats: dict[str, Any] = {
        "reader": idx,
        "reads": 0,
        "mixed": 0,
        "errors": 0,
        "by_mode": {"sql": 0, "arrow": 0},
        "error_kinds": Counter(),
        "error_examples": [],
        "mixed_examples": [],
        "versions_seen": set(),
    }
    ready.put(idx)
    k = idx
    try:
        while not stop.is_set():
            mode = "sql" if k % 2 == 0 else "arrow"
            k += 1
            stats["reads"] += 1
            stats["by_mode"][mode] += 1
            try:
                if mode == "sql":
                    row = cat.sql(QUERY).to_pylist()[0]
                    n, lo, hi = row["n"], row["lo"], row["hi"]
                else:
                    col = t.to_arrow(columns=["v"])["v"]
                    mm = pc.min_max(col).as_py()
                    n, lo, hi = len(col), mm["min"], mm["max"]
            except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                stats["errors"] += 1
                stats["error_kinds"][error_kind(mode, exc)] += 1
                if len(stats["error_examples"]) < 3:
                    stats["error_examples"].append(f"{mode}: {type(exc).__name__}: {exc}"[:400])
                continue
            ok = lo is not None and lo == hi and 0 <= lo < len(sizes) and n == sizes[lo]
            if ok:
                stats["versions_seen"].add(lo)
            else:
                stats["mixed"] += 1
                if len(stats["mixed_examples"]) < 5:
                    stats["mixed_examples"].append({"mode": mode, "n": n, "min": lo, "max": hi})
    finally:
        cat.close()
        stats["error_kinds"] = dict(stats["error_kinds"])
        stats["versions_seen"] = sorted(stats["versions_seen"])
        out.put(stats)


def run_phase(retention: str, pushes: int, base: int, gap_s: float) -> dict[str, Any]:
    sizes = push_sizes(pushes, base)
    datasets = [push_data(i, n) for i, n in enumerate(sizes)]
    ctx = mp.get_context("spawn")
    with scratch_dir("readers") as root:
        wh = os.path.join(root, "wh")
        cat = lamina.connect(warehouse=wh)
        try:
            t = cat.create_table(
                "snap",
                datasets[0].schema,
                time_column="ts",
                segment_granularity="DAY",
                ingestion_type="REFRESH",
                consistent_push=True,
                properties={
                    "replaced_segments_retention": retention,
                    "target_rows_per_segment": max(1, base // (2 * DAYS)),
                },
            )
            t.refresh(datasets[0])
            files_per_push = len(t.segments())
            ready, out, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
            procs = [
                ctx.Process(target=reader, args=(i, wh, sizes, ready, stop, out))
                for i in range(READERS)
            ]
            for p in procs:
                p.start()
            for _ in procs:
                ready.get(timeout=120)
            time.sleep(gap_s)  # every reader is reading the seed
            push_s, retention_s, deleted, written = [], [], 0, files_per_push
            t0 = time.perf_counter()
            for i in range(1, pushes + 1):
                secs, commit = timed(lambda i=i: t.refresh(datasets[i]))
                push_s.append(secs)
                written += len(commit.added)
                secs, report = timed(lambda: cat.run_retention(tables=["snap"]))
                retention_s.append(secs)
                deleted += report.segment_files
                time.sleep(gap_s)  # let the readers read this snapshot a few times
            wall = time.perf_counter() - t0
            stop.set()
            stats = []
            for _ in procs:
                try:
                    stats.append(out.get(timeout=120))
                except queue.Empty:
                    break
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.terminate()
            final = t.to_arrow(columns=["v"])
            assert final.num_rows == sizes[pushes], "the last push is not what the table holds"
            files_left = sum(len(fs) for _, _, fs in os.walk(os.path.join(wh, "snap", "data")))
        finally:
            cat.close()
    kinds: Counter[str] = Counter()
    for s in stats:
        kinds.update(s["error_kinds"])
    return {
        "retention": retention,
        "pushes": pushes,
        "sizes": sizes,
        "files_per_push": files_per_push,
        "readers_reported": len(stats),
        "reads": sum(s["reads"] for s in stats),
        "mixed": sum(s["mixed"] for s in stats),
        "errors": sum(s["errors"] for s in stats),
        "error_kinds": dict(kinds.most_common()),
        "versions_seen": sorted({v for s in stats for v in s["versions_seen"]}),
        "push_s": push_s,
        "retention_s": retention_s,
        "files_written": written,
        "files_deleted_by_retention": deleted,
        # start_replace drops the snapshot before the previous one (Pinot's proactive
        # cleanup), so pushes delete files too, whatever the retention setting
        "files_deleted_by_pushes": written - deleted - files_left,
        "files_left": files_left,
        "wall_s": wall,
        "per_reader": stats,
    }


def main(quick: bool = False) -> dict[str, Any]:
    """Readers: 3 processes read during 20 REFRESH pushes; count mixed and failed reads."""
    pushes = 20
    base = 40_000 if quick else 200_000
    gap_s = 0.2 if quick else 0.4
    figures: list[dict[str, Any]] = []
    phases: dict[str, Any] = {}
    for retention in ("0s", "24h"):
        print(f"  replaced_segments_retention = {retention}: {pushes} pushes, {READERS} readers")
        ph = run_phase(retention, pushes, base, gap_s)
        phases[retention] = ph
        print(
            f"    reads {ph['reads']}, mixed {ph['mixed']}, errors {ph['errors']}, "
            f"pushes seen {len(ph['versions_seen'])}/{pushes + 1}, "
            f"files deleted by retention {ph['files_deleted_by_retention']}, "
            f"by pushes {ph['files_deleted_by_pushes']}"
        )
        for kind, n in ph["error_kinds"].items():
            print(f"      {n} x {kind}")
        label = f"retention {retention}"
        short: Counter[str] = Counter()
        for k, n in ph["error_kinds"].items():
            mode, cls = k.split(": ")[:2]
            short[f"{mode} {cls}"] += n
        kinds = ", ".join(f"{k} {n}" for k, n in short.most_common())
        figures += [
            figure(
                f"{label}: reads done",
                ph["reads"],
                "reads",
                note=f"{ph['readers_reported']} readers, {ph['reads'] / ph['wall_s']:.1f} reads/s",
            ),
            figure(f"{label}: mixed reads", ph["mixed"], "reads", "<= 0"),
            figure(
                f"{label}: reads that errored",
                ph["errors"],
                "reads",
                note=kinds or "none",
            ),
            figure(
                f"{label}: pushes observed by readers",
                len(ph["versions_seen"]),
                "pushes",
                note=f"of {pushes + 1} (seed included)",
            ),
            figure(
                f"{label}: push (t.refresh) median",
                median(ph["push_s"]),
                "s",
                note=f"~{ph['sizes'][-1]:,} rows, {ph['files_per_push']} files per push",
            ),
            figure(
                f"{label}: run_retention median",
                median(ph["retention_s"]),
                "s",
                note=f"{ph['files_deleted_by_retention']} files deleted in all",
            ),
            figure(
                f"{label}: files deleted by the pushes themselves",
                ph["files_deleted_by_pushes"],
                "files",
                note="start_replace drops the snapshot before the previous one",
            ),
        ]
    print_figures(f"Readers: {READERS} reader processes during {pushes} REFRESH pushes", figures)
    return result(
        "readers",
        {
            "readers": READERS,
            "pushes": pushes,
            "rows_push_0": base,
            "days": DAYS,
            "gap_s": gap_s,
            "query": QUERY,
        },
        figures,
        phases,
    )


if __name__ == "__main__":
    cli(main, "readers")
