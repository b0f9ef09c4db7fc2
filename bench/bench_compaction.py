"""Compaction (issue 8 §6): what a minor compaction buys readers, what it costs, and
whether appends notice it. Embedded SQLite catalog.

Queries: one DAY chunk built from 1,000 small appends (100-1,000 rows each; 200 with
``--quick``). ``cat.sql`` latency, median of N, of a group-by over the chunk and of a
filtered count (a time range and a predicate), before and after ``t.compact()`` (the
same answers both times) — ratio after / before.

Throughput: the compaction's rows/s (planning, SEGMENT locks, reading every input file,
writing, publishing) against ``pq.write_table`` of the same rows to one file, and
against reading the inputs and writing them (the I/O floor of a compaction), measured
in the same run (medians of 3).

Appends during compaction: 4 appender processes (spawn) append 100-1,000 rows into 4
DAY chunks, one append every ~40 ms each, in phases of four kinds, taken in turn six
times (so that slow drifts of a shared machine hit every kind alike): without
compaction; with a compactor thread looping ``t.compact()`` over the same chunks (each
seeded with 200 segments, and re-merging its compacted segment with the new appends
every time, so every compaction has real work); beside a plain Parquet write+read loop
at normal priority (as any un-niced neighbour of the appenders would run); beside a
thread that only spins at the lowest CPU priority (SCHED_IDLE). Append latency p50 and
p99 with the compaction running vs without (ratio; issue target <= 1.2x), the share
of appends that ran while a compaction was in progress (overlap), and a check that
every appended row is there. The compactions run at the table's default
``compaction.nice`` (reading and writing at SCHED_IDLE), so the spin loop is their
floor: what any background work costs the appenders on this machine, however well it
yields (on a VM whose two vCPUs share a core, a busy sibling slows the other).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402

import lamina  # noqa: E402

DAY_US = 86_400_000_000
JAN1_US = int(np.datetime64("2024-01-01T00:00:00", "us").astype("int64"))
NAMES = np.array([f"user_{i}" for i in range(100)])
TARGET = 1_000_000  # compacted segment target: every chunk compacts into one segment
GROUP_BY = (
    "SELECT name, count(*) AS n, sum(value) AS total, max(qty) AS top FROM events GROUP BY name"
)
FILTERED = (
    "SELECT count(*) AS n FROM events WHERE ts >= TIMESTAMP '2024-01-01 06:00:00' "
    "AND ts < TIMESTAMP '2024-01-01 18:00:00' AND qty < 10"
)
QUERIES = {"group-by over the chunk": GROUP_BY, "filtered count": FILTERED}

APPENDERS = 4
LIVE_DAYS = 4
PACE_S = 0.04  # each appender: one append about every 40 ms (plus its latency)
PHASES = ("without", "with", "plain load", "idle spin")
ROUNDS = 6  # the phases run in this order, this many times: slow drifts of the machine
PHASE_ORDER = PHASES * ROUNDS  # (a noisy neighbour, a throttled vCPU) hit every kind alike


def batch(rows: int, seed: int, day: int = 0, first_id: int = 0) -> pa.Table:
    """``rows`` rows on day ``day`` (0: 2024-01-01), ids from ``first_id``."""
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "ts": pa.array(
                JAN1_US + day * DAY_US + np.sort(rng.integers(0, DAY_US, rows)),
                pa.timestamp("us"),
            ),
            "id": pa.array(np.arange(first_id, first_id + rows, dtype=np.int64)),
            "value": pa.array(rng.random(rows)),
            "name": pa.array(NAMES[rng.integers(0, len(NAMES), rows)]),
            "qty": pa.array(rng.integers(0, 100, rows, dtype=np.int32)),
        }
    )


def canonical(data: pa.Table) -> list[tuple[Any, ...]]:
    cols = [data[c].to_pylist() for c in data.column_names]
    return sorted(
        (tuple(round(v, 6) if isinstance(v, float) else v for v in r))
        for r in zip(*cols, strict=True)
    )


def query_times(cat: lamina.Catalog, reps: int) -> tuple[dict[str, float], dict[str, Any]]:
    """Median seconds of each query (interleaved), and the answers."""
    answers = {label: canonical(cat.sql(q)) for label, q in QUERIES.items()}  # warm-up
    times: dict[str, list[float]] = {label: [] for label in QUERIES}
    for _ in range(reps):
        for label, q in QUERIES.items():
            times[label].append(timed(lambda q=q: cat.sql(q))[0])  # type: ignore[misc]
    return {label: median(v) for label, v in times.items()}, answers


def queries_and_throughput(root: str, appends: int, reps: int) -> dict[str, Any]:
    cat = lamina.connect(warehouse=os.path.join(root, "wh"))
    rng = np.random.default_rng(7)
    sizes = rng.integers(100, 1_001, appends)
    firsts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    batches = [
        batch(int(n), 1000 + i, 0, int(f))
        for i, (n, f) in enumerate(zip(sizes, firsts, strict=True))
    ]
    rows = int(sizes.sum())
    t = cat.create_table("events", batches[0].schema, time_column="ts", segment_granularity="DAY")

    def load() -> None:
        for b in batches:
            t.append(b)

    append_s, _ = timed(load)
    inputs = t.segments()
    assert len(inputs) == appends and t.count() == rows
    print(f"  {appends:,} appends, {rows:,} rows in one DAY chunk ({append_s:.1f} s)")

    before, answers_before = query_times(cat, reps)
    compact_s, commit = timed(lambda: t.compact(target_rows_per_segment=TARGET))
    assert commit is not None and len(commit.removed) == appends
    after, answers_after = query_times(cat, reps)
    assert answers_after == answers_before, "compaction changed a query's answer"
    assert len(t.segments()) == 1 and t.count() == rows
    for label in QUERIES:
        print(
            f"  {label}: {before[label] * 1000:.2f} ms before, "
            f"{after[label] * 1000:.2f} ms after compaction"
        )

    # baselines on the same rows: one plain write; reading the inputs and writing them
    data = pa.concat_tables(batches)
    paths = [os.path.join(root, f"plain{i}.parquet") for i in range(3)]
    write_s = median([timed(lambda p=p: pq.write_table(data, p))[0] for p in paths])  # type: ignore[misc]
    locations = [s.location for s in inputs]

    def read_write(path: str) -> None:
        assert all(loc is not None for loc in locations)
        got = pa.concat_tables([pq.read_table(loc) for loc in locations])  # type: ignore[arg-type]
        pq.write_table(got, path)

    floor_s = median([timed(lambda p=p: read_write(p))[0] for p in paths])  # type: ignore[misc]
    print(
        f"  compaction {compact_s:.2f} s ({rows / compact_s:,.0f} rows/s); "
        f"pq.write_table {write_s:.3f} s; read {appends} files + write {floor_s:.2f} s"
    )
    cat.close()
    return {
        "appends": appends,
        "rows": rows,
        "append_s": append_s,
        "query_before_s": before,
        "query_after_s": after,
        "compact_s": compact_s,
        "write_table_s": write_s,
        "read_write_s": floor_s,
    }


# -- appends during compaction --------------------------------------------------------------


def _appender(wh: str, w: int, per_phase: int, root: str) -> None:
    """Two warm-up appends; then for each phase: wait for its start file, append
    ``per_phase`` times (timing each), write (start, seconds, rows) of every append."""
    cat = lamina.connect(warehouse=wh, writer_wait_s=120)
    t = cat.load_table("live")
    rng = np.random.default_rng(100 + w)
    warm = [t.append(batch(100, w * 100_000 + 99_000 + j, j)) for j in range(2)]
    Path(root, f"ready{w}").write_text(str(100 * len(warm)))  # rows
    for phase in range(len(PHASE_ORDER)):
        while not os.path.exists(os.path.join(root, f"go{phase}")):
            time.sleep(0.002)
        out = []
        for j in range(per_phase):
            data = batch(
                int(rng.integers(100, 1_001)), w * 100_000 + phase * 1000 + j, j % LIVE_DAYS
            )
            start = time.time()
            secs, _ = timed(lambda d=data: t.append(d))  # type: ignore[misc]
            out.append((start, secs, data.num_rows))
            time.sleep(PACE_S * (0.5 + rng.random()))
        Path(root, f"out{phase}_{w}").write_text(json.dumps(out))
    cat.close()


Work = list[tuple[float, float, int]]


def _compactor(wh: str, stop: threading.Event, log: Work) -> None:
    """Minor compactions in a loop until ``stop``: (start, end, segments removed)."""
    cat = lamina.connect(warehouse=wh, writer_wait_s=120)
    t = cat.load_table("live")
    while not stop.is_set():
        start = time.time()
        c = t.compact(target_rows_per_segment=TARGET)
        log.append((start, time.time(), 0 if c is None else len(c.removed)))
        if c is None:
            time.sleep(0.02)
    cat.close()


def _plain_load(data: pa.Table, path: str, stop: threading.Event, log: Work) -> None:
    """The control: the same kind of work without lamina — write ``data`` to one Parquet
    file and read it back, in a loop until ``stop``."""
    while not stop.is_set():
        start = time.time()
        pq.write_table(data, path)
        pq.read_table(path)
        log.append((start, time.time(), 1))


def _idle_spin(stop: threading.Event, log: Work) -> None:
    """The floor: a thread that only spins, at the lowest CPU priority (SCHED_IDLE, as
    a compaction reads and writes), in a loop until ``stop`` — what any background
    work costs the appenders on this machine, however well it yields."""
    from lamina.io.background import run_niced

    def spin() -> None:
        while not stop.is_set():
            start, x = time.time(), 0
            for i in range(100_000):
                x += i
            log.append((start, time.time(), 1))

    run_niced(spin, 19)


def percentile(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs), q))


def _busy(work: Work, windows: list[tuple[float, float]]) -> float:
    """The share of ``windows`` during which some of ``work`` ran."""
    inside = sum(max(0.0, min(c1, w1) - max(c0, w0)) for c0, c1, _ in work for w0, w1 in windows)
    return inside / sum(w1 - w0 for w0, w1 in windows)


def appends_during_compaction(root: str, per_phase: int, seed_rows: int) -> dict[str, Any]:
    wh = os.path.join(root, "wh")
    with lamina.connect(warehouse=wh) as cat:
        t = cat.create_table(
            "live",
            batch(1, 0).schema,
            time_column="ts",
            segment_granularity="DAY",
            properties={"target_rows_per_segment": seed_rows // 200},  # 200 segments a day
        )
        for day in range(LIVE_DAYS):
            t.append(batch(seed_rows, day, day, 10**9 + day * seed_rows))
        t.set_properties(target_rows_per_segment=TARGET)  # appends: one segment each
        seeded = t.count()
        seed_segments = len(t.segments())
    print(f"  seeded {LIVE_DAYS} DAY chunks with {seed_segments} segments ({seeded:,} rows)")
    control = batch(LIVE_DAYS * seed_rows, 5)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_appender, args=(wh, w, per_phase, root)) for w in range(APPENDERS)]
    for p in procs:
        p.start()
    ready = [Path(root, f"ready{w}") for w in range(APPENDERS)]
    while not all(r.exists() for r in ready):
        assert all(p.is_alive() for p in procs), "an appender died before starting"
        time.sleep(0.05)
    warm_rows = sum(int(r.read_text() or 0) for r in ready)
    lat: dict[str, Work] = {kind: [] for kind in PHASES}
    work: dict[str, Work] = {kind: [] for kind in PHASES}
    windows: dict[str, list[tuple[float, float]]] = {kind: [] for kind in PHASES}
    for phase, kind in enumerate(PHASE_ORDER):
        stop, log = threading.Event(), []  # type: ignore[var-annotated]
        worker = None
        if kind == "with":
            worker = threading.Thread(target=_compactor, args=(wh, stop, log))
        elif kind == "plain load":
            path = os.path.join(root, "control.parquet")
            worker = threading.Thread(target=_plain_load, args=(control, path, stop, log))
        elif kind == "idle spin":
            worker = threading.Thread(target=_idle_spin, args=(stop, log))
        if worker is not None:
            worker.start()
            while not log:  # its first round done (for a compactor: the backlog merged)
                time.sleep(0.01)
        t0 = time.time()
        Path(root, f"go{phase}").touch()
        outs = [Path(root, f"out{phase}_{w}") for w in range(APPENDERS)]
        while not all(o.exists() for o in outs):
            # one done with its last phase exits: only a failed one stops the run
            assert all(p.exitcode in (None, 0) for p in procs), "an appender failed"
            time.sleep(0.02)
        windows[kind].append((t0, time.time()))
        if worker is not None:
            stop.set()
            worker.join()
            work[kind] += [c for c in log if c[1] > t0 and c[2] > 0]
        for o in outs:
            lat[kind] += [tuple(x) for x in json.loads(o.read_text())]  # type: ignore[misc]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    appended = warm_rows + sum(r for k in lat for _, _, r in lat[k])
    with lamina.connect(warehouse=wh) as cat:
        t = cat.load_table("live")
        assert t.count() == seeded + appended, "an appended row is missing or twice"
        commits = [c for c in t.history() if c.state == "COMPLETED"]
        final_segments = len(t.segments())
    compactions = work["with"]
    overlap = sum(
        any(s < c1 and s + d > c0 for c0, c1, _ in compactions) for s, d, _ in lat["with"]
    ) / len(lat["with"])
    stats = {
        kind: {
            "p50_ms": percentile([d for _, d, _ in lat[kind]], 50) * 1000,
            "p99_ms": percentile([d for _, d, _ in lat[kind]], 99) * 1000,
            "appends": len(lat[kind]),
            "busy": _busy(work[kind], windows[kind]) if work[kind] else 0.0,
        }
        for kind in lat
    }
    for kind, st in stats.items():
        print(
            f"  append latency, {kind + ' compaction' if kind in ('with', 'without') else kind}: "
            f"p50 {st['p50_ms']:.1f} ms, p99 {st['p99_ms']:.1f} ms "
            f"({st['appends']} appends; background busy {st['busy']:.0%})"
        )
    print(
        f"  {len(compactions)} compactions "
        f"(median {median([c1 - c0 for c0, c1, _ in compactions]):.2f} s), "
        f"{overlap:.0%} of the appends overlapped one"
    )
    return {
        "latency": stats,
        "compactions": len(compactions),
        "compaction_s": [c1 - c0 for c0, c1, _ in compactions],
        "segments_compacted": sum(c[2] for c in compactions),
        "overlap": overlap,
        "seed_segments": seed_segments,
        "final_segments": final_segments,
        "commits": len(commits),
        "rows": seeded + appended,
    }


def main(quick: bool = False) -> dict[str, Any]:
    """Compaction: query latency before/after, throughput, appends during compaction."""
    appends = 200 if quick else 1_000
    reps = 7 if quick else 15
    per_phase = 5 if quick else 50  # p99 of 1,200 appends per kind: its 12th largest
    seed_rows = 20_000 if quick else 50_000
    with scratch_dir("compaction") as root:
        q = queries_and_throughput(root, appends, reps)
    with scratch_dir("compaction-live") as root:
        live = appends_during_compaction(root, per_phase, seed_rows)
    figures = []
    for label in QUERIES:
        b, a = q["query_before_s"][label], q["query_after_s"][label]
        figures.append(
            figure(
                f"cat.sql {label}: after / before compaction",
                a / b,
                "x",
                "< 1.0",
                note=f"{b * 1000:.1f} ms -> {a * 1000:.1f} ms, {appends} segments -> 1",
            )
        )
    rate = q["rows"] / q["compact_s"]
    figures += [
        figure("minor compaction throughput", rate, "rows/s", note=f"{q['rows']:,} rows"),
        figure(
            "compaction / pq.write_table (rows/s)",
            q["write_table_s"] / q["compact_s"],
            "x",
            note=f"pq.write_table {q['rows'] / q['write_table_s']:,.0f} rows/s",
        ),
        figure(
            "compaction / read inputs + write (rows/s)",
            q["read_write_s"] / q["compact_s"],
            "x",
            note=f"the I/O floor: {q['rows'] / q['read_write_s']:,.0f} rows/s",
        ),
    ]
    lat = live["latency"]
    lw, lo, lp, li = lat["with"], lat["without"], lat["plain load"], lat["idle spin"]
    rows = (  # (title, numerator, denominator, target, note), each for p50 and p99
        (
            f"append {{p}} with / without compaction, {APPENDERS} appenders",
            lw, lo, "<= 1.2", "{lo:.1f} ms -> {lw:.1f} ms",
        ),
        (
            "append {p} with compaction / with plain Parquet I/O load",
            lw, lp, None,
            "control: {lp:.1f} ms beside a write+read loop without lamina"
            f" (busy {lp['busy']:.0%})",
        ),
        (
            "  the floor: append {p} beside an idle-priority spin loop / without",
            li, lo, None, "{li:.1f} ms: a thread that only spins at SCHED_IDLE",
        ),
    )  # fmt: skip
    for title, num, den, target, note in rows:
        for p in ("p50", "p99"):
            ms = {k: v[f"{p}_ms"] for k, v in (("lw", lw), ("lo", lo), ("lp", lp), ("li", li))}
            figures.append(
                figure(
                    title.format(p=p),
                    num[f"{p}_ms"] / den[f"{p}_ms"],
                    "x",
                    target,
                    note=note.format(**ms),
                )
            )
    figures.append(
        figure(
            "appends overlapping a compaction",
            live["overlap"] * 100,
            "%",
            ">= 50",
            note=f"{live['compactions']} compactions, busy {lw['busy']:.0%} of the phases",
        )
    )
    print_figures("Compaction: queries, throughput, appends alongside", figures)
    return result(
        "compaction",
        {
            "appends": appends,
            "query_reps": reps,
            "appenders": APPENDERS,
            "appends_per_phase": per_phase,
            "phases": list(PHASE_ORDER),
            "live_seed_rows_per_chunk": seed_rows,
        },
        figures,
        {"queries": q, "live": live},
    )


if __name__ == "__main__":
    cli(main, "compaction")
