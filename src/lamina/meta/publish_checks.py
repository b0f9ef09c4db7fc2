"""The one check before a commit is recorded: :func:`check`, inside the commit's
transaction, under the table's lock, before :func:`lamina.meta.commits.record_commit`.

Every commit passes here with its plan (:mod:`lamina.core.plans`), and the plan's kind
decides what applies:

===================  =================================================================
plan                 refused when
===================  =================================================================
``PublishPlan``      a write: its commit is no longer its writer's INFLIGHT one; a task
                     lock of it was revoked; its exactly-once version was applied; it
                     replaces or removes segments where another commit holds a REPLACE
                     or EXCLUSIVE lock; a commit completed since its base conflicts
                     with it (:mod:`lamina.core.conflicts`; what was appended meanwhile
                     it carries); its lineage entry is gone or no longer in progress; a
                     segment it removes was removed or hidden meanwhile, or a lineage
                     entry holds it; a column it adds (a rollup's count) was added
                     meanwhile
``DeletePlan``       a segment is unknown or removed already, or a lineage entry holds
                     it; one lies where another commit holds such a lock
``LineagePlan``      an end or a completed entry's rollback swaps a segment where
                     another commit holds such a lock (a start, or a rollback of an
                     entry in progress, swaps nothing visible: nothing applies)
``AlterPlan``        never: a schema change moves no segment
===================  =================================================================

Lock and conflict checks live here only. Each refusal raises a typed error and nothing
is recorded. (What a write's identities may not be — an append into a chunk of several
versions, an upsert overwrite covering a segment in part — is the planner's to refuse:
:mod:`lamina.core.planner`.) A lineage transition's own rules (which state it may move
from) are :mod:`lamina.core.lineage`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from lamina.core.conflicts import Footprint, Kind, SegmentRef
from lamina.core.conflicts import check as rules
from lamina.core.interval import ETERNITY, Interval
from lamina.core.lineage import LineageEntry, LineageState, hidden_by, protected
from lamina.core.locks import Lock, LockState, LockType, first_locked
from lamina.core.model import CommitAction, CommitState
from lamina.core.plans import CommitPlan, DeletePlan, LineageBatch, LineagePlan, PublishPlan
from lamina.errors import (
    CommitConflictError,
    CommitError,
    LineageEntryNotFoundError,
    LineageError,
    LockRevokedError,
    SegmentNotFoundError,
)
from lamina.meta import app_txns
from lamina.meta import locks as lock_rows
from lamina.meta.conflicts import completed_since, since
from lamina.meta.db import Db
from lamina.meta.lineage_lists import entries, entry_row, lists
from lamina.meta.segments import existing, live_ids, rows_by_id


@dataclass(frozen=True)
class Cleared:
    """What a write's check read on the way, which its publish plans with: the row of
    the lineage entry it writes under, the segments appended meanwhile it carries, the
    table's lineage entries (None: not read — a plain append reads them only if the
    table has some), the segments they hide from it, and those it removes."""

    entry: Any = None
    carry: list[str] = field(default_factory=list)
    current: list[LineageEntry] | None = None
    hidden: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)


def check(
    db: Db, conn: Connection, trow: Any, plan: CommitPlan, commit_id: int = 0, owner: str = ""
) -> Cleared:
    """Refuse ``plan`` if it may not be recorded now (see the module's table).
    ``trow``: the table's locked row; ``commit_id``, ``owner``: a write's commit and the
    token it was opened with (a catalog-only commit has none yet). Raises CommitError,
    LockRevokedError, AlreadyAppliedError, CommitConflictError, LineageError,
    LineageEntryNotFoundError, SegmentNotFoundError."""
    if isinstance(plan, PublishPlan):
        return _publishable(db, conn, trow, plan, commit_id, owner)
    if isinstance(plan, DeletePlan):
        _deletable(conn, int(trow.id), plan.remove_ids)
    if isinstance(plan, (DeletePlan, LineagePlan)):
        _outside_locks(conn, int(trow.id), plan)
    return Cleared()


def _publishable(
    db: Db, conn: Connection, trow: Any, plan: PublishPlan, commit_id: int, owner: str
) -> Cleared:
    """A write's checks, in the order they refuse."""
    if trow.commit_state != CommitState.INFLIGHT.value or trow.owner != owner:
        state = trow.commit_state if trow.owner == owner else "missing"
        raise CommitError(
            f"commit {commit_id} cannot be published: it is {state} (another writer "
            "took over after its heartbeat expired?); nothing was published, retry"
        )
    table_id = int(trow.id)
    covered = _held_locks(conn, commit_id) if plan.locked else []
    if plan.rewrites:  # rows read at the base: any concurrent change refuses it
        covered = []
    if plan.txn is not None:  # first: a twin that published this version wins, not conflicts
        app_txns.check(conn, table_id, *plan.txn)
    _outside_locks(conn, table_id, plan, commit_id, covered)
    if plan.adds():
        _columns_free(trow, plan.adds(), commit_id, same_ok=not plan.rewrites)
    carry = _conflicts(conn, trow, commit_id, plan, covered)
    entry = _entry(db, conn, table_id, plan.lineage)
    if entry is None and plan.overwrites() is None and not plan.remove_ids:
        return Cleared(carry=carry)  # the common append: lineage read only if there is some
    current = entries(conn, table_id)  # after the lock
    # a push's own earlier batches count as visible when planning its next one
    hidden = hidden_by(e for e in current if entry is None or e.id != entry.id)
    removed: set[str] = set()
    if plan.remove_ids:
        removed = _removable(conn, table_id, plan.remove_ids, hidden, protected(current))
    return Cleared(entry, carry, current, hidden, removed)


def _columns_free(trow: Any, fields: tuple[Any, ...], commit_id: int, same_ok: bool) -> None:
    """Refuse columns to add whose names (any case) the table's schema has now: another
    commit added them since the write began — unless ``same_ok`` (a write's schema
    merge, not a rollup's count) and it added one of the very name and type, which the
    write's files then fill. Raises CommitConflictError (retryable)."""
    import pyarrow as pa  # loads numpy, pyarrow

    now = pa.ipc.read_schema(pa.py_buffer(bytes(trow.schema_ipc)))
    have = {n.lower() for n in now.names}
    taken = [
        f.name
        for f in fields
        if f.name.lower() in have
        and not (same_ok and f.name in now.names and now.field(f.name).type == f.type)
    ]
    if taken:
        raise CommitConflictError(
            f"commit {commit_id} adds column {taken[0]!r}, which the table got meanwhile "
            "(t.add_columns or another rollup); nothing was published — do it again, on "
            "the table as it is now",
            retryable=True,
        )


def _held_locks(conn: Connection, commit_id: int) -> list[Interval]:
    """Intervals of the commit's granted locks. Raises LockRevokedError if a
    higher-priority request revoked one (nothing is published then)."""
    rows = lock_rows.of_commit(conn, commit_id)
    revoked = [r for r in rows if r.state == LockState.REVOKED.value]
    if revoked:
        r = revoked[0]
        raise LockRevokedError(
            f"commit {commit_id}'s {r.type} lock on {Interval.of(r.start_us, r.end_us)} was "
            "revoked by a higher-priority request; nothing was published — retry, or raise "
            "this transaction's priority"
        )
    return [
        Interval.of(r.start_us, r.end_us)
        for r in rows
        if r.state == LockState.GRANTED.value and r.type != LockType.SEGMENT.value
    ]


def _outside_locks(
    conn: Connection,
    table_id: int,
    plan: PublishPlan | DeletePlan | LineagePlan,
    commit_id: int = 0,
    covered: list[Interval] | None = None,
) -> None:
    """Refuse a commit that replaces, removes or swaps segments where another commit
    holds a REPLACE or EXCLUSIVE lock (a major compaction's aside: any concurrent change
    refuses it instead): the holder publishes without optimistic conflict checks (its
    lock was to keep such writes out), so it would silently undo this one (Druid: every
    write into a locked interval needs a lock of its own). A write's own locks
    (``covered``) aside; what it replaces and removes, and for the batch that ends a push
    what its entry hides; for an end or a rollback, the entry's segments. A lock-free
    append is let through: the holder's overwrite carries it. Raises CommitConflictError
    (retryable), LineageError (a lineage transition)."""
    spans: list[Interval] = []
    ids: list[str] = []
    if isinstance(plan, PublishPlan):
        spans = [iv for iv in plan.footprint if not any(c.contains(iv) for c in covered or ())]
        ids = list(plan.remove_ids)
        if not spans and not ids and not plan.ends_entry:
            return  # an append: no query at all
    elif isinstance(plan, DeletePlan):
        ids = list(plan.remove_ids)
    elif not plan.shown and not plan.swapped:
        return  # a start, a rollback of an entry in progress: nothing shows or goes
    held = lock_rows.replacing(conn, table_id, commit_id, ETERNITY, unchecked=True)
    if not held:  # the common case: one query
        return
    if isinstance(plan, LineagePlan):
        _refuse_swap(conn, table_id, plan, held)
        return
    if isinstance(plan, PublishPlan) and plan.lineage is not None and plan.ends_entry:
        entry = plan.lineage.entry
        ids += lists(conn, [entry], ("from",)).get((entry, "from"), [])
    if ids:
        spans += [Interval.of(r.start_us, r.end_us) for r in rows_by_id(conn, table_id, ids)]
    found = first_locked(held, spans)
    if found is not None:
        iv, other = found
        who = "this delete" if isinstance(plan, DeletePlan) else f"commit {commit_id}"
        raise CommitConflictError(
            f"{who} replaces or removes segments in {iv}, where commit "
            f"{other.holder} holds a {other.type.value} lock on {other.interval}; "
            "nothing was published — retry once that commit completes, or take a "
            "lock yourself (t.transaction(lock=...)), which waits for it",
            other=int(other.holder),
            retryable=True,
        )


def _refuse_swap(conn: Connection, table_id: int, plan: LineagePlan, held: list[Lock]) -> None:
    """:func:`_outside_locks` of an end or a rollback: the entry's segments, both lists.
    Raises LineageError."""
    named = lists(conn, [plan.entry], ("from", "to"))
    ids = sorted({i for ids in named.values() for i in ids})
    rows = {
        Interval.of(r.start_us, r.end_us): r.segment_id for r in rows_by_id(conn, table_id, ids)
    }
    found = first_locked(held, rows)
    if found is not None:
        iv, lk = found
        what = "end" if plan.action is CommitAction.END_REPLACE else "roll back"
        raise LineageError(
            f"cannot {what} lineage entry {plan.entry}: its segment {rows[iv]} lies in "
            f"{iv}, where commit {lk.holder} holds a {lk.type.value} lock on "
            f"{lk.interval}; nothing changed — {what} it once that commit completes"
        )


def _conflicts(
    conn: Connection, trow: Any, commit_id: int, plan: PublishPlan, covered: list[Interval]
) -> list[str]:
    """Check the commits completed since the write's base snapshot (none: the common
    single-writer case costs nothing). Returns the ids of segments appended meanwhile
    that an overwrite carries. A write whose intervals all lie in locks it holds has
    no optimistic conflicts there (the locks excluded them); it still carries appends.
    Raises CommitConflictError."""
    if trow.base_seq is None or int(trow.last_seq) <= int(trow.base_seq):
        return []
    table_id = int(trow.id)
    action = plan.action_of(trow.action)
    kind = Kind.of(action)
    plain = plan.txn is None and plan.lineage is None
    if kind is Kind.APPEND and plain:
        return []  # a plain append conflicts with nothing: read no footprints
    done = completed_since(conn, table_id, int(trow.base_seq))
    only_appends = all(Kind.of(a) is Kind.APPEND for _, a, _ in done)
    if kind is Kind.COMPACT and plain and only_appends:
        return []  # never a conflict nor a carry (an input deleted: _removable)
    removed = tuple(
        SegmentRef(r.segment_id, Interval.of(r.start_us, r.end_us))
        for r in rows_by_id(conn, table_id, list(plan.remove_ids))
    )
    read = tuple(
        SegmentRef(r.segment_id, Interval.of(r.start_us, r.end_us))
        for r in rows_by_id(conn, table_id, list(plan.reads()))
    )
    mine = Footprint(
        commit_id,
        kind,
        removed=removed,
        read=read,
        replaced=plan.footprint,
        lineage=frozenset([plan.lineage.entry] if plan.lineage is not None else []),
        app_id=plan.txn[0] if plan.txn is not None else None,
    )
    others = since(conn, table_id, int(trow.base_seq), done)
    moved = [o for o in others if o.kind is Kind.LINEAGE]
    if plan.rewrites and moved:  # a push ended or reverted: the rows it read changed
        raise CommitConflictError(
            f"commit {commit_id} (a major compaction) read rows before lineage commit "
            f"{moved[0].commit_id} changed what is visible; nothing was published — compact "
            "again",
            other=moved[0].commit_id,
            retryable=True,
        )
    spans = [*mine.replaced, *(s.interval for s in removed), *(f.chunk for f in plan.written())]
    locked = bool(covered) and all(any(c.contains(iv) for c in covered) for iv in spans)
    verdict = rules(mine, others, plan.isolation, locked)
    if verdict.conflict is not None:
        c = verdict.conflict
        raise CommitConflictError(
            f"commit {commit_id} ({action}) conflicts with commit {c.other}, which "
            f"completed after this write began: {c.reason}; nothing was published"
            + ("; it is safe to retry" if c.retryable else "; re-read the table and decide"),
            other=c.other,
            retryable=c.retryable,
        )
    return [s.id for s in verdict.carry]


def _entry(db: Db, conn: Connection, table_id: int, lineage: LineageBatch | None) -> Any:
    """The locked row of the lineage entry a push's batch publishes under (None: not a
    push's), still in progress. Raises LineageEntryNotFoundError, LineageError."""
    if lineage is None:
        return None
    try:
        entry = entry_row(db, conn, table_id, lineage.entry)
    except LineageEntryNotFoundError:
        raise LineageEntryNotFoundError(
            f"lineage entry {lineage.entry} of this push is gone: retention "
            "removes an unfinished push older than the table's lineage_cleanup_retention "
            "(or another push with force_cleanup reverted it, and retention ran); "
            "nothing was published — push again, or raise lineage_cleanup_retention"
        ) from None
    if entry.state != LineageState.IN_PROGRESS.value:
        raise LineageError(
            f"lineage entry {entry.id} is {entry.state}: the push under it was "
            "cleaned up (by a newer push or retention); nothing was published"
        )
    return entry


def _removable(
    conn: Connection, table_id: int, ids: tuple[str, ...], hidden: set[str], held: set[str]
) -> set[str]:
    """The segments a write removes, all still live and held by no lineage entry.
    Raises CommitConflictError, LineageError."""
    live = existing(conn, table_id, list(ids))
    gone = [i for i in ids if i not in live or i in hidden]
    if gone:
        by = {r.segment_id: r.removed_commit for r in rows_by_id(conn, table_id, gone[:5])}
        other = next((int(c) for c in by.values() if c is not None), None)
        raise CommitConflictError(
            f"segments {gone[:5]} were removed meanwhile"
            + (f" by commit {other}" if other is not None else "")
            + "; nothing was published — re-read the table and decide",
            other=other,
        )
    busy = sorted(set(ids) & held)
    if busy:
        raise LineageError(
            f"segments {busy[:5]} are held by a lineage entry; end or revert it first"
        )
    return set(ids)


def _deletable(conn: Connection, table_id: int, ids: tuple[str, ...]) -> None:
    """The segments a delete names are live and held by no lineage entry.
    Raises SegmentNotFoundError, LineageError."""
    live = live_ids(conn, table_id)
    unknown = [i for i in ids if i not in live]
    if unknown:
        raise SegmentNotFoundError(
            f"cannot delete unknown or already deleted segments {unknown[:5]}; "
            "list them with t.segments(all=True)"
        )
    held = sorted(set(ids) & protected(entries(conn, table_id)))
    if held:
        raise LineageError(
            f"segments {held[:5]} are held by a lineage entry (IN_PROGRESS, or replaced "
            "by a COMPLETED one that can still be rolled back); end or revert it first"
        )
