"""What refuses a publish, checked inside its transaction (see
:mod:`lamina.meta.publish`): revoked locks, conflicts with the commits completed since
the write began, segments removed meanwhile or held by lineage, and the rules of locked
writes. Each raises a typed error; nothing is published then. (What a write's
identities may not be is the planner's to refuse: :mod:`lamina.core.planner`.)"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection

from lamina.core.conflicts import Footprint, Kind, SegmentRef, check
from lamina.core.interval import ETERNITY, Interval
from lamina.core.locks import Lock, LockState, LockType, first_locked
from lamina.core.plans import PublishPlan
from lamina.errors import (
    CommitConflictError,
    LineageError,
    LockRevokedError,
)
from lamina.meta import locks as lock_rows
from lamina.meta.conflicts import completed_since, since
from lamina.meta.lineage_lists import lists
from lamina.meta.segments import existing, rows_by_id


def held_locks(conn: Connection, commit_id: int) -> list[Interval]:
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


def outside_locks(
    conn: Connection, table_id: int, commit_id: int, plan: PublishPlan, covered: list[Interval]
) -> None:
    """:func:`refuse_in_locks` for what a publish replaces or removes — and, for the
    batch that ends a push, what its entry hides; its own locks (``covered``) aside. A
    lock-free append is let through: the holder's overwrite carries it. Raises
    CommitConflictError (retryable)."""
    spans = [iv for iv in plan.footprint if not any(c.contains(iv) for c in covered)]
    if not spans and not plan.remove_ids and not plan.ends_entry:
        return  # an append: no query at all
    held = lock_rows.replacing(conn, table_id, commit_id, ETERNITY, unchecked=True)
    if not held:  # the common case: one query
        return
    ids = list(plan.remove_ids)
    if plan.lineage is not None and plan.ends_entry:
        entry = plan.lineage.entry
        ids += lists(conn, [entry], ("from",)).get((entry, "from"), [])
    if ids:
        spans += [Interval.of(r.start_us, r.end_us) for r in rows_by_id(conn, table_id, ids)]
    refuse_in_locks(held, spans, f"commit {commit_id}")


def refuse_in_locks(held: list[Lock], spans: Iterable[Interval], who: str) -> None:
    """A write that replaces or removes segments where another commit holds a REPLACE
    or EXCLUSIVE lock (``held``: :func:`lamina.meta.locks.replacing` with
    ``unchecked``) is refused: the holder publishes without optimistic conflict checks
    (its lock was to keep such writes out), so it would silently undo this one (Druid:
    every write into a locked interval needs a lock of its own). Raises
    CommitConflictError (retryable)."""
    found = first_locked(held, spans)
    if found is not None:
        iv, other = found
        raise CommitConflictError(
            f"{who} replaces or removes segments in {iv}, where commit "
            f"{other.holder} holds a {other.type.value} lock on {other.interval}; "
            "nothing was published — retry once that commit completes, or take a "
            "lock yourself (t.transaction(lock=...)), which waits for it",
            other=int(other.holder),
            retryable=True,
        )


def check_conflicts(
    conn: Connection,
    table_id: int,
    commit_id: int,
    trow: Any,
    action: str,
    plan: PublishPlan,
    covered: list[Interval],
) -> list[str]:
    """Check the commits completed since the write's base snapshot (none: the common
    single-writer case costs nothing). Returns the ids of segments appended meanwhile
    that an overwrite carries. A write whose intervals all lie in locks it holds has
    no optimistic conflicts there (the locks excluded them); it still carries appends.
    Raises CommitConflictError."""
    if trow.base_seq is None or int(trow.last_seq) <= int(trow.base_seq):
        return []
    kind = Kind.of(action)
    if kind is Kind.APPEND and plan.txn is None and plan.lineage is None:
        return []  # a plain append conflicts with nothing: read no footprints
    done = completed_since(conn, table_id, int(trow.base_seq))
    only_appends = all(Kind.of(a) is Kind.APPEND for _, a, _ in done)
    if kind is Kind.COMPACT and plan.txn is None and plan.lineage is None and only_appends:
        return []  # never a conflict nor a carry (an input deleted: check_removable)
    removed = tuple(
        SegmentRef(r.segment_id, Interval.of(r.start_us, r.end_us))
        for r in rows_by_id(conn, table_id, list(plan.remove_ids))
    )
    mine = Footprint(
        commit_id,
        kind,
        removed=removed,
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
    spans = [*mine.replaced, *(s.interval for s in removed)]
    spans += [f.chunk for f in plan.written()]
    locked = bool(covered) and all(any(c.contains(iv) for c in covered) for iv in spans)
    verdict = check(mine, others, plan.isolation, locked)
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


def check_removable(
    conn: Connection, table_id: int, ids: tuple[str, ...], hidden: set[str], held: set[str]
) -> set[str]:
    """The segments a commit removes, all still live and held by no lineage entry.
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
