"""Row-level changes: ``t.delete(where)``, ``t.update(where, set=...)`` and ``t.merge``
(:mod:`lamina.operations.rowlevel.merge`) — see docs/rowlevel.md.

One primitive, :func:`change`, serves them all on a plain table: it opens the commit,
reads the snapshot of its base, asks the operation which rows of which files to hide
and which rows to add (:class:`Decision`), and publishes both as one commit
(:class:`lamina.core.plans.RowLevelPlan`). The table's ``write.update.mode`` decides how
rows are hidden: deletion vectors (merge-on-read, the default), or the files holding
them rewritten without them (copy-on-write, with the machinery of copy-on-write
upserts). The commit conflicts with any commit that changed a file it read (ROWS in
:mod:`lamina.core.conflicts`); it is then made again, the predicate evaluated on the
newer snapshot (:func:`lamina.operations.retry.retrying`).

On an upsert table every row-level change is an upsert: a delete writes a tombstone
for each matched key (its latest record with the delete column set), an update writes
the updated records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lamina.core.args import whole_number
from lamina.core.interval import ETERNITY, Interval
from lamina.core.locks import first_locked
from lamina.core.model import Commit, CommitAction
from lamina.core.plans import RowLevelPlan
from lamina.core.properties import COPY_ON_WRITE, write_mode
from lamina.core.scan import ScanPlan
from lamina.errors import ChunkLayoutError, InvalidArgumentError, RowLevelError
from lamina.failpoints import failpoint
from lamina.meta.locks import replacing
from lamina.operations.compaction import copies_without
from lamina.operations.compaction.scope import candidates
from lamina.operations.handle import TableHandle
from lamina.operations.kinds import upserted, upserted_as_read
from lamina.operations.retry import MERGE_ATTEMPTS, retrying
from lamina.operations.rowlevel.matching import (
    Predicate,
    check_predicate,
    matching,
    with_values,
)
from lamina.operations.steps import producer, refinement

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from lamina.core.locks import Lock

#: attempts of a row-level change that lost to a concurrent commit (each evaluates its
#: predicate again on the newer snapshot)
ATTEMPTS = 5


@dataclass(frozen=True)
class Decision:
    """What a row-level change does to the snapshot it read: per file path (as planned)
    the positions of the rows it hides, the rows it adds (of the table's schema;
    None: none), and what its commit records of it."""

    hide: Mapping[str, np.ndarray]
    add: pa.Table | None = None
    summary: Mapping[str, object] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not any(len(p) for p in self.hide.values()) and (
            self.add is None or not self.add.num_rows
        )


Decide = Callable[[ScanPlan], Decision]


def base_plan(table: TableHandle, base_seq: int) -> ScanPlan:
    """The scan plan of the table's snapshot ``base_seq`` (its deletion vectors too):
    ``as_of`` takes the table version, which is that seq (not the commit id: ids count
    every table's commits, so the base read another version)."""
    if base_seq <= 0:
        return ScanPlan(table.record, 0, None, [])
    return table.scan(base_seq)


def change(
    table: TableHandle,
    action: CommitAction,
    decide: Decide,
    metadata: dict[str, Any] | None = None,
    attempts: int = ATTEMPTS,
) -> Commit | None:
    """One commit of a plain table doing what ``decide`` says of the snapshot it starts
    from (its base); None when it decides to do nothing (nothing is committed: it
    decides on the latest snapshot before it opens the commit, and again on the base
    if that is newer). Made again after
    a conflict with a concurrent commit that changed a file it read, up to
    ``attempts`` times. Rows it adds into a chunk a compaction cut finer (a day into
    hours) are written again split the way Druid allocates, as an append's are
    (:func:`lamina.operations.steps.refinement`). Raises CommitConflictError (the last
    conflict), RowLevelError, SchemaError, ChunkLayoutError."""
    from lamina.write import WriteTransaction  # loads numpy, pyarrow

    ctx = table.ctx
    refine: dict[Interval, Any] = {}  # found at the first try that needs it
    chunks: list[Interval] = []

    def attempt(i: int) -> Commit | None:
        try:
            return once(i)
        except ChunkLayoutError:
            if refine:
                raise
            refine.update(refinement(table, chunks))
            if not refine:
                raise
            return once(i)

    def once(i: int) -> Commit | None:
        meta = dict(metadata or {})
        plan = table.scan()  # decided before the commit opens: nothing to do, no commit
        got = decide(plan)
        if got.empty:
            return None
        failpoint("rowlevel.decided", table=table, attempt=i)  # its commit opens next
        with WriteTransaction(ctx, table.record, action, meta, inflight=True) as w:
            if w.base_seq != plan.seq:  # a commit came in between: decide on the base
                plan = base_plan(table, w.base_seq)
                got = decide(plan)
                if got.empty:
                    return None  # the commit aborts: nothing to publish
            files = []
            if got.add is not None and got.add.num_rows:
                make = producer(
                    table, got.add, CommitAction.APPEND.value, None, refine=refine or None
                )
                files = make(w.dir)
                chunks[:] = [f.chunk for f in files]
            publish = _plan(table, action, plan, got, files, w.dir)
            # decided and written; not published yet
            failpoint("rowlevel.before_publish", table=table, attempt=i)
            return w.publish(publish)

    return retrying(attempt, attempts, pause=True)


def _plan(
    table: TableHandle,
    action: CommitAction,
    plan: ScanPlan,
    got: Decision,
    files: list[Any],
    where: str,
) -> RowLevelPlan:
    """The publish plan of a decision: vectors, or (copy-on-write) the touched files
    rewritten under ``where`` without the rows it hides."""
    root = table.ctx.db.root + "/"
    read = tuple(sorted({str(t.segment.id) for t in plan.tasks}))
    hide = {p: np.asarray(rows, np.int64) for p, rows in got.hide.items() if len(rows)}
    hidden = {p.removeprefix(root): rows.tolist() for p, rows in hide.items()}
    runs: tuple[Any, ...] = ()
    if hide and write_mode(table.properties) == COPY_ON_WRITE:
        runs = _copies(table, hide, where)
    return RowLevelPlan(
        files=tuple(files),
        action=action,
        read=read,
        hidden=hidden,
        runs=runs,
        remove_ids=tuple(i for r in runs for i in r.inputs),
        summary=got.summary,
    )


def _copies(table: TableHandle, hide: dict[str, np.ndarray], where: str) -> tuple[Any, ...]:
    """Copy-on-write: the runs rewriting the visible files holding rows in ``hide``
    without them (merged with the small files beside them, as a copy-on-write upsert's
    are); a file that is not visible whole, or lies where another commit holds a
    REPLACE lock, is not copied (its vector hides the rows)."""
    ctx, tid = table.ctx, table.record.id

    def held(conn: Connection) -> list[Lock]:
        return replacing(conn, tid, 0, ETERNITY)

    locks = ctx.db.read(held)
    visible = candidates(table, None)[1]
    ids = {str(s.location): s.id for s in visible if s.location}
    drop = {ids[p]: rows for p, rows in hide.items() if p in ids}
    alone = {s.interval for s in visible if first_locked(locks, [s.interval]) is not None}
    return copies_without(table, where, visible, drop, alone)


def attempts_of(retries: int) -> int:
    """Attempts for ``retries`` retries. Raises InvalidArgumentError."""
    return whole_number(retries, "retries", InvalidArgumentError) + 1


# -- delete ----------------------------------------------------------------------------


def delete(
    table: TableHandle,
    where: Any,
    metadata: dict[str, Any] | None = None,
    retries: int = ATTEMPTS - 1,
) -> Commit | None:
    """Hide the rows ``where`` matches, in one commit (None: none matched, nothing
    committed). Raises RowLevelError, CommitConflictError, UpsertError."""
    pred = check_predicate(where)
    summary: dict[str, object] = {"operation": "DELETE", "predicate": str(pred)}
    attempts = attempts_of(retries)
    if table.is_upsert:
        return _upsert_delete(table, pred, metadata, summary)
    wh = table.ctx.warehouse

    def decide(plan: ScanPlan) -> Decision:
        found = matching(plan, wh, pred)
        return Decision(found.positions, None, {**summary, "deleted": found.count})

    return change(table, CommitAction.DELETE_ROWS, decide, metadata, attempts)


def _upsert_delete(
    table: TableHandle, where: Predicate, metadata: dict[str, Any] | None, summary: dict
) -> Commit | None:
    """An upsert table's delete: a tombstone per matched key, upserted."""
    spec = table.upsert_spec
    assert spec is not None
    if spec.delete_column is None:
        raise RowLevelError(
            f"upsert table {table.name!r} has no delete column: a delete writes a "
            "tombstone per matched key, which needs one (create the table with "
            "delete_column=...); nothing was changed"
        )
    found = matching(table.scan(), table.ctx.warehouse, where, rows=True)
    if not found.count:
        return None
    assert found.rows is not None
    rows = found.rows.select(table.schema.names)
    col = table.schema.field(spec.delete_column)
    marks = pa.array(np.ones(rows.num_rows, bool)).cast(col.type)
    rows = rows.set_column(rows.schema.get_field_index(col.name), col.name, marks)
    meta = {**(metadata or {}), "row_change": {**summary, "deleted": found.count}}
    return upserted(table, rows, meta, None)


# -- update ----------------------------------------------------------------------------


def check_values(table: TableHandle, values: Any, what: str = "set") -> dict[str, str]:
    """``values`` as {column: SQL expression}; on an upsert table no key column among
    them. Raises RowLevelError."""
    if not isinstance(values, Mapping) or not values:
        raise RowLevelError(
            f"{what}= takes a dict of column -> SQL expression, e.g. "
            f"{{'amount': 'amount * 2', 'status': \"'void'\"}}, not {values!r}"
        )
    out = {str(k): v for k, v in values.items()}
    spec = table.upsert_spec
    if spec is not None:
        keys = sorted(set(out) & set(spec.primary_key))
        if keys:
            raise RowLevelError(
                f"{what}= changes key column {keys[0]!r} of upsert table {table.name!r}: a "
                "record's key is what identifies it; delete the record and upsert one "
                "under the new key instead (nothing was changed)"
            )
    return out


def update(
    table: TableHandle,
    where: Any,
    values: Any,
    metadata: dict[str, Any] | None = None,
    retries: int = ATTEMPTS - 1,
) -> Commit | None:
    """Set columns of the rows ``where`` matches to SQL expressions of their values,
    in one commit: the rows hidden and written again, changed (None: none matched).
    Raises RowLevelError, CommitConflictError."""
    pred = check_predicate(where)
    sets = check_values(table, values)
    summary: dict[str, object] = {"operation": "UPDATE", "predicate": str(pred)}
    attempts = attempts_of(retries)
    wh = table.ctx.warehouse
    if table.is_upsert:

        def upsert_attempt(_: int) -> Commit | None:
            plan = table.scan()
            found = matching(plan, wh, pred, rows=True)
            if not found.count:
                return None
            assert found.rows is not None
            rows = with_values(found.rows, table.schema, sets)
            meta = {**(metadata or {}), "row_change": {**summary, "updated": found.count}}
            return upserted_as_read(table, rows, plan.seq, meta)

        return retrying(upsert_attempt, MERGE_ATTEMPTS, pause=True)

    def decide(plan: ScanPlan) -> Decision:
        found = matching(plan, wh, pred, rows=True)
        assert found.rows is not None
        rows = with_values(found.rows, plan.table.schema, sets)
        return Decision(found.positions, rows, {**summary, "updated": found.count})

    return change(table, CommitAction.UPDATE, decide, metadata, attempts)
