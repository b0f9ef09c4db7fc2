"""Spark writes aim at the table's target rows per segment, whatever the DataFrame's
partitioning: each task writes its own file per chunk, and the write's small files of
a chunk are merged, in order, up to the target in the same commit (t.append(df) and
``format("lamina")`` alike); an upsert's tie still goes to the later row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lamina

pytestmark = pytest.mark.spark

DAY_US = 86_400_000_000
JAN_1 = 19723 * DAY_US  # 2024-01-01, µs
TARGET = 3_000


@pytest.fixture
def lake(tmp_path: Path) -> Any:
    with lamina.connect(warehouse=str(tmp_path / "wh")) as c:
        yield c, str(tmp_path / "wh")


def _frame(spark: Any, rows: int, partitions: int, days: int = 1) -> Any:
    """``rows`` rows in ``partitions`` partitions, row i in day i % ``days``; key
    ``k`` = i % 1000 (each key many times, across partitions), ``v`` = i."""
    from pyspark.sql import functions as F

    day = (F.col("id") % days) * DAY_US
    return spark.range(0, rows, numPartitions=partitions).select(
        F.timestamp_micros(F.lit(JAN_1) + day + F.col("id")).alias("ts"),
        (F.col("id") % 1000).alias("k"),
        F.col("id").alias("v"),
    )


def _sizes(t: lamina.Table) -> dict[str, list[int]]:
    rows: dict[str, list[int]] = {}
    for s in t.segments():
        rows.setdefault(str(s.interval), []).append(s.row_count)
    return {k: sorted(v) for k, v in rows.items()}


def _write(how: str, t: lamina.Table, df: Any, wh: str) -> None:
    if how == "append":
        t.append(df)
    else:
        df.write.format("lamina").options(table=t.name, warehouse=wh).mode("append").save()


@pytest.mark.parametrize("how", ["append", "format_lamina"])
def test_spark_day_from_200_partitions_makes_about_rows_over_target_segments(
    spark: Any, lake: Any, how: str
) -> None:
    """20,000 rows of one day from 200 partitions (100 rows each): 7 segments (runs of
    30 of the tasks' files, 3,000 rows, and the rest), where each task used to add its
    own."""
    cat, wh = lake
    df = _frame(spark, 20_000, 200)
    t = cat.create_table(
        "ev", df.schema, time_column="ts", properties={"target_rows_per_segment": TARGET}
    )
    _write(how, t, df, wh)
    (sizes,) = _sizes(t).values()
    assert sizes == [2_000] + [3_000] * 6
    assert sorted(t.to_arrow().column("v").to_pylist()) == list(range(20_000))
    # the tasks' own files were deleted once merged: only the segments' files are left
    files = sorted(p for p in Path(wh).rglob("*.parquet"))
    assert len(files) == 7


@pytest.mark.parametrize("how", ["append", "format_lamina"])
def test_spark_big_files_are_left_as_written(spark: Any, lake: Any, how: str) -> None:
    """Two partitions of 10,000 rows: files at the target already, nothing merged."""
    cat, wh = lake
    df = _frame(spark, 20_000, 2)
    t = cat.create_table(
        "ev", df.schema, time_column="ts", properties={"target_rows_per_segment": 10_000}
    )
    _write(how, t, df, wh)
    (sizes,) = _sizes(t).values()
    assert sizes == [10_000, 10_000]


@pytest.mark.parametrize("how", ["append", "format_lamina"])
def test_spark_upsert_from_many_partitions_keeps_the_later_row(
    spark: Any, lake: Any, how: str
) -> None:
    """Keys repeat across 200 partitions with equal times (a tie on the comparison
    column, the time column): the row later in the DataFrame wins after the merge."""
    from pyspark.sql import functions as F

    cat, wh = lake
    df = spark.range(0, 20_000, numPartitions=200).select(
        F.timestamp_micros(F.lit(JAN_1) + F.col("id") % 1000).alias("ts"),
        (F.col("id") % 1000).alias("k"),
        F.col("id").alias("v"),
    )
    schema = pa.schema(
        [
            pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("k", pa.int64(), nullable=False),
            pa.field("v", pa.int64()),
        ]
    )
    t = cat.create_table(
        "u",
        schema,
        time_column="ts",
        primary_key=["k"],
        properties={"target_rows_per_segment": TARGET},
    )
    _write(how, t, df, wh)
    (sizes,) = _sizes(t).values()
    assert sizes == [2_000] + [3_000] * 6
    got = dict(zip(*t.to_arrow().select(["k", "v"]).to_pydict().values(), strict=True))
    assert got == {k: 19_000 + k for k in range(1000)}
