"""Spark reads: exactly a snapshot's visible rows (deletion vectors applied by an anti
join on each row's file and ``_metadata.row_index``), rows at given positions, and an
upsert table's every record with its validity seqs. The files are read by Spark's own
Parquet reader."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lamina.core.interval import Interval, format_us
from lamina.core.model import TableRecord
from lamina.core.scan import ScanPlan
from lamina.engines.spark_schema import arrow_to_spark_schema, ref
from lamina.io.warehouse import Warehouse

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


#: a local file URI's scheme: Spark writes ``file:/x``, warehouses ``file:///x``
_LOCAL = "^file:/+"
#: the file a row comes from, as the warehouse names it: Spark percent-encodes
#: ``_metadata.file_path`` (a space as %20, ``#`` as %23) but leaves ``+`` as it is,
#: which ``url_decode`` would read as a space
_FILE_PATH = "url_decode(replace(_metadata.file_path, '+', '%2B'))"


def _hidden_rows(spark: SparkSession, plan: ScanPlan, wh: Warehouse) -> DataFrame:
    """The plan's deletion vectors as a DataFrame of (file URI, row index)."""
    paths = sorted(plan.deletes)
    uris = [re.sub(_LOCAL, "/", wh.uri(p)) for p in paths]  # as Spark's paths, normalized
    table = pa.table(
        {
            "f": pa.array([u for p, u in zip(paths, uris, strict=True) for _ in plan.deletes[p]]),
            "r": pa.array([int(r) for p in paths for r in plan.deletes[p]], pa.int64()),
        }
    )
    return spark.createDataFrame(table.to_pandas(), "f string, r long")


def _positioned(spark: SparkSession, rec: TableRecord, wh: Warehouse, paths: list[str]) -> Any:
    """The files' rows with ``__lamina_f`` (the file's URI as Spark's, normalized) and
    ``__lamina_r`` (the row's position in its file)."""
    from pyspark.sql import functions as F  # loads pyspark

    df = spark.read.schema(arrow_to_spark_schema(rec.schema)).parquet(*[wh.uri(p) for p in paths])
    return df.select(
        *[ref(n) for n in rec.schema.names],
        F.regexp_replace(F.expr(_FILE_PATH), _LOCAL, "/").alias("__lamina_f"),
        F.col("_metadata.row_index").alias("__lamina_r"),
    )


def _union(
    spark: SparkSession, plan: ScanPlan, read: Callable[[list[str]], Any], names: list[str]
) -> DataFrame:
    """``read`` of the plan's whole files, and of each group of files read in part
    less the rows outside its interval, as one DataFrame of the columns ``names``."""
    from pyspark.sql import functions as F  # loads pyspark

    rec = plan.table
    frames = []
    if plan.whole_files:
        frames.append(read(plan.whole_files))
    groups: dict[Interval, list[str]] = {}
    for path, keep in plan.partial_files:
        groups.setdefault(keep, []).append(path)
    for keep, paths in groups.items():
        assert rec.time_column is not None
        c = F.col(ref(rec.time_column))
        lo, hi = _spark_literal(rec.schema.field(rec.time_column).type, keep)
        frames.append(read(paths).where((c >= lo) & (c < hi)))
    quoted = [ref(n) for n in names]
    if not frames:
        extra = [pa.field(n, pa.int64()) for n in names if n not in rec.schema.names]
        return spark.createDataFrame([], arrow_to_spark_schema(pa.schema([*rec.schema, *extra])))
    result = frames[0].select(*quoted)
    for f in frames[1:]:
        result = result.unionByName(f.select(*quoted))
    return result


def read_spark(spark: SparkSession, plan: ScanPlan, wh: Warehouse) -> DataFrame:
    """A DataFrame over exactly the plan's files (native Parquet reader)."""
    rec = plan.table
    hidden = _hidden_rows(spark, plan, wh) if plan.deletes else None

    def read(paths: list[str]) -> DataFrame:
        """The files' rows, less those deletion vectors hide (an anti join on the
        file's path and ``_metadata.row_index``)."""
        if hidden is None or not any(p in plan.deletes for p in paths):
            return spark.read.schema(arrow_to_spark_schema(rec.schema)).parquet(
                *[wh.uri(p) for p in paths]
            )
        df = _positioned(spark, rec, wh, paths)
        on = (df["__lamina_f"] == hidden["f"]) & (df["__lamina_r"] == hidden["r"])
        return df.join(hidden, on, "left_anti")

    return _union(spark, plan, read, rec.schema.names)


