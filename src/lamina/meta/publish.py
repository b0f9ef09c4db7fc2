"""Publishing a write's files, and deleting segments: one catalog transaction each.

Private to the write path: :func:`publish` is called only by
:meth:`lamina.write.WriteTransaction.publish` (every write, transaction, push, upsert
and compaction publishes through it), and :func:`delete_segments` only by
``t.delete_segments``. Nothing else records a commit of files.

A publish runs in phases, each a function below: lock the table's row and check the
plan (:func:`lamina.meta.publish_checks.check`, the one place for conflict and lock
checks) → plan the new segments' identities (:mod:`lamina.core.planner` decides) →
resolve an upsert's records by key → record the commit through
:func:`lamina.meta.commits.record_commit` (and the columns a rollup adds to the schema:
:func:`lamina.meta.schemas.add_at`) → write the rows that go with it.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, bindparam, select, update

from lamina.core.interval import ETERNITY, Interval, from_us
from lamina.core.lineage import LineageEntry, LineageState, hidden_by, may_show
from lamina.core.locks import first_locked
from lamina.core.model import (
    Commit,
    CommitAction,
    CommitState,
    CompactedRun,
    NewSegment,
    TableRecord,
)
from lamina.core.planner import (
    append_segments,
    append_targets,
    carried_segments,
    compacted_segments,
    overshadowed,
    overwrite_segments,
    refuse_named,
    refuse_partial,
    restored_segments,
)
from lamina.core.plans import (
    CopyOnWritePlan,
    DeletePlan,
    PublishPlan,
    RestorePlan,
    RowLevelPlan,
)
from lamina.core.properties import ROWS_CHANGED_SEQ
from lamina.core.segment import Segment
from lamina.errors import CommitError, LineageError, RestoreError, TableNotFoundError
from lamina.failpoints import failpoint
from lamina.io.warehouse import Warehouse
from lamina.meta import app_txns
from lamina.meta import lineage as entries_rows
from lamina.meta import locks as lock_rows
from lamina.meta import publish_checks as checks
from lamina.meta.commits import Recorded, record_commit
from lamina.meta.conflicts import encode
from lamina.meta.db import Db
from lamina.meta.partition_ids import next_overwrite_pids
from lamina.meta.rows import segment_of, segment_values
from lamina.meta.schema import MAX_SPAN_US, commits, tables
from lamina.meta.schemas import add_at
from lamina.meta.segments import (
    chunk_versions,
    decore,
    existing,
    live_rows,
    live_segments,
    mark_removed,
    rows_by_id,
)
from lamina.meta.snapshots import resolve, shown_at
from lamina.meta.tables import lock_table

if TYPE_CHECKING:
    from lamina.meta.keyindex import KeyIndexes, Outcome

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
    """:func:`publish`'s transaction, phase by phase."""
    trow, plan, cleared = _lock_and_check(conn, db, table.id, commit_id, owner, plan)
    planned = _plan_identities(conn, table, commit_id, trow, plan, cleared)
    outcome = _resolve_upserts(conn, table, trow, plan, planned, wh, keys)
    action = plan.action_of(trow.action)
    done, meta = _record(conn, table.id, commit_id, trow, action, plan, planned)
    if plan.adds():  # a rollup's count columns: the schema changes with this commit
        add_at(conn, table.id, bytes(trow.schema_ipc), done.seq, plan.adds())
    _side_rows(conn, table.id, commit_id, plan, planned, outcome, done.seq)
    return Commit(
        id=commit_id,
        action=action,
        state=CommitState.COMPLETED.value,
        started_at=from_us(trow.started_at),
        completed_at=from_us(done.at_us),
        table=table.name,
        added=tuple(s.id for s in planned.new),
        removed=tuple(sorted(planned.removed)),
        metadata=meta,
        seq=done.seq,
        base_seq=trow.base_seq,
        inflight_at=Commit.time(trow.inflight_at),
    )


