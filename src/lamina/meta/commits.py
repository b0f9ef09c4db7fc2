"""Commit rows: open, heartbeat, abort, complete (the one funnel), history.

A commit is REQUESTED -> INFLIGHT -> COMPLETED, or ABORTED. Every completed commit,
whether it published files or only changed catalog state (a lineage transition, a
delete), is recorded by :func:`record_commit`: the one place that hands out the next
snapshot seq, and so the one place where checks against concurrent commits belong.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    and_,
    bindparam,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)

from lamina.core.model import OPEN_STATES, Commit, CommitState
from lamina.errors import CommitError, ConcurrentWriteError
from lamina.meta.db import Db
from lamina.meta.rows import commit_of
from lamina.meta.schema import commits, segments, tables
from lamina.meta.tables import lock_table, now_us, read_table

_HOST = socket.gethostname()
_PROCESS_TOKEN: dict[int, str] = {}


def owner_token() -> str:
    """Who holds a commit: host, pid and a random part (pids get reused)."""
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def process_token() -> str:
    """The owner of catalog-only commits made by this process (computed once per pid)."""
    pid = os.getpid()
    if pid not in _PROCESS_TOKEN:
        _PROCESS_TOKEN[pid] = owner_token()
    return _PROCESS_TOKEN[pid]


def owner_alive(owner: str) -> bool | None:
    """True/False when the owner runs on this host, None when it cannot be told."""
    host, _, rest = owner.partition(":")
    if host != _HOST:
        return None
    try:
        os.kill(int(rest.split(":")[0]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return None
    return True


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
    )
)
_done = _COMPLETE.returning(commits.c.id).cte("done")
#: PostgreSQL: complete the commit and move the table's counters in one statement
_COMPLETE_AND_BUMP = _BUMP.where(exists(select(_done.c.id))).returning(tables.c.id)
_INSERT = insert(commits)
_INFLIGHT = (
    update(commits)
    .where(commits.c.id == bindparam("cid"), commits.c.state == CommitState.REQUESTED.value)
    .values(state=CommitState.INFLIGHT.value, heartbeat_at=bindparam("now"))
)
_BEAT = (
    update(commits)
    .where(commits.c.id == bindparam("cid"), commits.c.state.in_(OPEN_STATES))
    .values(heartbeat_at=bindparam("now"))
)
_UNSETTLED = select(commits.c.id, commits.c.owner, commits.c.heartbeat_at, commits.c.state).where(
    commits.c.table_id == bindparam("tid"),
    or_(
        commits.c.state.in_(OPEN_STATES),
        and_(commits.c.state == CommitState.ABORTED.value, commits.c.files_cleaned == 0),
    ),
)


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
) -> Recorded:
    """Record a completed commit of the table whose locked row is ``trow``.

    ``commit_id``: an INFLIGHT commit that wrote files (it becomes COMPLETED);
    None: a catalog-only change, recorded as a new COMPLETED commit. Takes the next
    snapshot seq (``last_seq + 1``) and, when given, moves the table's version
    allocator to ``next_version`` and its longest segment span to ``max_span``.
    """
    seq = int(trow.last_seq) + 1
    now = now_us()
    meta = json.dumps(metadata, default=str)
    if commit_id is None:
        result = conn.execute(
            _INSERT,
            {
                "table_id": trow.id,
                "action": action,
                "state": CommitState.COMPLETED.value,
                "seq": seq,
                "started_at": now,
                "completed_at": now,
                "heartbeat_at": now,
                "owner": process_token(),
                "files_cleaned": 0,
                "metadata": meta,
            },
        )
        pk = result.inserted_primary_key
        assert pk is not None
        commit_id = int(pk[0])
    else:
        params = {"cid": commit_id, "seq": seq, "now": now, "meta": meta}
        params |= {"tid": trow.id, "next_version": next_version, "max_span": max_span}
        if conn.dialect.name == "postgresql":  # both rows in one statement
            if conn.execute(_COMPLETE_AND_BUMP, params).first() is None:
                raise _not_inflight(commit_id)
            return Recorded(commit_id, seq, now)
        if conn.execute(_COMPLETE, params).rowcount != 1:
            raise _not_inflight(commit_id)
    bump = {"tid": trow.id, "seq": seq, "next_version": next_version, "max_span": max_span}
    conn.execute(_BUMP, bump)
    return Recorded(commit_id, seq, now)


def begin_commit(
    db: Db,
    table_id: int,
    action: str,
    owner: str,
    metadata: dict[str, Any],
    stale_after_s: float,
) -> tuple[int, list[int]]:
    """Open a REQUESTED commit; refuse while another live writer holds the table.

    Also returns the table's aborted commits whose files still need removing.
    Raises ConcurrentWriteError.
    """

    def txn(conn: Connection) -> tuple[int, list[int]]:
        lock_table(db, conn, table_id)  # its own statement: later ones see what it waited for
        now = now_us()
        live, stale = _settle_writers(conn, table_id, stale_after_s, now)
        if live:
            row = live[0]
            raise ConcurrentWriteError(
                f"commit {row.id} by {row.owner.rsplit(':', 1)[0]} is writing this "
                "table; wait for it to finish (or raise writer_wait_s)"
            )
        result = conn.execute(
            _INSERT,
            {
                "table_id": table_id,
                "action": action,
                "state": CommitState.REQUESTED.value,
                "seq": None,
                "started_at": now,
                "completed_at": None,
                "heartbeat_at": now,
                "owner": owner,
                "files_cleaned": 0,
                "metadata": json.dumps(metadata, default=str),
            },
        )
        pk = result.inserted_primary_key
        assert pk is not None
        return int(pk[0]), stale

    return db.write(txn)


def _settle_writers(
    conn: Connection, table_id: int, stale_after_s: float, now: int
) -> tuple[list[Any], list[int]]:
    """Abort open commits whose writer is gone. Returns the open commits still alive,
    and the aborted commits whose files are not removed yet (one query for both).

    Dead: the owner ran on this host and its pid no longer exists, or (any host)
    its heartbeat is older than ``stale_after_s``.
    """
    alive_rows: list[Any] = []
    stale: list[int] = []
    for row in conn.execute(_UNSETTLED, {"tid": table_id}).all():
        if row.state == CommitState.ABORTED.value:
            stale.append(int(row.id))
            continue
        alive = owner_alive(row.owner)
        expired = row.heartbeat_at < now - int(stale_after_s * 1e6)
        if alive is False or (alive is None and expired):
            _abort(conn, row.id, now)
            stale.append(int(row.id))
        else:
            alive_rows.append(row)
    return alive_rows, sorted(stale)


def _abort(conn: Connection, commit_id: int, now: int) -> None:
    conn.execute(
        update(commits)
        .where(commits.c.id == commit_id, commits.c.state.in_(OPEN_STATES))
        .values(state=CommitState.ABORTED.value, completed_at=now)
    )


def mark_inflight(db: Db, commit_id: int) -> None:
    """REQUESTED -> INFLIGHT. Raises CommitError if it was aborted meanwhile."""

    def txn(conn: Connection) -> None:
        n = conn.execute(_INFLIGHT, {"cid": commit_id, "now": now_us()}).rowcount
        if n != 1:
            raise CommitError(f"commit {commit_id} was aborted before it started writing")

    db.write(txn, single=True)


def heartbeat(db: Db, commit_id: int) -> bool:
    """Refresh a commit's heartbeat; False once it is no longer open."""

    def txn(conn: Connection) -> bool:
        return bool(conn.execute(_BEAT, {"cid": commit_id, "now": now_us()}).rowcount)

    return db.write(txn, single=True)


