"""Lineage entry rows and their transitions: start, end, revert.

The rules live in :mod:`lamina.core.lineage`; these functions read the rows the
rules need and apply the outcome, each in one transaction. Every transition is
recorded as a commit through :func:`lamina.meta.commits.record_commit`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Connection,
    and_,
    delete,
    func,
    insert,
    literal,
    select,
    update,
)

from lamina.core.interval import Interval
from lamina.core.lineage import (
    LineageEntry,
    LineageState,
    LineageView,
    check_end,
    check_revert,
    check_rollback_intact,
    check_start,
    hidden_by,
    may_show,
)
from lamina.core.model import CommitAction
from lamina.core.planner import hidden_by_newer
from lamina.core.plans import LineagePlan
from lamina.errors import LineageEntryNotFoundError, LineageError, LineageRequestError
from lamina.meta.commits import record_commit
from lamina.meta.conflicts import encode, keep_lists
from lamina.meta.db import Db
from lamina.meta.lineage_lists import entries, entry_row, lists, put_list
from lamina.meta.publish_checks import check
from lamina.meta.rows import segment_of
from lamina.meta.schema import commits, lineage, lineage_ids, segments
from lamina.meta.segments import (
    decore,
    decore_plan,
    delete_rows,
    existing,
    live_ids,
    live_rows,
    overlapping,
    purge_before,
    rows_by_id,
)
from lamina.meta.tables import lock_table, now_us, read_table

if TYPE_CHECKING:
    from lamina.meta.commits import Recorded

# -- entry rows ---------------------------------------------------------------------


def _record_commit(
    db: Db, conn: Connection, row: Any, plan: LineagePlan, metadata: dict[str, Any]
) -> Recorded:
    """:func:`lamina.meta.commits.record_commit` of a lineage transition, once
    :func:`lamina.meta.publish_checks.check` let it through; its footprint: the entries
    it moved and the lists it showed and swapped (see
    :func:`lamina.meta.conflicts.encode`). Both imported by the first write (reading
    lineage needs none of the commit modules)."""

    check(db, conn, row, plan)
    footprint = encode(lineage=plan.moved, shown=plan.shown, swapped=plan.swapped)
    return record_commit(conn, row, plan.action, metadata, footprint=footprint)


def set_state(conn: Connection, entry_id: str, state: LineageState, **seqs: int) -> None:
    """Move an entry to ``state``, stamping the seq of the transition."""
    conn.execute(
        update(lineage)
        .where(lineage.c.id == entry_id)
        .values(state=state.value, timestamp=now_us(), **seqs)
    )


def drop_entry(conn: Connection, entry_id: str) -> None:
    """Delete an entry and its id lists (its commits stay in the history, their
    footprints with the ids of the lists they named)."""

    row = conn.execute(
        select(lineage.c.table_id, lineage.c.completed_seq, lineage.c.reverted_seq).where(
            lineage.c.id == entry_id
        )
    ).first()
    if row is not None:
        keep_lists(conn, int(row.table_id), entry_id, (row.completed_seq, row.reverted_seq))
    conn.execute(delete(lineage_ids).where(lineage_ids.c.entry_id == entry_id))
    conn.execute(delete(lineage).where(lineage.c.id == entry_id))


def drop_dangling(
    conn: Connection, all_entries: Iterable[LineageEntry], gone: set[str]
) -> set[str]:
    """Drop COMPLETED entries that lost segments: their from (a rollback could not
    bring them back) or their to (the data they published no longer exists)."""
    dropped = set()
    for e in all_entries:
        if e.state == LineageState.COMPLETED and (
            gone & set(e.segments_from) or gone & set(e.segments_to)
        ):
            drop_entry(conn, e.id)
            dropped.add(e.id)
    return dropped


def add_written(
    conn: Connection, entry: Any, new_ids: list[str], fresh_version: int | None
) -> dict[tuple[str, str], list[str]]:
    """Segments a commit wrote under ``entry`` join its segments_to; a fresh version
    becomes one only it uses. Returns the entry's id lists as they were."""
    got = lists(conn, [entry.id])
    put_list(conn, entry.id, "to", [*got.get((entry.id, "to"), []), *new_ids])
    own = json.loads(entry.own_versions)
    if fresh_version is not None:
        own.append(fresh_version)
    conn.execute(
        update(lineage)
        .where(lineage.c.id == entry.id)
        .values(to_count=entry.to_count + len(new_ids), own_versions=json.dumps(own))
    )
    return got


