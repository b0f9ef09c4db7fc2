"""Batch writes through ``df.write.format("lamina")``: tasks write staged segment files,
the driver publishes them in one commit (:mod:`lamina.operations.staged`)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from lamina.catalog import Catalog, connect
from lamina.core.columns import EPOCH_UNIT, match_columns, required_columns
from lamina.core.model import Commit
from lamina.datasource.options import SourceOptions
from lamina.datasource.tasks import StagedFiles, WriteSpec, write_partition
from lamina.errors import InvalidArgumentError, LaminaError, SchemaError
from lamina.io.arrow import castable
from lamina.meta import tables as table_rows
from lamina.operations import staged
from lamina.operations.handle import TableHandle

log = logging.getLogger("lamina")


class StagedMessage(StagedFiles, WriterCommitMessage):
    """A task's :class:`StagedFiles` as Spark's commit message."""


def open_table(o: SourceOptions) -> tuple[Catalog, TableHandle]:
    """The catalog of the options, and a handle on their table (the caller closes the
    catalog). Raises TableNotFoundError, WarehouseError, CatalogUnavailableError."""
    cat = connect(o.catalog, o.warehouse)
    try:
        return cat, TableHandle(cat.context, table_rows.get_table(cat.context.db, o.table))
    except BaseException:
        cat.close()
        raise


def write_spec(h: TableHandle, spark_schema: Any) -> WriteSpec:
    """What the tasks of a write into ``h`` share, once the DataFrame's columns are
    found to match the table's by name (types castable). Raises SchemaError."""
    from lamina.engines.spark_schema import spark_to_arrow_schema  # loads pyspark

    check_columns(h, spark_to_arrow_schema(spark_schema))
    rec = h.record
    return WriteSpec(
        location=h.ctx.warehouse.location,
        table=h.name,
        schema=rec.schema,
        time_column=rec.time_column,
        granularity=rec.granularity,
        target_rows=h.target_rows_per_segment,
        staging=f"{h.name}/data/w{uuid.uuid4().hex}",
    )


def check_columns(h: TableHandle, given: Any) -> None:
    """Raises SchemaError unless ``given`` (an Arrow schema) has the table's required
    columns, by name ignoring case, of types that may go into them (values are checked
    as tasks write them). A nullable column it lacks is written as nulls (on a
    partial-upsert table: merged as a field the record leaves out), except the time,
    key and comparison columns."""
    schema = h.schema
    matched = match_columns(given.names, schema.names)
    need = {n.lower() for n in required_columns(h.record)}
    missing = [n for n in matched.missing if not schema.field(n).nullable or n.lower() in need]
    if missing or matched.extra:
        raise SchemaError(
            f"the DataFrame does not match table {h.name!r}: missing columns {missing}, "
            f"unknown columns {matched.extra}; the table has columns {schema.names}"
        )
    bad = []
    for f in given:
        into = schema.field(matched.renames.get(f.name, f.name))
        epoch = pa.types.is_integer(f.type) and EPOCH_UNIT in (into.metadata or {})
        if not (castable(f.type, into.type) or epoch):
            bad.append(f"{f.name}: {f.type} -> {into.type}")
    if bad:
        raise SchemaError(
            f"column types do not match table {h.name!r}: {', '.join(bad)}; cast those "
            "columns first"
        )


class BatchWriter(DataSourceArrowWriter):
    """One batch write: tasks stage files, :meth:`commit` publishes them all."""

    def __init__(self, o: SourceOptions, spec: WriteSpec, overwrite: bool) -> None:
        self.options = o
        self.spec = spec
        self.overwrite = overwrite
        self.interval = o.interval()
        self.txn = o.txn()
        if self.interval is not None and not overwrite:
            raise InvalidArgumentError(
                "option interval is for mode('overwrite') (the interval it replaces); an "
                "append takes none"
            )

    def write(self, iterator: Any) -> StagedMessage:
        got = write_partition(self.spec, iterator)
        return StagedMessage(got.partition, got.attempt, got.files, got.rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        publish(self.options, self.spec, messages, self.overwrite, self.interval, self.txn)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        discard(self.options, self.spec)


def publish(
    o: SourceOptions,
    spec: WriteSpec,
    messages: list[Any],
    overwrite: bool,
    interval: Any,
    txn: tuple[str, int] | None,
    metadata: dict[str, Any] | None = None,
) -> Commit | None:
    """Publish the files the tasks' ``messages`` name, in one commit (None: ``txn``
    was applied already). Raises what the table's writes raise."""
    files = [
        f
        for m in sorted((m for m in messages if m is not None), key=lambda m: m.partition)
        for f in m.files
    ]
    cat, h = open_table(o)
    try:
        write = staged.StagedWrite(files, spec.staging, overwrite, interval, txn, metadata)
        return staged.publish(h, write)
    finally:
        cat.close()


def discard(o: SourceOptions, spec: WriteSpec) -> None:
    """Delete what an aborted write's tasks wrote (best effort: with the catalog or
    the warehouse out of reach, the files are orphans, which retention deletes)."""
    try:
        cat, h = open_table(o)
    except LaminaError as exc:
        log.warning(
            "could not delete the staged files under %s (%s): retention will", spec.staging, exc
        )
        return
    try:
        staged.discard(h, spec.staging)
    finally:
        cat.close()
