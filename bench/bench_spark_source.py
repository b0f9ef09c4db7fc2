"""lamina's Spark data source (``format("lamina")``) against lamina's own Spark calls
and plain Spark, in one Spark session (local mode).

- Batch write: ``df.write.format("lamina")`` vs ``t.append(df)`` (Spark's native
  Parquet writer) vs ``df.write.parquet`` of the same cached DataFrame (5M rows over
  10 days; quick: 500k).
- Batch read of all columns (``write.format("noop")`` makes Spark read every value):
  ``spark.read.format("lamina")`` vs ``t.to_spark`` (Spark's native Parquet reader), and
  of one narrow column (``columns`` option vs ``select``).
- Streaming write of 10k-row micro-batches into an upsert table (a Parquet file
  source, one file per trigger): ``writeStream.format("lamina")`` vs
  ``foreachBatch(t.foreach_batch(...))``, rows/s.
- The same write and read on a warehouse on moto's S3 server (in this process), and
  ``cat.sql`` there against the same query on the local warehouse.
One uncounted warm-up of each; then repetitions in alternating order; medians.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402
from bench_spark_append import DAYS, make_df  # noqa: E402  (the same 5M rows)

import lamina  # noqa: E402


def _lake(root: str, warehouse: str | None = None) -> dict[str, str]:
    return {
        "catalog": f"sqlite:///{root}/cat.db",
        "warehouse": warehouse or os.path.join(root, "wh"),
    }


def _table(lake: dict[str, str], schema: Any, name: str = "events", **kw: Any) -> Any:
    cat = lamina.connect(lake["catalog"], lake["warehouse"])
    return cat, cat.create_table(name, schema, time_column="ts", segment_granularity="DAY", **kw)


def write_source(df: Any, root: str, rows: int, warehouse: str | None = None) -> float:
    lake = _lake(root, warehouse)
    cat, t = _table(lake, df.schema)
    try:
        w = df.write.format("lamina").options(table="events", **lake).mode("append")
        secs, _ = timed(w.save)
        assert t.count() == rows
        return secs
    finally:
        cat.close()


def write_append(df: Any, root: str, rows: int) -> float:
    cat, t = _table(_lake(root), df.schema)
    try:
        secs, _ = timed(lambda: t.append(df))
        assert t.count() == rows
        return secs
    finally:
        cat.close()


def write_parquet(df: Any, root: str) -> float:
    secs, _ = timed(lambda: df.write.parquet(os.path.join(root, "plain")))
    return secs


def read_source(spark: Any, lake: dict[str, str], columns: str | None) -> float:
    r = spark.read.format("lamina").options(table="events", **lake)
    if columns is not None:
        r = r.option("columns", columns)
    secs, _ = timed(lambda: r.load().write.format("noop").mode("overwrite").save())
    return secs


def read_native(spark: Any, t: Any, columns: str | None) -> float:
    def go() -> None:
        df = t.to_spark(spark)
        if columns is not None:
            df = df.select(columns)
        df.write.format("noop").mode("overwrite").save()

    secs, _ = timed(go)
    return secs


def stream(spark: Any, root: str, batches: int, per: int, how: str) -> float:
    """Rows/s of ``batches`` micro-batches of ``per`` rows into an upsert table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = os.path.join(root, "src")
    os.makedirs(src)
    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("v", pa.float64()),
        ]
    )
    t0 = 1_709_251_200_000_000  # 2024-03-01
    for b in range(batches):
        ks = [(b * per + i) % (per * 3) for i in range(per)]  # 2/3 of later batches update
        pq.write_table(
            pa.table(
                {"k": ks, "ts": [t0 + k * 1_000_000 for k in ks], "v": [float(b)] * per},
                schema=schema,
            ),
            os.path.join(src, f"b{b:05d}.parquet"),
        )
    lake = _lake(root)
    cat, t = _table(lake, schema, "u", primary_key=["k"])
    try:
        s = (
            spark.readStream.schema("k long, ts timestamp, v double")
            .option("maxFilesPerTrigger", 1)
            .parquet(src)
        )
        w = s.writeStream.option("checkpointLocation", os.path.join(root, "ck"))
        if how == "source":
            w = w.format("lamina").options(table="u", **lake)
        else:
            w = w.foreachBatch(t.foreach_batch("bench"))
        secs, _ = timed(lambda: w.trigger(availableNow=True).start().awaitTermination())
        assert len(t.history()) == batches
        return batches * per / secs
    finally:
        cat.close()