@dataclass
class _Planned:
    """What a publish plans, phase by phase: the lineage entry it writes under (its
    row), the table's entries and the segments they hide (read again by an append that
    finds the table has some after all), the new segments, the version it takes from
    the allocator (None: none), the segments it removes, and carried copies (original
    id -> copy id)."""

    entry: Any
    current: list[LineageEntry]
    hidden: set[str]
    lazy: bool  #: entries not read: a plain append's chunk query tells if there are any
    new: list[Segment] = field(default_factory=list)
    fresh: int | None = None
    removed: set[str] = field(default_factory=set)
    copies: dict[str, str] = field(default_factory=dict)
    #: a copy-on-write upsert's rewritten files (segment ids), in its footprint
    rewrote: list[str] = field(default_factory=list)


def _lock_and_check(
    conn: Connection, db: Db, table_id: int, commit_id: int, owner: str, plan: PublishPlan
) -> tuple[Any, PublishPlan, checks.Cleared]:
    """Lock the table's row, read it with the commit's, settle a copy-on-write
    upsert's rewrites, and refuse what may not publish."""
    trow = _lock_with_commit(db, conn, table_id, commit_id)
    if isinstance(plan, CopyOnWritePlan) and plan.runs:
        plan = _settled(conn, table_id, commit_id, plan)
    return trow, plan, checks.check(db, conn, trow, plan, commit_id, owner)


def _settled(
    conn: Connection, table_id: int, commit_id: int, plan: CopyOnWritePlan
) -> CopyOnWritePlan:
    """A copy-on-write upsert's plan without the rewrites it can no longer make: of
    files another commit removed meanwhile (a compaction, an overwrite), or lying where
    another commit holds a REPLACE or EXCLUSIVE lock (a major compaction, which
    carries the upsert's files and hides what it supersedes). Deletion vectors hide
    those records instead, as on a merge-on-read table."""
    ids = [i for r in plan.runs for i in r.inputs]
    live = existing(conn, table_id, ids)
    held = lock_rows.replacing(conn, table_id, commit_id, ETERNITY, unchecked=True)
    kept = [
        r
        for r in plan.runs
        if all(i in live for i in r.inputs) and first_locked(held, [r.chunk]) is None
    ]
    return plan if len(kept) == len(plan.runs) else plan.keeping(kept)


def _plan_identities(
    conn: Connection,
    table: TableRecord,
    commit_id: int,
    trow: Any,
    plan: PublishPlan,
    cleared: checks.Cleared,
) -> _Planned:
    """Give the new files their identities, and name the segments the commit removes."""
    planned = _Planned(
        cleared.entry, cleared.current or [], cleared.hidden, cleared.current is None
    )
    planned.removed |= cleared.removed
    version = int(trow.next_version)
    suffix = "" if plan.lineage is None else f"c{commit_id}"  # a push's: its own names
    chunks = plan.overwrites()
    if chunks is not None:
        _plan_overwrite(conn, table, plan, chunks, version, suffix, planned)
    if plan.appends():
        _plan_appends(conn, table, trow, plan.appends(), version, suffix, planned)
    _plan_runs(conn, table, plan.compacts(), planned)
    if isinstance(plan, RestorePlan):
        _plan_restore(conn, table, plan, version, planned)
    if isinstance(plan, (CopyOnWritePlan, RowLevelPlan)):  # rewrites, not appends
        planned.rewrote = [s.id for s in planned.new if s.minor_version > 0]
    _plan_carried(conn, table, commit_id, cleared.carry, planned)
    return planned


def _plan_overwrite(
    conn: Connection,
    table: TableRecord,
    plan: PublishPlan,
    chunks: tuple[Interval, ...],
    version: int,
    suffix: str,
    planned: _Planned,
) -> None:
    """An overwrite's new version over ``chunks``, and the live segments it retires."""
    entry, current = planned.entry, planned.current
    new = overwrite_segments(table.name, plan.files, chunks, version, suffix, entry is None)
    planned.new += new
    planned.fresh = version
    if not chunks or entry is not None:  # under an entry, the entry hides
        return
    span = _span(list(chunks))
    live = live_segments(conn, table.id, table.name, span, planned.hidden)
    while (wide := _span([span, *(s.interval for s in live)])) != span:
        span = wide  # a coarser segment sticks out: what hides the rest of it
        live = live_segments(conn, table.id, table.name, span, planned.hidden)  # counts
    gone = overshadowed(live, new)
    if plan.upsert is not None and not plan.rewrites:
        refuse_partial(live, gone, plan.remove_ids, chunks)
    if plan.rewrites:  # the sources a completed entry hides count: a rollback
        sources = _replaced_sources(conn, table, current, span)  # shows them
        held = {s.id for s in sources}
        retired = [s for s in overshadowed([*live, *sources], new) if s.id in held]
        # and a named segment the new version hides in part only (a MONTH one
        # under WEEK chunks): a rollback would leave the copies of its rows
        named = {i for e in current for i in e.ids}  # few: check only those
        partly = _in_part([s for s in live if s.id in named], new)
        refuse_named(gone + retired + partly, current)
    else:  # and the sources a completed entry hides: a rollback shows none
        gone += overshadowed(_replaced_sources(conn, table, current, span), new)
    planned.removed |= {s.id for s in gone}


