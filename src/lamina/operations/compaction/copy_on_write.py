"""Copy-on-write upserts (``write.update.mode = copy-on-write``): an upsert rewrites,
in its own commit, the files holding the records it supersedes, so that readers find
no deletion vector to apply there (Iceberg's copy-on-write updates, Hudi's COW tables).

It writes its files as any upsert does; then, before it publishes, it asks the key
index which stored records it will supersede (:meth:`KeyIndexes.superseded_by`) and
rewrites each file holding some, less those records and the ones superseded already,
as a minor compaction of that file's root range would. The upsert publishes as one
commit: its files appended, its records resolved by key, the rewritten files
replacing theirs (:class:`lamina.core.plans.CopyOnWritePlan`). A record superseded
once stays superseded, so what the rewrite left out is hidden at publish whatever
published meanwhile; what other upserts hid in those files meanwhile is carried onto
the copies as vectors (their row maps); a file another commit removed or locked
meanwhile is not replaced (vectors hide its records, as on a merge-on-read table).
No lock is taken: concurrent upserts all publish."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lamina.core.interval import ETERNITY
from lamina.core.locks import first_locked
from lamina.core.plans import CopyOnWritePlan, PublishPlan, UpsertPlan
from lamina.core.properties import COPY_ON_WRITE, write_mode
from lamina.errors import LaminaError
from lamina.failpoints import failpoint
from lamina.meta.locks import replacing
from lamina.meta.segments import rows_by_id
from lamina.operations.compaction import copies_without
from lamina.operations.compaction.scope import candidates

log = logging.getLogger("lamina")

if TYPE_CHECKING:
    import numpy as np
    from sqlalchemy import Connection

    from lamina.core.locks import Lock
    from lamina.core.model import Commit
    from lamina.operations.handle import TableHandle


def applies(table: TableHandle) -> bool:
    """Whether the table's upserts copy on write. Raises PropertyError."""
    return table.is_upsert and write_mode(table.properties) == COPY_ON_WRITE


def finisher(table: TableHandle) -> CopyOnWrite | None:
    """The last step of the table's upserts, or None when they do not copy on write.
    Raises PropertyError."""
    return CopyOnWrite(table) if applies(table) else None


@dataclass(frozen=True)
class CopyOnWrite:
    """A copy-on-write upsert's last step (:class:`lamina.operations.steps.Finish`)."""

    table: TableHandle

    def __call__(self, plan: PublishPlan, where: str) -> PublishPlan:
        return finish(self.table, plan, where)

    def published(self, plan: PublishPlan, commit: Commit) -> None:
        """Delete the copies the publish left out (their inputs went meanwhile): they
        would be orphans. Best effort: what stays is retention's."""
        made = {f.location for r in plan.compacts() for f in r.files}
        if not made:
            return
        ctx, tid = self.table.ctx, self.table.record.id
        rows = ctx.db.read(lambda conn: rows_by_id(conn, tid, list(commit.added)))
        unused = sorted(made - {r.location for r in rows})
        if unused:
            try:
                ctx.delete_files(unused)
            except (OSError, LaminaError) as exc:
                log.warning("could not delete unused copies %s (%s): retention will", unused, exc)


def finish(table: TableHandle, plan: PublishPlan, where: str) -> PublishPlan:
    """An upsert's ``plan`` with the rewrites of the files it supersedes records in,
    written under ``where`` (its commit's directory); ``plan`` as it is for anything
    else. Raises UpsertError, CompactionError."""
    if not isinstance(plan, UpsertPlan) or plan.remove_ids or not applies(table):
        return plan
    ctx = table.ctx
    rec, wh = table.record, ctx.warehouse

    def read(conn: Connection) -> tuple[dict[str, np.ndarray], list[Lock]]:
        hit = ctx.keys.superseded_by(conn, rec, wh, plan.upsert)
        return hit, replacing(conn, rec.id, 0, ETERNITY) if hit else []

    hit, held = ctx.db.read(read)
    if not hit:
        return plan
    root = ctx.db.root + "/"
    visible = candidates(table, None)[1]
    ids = {str(s.location).removeprefix(root): s.id for s in visible if s.location}
    # a file not visible whole (a lineage entry's?) is not copied: vectors hide its rows
    drop = {ids[loc]: rows for loc, rows in hit.items() if loc in ids}
    alone = {s.interval for s in visible if first_locked(held, [s.interval]) is not None}
    runs = copies_without(table, where, visible, drop, alone)
    failpoint("upsert.copy_on_write.rewritten", table=table, runs=runs)
    return CopyOnWritePlan(
        files=plan.files,
        txn=plan.txn,
        upsert=plan.upsert,
        lineage=plan.lineage,
        columns=plan.columns,
        runs=runs,
        remove_ids=tuple(i for r in runs for i in r.inputs),
    )
