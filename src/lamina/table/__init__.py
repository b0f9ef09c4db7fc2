"""A table: its writes (append, upsert, overwrite, refresh, transactions, pushes,
compactions) on top of its definition (:mod:`lamina.table.definition`) and its reads
(:mod:`lamina.table.reads`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lamina.core.args import flag, names
from lamina.core.interval import Interval
from lamina.core.model import AsOf, Commit, txn_of, user_metadata
from lamina.errors import (
    InvalidArgumentError,
    LineageEntryNotFoundError,
    LineageRequestError,
    SegmentNotFoundError,
    TransactionError,
)
from lamina.operations.steps import aligned
from lamina.table.definition import TableDefinition

if TYPE_CHECKING:
    from lamina.core.lineage import LineageEntry
    from lamina.operations.handle import TableHandle
    from lamina.operations.push import ConsistentPush
    from lamina.operations.rowlevel.merge import MergeBuilder
    from lamina.operations.transaction import Transaction

# The write path (the operations that load pyarrow and numpy) is imported by the
# methods that write: reading a table's segments needs none of it.


class Table(TableDefinition):
    """Handle on one table. Cheap to create; reads and writes go to the catalog each
    time, while schema and properties are as loaded (``cat.load_table`` again to see
    another process's ``set_properties`` or ``add_columns``)."""

    _handle: TableHandle

    # -- writing ------------------------------------------------------------------

    @property
    def ingestion_type(self) -> str:
        """APPEND or REFRESH (informational; both write paths work on any table)."""
        return self._handle.record.properties.get("ingestion_type", "APPEND")

    @property
    def consistent_push(self) -> bool:
        """Whether appends and refreshes go through a lineage entry (atomic, revertible)."""
        return self._handle.consistent_push

    def append(
        self,
        data: Any,
        metadata: dict[str, Any] | None = None,
        *,
        txn: tuple[str, int] | None = None,
        retries: int = 0,
        evolve: bool = False,
    ) -> Commit:
        """Add rows. New segments join existing chunks at their current version.

        On a ``consistent_push`` table the append runs under a lineage entry
        (``segments_from=[]``), so it can be rolled back with :meth:`revert_replace`.
        ``txn=(app_id, version)``: exactly once — skipped (returning the commit that
        recorded it) unless ``version`` is above the application's recorded one.
        ``retries``: publish again this many times after a conflict that is safe to
        retry (see ``CommitConflictError.retryable``). ``evolve``: the data's columns
        the table lacks are added (nullable, at the end) by this commit, as Delta's
        ``mergeSchema`` (without it they are refused; columns the data lacks are nulls).
        Raises CommitConflictError, SchemaError, TimeColumnError, MetadataError.
        """
        from lamina.operations.evolve import merged  # the write path: pyarrow, numpy
        from lamina.operations.kinds import kind_of
        from lamina.table.connect import is_spark_connect, write_through_source  # pyarrow

        h = self._handle
        if is_spark_connect(data):
            _no_evolve(evolve)
            return write_through_source(h, data, "append", user_metadata(metadata), txn)
        return merged(
            h,
            data,
            evolve,
            user_metadata(metadata),
            lambda h, data, meta: kind_of(h).append(h, data, meta, txn, retries),
        )

    def upsert(
        self,
        data: Any,
        metadata: dict[str, Any] | None = None,
        *,
        txn: tuple[str, int] | None = None,
        evolve: bool = False,
    ) -> Commit:
        """Write records of an upsert table: per primary key only the latest is visible
        (the greatest comparison value; on a tie the later commit, then the later row).
        ``txn``: exactly once, ``evolve``: new columns, as for :meth:`append`. Raises
        UpsertError (not an upsert table, null keys or comparison values), SchemaError,
        TimeColumnError, MetadataError."""
        from lamina.operations.evolve import merged  # the write path: pyarrow, numpy
        from lamina.operations.kinds import upserted
        from lamina.table.connect import is_spark_connect, write_through_source  # pyarrow

        if is_spark_connect(data):
            _no_evolve(evolve)
            meta = user_metadata(metadata)
            return write_through_source(self._handle, data, "upsert", meta, txn)
        return merged(
            self._handle,
            data,
            evolve,
            user_metadata(metadata),
            lambda h, data, meta: upserted(h, data, meta, txn),
        )

    @property
    def primary_key(self) -> tuple[str, ...] | None:
        """The upsert table's primary key columns (None: not an upsert table)."""
        spec = self._handle.upsert_spec
        return None if spec is None else spec.primary_key

    def overwrite(
        self,
        data: Any,
        interval: Interval | str | tuple[Any, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        txn: tuple[str, int] | None = None,
        retries: int = 0,
        evolve: bool = False,
    ) -> Commit:
        """Replace every row in ``interval`` (default: the chunks the data touches)
        with ``data``, under a new, higher version, in one commit. ``txn``,
        ``retries``, ``evolve``: as :meth:`append` (an overwrite that lost to another
        overwrite is never retried: that would silently drop the other's rows).
        Raises CommitConflictError, DataOutsideIntervalError, SchemaError,
        MetadataError."""
        from lamina.operations.evolve import merged  # the write path: pyarrow, numpy
        from lamina.operations.kinds import kind_of
        from lamina.table.connect import is_spark_connect, write_through_source  # pyarrow

        h = self._handle
        if is_spark_connect(data):
            _no_evolve(evolve)
            meta = user_metadata(metadata)
            return write_through_source(h, data, "overwrite", meta, txn, interval)
        iv = aligned(h, interval)
        return merged(
            h,
            data,
            evolve,
            user_metadata(metadata),
            lambda h, data, meta: kind_of(h).overwrite(h, data, iv, meta, txn, retries),
        )

    def refresh(
        self,
        data: Any,
        interval: Interval | str | tuple[Any, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Commit:
        """Replace all live segments (or those overlapping ``interval``) with ``data``.

        With ``consistent_push`` the swap goes through a lineage entry: readers see the
        old data until the new is complete, then only the new; a failure reverts the
        entry on the spot, and :meth:`revert_replace` rolls a bad push back. Without
        it, the swap is still one atomic commit, but not revertible.

        On an upsert table the records stored in the interval go and ``data``'s are
        upserted against the rest, in one commit (see docs/upserts.md).
        Raises CommitConflictError, DataOutsideIntervalError, MetadataError.
        """
        from lamina.operations.kinds import kind_of  # the write path: pyarrow, numpy

        h = self._handle
        return kind_of(h).refresh(h, data, aligned(h, interval), user_metadata(metadata))

    def transaction(
        self,
        isolation: str = "write_serializable",
        metadata: dict[str, Any] | None = None,
        txn: tuple[str, int] | None = None,
        *,
        lock: str | None = None,
        interval: Interval | str | tuple[Any, Any] | None = None,
        priority: int | None = None,
        wait_s: float | None = None,
    ) -> Transaction:
        """Several writes published as one commit: ``with t.transaction() as tx:
        tx.append(a); tx.overwrite(b, interval); tx.delete_segments(ids)``.

        Based on the snapshot current when it opens; at commit, checked against the
        commits completed since (``CommitConflictError``: nothing published).
        ``isolation``: "write_serializable" (default) keeps rows appended meanwhile
        into an interval it overwrites, on top of its version; "serializable" refuses
        them instead. ``txn=(app_id, version)``: exactly once, as :meth:`append`.

        ``lock``: take a task lock first (EXCLUSIVE, SHARED, REPLACE or APPEND; Druid's
        rules, see docs/concurrency.md) on ``interval`` (default: all time) with
        ``priority`` (default 50), waiting in arrival order up to ``wait_s`` (default:
        the catalog's ``writer_wait_s``). Writes inside locks it holds publish without
        optimistic conflicts; a revoked lock fails the commit (LockRevokedError).

        On an upsert table, ``tx.append``/``tx.upsert`` and ``tx.overwrite`` records
        are resolved by key when the transaction commits, as one upsert (a later
        operation's record is the later one on a tie); a partial-upsert table's are
        merged with their keys' records then (and again if a key changed meanwhile).
        Raises TransactionError, LockError, LockTimeoutError, InvalidIntervalError,
        MetadataError.
        """
        from lamina.operations.transaction import Transaction  # the write path: pyarrow, numpy

        meta = user_metadata(metadata)
        return Transaction(self._handle, isolation, meta, txn, lock, interval, priority, wait_s)

    def locks(self) -> list[Any]:
        """The table's task locks and waiting requests (type, interval, priority,
        state, holder commit and host:pid)."""
        return self._handle.locks()

    def foreach_batch(self, app_id: str, mode: str = "append") -> Callable[[Any, int], None]:
        """A Spark Structured Streaming ``foreachBatch`` function writing each
        micro-batch exactly once (``txn=(app_id, batch_id)``): a query restarted from
        its checkpoint never applies a batch twice. The app id belongs to one query
        (one checkpoint): a batch of another query under an app id a query wrote
        last raises StreamCheckpointError (its batch ids start at 0 again: they
        would be skipped as written). ``mode``: "append" (an upsert on an upsert
        table) or "overwrite" (each batch replaces the chunks it touches).
        ``df.writeStream.foreachBatch(t.foreach_batch("orders-stream")).start()``
        Raises TransactionError for an unknown mode or an empty ``app_id``."""
        if mode not in ("append", "overwrite") or not app_id:
            raise TransactionError(
                f"foreach_batch(app_id={app_id!r}, mode={mode!r}): give a non-empty app id "
                "and mode 'append' or 'overwrite'"
            )
        from lamina.table.connect import ForeachBatch  # the write path: pyarrow, numpy

        txn_of((app_id, 0))  # a bad app id now, not at the first batch
        return ForeachBatch.of(self._handle, app_id, mode)

    def compact(
        self,
        interval: Interval | str | tuple[Any, Any] | None = None,
        mode: str = "minor",
        target_rows_per_segment: int | None = None,
        *,
        segment_granularity: str | None = None,
        sort_by: list[str] | None = None,
        rollup: dict[str, Any] | None = None,
        priority: int | None = None,
        wait_s: float | None = None,
        segments: list[str] | None = None,
        engine: str = "auto",
    ) -> Commit | None:
        """Compact segments (see docs/compaction.md); returns the commit, or None when
        there was nothing to do.

        ``mode="minor"``: per chunk, runs of adjacent small segments of ``interval``
        (default: all) become one atomic update group at the same version and a higher
        minor version, under SEGMENT locks on the inputs; appends carry on meanwhile.
        ``segments``: merge exactly these ids (seed 001's three rules apply).
        ``mode="major"``: rewrite every chunk of ``interval`` at a new version under a
        REPLACE lock, into ``segment_granularity`` chunks, sorted by ``sort_by``,
        rolled up by ``rollup`` (:mod:`lamina.core.rollup`; a ``count`` metric the
        table lacks is added as a column by the same commit); appends are kept.
        ``engine``: auto (Spark for runs over ``$LAMINA_LOCAL_MAX_BYTES``), local or
        spark; ``priority`` of the locks (default 25) and ``wait_s`` for them.
        Raises CompactionError (bad request: nothing changed), CommitConflictError
        (something changed under it: nothing published), LockTimeoutError,
        LockRevokedError, InvalidIntervalError.
        """
        from lamina.operations import compaction  # the write path: pyarrow, numpy

        return compaction.compact(
            self._handle,
            interval,
            mode,
            target_rows_per_segment,
            segment_granularity=segment_granularity,
            sort_by=sort_by,
            rollup=rollup,
            priority=priority,
            wait_s=wait_s,
            segments=segments,
            engine=engine,
        )

    def push(self, metadata: dict[str, Any] | None = None) -> ConsistentPush:
        """A multi-batch append that becomes visible all at once (and can be reverted).

        ``with t.push() as p: p.append(batch1); p.append(batch2)``
        """
        from lamina.operations.push import ConsistentPush  # the write path: pyarrow, numpy

        return ConsistentPush(self._handle, user_metadata(metadata))

    # -- row-level changes (docs/rowlevel.md) --------------------------------------

    def delete(
        self, where: Any, metadata: dict[str, Any] | None = None, *, retries: int = 4
    ) -> Commit | None:
        """Delete the rows ``where`` matches — a SQL expression string
        (``"amount < 0 AND region = 'eu'"``) or a ``pyarrow.compute`` Expression — in
        one commit (DELETE_ROWS), stored as the table's ``write.update.mode`` says:
        deletion vectors, or the files holding them rewritten. Returns the commit
        (``commit.metadata["row_change"]["deleted"]``: how many), or None when no
        row matched (nothing committed). On an upsert table it upserts a tombstone
        per matched key (the table needs a delete column). A concurrent commit that
        changed a file it read makes it evaluate ``where`` again, ``retries`` times.
        Raises RowLevelError (bad predicate: nothing changed), CommitConflictError,
        MetadataError."""
        from lamina.operations import rowlevel  # the write path: pyarrow, numpy, duckdb

        meta = user_metadata(metadata)
        return rowlevel.delete(self._handle, where, meta, retries)

    def update(
        self,
        where: Any,
        set: dict[str, str],  # noqa: A002 - Delta's and SQL's name
        metadata: dict[str, Any] | None = None,
        *,
        retries: int = 4,
    ) -> Commit | None:
        """Set columns of the rows ``where`` matches (as :meth:`delete` takes it) to
        SQL expressions of the row's values (``set={"amount": "amount * 2"}``), in one
        commit (UPDATE): the old rows hidden, the new ones written; the change feed
        shows each as a delete and an insert. Returns the commit
        (``metadata["row_change"]["updated"]``), or None when no row matched. On an
        upsert table the updated records are upserted; a key column cannot be set.
        Raises RowLevelError (nothing changed), CommitConflictError, MetadataError."""
        from lamina.operations import rowlevel  # the write path: pyarrow, numpy, duckdb

        meta = user_metadata(metadata)
        return rowlevel.update(self._handle, where, set, meta, retries)

    def merge(self, source: Any, on: list[str] | str) -> MergeBuilder:
        """A merge of ``source`` (a pyarrow Table or RecordBatchReader, a pandas or
        polars DataFrame, a DuckDB relation: what :meth:`append` takes) into the table,
        matched on the columns ``on`` (equal in both): add clauses
        (``when_matched_update``, ``when_matched_update_all``, ``when_matched_delete``,
        ``when_not_matched_insert``, ``when_not_matched_insert_all``,
        ``when_not_matched_by_source_delete``), then ``execute()`` publishes one commit
        (Delta's semantics: a row takes the first clause whose condition holds).
        Raises RowLevelError."""
        from lamina.operations.rowlevel.merge import MergeBuilder  # pyarrow, duckdb

        return MergeBuilder(self._handle, source, on)

    # -- lineage --------------------------------------------------------------------

    def lineage(self) -> list[LineageEntry]:
        """The table's lineage entries (oldest first)."""
        return self._handle.lineage()

    def start_replace(
        self,
        segments_from: list[str],
        segments_to: list[str],
        force_cleanup: bool = False,
        *,
        replace_live: Interval | None = None,
    ) -> str:
        """Open an IN_PROGRESS entry replacing ``segments_from`` by ``segments_to``.

        Segments written under the entry (``t.push``, ``t.refresh``) join its
        ``segments_to``; they stay invisible until :meth:`end_replace`. lamina names
        the segments it writes: pass ``segments_to=[]`` and write under the entry. Names
        given here (Pinot's protocol) must be new, and the end waits for segments of
        those ids, unless it gives them up (``end_replace(entry, segments_to=[...])``).
        ``replace_live``: instead of ``segments_from``, every live segment overlapping
        this interval, read in the same transaction. Raises LineageError.
        """
        from lamina.operations import lineage  # the write path: pyarrow, numpy

        return lineage.start_replace(
            self._handle,
            names(segments_from, "segments_from", LineageRequestError, "segment ids"),
            names(segments_to, "segments_to", LineageRequestError, "segment ids"),
            flag(force_cleanup, "force_cleanup"),
            None if replace_live is None else Interval.coerce(replace_live),
        )

    def end_replace(self, entry_id: str, segments_to: list[str] | None = None) -> None:
        """Complete an entry: readers switch to its segments_to at once (idempotent).

        ``segments_to``: of the segment names given at start, the ones still to wait
        for (Pinot's end with a subset): the end gives up the others, and what was
        written under the entry shows.
        Raises LineageError (names never written, not in the entry),
        LineageEntryNotFoundError, UpsertError (an upsert table has no lineage)."""
        from lamina.operations import lineage  # the write path: pyarrow, numpy

        if segments_to is not None:
            segments_to = names(segments_to, "segments_to", LineageRequestError, "segment ids")
        lineage.end_replace(self._handle, _entry_id(entry_id), segments_to)

    def revert_replace(self, entry_id: str, force: bool = False) -> None:
        """Undo an entry: readers see its segments_from again. IN_PROGRESS needs force;
        a COMPLETED one (a rollback) must be the newest link of its chain.
        Raises LineageError, LineageEntryNotFoundError, UpsertError (an upsert table
        has no lineage)."""
        from lamina.operations import lineage  # the write path: pyarrow, numpy

        lineage.revert_replace(self._handle, _entry_id(entry_id), flag(force, "force"))

    def delete_segments(self, segment_ids: list[str]) -> Commit:
        """Remove live segments in one commit; refuses segments a lineage entry holds.
        Raises SegmentNotFoundError (also for a lone id: pass a list), LineageError."""
        from lamina.operations import lineage  # the write path: pyarrow, numpy

        ids = names(segment_ids, "delete_segments", SegmentNotFoundError, "segment ids")
        if not ids:
            raise SegmentNotFoundError("delete_segments needs at least one segment id")
        return lineage.delete_segments(self._handle, ids)

    def restore(self, target: AsOf, metadata: dict[str, Any] | None = None) -> Commit:
        """Make the table show exactly what version ``target`` showed — a version
        (``Commit.version``), a Commit, or a time (the latest version completed then, as
        ``as_of``) — in one RESTORE commit, which writes no file but copies of files whose
        rows deletion vectors hid since (a row-level delete is taken back); every version
        stays readable and the change feed reports what the restore changed (an upsert
        table writes that version's records again, replacing every chunk). Concurrent
        writes conflict as with an overwrite of the whole table.
        Raises InvalidArgumentError, SnapshotNotFoundError, SnapshotTooOldError (naming
        the oldest restorable version), RestoreError, LineageError (a push in
        progress), CommitConflictError."""
        from lamina.operations.restore import restore  # the write path

        return restore(self._handle, target, user_metadata(metadata))

    def __repr__(self) -> str:
        return f"Table({self.name!r}, time_column={self.time_column!r}, {self.granularity.value})"


def _no_evolve(evolve: Any) -> None:
    """Raises InvalidArgumentError for ``evolve=True`` with a Spark Connect DataFrame
    (written through ``format("lamina")``, which adds no column)."""
    if flag(evolve, "evolve"):
        raise InvalidArgumentError(
            "evolve=True cannot take a Spark Connect DataFrame (it is written through "
            'format("lamina")): add the new columns with t.add_columns(...) first'
        )


def _entry_id(value: Any) -> str:
    """A lineage entry's id, as ``start_replace`` returned it. Raises
    LineageEntryNotFoundError."""
    if not isinstance(value, str):
        raise LineageEntryNotFoundError(
            f"a lineage entry id is the string start_replace returned (see t.lineage()), "
            f"not {value!r}"
        )
    return value
