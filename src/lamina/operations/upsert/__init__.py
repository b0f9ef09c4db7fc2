"""Upserts: writing records of an upsert table, of which per primary key only the
latest is visible (Pinot's upsert; see docs/upserts.md).

An upsert is an append that its commit resolves by key: the records are written as
new segments, resolved among themselves here (:func:`lamina.core.upsert.resolve_batch`),
and against every earlier commit at publish, under the table lock
(:mod:`lamina.meta.keyindex`), which records deletion vectors for the records that stop
being their key's latest. Two writers upserting the same keys both succeed: the one
publishing second counts as the later.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lamina.core.columns import match_columns, required_columns
from lamina.core.keyhash import key_hashes
from lamina.core.model import Commit, CommitAction
from lamina.core.upsert import UpsertBatch, UpsertSpec, resolve_against, resolve_batch
from lamina.core.upsert_spec import no_delete
from lamina.errors import ChunkLayoutError, SchemaError, UpsertError
from lamina.io.arrow import conform, is_spark_dataframe, storage_schema, to_arrow_table
from lamina.operations import steps as tw
from lamina.operations.handle import TableHandle
from lamina.operations.retry import MERGE_ATTEMPTS, retrying

if TYPE_CHECKING:
    from lamina.core.interval import Interval
    from lamina.core.model import NewSegment, TableRecord
    from lamina.io.warehouse import Warehouse


def require(table: TableHandle) -> UpsertSpec:
    """The table's upsert definition. Raises UpsertError for a table without one."""
    spec = table.upsert_spec
    if spec is None:
        raise UpsertError(
            f"table {table.name!r} has no primary key: upsert into a table created with "
            "primary_key=[...], or append"
        )
    return spec


def refuse(table: TableHandle, what: str) -> None:
    """Refuse a write upsert tables do not take yet. Raises UpsertError."""
    if table.is_upsert:
        raise UpsertError(
            f"{what} is not supported on upsert table {table.name!r} yet: upsert the "
            "records (a record with the delete column true removes its key)"
        )


def records_of(spec: UpsertSpec, rec: TableRecord, data: Any) -> pa.Table:
    """``data`` (Arrow, pandas, Polars, ...) as the table stores it. A nullable column
    the input leaves out (not a key, the comparison or the time column) comes as
    nulls: a full upsert stores the record with nulls there; on a partial-upsert
    table, as a field missing from a record does in Pinot, the merge then keeps its
    key's value (FORCE_OVERWRITE takes the null), and a delete column left out comes
    as false (not a delete, and kept by SQL's ``WHERE NOT deleted``). Raises
    SchemaError (a required column missing, an unknown one, a type)."""

    # a Spark DataFrame's Arrow stream takes no time zone (pyspark asserts on timestamps)
    batch = to_arrow_table(data.toArrow() if is_spark_dataframe(data) else data)
    if spec.is_partial:
        need = {*spec.primary_key, spec.comparison_column, rec.time_column}
        lacks = match_columns(batch.column_names, rec.schema.names).missing
        for f in storage_schema(rec.schema):
            if f.name in lacks and f.name not in need and f.nullable:
                n = batch.num_rows
                fill = pa.nulls(n, f.type)
                if f.name == spec.delete_column:  # false, 'false' or 0: no delete
                    fill = no_delete(n, f.type)
                batch = batch.append_column(f.name, fill)
    return conform(batch, rec.schema, required_columns(rec))