def name_copies(conn: Connection, current: Iterable[LineageEntry], copies: dict[str, str]) -> None:
    """A replace carried segments (original id -> copy id, the same file) onto its
    version: each copy joins the lists that name its original where the entry still
    decides what shows — an entry in progress's segments_from, a completed entry's
    segments_to — so the entry's end or rollback hides the copy with the original."""
    for e in current:
        role, ids = {
            LineageState.IN_PROGRESS: ("from", e.segments_from),
            LineageState.COMPLETED: ("to", e.segments_to),
        }.get(LineageState(e.state), ("", ()))
        named = [copies[i] for i in ids if i in copies]
        if named:
            put_list(conn, e.id, role, [*ids, *named])


# -- transitions --------------------------------------------------------------------


def list_entries(db: Db, name: str) -> list[LineageEntry]:
    """The table's lineage entries (oldest first). Raises TableNotFoundError."""
    return db.read(lambda conn: entries(conn, read_table(conn, name).id))


def start_replace(
    db: Db,
    name: str,
    segments_from: list[str],
    segments_to: list[str],
    force_cleanup: bool = False,
    replace_live: Interval | None = None,
) -> tuple[str, list[str]]:
    """Open an IN_PROGRESS entry. Returns its id and files that are now garbage
    (to-segments of entries cleaned up, the snapshot before the previous one).

    ``replace_live``: segments_from = every live segment overlapping it, read in
    this same transaction (what a refresh replaces). Raises LineageError.
    """

    def txn(conn: Connection) -> tuple[str, list[str]]:
        trow = lock_table(db, conn, name)
        table_id = int(trow.id)
        current = entries(conn, table_id)
        view = LineageView(live_ids(conn, table_id), current)
        from_ids = segments_from
        if replace_live is not None:
            hidden = hidden_by(current)
            from_ids = [
                r.segment_id
                for r in live_rows(conn, table_id, replace_live)
                if r.segment_id not in hidden
            ]
        conflicts = check_start(view, name, from_ids, segments_to)
        if conflicts and not force_cleanup:
            raise LineageError(
                f"segments overlap IN_PROGRESS entries {[e.id for e in conflicts]}; end or "
                "revert them, or pass force_cleanup=True to revert them and delete what "
                "they wrote"
            )
        entry_id = uuid.uuid4().hex
        meta = {"entry": entry_id, "segments_from": from_ids, "segments_to": segments_to}
        # its footprint: the entries it reverts (a new entry clobbers no writer)
        plan = LineagePlan(CommitAction.START_REPLACE, entry_id, tuple(e.id for e in conflicts))
        seq = _record_commit(db, conn, trow, plan, meta).seq
        garbage: list[str] = []
        for e in conflicts:  # force_cleanup: revert, delete what they wrote
            set_state(conn, e.id, LineageState.REVERTED, reverted_seq=seq)
            garbage += delete_rows(conn, table_id, set(e.segments_to))
        # a REFRESH table keeps at most two snapshots: when a forced push replaces
        # exactly what a completed one published, the snapshot that one replaced goes
        # now (Pinot's proactive cleanup; otherwise retention deletes it in its time)
        new_from = set(from_ids)
        refresh = json.loads(trow.properties).get("ingestion_type", "APPEND") == "REFRESH"
        dropped: set[str] = set()
        for e in current:
            if (
                force_cleanup
                and refresh
                and e.state == LineageState.COMPLETED
                and set(e.segments_to) == new_from
                and len(e.segments_to) == len(new_from)
                and e.segments_from
            ):
                gone = set(e.segments_from)
                garbage += delete_rows(conn, table_id, gone)
                done = entry_row(db, conn, table_id, e.id, lineage.c.completed_seq)
                purge_before(conn, table_id, int(done.completed_seq))
                dropped |= drop_dangling(conn, current, gone)
        for e in current:  # the chain: entries whose segments_to this one replaces
            if (
                e.id not in dropped
                and e.state != LineageState.REVERTED
                and set(e.segments_to) & new_from
            ):
                row = entry_row(db, conn, table_id, e.id, lineage.c.successors)
                conn.execute(
                    update(lineage)
                    .where(lineage.c.id == e.id)
                    .values(successors=json.dumps([*json.loads(row.successors), entry_id]))
                )
        conn.execute(
            insert(lineage).values(
                id=entry_id,
                table_id=table_id,
                state=LineageState.IN_PROGRESS.value,
                timestamp=now_us(),
                started_seq=seq,
                successors="[]",
                to_count=0,
                own_versions="[]",
            )
        )
        put_list(conn, entry_id, "from", list(from_ids))
        put_list(conn, entry_id, "to", list(segments_to))
        put_list(conn, entry_id, "decore", decore_plan(conn, table_id, from_ids))
        if segments_to:
            put_list(conn, entry_id, "expected", list(segments_to))
        return entry_id, garbage

    return db.write(txn)