def read_spark_versions(
    spark: SparkSession,
    plan: ScanPlan,
    wh: Warehouse,
    marks: Mapping[str, tuple[int, np.ndarray]],
    names: tuple[str, str],
) -> DataFrame:
    """Every row of the plan's files, deletion vectors ignored, with the two long
    columns ``names``: the seq that stored the row and the seq from which it no longer
    shows (null: it still shows), from ``marks`` (per path: the first seq, and per row
    the second or -1); each joined on the row's file and ``_metadata.row_index``."""
    from pyspark.sql import functions as F  # loads pyspark

    rec = plan.table
    valid_from, valid_until = names
    paths = list(marks)
    uris = [re.sub(_LOCAL, "/", wh.uri(p)) for p in paths]  # as Spark's, normalized
    starts = pa.table(
        {
            "__lamina_f": pa.array(uris, pa.string()),
            valid_from: pa.array([marks[p][0] for p in paths], pa.int64()),
        }
    )
    ended = [np.flatnonzero(marks[p][1] >= 0) for p in paths]  # positions no longer shown
    none = np.zeros(0, np.int64)
    ends = pa.table(
        {
            "__lamina_f": pa.array(
                np.repeat(np.array(uris, object), [len(e) for e in ended]), pa.string()
            ),
            "__lamina_r": pa.array(np.concatenate([none, *ended])),
            valid_until: pa.array(
                np.concatenate([none, *(marks[p][1][e] for p, e in zip(paths, ended, strict=True))])
            ),
        }
    )
    first = F.broadcast(
        spark.createDataFrame(starts.to_pandas(), f"__lamina_f string, {ref(valid_from)} long")
    )
    until = spark.createDataFrame(
        ends.to_pandas(), f"__lamina_f string, __lamina_r long, {ref(valid_until)} long"
    )

    def read(paths: list[str]) -> DataFrame:
        df = _positioned(spark, rec, wh, paths).join(first, "__lamina_f")
        return df.join(until, ["__lamina_f", "__lamina_r"], "left")

    return _union(spark, plan, read, [*rec.schema.names, valid_from, valid_until])


def read_rows(
    spark: SparkSession, wh: Warehouse, rec: TableRecord, rows: pa.Table, keep: Interval | None
) -> DataFrame:
    """The table's rows at ``rows``' (``path``, ``row``) positions, those inside
    ``keep`` (None: all), with ``rows``' other columns beside them: the files read by
    Spark's Parquet reader, joined on the file and ``_metadata.row_index``."""
    from pyspark.sql import functions as F  # loads pyspark

    paths = sorted(set(rows.column("path").to_pylist()))
    uri = {p: re.sub(_LOCAL, "/", wh.uri(p)) for p in paths}  # as Spark's, normalized
    extra = [c for c in rows.column_names if c not in ("path", "row")]
    wanted = rows.drop_columns(["path"]).add_column(
        0, "__lamina_f", pa.array([uri[p] for p in rows.column("path").to_pylist()], pa.string())
    )
    wanted = wanted.rename_columns(["__lamina_f", "__lamina_r", *extra])
    at = spark.createDataFrame(wanted.to_pandas())
    df = _positioned(spark, rec, wh, paths)
    df = df.join(at, ["__lamina_f", "__lamina_r"]).drop("__lamina_f", "__lamina_r")
    if keep is not None:
        assert rec.time_column is not None
        c = F.col(ref(rec.time_column))
        lo, hi = _spark_literal(rec.schema.field(rec.time_column).type, keep)
        df = df.where((c >= lo) & (c < hi))
    return df


def _spark_literal(t: pa.DataType, keep: Interval) -> tuple[Any, Any]:
    """Bounds as SQL literals that mean the same whatever the session time zone."""
    from pyspark.sql import functions as F  # loads pyspark

    def text(us: int) -> str:
        return format_us(us).rstrip("Z").replace("T", " ")

    if pa.types.is_date(t):
        day = 86_400_000_000
        lo, hi = (-((-keep.start) // day)) * day, (-((-keep.end) // day)) * day
        return F.expr(f"DATE '{text(lo)[:10]}'"), F.expr(f"DATE '{text(hi)[:10]}'")
    if t.tz is None:
        return (
            F.expr(f"TIMESTAMP_NTZ '{text(keep.start)}'"),
            F.expr(f"TIMESTAMP_NTZ '{text(keep.end)}'"),
        )
    return (
        F.expr(f"TIMESTAMP_LTZ '{text(keep.start)}+00:00'"),
        F.expr(f"TIMESTAMP_LTZ '{text(keep.end)}+00:00'"),
    )


def read_source(
    spark: SparkSession,
    catalog_url: str,
    warehouse: str,
    table: str,
    version: int | None,
    interval: Interval | None,
) -> DataFrame:
    """A DataFrame over one snapshot (the table ``version``; None: the latest) read
    through lamina's data source (``format("lamina")``): tasks read the files with
    pyarrow, wherever the warehouse is, and apply deletion vectors themselves."""
    reader = spark.read.format("lamina").options(
        table=table, catalog=catalog_url, warehouse=warehouse
    )
    if version is not None:
        reader = reader.option("versionAsOf", str(version))
    if interval is not None:
        reader = reader.option("interval", str(interval))
    return reader.load()
