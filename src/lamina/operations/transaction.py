"""Multi-operation transactions: several writes of one table published as one commit.

``with t.transaction() as tx: tx.append(a); tx.overwrite(b); tx.delete_segments(ids)``
opens one commit on the table's latest snapshot (its base), writes each operation's
files at once under that commit, and publishes them all in one catalog transaction
when the block ends (or on :meth:`Transaction.commit`) — checked against the commits
that completed since the base (see :mod:`lamina.core.conflicts`). An exception or
:meth:`Transaction.abort` discards everything: nothing becomes visible and the files
are removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any

from lamina.core.args import names, seconds, whole_number
from lamina.core.conflicts import Isolation
from lamina.core.interval import ETERNITY, Granularity, Interval
from lamina.core.locks import PRIORITY_BATCH, PRIORITY_STREAMING, LockType
from lamina.core.model import Commit, CommitAction, NewSegment, txn_of
from lamina.core.plans import MajorCompactionPlan, TransactionPlan
from lamina.errors import (
    AlreadyAppliedError,
    CommitConflictError,
    LockError,
    SegmentNotFoundError,
    TransactionError,
)
from lamina.failpoints import failpoint
from lamina.meta.segments import unknown_ids
from lamina.operations import steps as tw
from lamina.operations.handle import TableHandle
from lamina.operations.retry import MERGE_ATTEMPTS, retrying
from lamina.operations.upsert import require, rewritten
from lamina.operations.upsert.transaction import (
    Held,
    Stored,
    combined,
    hold,
    merge_held,
    store,
)
from lamina.write import WriteTransaction

if TYPE_CHECKING:
    import pyarrow as pa

    from lamina.core.upsert import UpsertBatch, UpsertSpec


def _lock_request(
    table: TableHandle,
    lock: str | None,
    interval: Interval | str | tuple[Any, Any] | None,
    priority: int | None,
    wait_s: float | None,
) -> tuple[LockType, Interval, int, float] | None:
    """The validated lock request of a transaction (None: optimistic only).
    Raises LockError, InvalidIntervalError."""
    if lock is None:
        if interval is not None or priority is not None or wait_s is not None:
            raise LockError(
                "interval=, priority= and wait_s= go with lock=; pass lock='APPEND', ..."
            )
        return None
    kind = LockType.parse(lock)
    iv = ETERNITY if interval is None else Interval.coerce(interval)
    if iv != ETERNITY:
        table.granularity.check_aligned(iv)
    upserts = table.is_upsert  # ingestion: streaming
    prio = (
        (PRIORITY_STREAMING if upserts else PRIORITY_BATCH)
        if priority is None
        else whole_number(priority, "priority", LockError)
    )
    wait = table.ctx.writer_wait_s if wait_s is None else seconds(wait_s, "wait_s", LockError)
    return kind, iv, prio, wait


class Transaction:
    """Writes of one table that publish together (see the module docs)."""

    def __init__(
        self,
        table: TableHandle,
        isolation: str = "write_serializable",
        metadata: dict[str, Any] | None = None,
        txn: tuple[str, int] | None = None,
        lock: str | None = None,
        interval: Interval | str | tuple[Any, Any] | None = None,
        priority: int | None = None,
        wait_s: float | None = None,
    ) -> None:
        self._lock = _lock_request(table, lock, interval, priority, wait_s)
        try:
            self.isolation = Isolation(str(isolation).lower())
        except ValueError:
            valid = ", ".join(i.value for i in Isolation)
            raise TransactionError(f"unknown isolation {isolation!r}; use one of {valid}") from None
        self._table = table
        self.txn = None if txn is None else txn_of(txn)
        self._write = WriteTransaction(
            table.ctx, table.record, CommitAction.APPEND, dict(metadata or {})
        )
        self._appends: list[NewSegment] = []
        self._overwrites: list[NewSegment] = []
        self._chunks: set[Interval] = set()
        self._replaced: list[Interval] = []  # what its overwrites replace, whole
        self._removes: list[str] = []
        self._ops = 0
        self._op_stored = 0  # how many of _stored came before the last operation
        self._rewrite = False  # a major compaction: publishes a MajorCompactionPlan
        #: a major compaction of an upsert table: its records are resolved at publish
        self._upsert: UpsertSpec | None = None
        self._spec = table.upsert_spec  # an upsert table: the operations' records are
        self._stored: list[Stored] = []  # resolved together at publish
        #: a partial-upsert table's operations: merged and written when it commits
        self._held: list[Held] = []
        self._merged: UpsertBatch | None = None
        self._append_chunks: set[Interval] = set()
        self._state = "new"
        self.commit_result: Commit | None = None

    # -- life cycle -----------------------------------------------------------------

    def __enter__(self) -> Transaction:
        self._begin()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._state != "open":
            return
        if exc_type is not None:
            self.abort()
        else:
            self.commit()

    @property
    def base_seq(self) -> int:
        """The snapshot seq the transaction started from."""
        self._begin()
        return self._write.base_seq

    def _begin(self) -> None:
        if self._state == "new":
            self._write.__enter__()
            self._state = "open"
            try:
                if self._lock is not None:
                    self._write.acquire(*self._lock)
                self._write.inflight()
            except BaseException:
                self.abort()
                raise

    def _check_open(self, ask: bool = True) -> None:
        """Raise TransactionError unless open; ``ask``: and LockRevokedError when a
        lock of an idle transaction was revoked (publish checks that itself)."""
        fresh = self._state == "new"
        self._begin()
        if self._state != "open":
            raise TransactionError(
                f"this transaction is {self._state}; open a new one with t.transaction()"
            )
        if ask and self._lock is not None and not fresh:  # revoked while idle: fail now
            self._write.check(ask=True)

    # -- operations -----------------------------------------------------------------

    def append(self, data: Any) -> None:
        """Add rows (visible when the transaction commits; on an upsert table: upsert
        them). Raises as ``t.append``, and TransactionError for a chunk this
        transaction overwrites."""
        self._check_open()
        if self._holds:
            self._hold(data, CommitAction.APPEND, None)
            return
        files = self._produce(data, CommitAction.APPEND, None)
        with self._refusing():
            self._covered([f.chunk for f in files])
            self._clash([f.chunk for f in files], self._chunks, "overwrites")
        self._appends += files
        self._append_chunks |= {f.chunk for f in files}

    def upsert(self, data: Any) -> None:
        """Upsert records: per key the latest wins, against the table as it is when
        the transaction commits (a later operation's record is the later one on a
        tie). Raises as ``t.upsert``, and TransactionError for a chunk this
        transaction overwrites."""
        require(self._table)
        self.append(data)

    def overwrite(
        self, data: Any, interval: Interval | str | tuple[Any, Any] | None = None
    ) -> None:
        """Replace every row of ``interval`` (default: the chunks ``data`` touches), as
        ``t.overwrite``. Several overwrites of one chunk replace it together (it holds
        the rows of all of them: a day written in batches). Raises TransactionError for
        a chunk this transaction appends to."""
        self._check_open()
        self._overwrite(data, tw.aligned(self._table, interval))

    def _overwrite(
        self,
        data: Any,
        iv: Interval | None,
        layout: tuple[Granularity, int] | None = None,
        only: set[Interval] | None = None,
    ) -> None:
        """Overwrite with chunks of ``layout`` = (granularity, target rows per segment)
        when given (a major compaction's re-partitioning), else the table's; only the
        chunks of ``only`` when given (those holding data: an empty chunk needs no
        tombstone)."""
        if self._holds:
            self._hold(data, CommitAction.OVERWRITE, iv)
            return
        files = self._produce(data, CommitAction.OVERWRITE, iv, layout)
        gran = None if layout is None else layout[0]
        written = [f.chunk for f in files]
        chunks: tuple[Interval, ...] | None
        if only is not None:  # what showed at the base, whatever was removed since
            tw.check_inside(CommitAction.OVERWRITE, written, iv)
            chunks = tuple(sorted(set(only) | set(written)))
        else:
            chunks = tw.overwrite_chunks(self._table, CommitAction.OVERWRITE, written, iv, gran)
        assert chunks is not None
        inside = [c for c in self._append_chunks if iv is not None and iv.contains(c)]
        with self._refusing():  # an append anywhere in the interval: order would matter
            self._covered(chunks)
            self._clash([*chunks, *inside], self._append_chunks, "appends to")
        self._overwrites += files
        self._chunks |= set(chunks)
        # its footprint: the whole interval (a compaction's: the chunks it rewrites)
        self._replaced += [iv] if iv is not None and only is None else list(chunks)

    def delete_segments(self, segment_ids: list[str]) -> None:
        """Remove these live segments when the transaction commits. Raises
        SegmentNotFoundError (ids the table has no segment of; a lone id: pass a list);
        the commit raises CommitConflictError if one was removed meanwhile."""
        ids = names(segment_ids, "delete_segments", SegmentNotFoundError, "segment ids")
        self._check_open()
        unknown = unknown_ids(self._table.ctx.db, self._table.record.id, ids)
        if unknown:
            raise SegmentNotFoundError(
                f"the table has no segments {unknown[:5]}; see t.segments() for the ids of "
                "its live segments"
            )
        self._removes += [i for i in ids if i not in self._removes]

    def commit(self) -> Commit:
        """Publish every operation in one catalog transaction. Raises
        CommitConflictError (nothing published, files removed), TransactionError."""
        self._check_open(ask=False)  # a revoked lock fails the publish, which cleans up
        attempts = MERGE_ATTEMPTS if self._held else 1

        def attempt(i: int) -> Commit:
            if self._held:  # merged with the keys' records as they are now
                self._merge(f"{self._write.dir}/merged{i}")
            return self._write.publish(self._plan())

        def again(i: int, exc: CommitConflictError) -> None:  # a key changed: merge again
            wh = self._table.ctx.warehouse
            wh.fs.delete_dir(wh.path(f"{self._write.dir}/merged{i}"))

        try:
            commit = retrying(attempt, attempts, pause=True, again=again)
        except AlreadyAppliedError as exc:  # the application wrote this version already
            self._state = "skipped"
            self._write.__exit__(type(exc), exc, exc.__traceback__)
            assert self.txn is not None
            commit = tw.skipped(self._table, self.txn, self._table.commit(exc.commit_id))
            self.commit_result = commit
            return commit
        except BaseException as exc:
            self._fail(exc)
            raise
        self._write.__exit__(None, None, None)
        self._state = "committed"
        self.commit_result = commit
        return commit

    def _action(self) -> CommitAction:
        """What the operations so far amount to."""
        if self._chunks:
            return CommitAction.OVERWRITE
        if self._appends or not self._removes:  # an upsert table's records: by key
            by_key = self._spec is not None and not self._removes
            return CommitAction.UPSERT if by_key else CommitAction.APPEND
        return CommitAction.DELETE

    def _plan(self) -> TransactionPlan:
        """What the operations publish."""
        action = self._action()
        if action is CommitAction.OVERWRITE:
            files, appends = self._overwrites, self._appends
        elif action is CommitAction.DELETE:
            files, appends = [], []
        else:
            files, appends = self._appends, []
        upsert = None
        if self._upsert is not None and files:
            wh, schema = self._table.ctx.warehouse, self._table.record.schema
            upsert = rewritten(self._upsert, wh, [f.location for f in files], schema)
        elif self._merged is not None and (files or appends):
            upsert = self._merged
        elif self._spec is not None and (files or appends):
            upsert = combined(self._spec, self._stored, [*files, *appends])
        kind = MajorCompactionPlan if self._rewrite else TransactionPlan
        return kind(
            files=tuple(files),
            chunks=tuple(sorted(self._chunks)) if self._chunks else None,
            replaced=tuple(self._replaced) if self._chunks else None,
            remove_ids=tuple(self._removes),
            isolation=self.isolation,
            append_files=tuple(appends),
            action=action,
            txn=self.txn,
            locked=self._lock is not None,
            upsert=upsert,
        )

    def _fail(self, exc: BaseException) -> None:
        self._state = "aborted"
        self._write.action = self._action().value  # the history shows what it was doing
        self._write.__exit__(type(exc), exc, exc.__traceback__)

    def abort(self) -> None:
        """Discard every operation: nothing is published, the files are removed."""
        if self._state in ("new", "open"):
            if self._state == "open":
                self._write.action = self._action().value
                why = TransactionError("aborted by its caller")
                self._write.__exit__(TransactionError, why, None)
            self._state = "aborted"

    # -- helpers --------------------------------------------------------------------

    @property
    def _holds(self) -> bool:
        """Whether operations are held until the commit (a partial-upsert table's)."""
        return self._spec is not None and self._spec.is_partial and self._upsert is None

    def _hold(self, data: Any, action: str, interval: Interval | None) -> None:
        """Check an operation of a partial-upsert table's transaction and hold it (see
        :func:`lamina.operations.upsert.transaction.hold`). Raises as ``t.upsert``,
        LockError, TransactionError."""
        held = hold(self._table, data, action, interval)
        self._covered(held.chunks)
        if held.overwrite:
            self._clash(list(held.chunks), self._append_chunks, "appends to")
            self._chunks |= set(held.chunks)
            self._replaced += [interval] if interval is not None else list(held.chunks)
        else:
            self._clash(list(held.chunks), self._chunks, "overwrites")
            self._append_chunks |= set(held.chunks)
        self._held.append(held)

    def _merge(self, where: str) -> None:
        """Merge the held operations with their keys' current records and write them
        under ``where``."""
        merged = merge_held(self._table, self._held, self._chunks, self._removes, where)
        self._overwrites, self._appends, self._merged = merged
        failpoint("transaction.merged")

    def _produce(
        self,
        data: Any,
        action: str,
        interval: Interval | None,
        layout: tuple[Granularity, int] | None = None,
    ) -> list[NewSegment]:
        self._ops += 1
        self._op_stored = len(self._stored)  # this operation's entries come after
        where = f"{self._write.dir}/op{self._ops}"
        if self._spec is not None and self._upsert is None:  # resolved at publish
            stored = store(self._table, data, action, interval, where)
            self._stored.append(stored)
            return stored.files
        return tw.producer(self._table, data, action, interval, layout)(where)

    @contextlib.contextmanager
    def _refusing(self) -> Iterator[None]:
        """Checks of the operation just written: if one refuses it, its files go (the
        operation was not added) before the error is raised."""
        try:
            yield
        except (LockError, TransactionError):
            del self._stored[self._op_stored :]
            wh = self._table.ctx.warehouse
            wh.delete_dir(wh.path(f"{self._write.dir}/op{self._ops}"))
            raise

    def _covered(self, chunks: Iterable[Interval]) -> None:
        """A transaction that took a lock writes only inside it, as a Druid task may
        publish only segments its locks cover. Raises LockError."""
        if self._lock is None:
            return
        kind, held = self._lock[0], self._lock[1]
        outside = sorted(c for c in chunks if not held.contains(c))
        if outside:
            raise LockError(
                f"this transaction holds a {kind.value} lock on {held}; it cannot write "
                f"{outside[0]}, outside it: pass an interval= covering every chunk it "
                "writes (the operation was not added)"
            )

    @staticmethod
    def _clash(chunks: list[Interval], other: set[Interval], what: str) -> None:
        both = sorted(set(chunks) & other)
        if both:
            raise TransactionError(
                f"this transaction already {what} {both[0]}; an append and an overwrite "
                "of one chunk go in two transactions"
            )


class Rewrite(Transaction):
    """A major compaction's transaction: it rewrites chunks with :meth:`rewrite` (at
    the compaction's granularity and target rows, only the chunks that hold data), and
    publishes as a rewrite (a ``MajorCompactionPlan``); on an upsert table
    (``upsert``: its definition) its records are resolved at publish, each copy showing
    exactly when the record it copies still would. ``columns``: those its commit adds
    to the table's schema (a rollup's count columns; ``table``'s schema has them)."""

    def __init__(
        self,
        table: TableHandle,
        upsert: UpsertSpec | None,
        metadata: dict[str, Any] | None = None,
        *,
        lock: str,
        interval: Interval,
        priority: int | None = None,
        wait_s: float | None = None,
        columns: tuple[pa.Field, ...] = (),
    ) -> None:
        super().__init__(
            table, metadata=metadata, lock=lock, interval=interval, priority=priority, wait_s=wait_s
        )
        self._rewrite = True
        self._upsert = upsert
        self._columns = columns

    def __enter__(self) -> Rewrite:
        self._begin()
        return self

    def rewrite(
        self,
        data: Any,
        iv: Interval | None,
        layout: tuple[Granularity, int],
        only: set[Interval] | None,
    ) -> None:
        """Overwrite ``iv`` with ``data`` in chunks of ``layout`` = (granularity, target
        rows per segment); only the chunks of ``only`` when given."""
        self._overwrite(data, iv, layout, only)

    def _plan(self) -> TransactionPlan:
        plan = super()._plan()
        assert isinstance(plan, MajorCompactionPlan)
        return dataclasses.replace(plan, columns=self._columns)
