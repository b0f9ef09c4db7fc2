"""Task lock rows: request, grant or wait, revoke, release; the rules are
:mod:`lamina.core.locks`'.

A lock belongs to an open commit and lives as long as it does: a commit that
completed or aborted holds nothing, and one whose writer died is aborted by the
next lock decision on the table (pid gone on this host, or heartbeat expired).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, bindparam, delete, insert, select, update

from lamina.core.interval import Interval
from lamina.core.locks import Decision, Lock, LockState, LockType, decide
from lamina.core.model import OPEN_STATES
from lamina.meta.commits import rebase_in
from lamina.meta.db import Db
from lamina.meta.schema import commits, locks
from lamina.meta.tables import lock_table, now_us, read_table
from lamina.meta.writers import settle_open


@dataclass(frozen=True)
class LockInfo:
    """One lock as ``t.locks()`` shows it."""

    id: int
    type: str
    interval: Interval
    priority: int
    state: str
    commit_id: int
    holder: str
    #: a SEGMENT lock's segment ids
    segments: tuple[str, ...] = ()


def _lock_of(row: Any) -> Lock:
    return Lock(
        int(row.id),
        str(row.commit_id),
        LockType(row.type),
        Interval.of(row.start_us, row.end_us),
        int(row.priority),
        LockState(row.state),
        frozenset(json.loads(row.segment_ids)) if row.segment_ids else frozenset(),
    )


_INSERT_IDS = insert(locks).returning(locks.c.id, sort_by_parameter_order=True)
_INSERT_IDS_SQLITE = insert(locks).returning(locks.c.id)
_TABLE_LOCKS = select(locks).where(locks.c.table_id == bindparam("tid"))
_SET_STATE = update(locks).where(locks.c.id == bindparam("lid")).values(state=bindparam("st"))
_REVOKE = (
    update(locks)
    .where(locks.c.id.in_(bindparam("ids", expanding=True)))
    .values(state=LockState.REVOKED.value)
)
_OF_COMMIT = select(locks).where(locks.c.commit_id == bindparam("cid"))
_RELEASE = delete(locks).where(locks.c.commit_id == bindparam("cid"))
_DROP_DEAD = delete(locks).where(
    locks.c.table_id == bindparam("tid"),
    locks.c.commit_id.not_in(
        select(commits.c.id).where(
            commits.c.table_id == bindparam("tid"), commits.c.state.in_(OPEN_STATES)
        )
    ),
)


def _row(
    table_id: int,
    commit_id: int,
    kind: LockType,
    interval: Interval,
    priority: int,
    segments: frozenset[str],
    state: LockState,
) -> dict[str, Any]:
    return {
        "table_id": table_id,
        "commit_id": commit_id,
        "type": kind.value,
        "start_us": interval.start,
        "end_us": interval.end,
        "priority": priority,
        "state": state.value,
        "created_at": now_us(),
        "segment_ids": json.dumps(sorted(segments)) if segments else None,
    }


def _insert(conn: Connection, rows: list[dict[str, Any]]) -> list[int]:
    """Insert lock rows; their ids, in the rows' order (ids grow with arrival: the
    rows' order is their place in line). SQLite: one multi-row INSERT, whose rowids
    ascend in the order of its rows (SQLAlchemy would insert them one by one to return
    the ids in order); PostgreSQL: its ordered INSERT ... RETURNING."""
    if conn.dialect.name == "sqlite":
        return sorted(int(r.id) for r in conn.execute(_INSERT_IDS_SQLITE, rows))
    return [int(r.id) for r in conn.execute(_INSERT_IDS, rows)]


def _settle(db: Db, conn: Connection, table_id: int, stale_after_s: float) -> None:
    """Take the table's lock and drop the locks of dead holders."""
    lock_table(db, conn, table_id)
    settle_open(conn, table_id, stale_after_s)
    conn.execute(_DROP_DEAD, {"tid": table_id})


