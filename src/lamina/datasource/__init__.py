"""lamina as a Spark data source: ``format("lamina")`` for batch and streaming reads and
writes, Spark SQL (``CREATE TABLE … USING lamina``) and Spark Connect (docs/spark.md).

Spark finds it by itself once lamina is installed (the top-level module
``pyspark_lamina`` holds its ``DefaultSource``); ``spark.dataSource.register(
LaminaDataSource)`` registers it by hand. Who does what:

- the driver (Spark's planning Python workers, or the Spark Connect server's) opens the
  catalog: it plans reads (files of a snapshot, deletion vectors, time pruning) and
  publishes writes, each in one commit;
- tasks read and write Parquet files with pyarrow, straight in the warehouse (a local
  path or an ``s3://`` URI); they never open the catalog.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

from lamina.datasource import options as opts
from lamina.datasource.read import (
    LaminaReader,
    PrunedReader,
    planner_pushes_filters,
    read_schema,
)
from lamina.datasource.stream import ChangeFeedReader, StreamWriter
from lamina.datasource.write import BatchWriter, open_table, write_spec
from lamina.errors import InvalidArgumentError

__all__ = ["LaminaDataSource"]


class LaminaDataSource(DataSource):
    """The ``lamina`` data source. Options: ``table`` (required), ``catalog`` (a
    database URL) and ``warehouse`` (a path or URI), defaulting to ``LAMINA_CATALOG`` /
    ``LAMINA_WAREHOUSE`` as ``lamina.connect`` does; per use, see docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "lamina"

    def schema(self) -> Any:
        """The table's columns as Spark types them (those of ``columns`` if given; a
        change feed adds ``_change``, ``_commit_id`` and ``_commit_seq``). Raises
        TableNotFoundError, SchemaError, InvalidArgumentError."""
        return read_schema(dict(self.options))

    def reader(self, schema: Any) -> DataSourceReader:
        """A batch read of one snapshot. Raises InvalidArgumentError, TableNotFoundError,
        SnapshotNotFoundError."""
        spec = LaminaReader.plan_spec(dict(self.options), schema)
        if planner_pushes_filters():
            return PrunedReader(spec)
        return LaminaReader(spec)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        """A batch write: one commit, or none. Raises InvalidArgumentError,
        TableNotFoundError, SchemaError."""
        o = opts.parse(dict(self.options), "write")
        cat, h = open_table(o)
        try:
            spec = write_spec(h, schema)
        finally:
            cat.close()
        return BatchWriter(o, spec, overwrite)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        """A streaming write: one commit per micro-batch, exactly once. Raises
        InvalidArgumentError (complete output mode), TableNotFoundError, SchemaError."""
        o = opts.parse(dict(self.options), "stream_write")
        if overwrite:
            raise InvalidArgumentError(
                f"a stream into lamina table {o.table!r} appends (or upserts, on an upsert "
                "table): use outputMode('append') or 'update', not 'complete'"
            )
        cat, h = open_table(o)
        try:
            spec = write_spec(h, schema)
        finally:
            cat.close()
        return StreamWriter(o, spec)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802
        """The table's change feed as a stream. Raises InvalidArgumentError,
        TableNotFoundError."""
        return ChangeFeedReader(dict(self.options), schema)
