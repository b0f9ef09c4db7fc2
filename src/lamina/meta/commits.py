"""Commit rows: open, rebase, complete (the one funnel), history; who holds an open
commit (heartbeats, aborts) is :mod:`.writers`.

A commit is REQUESTED -> INFLIGHT -> COMPLETED, or ABORTED. Every completed commit,
whether it published files or only changed catalog state (a lineage transition, a
delete, a schema change), is recorded by :func:`record_commit`: the one place that hands
out the next snapshot seq. Its callers pass :func:`lamina.meta.publish_checks.check`
first, under the same lock: the one place of the checks against concurrent commits.

Durability on PostgreSQL: the REQUESTED and INFLIGHT transitions commit with
``synchronous_commit = off`` (no wait for the WAL flush); COMPLETED and everything
else commit synchronously. A server crash can lose the last open transitions, never
a completed commit: losing one needs the server to crash, which also kills the
writer's connection, so the write fails and is cleaned up like any failed write, and
the synchronous COMMIT of a publish flushes all WAL before it (the commit's earlier
transitions included). After such a crash the commit's id may be handed out again,
so a writer touches its commit row only together with its owner token.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    bindparam,
    exists,
    func,
    insert,
    select,
    true,
    update,
)
from sqlalchemy.exc import IntegrityError

from lamina.core.model import Commit, CommitState
from lamina.errors import CommitError, TableNotFoundError
from lamina.meta.db import Db
from lamina.meta.rows import commit_of
from lamina.meta.schema import commits, segments, tables
from lamina.meta.tables import now_us, read_table
from lamina.meta.writers import RELAXED, UNSETTLED, abort, dead, process_token, settle_writers


@dataclass(frozen=True)
class Recorded:
    """A commit just recorded as COMPLETED: its id, snapshot seq and time."""

    id: int
    seq: int
    at_us: int


# Hot statements are built once (their construction costs more than running them).

_BUMP = (
    update(tables)
    .where(tables.c.id == bindparam("tid"))
    .values(
        last_seq=bindparam("seq"),
        next_version=func.coalesce(
            bindparam("next_version", type_=BigInteger), tables.c.next_version
        ),
        max_span_us=func.coalesce(bindparam("max_span", type_=BigInteger), tables.c.max_span_us),
    )
)
_COMPLETE = (
    update(commits)
    .where(commits.c.id == bindparam("cid"), commits.c.state == CommitState.INFLIGHT.value)
    .values(
        state=CommitState.COMPLETED.value,
        seq=bindparam("seq"),
        completed_at=bindparam("now"),
        metadata=bindparam("meta"),
        footprint=bindparam("fp"),
        action=bindparam("action"),
    )
)
#: segment columns a publish inserts, and their types (PostgreSQL: one array each)
_SEGMENT_COLS = [
    c for c in segments.columns if c.name not in ("pk", "removed_seq", "removed_commit")
]


@functools.cache
def _complete_and_bump() -> Any:
    """PostgreSQL: complete the commit, insert its segments (arrays, any number) and
    move the table's counters in one statement; the caller rolls back when no row
    returns. (Built on first use: the PostgreSQL dialect takes ~40 ms to import.)"""
    from sqlalchemy.dialects.postgresql import ARRAY  # loads sqlalchemy

    unnest = (
        func.unnest(*(bindparam(f"s_{c.name}", type_=ARRAY(c.type)) for c in _SEGMENT_COLS))
        .table_valued(*(c.name for c in _SEGMENT_COLS), with_ordinality="n")
        .render_derived()
    )
    add_segments = insert(segments).from_select(  # in the given order (their pks ascend)
        [c.name for c in _SEGMENT_COLS],
        select(*(unnest.c[c.name] for c in _SEGMENT_COLS)).order_by(unnest.c.n),
    )
    done = _COMPLETE.returning(commits.c.id).cte("done")
    return (
        _BUMP.where(exists(select(done.c.id)))
        .returning(tables.c.id)
        .add_cte(add_segments.cte("added"))
    )


_INSERT = insert(commits)
_RECORD_COLS = (
    "table_id",
    "action",
    "state",
    "seq",
    "started_at",
    "inflight_at",
    "completed_at",
    "heartbeat_at",
    "owner",
    "files_cleaned",
    "metadata",
    "footprint",
)
_recorded = (
    insert(commits)
    .values({name: bindparam(name, type_=commits.c[name].type) for name in _RECORD_COLS})
    .returning(commits.c.id)
    .cte("recorded")
)
#: PostgreSQL: a catalog-only commit recorded and the table's counters moved, in one
#: statement (its new id)
_RECORD_AND_BUMP = select(_recorded.c.id).add_cte(_BUMP.returning(tables.c.id).cte("bumped"))
_OPEN_COLS = (
    "table_id",
    "action",
    "state",
    "started_at",
    "inflight_at",
    "heartbeat_at",
    "owner",
    "metadata",
)
#: the REQUESTED row of a new commit, based on the table's latest snapshot
_OPEN = insert(commits).values(
    {name: bindparam(name, type_=commits.c[name].type) for name in _OPEN_COLS}
    | {
        "files_cleaned": 0,
        "base_seq": select(tables.c.last_seq)
        .where(tables.c.id == bindparam("tid"))
        .scalar_subquery(),
    }
)
_OPEN_RETURNING = _OPEN.returning(commits.c.id, commits.c.base_seq)
_new = _OPEN_RETURNING.cte("new")
_others = UNSETTLED.subquery("others")
#: PostgreSQL: insert the REQUESTED row, relax its commit and read the table's other
#: unsettled commits (open ones, and aborted ones whose files still need removing), in
#: one statement (a row per such commit, or one with a NULL id). The list may miss
#: one opened or aborted meanwhile: a later writer sees it.
_OPEN_RELAXED = select(
    _new.c.id.label("new_id"),
    _new.c.base_seq.label("new_base"),
    _others.c.id,
    _others.c.owner,
    _others.c.heartbeat_at,
    _others.c.state,
    RELAXED,
).select_from(_new.outerjoin(_others, true()))


def _not_inflight(commit_id: int) -> CommitError:
    return CommitError(
        f"commit {commit_id} cannot be published: it is no longer INFLIGHT (another "
        "writer took over after its heartbeat expired?); nothing was published, retry"
    )


def record_commit(
    conn: Connection,
    trow: Any,
    action: str,
    metadata: dict[str, Any],
    *,
    commit_id: int | None = None,
    next_version: int | None = None,
    max_span: int | None = None,
    add: Sequence[dict[str, Any]] = (),
    footprint: str = "{}",
) -> Recorded:
    """Record a completed commit of the table whose locked row is ``trow``.

    ``commit_id``: an INFLIGHT commit that wrote files (it becomes COMPLETED and its
    segment rows ``add`` are inserted, ``added_seq`` and ``commit_id`` filled in);
    None: a catalog-only change, recorded as a new COMPLETED commit. Takes the next
    snapshot seq (``last_seq + 1``) and, when given, moves the table's version
    allocator to ``next_version`` and its longest segment span to ``max_span``.
    ``footprint``: what later commits check against (see :mod:`lamina.meta.conflicts`;
    the check of this commit against earlier ones, :func:`lamina.meta.publish_checks.check`,
    ran before, under the same lock). Raises CommitError when ``commit_id`` is no longer
    INFLIGHT.
    """
    seq = int(trow.last_seq) + 1
    now = now_us()
    meta = json.dumps(metadata, default=str)
    bump = {"tid": trow.id, "seq": seq, "next_version": next_version, "max_span": max_span}
    if commit_id is None:
        assert not add, "a catalog-only commit adds no segments"
        row = {
            "table_id": trow.id,
            "action": action,
            "state": CommitState.COMPLETED.value,
            "seq": seq,
            "started_at": now,
            "inflight_at": now,
            "completed_at": now,
            "heartbeat_at": now,
            "owner": process_token(),
            "files_cleaned": 0,
            "metadata": meta,
            "footprint": footprint,
        }
        if conn.dialect.name == "postgresql":
            new_id = int(conn.execute(_RECORD_AND_BUMP, row | bump).scalar_one())
            return Recorded(new_id, seq, now)
        pk = conn.execute(_INSERT, row).inserted_primary_key
        assert pk is not None
        conn.execute(_BUMP, bump)
        return Recorded(int(pk[0]), seq, now)
    rows = [{**r, "commit_id": commit_id, "added_seq": seq} for r in add]
    params = {"cid": commit_id, "now": now, "meta": meta, "fp": footprint, "action": action}
    params |= bump
    if conn.dialect.name == "postgresql":  # commit, segments and counters: one statement
        for c in _SEGMENT_COLS:
            params[f"s_{c.name}"] = [r.get(c.name) for r in rows]
        if conn.execute(_complete_and_bump(), params).first() is None:
            raise _not_inflight(commit_id)  # the caller's rollback drops the segments
        return Recorded(commit_id, seq, now)
    if conn.execute(_COMPLETE, params).rowcount != 1:
        raise _not_inflight(commit_id)
    conn.execute(_BUMP, bump)
    if rows:
        conn.execute(insert(segments), rows)
    return Recorded(commit_id, seq, now)


@dataclass(frozen=True)
class Opened:
    """A commit just opened: its id, the snapshot seq it is based on, and the table's
    aborted commits whose files still need removing."""

    id: int
    base_seq: int
    stale: list[int]
    then: Any = None  #: what ``begin_commit(then=...)`` returned


def begin_commit(
    db: Db,
    table_id: int,
    action: str,
    owner: str,
    metadata: dict[str, Any],
    stale_after_s: float,
    inflight: bool = False,
    then: Callable[[Connection, int, int], Any] | None = None,
) -> Opened:
    """Open a REQUESTED commit (INFLIGHT with ``inflight``: a write that starts
    writing files at once skips a transition) based on the table's latest snapshot. Any number of
    writers may be open at once (conflicts are checked at publish). Other writers'
    commits whose writer is gone are aborted on the way (lazy cleanup).
    ``then(conn, commit_id, base_seq)``: more work in the same transaction on SQLite (its result
    in ``Opened.then``; not run on PostgreSQL, where the caller does it apart).
    Raises TableNotFoundError.

    PostgreSQL: one autocommitted statement (plus one to abort dead writers, if any).
    """
    now = now_us()
    row = {
        "table_id": table_id,
        "tid": table_id,
        "action": action,
        "state": (CommitState.INFLIGHT if inflight else CommitState.REQUESTED).value,
        "started_at": now,  # REQUESTED at; INFLIGHT at once too for a write of files
        "inflight_at": now if inflight else None,
        "heartbeat_at": now,
        "owner": owner,
        "metadata": json.dumps(metadata, default=str),
    }
    try:
        if db.sqlite:
            return db.write(lambda conn: _open_sqlite(conn, row, stale_after_s, then))
        got = db.write(lambda conn: conn.execute(_OPEN_RELAXED, row).all(), single=True)
    except IntegrityError:
        raise TableNotFoundError(f"table id {table_id} was dropped meanwhile") from None
    new_id, base = int(got[0].new_id), got[0].new_base
    if base is None:  # the table row is gone: nothing to base on
        abort(db, new_id, owner, reason="the table was dropped meanwhile")
        raise TableNotFoundError(f"table id {table_id} was dropped meanwhile")
    others = [r for r in got if r.id is not None]
    if owner != process_token():  # a write's own token: another open commit of it is
        for r in others:  # a first try whose answer was lost (run again): abort it
            if r.owner == owner and r.state != CommitState.ABORTED.value:
                abort(db, int(r.id), owner, reason="its write ran again under a new commit")
        others = [r for r in others if r.owner != owner]
    stale = sorted(int(r.id) for r in others if r.state == CommitState.ABORTED.value)
    if any(dead(r, stale_after_s, now) for r in others if r.state != CommitState.ABORTED.value):
        stale = db.write(
            lambda conn: settle_writers(
                conn, conn.execute(UNSETTLED, row).all(), stale_after_s, now_us()
            )[1]
        )
        stale = [c for c in stale if c != new_id]
    return Opened(new_id, int(base), stale)


def _open_sqlite(
    conn: Connection,
    row: dict[str, Any],
    stale_after_s: float,
    then: Callable[[Connection, int, int], Any] | None,
) -> Opened:
    new_id, base = conn.execute(_OPEN_RETURNING, row).one()
    assert base is not None  # the foreign key keeps the table row
    unsettled = [r for r in conn.execute(UNSETTLED, row).all() if r.id != new_id]
    stale = settle_writers(conn, unsettled, stale_after_s, now_us())[1]
    more = None if then is None else then(conn, int(new_id), int(base))
    return Opened(int(new_id), int(base), stale, more)


def rebase_in(conn: Connection, commit_id: int, owner: str) -> int:
    """Move an open commit's base to the table's latest snapshot (a write that waited
    for a lock reads what exists once it holds it); returns the new base seq."""
    moved = conn.execute(_REBASE, {"cid": commit_id, "writer": owner}).first()
    if moved is not None:
        return int(moved.base_seq)
    return int(conn.execute(_BASE, {"cid": commit_id}).scalar_one())


_REBASE = (
    update(commits)
    .where(commits.c.id == bindparam("cid"), commits.c.owner == bindparam("writer"))
    .values(
        base_seq=select(tables.c.last_seq)
        .where(tables.c.id == commits.c.table_id)
        .scalar_subquery()
    )
    .returning(commits.c.base_seq)
)
_BASE = select(commits.c.base_seq).where(commits.c.id == bindparam("cid"))


def rebase(db: Db, commit_id: int, owner: str) -> int:
    """:func:`rebase_in`, in a transaction of its own."""
    return db.write(lambda conn: rebase_in(conn, commit_id, owner))


def history(
    db: Db, name: str, commit_id: int | None = None, seq: int | None = None
) -> list[Commit]:
    """Every commit of the table (oldest first) with the segments it added and removed;
    only the one of id ``commit_id``, or the one completed at ``seq``, when given.
    Raises TableNotFoundError."""

    def txn(conn: Connection) -> list[Commit]:
        rec = read_table(conn, name)
        which = commits.c.table_id == rec.id
        if commit_id is not None:
            which &= commits.c.id == commit_id
        if seq is not None:
            which &= commits.c.seq == seq
        rows = conn.execute(select(commits).where(which).order_by(commits.c.id)).all()
        ids = [r.id for r in rows]
        mine = segments.c.table_id == rec.id
        if commit_id is not None or seq is not None:  # one commit: its segments only
            mine &= segments.c.commit_id.in_(ids) | segments.c.removed_commit.in_(ids)
        added: dict[int, list[str]] = {}
        removed: dict[int, list[str]] = {}
        for sid, cid, rcid in conn.execute(
            select(segments.c.segment_id, segments.c.commit_id, segments.c.removed_commit)
            .where(mine)
            .order_by(segments.c.pk)
        ):
            added.setdefault(cid, []).append(sid)
            if rcid is not None:
                removed.setdefault(rcid, []).append(sid)
        return [
            commit_of(r, name, tuple(added.get(r.id, ())), tuple(sorted(removed.get(r.id, ()))))
            for r in rows
        ]

    return db.read(txn)
