"""The two kinds of table and the one place where a write or a change feed branches
on them: :func:`kind_of` gives the operations of a plain table or of an upsert table
(one with a primary key, whose records are resolved by key; docs/upserts.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from lamina import changes
from lamina.core.interval import Interval
from lamina.core.model import Commit, CommitAction
from lamina.core.properties import ROWS_CHANGED_SEQ
from lamina.operations import append as plain_append
from lamina.operations import overwrite as plain_overwrite
from lamina.operations import upsert
from lamina.operations.compaction import copy_on_write, inline
from lamina.operations.handle import TableHandle
from lamina.operations.upsert import read as upsert_read

if TYPE_CHECKING:
    import pyarrow as pa

    from lamina.core.model import TableRecord


class TableKind(Protocol):
    """What differs between the kinds of table: how rows are written and how the
    change feed is read."""

    def append(
        self,
        h: TableHandle,
        data: Any,
        metadata: dict[str, Any],
        txn: tuple[str, int] | None,
        retries: int,
    ) -> Commit: ...

    def overwrite(
        self,
        h: TableHandle,
        data: Any,
        interval: Interval | None,
        metadata: dict[str, Any],
        txn: tuple[str, int] | None,
        retries: int,
    ) -> Commit: ...

    def refresh(
        self, h: TableHandle, data: Any, interval: Interval | None, metadata: dict[str, Any]
    ) -> Commit: ...

    def read_changes(
        self, h: TableHandle, after: int, until: int | None, columns: list[str] | None
    ) -> pa.Table: ...

    def change_plan(
        self, h: TableHandle, after: int, until: int | None
    ) -> tuple[TableRecord, list[changes.ChangedPiece]]: ...

    def read_changes_spark(
        self,
        spark: Any,
        h: TableHandle,
        after: int,
        until: int | None,
        columns: list[str] | None,
    ) -> Any: ...


def _rows_changed(h: TableHandle) -> bool:
    """Whether the plain table had a row-level change (``t.delete``, ``t.update``,
    ``t.merge``): its change feed is then read row by row, as an upsert table's (the
    catalog's record, not the handle's: another process may have made it)."""
    return ROWS_CHANGED_SEQ in h.reloaded()[0].properties


class PlainTable:
    """A table without a primary key: rows are appended, or replace an interval."""

    append = staticmethod(plain_append.append)
    overwrite = staticmethod(plain_overwrite.overwrite)
    refresh = staticmethod(plain_overwrite.refresh)

    @staticmethod
    def read_changes(
        h: TableHandle, after: int, until: int | None, columns: list[str] | None
    ) -> pa.Table:
        """Rows each commit made visible or invisible, segment by segment (row by row
        once rows were deleted or updated)."""
        if _rows_changed(h):
            return upsert_read.read_changes(h, after, until, columns)
        return changes.read_changes(h.ctx, h.name, after, until, columns)

    @staticmethod
    def change_plan(
        h: TableHandle, after: int, until: int | None
    ) -> tuple[TableRecord, list[changes.ChangedPiece]]:
        """The change feed as pieces of files (:func:`lamina.changes.change_plan`)."""
        if _rows_changed(h):
            return UpsertTable.change_plan(h, after, until)
        return changes.change_plan(h.ctx, h.name, after, until)

    @staticmethod
    def read_changes_spark(
        spark: Any, h: TableHandle, after: int, until: int | None, columns: list[str] | None
    ) -> Any:
        if _rows_changed(h):
            return upsert_read.read_changes_spark(spark, h, after, until, columns)
        return changes.read_changes_spark(spark, h.ctx, h.name, after, until, columns)


def upserted(
    h: TableHandle, data: Any, metadata: dict[str, Any], txn: tuple[str, int] | None
) -> Commit:
    """An upsert of ``data`` in the table's write mode (on a copy-on-write table it
    rewrites the files it supersedes records in), then its inline compaction when the
    table asks for one. Raises as :func:`lamina.operations.upsert.upsert`."""
    done = upsert.upsert(h, data, metadata, txn, finish=copy_on_write.finisher(h))
    inline.after_commit(h, done)
    return done


def upserted_as_read(
    h: TableHandle, data: pa.Table, read_at: int, metadata: dict[str, Any]
) -> Commit:
    """The upsert of records a row-level change computed whole from those it read at
    seq ``read_at`` (an update's, a merge's). On a partial-upsert table they are stored
    as they are, not merged again with the records they came from, and only if no
    commit published since ``read_at``; elsewhere as :func:`upserted`. Raises as
    :func:`upserted`, and CommitConflictError (retryable: read again)."""
    spec = h.upsert_spec
    if spec is None or not spec.is_partial:
        return upserted(h, data, metadata, None)
    done = upsert.replace_records(h, data, read_at, metadata, copy_on_write.finisher(h))
    inline.after_commit(h, done)
    return done


class UpsertTable:
    """A table with a primary key: every write is resolved by key (the latest record
    wins); an overwrite's or refresh's records are upserted against the rest."""

    @staticmethod
    def append(
        h: TableHandle,
        data: Any,
        metadata: dict[str, Any],
        txn: tuple[str, int] | None,
        retries: int,
    ) -> Commit:
        """An upsert (``retries`` unused: an upsert never conflicts retryably)."""
        return upserted(h, data, metadata, txn)

    @staticmethod
    def overwrite(
        h: TableHandle,
        data: Any,
        interval: Interval | None,
        metadata: dict[str, Any],
        txn: tuple[str, int] | None,
        retries: int,
    ) -> Commit:
        return upsert.overwrite(h, data, interval, metadata, txn)

    @staticmethod
    def refresh(
        h: TableHandle, data: Any, interval: Interval | None, metadata: dict[str, Any]
    ) -> Commit:
        gone = tuple(s.id for s in h.snapshot(interval=interval).segments)
        action = CommitAction.REFRESH
        return upsert.overwrite(h, data, interval, metadata, action=action, remove=gone)

    read_changes = staticmethod(upsert_read.read_changes)

    @staticmethod
    def change_plan(
        h: TableHandle, after: int, until: int | None
    ) -> tuple[TableRecord, list[changes.ChangedPiece]]:
        """The record-level change feed as pieces of files (rows at positions)."""
        rec, rows = upsert_read.changed_rows(h, after, until)
        pieces = [
            changes.ChangedPiece(r.change, r.commit_id, r.seq, r.path, r.keep, r.positions)
            for r in rows
        ]
        return rec, pieces

    read_changes_spark = staticmethod(upsert_read.read_changes_spark)


def kind_of(h: TableHandle) -> TableKind:
    """The operations of the table's kind: the one branch on it."""
    return UpsertTable() if h.is_upsert else PlainTable()