def upsert(
    table: TableHandle,
    data: Any,
    metadata: dict[str, Any] | None = None,
    txn: tuple[str, int] | None = None,
    finish: tw.Finish | None = None,
) -> Commit:
    """Write ``data``'s records; per key the latest wins (``finish``: a last step before
    it publishes, see :func:`lamina.operations.steps.write`). Raises UpsertError,
    SchemaError, TimeColumnError, CommitConflictError (a partial upsert whose keys kept
    changing under it)."""

    spec = require(table)
    rec = table.record
    wh = table.ctx.warehouse
    if is_spark_dataframe(data) and not spec.is_partial:
        _prefetch_keys(table)  # read while Spark writes (a partial upsert reads it first)
    if is_spark_dataframe(data) and spec.is_partial:
        # merging needs each key's current record beside the new one: the batch comes
        # to the driver (micro-batches; a partial upsert's batch is as big as its keys)
        data = data.toArrow()
    if is_spark_dataframe(data):  # Spark writes; the records are read back, narrow
        from lamina.engines.spark import spark_producer

        target = table.target_rows_per_segment
        done = tw.write(
            table,
            CommitAction.UPSERT,
            tw.Produced(spark_producer(rec, wh, target, data)),
            None,
            metadata,
            txn=txn,
            upsert=lambda files: _written(spec, wh, [f.location for f in files], rec.schema),
            remake=functools.partial(spark_producer, rec, wh, target, data),
            finish=finish,
        )
    else:
        batch = records_of(spec, rec, data)
        read = UpsertBatch(
            spec, resolve_batch(batch, spec), key_hashes(batch, spec.primary_key), ()
        )
        if not spec.is_partial:
            done = _write(table, batch, read, metadata, txn, finish=finish)
        else:
            done = _partial(table, read, metadata, txn, finish=finish)
    _save_keys(table)
    return done


def upsert_files(
    table: TableHandle,
    files: tw.Produced,
    metadata: dict[str, Any] | None = None,
    txn: tuple[str, int] | None = None,
    finish: tw.Finish | None = None,
) -> Commit:
    """An upsert of records written as segment files already (by Spark's tasks), in
    the order of ``files``: their keys are read back and resolved at publish, as for
    any upsert. Not for a partial-upsert table, whose records are merged before they
    are written (upsert them as Arrow). Raises UpsertError, CommitConflictError."""

    spec = require(table)
    if spec.is_partial:
        raise UpsertError(
            f"table {table.name!r} merges partial records before writing them: upsert "
            "them as data (t.upsert), not as files written already"
        )
    rec, wh = table.record, table.ctx.warehouse
    done = tw.write(
        table,
        CommitAction.UPSERT,
        files,
        None,
        metadata,
        txn=txn,
        upsert=lambda got: _written(spec, wh, [f.location for f in got], rec.schema),
        finish=finish,
    )
    _save_keys(table)
    return done


def overwrite(
    table: TableHandle,
    data: Any,
    interval: Interval | None,
    metadata: dict[str, Any] | None = None,
    txn: tuple[str, int] | None = None,
    action: CommitAction = CommitAction.OVERWRITE,
    remove: tuple[str, ...] = (),
) -> Commit:
    """An upsert table's overwrite (or refresh, ``action``, which also removes the live
    segments ``remove``): the records stored in ``interval``'s chunks (default: those
    the data touches) go, as with any overwrite, and ``data``'s records are upserted
    against those that remain elsewhere (on a partial-upsert table: merged with them),
    in one commit. A key whose latest record went has none until a new one comes (its
    older records elsewhere stay superseded, as when Pinot removes a segment). Raises
    UpsertError, SchemaError, DataOutsideIntervalError, CommitConflictError (another
    overwrite of the chunks)."""

    spec = require(table)
    batch = records_of(spec, table.record, data)
    read = UpsertBatch(spec, resolve_batch(batch, spec), key_hashes(batch, spec.primary_key), ())
    if spec.is_partial:
        done = _partial(table, read, metadata, txn, action, interval, remove)
    else:
        done = _write(
            table, batch, read, metadata, txn, action=action, interval=interval, remove=remove
        )
    _save_keys(table)
    return done


def _write(
    table: TableHandle,
    records: pa.Table,
    read: UpsertBatch,
    metadata: dict[str, Any] | None,
    txn: tuple[str, int] | None,
    expect: tuple[tuple[str, int] | None, ...] | None = None,
    action: CommitAction = CommitAction.UPSERT,
    interval: Interval | None = None,
    remove: tuple[str, ...] = (),
    finish: tw.Finish | None = None,
) -> Commit:
    """One commit storing ``records`` (``read``: them resolved on their own): an UPSERT,
    or an OVERWRITE (REFRESH) of ``interval`` (and of the segments ``remove``)."""
    from lamina.io.writer import split_by_chunk, write_parts  # loads pyarrow

    rec, wh = table.record, table.ctx.warehouse
    refine = None
    while True:
        parts = split_by_chunk(
            records, rec.time_column, rec.granularity, table.target_rows_per_segment, refine
        )
        tw.check_inside(action, [p.chunk for p in parts], interval)  # before the commit
        file_rows = tuple(
            np.arange(p.rows.start, p.rows.stop) if isinstance(p.rows, slice) else p.rows
            for p in parts
        )
        written = UpsertBatch(read.spec, read.resolved, read.keys, file_rows, expect)
        try:
            return tw.write(
                table,
                action,
                tw.Produced(functools.partial(write_parts, wh, parts=parts)),
                interval,
                metadata,
                txn=txn,
                upsert=functools.partial(_same, written),
                remove=remove,
                finish=finish,
            )
        except ChunkLayoutError:  # a day a compaction split: split as Druid allocates
            if refine is not None or action != CommitAction.UPSERT:
                raise
            refine = tw.refinement(table, [p.chunk for p in parts])
            if not refine:
                raise