def _lock_with_entry(db: Db, conn: Connection, name: str, entry_id: str) -> Any:
    """Lock the table's row, then read one lineage entry (a statement of its own, so
    it sees what a concurrent transition that held the lock wrote).
    Raises TableNotFoundError, LineageEntryNotFoundError."""
    trow = lock_table(db, conn, name)
    expected, planned = lineage_ids.alias("expected"), lineage_ids.alias("planned")
    joined = lineage.outerjoin(
        expected, and_(expected.c.entry_id == lineage.c.id, expected.c.role == "expected")
    ).outerjoin(planned, and_(planned.c.entry_id == lineage.c.id, planned.c.role == "decore"))
    row = conn.execute(
        select(
            literal(int(trow.id)).label("id"),
            literal(int(trow.last_seq)).label("last_seq"),
            lineage.c.id.label("entry"),
            lineage.c.state,
            lineage.c.to_count,
            lineage.c.successors,
            lineage.c.own_versions,
            expected.c.ids.label("expected"),
            planned.c.ids.label("decore"),
        )
        .select_from(joined)
        .where(lineage.c.table_id == trow.id, lineage.c.id == entry_id)
    ).first()
    if row is None:
        raise LineageEntryNotFoundError(
            f"no lineage entry {entry_id!r} in this table; list them with t.lineage()"
        )
    return row


def end_replace(db: Db, name: str, entry_id: str, segments_to: list[str] | None = None) -> None:
    """COMPLETED (idempotent): a few row reads and writes, whatever the number of
    segments. ``segments_to``: of the names given at start, those the end still waits
    for (Pinot's end with a subset: the others are given up). Raises LineageError,
    LineageEntryNotFoundError."""

    def txn(conn: Connection) -> None:
        row = _lock_with_entry(db, conn, name, entry_id)
        expected = json.loads(row.expected) if row.expected else []
        if segments_to is not None and row.state == LineageState.IN_PROGRESS.value:
            expected = _keep_named(conn, row.entry, expected, segments_to)
        unwritten = sorted(set(expected) - existing(conn, row.id, expected))
        if not check_end(entry_id, row.state, unwritten):
            return
        if row.to_count or expected:
            _check_not_overshadowed(conn, row.id, entry_id)
        # what it shows and swaps: its segments_to, its segments_from
        shown, swapped = ((entry_id, "to"),), ((entry_id, "from"),)
        plan = LineagePlan(CommitAction.END_REPLACE, entry_id, (entry_id,), shown, swapped)
        seq = _record_commit(db, conn, row, plan, {"entry": entry_id}).seq
        set_state(conn, entry_id, LineageState.COMPLETED, completed_seq=seq)
        decore(conn, row.id, _to_decore(conn, row))

    db.write(txn)


def _keep_named(conn: Connection, entry_id: str, named: list[str], keep: list[str]) -> list[str]:
    """The names an entry waits for narrowed to ``keep``, which must be among them or
    among the segments written under it; the names given up leave its segments_to.
    Raises LineageError."""
    to = lists(conn, [entry_id], ("to",)).get((entry_id, "to"), [])
    unknown = sorted(set(keep) - set(to))
    if unknown:
        raise LineageRequestError(
            f"segments_to must be a subset of the entry's segments_to; not in it: "
            f"{unknown[:5]} — see t.lineage()"
        )
    dropped = set(named) - set(keep)
    put_list(conn, entry_id, "to", [i for i in to if i not in dropped])
    kept = [n for n in named if n in set(keep)]
    put_list(conn, entry_id, "expected", kept)
    return kept