def _decide(
    db: Db, conn: Connection, table_id: int, lock_id: int, commit_id: int, stale_after_s: float
) -> Decision:
    """Grant commit ``commit_id``'s request (revoking what it outranks) or leave it
    waiting, under the table's lock, after dropping the locks of dead holders."""
    _settle(db, conn, table_id, stale_after_s)
    table = [_lock_of(r) for r in conn.execute(_TABLE_LOCKS, {"tid": table_id})]
    mine = next((lk for lk in table if lk.id == lock_id), None)
    if mine is None or mine.holder != str(commit_id):
        return Decision(False)  # its commit is gone (SQLite may give the id to another)
    return _apply(conn, mine, table)


def _apply(conn: Connection, mine: Lock, table: list[Lock], unstored: int = 0) -> Decision:
    """Decide ``mine`` against the table's locks ``table`` (updated in place) and
    write the outcome. ``unstored``: the last so many of ``table`` (``mine`` the last
    of them) have no row yet; the caller inserts them in their decided states."""
    decision = decide(mine, table)
    if decision.granted:
        revoke = set(decision.revoke)
        stored_ids = {lk.id for lk in table[: len(table) - unstored]}
        if revoke & stored_ids:
            conn.execute(_REVOKE, {"ids": sorted(revoke & stored_ids)})
        if not unstored:
            conn.execute(_SET_STATE, {"lid": mine.id, "st": LockState.GRANTED.value})
        table[:] = [
            replace(lk, state=LockState.REVOKED)
            if lk.id in revoke
            else replace(lk, state=LockState.GRANTED)
            if lk.id == mine.id
            else lk
            for lk in table
        ]
    return decision


def request(
    db: Db,
    table_id: int,
    commit_id: int,
    owner: str,
    kind: LockType,
    interval: Interval,
    priority: int,
    stale_after_s: float,
    segments: frozenset[str] = frozenset(),
) -> tuple[int, Decision, int | None]:
    """Request a lock for commit ``commit_id`` (``segments``: a SEGMENT lock's segment
    ids) and grant it at once if the rules allow, in one transaction: (its id, the
    decision, and when granted the commit's new base seq — the table's latest
    snapshot, which the holder reads from). Otherwise it stays WAITING in line."""

    asked: list[Request] = [(kind, interval, priority, segments)]
    (got,), base = db.write(
        lambda conn: request_in(conn, db, table_id, commit_id, owner, asked, stale_after_s)
    )
    return got[0], got[1], base


Request = tuple[LockType, Interval, int, frozenset[str]]  # kind, interval, priority, ids


def request_in(
    conn: Connection,
    db: Db,
    table_id: int,
    commit_id: int,
    owner: str,
    requests: list[Request],
    stale_after_s: float,
    opened_base: int | None = None,
) -> tuple[list[tuple[int, Decision]], int | None]:
    """:func:`request` of several locks, each decided in turn, inside the caller's
    write transaction: their (id, decision) and, when all were granted, the commit's
    new base seq. ``opened_base`` (SQLite only): :func:`lamina.meta.commits.begin_commit`
    opened the commit in this very transaction, on that base (the latest: the
    transaction holds the write lock), after aborting the table's dead writers;
    neither is done again."""
    assert opened_base is None or db.sqlite, "opened_base needs SQLite's write lock"
    if opened_base is None:
        _settle(db, conn, table_id, stale_after_s)
    else:
        conn.execute(_DROP_DEAD, {"tid": table_id})
    table = [_lock_of(r) for r in conn.execute(_TABLE_LOCKS, {"tid": table_id})]
    first = len(table)
    decisions = []
    for kind, interval, priority, segments in requests:  # each decided in turn
        # decided before its row exists, as the newest request (ids grow with arrival),
        # then stored in the decided state
        newest = max((lk.id for lk in table), default=0) + 1
        mine = Lock(newest, str(commit_id), kind, interval, priority, LockState.WAITING, segments)
        table.append(mine)
        decisions.append(_apply(conn, mine, table, unstored=len(table) - first))
    mine_rows = [  # in their decided states (a later one of them may revoke an earlier)
        _row(table_id, commit_id, lk.type, lk.interval, lk.priority, lk.segments, lk.state)
        for lk in table[first:]
    ]
    out = list(zip(_insert(conn, mine_rows), decisions, strict=True))
    if not all(d.granted for _, d in out):
        return out, None
    return out, opened_base if opened_base is not None else rebase_in(conn, commit_id, owner)