def superseded(spark: Any, root: str, keys: int, versions: int) -> dict[str, float]:
    """An upsert table of ``keys`` keys upserted ``versions`` times (all but one record
    of each key superseded): seconds to build ``t.to_spark`` (the plan) and to count
    it, before and after a major compaction."""
    import numpy as np
    import pyarrow as pa

    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("v", pa.float64()),
        ]
    )
    t0 = 1_709_251_200_000_000
    cat, t = _table(_lake(root), schema, "u", primary_key=["k"])
    try:
        ks = np.arange(keys, dtype=np.int64)
        for v in range(versions):
            ts = t0 + (ks % 10) * 86_400_000_000 + v  # ten days; each version newer
            t.upsert(pa.table({"k": ks, "ts": ts, "v": np.full(keys, float(v))}, schema=schema))
        out: dict[str, float] = {}
        for when in ("before", "after"):
            if when == "after":
                t.compact(mode="major")
            t.to_spark(spark).count()  # warm-up: the planner's Python workers start
            plan_s, df = timed(lambda: t.to_spark(spark))
            count_s, n = timed(df.count)
            assert n == keys, (n, keys)
            out[f"plan {when}"], out[f"count {when}"] = plan_s, count_s
        return out
    finally:
        cat.close()


def main(quick: bool = False) -> dict[str, Any]:
    """format("lamina") writes, reads and streams against t.append/t.to_spark/Spark."""
    from lamina.engines.spark import get_spark

    rows = 500_000 if quick else 5_000_000
    reps = 3
    batches, per = (5, 10_000) if quick else (20, 10_000)
    spark = get_spark(app_name="lamina-bench")
    spark.sparkContext.setLogLevel("ERROR")
    times: dict[str, list[float]] = {}

    def add(name: str, secs: float) -> None:
        times.setdefault(name, []).append(secs)

    try:
        df = make_df(spark, rows)
        gen_s, count = timed(df.count)
        assert count == rows
        print(f"  generated and cached {rows:,} rows in {gen_s:.1f}s (not timed)")
        with scratch_dir("source-warm") as d:  # warm-up: every path once
            write_source(df, os.path.join(d, "a"), rows)
            write_append(df, os.path.join(d, "b"), rows)
            write_parquet(df, os.path.join(d, "c"))
        for rep in range(reps):
            order = ["source", "append", "parquet"]
            order = order if rep % 2 == 0 else order[::-1]
            for n in order:
                with scratch_dir(f"source-{n}") as d:
                    if n == "source":
                        add("write source", write_source(df, d, rows))
                    elif n == "append":
                        add("write append", write_append(df, d, rows))
                    else:
                        add("write parquet", write_parquet(df, d))
            print(
                f"  write rep {rep + 1}/{reps}: "
                + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items() if k.startswith("write"))
            )
        with scratch_dir("source-read") as d:
            lake = _lake(d)
            cat, t = _table(lake, df.schema)
            t.append(df)
            for cols in (None, "value"):
                tag = "all" if cols is None else "narrow"
                read_source(spark, lake, cols)
                read_native(spark, t, cols)  # warm-up
                for rep in range(reps):
                    pair = [("source", read_source), ("native", read_native)]
                    for n, _ in pair if rep % 2 == 0 else pair[::-1]:
                        if n == "source":
                            add(f"read {tag} source", read_source(spark, lake, cols))
                        else:
                            add(f"read {tag} native", read_native(spark, t, cols))
            cat.close()
        for rep in range(2):
            for how in ("source", "foreach") if rep % 2 == 0 else ("foreach", "source"):
                with scratch_dir(f"stream-{how}") as d:
                    add(f"stream {how}", stream(spark, d, batches, per, how))
        with scratch_dir("superseded") as d:
            keys = 100_000 if quick else 1_000_000
            up = superseded(spark, d, keys, 6)
        s3 = _s3_figures(spark, df, rows, reps)
        df.unpersist()
    finally:
        spark.stop()
    med = {n: median(v) for n, v in times.items()}
    figures = [
        figure("write format(lamina)", med["write source"], "s"),
        figure("write t.append(df)", med["write append"], "s"),
        figure("write df.write.parquet", med["write parquet"], "s"),
        figure(
            "write throughput: format(lamina) / t.append",
            med["write append"] / med["write source"],
            "x",
            ">= 0.80",
        ),
        figure(
            "write throughput: format(lamina) / df.write.parquet",
            med["write parquet"] / med["write source"],
            "x",
            ">= 0.80",
        ),
        figure("read all columns format(lamina)", med["read all source"], "s"),
        figure("read all columns t.to_spark (native)", med["read all native"], "s"),
        figure(
            "read throughput all columns: format(lamina) / native",
            med["read all native"] / med["read all source"],
            "x",
            ">= 0.70",
        ),
        figure(
            "read throughput one column: format(lamina) / native",
            med["read narrow native"] / med["read narrow source"],
            "x",
        ),
        figure("stream 10k-row batches, upsert: format(lamina)", med["stream source"], "rows/s"),
        figure("stream 10k-row batches, upsert: foreach_batch", med["stream foreach"], "rows/s"),
        figure(
            "stream: format(lamina) / foreach_batch",
            med["stream source"] / med["stream foreach"],
            "x",
        ),
        figure("upsert table, 5/6 superseded: to_spark plan", up["plan before"], "s", "< 1"),
        figure("upsert table: count before compaction", up["count before"], "s"),
        figure("upsert table: count after compaction", up["count after"], "s"),
        figure(
            "upsert table: count before / after compaction",
            up["count before"] / up["count after"],
            "x",
            "<= 2.0",
        ),
        *s3,
    ]
    print_figures(f"Spark data source: {rows:,} rows over {DAYS} days, medians", figures)
    return result(
        "spark_source",
        {"rows": rows, "days": DAYS, "repetitions": reps, "stream_batches": batches},
        figures,
        {"seconds": times, "median": med},
    )


