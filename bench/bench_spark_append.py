"""Spark append: lamina ``t.append(df)`` vs a plain partitioned Spark Parquet write.

5M rows over 10 days generated in Spark (``spark.range`` + expressions), cached and
counted first so generation is not timed. lamina appends into a DAY table (native
Parquet writer partitioned by chunk, footers read, one catalog commit on the embedded
SQLite catalog). The baseline is ``df.withColumn("day", to_date(ts)).write
.partitionBy("day").parquet(path)``. One Spark session; one uncounted warm-up write of
each; then repetitions in alternating order; medians.
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir, timed  # noqa: E402

import lamina  # noqa: E402

START = "2024-03-01 00:00:00"
DAYS = 10


def make_df(spark: Any, rows: int) -> Any:
    from pyspark.sql import functions as F

    span_us = DAYS * 86_400_000_000
    start_us = F.unix_micros(F.to_timestamp(F.lit(START)))
    df = spark.range(0, rows).select(
        F.timestamp_micros(start_us + (F.rand(7) * span_us).cast("long")).alias("ts"),
        F.col("id"),
        F.rand(11).alias("value"),
        F.concat(F.lit("user_"), (F.col("id") % 10_000).cast("string")).alias("name"),
        (F.col("id") % 1000).cast("int").alias("qty"),
    )
    return df.cache()


def run_lamina(df: Any, root: str, rows: int) -> tuple[float, int]:
    cat = lamina.connect(warehouse=os.path.join(root, "wh"))
    try:
        t = cat.create_table("events", df.schema, time_column="ts", segment_granularity="DAY")
        secs, _ = timed(lambda: t.append(df))
        plan = t.scan()
        assert plan.row_count == rows, f"lamina has {plan.row_count} rows, wrote {rows}"
        return secs, len(plan.tasks)
    finally:
        cat.close()


def run_spark(df: Any, root: str) -> tuple[float, int]:
    from pyspark.sql import functions as F

    path = os.path.join(root, "plain")
    secs, _ = timed(
        lambda: df.withColumn("day", F.to_date("ts")).write.partitionBy("day").parquet(path)
    )
    files = sum(
        1 for _, _, fs in os.walk(path) for f in fs if f.endswith(".parquet") and f[0] not in "._"
    )
    return secs, files


def main(quick: bool = False) -> dict[str, Any]:
    """Spark append: lamina t.append(df) vs df.write.partitionBy("day").parquet."""
    from lamina.engines.spark import get_spark

    rows = 500_000 if quick else 5_000_000
    reps = 3
    spark = get_spark(app_name="lamina-bench")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = make_df(spark, rows)
        gen_s, count = timed(df.count)
        assert count == rows
        print(f"  generated and cached {rows:,} rows in {gen_s:.1f}s (not timed)")
        times: dict[str, list[float]] = {"lamina": [], "spark": []}
        files: dict[str, int] = {}
        with scratch_dir("spark-warm") as d:
            run_lamina(df, os.path.join(d, "l"), rows)
            run_spark(df, os.path.join(d, "s"))
        for rep in range(reps):
            order = ["lamina", "spark"] if rep % 2 == 0 else ["spark", "lamina"]
            for n in order:
                with scratch_dir(f"spark-{n}") as d:
                    if n == "lamina":
                        secs, files[n] = run_lamina(df, d, rows)
                    else:
                        secs, files[n] = run_spark(df, d)
                times[n].append(secs)
            print(
                f"  rep {rep + 1}/{reps} ({' then '.join(order)}): "
                f"lamina {times['lamina'][-1]:.2f}s, spark {times['spark'][-1]:.2f}s"
            )
        df.unpersist()
    finally:
        spark.stop()
    med = {n: median(v) for n, v in times.items()}
    figures = [
        figure("lamina t.append(df)", med["lamina"], "s", note=f"{files['lamina']} files"),
        figure("spark partitionBy(day).parquet", med["spark"], "s", note=f"{files['spark']} files"),
        figure("lamina / spark", med["lamina"] / med["spark"], "x", "<= 1.10"),
        figure("lamina throughput", rows / med["lamina"], "rows/s"),
    ]
    print_figures(f"Spark append: {rows:,} rows over {DAYS} days, median of {reps}", figures)
    return result(
        "spark_append",
        {"rows": rows, "days": DAYS, "repetitions": reps, "generation_s": gen_s},
        figures,
        {"seconds": times, "median_s": med, "files": files},
    )


if __name__ == "__main__":
    cli(main, "spark_append")
