"""Reading tables record by record beyond their latest rows: every stored record with
its validity (:func:`all_versions`, Pinot's skipUpsert; on plain tables too, whose
row-level changes hide rows), the record-level change feed (:func:`read_changes`, also
in Spark), and an upsert table's latest records a major compaction rewrites
(:func:`latest_records`). See docs/upserts.md and docs/rowlevel.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa

from lamina.changes import CHANGE, COMMIT_ID, COMMIT_SEQ, change_schema, tagged, union
from lamina.engines.spark_read import read_rows, read_spark_versions
from lamina.failpoints import failpoint
from lamina.io.arrow import time_filter
from lamina.io.reader import check_columns, snapshot_files
from lamina.meta.changes import change_points
from lamina.meta.segments import first_added
from lamina.read import plan

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from lamina.core.interval import Interval
    from lamina.core.model import AsOf, TableRecord
    from lamina.core.scan import ScanPlan
    from lamina.operations.handle import TableHandle


def latest_records(table: TableHandle, as_of: AsOf, interval: Interval | None) -> pa.Table:
    """The records stored in the snapshot's segments of ``interval`` that are their
    key's latest (live tombstones included: hidden, they still decide later
    comparisons): what a major compaction rewrites. Raises SnapshotNotFoundError."""
    import pyarrow.dataset as ds  # loads numpy, pandas, pyarrow
    import pyarrow.parquet as pq  # loads pyarrow

    from lamina.meta import deletes  # loads pyroaring

    wh = table.ctx.warehouse
    plan = table.scan(as_of, interval)
    rec = plan.table  # with the schema of its snapshot
    root = table.ctx.db.root + "/"
    rel = {str(t.segment.location): str(t.segment.location).removeprefix(root) for t in plan.tasks}
    vectors = table.ctx.db.read(
        lambda conn: deletes.of_snapshot(conn, rec, plan.seq, list(rel.values()))
    )
    parts = []
    for task in plan.tasks:
        path = str(task.segment.location)
        with snapshot_files(plan.seq, rec.name):
            data = pq.read_table(path, filesystem=wh.fs, schema=rec.schema)
        v = vectors.get(rel[path])
        if v is not None and v.superseded:
            keep = np.ones(data.num_rows, bool)
            keep[deletes.positions(v.superseded)] = False
            data = data.filter(pa.array(keep))
        if task.keep is not None:
            assert rec.time_column is not None
            flt = time_filter(rec.schema.field(rec.time_column), task.keep)
            data = ds.dataset(data).to_table(filter=flt)
        parts.append(data)
    return pa.concat_tables(parts) if parts else rec.schema.empty_table()


VALID_FROM = "$valid_from"
VALID_UNTIL = "$valid_until"


def validity(table: TableHandle, plan: ScanPlan) -> dict[str, tuple[int, np.ndarray]]:
    """Per file of ``plan`` (by path): the seq of the commit that stored its records
    and, per row, the seq from which the row no longer shows at the plan's seq (-1:
    it still shows). Raises SnapshotNotFoundError."""
    from lamina.meta import deletes  # loads pyroaring

    failpoint("upsert.read.validity.before", table=table, plan=plan)
    rec = table.record
    root = table.ctx.db.root + "/"
    rel = {t.segment.location: str(t.segment.location).removeprefix(root) for t in plan.tasks}

    def read(conn: Connection) -> tuple[Any, dict[str, int]]:
        hist = deletes.history(conn, rec.id, rel.values())
        first = first_added(conn, rec.id, rel.values())
        deletes.still_readable(conn, rec, plan.seq)  # retention since the plan: no mix
        return hist, first

    hist, first = table.ctx.db.read(read)
    counts = plan.row_counts()
    out = {}
    for task in plan.tasks:
        path = str(task.segment.location)
        until = np.full(counts[path], -1, np.int64)
        for seq, rows in hist.get(rel[path], []):
            if seq > plan.seq:
                break
            pos = deletes.positions(rows)
            pos = pos[until[pos] < 0]
            until[pos] = seq
        out[path] = (first.get(rel[path], 0), until)  # a carried copy: when its file was stored
    # validity is read (and the snapshot checked readable); no file is read yet
    failpoint("upsert.read.validity.after", table=table, plan=plan)
    return out


def all_versions(
    table: TableHandle,
    as_of: AsOf = None,
    columns: list[str] | None = None,
    interval: Any = None,
) -> pa.Table:
    """Every record stored in the snapshot's segments, superseded ones too (Pinot's
    skipUpsert), with :data:`VALID_FROM` (the seq of the commit that stored it) and
    :data:`VALID_UNTIL` (the seq from which it no longer shows: a newer record of its
    key, or a delete; null while it still shows). A record that never showed (out of
    order, superseded in its own input, a tombstone) has both equal. On a plain table
    the rows a row-level delete, update or merge hid end at its seq.
    Raises SnapshotNotFoundError, SchemaError."""
    import pyarrow.dataset as ds  # loads numpy, pandas, pyarrow
    import pyarrow.parquet as pq  # loads pyarrow

    wh = table.ctx.warehouse
    plan = table.scan(as_of, interval)
    rec = plan.table  # with the schema of its snapshot
    columns = check_columns(rec.schema, columns)
    marks = validity(table, plan)
    tc = rec.time_column
    parts = []
    for task in plan.tasks:
        path = str(task.segment.location)
        cols = columns
        if task.keep is not None and cols is not None and tc not in cols:
            cols = [*cols, str(tc)]
        with snapshot_files(plan.seq, rec.name):
            data = pq.read_table(path, columns=cols, filesystem=wh.fs, schema=rec.schema)
        start, until = marks[path]
        data = data.append_column(VALID_FROM, pa.array(np.full(data.num_rows, start)))
        data = data.append_column(VALID_UNTIL, pa.array(until, mask=until < 0))
        if task.keep is not None:
            assert tc is not None
            flt = time_filter(rec.schema.field(tc), task.keep)
            keep = [*(columns or rec.schema.names), VALID_FROM, VALID_UNTIL]
            data = ds.dataset(data).to_table(columns=keep, filter=flt)
        parts.append(data)
    if not parts:
        empty = rec.schema.empty_table()
        empty = empty.select(columns) if columns is not None else empty
        return empty.append_column(VALID_FROM, pa.array([], pa.int64())).append_column(
            VALID_UNTIL, pa.array([], pa.int64())
        )
    return pa.concat_tables(parts)


def all_versions_spark(
    table: TableHandle, spark: Any, as_of: AsOf = None, interval: Any = None
) -> Any:
    """:func:`all_versions` as a Spark DataFrame: the files read by Spark's own Parquet
    reader, each row's validity joined on its file and ``_metadata.row_index``.
    Raises SnapshotNotFoundError."""

    plan = table.scan(as_of, interval)
    return read_spark_versions(
        spark, plan, table.ctx.warehouse, validity(table, plan), (VALID_FROM, VALID_UNTIL)
    )


Shown: TypeAlias = "dict[tuple[str, Interval | None], tuple[int, np.ndarray]]"


def _visible_rows(plan: ScanPlan) -> Shown:
    """Per file of ``plan`` and time span it answers for (None: all of it; a file a
    newer version hides in the middle answers for two): its row count and the
    positions it hides."""
    none = np.zeros(0, np.int64)
    return {
        (str(t.segment.location), t.keep): (
            t.segment.row_count,
            plan.deletes.get(str(t.segment.location), none),
        )
        for t in plan.tasks
    }


@dataclass(frozen=True)
class ChangedRows:
    """Rows of one file a commit showed ('insert') or stopped showing ('delete'): at
    ``positions``, those inside ``keep`` (None: all)."""

    change: str
    commit_id: int
    seq: int
    path: str
    positions: np.ndarray
    keep: Interval | None


def changed_rows(
    table: TableHandle, after_seq: int, until_seq: int | None
) -> tuple[TableRecord, list[ChangedRows]]:
    """The change feed of an upsert table as row positions (catalog only, no file
    read), in feed order: per commit, deletes, then inserts; and the table as the
    catalog has it now (the feed's schema). Raises SnapshotNotFoundError."""

    ctx = table.ctx
    changes = change_points(ctx.db, table.name, after_seq, until_seq)
    out: list[ChangedRows] = []
    before: Shown = {}
    if changes.base is not None:
        before = _visible_rows(plan(ctx, table.name, changes.after_seq))
    root = ctx.db.root + "/"
    for point in changes.points:
        shown = after = _visible_rows(plan(ctx, table.name, point.seq))
        if not point.touched:  # a compaction: the same records, rewritten
            before = after
            continue
        if point.copies:  # a copy-on-write upsert: the files it rewrote, as if kept
            copies = set(point.copies)
            after = {k: v for k, v in after.items() if k[0].removeprefix(root) not in copies}
            for (path, keep), (n, _) in before.items():
                hid = point.rewrote.get(path.removeprefix(root))
                if hid is not None:
                    after[path, keep] = (n, np.asarray(hid, np.int64))
        for tag in ("delete", "insert"):
            old, new = (before, after) if tag == "delete" else (after, before)
            for path, keep in sorted(old, key=lambda k: (k[0], str(k[1]))):
                n, hidden = old[path, keep]
                if (path, keep) in new:  # shows in old, hidden in new: a cost in
                    rows = np.setdiff1d(new[path, keep][1], hidden)  # hidden rows only
                else:
                    rows = np.setdiff1d(np.arange(n), hidden)
                if len(rows):
                    out.append(ChangedRows(tag, point.commit_id, point.seq, path, rows, keep))
        before = shown
    # the feed is planned from the catalog; no file is read yet
    failpoint("upsert.read.changes_planned", table=table)
    return changes.table, out


def _feed_columns(
    rec: TableRecord, columns: list[str] | None
) -> tuple[pa.Schema, list[str] | None]:
    """The feed's schema, and the columns to read (the time column too when a column
    subset leaves it out: partly shown files filter on it). Raises SchemaError."""

    schema, tc = rec.schema, rec.time_column
    columns = check_columns(schema, columns)
    out = change_schema(
        schema if columns is None else pa.schema([schema.field(c) for c in columns])
    )
    read = columns if columns is None or tc is None or tc in columns else [*columns, tc]
    return out, read


def read_changes(
    table: TableHandle,
    after_seq: int,
    until_seq: int | None = None,
    columns: list[str] | None = None,
) -> pa.Table:
    """The change feed of an upsert table (see ``Table.read_changes``): per commit, the
    records that stopped showing ('delete': superseded by a newer record of their key,
    deleted, or in removed segments) and those that started ('insert'); an update is a
    delete and an insert. Raises SnapshotNotFoundError, SchemaError."""
    import pyarrow.dataset as ds  # loads numpy, pandas, pyarrow
    import pyarrow.parquet as pq  # loads pyarrow

    fs = table.ctx.warehouse.fs
    rec, pieces = changed_rows(table, after_seq, until_seq)
    out_schema, cols = _feed_columns(rec, columns)
    parts: list[pa.Table] = []
    again = "read the changes again (retention ran meanwhile: its error says where to resume)"
    for piece in pieces:
        with snapshot_files(piece.seq, rec.name, again):
            data = pq.read_table(piece.path, columns=cols, filesystem=fs, schema=rec.schema)
        data = data.take(pa.array(piece.positions))
        if piece.keep is not None:
            assert rec.time_column is not None
            flt = time_filter(rec.schema.field(rec.time_column), piece.keep)
            data = ds.dataset(data).to_table(columns=columns, filter=flt)
        elif columns is not None:
            data = data.select(columns)
        if data.num_rows:
            parts.append(tagged(data, piece.change, piece.commit_id, piece.seq).cast(out_schema))
    return pa.concat_tables(parts) if parts else out_schema.empty_table()


def read_changes_spark(
    spark: Any,
    table: TableHandle,
    after_seq: int,
    until_seq: int | None = None,
    columns: list[str] | None = None,
) -> Any:
    """:func:`read_changes` as a Spark DataFrame: the files read by Spark's Parquet
    reader, joined with the changed rows' positions on ``_metadata.row_index``. Raises
    SnapshotNotFoundError, SchemaError."""

    rec, pieces = changed_rows(table, after_seq, until_seq)
    out_schema, _ = _feed_columns(rec, columns)
    names = out_schema.names
    by_keep: dict[Interval | None, list[ChangedRows]] = {}
    for piece in pieces:
        by_keep.setdefault(piece.keep, []).append(piece)
    frames = []
    for keep, group in by_keep.items():
        sizes = [len(p.positions) for p in group]
        rows = pa.table(
            {
                "path": pa.array(
                    [p.path for p, k in zip(group, sizes, strict=True) for _ in range(k)]
                ),
                "row": pa.array(np.concatenate([p.positions for p in group]), pa.int64()),
                CHANGE: pa.array(np.repeat([p.change for p in group], sizes), pa.string()),
                COMMIT_ID: pa.array(np.repeat([p.commit_id for p in group], sizes), pa.int64()),
                COMMIT_SEQ: pa.array(np.repeat([p.seq for p in group], sizes), pa.int64()),
            }
        )
        df = read_rows(spark, table.ctx.warehouse, rec, rows, keep)
        frames.append(df.select(*[f"`{c}`" for c in names]))
    return union(spark, frames, out_schema)
