"""Benchmark of lamina's in-memory versioned timeline.

Builds a timeline of hourly chunks x 10 partitions (num_core_partitions = 10) starting
2010-01-01 -- 1,000,000 segments = 100,000 hours by default -- and measures build time
(bulk and incremental), day lookups, single add/remove, minor compactions (a group of
later-generation segments replacing an hour's partitions, and its removal),
``overshadowed()`` and the peak memory of a build; then one chunk of 10,000 appended
partitions compacted by 100 groups (minor versions at scale). Prints a table and writes
``bench/results/timeline.json``.

    .venv/bin/python bench/bench_timeline.py [--segments N] [--seed S]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from lamina.core.interval import US_PER_DAY, US_PER_HOUR, Interval, to_us
from lamina.core.segment import OVERWRITE_PARTITION_START, Segment
from lamina.core.timeline import Timeline

PARTITIONS = 10
START = to_us("2010-01-01")
INCREMENTAL_BUDGET_S = 60.0
LOOKUPS = 1000
SINGLE_OPS = 2000
RESULTS = Path(__file__).resolve().parent / "results" / "timeline.json"


def make_segments(n_segments: int) -> list[Segment]:
    """Hourly chunks of ``PARTITIONS`` segments each, version 1, from 2010-01-01."""
    segs = []
    for h in range(n_segments // PARTITIONS):
        iv = Interval.of(START + h * US_PER_HOUR, START + (h + 1) * US_PER_HOUR)
        for p in range(PARTITIONS):
            segs.append(
                Segment(
                    "bench",
                    iv,
                    1,
                    p,
                    num_core_partitions=PARTITIONS,
                    location=f"bench/{h}/v1/p{p}.parquet",
                    row_count=1000,
                )
            )
    return segs


def maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def quantile(samples_ns: list[int], q: float) -> float:
    """The q-quantile of nanosecond samples, in microseconds."""
    ordered = sorted(samples_ns)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


def median_us(samples_ns: list[int]) -> float:
    return statistics.median(samples_ns) / 1000


def timed_ns(fn: Callable[[], object]) -> int:
    t0 = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - t0


def bench_incremental(segs: list[Segment]) -> dict[str, float | int | bool]:
    """Add segments one by one, in time order, within a time budget."""
    tl = Timeline()
    t0 = time.perf_counter()
    done = 0
    for i in range(0, len(segs), 10_000):
        for s in segs[i : i + 10_000]:
            tl.add(s)
        done = min(i + 10_000, len(segs))
        if time.perf_counter() - t0 > INCREMENTAL_BUDGET_S:
            break
    elapsed = time.perf_counter() - t0
    return {
        "segments": done,
        "complete": done == len(segs),
        "seconds": elapsed,
        "us_per_segment": elapsed / done * 1e6,
        "extrapolated_seconds_all": elapsed / done * len(segs),
        "entries_match_build": False,  # filled in by the caller
    }


def bench_lookups(tl: Timeline, n_hours: int, rng: random.Random) -> dict[str, float | int]:
    n_days = n_hours // 24
    samples = []
    sizes = set()
    for _ in range(LOOKUPS):
        day = START + rng.randrange(n_days) * US_PER_DAY
        q = Interval.of(day, day + US_PER_DAY)
        t0 = time.perf_counter_ns()
        got = tl.lookup(q)
        samples.append(time.perf_counter_ns() - t0)
        sizes.add(len(got))
    assert sizes == {24}, sizes
    return {
        "lookups": LOOKUPS,
        "entries_per_lookup": 24,
        "median_us": median_us(samples),
        "p99_us": quantile(samples, 0.99),
        "max_us": max(samples) / 1000,
    }


def bench_single_ops(tl: Timeline, n_hours: int, rng: random.Random) -> dict[str, float]:
    """Median µs of one add / one remove, each leaving the timeline as it found it."""
    hours = rng.sample(range(n_hours), min(SINGLE_OPS, n_hours))
    add_part, rem_part, add_high, rem_high = [], [], [], []
    for h in hours:
        iv = Interval.of(START + h * US_PER_HOUR, START + (h + 1) * US_PER_HOUR)
        # a new (non-core) partition into an existing complete chunk
        extra = Segment("bench", iv, 1, PARTITIONS, num_core_partitions=PARTITIONS, location="x")
        add_part.append(timed_ns(lambda s=extra: tl.add(s)))
        rem_part.append(timed_ns(lambda s=extra: tl.remove(s)))
        # a new complete chunk of a higher version overshadowing the hour, then its removal
        high = Segment("bench", iv, 2, 0, num_core_partitions=1, location="y")
        add_high.append(timed_ns(lambda s=high: tl.add(s)))
        rem_high.append(timed_ns(lambda s=high: tl.remove(s)))
    return {
        "ops_each": len(hours),
        "add_partition_to_existing_chunk_us": median_us(add_part),
        "remove_that_partition_us": median_us(rem_part),
        "add_higher_version_hour_us": median_us(add_high),
        "remove_higher_version_hour_us": median_us(rem_high),
        "add_higher_version_hour_p99_us": quantile(add_high, 0.99),
        "remove_higher_version_hour_p99_us": quantile(rem_high, 0.99),
    }


def compaction_output(iv: Interval, k: int, roots: tuple[int, int], size: int) -> Segment:
    """Segment k of a minor compaction (minor version 1) replacing ``roots``."""
    return Segment(
        "bench",
        iv,
        1,
        OVERWRITE_PARTITION_START + k,
        num_core_partitions=PARTITIONS,
        location=f"c{k}",
        minor_version=1,
        root_partition_range=roots,
        atomic_update_group_size=size,
    )


def bench_minor_compaction(tl: Timeline, n_hours: int, rng: random.Random) -> dict[str, float]:
    """Median µs: compacting an hour's 10 partitions into a group of two segments (the
    first waits on standby, the second shows the group), then removing one of them
    (falls back to the 10 partitions) and the other."""
    hours = rng.sample(range(n_hours), min(SINGLE_OPS, n_hours))
    first, second, fall, last = [], [], [], []
    for h in hours:
        iv = Interval.of(START + h * US_PER_HOUR, START + (h + 1) * US_PER_HOUR)
        a, b = (compaction_output(iv, k, (0, PARTITIONS), 2) for k in range(2))
        first.append(timed_ns(lambda s=a: tl.add(s)))
        second.append(timed_ns(lambda s=b: tl.add(s)))
        assert [s.location for s in tl.lookup(iv)[0].segments] == ["c0", "c1"]
        fall.append(timed_ns(lambda s=a: tl.remove(s)))
        last.append(timed_ns(lambda s=b: tl.remove(s)))
    return {
        "ops_each": len(hours),
        "add_standby_segment_us": median_us(first),
        "add_completing_segment_us": median_us(second),
        "remove_one_falls_back_us": median_us(fall),
        "remove_the_other_us": median_us(last),
        "add_completing_segment_p99_us": quantile(second, 0.99),
        "remove_one_falls_back_p99_us": quantile(fall, 0.99),
    }


BIG_ROOTS = 10_000
BIG_GROUPS = 100


def bench_big_chunk(rng: random.Random) -> dict[str, float | int]:
    """One hour of ``BIG_ROOTS`` appended partitions, compacted by ``BIG_GROUPS`` groups
    of two segments (each replacing 100 consecutive partitions)."""
    iv = Interval.of(START, START + US_PER_HOUR)
    roots = [Segment("bench", iv, 1, p, location=f"r{p}", row_count=10) for p in range(BIG_ROOTS)]
    width = BIG_ROOTS // BIG_GROUPS
    outs = [
        Segment(
            "bench",
            iv,
            1,
            OVERWRITE_PARTITION_START + 2 * g + j,
            location=f"c{g}.{j}",
            minor_version=1,
            root_partition_range=(g * width, (g + 1) * width),
            atomic_update_group_size=2,
        )
        for g in range(BIG_GROUPS)
        for j in range(2)
    ]
    t0 = time.perf_counter()
    built = Timeline.build(roots + outs)
    build_s = time.perf_counter() - t0
    assert len(built.lookup(iv)[0].segments) == 2 * BIG_GROUPS
    tl = Timeline.build(roots)
    adds = []
    for s in outs:  # each add, then a lookup (the lazy state is settled by the query)
        adds.append(timed_ns(lambda s=s: (tl.add(s), tl.lookup(iv))))
    assert tl.entries() == built.entries()
    appends, removals = [], []
    for i in range(200):
        extra = Segment("bench", iv, 1, BIG_ROOTS + i, location="x")
        appends.append(timed_ns(lambda s=extra: (tl.add(s), tl.lookup(iv))))
    for s in rng.sample(outs, 50):
        removals.append(timed_ns(lambda s=s: (tl.remove(s), tl.lookup(iv))))
    return {
        "roots": BIG_ROOTS,
        "groups": BIG_GROUPS,
        "build_seconds": build_s,
        "add_output_then_lookup_median_us": median_us(adds),
        "append_then_lookup_median_us": median_us(appends),
        "remove_output_then_lookup_median_us": median_us(removals),
    }


def bench_overshadowed(tl: Timeline, n_hours: int, rng: random.Random) -> dict[str, float | int]:
    t0 = time.perf_counter()
    none = tl.overshadowed()
    base_s = time.perf_counter() - t0
    assert none == []
    # overshadow 1% of the hours with version 2, then ask again
    hidden = rng.sample(range(n_hours), max(1, n_hours // 100))
    highs = [
        Segment(
            "bench",
            Interval.of(START + h * US_PER_HOUR, START + (h + 1) * US_PER_HOUR),
            2,
            0,
            location="z",
        )
        for h in hidden
    ]
    for s in highs:
        tl.add(s)
    t0 = time.perf_counter()
    some = tl.overshadowed()
    some_s = time.perf_counter() - t0
    assert len(some) == len(hidden) * PARTITIONS
    for s in highs:
        tl.remove(s)
    return {
        "none_hidden_seconds": base_s,
        "one_percent_hidden_seconds": some_s,
        "one_percent_hidden_segments": len(some),
    }


def bench_build_memory(segs: list[Segment]) -> dict[str, float]:
    """Peak Python allocations during Timeline.build (input segments excluded)."""
    gc.collect()
    tracemalloc.start()
    tl = Timeline.build(segs)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del tl
    return {"tracemalloc_peak_mib": peak / 2**20, "tracemalloc_retained_mib": current / 2**20}


def render(results: dict) -> None:
    rows: list[tuple[str, str]] = []
    p = results["params"]
    b = results["build"]
    inc = results["incremental_add"]
    lk = results["lookup_day"]
    op = results["single_ops"]
    ov = results["overshadowed"]
    mc = results["minor_compaction"]
    big = results["big_chunk"]
    mem = results["memory"]
    rows += [
        ("segments / hourly chunks", f"{p['segments']:,} / {p['chunks']:,}"),
        ("make segments", f"{results['generate_seconds']:.2f} s"),
        ("Timeline.build", f"{b['seconds']:.2f} s  ({b['us_per_segment']:.2f} µs/segment)"),
    ]
    if inc["complete"]:
        rows.append(
            (
                "incremental add, all",
                f"{inc['seconds']:.2f} s  ({inc['us_per_segment']:.2f} µs/segment)",
            )
        )
    else:
        rows.append(
            (
                f"incremental add, first {inc['segments']:,} (>{INCREMENTAL_BUDGET_S:.0f} s)",
                f"{inc['seconds']:.2f} s  ({inc['us_per_segment']:.2f} µs/segment; "
                f"all ≈ {inc['extrapolated_seconds_all']:.0f} s)",
            )
        )
    rows += [
        ("incremental == build (entries)", str(inc["entries_match_build"])),
        (f"lookup 1 day (24 entries), {lk['lookups']}x", "median / p99 / max"),
        ("", f"{lk['median_us']:.1f} / {lk['p99_us']:.1f} / {lk['max_us']:.1f} µs"),
        (
            "add partition to existing chunk",
            f"{op['add_partition_to_existing_chunk_us']:.1f} µs (median)",
        ),
        ("remove that partition", f"{op['remove_that_partition_us']:.1f} µs (median)"),
        (
            "add higher-version hour (overshadows)",
            f"{op['add_higher_version_hour_us']:.1f} µs (median), "
            f"p99 {op['add_higher_version_hour_p99_us']:.1f}",
        ),
        (
            "remove it (falls back)",
            f"{op['remove_higher_version_hour_us']:.1f} µs (median), "
            f"p99 {op['remove_higher_version_hour_p99_us']:.1f}",
        ),
        (
            "minor compaction of an hour: 1st / 2nd of its group",
            f"{mc['add_standby_segment_us']:.1f} / {mc['add_completing_segment_us']:.1f} µs "
            f"(median), p99 {mc['add_completing_segment_p99_us']:.1f}",
        ),
        (
            "remove one (falls back) / the other",
            f"{mc['remove_one_falls_back_us']:.1f} / {mc['remove_the_other_us']:.1f} µs "
            f"(median), p99 {mc['remove_one_falls_back_p99_us']:.1f}",
        ),
        (
            f"1 chunk, {big['roots']:,} partitions + {big['groups']} groups: build",
            f"{big['build_seconds'] * 1000:.0f} ms",
        ),
        (
            "  add output / append / remove output (+lookup)",
            f"{big['add_output_then_lookup_median_us']:.0f} / "
            f"{big['append_then_lookup_median_us']:.0f} / "
            f"{big['remove_output_then_lookup_median_us']:.0f} µs (median)",
        ),
        ("overshadowed(), nothing hidden", f"{ov['none_hidden_seconds'] * 1000:.0f} ms"),
        (
            f"overshadowed(), 1% hidden ({ov['one_percent_hidden_segments']:,} segs)",
            f"{ov['one_percent_hidden_seconds'] * 1000:.0f} ms",
        ),
        (
            "build peak memory (tracemalloc)",
            f"{mem['tracemalloc_peak_mib']:.0f} MiB peak, "
            f"{mem['tracemalloc_retained_mib']:.0f} MiB retained",
        ),
        (
            "process max RSS: segments / +build",
            f"{mem['maxrss_after_segments_mib']:.0f} MiB / "
            f"+{mem['maxrss_build_delta_mib']:.0f} MiB",
        ),
        ("total runtime", f"{results['total_seconds']:.1f} s"),
        (
            f"load avg (1 min) start / end, {results['environment']['cpu_count']} CPUs",
            f"{results['environment']['loadavg_1min_start']:.1f} / "
            f"{results['environment']['loadavg_1min_end']:.1f}",
        ),
    ]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text fallback
        width = max(len(k) for k, _ in rows)
        for k, v in rows:
            print(f"{k:<{width}}  {v}")
        return
    table = Table(title="lamina Timeline benchmark")
    table.add_column("measure")
    table.add_column("result", justify="right")
    for k, v in rows:
        table.add_row(k, v)
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segments", type=int, default=1_000_000, help="default 1,000,000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS, help="JSON results path")
    args = ap.parse_args(argv)
    n_hours = args.segments // PARTITIONS
    if n_hours < 24:
        ap.error(f"need at least {24 * PARTITIONS} segments (one day of hours)")
    rng = random.Random(args.seed)
    t_start = time.perf_counter()
    load_start = os.getloadavg()[0]

    t0 = time.perf_counter()
    segs = make_segments(args.segments)
    generate_s = time.perf_counter() - t0
    rss_segments = maxrss_mib()

    t0 = time.perf_counter()
    tl = Timeline.build(segs)
    build_s = time.perf_counter() - t0
    rss_build = maxrss_mib()
    assert len(tl) == len(segs)
    assert len(tl.entries()) == n_hours

    incremental = bench_incremental(segs)
    if incremental["complete"]:
        inc_tl = Timeline()
        for s in segs:
            inc_tl.add(s)
        incremental["entries_match_build"] = inc_tl.entries() == tl.entries()
        del inc_tl
    else:
        part = segs[: int(incremental["segments"])]
        inc_tl = Timeline()
        for s in part:
            inc_tl.add(s)
        incremental["entries_match_build"] = inc_tl.entries() == Timeline.build(part).entries()
        del inc_tl

    lookups = bench_lookups(tl, n_hours, rng)
    single = bench_single_ops(tl, n_hours, rng)
    minor = bench_minor_compaction(tl, n_hours, rng)
    overshadowed = bench_overshadowed(tl, n_hours, rng)
    assert len(tl.entries()) == n_hours  # the benchmarks left the timeline as built
    del tl
    memory = bench_build_memory(segs)
    big = bench_big_chunk(rng)
    memory["maxrss_after_segments_mib"] = rss_segments
    memory["maxrss_build_delta_mib"] = rss_build - rss_segments

    results = {
        "params": {
            "segments": len(segs),
            "chunks": n_hours,
            "partitions_per_chunk": PARTITIONS,
            "num_core_partitions": PARTITIONS,
            "start": "2010-01-01",
            "seed": args.seed,
        },
        "environment": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            # other work on the machine shows up in the lookup and op tails (p99, max)
            "loadavg_1min_start": load_start,
            "loadavg_1min_end": os.getloadavg()[0],
        },
        "generate_seconds": generate_s,
        "build": {"seconds": build_s, "us_per_segment": build_s / len(segs) * 1e6},
        "incremental_add": incremental,
        "lookup_day": lookups,
        "single_ops": single,
        "minor_compaction": minor,
        "big_chunk": big,
        "overshadowed": overshadowed,
        "memory": memory,
        "total_seconds": time.perf_counter() - t_start,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    render(results)
    print(f"results written to {args.out}")
    if lookups["median_us"] >= 1000 or lookups["p99_us"] >= 1000:
        print("WARNING: day lookup is not under 1 ms")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