def _to_decore(conn: Connection, row: Any) -> list[str]:
    """The sources an entry's end must pass to ``decore``: those its start found in
    chunk versions where other core partitions stay live (usually none). That cannot
    change until the end: a version's core partitions are published together, and a
    segment joining it later is not a core one, so it never makes the chunk incomplete.
    (All the sources for an entry started before the plan was kept.)"""
    if row.decore is None:
        return lists(conn, [row.entry], ("from",)).get((row.entry, "from"), [])
    return list(json.loads(row.decore))


def revert_replace(db: Db, name: str, entry_id: str, force: bool = False) -> None:
    """REVERTED (idempotent); an IN_PROGRESS entry needs ``force``.
    Raises LineageError, LineageEntryNotFoundError."""

    def txn(conn: Connection) -> None:
        row = _lock_with_entry(db, conn, name, entry_id)
        successors = json.loads(row.successors)
        live = []
        if successors:
            live = [
                r[0]
                for r in conn.execute(
                    select(lineage.c.id).where(
                        lineage.c.id.in_(successors),
                        lineage.c.state != LineageState.REVERTED.value,
                    )
                )
            ]
        own = json.loads(row.own_versions)
        if row.state == LineageState.COMPLETED.value and own and not live:
            # its segments still there, or deleted (nothing replaced them: as in Pinot,
            # a rollback after a delete of some of them shows the sources, hides the rest)
            deleted = select(commits.c.id).where(
                commits.c.table_id == row.id, commits.c.action == CommitAction.DELETE.value
            )
            n = conn.execute(
                select(func.count())
                .select_from(segments)
                .where(
                    segments.c.table_id == row.id,
                    segments.c.version.in_(own),
                    segments.c.removed_seq.is_(None) | segments.c.removed_commit.in_(deleted),
                )
            ).scalar_one()
            check_rollback_intact(entry_id, int(n), int(row.to_count))
        if not check_revert(entry_id, row.state, force, live):
            return
        swapped: tuple[tuple[str, str], ...] = ()  # a rollback shows the sources, hides
        if row.state == LineageState.COMPLETED.value:  # the rest (of one in progress: none)
            swapped = ((entry_id, "from"), (entry_id, "to"))
        plan = LineagePlan(CommitAction.REVERT_REPLACE, entry_id, (entry_id,), swapped=swapped)
        seq = _record_commit(db, conn, row, plan, {"entry": entry_id}).seq
        set_state(conn, entry_id, LineageState.REVERTED, reverted_seq=seq)

    db.write(txn)


def _check_not_overshadowed(conn: Connection, table_id: int, entry_id: str) -> None:
    """Refuse to complete an entry whose segments newer versions would hide (written
    meanwhile by an overwrite or refresh of the same chunks): it would publish rows
    nobody can see — now, or once another entry's end or rollback shows the newer
    version's segments that lineage hides for the moment."""
    ids = lists(conn, [entry_id]).get((entry_id, "to"), [])
    mine = rows_by_id(conn, table_id, ids) if ids else []
    if not mine:
        return
    span = Interval.of(min(r.start_us for r in mine), max(r.end_us for r in mine))
    newer = conn.execute(
        select(func.count())
        .select_from(segments)
        .where(
            segments.c.removed_seq.is_(None),
            segments.c.version > min(r.version for r in mine),
            *overlapping(conn, table_id, span),
        )
    ).scalar_one()
    if not newer:  # the common case: nothing newer anywhere near
        return
    # what shows, and what lineage hides for now only (an unfinished push's segments,
    # a completed entry's sources): a newer version showing later hides ours then
    others = [e for e in entries(conn, table_id) if e.id != entry_id]
    hidden = hidden_by(others) - may_show(others)
    visible = [
        segment_of(r._mapping, "t")
        for r in live_rows(conn, table_id, span)
        if r.segment_id not in hidden
    ]
    seg = hidden_by_newer(visible, [segment_of(r._mapping, "t") for r in mine])
    if seg is not None:
        sid = next(r.segment_id for r in mine if segment_of(r._mapping, "t") == seg)
        raise LineageError(
            f"cannot end {entry_id}: segment {sid} would be hidden by a newer "
            "version of its chunk written meanwhile (an overwrite or refresh); revert "
            "this entry and push again"
        )