def _plan_restore(
    conn: Connection, table: TableRecord, plan: RestorePlan, version: int, planned: _Planned
) -> None:
    """A restore's copies of what version ``plan.version`` showed, on versions from
    ``version`` up, and the live segments they replace: all that readers see now, and
    the sources a completed entry hides (a rollback shows none). Raises
    SnapshotTooOldError (retention deleted segments of that version meanwhile),
    RestoreError (a deletion vector hid rows of its files since)."""
    resolve(conn, table.id, table.name, plan.version)  # still readable, under the lock
    planned.current = entries_rows.entries(conn, table.id)
    planned.hidden = hidden_by(planned.current)
    planned.lazy = False
    copied = dict(plan.copies)  # their files shown by copies: no vector applies there
    shown = shown_at(conn, table.id, table.name, plan.version)
    files = [s.location for s in shown if s.location is not None and s.location not in copied]
    if files and table.is_upsert:
        raise RestoreError(
            f"table {table.name!r} is an upsert table: its key index cannot go back to an "
            "earlier version; nothing changed"
        )
    if files:
        from lamina.meta import deletes  # loads numpy, pyroaring

        hid = sorted(
            loc
            for loc, seqs in deletes.history(conn, table.id, files).items()
            if any(seq > plan.version for seq, _ in seqs)
        )
        if hid:
            raise RestoreError(  # a row-level change after the copies were made
                f"cannot restore version {plan.version} of {table.name!r} exactly: "
                f"deletion vectors hid rows of {len(hid)} of its files since (e.g. {hid[0]}); "
                "nothing changed: restore again"
            )
    copies, top = restored_segments(table.name, shown, version, copied)
    planned.new += copies
    planned.fresh = top if copies else planned.fresh
    live = live_segments(conn, table.id, table.name, ETERNITY, planned.hidden)
    sources = _replaced_sources(conn, table, planned.current, ETERNITY)
    planned.removed |= {s.id for s in live} | {s.id for s in sources}


def _plan_appends(
    conn: Connection,
    table: TableRecord,
    trow: Any,
    files: tuple[NewSegment, ...],
    version: int,
    suffix: str,
    planned: _Planned,
) -> None:
    """Appended files' partitions: in each chunk's visible version, or a new one."""
    chunks = sorted({f.chunk for f in files})
    span, longest = _span(chunks), int(trow.max_span_us)
    hidden = None if planned.lazy else planned.hidden
    found = chunk_versions(conn, table.id, table.name, span, hidden, longest)
    if found is None:  # the table has lineage entries after all
        planned.current = entries_rows.entries(conn, table.id)
        planned.hidden = hidden_by(planned.current)
        found = chunk_versions(conn, table.id, table.name, span, planned.hidden, longest)
    assert found is not None
    reps, next_pid = found
    # a chunk empty only while lineage hides its segments: join their version, so
    # that neither hides the other once both show (a push's end, a rollback)
    entry = planned.entry
    waiting = may_show(e for e in planned.current if entry is None or e.id != entry.id)
    pending_reps: list[Segment] = []
    if waiting & planned.hidden:
        hidden = planned.hidden - waiting
        more = chunk_versions(conn, table.id, table.name, span, hidden, longest)
        pending_reps = more[0] if more is not None else []
    targets, used_new = append_targets(chunks, reps, version, pending_reps)
    planned.fresh = version if used_new else planned.fresh
    planned.new += append_segments(table.name, files, targets, next_pid, suffix)