def _same(batch: UpsertBatch, files: list[NewSegment]) -> UpsertBatch:
    """``batch``, whatever files were written (their rows are the parts it was cut by)."""
    return batch


def _prefetch_keys(table: TableHandle) -> None:
    """Start loading the saved key index if this process has none (it is read while
    Spark writes the data files). Not for local batches: with the read in a thread
    beside the batch's hashing, resolving and writing, a fresh process's upsert of 100k
    records into a 1M-key table took 134-182 ms (medians of three runs of 10) against
    132-151 ms one after the other, with twice the spread: the numpy steps of both
    threads wait on each other for the GIL."""
    keys = table.ctx.keys
    if keys.held(table.record.id) is None:
        table.ctx.db.read(lambda conn: keys.prefetch(conn, table.record, table.ctx.warehouse))


def _save_keys(table: TableHandle) -> None:
    """Snapshot the key index when due (a new process then starts from it)."""
    table.ctx.keys.save_if_due(table.ctx.db, table.record, table.ctx.warehouse)


def _partial(
    table: TableHandle,
    read: UpsertBatch,
    metadata: dict[str, Any] | None,
    txn: tuple[str, int] | None,
    action: CommitAction = CommitAction.UPSERT,
    interval: Interval | None = None,
    remove: tuple[str, ...] = (),
    finish: tw.Finish | None = None,
) -> Commit:
    """A partial upsert (or overwrite, refresh: ``action``): merge with the keys'
    current records (those the write leaves), write the merged records, publish unless
    one of its keys changed meanwhile — then merge and write again, up to
    :data:`lamina.operations.retry.MERGE_ATTEMPTS` times (after a short random pause,
    longer each time). Raises CommitConflictError."""
    return retrying(
        lambda _: _merge_and_write(table, read, metadata, txn, action, interval, remove, finish),
        MERGE_ATTEMPTS,
        pause=True,
    )


def _merge_and_write(
    table: TableHandle,
    read: UpsertBatch,
    metadata: dict[str, Any] | None,
    txn: tuple[str, int] | None,
    action: CommitAction,
    interval: Interval | None,
    remove: tuple[str, ...],
    finish: tw.Finish | None = None,
) -> Commit:
    """One attempt of :func:`_partial` (CommitConflictError, retryable: a key changed
    before it published)."""

    ctx, rec, spec = table.ctx, table.record, read.spec
    wh = ctx.warehouse
    same_schema(table)
    gone = _replaced_files(table, read, action, interval, remove)
    current, expect = ctx.db.read(lambda conn: ctx.keys.read_current(conn, rec, wh, read, gone))
    merged = resolve_against(current, read.resolved, spec).records
    merged_read = UpsertBatch(spec, resolve_batch(merged, spec), read.keys, ())
    return _write(
        table,
        merged,
        merged_read,
        metadata,
        txn,
        expect,
        action,
        interval=interval,
        remove=remove,
        finish=finish,
    )


def replace_records(
    table: TableHandle,
    records: pa.Table,
    read_at: int,
    metadata: dict[str, Any] | None = None,
    finish: tw.Finish | None = None,
) -> Commit:
    """Store ``records`` (one per key, of the table's schema) whole: each replaces its
    key's current record without a partial merge, as a row-level update or merge of
    a partial-upsert table computes whole records from those it read at seq
    ``read_at``. Raises CommitConflictError (retryable: the table moved past
    ``read_at``, or a key changed before publish; read the records again)."""
    ctx, rec = table.ctx, table.record
    spec = require(table)
    wh = ctx.warehouse
    same_schema(table)
    read = UpsertBatch(
        spec, resolve_batch(records, spec), key_hashes(records, spec.primary_key), ()
    )
    _, expect = ctx.db.read(
        lambda conn: ctx.keys.read_current(conn, rec, wh, read, read_at=read_at)
    )
    done = _write(table, records, read, metadata, None, expect, finish=finish)
    _save_keys(table)
    return done


