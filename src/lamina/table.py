"""A table: write (append, overwrite) and read (Arrow, pandas, Spark) its snapshots."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lamina.commit import Commit
from lamina.errors import DataOutsideIntervalError
from lamina.interval import ETERNITY, Granularity, Interval
from lamina.io.arrow import conform, is_spark_dataframe, to_arrow_table
from lamina.io.reader import read_arrow
from lamina.io.writer import split_by_chunk, write_parts
from lamina.meta.store import NewSegment, PublishPlan, Snapshot, TableRecord
from lamina.scan import ScanPlan, plan_scan
from lamina.segment import Segment
from lamina.timeline import Timeline
from lamina.transaction import WriteTransaction

if TYPE_CHECKING:
    import pandas as pd

    from lamina.catalog import Catalog

DEFAULT_TARGET_ROWS = 1_000_000


class Table:
    """Handle on one table. Cheap to create; every call reads the catalog afresh."""

    def __init__(self, catalog: Catalog, record: TableRecord) -> None:
        self.catalog = catalog
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

    @property
    def target_rows_per_segment(self) -> int:
        return int(self._record.properties.get("target_rows_per_segment", DEFAULT_TARGET_ROWS))

    def set_properties(self, **props: Any) -> None:
        self._record = self.catalog.store.set_properties(
            self.name, {k: str(v) for k, v in props.items()}
        )

    # -- writing ------------------------------------------------------------------

    def append(self, data: Any, metadata: dict[str, Any] | None = None) -> Commit:
        """Add rows. New segments join existing chunks at their current version."""
        return self._write("APPEND", data, None, metadata)

    def overwrite(
        self,
        data: Any,
        interval: Interval | str | tuple[Any, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Commit:
        """Replace every row in ``interval`` (default: the chunks the data touches)
        with ``data``, under a new, higher version, in one commit."""
        if interval is not None:
            iv = Interval.coerce(interval)
        elif self.time_column is None:
            iv = ETERNITY
        else:
            iv = None
        if iv is not None:
            self.granularity.check_aligned(iv)
        return self._write("OVERWRITE", data, iv, metadata)

    def _write(
        self, action: str, data: Any, interval: Interval | None, metadata: dict[str, Any] | None
    ) -> Commit:
        meta = dict(metadata or {})
        if is_spark_dataframe(data):
            from lamina.engines.spark import write_spark

            return write_spark(self, action, data, interval, meta)
        rec = self._record
        arrow = conform(to_arrow_table(data), rec.schema)
        parts = split_by_chunk(
            arrow, rec.time_column, rec.granularity, self.target_rows_per_segment
        )
        overwrite = self._overwrite_chunks(action, [p.chunk for p in parts], interval)
        with WriteTransaction(self.catalog, rec, action, meta) as txn:
            txn.inflight()
            files = write_parts(self.catalog.warehouse, txn.dir, parts)
            return txn.publish(PublishPlan(files, overwrite))

    def _overwrite_chunks(
        self, action: str, chunks: list[Interval], interval: Interval | None
    ) -> list[Interval] | None:
        """The chunks an overwrite replaces; checks rows stay inside ``interval``."""
        if action != "OVERWRITE":
            return None
        if interval is None:
            return sorted(set(chunks))
        outside = [c for c in set(chunks) if not interval.contains(c)]
        if outside:
            raise DataOutsideIntervalError(
                f"rows in {min(outside)} fall outside the overwrite interval {interval}; "
                "widen the interval or filter the data"
            )
        return self.granularity.chunks(interval) if interval != ETERNITY else [ETERNITY]

    def publish_files(
        self, action: str, files: list[NewSegment], txn: WriteTransaction, interval: Interval | None
    ) -> Commit:
        """Publish files an engine wrote under ``txn`` (used by the Spark writer)."""
        overwrite = self._overwrite_chunks(action, [f.chunk for f in files], interval)
        return txn.publish(PublishPlan(files, overwrite))

    # -- reading ------------------------------------------------------------------

    def snapshot(
        self,
        as_of: int | None = None,
        all_published: bool = False,
        interval: Interval | None = None,
    ) -> Snapshot:
        """The segments of one snapshot (only those overlapping ``interval`` if given)."""
        return self.catalog.store.snapshot(self.name, as_of, all_published, interval)

    def scan(self, as_of: int | None = None, interval: Any = None) -> ScanPlan:
        """Plan a read: the files of one snapshot, pruned to ``interval``."""
        iv = None if interval is None else Interval.coerce(interval)
        return plan_scan(self.snapshot(as_of, interval=iv), iv)

    def to_arrow(
        self, as_of: int | None = None, columns: list[str] | None = None, interval: Any = None
    ) -> pa.Table:
        """Rows of the latest (or ``as_of``) snapshot, optionally only some columns/times."""
        return read_arrow(self.scan(as_of, interval), self.catalog.warehouse, columns)

    def to_pandas(
        self, as_of: int | None = None, columns: list[str] | None = None, interval: Any = None
    ) -> pd.DataFrame:
        return self.to_arrow(as_of, columns, interval).to_pandas()

    def to_spark(self, spark: Any, as_of: int | None = None, interval: Any = None) -> Any:
        """A Spark DataFrame over exactly the snapshot's visible files."""
        from lamina.engines.spark import read_spark

        return read_spark(self, spark, self.scan(as_of, interval))

    def segments(self, all: bool = False, as_of: int | None = None) -> list[Segment]:
        """Visible data segments of the snapshot; ``all=True``: every published one."""
        snap = self.snapshot(as_of, all_published=all)
        if all:
            return sorted(snap.segments, key=lambda s: (s.interval, s.version, s.partition_id))
        return [s for s in Timeline.build(snap.segments).visible() if s.location is not None]

    def timeline(self, as_of: int | None = None, all_published: bool = True) -> Timeline:
        return Timeline.build(self.snapshot(as_of, all_published=all_published).segments)

    def history(self) -> list[Commit]:
        return self.catalog.store.history(self.name)

    def count(self, as_of: int | None = None) -> int:
        return self.to_arrow(as_of, columns=[]).num_rows

    def __repr__(self) -> str:
        return f"Table({self.name!r}, time_column={self.time_column!r}, {self.granularity.value})"