def _plan_runs(
    conn: Connection, table: TableRecord, runs: tuple[CompactedRun, ...], planned: _Planned
) -> None:
    """A minor compaction's outputs: runs of one chunk version take ids in turn."""
    next_pids = next_overwrite_pids(conn, table.id, [(r.chunk, r.version) for r in runs])
    for run in runs:
        key = (run.chunk, run.version)
        planned.new += compacted_segments(table.name, run, next_pids[key])
        next_pids[key] += len(run.files)


def _plan_carried(
    conn: Connection, table: TableRecord, commit_id: int, carry: list[str], planned: _Planned
) -> None:
    """Copies, on the overwrite's version, of the segments appended meanwhile it carries."""
    carry = [i for i in carry if i not in planned.hidden]  # an unfinished push stays hidden
    if not carry:
        return
    carried = [segment_of(r._mapping, table.name) for r in rows_by_id(conn, table.id, carry)]
    pairs = carried_segments(table.name, carried, planned.new, f"c{commit_id}")
    planned.new += [copy for _, copy in pairs]
    planned.copies = {orig.id: copy.id for orig, copy in pairs}


def _resolve_upserts(
    conn: Connection,
    table: TableRecord,
    trow: Any,
    plan: PublishPlan,
    planned: _Planned,
    wh: Warehouse | None,
    keys: KeyIndexes | None,
) -> Outcome | None:
    """Resolve an upsert's records by key against every commit before it (None: no upsert)."""
    if plan.upsert is None:
        return None
    if wh is None or keys is None:
        raise CommitError(
            "an upsert publishes with the table's warehouse and its catalog's key "
            "indexes; pass them"
        )
    locations = [f.location for f in plan.written()]
    kept = {s.location for s in planned.new}  # carried copies keep their files
    rewritten = {i for run in plan.compacts() for i in run.inputs}  # their rows move
    removed = rows_by_id(conn, table.id, sorted(planned.removed | rewritten))
    gone_files = {r.location for r in removed if r.location and r.segment_id not in rewritten}
    return keys.resolve(
        conn,
        table.with_schema(bytes(trow.schema_ipc)),  # the writer's handle may be older
        wh,
        plan.upsert,
        locations,
        int(trow.last_seq),
        gone_files - kept,
        _moves(plan, {r.location: int(r.row_count) for r in removed if r.location}),
    )


def _moves(plan: PublishPlan, rows: dict[str, int]) -> list[tuple[str, str, Any]]:
    """Where a copy-on-write upsert moves the rows of the files it rewrites: (old
    location, new location, per old row its new row or -1); ``rows``: each old file's
    row count."""
    import numpy as np  # loads numpy

    out = []
    for run in plan.compacts():
        for f, m in zip(run.files, run.row_maps, strict=True):
            for i, src in enumerate(m.sources):
                rmap = np.full(rows.get(src, 0), -1, np.int64)
                at = np.flatnonzero(m.source == i)
                rmap[m.row[at]] = at
                out.append((src, f.location, rmap))
    return out


def _record(
    conn: Connection,
    table_id: int,
    commit_id: int,
    trow: Any,
    action: str,
    plan: PublishPlan,
    planned: _Planned,
) -> tuple[Recorded, dict[str, Any]]:
    """Complete the commit with its segment rows and footprint; returns it and its metadata."""
    meta = json.loads(trow.commit_metadata)
    if plan.adds():
        meta["add_columns"] = [{"name": f.name, "type": str(f.type)} for f in plan.adds()]
    if isinstance(plan, RowLevelPlan):  # what it did, known once it read its rows
        meta["row_change"] = dict(plan.summary)
    entry = planned.entry
    shown: list[tuple[str, str]] = []  # the batch that ends its push shows all of it
    swapped: list[tuple[str, str]] = []
    if entry is not None:
        meta["lineage_entry"] = entry.id
        if plan.ends_entry:  # its lists as this commit leaves them (with ``new``)
            shown, swapped = [(entry.id, "to")], [(entry.id, "from")]
    done = record_commit(
        conn,
        trow,
        action,
        meta,
        commit_id=commit_id,
        next_version=planned.fresh + 1 if planned.fresh is not None else None,
        max_span=_longer_span(trow.max_span_us, planned.new),
        add=[_row(s, table_id) for s in planned.new],
        footprint=encode(
            plan.footprint,
            [entry.id] if entry is not None else [],
            plan.txn[0] if plan.txn is not None else None,
            shown,
            swapped,
            planned.rewrote,
            _hid_rows_of(conn, table_id, plan),
        ),
    )
    return done, meta