def same_schema(table: TableHandle) -> None:
    """Raise SchemaError if columns were added to or widened in the table since its
    handle was loaded: a partial upsert merging with that handle's schema would write
    the merged records without them, and so lose the values the records had there."""
    _, changed = table.reloaded()
    if changed:
        raise SchemaError(
            f"columns {changed} were added to or widened in {table.name!r} since this handle "
            "was loaded; a partial upsert merges whole records: cat.load_table it again "
            "and pass the new columns (null where a record has no value); nothing was "
            "written"
        )


def _replaced_files(
    table: TableHandle,
    read: UpsertBatch,
    action: CommitAction,
    interval: Interval | None,
    remove: tuple[str, ...],
) -> set[str]:
    """The files (catalog locations) of the live segments an overwrite or refresh
    removes, as of now: those inside its chunks, and ``remove``. Empty for an upsert."""
    from lamina.io.writer import split_by_chunk  # loads pyarrow

    if action == CommitAction.UPSERT:
        return set()
    rec = table.record
    parts = split_by_chunk(read.resolved.batch, rec.time_column, rec.granularity, 2**62)
    chunks = tw.overwrite_chunks(table, action, [p.chunk for p in parts], interval) or ()
    return live_files(table, chunks, remove)


def live_files(table: TableHandle, chunks: Iterable[Interval], remove: Iterable[str]) -> set[str]:
    """The files (catalog locations) of the live segments inside ``chunks`` or with
    an id in ``remove``."""
    chunks, remove = tuple(chunks), set(remove)
    root = table.ctx.db.root + "/"
    return {
        str(s.location).removeprefix(root)
        for s in table.snapshot().segments
        if s.id in remove or any(c.contains(s.interval) for c in chunks)
    }


def rewritten(
    spec: UpsertSpec, wh: Warehouse, locations: list[str], schema: pa.Schema
) -> UpsertBatch:
    """A major compaction's records, read back from the files it wrote: stored as they
    are (no partial merge), each showing at publish exactly when the record it copies
    still would (:func:`lamina.core.upsert.resolve_rewrite`). Raises UpsertError."""

    written = _written(replace(spec, partial=None), wh, locations, schema)
    return replace(written, rewrite=True)


def resolving_columns(spec: UpsertSpec) -> list[str]:
    """The columns an upsert is resolved by: key, comparison and delete columns."""
    delete = [spec.delete_column] if spec.delete_column else []
    return list(dict.fromkeys([*spec.primary_key, spec.comparison_column, *delete]))


def read_back(
    spec: UpsertSpec, wh: Warehouse, locations: list[str], schema: pa.Schema
) -> tuple[pa.Table, tuple[np.ndarray, ...]]:
    """The resolving columns of files written (by Spark, a compaction), in file order,
    typed by the table's ``schema`` as records were when they were upserted, and per
    file its rows there."""
    import pyarrow.parquet as pq  # loads pyarrow

    cols = resolving_columns(spec)
    # as the table types them (Spark writes microseconds into a millisecond column)
    parts = [
        pq.read_table(wh.path(loc), columns=cols, filesystem=wh.fs, schema=schema)
        for loc in locations
    ]
    if not parts:  # an empty input (a micro-batch a filter emptied)
        from lamina.io.arrow import storage_schema

        return storage_schema(schema).empty_table().select(cols), ()
    sizes = np.cumsum([0, *(p.num_rows for p in parts)])
    file_rows = tuple(np.arange(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    return pa.concat_tables(parts), file_rows


def _written(
    spec: UpsertSpec, wh: Warehouse, locations: list[str], schema: pa.Schema
) -> UpsertBatch:
    """The records of files an engine wrote (Spark), read back (key, comparison and
    delete columns only) in file order. Raises UpsertError (null keys...)."""

    batch, file_rows = read_back(spec, wh, locations, schema)
    return UpsertBatch(
        spec, resolve_batch(batch, spec), key_hashes(batch, spec.primary_key), file_rows
    )
