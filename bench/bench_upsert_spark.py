"""Spark Structured Streaming into an upsert table through ``t.foreach_batch`` (issue 9
§6: "through Spark foreachBatch: report rows/s").

The stream is ``bench_upsert.stream``'s: micro-batches of 10k rows, 30% of them newer
records of earlier keys, one Parquet file per micro-batch (``maxFilesPerTrigger=1``,
``trigger(availableNow=True)``), on one local Spark session. Each micro-batch is one
exactly-once upsert commit (``txn=(app_id, batch_id)``). Baseline, measured in the
same run: the same stream into a table without a primary key (``foreach_batch`` makes
each micro-batch an append). Repetitions alternate the two; fresh warehouse and
checkpoint each time; medians. The upsert table's result is checked against the
latest record per key before its time counts.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cli, figure, median, print_figures, result, scratch_dir  # noqa: E402
from bench_upsert import SCHEMA, latest_of, stream, verify  # noqa: E402

import lamina  # noqa: E402


def run(spark: Any, batches: list[Any], src: str, root: str, upsert: bool) -> float:
    """Seconds from the query's start to its end (all micro-batches published)."""
    from lamina.engines.spark import arrow_to_spark_schema

    with lamina.connect(warehouse=os.path.join(root, "wh")) as cat:
        kw: dict[str, Any] = {"primary_key": ["id"]} if upsert else {}
        t = cat.create_table("s", SCHEMA, time_column="ts", segment_granularity="DAY", **kw)
        stream_df = (
            spark.readStream.schema(arrow_to_spark_schema(SCHEMA))
            .option("maxFilesPerTrigger", 1)
            .parquet(src)
        )
        t0 = time.perf_counter()
        query = (
            stream_df.writeStream.foreachBatch(t.foreach_batch("bench"))
            .option("checkpointLocation", os.path.join(root, "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        secs = time.perf_counter() - t0
        done = sum(c.state == "COMPLETED" for c in t.history())
        if done != len(batches):
            raise AssertionError(f"{done} commits for {len(batches)} micro-batches")
        if upsert:
            verify(t.to_arrow(), latest_of(batches), "foreachBatch upsert")
        elif t.count() != sum(b.num_rows for b in batches):
            raise AssertionError("the append stream lost rows")
    return secs


def main(quick: bool = False) -> dict[str, Any]:
    """Spark foreachBatch upserts: rows/s, and against foreachBatch appends."""
    from lamina.engines.spark import get_spark

    n_batches = 10 if quick else 60
    reps = 2 if quick else 3
    batches = stream(n_batches, seed=11)
    rows = sum(b.num_rows for b in batches)
    spark = get_spark(master="local[2]", app_name="lamina-bench-upsert-stream")
    spark.sparkContext.setLogLevel("ERROR")
    times: dict[str, list[float]] = {"upsert": [], "append": []}
    try:
        with scratch_dir("upsert-stream-src") as src:
            for i, b in enumerate(batches):  # Spark takes files in modification-time order
                path = os.path.join(src, f"b{i:05d}.parquet")
                pq.write_table(b, path)
                os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
            with scratch_dir("upsert-stream-warm") as d:  # JIT, caches; not counted
                run(spark, batches[:2], _subset(src, 2, d), d, True)
            for rep in range(reps):
                order = ["upsert", "append"] if rep % 2 == 0 else ["append", "upsert"]
                for kind in order:
                    with scratch_dir(f"upsert-stream-{kind}") as d:
                        times[kind].append(run(spark, batches, src, d, kind == "upsert"))
                print(
                    f"  rep {rep + 1}/{reps}: upsert {times['upsert'][-1]:.2f}s, "
                    f"append {times['append'][-1]:.2f}s ({rows:,} rows, {n_batches} batches)"
                )
    finally:
        spark.stop()
    up, ap = median(times["upsert"]), median(times["append"])
    figures = [
        figure("foreachBatch upsert", rows / up, "rows/s", note=f"{up:.2f} s for {rows:,} rows"),
        figure("foreachBatch append (baseline)", rows / ap, "rows/s", note=f"{ap:.2f} s"),
        figure("upsert / append time", up / ap, "x", note="the cost of key resolution"),
    ]
    print_figures(
        f"Spark foreachBatch: {n_batches} micro-batches of 10k rows, 30% updates", figures
    )
    return result(
        "upsert_spark",
        {"batches": n_batches, "rows": rows, "repetitions": reps},
        figures,
        {"seconds": times},
    )


def _subset(src: str, n: int, root: str) -> str:
    """A directory with the first ``n`` files of ``src`` (the warm-up stream)."""
    out = os.path.join(root, "src")
    os.makedirs(out)
    for name in sorted(os.listdir(src))[:n]:
        os.link(os.path.join(src, name), os.path.join(out, name))
    return out


if __name__ == "__main__":
    cli(main, "upsert_spark")
