"""Incremental reads: the rows each commit made visible or invisible, in seq order.

For every commit completed after ``after_seq`` (by completion seq, so a commit that
started earlier but completed later is never skipped — Hudi's "hollow commit"), the
snapshots before and after it are planned over the intervals it touched only, and
the pieces of segments that appeared or disappeared are read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lamina.context import CatalogContext
from lamina.core.changes import diff
from lamina.core.interval import Interval
from lamina.core.scan import ScanPlan, ScanTask, task_for
from lamina.core.segment import Segment
from lamina.engines.spark_read import read_spark
from lamina.engines.spark_schema import arrow_to_spark_schema
from lamina.io.reader import check_columns, read_arrow
from lamina.meta.changes import Changes, change_points
from lamina.read import plan

if TYPE_CHECKING:
    import numpy as np

    from lamina.core.model import TableRecord

CHANGE = "_change"
COMMIT_ID = "_commit_id"
COMMIT_SEQ = "_commit_seq"


def read_changes(
    ctx: CatalogContext,
    name: str,
    after_seq: int,
    until_seq: int | None = None,
    columns: list[str] | None = None,
) -> pa.Table:
    """Rows that became visible ('insert') or stopped being visible ('delete') in each
    commit completed in ``(after_seq, until_seq]``, with ``_change``, ``_commit_id``
    and ``_commit_seq``; per commit, deletes before inserts.
    Raises TableNotFoundError, SnapshotNotFoundError, SchemaError."""
    changes = change_points(ctx.db, name, after_seq, until_seq)
    schema = changes.table.schema
    columns = check_columns(schema, columns)
    out_schema = change_schema(
        schema if columns is None else pa.schema([schema.field(c) for c in columns])
    )
    parts = []
    for tag, commit_id, seq, tasks in _pieces(ctx, name, changes):
        data = read_arrow(_plan_of(changes, seq, tasks), ctx.warehouse, columns)
        if data.num_rows:
            parts.append(tagged(data, tag, commit_id, seq).cast(out_schema))
    return pa.concat_tables(parts) if parts else out_schema.empty_table()


def read_changes_spark(
    spark: Any,
    ctx: CatalogContext,
    name: str,
    after_seq: int,
    until_seq: int | None = None,
    columns: list[str] | None = None,
) -> Any:
    """:func:`read_changes` as a Spark DataFrame (the files read by Spark's own
    Parquet reader). Raises as :func:`read_changes`."""
    from pyspark.sql import functions as F  # loads pyspark

    changes = change_points(ctx.db, name, after_seq, until_seq)
    schema = changes.table.schema
    keep = check_columns(schema, schema.names if columns is None else columns) or []
    frames = []
    for tag, commit_id, seq, tasks in _pieces(ctx, name, changes):
        df = read_spark(spark, _plan_of(changes, seq, tasks), ctx.warehouse)
        frames.append(
            df.select(*[f"`{c}`" for c in keep])
            .withColumn(CHANGE, F.lit(tag))
            .withColumn(COMMIT_ID, F.lit(commit_id).cast("long"))
            .withColumn(COMMIT_SEQ, F.lit(seq).cast("long"))
        )
    return union(spark, frames, change_schema(pa.schema([schema.field(c) for c in keep])))


@dataclass(frozen=True)
class ChangedPiece:
    """Rows of one file that one commit showed ('insert') or stopped showing
    ('delete'): those at ``positions`` (None: every row), of them those inside ``keep``
    (None: all) — the change feed as a plan, read by whoever reads files (Spark's
    tasks, say) without the catalog."""

    change: str
    commit_id: int
    seq: int
    path: str
    keep: Interval | None
    positions: np.ndarray | None = None


def change_plan(
    ctx: CatalogContext, name: str, after_seq: int, until_seq: int | None = None
) -> tuple[TableRecord, list[ChangedPiece]]:
    """:func:`read_changes` as pieces of files, in feed order (catalog only: no file
    is read), and the table as the catalog has it now. Raises TableNotFoundError,
    SnapshotNotFoundError."""
    changes = change_points(ctx.db, name, after_seq, until_seq)
    out = [
        ChangedPiece(tag, commit_id, seq, str(t.segment.location), t.keep)
        for tag, commit_id, seq, tasks in _pieces(ctx, name, changes)
        for t in tasks
    ]
    return changes.table, out


def tagged(data: pa.Table, change: str, commit_id: int, seq: int) -> pa.Table:
    """``data`` with the change feed's columns: every row ``change`` by that commit."""
    n = data.num_rows
    return (
        data.append_column(CHANGE, pa.array([change] * n, pa.string()))
        .append_column(COMMIT_ID, pa.array([commit_id] * n, pa.int64()))
        .append_column(COMMIT_SEQ, pa.array([seq] * n, pa.int64()))
    )


def union(spark: Any, frames: list[Any], schema: pa.Schema) -> Any:
    """The Spark DataFrames ``frames`` one after the other (by column name); an empty
    one of ``schema`` if there are none."""

    if not frames:
        return spark.createDataFrame([], arrow_to_spark_schema(schema))
    result = frames[0]
    for f in frames[1:]:
        result = result.unionByName(f)
    return result


def change_schema(data: pa.Schema) -> pa.Schema:
    """``data``'s schema with the change feed's columns after it."""
    return (
        data.append(pa.field(CHANGE, pa.string(), nullable=False))
        .append(pa.field(COMMIT_ID, pa.int64(), nullable=False))
        .append(pa.field(COMMIT_SEQ, pa.int64(), nullable=False))
    )


def _pieces(
    ctx: CatalogContext, name: str, changes: Changes
) -> list[tuple[str, int, int, list[ScanTask]]]:
    """(change, commit id, seq, tasks to read) for every commit, deletes first."""
    timeless = changes.table.time_column is None
    out = []
    prev = None if changes.base is None else changes.after_seq  # versions
    for point in changes.points:
        deleted: list[tuple[Segment, Interval]] = []
        inserted: list[tuple[Segment, Interval]] = []
        for iv in point.touched:
            before = [] if prev is None else plan(ctx, name, prev, iv).tasks
            gone, new = diff(before, plan(ctx, name, point.seq, iv).tasks)
            deleted += gone
            inserted += new
        for tag, pieces in (("delete", deleted), ("insert", inserted)):
            if pieces:
                tasks = [task_for(seg, piece, timeless) for seg, piece in pieces]
                out.append((tag, point.commit_id, point.seq, tasks))
        prev = point.seq
    return out


def _plan_of(changes: Changes, seq: int, tasks: list[ScanTask]) -> ScanPlan:
    return ScanPlan(changes.table, seq, None, tasks)
