"""A transaction's operations on an upsert table: each stored (plain upserts) or held
until the commit (partial upserts, merged then with their keys' current records), and
resolved together by key at publish (see :mod:`lamina.operations.upsert`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lamina.core.keyhash import key_hashes
from lamina.core.upsert import UpsertBatch, resolve_against, resolve_batch
from lamina.io.arrow import is_spark_dataframe, storage_schema
from lamina.operations import steps as tw
from lamina.operations.upsert import (
    live_files,
    read_back,
    records_of,
    require,
    resolving_columns,
    same_schema,
)

if TYPE_CHECKING:
    from lamina.core.interval import Interval
    from lamina.core.model import NewSegment
    from lamina.core.upsert import UpsertSpec
    from lamina.operations.handle import TableHandle


@dataclass(frozen=True)
class Stored:
    """One operation of a transaction on an upsert table: the files it wrote, the
    resolving columns of its records in input order, and per file its rows there."""

    files: list[NewSegment]
    records: pa.Table
    file_rows: tuple[np.ndarray, ...]


def store(
    table: TableHandle, data: Any, action: str, interval: Interval | None, commit_dir: str
) -> Stored:
    """Write ``data``'s records under ``commit_dir`` for a transaction (an upsert, or
    an overwrite of ``interval``); they are resolved when it commits
    (:func:`combined`). Raises UpsertError (null keys or comparison values),
    SchemaError, TimeColumnError, DataOutsideIntervalError."""
    from lamina.io.writer import split_by_chunk, write_parts  # loads pyarrow

    spec = require(table)
    rec, wh = table.record, table.ctx.warehouse
    if is_spark_dataframe(data):
        from lamina.engines.spark import spark_producer  # loads pyarrow

        files = spark_producer(rec, wh, table.target_rows_per_segment, data)(commit_dir)
        tw.check_inside(action, [f.chunk for f in files], interval)
        want = storage_schema(rec.schema)
        if files:  # as the table stores them, as local operations' records are
            records, file_rows = read_back(spec, wh, [f.location for f in files], rec.schema)
            records = records.cast(pa.schema([want.field(c) for c in records.column_names]))
        else:
            records, file_rows = want.empty_table().select(resolving_columns(spec)), ()
        resolve_batch(records, spec)  # null keys, comparison values: refused here
        return Stored(files, records, file_rows)
    batch = records_of(spec, rec, data)
    records = batch.select(resolving_columns(spec))
    resolve_batch(records, spec)  # refused before anything is written
    parts = split_by_chunk(batch, rec.time_column, rec.granularity, table.target_rows_per_segment)
    tw.check_inside(action, [p.chunk for p in parts], interval)
    files = write_parts(wh, commit_dir, parts)
    file_rows = tuple(
        np.arange(p.rows.start, p.rows.stop) if isinstance(p.rows, slice) else p.rows for p in parts
    )
    return Stored(files, records, file_rows)


def combined(spec: UpsertSpec, ops: list[Stored], files: list[NewSegment]) -> UpsertBatch:
    """A transaction's operations as one upsert: their records in operation order (a
    later operation's record is the later one on a tie), ``files`` in the commit's
    order. An operation refused after it wrote (its files are not among ``files``)
    is left out."""

    held = {f.location for f in files}
    ops = [op for op in ops if all(f.location in held for f in op.files)]
    records = pa.concat_tables([op.records for op in ops])
    rows_of: dict[str, np.ndarray] = {}
    offset = 0
    for op in ops:
        for f, rows in zip(op.files, op.file_rows, strict=True):
            rows_of[f.location] = rows + offset
        offset += op.records.num_rows
    return UpsertBatch(
        spec,
        resolve_batch(records, spec),
        key_hashes(records, spec.primary_key),
        tuple(rows_of[f.location] for f in files),
    )


@dataclass(frozen=True)
class Held:
    """An operation of a transaction on a partial-upsert table, held until it commits:
    its records, whether it overwrites, and the chunks it writes (an append) or
    replaces (an overwrite)."""

    records: pa.Table
    overwrite: bool
    chunks: tuple[Interval, ...]


def hold(table: TableHandle, data: Any, action: str, interval: Interval | None) -> Held:
    """Check an operation of a transaction on a partial-upsert table and hold its
    records (a Spark DataFrame comes to the driver, as for ``t.upsert``). Raises
    UpsertError, SchemaError, TimeColumnError, DataOutsideIntervalError."""
    from lamina.io.writer import split_by_chunk  # loads pyarrow

    spec, rec = require(table), table.record
    if is_spark_dataframe(data):
        data = data.toArrow()
    batch = records_of(spec, rec, data)
    resolve_batch(batch, spec)  # refused here, before anything is written
    parts = split_by_chunk(batch, rec.time_column, rec.granularity, 2**62)
    written = [p.chunk for p in parts]
    replaced = tw.overwrite_chunks(table, action, written, interval)
    chunks = replaced if replaced is not None else tuple(sorted(set(written)))
    return Held(batch, replaced is not None, chunks)


def merge_held(
    table: TableHandle, held: list[Held], chunks: Iterable[Interval], remove: list[str], where: str
) -> tuple[list[NewSegment], list[NewSegment], UpsertBatch]:
    """A partial-upsert transaction at commit: its operations' records, in operation
    order, merged with their keys' current records (those its overwrites of ``chunks``
    and its deletion of ``remove`` leave), written under ``where``: the overwrites'
    files, the appends' files, and the upsert to resolve at publish (which refuses it,
    retryable, if a key changed since the merge). Raises UpsertError."""
    from lamina.io.writer import split_by_chunk, write_parts  # loads pyarrow

    ctx, rec, spec = table.ctx, table.record, require(table)
    wh = ctx.warehouse
    same_schema(table)  # else the merged records would lose the columns added since
    records = pa.concat_tables([h.records for h in held])
    read = UpsertBatch(
        spec, resolve_batch(records, spec), key_hashes(records, spec.primary_key), ()
    )
    gone = live_files(table, chunks, remove)
    current, expect = ctx.db.read(lambda conn: ctx.keys.read_current(conn, rec, wh, read, gone))
    merged = resolve_against(current, read.resolved, spec).records
    over = np.concatenate(
        [np.full(h.records.num_rows, h.overwrite) for h in held] or [np.zeros(0, bool)]
    )
    files: list[list[NewSegment]] = []
    file_rows: list[np.ndarray] = []
    for kind, rows in (("overwrite", np.flatnonzero(over)), ("append", np.flatnonzero(~over))):
        parts = split_by_chunk(
            merged.take(pa.array(rows)), rec.time_column, rec.granularity,
            table.target_rows_per_segment,
        )  # fmt: skip
        files.append(write_parts(wh, f"{where}/{kind}", parts))
        file_rows += [rows[np.arange(p.rows.start, p.rows.stop) if isinstance(p.rows, slice)
                           else p.rows] for p in parts]  # fmt: skip
    batch = UpsertBatch(spec, resolve_batch(merged, spec), read.keys, tuple(file_rows), expect)
    return files[0], files[1], batch
