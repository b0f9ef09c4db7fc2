"""The handle every operation works on: one table's catalog context and record.

A :class:`lamina.table.Table` holds one ``TableHandle`` and shares it with the
transactions and pushes it opens. It is deliberately not frozen: a definition change
made through the table (``set_properties``, ``add_columns``) replaces ``record`` in
place, so an open transaction sees it, as it always has. Operations read the table's
definition and snapshots through it and never need the facade.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from lamina.context import CatalogContext
from lamina.core.interval import Granularity, Interval
from lamina.core.model import AsOf, Commit, Snapshot, TableRecord
from lamina.errors import SnapshotNotFoundError
from lamina.meta import commits, lineage, snapshots, tables
from lamina.meta.locks import list_locks

if TYPE_CHECKING:
    import pyarrow as pa

    from lamina.core.lineage import LineageEntry
    from lamina.core.scan import ScanPlan
    from lamina.core.upsert_spec import UpsertSpec
    from lamina.meta.locks import LockInfo

T = TypeVar("T")

#: rows per segment unless the table's ``target_rows_per_segment`` says otherwise
DEFAULT_TARGET_ROWS = 1_000_000
#: a latest read re-plans when files vanished under it, this many times at most
READ_ATTEMPTS = 5


class TableHandle:
    """One table's catalog context and catalog row, as operations use them."""

    __slots__ = ("adding", "ctx", "record")

    def __init__(
        self, ctx: CatalogContext, record: TableRecord, adding: tuple[pa.Field, ...] = ()
    ) -> None:
        self.ctx = ctx
        self.record = record
        #: columns ``record``'s schema has and the catalog's not yet: the commits of
        #: this handle's writes add them (a write with ``evolve=True``)
        self.adding = adding

    # -- the definition, as loaded ------------------------------------------------------

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def schema(self) -> pa.Schema:
        return self.record.schema

    @property
    def time_column(self) -> str | None:
        return self.record.time_column

    @property
    def granularity(self) -> Granularity:
        return self.record.granularity

    @property
    def properties(self) -> dict[str, str]:
        """A copy of the table's properties."""
        return dict(self.record.properties)

    @property
    def target_rows_per_segment(self) -> int:
        return int(self.record.properties.get("target_rows_per_segment", DEFAULT_TARGET_ROWS))

    @property
    def is_upsert(self) -> bool:
        """Whether the table is an upsert table (a primary key; see docs/upserts.md)."""
        return self.record.is_upsert

    @property
    def upsert_spec(self) -> UpsertSpec | None:
        """The upsert definition (None: not an upsert table)."""
        from lamina.core.upsert_spec import UpsertSpec  # numpy, pyarrow

        rec = self.record
        return UpsertSpec.from_properties(rec.properties, rec.schema, rec.time_column)

    @property
    def consistent_push(self) -> bool:
        """Whether appends and refreshes go through a lineage entry."""
        return self.record.properties.get("consistent_push", "false") == "true"

    def reloaded(self) -> tuple[TableRecord, list[str]]:
        """The table's catalog row now, and the columns added or widened since this
        handle's record was loaded (none: its schema is current). Raises
        TableNotFoundError, CatalogUnavailableError."""
        now = tables.get_table(self.ctx.db, self.name)
        old = self.record.schema
        changed = [
            f.name
            for f in now.schema
            if f.name not in old.names or old.field(f.name).type != f.type
        ]
        return now, changed

    # -- reads: one call each into read.py or meta/ ---------------------------------------

    def snapshot(
        self, as_of: AsOf = None, all_published: bool = False, interval: Any = None
    ) -> Snapshot:
        """The segments of one snapshot (only those overlapping ``interval``).
        Raises SnapshotNotFoundError, InvalidIntervalError."""
        iv = None if interval is None else Interval.coerce(interval)
        return snapshots.snapshot(
            self.ctx.db, self.name, as_of, all_published=all_published, interval=iv
        )

    def scan(self, as_of: AsOf = None, interval: Any = None) -> ScanPlan:
        """The files of one snapshot, pruned to ``interval``."""
        iv = None if interval is None else Interval.coerce(interval)
        from lamina import read  # columnar planning loads pyarrow and numpy

        return read.plan(self.ctx, self.name, as_of, iv)

    def rows(
        self, as_of: AsOf = None, columns: list[str] | None = None, interval: Any = None
    ) -> pa.Table:
        """The snapshot's visible rows; a latest read is planned again when a concurrent
        push or retention removed its files (:func:`latest_again`)."""
        from lamina.io.reader import read_arrow  # pyarrow

        wh = self.ctx.warehouse
        return latest_again(as_of, lambda: read_arrow(self.scan(as_of, interval), wh, columns))

    def history(self, commit_id: int | None = None) -> list[Commit]:
        """The table's commits (only ``commit_id`` when given)."""
        return commits.history(self.ctx.db, self.name, commit_id=commit_id)

    def commit(self, commit_id: int) -> Commit:
        """The table's commit ``commit_id``."""
        return self.history(commit_id)[0]

    def lineage(self) -> list[LineageEntry]:
        """The table's lineage entries (oldest first)."""

        return lineage.list_entries(self.ctx.db, self.name)

    def locks(self) -> list[LockInfo]:
        """The table's task locks and waiting requests."""

        return list_locks(self.ctx.db, self.name)


def latest_again(as_of: AsOf, read: Callable[[], T]) -> T:
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