def _s3_figures(spark: Any, df: Any, rows: int, reps: int) -> list[dict[str, Any]]:
    """Write and read through format("lamina") on moto's S3 server, and cat.sql there
    against a local warehouse."""
    import pyarrow.fs as pafs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        pafs.S3FileSystem(
            access_key="bench",
            secret_key="bench",
            endpoint_override=f"{host}:{port}",
            scheme="http",
            region="us-east-1",
            allow_bucket_creation=True,
        ).create_dir("bench")
        base = f"s3://bench:bench@bench/%s?endpoint_override={host}:{port}&scheme=http&region=us-east-1"
        writes, reads, sql_s3, sql_local = [], [], [], []
        query = "SELECT name, count(*), sum(value) FROM events GROUP BY name"
        with tempfile.TemporaryDirectory() as d:
            for rep in range(reps + 1):
                root = os.path.join(d, f"r{rep}")
                os.makedirs(root)
                secs = write_source(df, root, rows, base % f"r{rep}")
                if rep:
                    writes.append(secs)
            lake = _lake(os.path.join(d, f"r{reps}"), base % f"r{reps}")
            local = os.path.join(d, "local")
            os.makedirs(local)
            write_source(df, local, rows)
            read_source(spark, lake, None)
            for _ in range(reps):
                reads.append(read_source(spark, lake, None))
            remote = lamina.connect(lake["catalog"], lake["warehouse"])
            near = lamina.connect(**_lake(local))
            remote.sql(query)
            near.sql(query)
            for _ in range(reps):
                sql_s3.append(timed(lambda: remote.sql(query))[0])
                sql_local.append(timed(lambda: near.sql(query))[0])
            remote.close()
            near.close()
    finally:
        server.stop()
    return [
        figure("S3 write format(lamina)", median(writes), "s"),
        figure("S3 read all columns format(lamina)", median(reads), "s"),
        figure("S3 cat.sql group-by", median(sql_s3), "s"),
        figure("S3 cat.sql / local cat.sql", median(sql_s3) / median(sql_local), "x"),
    ]


if __name__ == "__main__":
    cli(main, "spark_source")
