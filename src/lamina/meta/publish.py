"""Publishing a commit's files, and removing segments: one transaction each.

The transaction locks the table, reads what the pure planner needs (live segments in
the span, lineage entries, free partition ids), checks what may refuse it
(:mod:`lamina.meta.publish_checks`), applies its plan and records the commit through
:func:`lamina.meta.commits.record_commit`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, bindparam, select

from lamina.core.interval import ETERNITY, Interval, from_us
from lamina.core.lineage import LineageState, hidden_by, may_show, protected
from lamina.core.model import Commit, CommitAction, CommitState, PublishPlan, TableRecord
from lamina.core.planner import (
    append_segments,
    append_targets,
    carried_segments,
    compacted_segments,
    overshadowed,
    overwrite_segments,
)
from lamina.core.segment import Segment
from lamina.errors import (
    CommitError,
    LineageEntryNotFoundError,
    LineageError,
    SegmentNotFoundError,
    TableNotFoundError,
)
from lamina.io.warehouse import Warehouse
from lamina.meta import app_txns
from lamina.meta import lineage as entries_rows
from lamina.meta import locks as lock_rows
from lamina.meta import publish_checks as checks
from lamina.meta.commits import record_commit
from lamina.meta.conflicts import encode
from lamina.meta.db import Db
from lamina.meta.partition_ids import next_overwrite_pids
from lamina.meta.rows import segment_of, segment_values
from lamina.meta.schema import MAX_SPAN_US, commits, tables
from lamina.meta.segments import (
    chunk_versions,
    decore,
    existing,
    live_ids,
    live_rows,
    live_segments,
    mark_removed,
    rows_by_id,
)
from lamina.meta.tables import lock_table

if TYPE_CHECKING:
    from lamina.meta.keyindex import KeyIndexes

_joined = tables.outerjoin(
    commits, and_(commits.c.id == bindparam("cid"), commits.c.table_id == tables.c.id)
)
_TABLE_AND_COMMIT = (
    select(
        tables.c.id,
        tables.c.last_seq,
        tables.c.next_version,
        tables.c.max_span_us,
        tables.c.schema_ipc,
        commits.c.action,
        commits.c.owner,
        commits.c.state.label("commit_state"),
        commits.c.metadata.label("commit_metadata"),
        commits.c.started_at,
        commits.c.base_seq,
        commits.c.inflight_at,
    )
    .select_from(_joined)
    .where(tables.c.id == bindparam("tid"))
)
_LOCK_WITH_COMMIT = {  # NO KEY UPDATE: see meta.tables._LOCK
    True: _TABLE_AND_COMMIT,
    False: _TABLE_AND_COMMIT.with_for_update(of=tables, key_share=True),
}


def _lock_with_commit(db: Db, conn: Connection, table_id: int, commit_id: int) -> Any:
    """Lock the table's row; read it with the commit's row, in one round trip (the
    commit's state is checked again where it changes). Raises TableNotFoundError."""
    row = conn.execute(_LOCK_WITH_COMMIT[db.sqlite], {"tid": table_id, "cid": commit_id}).first()
    if row is None:
        raise TableNotFoundError(f"table id {table_id} was dropped meanwhile")
    return row


def _span(chunks: list[Interval]) -> Interval:
    return Interval.of(min(c.start for c in chunks), max(c.end for c in chunks))


def publish(
    db: Db,
    table: TableRecord,
    commit_id: int,
    owner: str,
    plan: PublishPlan,
    wh: Warehouse | None = None,
    keys: KeyIndexes | None = None,
) -> Commit:
    """Assign identities to the new files and make them visible, atomically.
    ``owner``: the token the commit was opened with; ``wh``: where the table's files
    are (an upsert reads the records it resolves against); ``keys``: the catalog's key
    indexes (an upsert resolves against the table's).

    Raises CommitError (the commit was aborted meanwhile, or segments it removes are
    gone), LineageError (its lineage entry was cleaned up, or it removes held segments),
    LaminaError (an append into a chunk of several versions), UpsertError.
    """
    if plan.upsert is None:
        return db.write(lambda conn: _publish(conn, db, table, commit_id, owner, plan, None, None))
    try:
        return db.write(lambda conn: _publish(conn, db, table, commit_id, owner, plan, wh, keys))
    except BaseException:
        if keys is not None:
            keys.forget(table.id)  # it may hold what did not commit
        raise


def _publish(
    conn: Connection,
    db: Db,
    table: TableRecord,
    commit_id: int,
    owner: str,
    plan: PublishPlan,
    wh: Warehouse | None,
    keys: KeyIndexes | None,
) -> Commit:
    """:func:`publish`'s transaction."""

    trow = _lock_with_commit(db, conn, table.id, commit_id)
    if trow.commit_state != CommitState.INFLIGHT.value or trow.owner != owner:
        state = trow.commit_state if trow.owner == owner else "missing"
        raise CommitError(
            f"commit {commit_id} cannot be published: it is {state} (another writer "
            "took over after its heartbeat expired?); nothing was published, retry"
        )
    version = int(trow.next_version)
    action = plan.action or trow.action
    covered = checks.held_locks(conn, commit_id) if plan.locked else []
    if plan.rewrite:  # rows read at the base: any concurrent change refuses it
        covered = []
    if plan.txn is not None:  # first: a twin that published this version wins, not conflicts
        app_txns.check(conn, table.id, *plan.txn)
    checks.outside_locks(conn, table.id, commit_id, plan, covered)
    carry = checks.check_conflicts(conn, table.id, commit_id, trow, action, plan, covered)
    entry = None
    if plan.lineage_entry is not None:
        try:
            entry = entries_rows.entry_row(db, conn, table.id, plan.lineage_entry)
        except LineageEntryNotFoundError:
            raise LineageEntryNotFoundError(
                f"lineage entry {plan.lineage_entry} of this push is gone: retention "
                "removes an unfinished push older than the table's lineage_cleanup_retention "
                "(or another push with force_cleanup reverted it, and retention ran); "
                "nothing was published — push again, or raise lineage_cleanup_retention"
            ) from None
        if entry.state != LineageState.IN_PROGRESS.value:
            raise LineageError(
                f"lineage entry {entry.id} is {entry.state}: the push under it was "
                "cleaned up (by a newer push or retention); nothing was published"
            )
    # the common append reads no lineage entries unless the table has some
    lazy = (
        entry is None and plan.overwrite is None and not plan.remove_ids and not plan.append_files
    )
    current = [] if lazy else entries_rows.entries(conn, table.id)  # after the lock
    # a push's own earlier batches count as visible when planning its next one
    hidden = hidden_by(e for e in current if entry is None or e.id != entry.id)
    held = protected(current)
    removed: set[str] = set()
    fresh: int | None = None
    if plan.overwrite is not None:
        new = overwrite_segments(
            table.name, plan.files, plan.overwrite, version, plan.suffix, entry is None
        )
        fresh = version
        if plan.overwrite and entry is None:  # under an entry, the entry hides
            span = _span(list(plan.overwrite))
            live = live_segments(conn, table.id, table.name, span, hidden)
            while (wide := _span([span, *(s.interval for s in live)])) != span:
                span = wide  # a coarser segment sticks out: what hides the rest of it
                live = live_segments(conn, table.id, table.name, span, hidden)  # counts
            gone = overshadowed(live, new)
            if plan.upsert is not None and not plan.rewrite:
                checks.refuse_partial(live, gone, plan.remove_ids, plan.overwrite)
            if plan.rewrite:  # the sources a completed entry hides count: a rollback
                sources = _replaced_sources(conn, table, current, span)  # shows them
                held = {s.id for s in sources}
                retired = [s for s in overshadowed([*live, *sources], new) if s.id in held]
                # and a named segment the new version hides in part only (a MONTH one
                # under WEEK chunks): a rollback would leave the copies of its rows
                named = {i for e in current for i in e.ids}  # few: check only those
                partly = _in_part([s for s in live if s.id in named], new)
                checks.check_unnamed(gone + retired + partly, current)
            else:  # and the sources a completed entry hides: a rollback shows none
                gone += overshadowed(_replaced_sources(conn, table, current, span), new)
            removed = {s.id for s in gone}
    else:
        new = []
    appends = plan.files if plan.overwrite is None else plan.append_files
    if appends:
        chunks = sorted({f.chunk for f in appends})
        span, longest = _span(chunks), int(trow.max_span_us)
        found = chunk_versions(conn, table.id, table.name, span, None if lazy else hidden, longest)
        if found is None:  # the table has lineage entries after all
            current = entries_rows.entries(conn, table.id)
            hidden = hidden_by(current)
            found = chunk_versions(conn, table.id, table.name, span, hidden, longest)
        assert found is not None
        reps, next_pid = found
        # a chunk empty only while lineage hides its segments: join their version, so
        # that neither hides the other once both show (a push's end, a rollback)
        waiting = may_show(e for e in current if entry is None or e.id != entry.id)
        pending_reps: list[Segment] = []
        if waiting & hidden:
            more = chunk_versions(conn, table.id, table.name, span, hidden - waiting, longest)
            pending_reps = more[0] if more is not None else []
        targets, used_new = append_targets(chunks, reps, version, pending_reps)
        fresh = version if used_new else fresh
        new += append_segments(table.name, appends, targets, next_pid, plan.suffix)
    # runs of one chunk version take ids in turn
    next_pids = next_overwrite_pids(conn, table.id, [(r.chunk, r.version) for r in plan.compacted])
    for run in plan.compacted:
        key = (run.chunk, run.version)
        new += compacted_segments(table.name, run, next_pids[key])
        next_pids[key] += len(run.files)
    carry = [i for i in carry if i not in hidden]  # an unfinished push stays hidden
    copies: dict[str, str] = {}
    if carry:
        carried = [segment_of(r._mapping, table.name) for r in rows_by_id(conn, table.id, carry)]
        pairs = carried_segments(table.name, carried, new, plan.suffix or f"c{commit_id}")
        new += [copy for _, copy in pairs]
        copies = {orig.id: copy.id for orig, copy in pairs}
    if plan.remove_ids:
        removed |= checks.check_removable(conn, table.id, plan.remove_ids, hidden, held)
    outcome = None
    if plan.upsert is not None:  # resolved by key against every commit before it
        if wh is None or keys is None:
            raise CommitError(
                "an upsert publishes with the table's warehouse and its catalog's key "
                "indexes; pass them"
            )
        locations = [f.location for f in (*plan.files, *plan.append_files)]
        kept = {s.location for s in new}  # carried copies keep their files
        gone_files = {
            r.location for r in rows_by_id(conn, table.id, sorted(removed)) if r.location
        } - kept
        outcome = keys.resolve(
            conn,
            table.with_schema(bytes(trow.schema_ipc)),  # the writer's handle may be older
            wh,
            plan.upsert,
            locations,
            int(trow.last_seq),
            gone_files,
        )
    meta = json.loads(trow.commit_metadata)
    shown: list[tuple[str, str]] = []  # the batch that ends its push shows all of it
    swapped: list[tuple[str, str]] = []
    if entry is not None:
        meta["lineage_entry"] = entry.id
        if plan.complete_entry:  # its lists as this commit leaves them (with ``new``)
            shown, swapped = [(entry.id, "to")], [(entry.id, "from")]
    done = record_commit(
        conn,
        trow,
        action,
        meta,
        commit_id=commit_id,
        next_version=version + 1 if fresh is not None else None,
        max_span=_longer_span(trow.max_span_us, new),
        add=[_row(s, table.id) for s in new],
        footprint=encode(
            plan.footprint,
            [entry.id] if entry is not None else [],
            plan.txn[0] if plan.txn is not None else None,
            shown,
            swapped,
        ),
    )
    if outcome is not None:
        from lamina.meta import deletes

        deletes.add(conn, table.id, done.seq, commit_id, outcome.hidden, outcome.tombstones)
    maps = [
        (f.location, m)
        for run in plan.compacted
        if run.row_maps
        for f, m in zip(run.files, run.row_maps, strict=True)
    ]
    if maps:  # an upsert table's compaction: its outputs keep their rows' vectors
        from lamina.meta import deletes

        deletes.carry(conn, table.id, done.seq, commit_id, maps)
    if plan.txn is not None:
        app_txns.record(conn, table.id, *plan.txn, commit_id)
    if plan.locked:
        lock_rows.release(conn, commit_id)
    if entry is not None:
        own = fresh if plan.overwrite is not None and new else None
        got = entries_rows.add_written(conn, entry, [s.id for s in new], own)
        if plan.complete_entry:  # the push becomes visible with this very commit
            _complete(conn, table.id, entry.id, got, hidden, done.seq)
    if copies:  # a copy stands where its original stood in every lineage list
        entries_rows.name_copies(conn, current, copies)
    if removed:
        mark_removed(conn, table.id, removed, done.seq, commit_id)
    if plan.remove_ids and not plan.compacted:  # deleted: the rest of a chunk stays
        decore(conn, table.id, plan.remove_ids)
    return Commit(
        id=commit_id,
        action=action,
        state=CommitState.COMPLETED.value,
        started_at=from_us(trow.started_at),
        completed_at=from_us(done.at_us),
        table=table.name,
        added=tuple(s.id for s in new),
        removed=tuple(sorted(removed)),
        metadata=meta,
        seq=done.seq,
        base_seq=trow.base_seq,
        inflight_at=Commit.time(trow.inflight_at),
    )


def _longer_span(current: int, new: list[Segment]) -> int | None:
    """The table's new longest segment span, if ``new`` holds a longer one."""
    longest = max((s.interval.end - s.interval.start for s in new), default=0)
    longest = min(longest, MAX_SPAN_US)
    return longest if longest > current else None


def _row(seg: Segment, table_id: int) -> dict[str, object]:
    return {**segment_values(seg), "table_id": table_id}


def _in_part(live: list[Segment], new: list[Segment]) -> list[Segment]:
    """The ``live`` segments a newer segment among ``new`` overlaps."""
    return [
        s
        for s in live
        if any(n.version > s.version and n.interval.overlaps(s.interval) for n in new)
    ]


def _replaced_sources(
    conn: Connection, table: TableRecord, current: list[Any], span: Interval
) -> list[Segment]:
    """The live segments in ``span`` that a completed lineage entry hides as its
    sources (kept so that rolling the entry back shows them again)."""
    held = {i for e in current if e.state == LineageState.COMPLETED for i in e.segments_from}
    if not held:
        return []
    return [
        segment_of(r._mapping, table.name)
        for r in live_rows(conn, table.id, span)
        if r.segment_id in held
    ]


def _complete(
    conn: Connection,
    table_id: int,
    entry_id: str,
    got: dict[tuple[str, str], list[str]],
    hidden: set[str],
    seq: int,
) -> None:
    """End the entry in the commit that publishes its last batch. Raises LineageError."""
    wanted = got.get((entry_id, "from"), [])
    live = existing(conn, table_id, wanted)
    gone = [i for i in wanted if i in hidden or i not in live]
    if gone:
        raise LineageError(f"cannot end {entry_id}: segments_from no longer exist: {gone[:5]}")
    entries_rows.set_state(conn, entry_id, LineageState.COMPLETED, completed_seq=seq)
    decore(conn, table_id, wanted)  # hidden now: the rest of their chunks stays visible


def delete_segments(db: Db, name: str, ids: list[str]) -> Commit:
    """Remove live segments in one commit (files go with retention).
    Raises SegmentNotFoundError, LineageError."""

    def txn(conn: Connection) -> Commit:
        trow = lock_table(db, conn, name)
        table_id = int(trow.id)
        live = live_ids(conn, table_id)
        unknown = [i for i in ids if i not in live]
        if unknown:
            raise SegmentNotFoundError(
                f"cannot delete unknown or already deleted segments {unknown[:5]}; "
                "list them with t.segments(all=True)"
            )
        held = sorted(set(ids) & protected(entries_rows.entries(conn, table_id)))
        if held:
            raise LineageError(
                f"segments {held[:5]} are held by a lineage entry (IN_PROGRESS, or replaced "
                "by a COMPLETED one that can still be rolled back); end or revert it first"
            )
        locked = lock_rows.replacing(conn, table_id, 0, ETERNITY, unchecked=True)
        if locked:
            gone = [Interval.of(r.start_us, r.end_us) for r in rows_by_id(conn, table_id, ids)]
            checks.refuse_in_locks(locked, gone, "this delete")
        done = record_commit(conn, trow, CommitAction.DELETE, {"segments": ids})
        mark_removed(conn, table_id, ids, done.seq, done.id)
        decore(conn, table_id, ids)  # the rest of a chunk stays visible
        when = from_us(done.at_us)
        return Commit(
            done.id,
            CommitAction.DELETE,
            CommitState.COMPLETED,
            when,
            when,
            name,
            removed=tuple(sorted(ids)),
            metadata={"segments": ids},
            seq=done.seq,
            inflight_at=when,
        )

    return db.write(txn)
