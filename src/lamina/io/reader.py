"""The local read path: execute a scan plan with pyarrow; rows read from a table's files as
its schema types them (:func:`padded`)."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from lamina.core.interval import Interval
from lamina.core.scan import ScanPlan
from lamina.core.widening import widens
from lamina.errors import CommitConflictError, SchemaError, SnapshotNotFoundError
from lamina.io.arrow import storage_schema, time_filter
from lamina.io.warehouse import Warehouse


def check_columns(schema: pa.Schema, columns: Sequence[str] | None) -> list[str] | None:
    """``columns`` as a list; raises SchemaError unless they are a list (or tuple) of
    distinct column names of ``schema``."""
    if columns is None:
        return None
    if not isinstance(columns, list | tuple) or not all(isinstance(c, str) for c in columns):
        raise SchemaError(
            f"columns={columns!r}: pass a list of column names, e.g. ['{schema.names[0]}']"
        )
    unknown = [c for c in columns if c not in schema.names]
    if unknown:
        raise SchemaError(f"unknown columns {unknown}; the table has {schema.names}")
    twice = sorted({c for c in columns if columns.count(c) > 1})
    if twice:
        raise SchemaError(f"columns {twice} are named twice; name each column once")
    return list(columns)


@contextlib.contextmanager
def snapshot_files(seq: int, table: str, advice: str = "read a newer snapshot") -> Iterator[None]:
    """Raise SnapshotNotFoundError for a file of snapshot ``seq`` of ``table`` that is
    gone under the reads inside (retention or a push cleaned it up meanwhile)."""
    try:
        yield
    except FileNotFoundError as exc:
        raise SnapshotNotFoundError(
            f"a file of snapshot seq {seq} of {table!r} no longer exists ({exc}); "
            f"it was cleaned up — {advice}"
        ) from None


def read_arrow(plan: ScanPlan, wh: Warehouse, columns: list[str] | None = None) -> pa.Table:
    """Read the plan's files into one Arrow table (segments in time order)."""
    import pyarrow.dataset as ds  # imports pandas: only when reading

    schema = plan.table.schema
    columns = check_columns(schema, columns)
    groups: dict[Interval | None, list[str]] = defaultdict(list)
    hiding: dict[Interval | None, list[str]] = defaultdict(list)  # with deletion vectors
    for path, keep in plan.reads():
        (hiding if path in plan.deletes else groups)[keep].append(path)
    parts = []

    def time_flt(keep: Interval | None) -> ds.Expression | None:
        if keep is None:
            return None
        assert plan.table.time_column is not None
        return time_filter(schema.field(plan.table.time_column), keep)

    with snapshot_files(plan.seq, plan.table.name):
        for keep, files in groups.items():
            dataset = ds.dataset(files, schema=schema, format="parquet", filesystem=wh.fs)
            parts.append(dataset.to_table(columns=columns, filter=time_flt(keep)))
        tc = plan.table.time_column
        rows = {str(t.segment.location): t.segment.row_count for t in plan.tasks} if hiding else {}
        for keep, files in hiding.items():  # read whole (in order), less the hidden rows
            cols = columns
            if keep is not None and cols is not None and tc not in cols:
                cols = [*cols, str(tc)]
            data = ds.dataset(files, schema=schema, format="parquet", filesystem=wh.fs)
            got = data.to_table(columns=cols)
            starts = np.cumsum([0, *(rows[f] for f in files)])
            if got.num_rows != starts[-1]:  # the catalog's row counts place every row
                raise SnapshotNotFoundError(
                    f"the files of snapshot seq {plan.seq} of {plan.table.name!r} hold "
                    f"{got.num_rows} rows, not the {starts[-1]} the catalog records"
                )
            mask = np.ones(got.num_rows, bool)
            for f, at in zip(files, starts, strict=False):
                mask[at + plan.deletes[f]] = False
            got = got.filter(pa.array(mask))
            if keep is not None:
                got = ds.dataset(got).to_table(columns=columns, filter=time_flt(keep))
            parts.append(got)
    if not parts:
        empty = schema.empty_table()
        return empty.select(columns) if columns is not None else empty
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]


def padded(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """Rows read from a table's files as ``schema`` (its storage form) types them, with
    nulls for the columns added since a file was written (``t.add_columns``). Raises
    CommitConflictError for a column ``schema`` does not have, or has of a narrower type:
    it was added or widened after ``schema`` was read (do it again)."""

    stored = storage_schema(schema)
    extra = [n for n in data.column_names if n not in stored.names]
    wider = [
        f.name
        for f in data.schema
        if f.name in stored.names and widens(stored.field(f.name).type, f.type)
    ]
    if extra or wider:
        raise CommitConflictError(
            f"files hold columns {extra or wider} that the table's schema did not have, or "
            "had of a narrower type, when this began (t.add_columns or t.widen_column "
            "meanwhile): nothing was published; do it again",
            retryable=True,
        )
    if data.column_names != stored.names:
        data = pa.table(
            [
                data.column(f.name) if f.name in data.column_names else pa.nulls(len(data), f.type)
                for f in stored
            ],
            names=stored.names,
        )
    return data.cast(stored)
