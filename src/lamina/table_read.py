"""The read side of a table: its definition as loaded, its snapshots, scans and rows
(Arrow, pandas, Spark; every version of an upsert table), its change feed and history.
:class:`lamina.table.Table` adds the writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from lamina.context import CatalogContext
from lamina.core.interval import Granularity, Interval
from lamina.core.model import AsOf, Commit, Snapshot, TableRecord, seq_of
from lamina.core.scan import ScanPlan
from lamina.core.segment import Segment
from lamina.core.timeline import Timeline
from lamina.errors import SchemaError, SnapshotNotFoundError
from lamina.meta import snapshots

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

T = TypeVar("T")
READ_ATTEMPTS = 5  # a latest read re-plans when files vanished under it


class TableReads:
    """Reads of one table (the base of :class:`lamina.table.Table`)."""

    def __init__(self, ctx: CatalogContext, record: TableRecord) -> None:
        self._ctx = ctx
        self._record = record

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def schema(self) -> pa.Schema:
        return self._record.schema

    @property
    def time_column(self) -> str | None:
        return self._record.time_column

    @property
    def granularity(self) -> Granularity:
        return self._record.granularity

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._record.properties)

    # -- reading ------------------------------------------------------------------

    def snapshot(
        self,
        as_of: AsOf = None,
        all_published: bool = False,
        interval: Interval | None = None,
    ) -> Snapshot:
        """The segments of one snapshot (only those overlapping ``interval`` if given).
        Raises SnapshotNotFoundError, InvalidIntervalError."""
        iv = None if interval is None else Interval.coerce(interval)
        return snapshots.snapshot(
            self._ctx.db, self.name, as_of, all_published=all_published, interval=iv
        )

    def scan(self, as_of: AsOf = None, interval: Any = None) -> ScanPlan:
        """Plan a read: the files of one snapshot, pruned to ``interval``."""
        iv = None if interval is None else Interval.coerce(interval)
        from lamina import read  # columnar planning: pyarrow, numpy

        return read.plan(self._ctx, self.name, as_of, iv)

    def to_arrow(
        self,
        as_of: AsOf = None,
        columns: list[str] | None = None,
        interval: Any = None,
        *,
        all_versions: bool = False,
    ) -> pa.Table:
        """Rows of the latest (or ``as_of``) snapshot, optionally only some columns/times.

        A latest read whose files a concurrent push or retention removed is planned
        again on the newer snapshot (never a mix: each attempt reads one snapshot).
        ``all_versions`` (upsert tables): every stored record with ``$valid_from`` and
        ``$valid_until`` seqs (:func:`lamina.upsert_read.all_versions`).
        """
        from lamina.io.reader import read_arrow

        if all_versions:
            from lamina.upsert_read import all_versions as every

            return _latest_again(as_of, lambda: every(self, as_of, columns, interval))
        wh = self._ctx.warehouse
        return _latest_again(as_of, lambda: read_arrow(self.scan(as_of, interval), wh, columns))

    def to_pandas(
        self, as_of: AsOf = None, columns: list[str] | None = None, interval: Any = None
    ) -> pd.DataFrame:
        """:meth:`to_arrow` as a pandas DataFrame. Raises SchemaError for values
        pandas cannot hold (a time with nanoseconds, a list of fixed-size binaries)."""
        import pyarrow as pa

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
        """A Spark DataFrame over exactly the snapshot's visible rows; ``all_versions``
        (upsert tables): every stored record with its validity seqs, as :meth:`to_arrow`.
        Raises SnapshotNotFoundError, UpsertError (``all_versions`` of another table),
        UnsupportedTypeError (a column Spark cannot read)."""
        self._spark_readable()
        if all_versions:
            from lamina.upsert_read import all_versions_spark

            return all_versions_spark(self, spark, as_of, interval)
        from lamina.engines.spark_read import read_spark

        return read_spark(spark, self.scan(as_of, interval), self._ctx.warehouse)

    def _spark_readable(self) -> None:
        """Raises UnsupportedTypeError for a column Spark cannot read (it would fail
        only once the DataFrame is evaluated, with a Java error)."""
        from lamina.engines.spark import spark_problem
        from lamina.errors import UnsupportedTypeError

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
        self, after_seq: int, until_seq: int | None = None, columns: list[str] | None = None
    ) -> pa.Table:
        """The rows each commit completed in ``(after_seq, until_seq]`` (default: up to
        the latest) made visible (``_change`` 'insert') or invisible ('delete'), with
        ``_commit_id`` and ``_commit_seq``, in completion order — an incremental pull.
        Seqs are ``Commit.seq`` of :meth:`history` (0: the empty table).
        Raises SnapshotNotFoundError (seqs out of range, or retention deleted what the
        start snapshot used, or seqs that are not ints), SchemaError (unknown columns)."""
        after_seq = seq_of(after_seq, "after_seq")
        until_seq = None if until_seq is None else seq_of(until_seq, "until_seq")
        if "upsert.primary_key" in self._record.properties:  # by records, not segments
            from lamina.upsert_read import read_changes

            return read_changes(self, after_seq, until_seq, columns)
        from lamina import changes

        return changes.read_changes(self._ctx, self.name, after_seq, until_seq, columns)

    def read_changes_spark(
        self,
        spark: Any,
        after_seq: int,
        until_seq: int | None = None,
        columns: list[str] | None = None,
    ) -> Any:
        """:meth:`read_changes` as a Spark DataFrame (read by Spark's Parquet reader;
        rows in no guaranteed order — sort by ``_commit_seq`` for a feed). Raises what
        :meth:`read_changes` and :meth:`to_spark` raise."""
        self._spark_readable()
        after_seq = seq_of(after_seq, "after_seq")
        until_seq = None if until_seq is None else seq_of(until_seq, "until_seq")
        if "upsert.primary_key" in self._record.properties:  # by records, not segments
            from lamina.upsert_read import read_changes_spark

            return read_changes_spark(spark, self, after_seq, until_seq, columns)
        from lamina import changes

        return changes.read_changes_spark(
            spark, self._ctx, self.name, after_seq, until_seq, columns
        )

    def history(self) -> list[Commit]:
        from lamina.meta import commits

        return commits.history(self._ctx.db, self.name)

    def count(self, as_of: AsOf = None) -> int:
        """Rows a reader of the snapshot sees: the catalog's row counts, less the rows
        deletion vectors hide; only the files shown in part (a coarser segment under a
        newer finer one) are read, their time column. Raises as :meth:`to_arrow`."""
        return _latest_again(as_of, lambda: self._count(self.scan(as_of)))

    def _count(self, plan: ScanPlan) -> int:
        hidden = sum(len(rows) for rows in plan.deletes.values())
        if plan.all_whole:
            return plan.row_count - hidden
        from lamina.io.reader import read_arrow

        part = [t for t in plan.tasks if t.keep is not None]
        paths = {t.segment.location for t in part}
        some = ScanPlan(plan.table, plan.seq, plan.commit_id, part)
        some.deletes = {p: rows for p, rows in plan.deletes.items() if p in paths}
        whole = plan.row_count - sum(t.segment.row_count for t in part)
        hidden -= sum(len(rows) for rows in some.deletes.values())
        tc = plan.table.time_column  # one column: concat_tables drops zero-column rows
        return whole - hidden + read_arrow(some, self._ctx.warehouse, [tc] if tc else []).num_rows


def _latest_again(as_of: AsOf, read: Callable[[], T]) -> T:
    """``read()``; a latest read whose files (or vectors) a concurrent push or
    retention removed is planned again on the newer snapshot, up to READ_ATTEMPTS
    times (never a mix: each attempt reads one snapshot)."""
    for attempt in range(READ_ATTEMPTS):
        try:
            return read()
        except SnapshotNotFoundError:
            if as_of is not None or attempt == READ_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
