"""The read side of a table: its definition as loaded, its snapshots, scans and rows
(Arrow, pandas, Spark; every version of an upsert table), its change feed and history.
:class:`lamina.table.Table` adds the writes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lamina.context import CatalogContext
from lamina.core.interval import Granularity, Interval
from lamina.core.model import AsOf, Commit, Snapshot, TableRecord
from lamina.core.segment import Segment
from lamina.core.timeline import Timeline
from lamina.core.versions import version_of
from lamina.errors import SchemaError, UnsupportedTypeError
from lamina.operations.handle import TableHandle, latest_again

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from lamina.core.scan import ScanPlan


class TableReads:
    """Reads of one table (the base of :class:`lamina.table.Table`)."""

    #: the table's context and record, shared with the transactions and pushes it opens
    _handle: TableHandle

    def __init__(self, ctx: CatalogContext, record: TableRecord) -> None:
        self._handle = TableHandle(ctx, record)

    @property
    def name(self) -> str:
        return self._handle.name

    @property
    def schema(self) -> pa.Schema:
        return self._handle.schema

    @property
    def time_column(self) -> str | None:
        return self._handle.time_column

    @property
    def granularity(self) -> Granularity:
        return self._handle.granularity

    @property
    def properties(self) -> dict[str, str]:
        return self._handle.properties

    # -- reading ------------------------------------------------------------------

    def snapshot(
        self,
        as_of: AsOf = None,
        all_published: bool = False,
        interval: Interval | None = None,
    ) -> Snapshot:
        """The segments of one snapshot (only those overlapping ``interval`` if given).
        Raises SnapshotNotFoundError, InvalidIntervalError."""
        return self._handle.snapshot(as_of, all_published, interval)

    def scan(self, as_of: AsOf = None, interval: Any = None) -> ScanPlan:
        """Plan a read: the files of one snapshot, pruned to ``interval``."""
        return self._handle.scan(as_of, interval)

    def to_arrow(
        self,
        as_of: AsOf = None,
        columns: list[str] | None = None,
        interval: Any = None,
        *,
        all_versions: bool = False,
    ) -> pa.Table:
        """Rows of the latest (or ``as_of``) snapshot, optionally only some columns/times.

        ``as_of`` (every read takes it): a table version (``Commit.version``), the
        Commit a write returned, or a time — a datetime (naive: UTC), a date or an
        ISO-8601 string — naming the latest version completed at or before it. Raises
        InvalidArgumentError (``as_of`` of another type), SnapshotNotFoundError (no such
        version), SnapshotTooOldError (a time before the first commit, a version
        retention purged: the message names the earliest available).

        A latest read whose files a concurrent push or retention removed is planned
        again on the newer snapshot (never a mix: each attempt reads one snapshot).
        ``all_versions``: every stored row (an upsert table's superseded records, a
        plain table's rows a row-level change hid) with the versions ``$valid_from``
        and ``$valid_until`` (:func:`lamina.operations.upsert.read.all_versions`).
        """
        if all_versions:
            from lamina.operations.upsert.read import all_versions as every  # numpy, pyarrow

            h = self._handle
            return latest_again(as_of, lambda: every(h, as_of, columns, interval))
        return self._handle.rows(as_of, columns, interval)

    def to_pandas(
        self, as_of: AsOf = None, columns: list[str] | None = None, interval: Any = None
    ) -> pd.DataFrame:
        """:meth:`to_arrow` as a pandas DataFrame. Raises SchemaError for values
        pandas cannot hold (a time with nanoseconds, a list of fixed-size binaries)."""
        import pyarrow as pa  # loads numpy, pyarrow

        data = self.to_arrow(as_of, columns, interval)
        try:
            return data.to_pandas()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaError(
                f"the rows cannot be converted to pandas ({exc}); read them with to_arrow() "
                "or pick other columns"
            ) from None

    def to_spark(
        self,
        spark: Any,
        as_of: AsOf = None,
        interval: Any = None,
        *,
        all_versions: bool = False,
    ) -> Any:
        """A Spark DataFrame over exactly the snapshot's visible rows; ``all_versions``:
        every stored row with its validity versions, as :meth:`to_arrow`.

        Spark's own Parquet reader reads a local warehouse's plain tables; an upsert
        table (its deletion vectors applied in the tasks), a warehouse on an object
        store (which Spark's filesystems do not reach without S3A) and a Spark Connect
        session read through lamina's data source (``format("lamina")``). Both give the
        same rows. Raises SnapshotNotFoundError, UnsupportedTypeError (a column Spark cannot read),
        UnsupportedInputError (``all_versions`` with a Spark Connect session)."""
        from lamina.engines.spark_read import read_source, read_spark  # pyspark
        from lamina.io.arrow import is_spark_connect as is_connect  # pyarrow

        self._spark_readable()
        if all_versions and is_connect(spark):
            from lamina.table.connect import refuse_connect  # loads pyarrow

            raise refuse_connect("t.to_spark(spark, all_versions=True)")
        if all_versions:
            from lamina.operations.upsert.read import all_versions_spark  # numpy, pyarrow

            return all_versions_spark(self._handle, spark, as_of, interval)
        h = self._handle
        wh = h.ctx.warehouse
        if h.is_upsert or not wh.local or is_connect(spark):
            iv = None if interval is None else Interval.coerce(interval)
            snap = h.snapshot(as_of)
            version = snap.seq if snap.commit_id is not None else None
            url = h.ctx.db.engine.url.render_as_string(hide_password=False)
            return read_source(spark, url, wh.location, h.name, version, iv)
        return read_spark(spark, self.scan(as_of, interval), wh)

    def _spark_readable(self) -> None:
        """Raises UnsupportedTypeError for a column Spark cannot read (it would fail
        only once the DataFrame is evaluated, with a Java error)."""
        from lamina.engines.spark_schema import spark_problem  # pyarrow

        why = spark_problem(self.schema)
        if why is not None:
            raise UnsupportedTypeError(
                f"Spark cannot read table {self.name!r}: {why}; read it with t.to_arrow(), "
                "t.scan() or cat.sql()"
            )

    def segments(self, all: bool = False, as_of: AsOf = None) -> list[Segment]:
        """Visible data segments of the snapshot; ``all=True``: every published one."""
        snap = self.snapshot(as_of, all_published=all)
        if all:
            return sorted(snap.segments, key=lambda s: (s.interval, s.version, s.partition_id))
        return [s for s in Timeline.build(snap.segments).visible() if s.location is not None]

    def timeline(self, as_of: AsOf = None, all_published: bool = True) -> Timeline:
        return Timeline.build(self.snapshot(as_of, all_published=all_published).segments)

    def read_changes(
        self,
        after_seq: int | Commit,
        until_seq: int | Commit | None = None,
        columns: list[str] | None = None,
    ) -> pa.Table:
        """The rows each commit of versions ``(after_seq, until_seq]`` (default: up to
        the latest) made visible (``_change`` 'insert') or invisible ('delete'), with
        ``_commit_id`` and ``_commit_seq`` (the version), in completion order — an
        incremental pull. Both bounds are table versions (``Commit.version`` of
        :meth:`history`, or the Commit itself; 0: the empty table).
        Raises InvalidArgumentError (a bound that is not a version), SnapshotNotFoundError
        (versions out of range, or retention deleted what the start snapshot used),
        SchemaError (unknown columns)."""
        after_seq = version_of(after_seq, "after_seq")
        until_seq = None if until_seq is None else version_of(until_seq, "until_seq")
        from lamina.operations.kinds import kind_of  # numpy, pyarrow

        h = self._handle
        return kind_of(h).read_changes(h, after_seq, until_seq, columns)

    def read_changes_spark(
        self,
        spark: Any,
        after_seq: int | Commit,
        until_seq: int | Commit | None = None,
        columns: list[str] | None = None,
    ) -> Any:
        """:meth:`read_changes` as a Spark DataFrame (read by Spark's Parquet reader;
        rows in no guaranteed order — sort by ``_commit_seq`` for a feed). Raises what
        :meth:`read_changes` and :meth:`to_spark` raise; UnsupportedInputError for a
        Spark Connect session (stream the feed: ``spark.readStream.format("lamina")``
        with ``readChangeFeed``)."""
        from lamina.table.connect import is_spark_connect, refuse_connect  # loads pyarrow

        if is_spark_connect(spark):
            raise refuse_connect("t.read_changes_spark")
        self._spark_readable()
        after_seq = version_of(after_seq, "after_seq")
        until_seq = None if until_seq is None else version_of(until_seq, "until_seq")
        from lamina.operations.kinds import kind_of  # numpy, pyarrow

        h = self._handle
        return kind_of(h).read_changes_spark(spark, h, after_seq, until_seq, columns)

    def history(self) -> list[Commit]:
        """Every commit of the table, oldest first; a completed one's ``version`` is
        what ``as_of``, :meth:`read_changes` and :meth:`restore` take."""
        return self._handle.history()

    def count(self, as_of: AsOf = None) -> int:
        """Rows a reader of the snapshot sees: the catalog's row counts, less the rows
        deletion vectors hide; only the files shown in part (a coarser segment under a
        newer finer one) are read, their time column. Raises as :meth:`to_arrow`."""
        from lamina.operations.reads import count  # pyarrow, for files shown in part

        h = self._handle
        return latest_again(as_of, lambda: count(h, h.scan(as_of)))