def try_grant(
    db: Db, table_id: int, lock_id: int, commit_id: int, stale_after_s: float
) -> Decision:
    """Grant commit ``commit_id``'s waiting request now (revoking what it outranks) or
    leave it waiting; one transaction under the table's lock."""
    return db.write(lambda conn: _decide(db, conn, table_id, lock_id, commit_id, stale_after_s))


def cancel(db: Db, lock_id: int, commit_id: int) -> None:
    """Withdraw commit ``commit_id``'s request (or lock); once the commit was aborted
    and its locks dropped, SQLite may have given the id to another's: left alone."""
    db.write(
        lambda conn: conn.execute(
            delete(locks).where(locks.c.id == lock_id, locks.c.commit_id == commit_id)
        )
    )


def of_commit(conn: Connection, commit_id: int) -> list[Any]:
    """The lock rows of a commit."""
    return list(conn.execute(_OF_COMMIT, {"cid": commit_id}).all())


def replacing(
    conn: Connection, table_id: int, commit_id: int, span: Interval, unchecked: bool = False
) -> list[Lock]:
    """Granted REPLACE and EXCLUSIVE locks of other open commits overlapping ``span``
    (those of ended commits are dropped only at the next lock request). ``unchecked``:
    only those of holders that publish without conflict checks (not a major
    compaction, which any concurrent change refuses)."""
    kinds = (LockType.REPLACE.value, LockType.EXCLUSIVE.value)
    rows = conn.execute(
        select(locks, commits.c.metadata.label("holder_metadata"))
        .join(commits, commits.c.id == locks.c.commit_id)
        .where(
            commits.c.state.in_(OPEN_STATES),
            locks.c.table_id == table_id,
            locks.c.commit_id != commit_id,
            locks.c.state == LockState.GRANTED.value,
            locks.c.type.in_(kinds),
            locks.c.start_us < span.end,
            locks.c.end_us > span.start,
        )
    ).all()
    if unchecked:
        rows = [
            r for r in rows if json.loads(r.holder_metadata or "{}").get("compaction") != "major"
        ]
    return [_lock_of(r) for r in rows]


def revoked(db: Db, commit_id: int) -> tuple[str, Interval] | None:
    """Type and interval of a lock of the commit that was revoked, if any."""
    row = db.read(
        lambda conn: conn.execute(
            select(locks.c.type, locks.c.start_us, locks.c.end_us)
            .where(locks.c.commit_id == commit_id, locks.c.state == LockState.REVOKED.value)
            .limit(1)
        ).first()
    )
    return None if row is None else (str(row.type), Interval.of(row.start_us, row.end_us))


def release(conn: Connection, commit_id: int) -> None:
    """Drop a commit's locks (inside the transaction that completes it)."""
    conn.execute(_RELEASE, {"cid": commit_id})


def list_locks(db: Db, name: str) -> list[LockInfo]:
    """The table's locks and waiting requests (locks of ended commits excluded).
    Raises TableNotFoundError."""

    def txn(conn: Connection) -> list[LockInfo]:
        rec = read_table(conn, name)
        rows = conn.execute(
            select(locks, commits.c.owner)
            .join(commits, commits.c.id == locks.c.commit_id)
            .where(locks.c.table_id == rec.id, commits.c.state.in_(OPEN_STATES))
            .order_by(locks.c.id)
        ).all()
        return [
            LockInfo(
                int(r.id),
                r.type,
                Interval.of(r.start_us, r.end_us),
                int(r.priority),
                r.state,
                int(r.commit_id),
                str(r.owner).rsplit(":", 1)[0],
                tuple(json.loads(r.segment_ids)) if r.segment_ids else (),
            )
            for r in rows
        ]

    return db.read(txn)