def _hid_rows_of(conn: Connection, table_id: int, plan: PublishPlan) -> list[str]:
    """The segments a row-level change hides rows of (by vectors, or in the files its
    copies replace)."""
    if not plan.hides():
        return []
    hidden = plan.hides()
    return [
        r.segment_id for r in rows_by_id(conn, table_id, list(plan.reads())) if r.location in hidden
    ]


def _rows_changed(conn: Connection, table_id: int, seq: int) -> None:
    """Mark the table as one whose snapshots from ``seq`` on may hide rows by deletion
    vectors (its first row-level change; see :data:`ROWS_CHANGED_SEQ`)."""
    raw = conn.execute(select(tables.c.properties).where(tables.c.id == table_id)).scalar_one()
    props = json.loads(raw) if raw else {}
    if ROWS_CHANGED_SEQ in props:
        return
    props[ROWS_CHANGED_SEQ] = str(seq)
    conn.execute(
        update(tables)
        .where(tables.c.id == table_id)
        .values(properties=json.dumps(props, sort_keys=True))
    )


def _side_rows(
    conn: Connection,
    table_id: int,
    commit_id: int,
    plan: PublishPlan,
    planned: _Planned,
    outcome: Outcome | None,
    seq: int,
) -> None:
    """Write what goes with the commit: deletion vectors, app version, locks, lineage, removals."""
    if outcome is not None:
        from lamina.meta import deletes  # loads numpy, pyroaring

        # the upsert is resolved; its deletion vectors are not written yet
        failpoint("publish.before_deletes", table_id=table_id, commit_id=commit_id)
        deletes.add(conn, table_id, seq, commit_id, outcome.hidden, outcome.tombstones)
    maps = [
        (f.location, m)
        for run in plan.compacts()
        if run.row_maps
        for f, m in zip(run.files, run.row_maps, strict=True)
    ]
    if maps:  # an upsert table's compaction: its outputs keep their rows' vectors
        from lamina.meta import deletes

        deletes.carry(conn, table_id, seq, commit_id, maps)
    if isinstance(plan, RowLevelPlan):  # a row-level change: its vectors
        from pyroaring import BitMap

        from lamina.meta import deletes  # loads numpy, pyroaring

        _rows_changed(conn, table_id, seq)
        vectors = {loc: BitMap(array("I", rows)) for loc, rows in plan.hides().items()}
        deletes.add(conn, table_id, seq, commit_id, vectors, {})
    if plan.txn is not None:
        app_txns.record(conn, table_id, *plan.txn, commit_id)
    if plan.locked:
        lock_rows.release(conn, commit_id)
    if planned.entry is not None:
        own = planned.fresh if plan.overwrites() is not None and planned.new else None
        got = entries_rows.add_written(conn, planned.entry, [s.id for s in planned.new], own)
        if plan.ends_entry:  # the push becomes visible with this very commit
            _complete(conn, table_id, planned.entry.id, got, planned.hidden, seq)
    if planned.copies:  # a copy stands where its original stood in every lineage list
        entries_rows.name_copies(conn, planned.current, planned.copies)
    if planned.removed:
        mark_removed(conn, table_id, planned.removed, seq, commit_id)
    if plan.remove_ids and not plan.compacts():  # deleted: the rest of a chunk stays
        decore(conn, table_id, plan.remove_ids)


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
    Raises SegmentNotFoundError, LineageError, CommitConflictError."""

    def txn(conn: Connection) -> Commit:
        trow = lock_table(db, conn, name)
        table_id = int(trow.id)
        checks.check(db, conn, trow, DeletePlan(tuple(ids)))
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