def abort(db: Db, commit_id: int) -> bool:
    """Set an open commit ABORTED; True when it is ABORTED now (False: it completed,
    e.g. its publish reached the catalog before the connection dropped)."""

    def txn(conn: Connection) -> bool:
        _abort(conn, commit_id, now_us())
        state = conn.execute(select(commits.c.state).where(commits.c.id == commit_id)).scalar()
        return bool(state == CommitState.ABORTED.value)

    return db.write(txn)


def failed_commits(db: Db, table_id: int, stale_after_s: float) -> list[int]:
    """Abort stale open commits; return aborted commits whose files are not yet removed."""

    def txn(conn: Connection) -> list[int]:
        return _settle_writers(conn, table_id, stale_after_s, now_us())[1]

    return db.write(txn)


def mark_cleaned(db: Db, commit_ids: Sequence[int]) -> None:
    """Record that the files of these aborted commits are gone."""
    if not commit_ids:
        return
    db.write(
        lambda conn: conn.execute(
            update(commits).where(commits.c.id.in_(list(commit_ids))).values(files_cleaned=1)
        )
    )


def history(db: Db, name: str) -> list[Commit]:
    """Every commit of the table (oldest first) with the segments it added and removed.
    Raises TableNotFoundError."""

    def txn(conn: Connection) -> list[Commit]:
        rec = read_table(conn, name)
        added: dict[int, list[str]] = {}
        removed: dict[int, list[str]] = {}
        for sid, cid, rcid in conn.execute(
            select(segments.c.segment_id, segments.c.commit_id, segments.c.removed_commit)
            .where(segments.c.table_id == rec.id)
            .order_by(segments.c.pk)
        ):
            added.setdefault(cid, []).append(sid)
            if rcid is not None:
                removed.setdefault(rcid, []).append(sid)
        return [
            commit_of(r, name, tuple(added.get(r.id, ())), tuple(removed.get(r.id, ())))
            for r in conn.execute(
                select(commits).where(commits.c.table_id == rec.id).order_by(commits.c.id)
            )
        ]

    return db.read(txn)
